/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL integer kernels for AArch64, included once per variant:
 * LA(name) suffixes a name, LA_EXPORT(name) the exported prefix, LA_SDOT 1 = vdotq_s32 block
 * dots, 0 = vmull_s8 + pairwise adds. A weight block is decoded into its 32 int8 factors
 * (Q4_1/Q5_1: codes 0..31; Q5_0: code - 16; IQ4_NL: kv[code] by TBL), the exact int32 block dot
 * is taken, and the float part is the scalar reference's ops in its order (no FMA):
 *   s = s + (float)sumi * (d_w * d_a)            [+ m_w * s_a inside the addend for Q4_1/Q5_1]
 * The gemm decodes each weight block once for up to 8 tokens; each (row, token) keeps its own
 * block-ordered chain, so gemm == vec_dot == scalar bit for bit. With SDOT: one token runs
 * 12/8/4 rows at a time (LA(rows)), more tokens 4-row x 2/4/8-token tiles (LA(tile)); LA_NO_EXPORT
 * (i8mm.c) keeps only the one-token path, its SMMLA tiles do the rest. */

#define LT_WB(ty) ((ty) == 0 ? 20 : (ty) == 1 ? 22 : (ty) == 2 ? 24 : 18)
#define LT_QS(ty) ((ty) == 0 ? 4 : (ty) == 1 ? 6 : (ty) == 2 ? 8 : 2)
#define LT_QH(ty) ((ty) == 1 ? 2 : 4)
#define LT_MIN(ty) ((ty) == 0 || (ty) == 2)
#define LT_AB(ty) (LT_MIN(ty) ? 36 : 34)
#define LT_AQ(ty) (LT_MIN(ty) ? 4 : 2)

typedef struct {
    int8x16_t lo, hi; /* elements 0..15, 16..31 */
} LA(wblk);

#ifndef LA_LD32
/* v = the 4 bytes at p in lane 0 (one LDR; the intrinsics cost a MOVI or an ADD more) */
#if defined(__GNUC__)
#define LA_LD32(v, p) __asm__("ldr %s0, %1" : "=w"(v) : "m"(*(const uint32_t *)(const void *)(p)))
#else
#define LA_LD32(v, p) ((v) = vreinterpretq_u8_u32(vld1q_lane_u32((const uint32_t *)(const void *)(p), vdupq_n_u32(0), 0)))
#endif
#endif

static inline __attribute__((always_inline)) LA(wblk) LA(decode)(const int ty, const uint8_t *b) {
    const uint8x16_t v = vld1q_u8(b + LT_QS(ty));
    uint8x16_t lo = vandq_u8(v, vdupq_n_u8(15)), hi = vshrq_n_u8(v, 4);
    LA(wblk) r;
    if (ty == 3) {
        const int8x16_t kv = vld1q_s8(kz_iq4nl_values);
        r.lo = vqtbl1q_s8(kv, lo);
        r.hi = vqtbl1q_s8(kv, hi);
        return r;
    }
    if (ty == 1 || ty == 2) {
        /* qh (bit j: element j's bit 4) in lane 0; TBL gives byte i of a half qh byte i / 8 and
         * CMTST keeps bit i % 8: all ones where element i has bit 4 */
        uint8x16_t h;
        LA_LD32(h, b + LT_QH(ty));
        const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
        const uint8x16_t i01 = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(0), vcreate_u64(0x0101010101010101ULL)));
        const uint8x16_t i23 = vreinterpretq_u8_u64(vcombine_u64(vcreate_u64(0x0202020202020202ULL), vcreate_u64(0x0303030303030303ULL)));
        const uint8x16_t m01 = vtstq_u8(vqtbl1q_u8(h, i01), bit), m23 = vtstq_u8(vqtbl1q_u8(h, i23), bit);
        if (ty == 1) { /* code - 16 = low nibble - (16 where bit 4 is clear) */
            lo = vsubq_u8(lo, vbicq_u8(vdupq_n_u8(16), m01));
            hi = vsubq_u8(hi, vbicq_u8(vdupq_n_u8(16), m23));
        } else {
            lo = vorrq_u8(lo, vandq_u8(m01, vdupq_n_u8(16)));
            hi = vorrq_u8(hi, vandq_u8(m23, vdupq_n_u8(16)));
        }
    }
    r.lo = vreinterpretq_s8_u8(lo);
    r.hi = vreinterpretq_s8_u8(hi);
    return r;
}

