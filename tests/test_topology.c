/* Thread placement on big.LITTLE (src/sys/topology.c) on fake sysfs trees of real phones, built
 * from their published cluster layouts and maximum frequencies (capacities as the kernel derives
 * them: capacity-dmips-mhz x max frequency, scaled to 1024):
 *   SM8750 (Snapdragon 8 Elite)  6 x Oryon 3.53 GHz + 2 x Oryon 4.32 GHz
 *   SM8550 (Snapdragon 8 Gen 2)  3 x A510 2.02 + 4 x A715/A710 2.80 + 1 x X3 3.19 GHz
 *   Dimensity 9400               4 x A720 2.40 + 3 x X4 3.30 + 1 x X925 3.63 GHz
 * and on this machine's own /sys (homogeneous: every CPU, no pinning, as before). */
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/kt.h"
#include "sys/threadpool.h"
#include "sys/topology.h"

static char g_root[256];

static void put(const char *path, long v) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fprintf(f, "%ld\n", v);
    fclose(f);
}

/* a tree of n cpus; freq[i] kHz (0: no cpufreq), cap[i] (0: no cpu_capacity) */
static const char *tree(const char *name, int n, const long *freq, const long *cap) {
    static char dir[512];
    char p[700];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    mkdir(dir, 0755);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/cpu%d", dir, i);
        mkdir(p, 0755);
        if (cap && cap[i]) { snprintf(p, sizeof p, "%s/cpu%d/cpu_capacity", dir, i); put(p, cap[i]); }
        if (freq && freq[i]) {
            snprintf(p, sizeof p, "%s/cpu%d/cpufreq", dir, i);
            mkdir(p, 0755);
            snprintf(p, sizeof p, "%s/cpu%d/cpufreq/cpuinfo_max_freq", dir, i);
            put(p, freq[i]);
        }
    }
    /* files beside the cpus, as in the real folder */
    snprintf(p, sizeof p, "%s/cpufreq", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/online", dir);
    put(p, 0);
    return dir;
}

/* plan for a tree; checks threads, pinning and the fast set (a string like "3-7") */
static void expect(const char *label, const char *dir, const unsigned char *allowed, int threads, int pin,
                   const char *fast, kz_topo_src src) {
    kz_topology t;
    kz_thread_plan p;
    kz_topology_read(dir, &t);
    kz_topology_plan(&t, allowed, &p);
    char line[256], want[64];
    kz_thread_plan_describe(&t, &p, line, sizeof line);
    printf("  %-28s %s\n", label, line);
    snprintf(want, sizeof want, "fast %s;", fast);
    CHECKF(strstr(line, want) != NULL, "%s: %s, want %s", label, line, want);
    CHECKF(p.n_threads == threads, "%s: %d threads, want %d", label, p.n_threads, threads);
    CHECKF(p.pin == pin, "%s: pin %d, want %d", label, p.pin, pin);
    CHECKF(t.src == src, "%s: source %d, want %d", label, (int)t.src, (int)src);
    CHECK(p.n_threads <= p.n_fast || p.n_fast == 0); /* never more workers than fast cores */
}

