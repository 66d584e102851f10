/* Q4_K / Q5_K / Q6_K x Q8_K kernels for AArch64, included once per variant:
 *   KA(name)      suffixes a name with the variant; KA_EXPORT(name) the exported name;
 *   KA_DOT32(w0, w1, a0, a1)  int32 sum of the 32 products w * a of two int8x16 pairs
 *                 (NEON: SMULL/SMLAL pairs, |w * a| <= 63 * 128 so two fit int16; dotprod: SDOT);
 *   KA_DOT32V / KA_DOT16V (optional, dotprod) the same of 32 / 16 products as 4 int32 partial
 *                 lanes: the sub-block scales multiply whole vectors, one horizontal add per
 *                 super-block (exact integers: the same sumi).
 * Codes are kept in int8 (unsigned 0..31 for Q4_K/Q5_K, q - 32 for Q6_K), sums per sub-block are
 * exact, scales applied in int32 as in the scalar reference, then kzk_fin_* in its float order:
 * bit-identical to the scalar reference whatever the tile (gemm calls the same dot). */
#include "matmul/arm/kquant_codes.h"

KZ_INL int32_t KA(sb_q45)(const int q5, const uint8_t *x, const uint8_t *a, int32_t *summ) {
    uint8_t sc[8], m[8];
    kzk_scales_mins(x + 4, sc, m);
    const uint8_t *qs = x + (q5 ? 48 : 16);
    const int8_t *q8 = (const int8_t *)(a + 4);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    if (q5) {
        h0 = vld1q_u8(x + 16);
        h1 = vld1q_u8(x + 32);
    }
    int32_t sumi = 0;
#if defined(KA_DOT32V)
    int32x4_t vsum = vdupq_n_s32(0);
#endif
    for (int c = 0; c < 4; c++) {
        uint8x16_t u[4];
        kz_arm_q45_codes(q5, qs, h0, h1, c, u);
        const int8_t *a0 = q8 + 64 * c;
#if defined(KA_DOT32V)
        vsum = vmlaq_n_s32(vsum, KA_DOT32V(vreinterpretq_s8_u8(u[0]), vreinterpretq_s8_u8(u[1]), vld1q_s8(a0), vld1q_s8(a0 + 16)),
                           sc[2 * c]);
        vsum = vmlaq_n_s32(vsum, KA_DOT32V(vreinterpretq_s8_u8(u[2]), vreinterpretq_s8_u8(u[3]), vld1q_s8(a0 + 32), vld1q_s8(a0 + 48)),
                           sc[2 * c + 1]);
#else
        const int32_t s0 =
            KA_DOT32(vreinterpretq_s8_u8(u[0]), vreinterpretq_s8_u8(u[1]), vld1q_s8(a0), vld1q_s8(a0 + 16));
        const int32_t s1 =
            KA_DOT32(vreinterpretq_s8_u8(u[2]), vreinterpretq_s8_u8(u[3]), vld1q_s8(a0 + 32), vld1q_s8(a0 + 48));
        sumi += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
#endif
    }
#if defined(KA_DOT32V)
    sumi = vaddvq_s32(vsum);
#endif
    /* min term: 8 mins x pairwise bsums (int16 pair sums <= 4064) */
    int16_t bs[16];
    memcpy(bs, a + 260, 32);
    int32_t mm = 0;
    for (int j = 0; j < 8; j++) mm += m[j] * (bs[2 * j] + bs[2 * j + 1]);
    *summ = mm;
    return sumi;
}

KZ_INL int32_t KA(sb_q6)(const uint8_t *x, const uint8_t *a) {
    const int8_t *sc = (const int8_t *)(x + 192);
    const int8_t *q8 = (const int8_t *)(a + 4);
    const int8x16_t k32 = vdupq_n_s8(32);
    int32_t sumi = 0;
#if defined(KA_DOT16V)
    int32x4_t vsum = vdupq_n_s32(0);
#endif
    for (int c = 0; c < 2; c++) {
        for (int hlf = 0; hlf < 2; hlf++) { /* l in [16 hlf, 16 hlf + 16) of each 32-element group */
            uint8x16_t u[4];
            kz_arm_q6_codes(x, c, hlf, u);
            for (int g = 0; g < 4; g++) {
                /* elements 128c + 32g + 16hlf .. +15 = scale group 8c + 2g + hlf */
                const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(u[g]), k32);
                const int8x16_t av = vld1q_s8(q8 + 128 * c + 32 * g + 16 * hlf);
#if defined(KA_DOT16V)
                vsum = vmlaq_n_s32(vsum, KA_DOT16V(q, av), sc[8 * c + 2 * g + hlf]);
#else
                sumi += sc[8 * c + 2 * g + hlf] * KA_DOT32(q, vdupq_n_s8(0), av, vdupq_n_s8(0));
#endif
            }
        }
    }
#if defined(KA_DOT16V)
    sumi = vaddvq_s32(vsum);
#endif
    return sumi;
}

KZ_INL float KA(dot_q45)(const int q5, int64_t nb, const uint8_t *x, const uint8_t *a) {
    const size_t wbs = q5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += wbs, a += KZK_A_BYTES) {
        int32_t summ;
        const int32_t sumi = KA(sb_q45)(q5, x, a, &summ);
        s = kzk_fin_q45(s, kzk_act_d(a), kz_fp16_to_f32(kzk_rd16(x)), kz_fp16_to_f32(kzk_rd16(x + 2)), sumi, summ);
    }
    return s;
}

KZ_INL float KA(dot_q6)(int64_t nb, const uint8_t *x, const uint8_t *a) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += KZK_Q6_BYTES, a += KZK_A_BYTES)
        s = kzk_fin_q6(s, kzk_act_d(a), kz_fp16_to_f32(kzk_rd16(x + 208)), KA(sb_q6)(x, a));
    return s;
}

KZ_INL void KA(gemm)(const int t, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                     int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const int64_t r1 = nr - r0 < 4 ? nr : r0 + 4;
        for (int64_t k = 0; k < nt; k++)
            for (int64_t r = r0; r < r1; r++) {
                const uint8_t *wr = w + (size_t)r * ws, *ak = a + (size_t)k * as;
                y[k * ldy + r] = t == 6 ? KA(dot_q6)(nb, wr, ak) : KA(dot_q45)(t == 5, nb, wr, ak);
            }
    }
}

float KA_EXPORT(dot_q4_K)(const void *w, const void *a, int64_t n) { return KA(dot_q45)(0, n / KZK_QK, w, a); }
float KA_EXPORT(dot_q5_K)(const void *w, const void *a, int64_t n) { return KA(dot_q45)(1, n / KZK_QK, w, a); }
float KA_EXPORT(dot_q6_K)(const void *w, const void *a, int64_t n) { return KA(dot_q6)(n / KZK_QK, w, a); }
void KA_EXPORT(gemm_q4_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                          float *y, int64_t ldy) {
    KA(gemm)(4, n, w, ws, nr, a, as, nt, y, ldy);
}
void KA_EXPORT(gemm_q5_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                          float *y, int64_t ldy) {
    KA(gemm)(5, n, w, ws, nr, a, as, nt, y, ldy);
}
void KA_EXPORT(gemm_q6_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                          float *y, int64_t ldy) {
    KA(gemm)(6, n, w, ws, nr, a, as, nt, y, ldy);
}
