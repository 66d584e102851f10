/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL integer kernels for AArch64, included once per variant:
 * LA(name) suffixes a name, LA_EXPORT(name) the exported prefix, LA_SDOT 1 = vdotq_s32 block
 * dots, 0 = vmull_s8 + pairwise adds. A weight block is decoded into its 32 int8 factors
 * (Q4_1/Q5_1: codes 0..31; Q5_0: code - 16; IQ4_NL: kv[code] by TBL), the exact int32 block dot
 * is taken, and the float part is the scalar reference's ops in its order (no FMA):
 *   s = s + (float)sumi * (d_w * d_a)            [+ m_w * s_a inside the addend for Q4_1/Q5_1]
 * The gemm decodes each weight block once for up to 8 tokens; each (row, token) keeps its own
 * block-ordered chain, so gemm == vec_dot == scalar bit for bit. */

#define LT_WB(ty) ((ty) == 0 ? 20 : (ty) == 1 ? 22 : (ty) == 2 ? 24 : 18)
#define LT_QS(ty) ((ty) == 0 ? 4 : (ty) == 1 ? 6 : (ty) == 2 ? 8 : 2)
#define LT_QH(ty) ((ty) == 1 ? 2 : 4)
#define LT_MIN(ty) ((ty) == 0 || (ty) == 2)
#define LT_AB(ty) (LT_MIN(ty) ? 36 : 34)
#define LT_AQ(ty) (LT_MIN(ty) ? 4 : 2)

typedef struct {
    int8x16_t lo, hi; /* elements 0..15, 16..31 */
} LA(wblk);

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
        const uint8_t *h = b + LT_QH(ty);
        /* byte i of the half gets qh byte i / 8, keeps bit i % 8: 0x10 where it is set */
        const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ULL));
        const uint8x16_t h01 = vcombine_u8(vdup_n_u8(h[0]), vdup_n_u8(h[1]));
        const uint8x16_t h23 = vcombine_u8(vdup_n_u8(h[2]), vdup_n_u8(h[3]));
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(h01, bit), vdupq_n_u8(0x10)));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h23, bit), vdupq_n_u8(0x10)));
        if (ty == 1) {
            lo = vsubq_u8(lo, vdupq_n_u8(16));
            hi = vsubq_u8(hi, vdupq_n_u8(16));
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

static inline __attribute__((always_inline)) void LA(gemm)(const int ty, int64_t n, const uint8_t *w, size_t ws,
                                                           int64_t nr, const uint8_t *a, size_t as, int64_t nt,
                                                           float *y, int64_t ldy) {
    const int64_t nb = n / 32;
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