/* exact int32 dot of a decoded block with 32 activation int8 */
static inline __attribute__((always_inline)) int32_t LA(bdot)(LA(wblk) w, const int8_t *a) {
    const int8x16_t a0 = vld1q_s8(a), a1 = vld1q_s8(a + 16);
#if LA_SDOT
    int32x4_t acc = vdotq_s32(vdupq_n_s32(0), w.lo, a0);
    acc = vdotq_s32(acc, w.hi, a1);
#else
    /* |products| <= 127 * 127 fit int16; pairs are widened to int32 before any sum */
    int32x4_t acc = vpaddlq_s16(vmull_s8(vget_low_s8(w.lo), vget_low_s8(a0)));
    acc = vpadalq_s16(acc, vmull_high_s8(w.lo, a0));
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w.hi), vget_low_s8(a1)));
    acc = vpadalq_s16(acc, vmull_high_s8(w.hi, a1));
#endif
    return vaddvq_s32(acc);
}

static inline float LA(h2f)(const uint8_t *p) { return kz_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* the reference's float step for one block */
static inline __attribute__((always_inline)) float LA(step)(const int ty, float s, int32_t sumi, const uint8_t *w,
                                                            const uint8_t *a) {
    if (LT_MIN(ty)) return s + ((float)sumi * (LA(h2f)(w) * LA(h2f)(a)) + LA(h2f)(w + 2) * LA(h2f)(a + 2));
    return s + (float)sumi * (LA(h2f)(w) * LA(h2f)(a));
}

static inline __attribute__((always_inline)) float LA(dot1)(const int ty, int64_t nb, const uint8_t *w,
                                                            const uint8_t *a) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += LT_WB(ty), a += LT_AB(ty))
        s = LA(step)(ty, s, LA(bdot)(LA(decode)(ty, w), (const int8_t *)(a + LT_AQ(ty))), w, a);
    return s;
}

#if LA_SDOT
#ifndef LA_LD_H
/* lane l of v = the fp16 (LA_LD_H) or the fp16 pair (LA_LD_S) at p, then p += st: one LD1 with
 * a register post-increment (GCC has no addressing mode for a lane load; else one ADD per row).
 * The "m" operand names the bytes read, so no memory clobber pins other values to memory.
 * Clang checks "i" before unrolling makes the lane constant: the intrinsics there. */
#if defined(__GNUC__) && !defined(__clang__)
#define LA_LD_H(v, p, l, st)                                                                                   \
    __asm__("ld1 {%0.h}[%2], [%1], %3" : "+w"(v), "+r"(p) : "i"(l), "r"((int64_t)(st)), "m"(*(const uint16_t *)(p)))
#define LA_LD_S(v, p, l, st)                                                                                   \
    __asm__("ld1 {%0.s}[%2], [%1], %3" : "+w"(v), "+r"(p) : "i"(l), "r"((int64_t)(st)), "m"(*(const uint32_t *)(p)))
/* v = that fp16 / pair in lane 0, the other lanes zero (LDR post-indexed: no loop-carried v) */
#define LA_LD0_H(v, p, st) __asm__("ldr %h0, [%1], %2" : "=w"(v), "+r"(p) : "i"(st), "m"(*(const uint16_t *)(p)))
#define LA_LD0_S(v, p, st) __asm__("ldr %s0, [%1], %2" : "=w"(v), "+r"(p) : "i"(st), "m"(*(const uint32_t *)(p)))
#else
/* simd.h's switches of literal lanes */
#define LA_LD0_H(v, p, st) ((v) = vld1q_lane_u16((const uint16_t *)(const void *)(p), vdupq_n_u16(0), 0), (p) += (st))
#define LA_LD0_S(v, p, st) ((v) = vld1q_lane_u32((const uint32_t *)(const void *)(p), vdupq_n_u32(0), 0), (p) += (st))
#define LA_LD_H(v, p, l, st) ((v) = kz_arm_lane16((v), (p), (l)), (p) += (st))
#define LA_LD_S(v, p, l, st) ((v) = kz_arm_lane32((v), (p), (l)), (p) += (st))
#endif
#endif

