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

/* the 8 six-bit scales (*sc) and mins (*mn) of a Q4_K/Q5_K block as bytes 0..7 of a uint64,
 * from its 12 packed bytes in 32-bit words (kzk_scales_mins, 4 bytes at a time) */
KZ_INL void KA(scmn)(const uint8_t *p, uint64_t *sc, uint64_t *mn) {
    uint32_t w0, w1, w2;
    memcpy(&w0, p, 4);
    memcpy(&w1, p + 4, 4);
    memcpy(&w2, p + 8, 4);
    const uint32_t k6 = 0x3f3f3f3fu, k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    *sc = (uint64_t)(w0 & k6) | (uint64_t)((w2 & k4) | ((w0 >> 6) & k2) << 4) << 32;
    *mn = (uint64_t)(w1 & k6) | (uint64_t)(((w2 >> 4) & k4) | ((w1 >> 6) & k2) << 4) << 32;
}

/* exact fp16 -> f32 of the 2 halves at p (FCVTL; the reference's kz_fp16_to_f32 values) */
KZ_INL float32x4_t KA(h2)(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    return vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(h)));
}

KZ_INL int32_t KA(sb_q45)(const int q5, const uint8_t *x, const uint8_t *a, int32_t *summ) {
    uint64_t scb, mnb;
    KA(scmn)(x + 4, &scb, &mnb);
    const uint8_t *qs = x + (q5 ? 48 : 16);
    const int8_t *q8 = (const int8_t *)(a + 4);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    if (q5) {
        h0 = vld1q_u8(x + 16);
        h1 = vld1q_u8(x + 32);
    }
    int32_t sumi = 0;
#if defined(KA_DOT32V)
    /* sub-block scales as int32 lanes: scl = 0..3, sch = 4..7 */
    const uint16x8_t sc16 = vmovl_u8(vcreate_u8(scb));
    const int32x4_t scl = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(sc16)));
    const int32x4_t sch = vreinterpretq_s32_u32(vmovl_high_u16(sc16));
    int32x4_t vsum = vdupq_n_s32(0);
#define KA_SB(c, v, l)                                                                                        \
    do {                                                                                                    \
        uint8x16_t u[4];                                                                                    \
        kz_arm_q45_codes(q5, qs, h0, h1, c, u);                                                             \
        const int8_t *a0 = q8 + 64 * (c);                                                                   \
        vsum = vmlaq_laneq_s32(vsum, KA_DOT32V(vreinterpretq_s8_u8(u[0]), vreinterpretq_s8_u8(u[1]), vld1q_s8(a0), \
                                               vld1q_s8(a0 + 16)), v, l);                                   \
        vsum = vmlaq_laneq_s32(vsum, KA_DOT32V(vreinterpretq_s8_u8(u[2]), vreinterpretq_s8_u8(u[3]),          \
                                               vld1q_s8(a0 + 32), vld1q_s8(a0 + 48)), v, (l) + 1);          \
    } while (0)
    KA_SB(0, scl, 0);
    KA_SB(1, scl, 2);
    KA_SB(2, sch, 0);
    KA_SB(3, sch, 2);
#undef KA_SB
    sumi = vaddvq_s32(vsum);
#else
    for (int c = 0; c < 4; c++) {
        uint8x16_t u[4];
        kz_arm_q45_codes(q5, qs, h0, h1, c, u);
        const int8_t *a0 = q8 + 64 * c;
        const int32_t s0 =
            KA_DOT32(vreinterpretq_s8_u8(u[0]), vreinterpretq_s8_u8(u[1]), vld1q_s8(a0), vld1q_s8(a0 + 16));
        const int32_t s1 =
            KA_DOT32(vreinterpretq_s8_u8(u[2]), vreinterpretq_s8_u8(u[3]), vld1q_s8(a0 + 32), vld1q_s8(a0 + 48));
        sumi += (int32_t)((scb >> (16 * c)) & 0xff) * s0 + (int32_t)((scb >> (16 * c + 8)) & 0xff) * s1;
    }
#endif
    /* min term: 8 mins x pairwise bsums (int16 pair sums <= 4096 in magnitude), exact in int32 */
    const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(a + 260)), bs1 = vreinterpretq_s16_u8(vld1q_u8(a + 276));
    const int16x8_t bp = vpaddq_s16(bs0, bs1);
    const int16x8_t mv = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(mnb)));
    *summ = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(bp), vget_low_s16(mv)), bp, mv));
    return sumi;
}

