/* Memory read bandwidth sampler (kazeia bench, bench/compare_llamacpp.py through ctypes): a
 * buffer much larger than the LLC, filled once, and a pool of T threads that sum chunks of it
 * (taken from a shared counter) with wide integer vector loads; one timed pass = one sample.
 * The sum is checked against the value the fill implies, so the compiler cannot drop a load. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "sys/cpu.h"
#include "cli/bench/membw.h"
#include "sys/threadpool.h"
#include "sys/clock.h"

/* GNU vector extension: 32-byte lanes compile to the widest loads the target flags allow. The
 * load width changes what one core reads (~20 % between widths on the x86 hosts measured, see
 * docs/PERFORMANCE.md), so x86-64 also builds AVX2 and 64-byte AVX-512 loops; the fastest wins. */
typedef uint64_t bw_vec __attribute__((vector_size(32)));
typedef uint64_t bw_vec64 __attribute__((vector_size(64)));
/* the vectors never cross a call (helpers inlined or taking pointers) */
#pragma GCC diagnostic ignored "-Wpsabi"

/* Threads take 1 MiB chunks from a shared counter, as the engine's matmuls share their rows:
 * with fixed halves a pass would last as long as the slower thread's half. */
#define BW_CHUNK_UNITS 4096 /* 1 MiB */

typedef struct {
    uint64_t *buf;
    size_t n64;        /* uint64 elements, multiple of 32 * nth */
    int fill;          /* 1: write the pattern, 0: read + sum */
    int method;        /* BW_* read build */
    kz_dyn next;       /* next chunk of a read pass */
    uint64_t sums[512];
} bw_task;

/* the sum of nv vectors of type VT (NL uint64 lanes): 4 chains, so loads stay in flight */
#define BW_SUM_BODY(VT, NL)                                \
    VT a0 = {0}, a1 = a0, a2 = a0, a3 = a0;                \
    for (size_t i = 0; i < nv; i += 4) {                   \
        a0 += v[i];                                        \
        a1 += v[i + 1];                                    \
        a2 += v[i + 2];                                    \
        a3 += v[i + 3];                                    \
    }                                                      \
    const VT a = a0 + a1 + a2 + a3;                        \
    uint64_t s = 0;                                        \
    for (int l = 0; l < (NL); l++) s += a[l];              \
    return s;
static uint64_t bw_sum(const bw_vec *v, size_t nv) { BW_SUM_BODY(bw_vec, 4) }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static uint64_t bw_sum_avx2(const bw_vec *v, size_t nv) { BW_SUM_BODY(bw_vec, 4) }
/* 64-byte lanes: one load per cache line */
__attribute__((target("avx512f"))) static uint64_t bw_sum_avx512(const bw_vec64 *v, size_t nv) {
    BW_SUM_BODY(bw_vec64, 8)
}
#endif

enum { BW_GENERIC, BW_AVX2, BW_AVX512, BW_N };
static const char *const bw_names[BW_N] = {"generic", "avx2", "avx512"};
static int bw_method_ok(int m) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (m == BW_AVX2) return kz_isa_available(KZ_ISA_AVX2);
    if (m == BW_AVX512) return kz_cpu_features_get()->avx512f;
#endif
    return m == BW_GENERIC;
}

/* the sum of cnt uint64 (a multiple of 32) from p with the read build method */
static uint64_t bw_sum_with(int method, const uint64_t *p, size_t cnt) {
    const bw_vec *v = (const bw_vec *)(const void *)p;
#if defined(__x86_64__) && defined(__GNUC__)
    if (method == BW_AVX512) return bw_sum_avx512((const bw_vec64 *)(const void *)p, cnt / 8);
    if (method == BW_AVX2) return bw_sum_avx2(v, cnt / 4);
#else
    (void)method;
#endif
    return bw_sum(v, cnt / 4);
}

static void bw_worker(void *arg, int ith, int nth) {
    bw_task *t = arg;
    const long units = (long)(t->n64 / 32); /* 256 bytes: 4 64-byte vectors */
    if (t->fill) {
        long lo, hi;
        kz_split(units, ith, nth, &lo, &hi);
        uint64_t *p = t->buf + (size_t)lo * 32;
        const size_t cnt = (size_t)(hi - lo) * 32, base = (size_t)lo * 32;
        for (size_t i = 0; i < cnt; i++) p[i] = (uint64_t)(base + i) * 0x9E3779B97F4A7C15ull;
        return;
    }
    uint64_t s = 0;
    for (long lo; (lo = kz_dyn_take(&t->next, BW_CHUNK_UNITS)) < units;) {
        const long hi = lo + BW_CHUNK_UNITS < units ? lo + BW_CHUNK_UNITS : units;
        s += bw_sum_with(t->method, t->buf + (size_t)lo * 32, (size_t)(hi - lo) * 32);
    }
    t->sums[ith] = s;
}

struct kz_membw {
    int method;    /* the read build kept by bw_calibrate */
    void *mem;
    size_t bytes;
    uint64_t expect;
    kz_pool *pool;
    bw_task *t;
};