/* One-token gemm, R = 12, 8 or 4 rows at a time read in place, as arm/b32_tmpl.h's rows_q8: the
 * rows share the activation loads, each row's SDOTs run on through all blocks, a block's sumi
 * is the difference of two ADDP-folded running totals (exact), and the reference's float step
 * (with m_w * s_a for Q4_1 / Q5_1) runs 4 rows per vector, lane = row. */
typedef struct {
    const uint8_t *wr[12]; /* row pointers, on the next block */
    int32x4_t p[12];       /* per row: SDOT running totals */
    float32x4_t acc[3];    /* lane = row */
    uint16x8_t hv[2];      /* the rows' d (Q5_0, IQ4_NL) */
    uint32x4_t dm[3];      /* the rows' (d, m) (Q4_1, Q5_1) */
} LA(rows_st);

/* one block: folded totals into tot, sumi = tot - prev (two arrays, so that a 2-block loop
 * swaps them instead of copying) */
static inline __attribute__((always_inline)) void LA(rows_blk)(const int ty, const int R, LA(rows_st) *st,
                                                               const uint8_t *ab, const int32x4_t prev[3],
                                                               int32x4_t tot[3]) {
    const int8x16_t a0 = vld1q_s8((const int8_t *)(ab + LT_AQ(ty))), a1 = vld1q_s8((const int8_t *)(ab + LT_AQ(ty) + 16));
    /* per row: its d (and m) as a lane, the pointer then on the next block, the codes behind it */
    KZ_UNROLL(12)
    for (int r = 0; r < R; r++) {
        if (LT_MIN(ty)) LA_LD_S(st->dm[r / 4], st->wr[r], r % 4, LT_WB(ty));
        else LA_LD_H(st->hv[r / 8], st->wr[r], r % 8, LT_WB(ty));
        const LA(wblk) d = LA(decode)(ty, st->wr[r] - LT_WB(ty));
        st->p[r] = vdotq_s32(vdotq_s32(st->p[r], d.lo, a0), d.hi, a1);
    }
    /* the activation's d (lane 0) and, for Q8_1, s (lane 1): exact FCVTL */
    uint32_t ha;
    memcpy(&ha, ab, 4);
    const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(ha)));
    KZ_UNROLL(3)
    for (int g = 0; g < R / 4; g++) {
        tot[g] = vpaddq_s32(vpaddq_s32(st->p[4 * g], st->p[4 * g + 1]), vpaddq_s32(st->p[4 * g + 2], st->p[4 * g + 3]));
        const int32x4_t si = vsubq_s32(tot[g], prev[g]);
        if (LT_MIN(ty)) {
            const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vmovn_u32(st->dm[g])));
            const float32x4_t mw = vcvt_f32_f16(vreinterpret_f16_u16(vshrn_n_u32(st->dm[g], 16)));
            const float32x4_t t = vmulq_f32(vcvtq_f32_s32(si), vmulq_laneq_f32(dw, da, 0));
            st->acc[g] = vaddq_f32(st->acc[g], vaddq_f32(t, vmulq_laneq_f32(mw, da, 1)));
        } else {
            const float32x4_t dw = g % 2 ? vcvt_high_f32_f16(vreinterpretq_f16_u16(st->hv[g / 2]))
                                         : vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(st->hv[g / 2])));
            st->acc[g] = vaddq_f32(st->acc[g], vmulq_f32(vcvtq_f32_s32(si), vmulq_laneq_f32(dw, da, 0)));
        }
    }
}

