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
typedef int v8i __attribute__((vector_size(32)));
typedef unsigned v8u __attribute__((vector_size(32)));
/* kz_exp (ops.h) on 8 lanes: the same operations in the same order, so every lane equals
 * kz_exp of its value bit for bit (no contraction in ISO C mode; GCC's vector / 2 truncates
 * like the scalar one). Written on vectors because the compiler vectorised the scalar
 * function per element through a stack buffer. */
static inline __attribute__((always_inline)) v8f kz_exp8(const v8f *px) {
    const v8f x = *px;
    const float magic = 12582912.0f;
    const v8f t = x * 1.44269504088896341f + magic;
    const v8f n = t - magic;
    const v8i ni = (v8i)((v8u)t - 0x4b400000u), n1 = ni / 2, n2 = ni - n1;
    const v8f r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    v8f p = r * 1.3814610429e-3f + 8.3687100559e-3f;
    p = p * r + 4.1668388993e-2f;
    p = p * r + 1.6666521132e-1f;
    p = p * r + 4.9999994040e-1f;
    const v8f e = 1.0f + (r + (r * r) * p);
    const v8f s1 = (v8f)((v8u)(n1 + 127) << 23), s2 = (v8f)((v8u)(n2 + 127) << 23);
    v8u y = (v8u)(e * s1 * s2);
    const v8u zero = (v8u)(x < -104.0f), inf = (v8u)(x > 88.75f);
    y = (y & ~zero & ~inf) | (0x7f800000u & inf);
    return (v8f)y;
}
/* x / (1 + e^-x): kz_silu on 8 lanes, the same bits */
static inline __attribute__((always_inline)) v8f kz_silu8(const v8f *px) {
    const v8f m = -*px;
    return *px / (1.0f + kz_exp8(&m));
}
/* kz_dot8's reduction of its 8 partial sums (ops.h), in its order */
static inline __attribute__((always_inline)) float hsum8(const v8f *p) {
    const v8f a = *p;
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}
#endif
