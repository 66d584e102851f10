/* 8 floats as one value (GNU vector extension), for the generic kernels built twice (baseline
 * and, on x86-64, an AVX2 target clone): one ymm in the AVX2 build, two xmm / q registers in the
 * baseline SSE2 / NEON build, element-wise IEEE ops either way (no contraction in ISO C mode),
 * so both builds give the same bits. Locals of this type stay in registers, where arrays of
 * floats were kept on the stack by the vectoriser. */
#ifndef KZ_VEC8_H
#define KZ_VEC8_H
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
/* GCC notes that a 32-byte vector changes the baseline (SSE2) ABI; these helpers are always
 * inlined, and vectors go by pointer where a call might remain, so no such value crosses one */
#pragma GCC diagnostic ignored "-Wpsabi"
static inline __attribute__((always_inline)) v8f ld8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline __attribute__((always_inline)) void st8(float *p, const v8f *v) { memcpy(p, v, sizeof *v); }
/* kz_dot8's reduction of its 8 partial sums (ops.h), in its order */
static inline __attribute__((always_inline)) float hsum8(const v8f *p) {
    const v8f a = *p;
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}
#endif
