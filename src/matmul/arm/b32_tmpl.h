/* Q8_0 / Q4_0 x Q8_0 integer kernels for AArch64, included by arm/neon.c (baseline NEON) and
 * arm/dotprod.c (SDOT) with:
 *   AQ(name)     suffixes a name with the variant
 *   AQ_SDOT      1: block dots with vdotq_s32 (FEAT_DotProd); 0: vmull_s8 + pairwise adds
 *   AQ_EXPORT    prefix of the exported functions (kz_neon_ / kz_dotprod_)
 * and arm/i8mm.c uses the helpers above the AQ_SDOT part.
 *
 * Exactness as on x86 (x86/b32_tmpl.h): integer block dots are exact, the float part is the
 * scalar reference's, lane by lane (acc = acc + (float)sumi * (d_w * d_a), no FMA; the
 * including files forbid contraction), one lane per (weight row, token) pair.
 * Lanes: GEMV tile = 4 rows x 1 token (lane = row); GEMM tile = 4 rows x 4 tokens, one vector
 * per token (lane = row). */
#ifndef KZ_QUANT_ARM_Q_HELPERS
#define KZ_QUANT_ARM_Q_HELPERS
#include "matmul/arm/simd.h"

/* 32 signed int8 of one block, elements 0..15 and 16..31 */
typedef struct {
    int8x16_t lo, hi;
} arm_blk;

KZ_INL arm_blk arm_wload(const int q4, const uint8_t *b) {
    arm_blk r;
    if (q4) {
        const uint8x16_t v = vld1q_u8(b + 2);
        const int8x16_t eight = vdupq_n_s8(8);
        r.lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))), eight);
        r.hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    } else {
        r.lo = vld1q_s8((const int8_t *)(b + 2));
        r.hi = vld1q_s8((const int8_t *)(b + 18));
    }
    return r;
}

KZ_INL arm_blk arm_aload(const uint8_t *b) {
    arm_blk r;
    r.lo = vld1q_s8((const int8_t *)(b + 2));
    r.hi = vld1q_s8((const int8_t *)(b + 18));
    return r;
}

/* fp16 scales at p0..p3 as 4 floats (exact conversion) */
KZ_INL float32x4_t arm_d4(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2, const uint8_t *p3) {
    uint16_t h[4] = { ld16(p0), ld16(p1), ld16(p2), ld16(p3) };
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* lane i = sum of the lanes of s_i */
KZ_INL int32x4_t arm_hsum4(int32x4_t s0, int32x4_t s1, int32x4_t s2, int32x4_t s3) {
    return vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));
}
#endif /* KZ_QUANT_ARM_Q_HELPERS */

#ifdef AQ
/* 4 int32 partial sums of the 32-element dot of a weight block with an activation block */
KZ_INL int32x4_t AQ(pdot)(arm_blk w, arm_blk a) {
#if AQ_SDOT
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.lo, a.lo), w.hi, a.hi);
#else
    /* int16 lanes hold 2 products: |w| <= 128, |a| <= 127 -> <= 32512 */
    int16x8_t p = vmull_s8(vget_low_s8(w.lo), vget_low_s8(a.lo));
    p = vmlal_high_s8(p, w.lo, a.lo);
    int16x8_t q = vmull_s8(vget_low_s8(w.hi), vget_low_s8(a.hi));
    q = vmlal_high_s8(q, w.hi, a.hi);
    return vpadalq_s16(vpaddlq_s16(p), q);
#endif
}

/* GEMV tile: 4 weight rows x 1 activation row; lane r = row r */
KZ_INL float32x4_t AQ(tile4x1)(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *a) {
    const size_t wbs = q4 ? 18 : 34;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs;
        const uint8_t *ab = a + (size_t)b * 34;
        const arm_blk av = arm_aload(ab);
        int32x4_t p[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) p[r] = AQ(pdot)(arm_wload(q4, w[r] + o), av);
        const int32x4_t si = arm_hsum4(p[0], p[1], p[2], p[3]);
        const float32x4_t sc = vmulq_n_f32(arm_d4(w[0] + o, w[1] + o, w[2] + o, w[3] + o), kz_fp16_to_f32(ld16(ab)));
        acc = vaddq_f32(acc, vmulq_f32(vcvtq_f32_s32(si), sc));
    }
    return acc;
}

