/* Memory read bandwidth sampler (kazeia bench, bench/compare_llamacpp.py through ctypes): a
 * buffer much larger than the LLC, filled once, and a pool of T threads that sum disjoint
 * slices of it with wide integer vector loads; one timed pass = one sample. The sum is checked
 * against the value the fill implies, so the compiler cannot drop a load. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "cpu.h"
#include "membw.h"
#include "threadpool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* GNU vector extension: 32-byte lanes compile to the widest loads the target flags allow
 * (2x SSE2 on baseline x86-64, 2x NEON q registers on AArch64). On x86-64 with AVX2 an AVX2
 * build of the same loop is used: measured here, 16-byte loads leave ~20 % of the read
 * bandwidth unused (the load queue holds half as many lines in flight), and a roofline must be
 * the best the memory does. */
typedef uint64_t bw_vec __attribute__((vector_size(32)));
/* the 32-byte vector never crosses a call: the helpers are always inlined */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef struct {
    uint64_t *buf;
    size_t n64;        /* uint64 elements, multiple of 16 * nth */
    int fill;          /* 1: write the pattern, 0: read + sum */
    int avx2;          /* read with the AVX2 build */
    uint64_t sums[512];
} bw_task;

static inline __attribute__((always_inline)) uint64_t bw_sum_body(const bw_vec *v, size_t nv) {
    bw_vec a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0; /* 4 chains: loads stay in flight */
    for (size_t i = 0; i < nv; i += 4) {
        a0 += v[i];
        a1 += v[i + 1];
        a2 += v[i + 2];
        a3 += v[i + 3];
    }
    bw_vec a = a0 + a1 + a2 + a3;
    return a[0] + a[1] + a[2] + a[3];
}
static uint64_t bw_sum(const bw_vec *v, size_t nv) { return bw_sum_body(v, nv); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static uint64_t bw_sum_avx2(const bw_vec *v, size_t nv) { return bw_sum_body(v, nv); }
#endif

static void bw_worker(void *arg, int ith, int nth) {
    bw_task *t = arg;
    long lo, hi;
    kz_split((long)(t->n64 / 16), ith, nth, &lo, &hi); /* in units of 16 uint64 = 4 vectors */
    uint64_t *p = t->buf + (size_t)lo * 16;
    size_t cnt = (size_t)(hi - lo) * 16;
    if (t->fill) {
        size_t base = (size_t)lo * 16;
        for (size_t i = 0; i < cnt; i++) p[i] = (uint64_t)(base + i) * 0x9E3779B97F4A7C15ull;
        return;
    }
    const bw_vec *v = (const bw_vec *)(void *)p;
#if defined(__x86_64__) && defined(__GNUC__)
    if (t->avx2) {
        t->sums[ith] = bw_sum_avx2(v, cnt / 4);
        return;
    }
#endif
    t->sums[ith] = bw_sum(v, cnt / 4);
}

struct kz_membw {
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

kz_membw *kz_membw_open(int n_threads, size_t mib, char *err, size_t errlen) {
    if (n_threads > 512) n_threads = 512;
    size_t bytes = mib << 20;
    size_t unit = (size_t)16 * 8 * (size_t)n_threads;
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
    b->t->avx2 = kz_isa_available(KZ_ISA_AVX2);
    b->t->fill = 1; /* every thread first-touches its own slice, as the reads will */
    kz_pool_run(b->pool, bw_worker, b->t);
    b->t->fill = 0;
    /* sum_i i*K = K * n(n-1)/2 (mod 2^64) */
    uint64_t n = b->t->n64, tri = (n % 2 == 0) ? (n / 2) * (n - 1) : n * ((n - 1) / 2);
    b->expect = tri * 0x9E3779B97F4A7C15ull;
    return b;
}

/* GB/s (1e9 bytes/s) of one pass; -1 if the checksum is wrong */
double kz_membw_pass(kz_membw *b, char *err, size_t errlen) {
    const int nth = kz_pool_size(b->pool);
    memset(b->t->sums, 0, sizeof b->t->sums);
    double t0 = now_s();
    kz_pool_run(b->pool, bw_worker, b->t);
    double dt = now_s() - t0;
    uint64_t s = 0;
    for (int i = 0; i < nth; i++) s += b->t->sums[i];
    if (s != b->expect) { snprintf(err, errlen, "bandwidth test read back a wrong checksum (memory error?)"); return -1; }
    return (double)b->bytes / (dt > 0 ? dt : 1e-9) / 1e9;
}

size_t kz_membw_bytes(const kz_membw *b) { return b ? b->bytes : 0; }
