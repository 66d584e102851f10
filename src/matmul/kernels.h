/* The SIMD kernels of every ISA level (x86/, arm/), gathered into the kernel table by traits.c
 * (the single dispatch point); only the prototypes of the compiled architecture exist. Each
 * level's kernels keep the contract of the scalar reference (ref/):
 *  - quantizers (quant_*): the reference's bytes.
 *  - integer dots and gemms (every block type): bit-identical to the reference: exact int32
 *    sums per block, then the reference's float ops in its order, no FMA (ref/b32.c and
 *    ref/kquant.c spell each type's chain; Q4_K/Q5_K/Q6_K's is below).
 *  - float dots (F32/F16/BF16): within ~1e-7 of the reference (double); their gemm equals their
 *    dot bit for bit.
 *  - Q2_K/Q3_K/IQ4_XS: activations must have Q8_K qs in [-127, 127] (what kz_ref_quant_q8_K
 *    writes), because the u8 x s8 pair products use sign(a, w).
 * Every gemm element equals the level's vec_dot bit for bit, whatever the tile. */
#ifndef KZ_MATMUL_KERNELS_H
#define KZ_MATMUL_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KZ_ISA_DOT(isa, t) float kz_##isa##_dot_##t(const void *w, const void *a, int64_t n);
#define KZ_ISA_GEMM(isa, t)                                                                       \
    void kz_##isa##_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,     \
                             size_t as, int64_t nt, float *y, int64_t ldy);
#define KZ_ISA_QUANT(isa, t) size_t kz_##isa##_quant_##t(const float *x, void *dst, int64_t n);
#define KZ_ISA_DG(isa, t) KZ_ISA_DOT(isa, t) KZ_ISA_GEMM(isa, t)
/* the integer block types with a dot and a gemm at every SIMD level */
#define KZ_ISA_B32(isa) KZ_ISA_DG(isa, q8_0) KZ_ISA_DG(isa, q4_0) KZ_ISA_DG(isa, q4_1) KZ_ISA_DG(isa, q5_0) \
    KZ_ISA_DG(isa, q5_1) KZ_ISA_DG(isa, iq4_nl)
#define KZ_ISA_K(isa) KZ_ISA_DG(isa, q4_K) KZ_ISA_DG(isa, q5_K) KZ_ISA_DG(isa, q6_K)
#define KZ_ISA_K2(isa) KZ_ISA_DG(isa, q2_K) KZ_ISA_DG(isa, q3_K) KZ_ISA_DG(isa, iq4_xs)
/* a gemm over rows in the q4_0_16x4 layout (kz_gemm_q4_0_16x4_fn) */
#define KZ_ISA_GEMM_16X4(fn)                                                                      \
    void fn(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride, int64_t n_tok, \
            float *y, int64_t ldy);

#if defined(__x86_64__)
/* x86/b32.c: AVX2 (+FMA+F16C) floats and activation quantizers */
KZ_ISA_QUANT(avx2, q8_0) KZ_ISA_QUANT(avx2, f16) KZ_ISA_QUANT(avx2, bf16)
void kz_avx2_dequant_f16(const void *src, float *dst, int64_t n); /* exact, = the reference */
KZ_ISA_DG(avx2, f32) KZ_ISA_DG(avx2, f16) KZ_ISA_DG(avx2, bf16)
/* x86/b32.c and x86/kquant.c: AVX2 integer kernels, and AVX-512 VNNI ones (256-bit VPDPBUSD /
 * VPDPWSSD; Q2_K/Q3_K/IQ4_XS: AVX2's) */
KZ_ISA_B32(avx2) KZ_ISA_K(avx2) KZ_ISA_K2(avx2)
/* x86/q4_0_16x4_avx2.c: AVX2 kernels over q4_0_16x4 rows (as the AVX-512 ones below: the gemm,
 * the block terms of a Q8_0 row (AVX-512's too), the one-token GEMV and the 2-4 token thin gemm taking them) */
KZ_ISA_GEMM_16X4(kz_avx2_gemm_q4_0_16x4)
void kz_avx2_q8_0_corr(const void *act, int64_t n, int32_t *corr);
void kz_avx2_gemv_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, const int32_t *corr, float *y);
void kz_avx2_thin_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                            int64_t n_tok, const int32_t *corr, float *y, int64_t ldy);
KZ_ISA_QUANT(avx512, q8_0)
KZ_ISA_B32(avx512) KZ_ISA_K(avx512)
KZ_ISA_GEMM_16X4(kz_avx512_gemm_q4_0_16x4)
/* the same without the decode GEMV's software prefetch (same bits; chosen on AMD, see traits.c) */
KZ_ISA_GEMM_16X4(kz_avx512_gemm_q4_0_16x4_nopf)
/* the one-token GEMV of those two with the activation's block corrections given (kz_gemv_q4_0_16x4,
 * made by kz_avx2_q8_0_corr) */
void kz_avx512_gemv_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, const int32_t *corr,
                              float *y);
void kz_avx512_gemv_q4_0_16x4_nopf(int64_t n, const void *pk, int64_t n_rows, const void *act,
                                   const int32_t *corr, float *y);
/* the thin (2-4 token) gemm of the same, every token's terms given (corr[t * n / 32 + b]) */
void kz_avx512_thin_q4_0_16x4(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                              int64_t n_tok, const int32_t *corr, float *y, int64_t ldy);
#endif