/* GEMM tile: 4 weight rows x 4 activation rows; acc[t] lane r */
KZ_INL void AQ(tile4x4)(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4],
                        float32x4_t acc[4]) {
    const size_t wbs = q4 ? 18 : 34;
    float32x4_t c0 = vdupq_n_f32(0.0f), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs, oa = (size_t)b * 34;
        arm_blk wv[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) wv[r] = arm_wload(q4, w[r] + o);
        const float32x4_t dw = arm_d4(w[0] + o, w[1] + o, w[2] + o, w[3] + o);
        const float32x4_t da = arm_d4(a[0] + oa, a[1] + oa, a[2] + oa, a[3] + oa);
        int32x4_t s[4];
        KZ_UNROLL(4)
        for (int t = 0; t < 4; t++) {
            const arm_blk av = arm_aload(a[t] + oa);
            s[t] = arm_hsum4(AQ(pdot)(wv[0], av), AQ(pdot)(wv[1], av), AQ(pdot)(wv[2], av), AQ(pdot)(wv[3], av));
        }
        c0 = vaddq_f32(c0, vmulq_f32(vcvtq_f32_s32(s[0]), vmulq_laneq_f32(dw, da, 0)));
        c1 = vaddq_f32(c1, vmulq_f32(vcvtq_f32_s32(s[1]), vmulq_laneq_f32(dw, da, 1)));
        c2 = vaddq_f32(c2, vmulq_f32(vcvtq_f32_s32(s[2]), vmulq_laneq_f32(dw, da, 2)));
        c3 = vaddq_f32(c3, vmulq_f32(vcvtq_f32_s32(s[3]), vmulq_laneq_f32(dw, da, 3)));
    }
    acc[0] = c0;
    acc[1] = c1;
    acc[2] = c2;
    acc[3] = c3;
}

/* one row x one activation row: the reference's scalar float chain over blocks */
KZ_INL float AQ(dot1)(const int q4, int64_t nb, const uint8_t *w, const uint8_t *a) {
    const size_t wbs = q4 ? 18 : 34;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += wbs, a += 34) {
        const int32_t sumi = vaddvq_s32(AQ(pdot)(arm_wload(q4, w), arm_aload(a)));
        s += (float)sumi * (kz_fp16_to_f32(ld16(w)) * kz_fp16_to_f32(ld16(a)));
    }
    return s;
}

/* the tiles' results stored where the drivers of matmul/simd.h ask */
KZ_INL void AQ(tile4x1_st)(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *a, float *out) {
    vst1q_f32(out, AQ(tile4x1)(q4, nb, w, a));
}
KZ_INL void AQ(tile4x4_st)(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4], float *out,
                           int64_t ldo) {
    float32x4_t acc[4];
    AQ(tile4x4)(q4, nb, w, a, acc);
    for (int t = 0; t < 4; t++) vst1q_f32(out + t * ldo, acc[t]);
}
KZ_TILE_GEMV(, AQ(gemv), 4, AQ(tile4x1_st))

#if AQ_SDOT
/* One-token Q8_0 gemm, R = 8 (or 4) rows at a time read in place (no new layout): the rows
 * share each activation load; each row's SDOTs run on through all blocks (no zeroed
 * accumulator per block), ADDP trees fold 4 rows' running totals into one vector (lane = row)
 * and a block's sumi is the difference of two totals (exact: int32 wrap-around cancels, |sumi|
 * < 2^20). Float step per lane as the reference. nq groups: rows Rq..Rq+R-1 into y[Rq..]. */
#ifndef AQ_LD_D
/* lane l of v = the fp16 at p, p += 34 (one LD1 with a register post-increment: GCC has no
 * addressing mode for a lane load and otherwise spends an ADD per row and block) */
