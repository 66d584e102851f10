/* SIMD kernels of the Q2_K / Q3_K / IQ4_XS family (quant_k2_x86.c), gathered into the kernel
 * table by traits.c. Contract: bit-identical to the scalar dots in quant_k2.c (same int32 sums, same
 * float ops in the same order); activations must have Q8_K qs in [-127, 127] (what
 * kz_ref_quant_q8_K writes: |iscale * x| <= 127), because the u8 x s8 pair products use sign(a, w). */
#ifndef KZ_QUANT_K2_ISA_H
#define KZ_QUANT_K2_ISA_H
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
float kz_avx2_dot_q2_K(const void *w, const void *a, int64_t n);
float kz_avx2_dot_q3_K(const void *w, const void *a, int64_t n);
float kz_avx2_dot_iq4_xs(const void *w, const void *a, int64_t n);
void kz_avx2_gemm_q2_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy);
void kz_avx2_gemm_q3_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy);
void kz_avx2_gemm_iq4_xs(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy);
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define KZ_K2_DECL(p)                                                                            \
    float kz_##p##_dot_q2_K(const void *w, const void *a, int64_t n);                            \
    float kz_##p##_dot_q3_K(const void *w, const void *a, int64_t n);                            \
    float kz_##p##_dot_iq4_xs(const void *w, const void *a, int64_t n);                          \
    void kz_##p##_gemm_q2_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy); \
    void kz_##p##_gemm_q3_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy); \
    void kz_##p##_gemm_iq4_xs(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y, int64_t ldy);
KZ_K2_DECL(neon)
KZ_K2_DECL(dotprod)
#endif
#endif
