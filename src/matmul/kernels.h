/* SIMD kernels per ISA level, gathered into the kernel table by traits.c (the single dispatch
 * point). Only the prototypes of the compiled architecture exist. Contracts:
 *  - quant_q8_0 / quant_f16 / quant_bf16: same bytes as the scalar reference quantizers.
 *  - dot_q8_0 / dot_q4_0 / gemm_*: bit-identical to the scalar reference (integer sums per
 *    block, then the reference's float ops in its order: s += (float)sumi * (d_w * d_a)).
 *  - dot_f32 / dot_f16 / dot_bf16: within ~1e-7 of the scalar (double) reference; their gemm
 *    equals their dot bit for bit. */
#ifndef KZ_QUANT_ISA_H
#define KZ_QUANT_ISA_H
#include <stddef.h>
#include <stdint.h>

#define KZ_ISA_DOT(isa, t) float kz_##isa##_dot_##t(const void *w, const void *a, int64_t n);
#define KZ_ISA_GEMM(isa, t)                                                                       \
    void kz_##isa##_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,     \
                             size_t as, int64_t nt, float *y, int64_t ldy);
#define KZ_ISA_QUANT(isa, t) size_t kz_##isa##_quant_##t(const float *x, void *dst, int64_t n);

#if defined(__x86_64__)
/* quant_x86.c: AVX2+FMA+F16C (floats, activation quantizers, integer dots) and AVX-512 VNNI
 * (integer dots and the Q8_0 quantizer; floats and the other quantizers are the AVX2 ones) */
KZ_ISA_QUANT(avx2, q8_0) KZ_ISA_QUANT(avx2, f16) KZ_ISA_QUANT(avx2, bf16)
void kz_avx2_dequant_f16(const void *src, float *dst, int64_t n); /* exact, = the reference */
KZ_ISA_DOT(avx2, f32) KZ_ISA_DOT(avx2, f16) KZ_ISA_DOT(avx2, bf16) KZ_ISA_DOT(avx2, q8_0) KZ_ISA_DOT(avx2, q4_0)
KZ_ISA_GEMM(avx2, f32) KZ_ISA_GEMM(avx2, f16) KZ_ISA_GEMM(avx2, bf16) KZ_ISA_GEMM(avx2, q8_0) KZ_ISA_GEMM(avx2, q4_0)
KZ_ISA_QUANT(avx512, q8_0)
KZ_ISA_DOT(avx512, q8_0) KZ_ISA_DOT(avx512, q4_0)
KZ_ISA_GEMM(avx512, q8_0) KZ_ISA_GEMM(avx512, q4_0)
void kz_avx512_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                             int64_t n_tok, float *y, int64_t ldy);
/* the same without the decode GEMV's software prefetch (same bits; chosen on AMD, see quant.c) */
void kz_avx512_gemm_q4_0_16x4_nopf(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                                  int64_t n_tok, float *y, int64_t ldy);
/* the one-token GEMV of those two with the activation's block corrections given (kz_gemv_q4_0_16x4) */
void kz_avx512_q8_0_corr(const void *act, int64_t n, int32_t *corr);
void kz_avx512_gemv_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, const int32_t *corr,
                             float *y);
void kz_avx512_gemv_q4_0_16x4_nopf(int64_t n, const void *pk, int64_t n_rows, const void *act,
                                  const int32_t *corr, float *y);
#endif

#if defined(__aarch64__)
/* quant_arm.c: baseline NEON for everything */
KZ_ISA_QUANT(neon, q8_0) KZ_ISA_QUANT(neon, f16) KZ_ISA_QUANT(neon, bf16)
void kz_neon_dequant_f16(const void *src, float *dst, int64_t n); /* exact, = the reference */
KZ_ISA_DOT(neon, f32) KZ_ISA_DOT(neon, f16) KZ_ISA_DOT(neon, bf16) KZ_ISA_DOT(neon, q8_0) KZ_ISA_DOT(neon, q4_0)
KZ_ISA_GEMM(neon, f32) KZ_ISA_GEMM(neon, f16) KZ_ISA_GEMM(neon, bf16) KZ_ISA_GEMM(neon, q8_0) KZ_ISA_GEMM(neon, q4_0)
/* quant_arm_dot.c (built with +dotprod): SDOT integer dots */
KZ_ISA_DOT(dotprod, q8_0) KZ_ISA_DOT(dotprod, q4_0)
KZ_ISA_GEMM(dotprod, q8_0) KZ_ISA_GEMM(dotprod, q4_0)
/* quant_arm_i8mm.c (built with +dotprod+i8mm): SMMLA 2x2 tiles for the GEMM; GEMV and
 * leftovers go to the dotprod kernels */
KZ_ISA_GEMM(i8mm, q8_0) KZ_ISA_GEMM(i8mm, q4_0)
/* quant_arm_p16_dot.c (+dotprod): Q4_0 gemm over rows packed by kz_repack_q4_0_16x4 (kz_gemm_q4_0_16x4_fn) */
void kz_dotprod_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                              int64_t n_tok, float *y, int64_t ldy);
/* quant_arm_p16_i8mm.c (+i8mm): the same with an SMMLA prefill (n_tok >= 2); decode = dotprod's */
void kz_i8mm_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                           int64_t n_tok, float *y, int64_t ldy);
#endif
#endif