int main(void) {
    /* the overrides, in a child each, before this process computes its own plan (once) */
    struct { const char *k, *v; int want_threads, want_pin_off; } ov[] = { { "KZ_THREADS", "3", 3, 0 }, { "KZ_PIN", "0", 0, 1 } };
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setenv(ov[i].k, ov[i].v, 1);
            const kz_thread_plan *pp = kz_thread_plan_get();
            int ok = ov[i].want_threads ? pp->n_threads == ov[i].want_threads && kz_default_threads() == ov[i].want_threads
                                        : pp->pin == 0 && kz_topology_pin_self() == 0;
            _exit(ok ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s=%s not honoured", ov[i].k, ov[i].v);
    }

    snprintf(g_root, sizeof g_root, "/tmp/kz_test_topology_%d", (int)getpid());
    mkdir(g_root, 0755);

    const long f8750[8] = { 3532800, 3532800, 3532800, 3532800, 3532800, 3532800, 4320000, 4320000 };
    const long c8750[8] = { 837, 837, 837, 837, 837, 837, 1024, 1024 };
    const long f8550[8] = { 2016000, 2016000, 2016000, 2803200, 2803200, 2803200, 2803200, 3187200 };
    const long c8550[8] = { 350, 350, 350, 852, 852, 852, 852, 1024 };
    const long f9400[8] = { 2400000, 2400000, 2400000, 2400000, 3300000, 3300000, 3300000, 3626000 };
    const long c9400[8] = { 512, 512, 512, 512, 930, 930, 930, 1024 };
    const long flat[4] = { 2400000, 2400000, 2400000, 2400000 };

    printf("fake sysfs trees:\n");
    /* 8 Elite: every core is fast (3.53 / 4.32 = 82 %): 7 workers, one core left to the app */
    expect("SM8750 2+6 (freq)", tree("sm8750f", 8, f8750, NULL), NULL, 7, 0, "0-7", KZ_TOPO_SRC_MAXFREQ);
    expect("SM8750 2+6 (capacity)", tree("sm8750c", 8, f8750, c8750), NULL, 7, 0, "0-7", KZ_TOPO_SRC_CAPACITY);
    /* 8 Gen 2: the X3 and the four A715/A710, pinned off the A510s */
    expect("SM8550 1+4+3 (freq)", tree("sm8550f", 8, f8550, NULL), NULL, 5, 1, "3-7", KZ_TOPO_SRC_MAXFREQ);
    expect("SM8550 1+4+3 (capacity)", tree("sm8550c", 8, f8550, c8550), NULL, 5, 1, "3-7", KZ_TOPO_SRC_CAPACITY);
    /* Dimensity 9400: X925 + 3 X4; the A720s (66 %) are left out */
    expect("Dimensity 9400 1+3+4 (freq)", tree("d9400f", 8, f9400, NULL), NULL, 4, 1, "4-7", KZ_TOPO_SRC_MAXFREQ);
    expect("Dimensity 9400 (capacity)", tree("d9400c", 8, f9400, c9400), NULL, 4, 1, "4-7", KZ_TOPO_SRC_CAPACITY);
    /* homogeneous, no speed data, a partial one: all CPUs, no pinning (the old behaviour) */
    expect("4 equal cores", tree("flat", 4, flat, NULL), NULL, 4, 0, "0-3", KZ_TOPO_SRC_MAXFREQ);
    expect("no cpufreq, no capacity", tree("none", 6, NULL, NULL), NULL, 6, 0, "0-5", KZ_TOPO_SRC_NONE);
    const long partial[4] = { 2000000, 0, 3000000, 3000000 };
    expect("cpufreq on some cpus only", tree("partial", 4, partial, NULL), NULL, 4, 0, "0-3", KZ_TOPO_SRC_NONE);
    /* an affinity mask (the app restricted us): the rule applies to the allowed CPUs only */
    const unsigned char no_prime[8] = { 1, 1, 1, 1, 1, 1, 1, 0 };
    expect("SM8550, cpu7 not allowed", tree("sm8550m", 8, f8550, c8550), no_prime, 4, 1, "3-6", KZ_TOPO_SRC_CAPACITY);
    const unsigned char littles[8] = { 1, 1, 1, 1, 0, 0, 0, 0 };
    /* only equal cores allowed: homogeneous among them, all used */
    expect("D9400, A720s only allowed", tree("d9400m", 8, f9400, NULL), littles, 4, 0, "0-3", KZ_TOPO_SRC_MAXFREQ);
    {
        kz_topology t;
        CHECK(kz_topology_read("/nonexistent/cpu", &t) == 0 && t.n_cpus == 0);
    }

    /* this machine: the real tree and the process-wide plan */
    kz_topology t;
    kz_thread_plan p;
    int n = kz_topology_read("/sys/devices/system/cpu", &t);
    kz_topology_plan(&t, NULL, &p);
    char line[256];
    kz_thread_plan_describe(&t, &p, line, sizeof line);
    printf("this machine: %s; kz_default_threads() = %d, online %d\n", n ? line : "no /sys cpu tree", kz_default_threads(),
           kz_num_cpus());
    if (n > 0 && t.src != KZ_TOPO_SRC_NONE) {
        long lo = t.speed[0], hi = t.speed[0];
        for (int i = 0; i < t.n_cpus; i++) {
            if (t.speed[i] < lo) lo = t.speed[i];
            if (t.speed[i] > hi) hi = t.speed[i];
        }
        if (lo == hi) { /* homogeneous: unchanged behaviour, all CPUs, nothing pinned */
            CHECK(kz_default_threads() == kz_num_cpus());
            CHECK(kz_thread_plan_get()->pin == 0);
            CHECK(kz_topology_pin_self() == 0);
        }
    } else {
        CHECK(kz_default_threads() == kz_num_cpus());
    }

    {   /* a pool of the default size starts and runs on this machine */
        kz_pool *pool = kz_pool_new(0);
        CHECK(pool && kz_pool_size(pool) == kz_default_threads());
        kz_pool_free(pool);
    }

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
    KT_END();
}