static inline __attribute__((always_inline)) void LA(rows)(const int ty, const int R, int64_t nq, int64_t nb,
                                                           const uint8_t *w, size_t ws, const uint8_t *a, float *y) {
    for (int64_t q = 0; q < nq; q++, w += (size_t)R * ws, y += R) {
        LA(rows_st) st;
        KZ_UNROLL(12)
        for (int r = 0; r < R; r++) st.wr[r] = w + (size_t)r * ws, st.p[r] = vdupq_n_s32(0);
        st.hv[0] = st.hv[1] = vdupq_n_u16(0);
        int32x4_t t0[3], t1[3];
        KZ_UNROLL(3)
        for (int g = 0; g < 3; g++) st.dm[g] = vdupq_n_u32(0), st.acc[g] = vdupq_n_f32(0.0f), t0[g] = vdupq_n_s32(0);
        const uint8_t *ab = a;
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2, ab += 2 * LT_AB(ty)) {
            LA(rows_blk)(ty, R, &st, ab, t0, t1);
            LA(rows_blk)(ty, R, &st, ab + LT_AB(ty), t1, t0);
        }
        if (b < nb) LA(rows_blk)(ty, R, &st, ab, t0, t1);
        KZ_UNROLL(3)
        for (int g = 0; g < R / 4; g++) vst1q_f32(y + 4 * g, st.acc[g]);
    }
}
/* GCC's first scheduling pass hoists all rows' code loads and decodes ahead of the SDOTs and
 * then spills the accumulators; without it every row is decoded and dotted in turn */
#if defined(__clang__)
#define LA_NOSCHED
#else
#define LA_NOSCHED __attribute__((optimize("no-schedule-insns")))
#endif
#define LA_ROWS_DEF(ty, R)                                                                                       \
    static __attribute__((noinline)) LA_NOSCHED void LA(rows##R##_##ty)(int64_t nq, int64_t nb, const uint8_t *w, \
                                                                        size_t ws, const uint8_t *a, float *y) { \
        LA(rows)(ty, R, nq, nb, w, ws, a, y);                                                                    \
    }
LA_ROWS_DEF(0, 12)
LA_ROWS_DEF(1, 12)
LA_ROWS_DEF(2, 12)
LA_ROWS_DEF(3, 12)
LA_ROWS_DEF(0, 8)
LA_ROWS_DEF(1, 8)
LA_ROWS_DEF(2, 8)
LA_ROWS_DEF(3, 8)
LA_ROWS_DEF(0, 4)
LA_ROWS_DEF(1, 4)
LA_ROWS_DEF(2, 4)
LA_ROWS_DEF(3, 4)
#undef LA_ROWS_DEF

#ifndef LA_NO_EXPORT
/* Prefill at the SDOT level: 4 rows x T tokens. Each weight block is decoded once per tile; per
 * token the 4 rows' SDOTs run on one chain of running totals (through tokens and blocks), so
 * a (row, token) sumi is the difference of two ADDP-folded totals, and the float step runs on
 * the 4 rows at once (lane = row), with the token's d (and s) as a lane. */