KZ_INL int32_t KA(sb_q6)(const uint8_t *x, const uint8_t *a) {
    const int8_t *sc = (const int8_t *)(x + 192);
    const int8_t *q8 = (const int8_t *)(a + 4);
#if defined(KA_DOT16V)
    /* sum_k sc[k] (sum (u - 32) a) over the 16-element groups k = sum_k sc[k] (sum u a) - 32 sum_k
     * sc[k] bsums[k] (Q8_K's bsums[k]: the sum of group k's activations): codes u = q + 32 go
     * straight into SDOT; scales as int32 lanes sv[k / 4][k % 4]; exact integers (|.| < 2^29) */
    const int8x16_t s8 = vld1q_s8(sc);
    const int16x8_t s16l = vmovl_s8(vget_low_s8(s8)), s16h = vmovl_high_s8(s8);
    const int32x4_t sv0 = vmovl_s16(vget_low_s16(s16l)), sv1 = vmovl_high_s16(s16l);
    const int32x4_t sv2 = vmovl_s16(vget_low_s16(s16h)), sv3 = vmovl_high_s16(s16h);
    const int16x8_t bs0 = vreinterpretq_s16_u8(vld1q_u8(a + 260)), bs1 = vreinterpretq_s16_u8(vld1q_u8(a + 276));
    int32x4_t corr = vmull_s16(vget_low_s16(s16l), vget_low_s16(bs0));
    corr = vmlal_high_s16(corr, s16l, bs0);
    corr = vmlal_s16(corr, vget_low_s16(s16h), vget_low_s16(bs1));
    corr = vmlal_high_s16(corr, s16h, bs1);
    int32x4_t vsum = vnegq_s32(vshlq_n_s32(corr, 5));
    /* elements 128c + 32g + 16hlf .. +15 = group 8c + 2g + hlf: lanes hlf, 2 + hlf of svA (g = 0, 1)
     * and of svB (g = 2, 3) */
#define KA_Q6G(c, hlf, g, v, l) \
    vsum = vmlaq_laneq_s32(vsum, KA_DOT16V(vreinterpretq_s8_u8(u[g]), vld1q_s8(q8 + 128 * (c) + 32 * (g) + 16 * (hlf))), v, l)
#define KA_Q6H(c, hlf, svA, svB)                \
    do {                                        \
        uint8x16_t u[4];                        \
        kz_arm_q6_codes(x, c, hlf, u);          \
        KA_Q6G(c, hlf, 0, svA, hlf);            \
        KA_Q6G(c, hlf, 1, svA, 2 + (hlf));      \
        KA_Q6G(c, hlf, 2, svB, hlf);            \
        KA_Q6G(c, hlf, 3, svB, 2 + (hlf));      \
    } while (0)
    KA_Q6H(0, 0, sv0, sv1);
    KA_Q6H(0, 1, sv0, sv1);
    KA_Q6H(1, 0, sv2, sv3);
    KA_Q6H(1, 1, sv2, sv3);
#undef KA_Q6H
#undef KA_Q6G
    return vaddvq_s32(vsum);
#else
    const int8x16_t k32 = vdupq_n_s8(32);
    int32_t sumi = 0;
    for (int c = 0; c < 2; c++) {
        for (int hlf = 0; hlf < 2; hlf++) { /* l in [16 hlf, 16 hlf + 16) of each 32-element group */
            uint8x16_t u[4];
            kz_arm_q6_codes(x, c, hlf, u);
            for (int g = 0; g < 4; g++) {
                /* elements 128c + 32g + 16hlf .. +15 = scale group 8c + 2g + hlf */
                const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(u[g]), k32);
                const int8x16_t av = vld1q_s8(q8 + 128 * c + 32 * g + 16 * hlf);
                sumi += sc[8 * c + 2 * g + hlf] * KA_DOT32(q, vdupq_n_s8(0), av, vdupq_n_s8(0));
            }
        }
    }
    return sumi;
#endif
}

