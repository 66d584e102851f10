/* Q4_K / Q5_K / Q6_K x Q8_K: shared pieces of the scalar reference (quant_k.c) and the SIMD
 * kernels (quant_k_x86.c, quant_k_arm*.c), and the SIMD prototypes.
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
#ifndef KZ_QUANT_K_ISA_H
#define KZ_QUANT_K_ISA_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

#define KZK_DOT(isa, t) float kz_##isa##_dot_##t(const void *w, const void *a, int64_t n);
#define KZK_GEMM(isa, t)                                                                          \
    void kz_##isa##_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,     \
                             size_t as, int64_t nt, float *y, int64_t ldy);
#define KZK_ALL(isa) KZK_DOT(isa, q4_K) KZK_DOT(isa, q5_K) KZK_DOT(isa, q6_K) \
    KZK_GEMM(isa, q4_K) KZK_GEMM(isa, q5_K) KZK_GEMM(isa, q6_K)

#if defined(__x86_64__)
KZK_ALL(avx2)   /* quant_k_x86.c */
KZK_ALL(avx512) /* quant_k_x86.c (AVX-512 VNNI, 256-bit) */
#endif
#if defined(__aarch64__)
KZK_ALL(neon)    /* quant_k_arm.c */
KZK_ALL(dotprod) /* quant_k_arm_dot.c (+dotprod) */
KZK_GEMM(i8mm, q4_K) KZK_GEMM(i8mm, q5_K) KZK_GEMM(i8mm, q6_K) /* quant_k_arm_i8mm.c (+i8mm); GEMV: dotprod */
#endif
#endif