static inline __attribute__((always_inline)) void LA(tile)(const int ty, const int T, int64_t nb,
                                                           const uint8_t *const w[4], const uint8_t *const a[8],
                                                           float32x4_t c[8]) {
    const uint8_t *wp[4], *ap[8];
    KZ_UNROLL(4)
    for (int r = 0; r < 4; r++) wp[r] = w[r];
    float32x4_t acc[8];
    KZ_UNROLL(8)
    for (int t = 0; t < T; t++) ap[t] = a[t], acc[t] = vdupq_n_f32(0.0f);
    int32x4_t p[4] = { vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0) }, prev = vdupq_n_s32(0);
    for (int64_t b = 0; b < nb; b++) {
        uint16x8_t hw;
        uint32x4_t mw4;
        LA(wblk) d[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            if (LT_MIN(ty) && r == 0) LA_LD0_S(mw4, wp[r], LT_WB(ty));
            else if (LT_MIN(ty)) LA_LD_S(mw4, wp[r], r, LT_WB(ty));
            else if (r == 0) LA_LD0_H(hw, wp[r], LT_WB(ty));
            else LA_LD_H(hw, wp[r], r, LT_WB(ty));
            d[r] = LA(decode)(ty, wp[r] - LT_WB(ty));
        }
        const float32x4_t dw = LT_MIN(ty) ? vcvt_f32_f16(vreinterpret_f16_u16(vmovn_u32(mw4)))
                                          : vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(hw)));
        const float32x4_t mw = LT_MIN(ty) ? vcvt_f32_f16(vreinterpret_f16_u16(vshrn_n_u32(mw4, 16))) : dw;
        KZ_UNROLL(8)
        for (int t = 0; t < T; t++) {
            uint32x4_t ha; /* lane 0: the token's d, s (Q8_1) or d and two code bytes (Q8_0) */
            LA_LD0_S(ha, ap[t], LT_AB(ty));
            const int8_t *q = (const int8_t *)(ap[t] - LT_AB(ty) + LT_AQ(ty));
            const int8x16_t a0 = vld1q_s8(q), a1 = vld1q_s8(q + 16);
            KZ_UNROLL(4)
            for (int r = 0; r < 4; r++) p[r] = vdotq_s32(vdotq_s32(p[r], d[r].lo, a0), d[r].hi, a1);
            const int32x4_t tot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
            const int32x4_t si = vsubq_s32(tot, prev);
            prev = tot;
            const float32x4_t da = vcvt_f32_f16(vreinterpret_f16_u32(vget_low_u32(ha)));
            const float32x4_t f = vmulq_f32(vcvtq_f32_s32(si), vmulq_laneq_f32(dw, da, 0));
            acc[t] = LT_MIN(ty) ? vaddq_f32(acc[t], vaddq_f32(f, vmulq_laneq_f32(mw, da, 1))) : vaddq_f32(acc[t], f);
        }
    }
    KZ_UNROLL(8)
    for (int t = 0; t < T; t++) c[t] = acc[t];
}
#define LA_TILE_DEF(ty, T)                                                                                       \
    static __attribute__((noinline)) LA_NOSCHED void LA(tile##T##_##ty)(int64_t nb, const uint8_t *const w[4],     \
                                                                        const uint8_t *const a[8], float32x4_t c[8]) { \
        LA(tile)(ty, T, nb, w, a, c);                                                                            \
    }
LA_TILE_DEF(0, 2)
LA_TILE_DEF(1, 2)
LA_TILE_DEF(2, 2)
LA_TILE_DEF(3, 2)
LA_TILE_DEF(0, 4)
LA_TILE_DEF(1, 4)
LA_TILE_DEF(2, 4)
LA_TILE_DEF(3, 4)
LA_TILE_DEF(1, 8)
LA_TILE_DEF(2, 8)
LA_TILE_DEF(3, 8)
#undef LA_TILE_DEF

/* nt >= 2 tokens: 4-row x 2/4/8-token tiles; missing rows / tokens are copies of the last
 * real one (computed, not stored) */
static inline __attribute__((always_inline)) void LA(prefill)(const int ty, int64_t nb, const uint8_t *w, size_t ws,
                                                              int64_t nr, const uint8_t *a, size_t as, int64_t nt,
                                                              float *y, int64_t ldy) {
    typedef void (*tile_fn)(int64_t, const uint8_t *const[4], const uint8_t *const[8], float32x4_t[8]);
    static const tile_fn tiles[3][4] = {
        { LA(tile2_0), LA(tile2_1), LA(tile2_2), LA(tile2_3) },
        { LA(tile4_0), LA(tile4_1), LA(tile4_2), LA(tile4_3) },
        { LA(tile4_0), LA(tile8_1), LA(tile8_2), LA(tile8_3) },
    };
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
        const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;
        const uint8_t *wp[4];
        for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        /* Q4_1's 8-token tile spills (counted): 4 there */
        const int ts = ty == 0 ? 4 : 8;
        for (int64_t t0 = 0; t0 < nt; t0 += ts) {
            const int tv = nt - t0 < ts ? (int)(nt - t0) : ts, k = tv <= 2 ? 0 : tv <= 4 ? 1 : 2;
            const uint8_t *ap[8];
            for (int t = 0; t < 8; t++) ap[t] = a + (size_t)(t0 + (t < tv ? t : tv - 1)) * as;
            float32x4_t c[8];
            tiles[k][ty](nb, wp, ap, c);
            for (int t = 0; t < tv; t++) {
                float *yt = y + (t0 + t) * ldy + r0;
                if (nv == 4) {
                    vst1q_f32(yt, c[t]);
                } else {
                    float o[4];
                    vst1q_f32(o, c[t]);
                    for (int r = 0; r < nv; r++) yt[r] = o[r];
                }
            }
        }
    }
}
#endif
#undef LA_NOSCHED
#endif

