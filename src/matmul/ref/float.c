/* Scalar references of the float types F32, F16, BF16: dequantize, quantize (round to nearest
 * even, as gguf-py), and the dot, accumulated in double. */
#include <string.h>

#include "matmul/block.h"
#include "matmul/ref/ref.h"
#include "sys/fp16.h"

/* the dots accumulate a*b + s in double: no contraction into FMA (the reference rounds twice) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void kz_ref_dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void kz_ref_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kz_fp16_to_f32(rd16(s + 2 * i));
}

void kz_ref_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kz_bf16_to_f32(rd16(s + 2 * i));
}

size_t kz_ref_quant_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * 4);
    return (size_t)n * 4;
}

size_t kz_ref_quant_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr16(d + 2 * i, kz_f32_to_fp16(src[i]));
    return (size_t)n * 2;
}

size_t kz_ref_quant_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr16(d + 2 * i, kz_f32_to_bf16(src[i]));
    return (size_t)n * 2;
}

/* Float dots accumulate in double (every f32, f16 and bf16 product is exact in double): the
 * reference is then the correctly rounded dot up to ~n*2^-53, and SIMD kernels, which must sum
 * in another order, are compared against it (they sum float chunks into double). */
float kz_ref_dot_f32(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a; /* byte access: rows need not be 4-byte aligned */
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float xv, yv;
        memcpy(&xv, x + 4 * i, 4);
        memcpy(&yv, y + 4 * i, 4);
        s += (double)xv * yv;
    }
    return (float)s;
}

float kz_ref_dot_f16(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kz_fp16_to_f32(rd16(x + 2 * i)) * kz_fp16_to_f32(rd16(y + 2 * i));
    return (float)s;
}

float kz_ref_dot_bf16(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kz_bf16_to_f32(rd16(x + 2 * i)) * kz_bf16_to_f32(rd16(y + 2 * i));
    return (float)s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_f32, kz_ref_dot_f32)
KZ_SCALAR_GEMM(kz_ref_gemm_f16, kz_ref_dot_f16)
KZ_SCALAR_GEMM(kz_ref_gemm_bf16, kz_ref_dot_bf16)