#if defined(__aarch64__)
/* arm/neon.c: baseline NEON for everything */
KZ_ISA_QUANT(neon, q8_0) KZ_ISA_QUANT(neon, f16) KZ_ISA_QUANT(neon, bf16)
void kz_neon_dequant_f16(const void *src, float *dst, int64_t n); /* exact, = the reference */
KZ_ISA_DG(neon, f32) KZ_ISA_DG(neon, f16) KZ_ISA_DG(neon, bf16)
KZ_ISA_B32(neon) KZ_ISA_K(neon) KZ_ISA_K2(neon)
/* arm/dotprod.c (+dotprod): SDOT integer dots, and the q4_0_16x4 gemm */
KZ_ISA_B32(dotprod) KZ_ISA_K(dotprod) KZ_ISA_K2(dotprod)
KZ_ISA_GEMM_16X4(kz_dotprod_gemm_q4_0_16x4)
/* arm/thin.c (+dotprod): the K-quant gemms of 2-4 tokens (codes unpacked once for all of them;
 * other token counts: dotprod's gemm) */
KZ_ISA_GEMM(dotprod_thin, q4_K) KZ_ISA_GEMM(dotprod_thin, q5_K) KZ_ISA_GEMM(dotprod_thin, q6_K)
/* arm/i8mm.c (+dotprod+i8mm): SMMLA 2x2 tiles for the gemms (GEMV and leftovers: dotprod's) */
KZ_ISA_GEMM(i8mm, q8_0) KZ_ISA_GEMM(i8mm, q4_0) KZ_ISA_GEMM(i8mm, q4_1) KZ_ISA_GEMM(i8mm, q5_0)
KZ_ISA_GEMM(i8mm, q5_1) KZ_ISA_GEMM(i8mm, iq4_nl) KZ_ISA_GEMM(i8mm, q4_K) KZ_ISA_GEMM(i8mm, q5_K)
KZ_ISA_GEMM(i8mm, q6_K)
/* the SMMLA prefill over q4_0_16x4 rows (decode: dotprod's) */
KZ_ISA_GEMM_16X4(kz_i8mm_gemm_q4_0_16x4)
/* its records made once per matmul instead of per call (kz_gemm_q4_0_16x4_rec in quant.h) */
size_t kz_i8mm_q4_0_16x4_rec_size(void);
void kz_i8mm_q4_0_16x4_rec(const void *act, size_t a_stride, int n_tok, int64_t b0, int nbc, void *rec);
void kz_i8mm_gemm_q4_0_16x4_rec(int64_t n, const void *pk, int64_t n_rows, const void *rec, int64_t n_tok, float *y,
                               int64_t ldy);
#endif

/* IQ4_NL / IQ4_XS codebook (kvalues_iq4nl), shared by every level */
extern const int8_t kz_iq4nl_values[16];

/* Q4_K / Q5_K / Q6_K x Q8_K: block geometry and helpers shared by the scalar reference
 * (ref/kquant.c) and the SIMD kernels.
 *
 * Dot contract (every level bit-identical to the scalar reference): per 256-element
 * super-block the integer parts are exact int32 sums,
 *   Q4_K/Q5_K: sumi = sum_j sc[j] * sum_{i in sub-block j} q_i * a_i   (q unsigned, 0..15/31)
 *              summ = sum_j m[j] * (bsums[2j] + bsums[2j+1])
 *   Q6_K:      sumi = sum_g sc[g] * sum_{i in group g} (q_i - 32) * a_i
 * and the float part runs in this order, super-blocks in order, no FMA (kzk_fin_*):
 *   Q4_K/Q5_K: s += (d_a * d) * (float)sumi;  s -= (d_a * dmin) * (float)summ;
 *   Q6_K:      s += (d_a * d) * (float)sumi;
 * (d, dmin: fp16 of the weight block; d_a: fp32 of the Q8_K block). Any SIMD grouping of the
 * integer sums gives the same int32 (no overflow: |sumi| < 2^28), so only the float chain
 * matters, and every kernel runs it per (row, token) pair exactly as above; gemm == vec_dot. */
#define KZK_QK 256
#define KZK_Q4_BYTES 144 /* fp16 d, fp16 dmin, scales[12], qs[128] */
#define KZK_Q5_BYTES 176 /* fp16 d, fp16 dmin, scales[12], qh[32], qs[128] */
#define KZK_Q6_BYTES 210 /* ql[128], qh[64], int8 scales[16], fp16 d */
#define KZK_A_BYTES 292  /* Q8_K: f32 d, int8 qs[256] at +4, int16 bsums[16] at +260 */

static inline uint16_t kzk_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline float kzk_act_d(const uint8_t *a) {
    float d;
    memcpy(&d, a, 4);
    return d;
}

/* the 8 six-bit scales and 8 six-bit mins of a Q4_K/Q5_K block from its 12 packed bytes */
static inline void kzk_scales_mins(const uint8_t *p, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = p[j] & 63;
        m[j] = p[j + 4] & 63;
        sc[j + 4] = (uint8_t)((p[j + 8] & 15) | ((p[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((p[j + 8] >> 4) | ((p[j + 4] >> 6) << 4));
    }
}

/* the documented float order; callers must be compiled without FP contraction */
static inline float kzk_fin_q45(float s, float da, float d, float dmin, int32_t sumi, int32_t summ) {
    const float dd = da * d, dm = da * dmin;
    s += dd * (float)sumi;
    s -= dm * (float)summ;
    return s;
}
static inline float kzk_fin_q6(float s, float da, float d, int32_t sumi) {
    const float dd = da * d;
    s += dd * (float)sumi;
    return s;
}
#endif
