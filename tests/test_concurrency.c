/* Concurrency: contexts on one shared model are independent, and kz_cancel is prompt.
 *   1. two contexts on one model (qwen35-tiny, qwen3-tiny) generating at the same time from two
 *      threads (one greedy, one sampled, different thread counts; then both on the same prompt)
 *      give exactly the tokens each gives alone; several rounds reuse the contexts
 *   2. kz_cancel from another thread at several moments of a decode step stops kz_generate
 *      within one decode step (CPU time of the generating thread, on a model whose steps take
 *      tens of ms); during prefill within one prefill chunk (the unit kz_generate checks at);
 *      the context is reusable afterwards (same greedy output). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kazeia.h"
#include "api/api.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "model/types.h"

#define MAXT 1024

/* sanitizer builds: a smaller slow model; under TSan (run by tests/robustness_ci.sh for the data
 * race check) CPU-time costs are distorted by the race detector, so only the count bounds apply */
#if defined(__SANITIZE_THREAD__)
#define KT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KT_TSAN 1
#endif
#endif
#ifndef KT_TSAN
#define KT_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__) || KT_TSAN
#define KT_SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_SLOW_BUILD 1
#endif
#endif
#ifndef KT_SLOW_BUILD
#define KT_SLOW_BUILD 0
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static kz_model *load_new(const kz_mkmodel_cfg *c, const char *path) {
    char err[512];
    if (kz_mkmodel_write(c, path, err, sizeof err)) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load: %s\n", err);
    unlink(path); /* the mapping stays valid */
    return m;
}

static kz_context *new_ctx(kz_model *m, int n_threads, float temp, uint64_t seed) {
    kz_context_params p = kz_context_default_params();
    p.n_ctx = 256;
    p.n_batch = 16;
    p.n_threads = n_threads;
    p.temperature = temp;
    p.seed = seed;
    p.think = 0;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    if (!c) fprintf(stderr, "kz_context_new: %s\n", err);
    return c;
}

/* ---------------- 1. two contexts, two threads ---------------- */

typedef struct {
    kz_context *c;
    const char *sys, *user;
    int max;
    pthread_barrier_t *bar;
    int rc, n;
    int32_t hist[MAXT];
    char text[4096];
    size_t len;
} job;

static int text_cb(const char *p, size_t n, void *ud) {
    job *j = ud;
    if (j->len + n < sizeof j->text) { memcpy(j->text + j->len, p, n); j->len += n; }
    return 0;
}

static void run_job(job *j) {
    j->len = 0;
    kz_stats st;
    j->rc = kz_generate(j->c, j->sys, j->user, j->max, text_cb, j, &st);
    const int32_t *h = kz_context_history(j->c, &j->n);
    memcpy(j->hist, h, (size_t)j->n * sizeof *h);
}

static void *job_thread(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    run_job(j);
    return NULL;
}

static int same(const job *a, const job *b) {
    return a->rc == 0 && b->rc == 0 && a->n == b->n && !memcmp(a->hist, b->hist, (size_t)a->n * 4) &&
           a->len == b->len && !memcmp(a->text, b->text, a->len);
}

