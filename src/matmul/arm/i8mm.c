/* AArch64 SMMLA (FEAT_I8MM) GEMM for Q4_K / Q5_K / Q6_K x Q8_K: 2 weight rows x 2 tokens per
 * tile; per super-block both rows are decoded to int8 codes (element order; Q6_K as q - 32),
 * each SMMLA adds the 2x2 dots of 8 elements, sub-block (Q4_K/Q5_K: 32, Q6_K: 16) results are
 * scaled in int32 with the rows' scales, then the float chain of quant_k_isa.h per pair. Integer
 * sums are exact, so every element equals the scalar reference (and the dotprod vec_dot, used
 * for the GEMV and leftovers) bit for bit. Built with +dotprod+i8mm by the Makefile. */
#include "matmul/quant_k_isa.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "sys/fp16.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* int8 codes of one super-block in element order: Q4_K/Q5_K unsigned 0..31, Q6_K q - 32 */
static inline void decode_q45(const int q5, const uint8_t *x, int8_t *q) {
    const uint8_t *qs = x + (q5 ? 48 : 16);
    const uint8x16_t m4 = vdupq_n_u8(15), one = vdupq_n_u8(1);
    const uint8x16_t h0 = q5 ? vld1q_u8(x + 16) : vdupq_n_u8(0), h1 = q5 ? vld1q_u8(x + 32) : vdupq_n_u8(0);
    for (int c = 0; c < 4; c++) {
        const uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16);
        uint8x16_t l0 = vandq_u8(v0, m4), l1 = vandq_u8(v1, m4), u0 = vshrq_n_u8(v0, 4), u1 = vshrq_n_u8(v1, 4);
        if (q5) {
            const int8x16_t s0 = vdupq_n_s8((int8_t)(-2 * c)), s1 = vdupq_n_s8((int8_t)(-2 * c - 1));
            l0 = vorrq_u8(l0, vshlq_n_u8(vandq_u8(vshlq_u8(h0, s0), one), 4));
            l1 = vorrq_u8(l1, vshlq_n_u8(vandq_u8(vshlq_u8(h1, s0), one), 4));
            u0 = vorrq_u8(u0, vshlq_n_u8(vandq_u8(vshlq_u8(h0, s1), one), 4));
            u1 = vorrq_u8(u1, vshlq_n_u8(vandq_u8(vshlq_u8(h1, s1), one), 4));
        }
        vst1q_s8(q + 64 * c, vreinterpretq_s8_u8(l0));
        vst1q_s8(q + 64 * c + 16, vreinterpretq_s8_u8(l1));
        vst1q_s8(q + 64 * c + 32, vreinterpretq_s8_u8(u0));
        vst1q_s8(q + 64 * c + 48, vreinterpretq_s8_u8(u1));
    }
}

static inline void decode_q6(const uint8_t *x, int8_t *q) {
    const uint8_t *ql = x, *qh = x + 128;
    const uint8x16_t m4 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int c = 0; c < 2; c++)
        for (int hl = 0; hl < 2; hl++) {
            const uint8x16_t l0 = vld1q_u8(ql + 64 * c + 16 * hl), l1 = vld1q_u8(ql + 64 * c + 32 + 16 * hl);
            const uint8x16_t h = vld1q_u8(qh + 32 * c + 16 * hl);
            const uint8x16_t u0 = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m3), 4));
            const uint8x16_t u1 = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m3), 4));
            const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m3), 4));
            const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4));
            int8_t *o = q + 128 * c + 16 * hl;
            vst1q_s8(o, vsubq_s8(vreinterpretq_s8_u8(u0), k32));
            vst1q_s8(o + 32, vsubq_s8(vreinterpretq_s8_u8(u1), k32));
            vst1q_s8(o + 64, vsubq_s8(vreinterpretq_s8_u8(u2), k32));
            vst1q_s8(o + 96, vsubq_s8(vreinterpretq_s8_u8(u3), k32));
        }
}

/* 2x2 int32 dots {r0.t0, r0.t1, r1.t0, r1.t1} of len (multiple of 16) int8 elements */
static inline int32x4_t mm2x2(const int8_t *w0, const int8_t *w1, const int8_t *a0, const int8_t *a1, int len) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int i = 0; i < len; i += 16) {
        const int64x2_t x0 = vreinterpretq_s64_s8(vld1q_s8(w0 + i)), x1 = vreinterpretq_s64_s8(vld1q_s8(w1 + i));
        const int64x2_t y0 = vreinterpretq_s64_s8(vld1q_s8(a0 + i)), y1 = vreinterpretq_s64_s8(vld1q_s8(a1 + i));
        acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip1q_s64(x0, x1)), vreinterpretq_s8_s64(vzip1q_s64(y0, y1)));
        acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip2q_s64(x0, x1)), vreinterpretq_s8_s64(vzip2q_s64(y0, y1)));
    }
    return acc;
}