KZ_INL float KA(dot_q45)(const int q5, int64_t nb, const uint8_t *x, const uint8_t *a) {
    const size_t wbs = q5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += wbs, a += KZK_A_BYTES) {
        int32_t summ;
        const int32_t sumi = KA(sb_q45)(q5, x, a, &summ);
        const float32x4_t dm = KA(h2)(x); /* d, dmin */
        s = kzk_fin_q45(s, kzk_act_d(a), vgetq_lane_f32(dm, 0), vgetq_lane_f32(dm, 1), sumi, summ);
    }
    return s;
}

KZ_INL float KA(dot_q6)(int64_t nb, const uint8_t *x, const uint8_t *a) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += KZK_Q6_BYTES, a += KZK_A_BYTES) {
        const float d = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(kzk_rd16(x + 208)))), 0);
        s = kzk_fin_q6(s, kzk_act_d(a), d, KA(sb_q6)(x, a));
    }
    return s;
}

#if defined(KA_DOT16V)
/* ---- 4 rows x 1 token (SDOT): the decode GEMV ----
 * The 4 rows share every activation load and the Q8_K bsums; their horizontal sums fold into
 * one vector (ADDP tree: lane = row) and the float chain of kernels.h runs lane by lane, so
 * each lane is the row's dot bit for bit. Rows are read in place (no repack). */

/* GCC 12's pre-RA scheduler hoists the 4 rows' code unpacking and SDOTs ahead of their
 * multiply-adds and then spills (objdump: 676 instead of 489 instructions per Q6_K
 * super-block); without it, and with the multiply-adds opaque (KA_MLAL), no spills */
#if defined(__GNUC__) && !defined(__clang__)
#define KA_ROWS4 static __attribute__((noinline, optimize("no-schedule-insns")))
#else
#define KA_ROWS4 static __attribute__((noinline))
#endif

/* acc += p * v[l] (MLA by element) as one opaque instruction: GCC 12 otherwise moves the
 * multiply-adds of a row's chain away from their SDOTs and keeps the SDOT results live (spills) */
#if defined(__GNUC__)
#define KA_MLAL(acc, p, v, l) __asm__("mla %0.4s, %1.4s, %2.s[%3]" : "+w"(acc) : "w"(p), "w"(v), "i"(l))
#else
#define KA_MLAL(acc, p, v, l) ((acc) = vmlaq_laneq_s32((acc), (p), (v), (l)))
#endif

/* the 4 rows' 16-byte headers (Q4_K/Q5_K: d, dmin, scales[12]) as 32-bit words transposed:
 * o[k] = word k of rows 0..3 */
KZ_INL void KA(hdr4)(const uint8_t *const x[4], uint32x4_t o[4]) {
    const uint32x4_t v0 = vreinterpretq_u32_u8(vld1q_u8(x[0])), v1 = vreinterpretq_u32_u8(vld1q_u8(x[1]));
    const uint32x4_t v2 = vreinterpretq_u32_u8(vld1q_u8(x[2])), v3 = vreinterpretq_u32_u8(vld1q_u8(x[3]));
    const uint64x2_t a = vreinterpretq_u64_u32(vtrn1q_u32(v0, v1)), b = vreinterpretq_u64_u32(vtrn2q_u32(v0, v1));
    const uint64x2_t c = vreinterpretq_u64_u32(vtrn1q_u32(v2, v3)), d = vreinterpretq_u64_u32(vtrn2q_u32(v2, v3));
    o[0] = vreinterpretq_u32_u64(vtrn1q_u64(a, c));
    o[1] = vreinterpretq_u32_u64(vtrn1q_u64(b, d));
    o[2] = vreinterpretq_u32_u64(vtrn2q_u64(a, c));
    o[3] = vreinterpretq_u32_u64(vtrn2q_u64(b, d));
}

/* lane r = the sum of v[r]'s 4 lanes (int32 wraps; the true sums fit) */
KZ_INL int32x4_t KA(hsum4)(int32x4_t v0, int32x4_t v1, int32x4_t v2, int32x4_t v3) {
    return vpaddq_s32(vpaddq_s32(v0, v1), vpaddq_s32(v2, v3));
}