static void test_two_contexts(kz_model *m, const char *arch) {
    static job ref[2], con[2];
    const char *sys[2] = {"Be terse.", NULL}, *user[2] = {"Sea haiku.", "Count to ten in French, slowly."};
    int nth[2] = {1, 2};
    float temp[2] = {0.0f, 0.9f};
    for (int k = 0; k < 2; k++) { /* alone, each in a fresh context */
        memset(&ref[k], 0, sizeof ref[k]);
        ref[k].c = new_ctx(m, nth[k], temp[k], 42 + (uint64_t)k);
        ref[k].sys = sys[k]; ref[k].user = user[k]; ref[k].max = 24;
        if (!ref[k].c) { CHECK(0); return; }
        run_job(&ref[k]);
        CHECK(ref[k].rc == 0 && ref[k].n > 30);
    }
    CHECKF(ref[0].n != ref[1].n || memcmp(ref[0].hist, ref[1].hist, (size_t)ref[0].n * 4),
           "%s: the two references are identical (test could not see a mix-up)", arch);
    kz_context *c[2] = {new_ctx(m, nth[0], temp[0], 42), new_ctx(m, nth[1], temp[1], 43)};
    CHECK(c[0] && c[1]);
    if (!c[0] || !c[1]) return;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        /* rounds 0-1: the two jobs as alone; round 2: prompts swapped between the contexts */
        pthread_t th[2];
        for (int k = 0; k < 2; k++) {
            int src = round == 2 ? 1 - k : k;
            memset(&con[k], 0, sizeof con[k]);
            con[k].c = c[k];
            con[k].sys = sys[src]; con[k].user = user[src]; con[k].max = 24;
            con[k].bar = &bar;
            pthread_create(&th[k], NULL, job_thread, &con[k]);
        }
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        if (round < 2) {
            for (int k = 0; k < 2; k++)
                if (!same(&con[k], &ref[k])) { bad++; fprintf(stderr, "%s round %d: context %d differs from alone\n", arch, round, k); }
        } else {
            /* swapped prompts: greedy on job 1's prompt / sampled on job 0's differ from the refs
             * in settings, so compare against fresh single-threaded runs of the same settings */
            for (int k = 0; k < 2; k++) {
                job solo;
                memset(&solo, 0, sizeof solo);
                solo.c = new_ctx(m, nth[k], temp[k], 42 + (uint64_t)k);
                solo.sys = con[k].sys; solo.user = con[k].user; solo.max = 24;
                run_job(&solo);
                if (!same(&con[k], &solo)) { bad++; fprintf(stderr, "%s swapped: context %d differs\n", arch, k); }
                kz_context_free(solo.c);
            }
        }
    }
    CHECKF(bad == 0, "%s: %d concurrent runs differ from the same run alone", arch, bad);
    printf("%s: 2 contexts x 3 rounds concurrent == alone (%d and %d tokens), %.1f s CPU so far\n", arch, ref[0].n, ref[1].n,
           (double)clock() / CLOCKS_PER_SEC);
    pthread_barrier_destroy(&bar);
    kz_context_free(c[0]);
    kz_context_free(c[1]);
    kz_context_free(ref[0].c);
    kz_context_free(ref[1].c);
}

/* ---------------- 2. cancel latency ----------------
 * Measured in CPU time of the generating thread (the context has one thread, so all its compute
 * runs there): wall time on a loaded CI machine measures the scheduler, not the engine. The
 * canceller reads the generating thread's CPU clock when it cancels. */

static double cpu_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

typedef struct {
    kz_context *c;
    clockid_t gen_clock;    /* CPU clock of the generating thread */
    atomic_int go;          /* set by the callback when the canceller may start its countdown */
    double delay_cpu;       /* generating-thread CPU ms to let pass before cancelling */
    double cpu_cancel, wall_cancel;
    int pieces;
    double cb_cpu[256];     /* generating-thread CPU time and n_past at each piece */
    int cb_past[256];
} cancel_job;

#define GO_AT 4 /* pieces before the countdown starts: a few steps of this run to compare with */

static int cancel_cb(const char *p, size_t n, void *ud) {
    (void)p; (void)n;
    cancel_job *j = ud;
    if (j->pieces < 256) {
        j->cb_cpu[j->pieces] = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
        j->cb_past[j->pieces] = kz_context_n_past(j->c);
    }
    if (++j->pieces == GO_AT) atomic_store(&j->go, 1);
    return 0;
}

/* longest one-token step (piece to piece, n_past + 1) of this run before the cancel; 0 if none */
static double run_step(const cancel_job *j) {
    double m = 0;
    for (int i = 1; i < j->pieces && i < 256; i++)
        if (j->cb_cpu[i] < j->cpu_cancel && j->cb_past[i] == j->cb_past[i - 1] + 1 && j->cb_cpu[i] - j->cb_cpu[i - 1] > m)
            m = j->cb_cpu[i] - j->cb_cpu[i - 1];
    return m;
}

static void *canceller(void *arg) {
    cancel_job *j = arg;
    while (!atomic_load(&j->go)) usleep(50);
    double t0 = cpu_ms(j->gen_clock);
    while (cpu_ms(j->gen_clock) - t0 < j->delay_cpu) usleep(100);
    j->cpu_cancel = cpu_ms(j->gen_clock);
    j->wall_cancel = now_ms();
    kz_cancel(j->c);
    return NULL;
}

