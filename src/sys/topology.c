/* CPU topology and the default thread plan (see topology.h for the rule). */
#include "sys/topology.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "sys/threadpool.h"

/* a positive decimal read from a one-line sysfs file; 0 when missing or malformed */
static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64];
    long v = 0;
    if (fgets(buf, sizeof buf, f)) {
        char *end;
        v = strtol(buf, &end, 10);
        if (end == buf || v < 0) v = 0;
    }
    fclose(f);
    return v;
}

int kz_topology_read(const char *root, kz_topology *t) {
    memset(t, 0, sizeof *t);
    long capv[KZ_TOPO_MAX_CPUS], freqv[KZ_TOPO_MAX_CPUS];
    int n = 0, all_cap = 1, all_freq = 1;
    char path[512];
    for (int i = 0; i < KZ_TOPO_MAX_CPUS; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/cpu%d", root, i);
        if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) break;
        snprintf(path, sizeof path, "%s/cpu%d/cpu_capacity", root, i);
        capv[i] = read_long(path);
        snprintf(path, sizeof path, "%s/cpu%d/cpufreq/cpuinfo_max_freq", root, i);
        freqv[i] = read_long(path);
        if (!capv[i]) all_cap = 0;
        if (!freqv[i]) all_freq = 0;
        n = i + 1;
    }
    t->n_cpus = n;
    if (n == 0) return 0;
    t->src = all_cap ? KZ_TOPO_SRC_CAPACITY : all_freq ? KZ_TOPO_SRC_MAXFREQ : KZ_TOPO_SRC_NONE;
    for (int i = 0; i < n; i++) t->speed[i] = t->src == KZ_TOPO_SRC_CAPACITY ? capv[i] : t->src == KZ_TOPO_SRC_MAXFREQ ? freqv[i] : 0;
    return n;
}

void kz_topology_plan(const kz_topology *t, const unsigned char *allowed, kz_thread_plan *out) {
    memset(out, 0, sizeof *out);
    int n_allowed = 0;
    long top = 0, low = 0;
    for (int i = 0; i < t->n_cpus; i++) {
        if (allowed && !allowed[i]) continue;
        n_allowed++;
        if (t->speed[i] > top) top = t->speed[i];
        if (!low || t->speed[i] < low) low = t->speed[i];
    }
    if (n_allowed == 0) { out->n_threads = 1; return; }
    if (t->src == KZ_TOPO_SRC_NONE || top == low) { /* homogeneous or unknown: as before */
        for (int i = 0; i < t->n_cpus; i++) out->cpus[i] = !allowed || allowed[i];
        out->n_fast = out->n_threads = n_allowed;
        return;
    }
    for (int i = 0; i < t->n_cpus; i++) {
        if (allowed && !allowed[i]) continue;
        if (t->speed[i] * 100 >= top * KZ_TOPO_FAST_PCT) {
            out->cpus[i] = 1;
            out->n_fast++;
        }
    }
    /* every allowed core fast (one tier of a tri-cluster, or 8 Elite's 2 + 6): leave one to the
     * app's own threads, a preempted worker stalls every dispatch */
    out->n_threads = out->n_fast == n_allowed && n_allowed > 2 ? n_allowed - 1 : out->n_fast;
    out->pin = out->n_fast < n_allowed;
}

int kz_thread_plan_describe(const kz_topology *t, const kz_thread_plan *p, char *buf, size_t len) {
    static const char *const src[] = { "no speed data", "cpu_capacity", "cpuinfo_max_freq" };
    char fast[256];
    size_t o = 0;
    fast[0] = 0;
    for (int i = 0; i < t->n_cpus && o + 12 < sizeof fast; i++) {
        if (!p->cpus[i]) continue;
        int j = i;
        while (j + 1 < t->n_cpus && p->cpus[j + 1]) j++;
        o += (size_t)snprintf(fast + o, sizeof fast - o, o ? ",%d" : "%d", i);
        if (j > i) o += (size_t)snprintf(fast + o, sizeof fast - o, "-%d", j);
        i = j;
    }
    return snprintf(buf, len, "%d cpus (%s): fast %s; %d threads%s", t->n_cpus, src[t->src], fast, p->n_threads,
                    p->pin ? ", pinned" : "");
}

static pthread_once_t plan_once = PTHREAD_ONCE_INIT;
static kz_thread_plan plan; /* written once under pthread_once, read-only afterwards */

static void plan_init(void) {
    kz_topology *t = malloc(sizeof *t);
    if (!t) { plan.n_threads = kz_num_cpus(); return; }
    kz_topology_read("/sys/devices/system/cpu", t);
    unsigned char allowed[KZ_TOPO_MAX_CPUS];
    int have_mask = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    CPU_ZERO(&set);
    if (t->n_cpus > 0 && sched_getaffinity(0, sizeof set, &set) == 0) {
        have_mask = 1;
        for (int i = 0; i < t->n_cpus; i++) allowed[i] = i < CPU_SETSIZE && CPU_ISSET(i, &set);
    }
#endif
    if (t->n_cpus > 0) kz_topology_plan(t, have_mask ? allowed : NULL, &plan);
    else plan.n_threads = kz_num_cpus(); /* no sysfs (a sandbox): the old default */
    free(t);
    const char *e = getenv("KZ_THREADS");
    if (e && atoi(e) > 0) plan.n_threads = atoi(e);
    e = getenv("KZ_PIN");
    if (e && !strcmp(e, "0")) plan.pin = 0;
    if (plan.n_threads < 1) plan.n_threads = 1;
}

const kz_thread_plan *kz_thread_plan_get(void) {
    pthread_once(&plan_once, plan_init);
    return &plan;
}

int kz_default_threads(void) { return kz_thread_plan_get()->n_threads; }

int kz_topology_pin_self(void) {
    const kz_thread_plan *p = kz_thread_plan_get();
    if (!p->pin) return 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < KZ_TOPO_MAX_CPUS && i < CPU_SETSIZE; i++)
        if (p->cpus[i]) CPU_SET(i, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 1 : -1; /* 0: the calling thread */
#else
    return -1;
#endif
}