void kz_membw_close(kz_membw *b) {
    if (!b) return;
    kz_pool_free(b->pool);
    free(b->t);
    if (b->mem) munmap(b->mem, b->bytes);
    free(b);
}

static double bw_pass_with(kz_membw *b, int method, char *err, size_t errlen);

/* Which read build reaches the most on this machine: BW_CAL_ROUNDS rounds, each one pass of
 * every build the CPU runs, back to back (the host's bandwidth drifts between rounds, less
 * within one); a build wins on its median ratio to the first build of its round. */
#define BW_CAL_ROUNDS 3 /* the median below is of 3 */
static int bw_calibrate(kz_membw *b, char *err, size_t errlen) {
    int ms[BW_N], nm = 0;
    for (int m = 0; m < BW_N; m++)
        if (bw_method_ok(m)) ms[nm++] = m;
    b->method = ms[nm - 1];
    if (nm == 1) return 0;
    double r[BW_N][BW_CAL_ROUNDS];
    for (int k = 0; k < BW_CAL_ROUNDS; k++) {
        double g0 = 0;
        for (int i = 0; i < nm; i++) {
            const double g = bw_pass_with(b, ms[i], err, errlen);
            if (g < 0) return -1;
            if (i == 0) g0 = g;
            r[i][k] = g / g0;
        }
    }
    double best = 0;
    for (int i = 0; i < nm; i++) {
        double *v = r[i]; /* median of 3 */
        const double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
        const double med = v[2] < lo ? lo : v[2] > hi ? hi : v[2];
        if (med > best) { best = med; b->method = ms[i]; }
    }
    return 0;
}

kz_membw *kz_membw_open(int n_threads, size_t mib, char *err, size_t errlen) {
    if (n_threads > 512) n_threads = 512;
    size_t bytes = mib << 20;
    size_t unit = (size_t)256 * (size_t)n_threads;
    bytes -= bytes % unit;
    if (bytes == 0) { snprintf(err, errlen, "bandwidth buffer of %zu MiB is too small", mib); return NULL; }
    kz_membw *b = calloc(1, sizeof *b);
    if (!b) { snprintf(err, errlen, "out of memory setting up the bandwidth test"); return NULL; }
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        snprintf(err, errlen, "cannot allocate the %zu MiB bandwidth buffer: %s (lower --membw-mib)", mib,
                 strerror(errno));
        free(b);
        return NULL;
    }
    b->mem = mem;
    b->bytes = bytes;
#ifdef MADV_HUGEPAGE
    /* huge pages where offered: the roofline is the best the memory does, not a TLB-bound read
     * (the engine's repacked weights are on huge pages too) */
    madvise(mem, bytes, MADV_HUGEPAGE);
#endif
    b->pool = kz_pool_new(n_threads);
    b->t = calloc(1, sizeof *b->t);
    if (!b->pool || !b->t) {
        snprintf(err, errlen, "out of memory setting up the bandwidth test");
        kz_membw_close(b);
        return NULL;
    }
    b->t->buf = mem;
    b->t->n64 = bytes / 8;
    b->t->fill = 1; /* every thread first-touches its own slice, as the reads will */
    kz_pool_run(b->pool, bw_worker, b->t);
    b->t->fill = 0;
    /* sum_i i*K = K * n(n-1)/2 (mod 2^64) */
    uint64_t n = b->t->n64, tri = (n % 2 == 0) ? (n / 2) * (n - 1) : n * ((n - 1) / 2);
    b->expect = tri * 0x9E3779B97F4A7C15ull;
    if (bw_calibrate(b, err, errlen) != 0) {
        kz_membw_close(b);
        return NULL;
    }
    return b;
}

/* GB/s (1e9 bytes/s) of one pass; -1 if the checksum is wrong */
double kz_membw_pass(kz_membw *b, char *err, size_t errlen) { return bw_pass_with(b, b->method, err, errlen); }

const char *kz_membw_method(const kz_membw *b) { return b ? bw_names[b->method] : ""; }

static double bw_pass_with(kz_membw *b, int method, char *err, size_t errlen) {
    const int nth = kz_pool_size(b->pool);
    b->t->method = method;
    memset(b->t->sums, 0, sizeof b->t->sums);
    atomic_store_explicit(&b->t->next.next, 0, memory_order_relaxed); /* published by the dispatch */
    double t0 = (kz_now_ns() * 1e-9);
    kz_pool_run(b->pool, bw_worker, b->t);
    double dt = (kz_now_ns() * 1e-9) - t0;
    uint64_t s = 0;
    for (int i = 0; i < nth; i++) s += b->t->sums[i];
    if (s != b->expect) { snprintf(err, errlen, "bandwidth test read back a wrong checksum (memory error?)"); return -1; }
    return (double)b->bytes / (dt > 0 ? dt : 1e-9) / 1e9;
}

size_t kz_membw_bytes(const kz_membw *b) { return b ? b->bytes : 0; }