KZ_INL void KA(quad_q45)(const int q5, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    const size_t wbs = q5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    const uint8x16_t m6 = vdupq_n_u8(63);
    float32x4_t s = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++, a += KZK_A_BYTES) {
        const uint8_t *x[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) x[r] = w + (size_t)r * ws + (size_t)b * wbs;
        uint32x4_t hw[4];
        KA(hdr4)(x, hw);
        /* bytes 4r + j: row r's sc[j] / sc[4 + j] / m[j] / m[4 + j] (kzk_scales_mins) */
        const uint8x16_t A = vreinterpretq_u8_u32(hw[1]), B = vreinterpretq_u8_u32(hw[2]);
        const uint8x16_t C = vreinterpretq_u8_u32(hw[3]);
        const uint8x16_t sclo = vandq_u8(A, m6), schi = vsliq_n_u8(C, vshrq_n_u8(A, 6), 4);
        const uint8x16_t mnlo = vandq_u8(B, m6), mnhi = vsliq_n_u8(vshrq_n_u8(C, 4), vshrq_n_u8(B, 6), 4);
        /* The SDOTs of a row run on through the super-block: p after sub-block j holds the sums of
         * sub-blocks 0..j (P_j), and sum_j P_j (sc[j] - sc[j + 1]) (sc[8] = 0) = sum_j sc[j] S_j
         * exactly (int32 lanes wrap in between; the final sums fit): no zeroed accumulator per
         * sub-block. dsc[r][0] = row r's differences j = 0..3, dsc[r][1] = 4..7, as int32 lanes */
        int32x4_t dsc[4][2];
        {
            const uint32x4_t lo = vreinterpretq_u32_u8(sclo), hi = vreinterpretq_u32_u8(schi);
            const uint8x16_t r01 = vreinterpretq_u8_u32(vzip1q_u32(lo, hi)); /* rows 0, 1: sc[0..7] */
            const uint8x16_t r23 = vreinterpretq_u8_u32(vzip2q_u32(lo, hi));
            /* sc[j + 1] at byte j of each row (0 at j = 7) */
            const uint8x16_t n01 = vreinterpretq_u8_u64(vshrq_n_u64(vreinterpretq_u64_u8(r01), 8));
            const uint8x16_t n23 = vreinterpretq_u8_u64(vshrq_n_u64(vreinterpretq_u64_u8(r23), 8));
            const int16x8_t dr[4] = { vreinterpretq_s16_u16(vsubl_u8(vget_low_u8(r01), vget_low_u8(n01))),
                                      vreinterpretq_s16_u16(vsubl_high_u8(r01, n01)),
                                      vreinterpretq_s16_u16(vsubl_u8(vget_low_u8(r23), vget_low_u8(n23))),
                                      vreinterpretq_s16_u16(vsubl_high_u8(r23, n23)) };
            KZ_UNROLL(4)
            for (int r = 0; r < 4; r++) {
                dsc[r][0] = vmovl_s16(vget_low_s16(dr[r]));
                dsc[r][1] = vmovl_high_s16(dr[r]);
            }
        }
        const int8_t *q8 = (const int8_t *)(a + 4);
        int32x4_t vs[4], p[4] = { vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0) };
        KZ_UNROLL(4)
        for (int c = 0; c < 4; c++) {
            const int8x16_t a0 = vld1q_s8(q8 + 64 * c), a1 = vld1q_s8(q8 + 64 * c + 16);
            const int8x16_t a2 = vld1q_s8(q8 + 64 * c + 32), a3 = vld1q_s8(q8 + 64 * c + 48);
            KZ_UNROLL(4)
            for (int r = 0; r < 4; r++) {
                uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
                if (q5) {
                    h0 = vld1q_u8(x[r] + 16);
                    h1 = vld1q_u8(x[r] + 32);
                }
                uint8x16_t u[4];
                kz_arm_q45_codes(q5, x[r] + (q5 ? 48 : 16), h0, h1, c, u);
                /* sub-blocks 2c, 2c + 1: lanes (2c) % 4, (2c + 1) % 4 of dsc[r][c / 2] */
                p[r] = vdotq_s32(vdotq_s32(p[r], vreinterpretq_s8_u8(u[0]), a0), vreinterpretq_s8_u8(u[1]), a1);
                if (c == 0) vs[r] = vmulq_laneq_s32(p[r], dsc[r][0], 0);
                else KA_MLAL(vs[r], p[r], dsc[r][c / 2], (2 * c) % 4);
                p[r] = vdotq_s32(vdotq_s32(p[r], vreinterpretq_s8_u8(u[2]), a2), vreinterpretq_s8_u8(u[3]), a3);
                KA_MLAL(vs[r], p[r], dsc[r][c / 2], (2 * c + 1) % 4);
            }
        }
        const int32x4_t sumi = KA(hsum4)(vs[0], vs[1], vs[2], vs[3]);
        /* min term: row r's 8 mins x the pairwise bsums (bp), exact in int32 */
        const int16x8_t bp =
            vpaddq_s16(vreinterpretq_s16_u8(vld1q_u8(a + 260)), vreinterpretq_s16_u8(vld1q_u8(a + 276)));
        const int16x8_t bpl = vreinterpretq_s16_s64(vdupq_laneq_s64(vreinterpretq_s64_s16(bp), 0));
        const int16x8_t bph = vreinterpretq_s16_s64(vdupq_laneq_s64(vreinterpretq_s64_s16(bp), 1));
        const int16x8_t ml01 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mnlo)));
        const int16x8_t ml23 = vreinterpretq_s16_u16(vmovl_high_u8(mnlo));
        const int16x8_t mh01 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mnhi)));
        const int16x8_t mh23 = vreinterpretq_s16_u16(vmovl_high_u8(mnhi));
        const int32x4_t m0 =
            vmlal_s16(vmull_s16(vget_low_s16(ml01), vget_low_s16(bpl)), vget_low_s16(mh01), vget_low_s16(bph));
        const int32x4_t m1 = vmlal_high_s16(vmull_high_s16(ml01, bpl), mh01, bph);
        const int32x4_t m2 =
            vmlal_s16(vmull_s16(vget_low_s16(ml23), vget_low_s16(bpl)), vget_low_s16(mh23), vget_low_s16(bph));
        const int32x4_t m3 = vmlal_high_s16(vmull_high_s16(ml23, bpl), mh23, bph);
        const int32x4_t summ = KA(hsum4)(m0, m1, m2, m3);
        /* d, dmin of rows 0..3 (fp16 pairs in word 0), exact FCVTL */
        const uint16x8_t dw = vreinterpretq_u16_u32(hw[0]);
        const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(vuzp1q_u16(dw, dw))));
        const float32x4_t dmin = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(vuzp2q_u16(dw, dw))));
        /* kzk_fin_q45 per lane */
        const float32x4_t da = vdupq_n_f32(kzk_act_d(a));
        const float32x4_t dd = vmulq_f32(da, d), dm = vmulq_f32(da, dmin);
        s = vaddq_f32(s, vmulq_f32(dd, vcvtq_f32_s32(sumi)));
        s = vsubq_f32(s, vmulq_f32(dm, vcvtq_f32_s32(summ)));
    }
    vst1q_f32(y, s);
}

