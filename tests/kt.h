/* Minimal test harness: CHECK records failures and continues; KT_END returns exit code. */
#ifndef KT_H
#define KT_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int kt_fail = 0, kt_checks = 0;
#define CHECK(cond) do { kt_checks++; if (!(cond)) { kt_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { kt_checks++; if (!(cond)) { kt_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define KT_END() do { printf("%s: %d checks, %d failed\n", __FILE__, kt_checks, kt_fail); \
    return kt_fail ? 1 : (kt_checks ? 0 : 1); } while (0)
/* deterministic PRNG for tests (never test on zeros) */
static inline unsigned long long kt_rng(unsigned long long *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s;
}
static inline float kt_randf(unsigned long long *s) { /* uniform [-1,1) */
    return (float)((kt_rng(s) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}
/* random row: uniform [-1,1) times a per-row magnitude 10^[-3,3], with occasional 8x outliers */
static inline void kt_fill_row(float *x, long long n, unsigned long long *s) {
    float mag = powf(10.0f, 3.0f * kt_randf(s));
    for (long long i = 0; i < n; i++) {
        x[i] = kt_randf(s) * mag;
        if ((kt_rng(s) & 63) == 0) x[i] *= 8.0f;
    }
}
#endif