static inline __attribute__((always_inline)) void LA(gemm)(const int ty, int64_t n, const uint8_t *w, size_t ws,
                                                           int64_t nr, const uint8_t *a, size_t as, int64_t nt,
                                                           float *y, int64_t ldy) {
    const int64_t nb = n / 32;
#if LA_SDOT
    if (nt == 1) { /* one token: groups of 12 rows, then 8 and 4, a tail of 1..3 rows below */
        const int64_t n12 = nr / 12, r8 = nr % 12 >= 8, r4 = nr % 12 % 8 >= 4;
        if (n12) (ty == 0 ? LA(rows12_0) : ty == 1 ? LA(rows12_1) : ty == 2 ? LA(rows12_2) : LA(rows12_3))(n12, nb, w, ws, a, y);
        int64_t done = 12 * n12;
        if (r8) (ty == 0 ? LA(rows8_0) : ty == 1 ? LA(rows8_1) : ty == 2 ? LA(rows8_2) : LA(rows8_3))(1, nb, w + (size_t)done * ws, ws, a, y + done);
        done += 8 * r8;
        if (r4) (ty == 0 ? LA(rows4_0) : ty == 1 ? LA(rows4_1) : ty == 2 ? LA(rows4_2) : LA(rows4_3))(1, nb, w + (size_t)done * ws, ws, a, y + done);
        done += 4 * r4;
        w += (size_t)done * ws;
        y += done;
        nr -= done;
    }
#ifndef LA_NO_EXPORT
    if (nt >= 2) {
        LA(prefill)(ty, nb, w, ws, nr, a, as, nt, y, ldy);
        return;
    }
#endif
#endif
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        for (int64_t t0 = 0; t0 < nt; t0 += 8) {
            const int ntv = nt - t0 < 8 ? (int)(nt - t0) : 8;
            float s[8] = { 0 };
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *wb = wr + (size_t)b * LT_WB(ty);
                const LA(wblk) dw = LA(decode)(ty, wb);
                for (int t = 0; t < ntv; t++) {
                    const uint8_t *ab = a + (size_t)(t0 + t) * as + (size_t)b * LT_AB(ty);
                    s[t] = LA(step)(ty, s[t], LA(bdot)(dw, (const int8_t *)(ab + LT_AQ(ty))), wb, ab);
                }
            }
            for (int t = 0; t < ntv; t++) y[(t0 + t) * ldy + r] = s[t];
        }
    }
}

#ifndef LA_NO_EXPORT
#define LA_DEF(t, ty)                                                                                          \
    float LA_EXPORT(dot_##t)(const void *w, const void *a, int64_t n) { return LA(dot1)(ty, n / 32, w, a); }    \
    void LA_EXPORT(gemm_##t)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
                             float *y, int64_t ldy) {                                                          \
        LA(gemm)(ty, n, w, ws, nr, a, as, nt, y, ldy);                                                         \
    }
LA_DEF(q4_1, 0)
LA_DEF(q5_0, 1)
LA_DEF(q5_1, 2)
LA_DEF(iq4_nl, 3)
#undef LA_DEF
#endif