/* one 2x2 tile over nb super-blocks; out[t * 2 + r] */
static void tile2x2(const int t, int64_t nb, const uint8_t *const w[2], const uint8_t *const a[2], float out[4]) {
    const size_t wbs = t == 6 ? KZK_Q6_BYTES : t == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f }; /* pair p = r * 2 + tok, the SMMLA lane order */
    int8_t q[2][KZK_QK];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *x[2] = { w[0] + (size_t)b * wbs, w[1] + (size_t)b * wbs };
        const uint8_t *ab[2] = { a[0] + (size_t)b * KZK_A_BYTES, a[1] + (size_t)b * KZK_A_BYTES };
        const int8_t *a8[2] = { (const int8_t *)(ab[0] + 4), (const int8_t *)(ab[1] + 4) };
        int32x4_t vi = vdupq_n_s32(0);
        if (t == 6) {
            decode_q6(x[0], q[0]);
            decode_q6(x[1], q[1]);
            const int8_t *sc0 = (const int8_t *)(x[0] + 192), *sc1 = (const int8_t *)(x[1] + 192);
            for (int g = 0; g < 16; g++) {
                const int32x4_t p = mm2x2(q[0] + 16 * g, q[1] + 16 * g, a8[0] + 16 * g, a8[1] + 16 * g, 16);
                const int32_t sv[4] = { sc0[g], sc0[g], sc1[g], sc1[g] };
                vi = vmlaq_s32(vi, p, vld1q_s32(sv));
            }
            int32_t si[4];
            vst1q_s32(si, vi);
            for (int r = 0; r < 2; r++) {
                const float d = kz_fp16_to_f32(kzk_rd16(x[r] + 208));
                for (int k = 0; k < 2; k++) s[r * 2 + k] = kzk_fin_q6(s[r * 2 + k], kzk_act_d(ab[k]), d, si[r * 2 + k]);
            }
        } else {
            uint8_t sc[2][8], m[2][8];
            for (int r = 0; r < 2; r++) {
                decode_q45(t == 5, x[r], q[r]);
                kzk_scales_mins(x[r] + 4, sc[r], m[r]);
            }
            for (int j = 0; j < 8; j++) {
                const int32x4_t p = mm2x2(q[0] + 32 * j, q[1] + 32 * j, a8[0] + 32 * j, a8[1] + 32 * j, 32);
                const int32_t sv[4] = { sc[0][j], sc[0][j], sc[1][j], sc[1][j] };
                vi = vmlaq_s32(vi, p, vld1q_s32(sv));
            }
            int32_t si[4];
            vst1q_s32(si, vi);
            int16_t bs[2][16];
            memcpy(bs[0], ab[0] + 260, 32);
            memcpy(bs[1], ab[1] + 260, 32);
            for (int r = 0; r < 2; r++) {
                const float d = kz_fp16_to_f32(kzk_rd16(x[r])), dmin = kz_fp16_to_f32(kzk_rd16(x[r] + 2));
                for (int k = 0; k < 2; k++) {
                    int32_t summ = 0;
                    for (int j = 0; j < 8; j++) summ += m[r][j] * (bs[k][2 * j] + bs[k][2 * j + 1]);
                    s[r * 2 + k] = kzk_fin_q45(s[r * 2 + k], kzk_act_d(ab[k]), d, dmin, si[r * 2 + k], summ);
                }
            }
        }
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++) out[k * 2 + r] = s[r * 2 + k];
}

typedef float (*dot_fn)(const void *, const void *, int64_t);

static void gemm(const int t, dot_fn dot, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                 size_t as, int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
    const int64_t nr2 = nt >= 2 ? nr - nr % 2 : 0, nt2 = nt - nt % 2;
    for (int64_t r = 0; r < nr2; r += 2) {
        const uint8_t *wp[2] = { w + (size_t)r * ws, w + (size_t)(r + 1) * ws };
        for (int64_t k = 0; k < nt2; k += 2) {
            const uint8_t *ap[2] = { a + (size_t)k * as, a + (size_t)(k + 1) * as };
            float out[4];
            tile2x2(t, nb, wp, ap, out);
            y[k * ldy + r] = out[0];
            y[k * ldy + r + 1] = out[1];
            y[(k + 1) * ldy + r] = out[2];
            y[(k + 1) * ldy + r + 1] = out[3];
        }
    }
    /* leftovers: the odd last token for the tiled rows, every token for the other rows */
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = r < nr2 ? nt2 : 0; k < nt; k++) y[k * ldy + r] = dot(w + (size_t)r * ws, a + (size_t)k * as, n);
}

void kz_i8mm_gemm_q4_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    gemm(4, kz_dotprod_dot_q4_K, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_i8mm_gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    gemm(5, kz_dotprod_dot_q5_K, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_i8mm_gemm_q6_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    gemm(6, kz_dotprod_dot_q6_K, n, w, ws, nr, a, as, nt, y, ldy);
}

#else
typedef int kz_quant_k_i8mm_unused; /* not AArch64 */
#endif
