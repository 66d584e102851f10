/* Thin GEMMs of Q4_K / Q5_K / Q6_K x Q8_K at the dotprod level, for 2-4 tokens (a speculative
 * verify's batch): per weight row and super-block the codes are unpacked once and SDOT-ed with
 * every token's activations, where the dotprod gemm runs one whole dot per token (unpacking the
 * codes again each time). Per (row, token) the exact int32 sums and the kzk_fin_* float chain of
 * the dot, super-blocks in order: each token's row equals kz_dotprod_dot_q*_K bit for bit. Other
 * token counts go to the dotprod gemm. The Makefile builds this unit with +dotprod (traits.c hands
 * it out only where cpu.c found asimddp). */
#include "matmul/kernels.h"

#if defined(__aarch64__)
#include "matmul/arm/kquant_codes.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "thin.c needs -march=armv8.2-a+dotprod (see the Makefile)"
#endif

#define TH_MAX 4

/* integer parts of one Q4_K (q5 = 0) / Q5_K super-block for K tokens: the sub-block dots of a
 * token accumulate scaled in int32 lanes (exact: |sumi| < 2^28), summed once at the end */
KZ_INL void th_sb_q45(const int K, const int q5, const uint8_t *x, const uint8_t *const a[TH_MAX],
                      int32_t sumi[TH_MAX], int32_t summ[TH_MAX]) {
    uint8_t sc[8], m[8];
    kzk_scales_mins(x + 4, sc, m);
    const uint8_t *qs = x + (q5 ? 48 : 16);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    if (q5) {
        h0 = vld1q_u8(x + 16);
        h1 = vld1q_u8(x + 32);
    }
    int32x4_t acc[TH_MAX];
    for (int k = 0; k < K; k++) acc[k] = vdupq_n_s32(0);
    for (int c = 0; c < 4; c++) {
        uint8x16_t u[4];
        kz_arm_q45_codes(q5, qs, h0, h1, c, u);
        const int8x16_t w0 = vreinterpretq_s8_u8(u[0]), w1 = vreinterpretq_s8_u8(u[1]);
        const int8x16_t w2 = vreinterpretq_s8_u8(u[2]), w3 = vreinterpretq_s8_u8(u[3]);
        for (int k = 0; k < K; k++) {
            const int8_t *q8 = (const int8_t *)(a[k] + 4) + 64 * c;
            const int32x4_t s0 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(q8)), w1, vld1q_s8(q8 + 16));
            const int32x4_t s1 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w2, vld1q_s8(q8 + 32)), w3, vld1q_s8(q8 + 48));
            acc[k] = vmlaq_n_s32(vmlaq_n_s32(acc[k], s0, sc[2 * c]), s1, sc[2 * c + 1]);
        }
    }
    for (int k = 0; k < K; k++) {
        sumi[k] = vaddvq_s32(acc[k]);
        int16_t bs[16]; /* min term: 8 mins x pairwise bsums (int16 pair sums <= 4064) */
        memcpy(bs, a[k] + 260, 32);
        int32_t mm = 0;
        for (int j = 0; j < 8; j++) mm += m[j] * (bs[2 * j] + bs[2 * j + 1]);
        summ[k] = mm;
    }
}

/* integer part of one Q6_K super-block for K tokens: sum_g sc_g * sum (u - 32) * a */
KZ_INL void th_sb_q6(const int K, const uint8_t *x, const uint8_t *const a[TH_MAX], int32_t sumi[TH_MAX]) {
    const int8_t *sc = (const int8_t *)(x + 192);
    const int8x16_t k32 = vdupq_n_s8(32);
    int32x4_t acc[TH_MAX];
    for (int k = 0; k < K; k++) acc[k] = vdupq_n_s32(0);
    for (int c = 0; c < 2; c++)
        for (int hlf = 0; hlf < 2; hlf++) { /* elements 128c + 32g + 16hlf .. +15: scale group 8c + 2g + hlf */
            uint8x16_t u[4];
            kz_arm_q6_codes(x, c, hlf, u);
            int8x16_t q[4];
            for (int g = 0; g < 4; g++) q[g] = vsubq_s8(vreinterpretq_s8_u8(u[g]), k32);
            for (int k = 0; k < K; k++) {
                const int8_t *q8 = (const int8_t *)(a[k] + 4) + 128 * c + 16 * hlf;
                for (int g = 0; g < 4; g++)
                    acc[k] = vmlaq_n_s32(acc[k], vdotq_s32(vdupq_n_s32(0), q[g], vld1q_s8(q8 + 32 * g)),
                                         sc[8 * c + 2 * g + hlf]);
            }
        }
    for (int k = 0; k < K; k++) sumi[k] = vaddvq_s32(acc[k]);
}

/* one row x K tokens (t = 4, 5: Q4_K / Q5_K; 6: Q6_K), the dot's float chain per token */
KZ_INL void th_row(const int K, const int t, int64_t nb, const uint8_t *x, const uint8_t *a, size_t as, float *y,
                   int64_t ldy) {
    const size_t wbs = t == 6 ? KZK_Q6_BYTES : t == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s[TH_MAX] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t b = 0; b < nb; b++, x += wbs) {
        const uint8_t *ab[TH_MAX] = {a, a, a, a};
        for (int k = 0; k < K; k++) ab[k] = a + (size_t)k * as + (size_t)b * KZK_A_BYTES;
        int32_t sumi[TH_MAX], summ[TH_MAX];
        if (t == 6) {
            th_sb_q6(K, x, ab, sumi);
            const float d = kz_fp16_to_f32(kzk_rd16(x + 208));
            for (int k = 0; k < K; k++) s[k] = kzk_fin_q6(s[k], kzk_act_d(ab[k]), d, sumi[k]);
        } else {
            th_sb_q45(K, t == 5, x, ab, sumi, summ);
            const float d = kz_fp16_to_f32(kzk_rd16(x)), dmin = kz_fp16_to_f32(kzk_rd16(x + 2));
            for (int k = 0; k < K; k++) s[k] = kzk_fin_q45(s[k], kzk_act_d(ab[k]), d, dmin, sumi[k], summ[k]);
        }
    }
    for (int k = 0; k < K; k++) y[k * ldy] = s[k];
}

/* 2..4 tokens: every row once with all of them (K a constant per call site) */
KZ_INL void th_gemm(const int t, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                    int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        if (nt == 4) th_row(4, t, nb, wr, a, as, y + r, ldy);
        else if (nt == 3) th_row(3, t, nb, wr, a, as, y + r, ldy);
        else th_row(2, t, nb, wr, a, as, y + r, ldy);
    }
}

void kz_dotprod_thin_gemm_q4_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                               float *y, int64_t ldy) {
    if (nt < 2 || nt > TH_MAX) kz_dotprod_gemm_q4_K(n, w, ws, nr, a, as, nt, y, ldy);
    else th_gemm(4, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_dotprod_thin_gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                               float *y, int64_t ldy) {
    if (nt < 2 || nt > TH_MAX) kz_dotprod_gemm_q5_K(n, w, ws, nr, a, as, nt, y, ldy);
    else th_gemm(5, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_dotprod_thin_gemm_q6_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                               float *y, int64_t ldy) {
    if (nt < 2 || nt > TH_MAX) kz_dotprod_gemm_q6_K(n, w, ws, nr, a, as, nt, y, ldy);
    else th_gemm(6, n, w, ws, nr, a, as, nt, y, ldy);
}

#else
typedef int kz_matmul_arm_thin_unused; /* not AArch64: nothing to build */
#endif