/* generating-thread CPU ms of one kz_generate call */
static double gen_cpu(kz_context *c, const char *user, int n, kz_stats *st) {
    double t0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    int r = kz_generate(c, NULL, user, n, NULL, NULL, st);
    CHECK(r == 0);
    return cpu_ms(CLOCK_THREAD_CPUTIME_ID) - t0;
}

static void test_cancel_latency(void) {
    kz_mkmodel_cfg cfg;
    kz_mkmodel_preset("qwen3-tiny", &cfg);
    /* big enough that one decode step is several ms of CPU on one thread (sanitizer builds
     * are ~5x slower, qemu 10-50x: a quarter of the size there; under qemu the full size made
     * a decode step 0.6 s and the test 13 minutes of CI on cortex-a53) */
    const int small = KT_SLOW_BUILD || getenv("KZ_TEST_QEMU") != NULL;
    cfg.n_layer = small ? 4 : 12; cfg.n_embd = small ? 512 : 1024; cfg.n_ff = 4 * cfg.n_embd; cfg.n_head = 8; cfg.n_head_kv = 4;
    cfg.head_dim = 128; cfg.n_rot = 128; cfg.wtype = KZ_T_Q4_0; cfg.n_threads = 2; cfg.seed = 3;
    char path[128];
    snprintf(path, sizeof path, "/tmp/kz_test_conc_%d_slow.gguf", (int)getpid());
    kz_model *m = load_new(&cfg, path);
    CHECK(m != NULL);
    if (!m) return;
    kz_context_params p = kz_context_default_params();
    p.n_ctx = 512; p.n_batch = 16; p.n_threads = 1; p.think = 0;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (!c) { kz_model_free(m); return; }
    const char *user = "Tell me about the sea.";
    static int32_t ref[MAXT], h[MAXT];
    int nref, nh;
    kz_stats st;
    /* costs: step = (36 tokens - 4 tokens) / 32, same prompt, the least of 3 runs each (the
     * prompt's CPU time swings with what the other core does: differences of single runs of a
     * few steps could even come out negative); chunk = prefill / chunks */
    (void)gen_cpu(c, user, 12, &st); /* warm-up: first-touch page faults count as CPU time */
    double c4 = 1e300, c36 = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        double a = gen_cpu(c, user, 4, &st), b = gen_cpu(c, user, 36, &st);
        CHECK(st.n_gen == 36);
        if (a < c4) c4 = a;
        if (b < c36) c36 = b;
    }
    (void)gen_cpu(c, user, 12, &st); /* the reference below: 12 tokens */
    CHECK(st.n_gen == 12);
    const int32_t *hp = kz_context_history(c, &nref);
    memcpy(ref, hp, (size_t)nref * 4);
    double step = (c36 - c4) / 32;
    /* prefill: a long prompt in 16-token chunks; one chunk = its prefill CPU per 16 tokens */
    char longp[96]; /* ~90 tokens with the byte-level vocab: 6 chunks */
    size_t o = 0;
    while (o + 24 < sizeof longp - 1) o += (size_t)snprintf(longp + o, sizeof longp - o, "word%zu and more, ", o);
    longp[o] = 0;
    double cl = gen_cpu(c, longp, 1, &st);
    double chunk = cl / ((double)st.n_prompt / p.n_batch);
    printf("slow model (CPU time): decode step %.1f ms, prefill chunk (16 tokens) %.1f ms\n", step, chunk);
    CHECK(step > 1.0 && chunk > 1.0 && st.n_prompt > 64);

    /* decode: cancel at 0, 1/4, 1/2, 3/4, 0.95 of a step after the 4th piece */
    pthread_t self = pthread_self();
    double worst = 0, worst_wall = 0;
    int fails = 0;
    const double frac[5] = {0.0, 0.25, 0.5, 0.75, 0.95};
    for (int t = 0; t < 5; t++) {
        cancel_job j;
        memset(&j, 0, sizeof j);
        j.c = c;
        pthread_getcpuclockid(self, &j.gen_clock);
        atomic_init(&j.go, 0);
        j.delay_cpu = frac[t] * step;
        pthread_t th;
        pthread_create(&th, NULL, canceller, &j);
        int r = kz_generate(c, NULL, user, 200, cancel_cb, &j, &st);
        double cpu_ret = cpu_ms(CLOCK_THREAD_CPUTIME_ID), wall_ret = now_ms();
        if (!atomic_load(&j.go)) atomic_store(&j.go, 1); /* generation ended early: release */
        pthread_join(th, NULL);
        double lat = cpu_ret - j.cpu_cancel;
        CHECKF(r == 0 && st.stop == KZ_STOP_CANCELLED, "decode cancel %d: r %d stop %d", t, r, (int)st.stop);
        /* at most the work in flight finishes: one sample + piece, or one eval */
        int late_cb = 0;
        for (int i = 0; i < j.pieces && i < 256; i++) late_cb += j.cb_cpu[i] > j.cpu_cancel;
        int past_last = j.pieces ? j.cb_past[(j.pieces < 256 ? j.pieces : 256) - 1] : 0;
        CHECKF(late_cb <= 1 && kz_context_n_past(c) - past_last <= 1,
               "after cancel: %d pieces, %d evals", late_cb, kz_context_n_past(c) - past_last);
        /* time bound: one step, compared with this run's own steps (the machine's speed drifts
         * between runs under load), plus the sampling / callback work */
        double rs = run_step(&j);
        CHECK(rs > 0);
        if (!KT_TSAN && !(lat >= 0 && lat < rs * 1.2 + 1.0)) {
            fails++;
            fprintf(stderr, "cancel at %.2f step: %.1f ms CPU (steps of this run up to %.1f)\n", frac[t], lat, rs);
        }
        if (rs > 0 && lat / rs > worst) worst = lat / rs;
        if ((wall_ret - j.wall_cancel) / step > worst_wall) worst_wall = (wall_ret - j.wall_cancel) / step;
    }
    CHECKF(fails == 0, "%d of 5 decode cancels took longer than one step", fails);
    printf("decode cancel latency: worst %.2f decode steps of CPU (%.2f in wall time)\n", worst, worst_wall);
    if (!KT_TSAN) CHECK(worst > 0.3); /* a cancel right after a piece waits for most of a step: the measure works */

    /* prefill: cancel in the middle of the third chunk */
    kz_context_reset(c);
    cancel_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    pthread_getcpuclockid(self, &j.gen_clock);
    atomic_init(&j.go, 1); /* start counting right away */
    j.delay_cpu = 2.5 * chunk;
    pthread_t th;
    pthread_create(&th, NULL, canceller, &j);
    int r = kz_generate(c, NULL, longp, 4, NULL, NULL, &st);
    double lat = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - j.cpu_cancel;
    pthread_join(th, NULL);
    CHECKF(r == 0 && st.stop == KZ_STOP_CANCELLED && st.n_gen == 0, "prefill cancel: r %d stop %d gen %d", r, (int)st.stop, st.n_gen);
    CHECKF(KT_TSAN || (lat >= 0 && lat < chunk * 1.2 + 1.0), "prefill cancel took %.1f ms CPU, a chunk is %.1f ms", lat, chunk);
    printf("prefill cancel after %d tokens: %.1f ms CPU (%.2f chunks)\n", st.n_prompt, lat, lat / chunk);

    /* reusable: the same greedy tokens as before any cancel */
    CHECK(kz_generate(c, NULL, user, 12, NULL, NULL, &st) == 0);
    hp = kz_context_history(c, &nh);
    memcpy(h, hp, (size_t)nh * 4);
    CHECKF(nh == nref && !memcmp(h, ref, (size_t)nh * 4), "context not reusable after cancels");
    kz_context_free(c);
    kz_model_free(m);
}

int main(void) {
    const char *presets[2] = {"qwen35-tiny", "qwen3-tiny"};
    for (int k = 0; k < 2; k++) {
        kz_mkmodel_cfg cfg;
        kz_mkmodel_preset(presets[k], &cfg);
        cfg.wtype = KZ_T_F32;
        cfg.n_threads = 1;
        cfg.n_layer = 4; /* qwen35: 3 GDN + 1 attention */
        char path[128];
        snprintf(path, sizeof path, "/tmp/kz_test_conc_%d_%s.gguf", (int)getpid(), presets[k]);
        kz_model *m = load_new(&cfg, path);
        CHECK(m != NULL);
        if (!m) continue;
        test_two_contexts(m, kz_model_arch(m));
        kz_model_free(m);
    }
    test_cancel_latency();
    KT_END();
}