#if defined(__GNUC__) && !defined(__clang__)
#define AQ_LD_D(v, p, l) __asm__("ld1 {%0.h}[%2], [%1], %3" : "+w"(v), "+r"(p) : "i"(l), "r"((int64_t)34) : "memory")
#else
#define AQ_LD_D(v, p, l) ((v) = kz_arm_lane16((v), (p), (l)), (p) += 34) /* clang: simd.h */
#endif
#endif
KZ_INL void AQ(rows_q8)(const int R, int64_t nq, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                        float *y) {
    for (int64_t q = 0; q < nq; q++, w += (size_t)R * ws, y += R) {
        const uint8_t *wr[8];
        KZ_UNROLL(8)
        for (int r = 0; r < R; r++) wr[r] = w + (size_t)r * ws;
        const uint8_t *ab = a;
        int32x4_t p[8], prev[2];
        float32x4_t acc[2];
        uint16x8_t hv = vdupq_n_u16(0);
        KZ_UNROLL(8)
        for (int r = 0; r < R; r++) p[r] = vdupq_n_s32(0);
        prev[0] = prev[1] = vdupq_n_s32(0);
        acc[0] = acc[1] = vdupq_n_f32(0.0f);
        for (int64_t b = 0; b < nb; b++, ab += 34) {
            const int8x16_t alo = vld1q_s8((const int8_t *)(ab + 2)), ahi = vld1q_s8((const int8_t *)(ab + 18));
            /* fp16 d of the R rows (lanes; each pointer then on the next block), the
             * activation's d (lane 0): exact FCVTL */
            KZ_UNROLL(8)
            for (int r = 0; r < R; r++) AQ_LD_D(hv, wr[r], r);
            KZ_UNROLL(8)
            for (int r = 0; r < R; r++)
                p[r] = vdotq_s32(vdotq_s32(p[r], vld1q_s8((const int8_t *)(wr[r] - 32)), alo),
                                 vld1q_s8((const int8_t *)(wr[r] - 16)), ahi);
            uint16_t ha;
            memcpy(&ha, ab, 2);
            const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(ha)));
            KZ_UNROLL(2)
            for (int g = 0; g < R / 4; g++) {
                const int32x4_t tot = arm_hsum4(p[4 * g], p[4 * g + 1], p[4 * g + 2], p[4 * g + 3]);
                const int32x4_t si = vsubq_s32(tot, prev[g]);
                prev[g] = tot;
                const float32x4_t dw = g ? vcvt_high_f32_f16(vreinterpretq_f16_u16(hv))
                                         : vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(hv)));
                acc[g] = vaddq_f32(acc[g], vmulq_f32(vcvtq_f32_s32(si), vmulq_laneq_f32(dw, da, 0)));
            }
        }
        KZ_UNROLL(2)
        for (int g = 0; g < R / 4; g++) vst1q_f32(y + 4 * g, acc[g]);
    }
}
static __attribute__((noinline)) void AQ(rows8_q8)(int64_t nq, int64_t nb, const uint8_t *w, size_t ws,
                                                   const uint8_t *a, float *y) {
    AQ(rows_q8)(8, nq, nb, w, ws, a, y);
}
static __attribute__((noinline)) void AQ(rows4_q8)(int64_t nq, int64_t nb, const uint8_t *w, size_t ws,
                                                   const uint8_t *a, float *y) {
    AQ(rows_q8)(4, nq, nb, w, ws, a, y);
}

/* one token: groups of 8 rows, then 4, then a tail of 1..3 rows through the 4-row tile */
KZ_INL void AQ(gemv_sd)(const int q4, int64_t nb, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                        float *y) {
    int64_t r0 = 0;
    if (!q4) {
        if (nr >= 8) AQ(rows8_q8)(nr / 8, nb, w, ws, a, y);
        r0 = nr - nr % 8;
        if (nr - r0 >= 4) {
            AQ(rows4_q8)(1, nb, w + (size_t)r0 * ws, ws, a, y + r0);
            r0 += 4;
        }
    }
    if (r0 < nr) AQ(gemv)(q4, nb, w + (size_t)r0 * ws, ws, nr - r0, a, y + r0);
}
KZ_TILE_GEMM_4X4(, AQ(gemm), AQ(tile4x4_st), AQ(gemv_sd))
#else
KZ_TILE_GEMM_4X4(, AQ(gemm), AQ(tile4x4_st), AQ(gemv))
#endif

float AQ_EXPORT(dot_q8_0)(const void *w, const void *a, int64_t n) { return AQ(dot1)(0, n / 32, w, a); }
float AQ_EXPORT(dot_q4_0)(const void *w, const void *a, int64_t n) { return AQ(dot1)(1, n / 32, w, a); }
void AQ_EXPORT(gemm_q8_0)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                          float *y, int64_t ldy) {
    AQ(gemm)(0, n, w, ws, nr, a, as, nt, y, ldy);
}
void AQ_EXPORT(gemm_q4_0)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                          float *y, int64_t ldy) {
    AQ(gemm)(1, n, w, ws, nr, a, as, nt, y, ldy);
}
#endif /* AQ */