/* nq quads: rows 4q..4q+3 of w into y[4q..4q+3] */
KA_ROWS4 void KA(rows4_q4)(int64_t nq, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    for (int64_t q = 0; q < nq; q++) KA(quad_q45)(0, nb, w + (size_t)(4 * q) * ws, ws, a, y + 4 * q);
}
KA_ROWS4 void KA(rows4_q5)(int64_t nq, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    for (int64_t q = 0; q < nq; q++) KA(quad_q45)(1, nb, w + (size_t)(4 * q) * ws, ws, a, y + 4 * q);
}

KZ_INL void KA(quad_q6)(int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    float32x4_t s = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++, a += KZK_A_BYTES) {
        const uint8_t *x[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) x[r] = w + (size_t)r * ws + (size_t)b * KZK_Q6_BYTES;
        const int8_t *q8 = (const int8_t *)(a + 4);
        /* codes u = q + 32 go straight into SDOT (as in sb_q6): vs[r] gets -32 sum_k sc[k] bsums[k]
         * as 32 sc[k] (fits int16) times -bsums[k] (fits int16) */
        const int16x8_t nb0 = vnegq_s16(vreinterpretq_s16_u8(vld1q_u8(a + 260)));
        const int16x8_t nb1 = vnegq_s16(vreinterpretq_s16_u8(vld1q_u8(a + 276)));
        /* The SDOTs of a row run on through the super-block in the order the codes come (c, hlf,
         * g: group 8c + 2g + hlf = position k = 8c + 4hlf + g), and p's value after position k
         * is multiplied by sc[grp(k)] - sc[grp(k + 1)] (0 after the last): the same sum_g sc[g] S_g
         * exactly (as in quad_q45), no zeroed accumulator per group. */
        static const uint8_t korder[16] = { 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15 };
        const uint8x16_t kidx = vld1q_u8(korder);
        int32x4_t vs[4], p[4] = { vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0) };
        KZ_UNROLL(2)
        for (int c = 0; c < 2; c++) {
            /* dsc[r][hlf] = the differences of positions 8c + 4hlf + g as int32 lanes g */
            int32x4_t dsc[4][2];
            KZ_UNROLL(4)
            for (int r = 0; r < 4; r++) {
                const int8x16_t sc = vld1q_s8((const int8_t *)(x[r] + 192));
                const int8x16_t ps = vqtbl1q_s8(sc, kidx), pn = vextq_s8(ps, vdupq_n_s8(0), 1);
                const int16x8_t dk = c ? vsubl_high_s8(ps, pn) : vsubl_s8(vget_low_s8(ps), vget_low_s8(pn));
                dsc[r][0] = vmovl_s16(vget_low_s16(dk));
                dsc[r][1] = vmovl_high_s16(dk);
                const int16x8_t s16 = c ? vmovl_high_s8(sc) : vmovl_s8(vget_low_s8(sc));
                const int16x8_t s32 = vshlq_n_s16(s16, 5), nb = c ? nb1 : nb0;
                vs[r] = c ? vmlal_s16(vs[r], vget_low_s16(s32), vget_low_s16(nb))
                          : vmull_s16(vget_low_s16(s32), vget_low_s16(nb));
                vs[r] = vmlal_high_s16(vs[r], s32, nb);
            }
            KZ_UNROLL(2)
            for (int hlf = 0; hlf < 2; hlf++) {
                int8x16_t av[4];
                KZ_UNROLL(4)
                for (int g = 0; g < 4; g++) av[g] = vld1q_s8(q8 + 128 * c + 32 * g + 16 * hlf);
                KZ_UNROLL(4)
                for (int r = 0; r < 4; r++) {
                    uint8x16_t u[4];
                    kz_arm_q6_codes(x[r], c, hlf, u);
                    KZ_UNROLL(4)
                    for (int g = 0; g < 4; g++) {
                        p[r] = vdotq_s32(p[r], vreinterpretq_s8_u8(u[g]), av[g]);
                        KA_MLAL(vs[r], p[r], dsc[r][hlf], g);
                    }
                }
            }
        }
        const int32x4_t sumi = KA(hsum4)(vs[0], vs[1], vs[2], vs[3]);
        uint16_t h[4]; /* fp16 d of rows 0..3 (memcpy: rows sit at any byte offset) */
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) memcpy(&h[r], x[r] + 208, 2);
        const uint16x4_t dh = vld1_u16(h);
        const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(dh));
        /* kzk_fin_q6 per lane */
        const float32x4_t dd = vmulq_f32(vdupq_n_f32(kzk_act_d(a)), d);
        s = vaddq_f32(s, vmulq_f32(dd, vcvtq_f32_s32(sumi)));
    }
    vst1q_f32(y, s);
}
KA_ROWS4 void KA(rows4_q6)(int64_t nq, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    for (int64_t q = 0; q < nq; q++) KA(quad_q6)(nb, w + (size_t)(4 * q) * ws, ws, a, y + 4 * q);
}
#endif

KZ_INL void KA(gemm)(const int t, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                     int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
#if defined(KA_DOT16V)
    /* one token: every quad in one call; more: quad by quad, each over the tokens (in cache) */
    const int64_t nr4 = nr - nr % 4, nq = nt == 1 ? nr4 / 4 : 1;
    for (int64_t r0 = 0; r0 < nr4; r0 += 4 * nq)
        for (int64_t k = 0; k < nt; k++) {
            const uint8_t *wr = w + (size_t)r0 * ws, *ak = a + (size_t)k * as;
            if (t == 6) KA(rows4_q6)(nq, nb, wr, ws, ak, y + k * ldy + r0);
            else if (t == 5) KA(rows4_q5)(nq, nb, wr, ws, ak, y + k * ldy + r0);
            else KA(rows4_q4)(nq, nb, wr, ws, ak, y + k * ldy + r0);
        }
    w += (size_t)nr4 * ws;
    y += nr4;
    nr -= nr4;
#endif
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
