/* Decode attention partial (kz_attn_partial) with AArch64 NEON: the ARM counterpart of
 * attention_avx512.c, the same numbers as the generic body in attention.c, bit for bit.
 *
 * The generic body converts each block of F16 rows into a float buffer and reloads the query
 * chunk for every key row. Here F16 rows are widened in registers (FCVTL) as they are read, and
 * two key rows share each query chunk held in registers (16 accumulators + 8 query + 4 key
 * registers of the 32). Same bits: each score is the generic body's 8 fused lane sums (lanes
 * 0-3 and 4-7 in two registers), reduced by the same tree ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)),
 * times scale; the PV sums run over positions in order, one fused multiply-add per element
 * (FMLA rounds once, as fmaf).
 * F16 -> f32 is exact except that FCVTL quiets a signalling NaN, which the first fused multiply-add
 * would quiet anyway, with the same payload. */
#include "nn/attention_isa.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kazeia.h"
#include "nn/ops.h"

/* 8 values of a cached row from column i as two float32x4 */
static inline void ld8row(const kz_kv_layer *kv, const void *r, int i, float32x4_t *lo, float32x4_t *hi) {
    if (kv->type == KZ_KV_F16) {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)r + i));
        *lo = vcvt_f32_f16(vget_low_f16(h));
        *hi = vcvt_high_f32_f16(h);
    } else {
        *lo = vld1q_f32((const float *)r + i);
        *hi = vld1q_f32((const float *)r + i + 4);
    }
}

/* kz_dot8's tree over lanes lo = a0..a3, hi = a4..a7 */
static inline float tree8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t s = vaddq_f32(lo, hi); /* a_l + a_(l+4) */
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
}

/* scores of key rows k0, k1 for the 4 query heads (q + r*ldq): out[r*ldo + {0, 1}] (the second
 * only when two) */
static inline void dot_rows2(const kz_kv_layer *kv, const void *k0, const void *k1, int two, const float *q,
                             size_t ldq, int hd, float scale, float *out, size_t ldo) {
    float32x4_t al[4], ah[4], bl[4], bh[4];
    for (int r = 0; r < 4; r++) al[r] = ah[r] = bl[r] = bh[r] = vdupq_n_f32(0.0f);
    for (int i = 0; i < hd; i += 8) {
        float32x4_t x0, x1, y0, y1;
        ld8row(kv, k0, i, &x0, &x1);
        ld8row(kv, k1, i, &y0, &y1);
        for (int r = 0; r < 4; r++) {
            const float32x4_t q0 = vld1q_f32(q + (size_t)r * ldq + i), q1 = vld1q_f32(q + (size_t)r * ldq + i + 4);
            al[r] = vfmaq_f32(al[r], q0, x0);
            ah[r] = vfmaq_f32(ah[r], q1, x1);
            bl[r] = vfmaq_f32(bl[r], q0, y0);
            bh[r] = vfmaq_f32(bh[r], q1, y1);
        }
    }
    for (int r = 0; r < 4; r++) {
        out[(size_t)r * ldo] = tree8(al[r], ah[r]) * scale;
        if (two) out[(size_t)r * ldo + 1] = tree8(bl[r], bh[r]) * scale;
    }
}

/* acc_r[c..c+8) += sum_j w_r[j] v_j[c..c+8) for the 4 heads, j in order */
static inline void pv_cols8(const kz_kv_layer *kv, const char *vrow0, size_t rb, int nb, const float *w, size_t ldw,
                            float *acc, int hd, int c) {
    float32x4_t xl[4], xh[4];
    for (int r = 0; r < 4; r++) {
        xl[r] = vld1q_f32(acc + (size_t)r * hd + c);
        xh[r] = vld1q_f32(acc + (size_t)r * hd + c + 4);
    }
    for (int j = 0; j < nb; j++) {
        float32x4_t v0, v1;
        ld8row(kv, vrow0 + (size_t)j * rb, c, &v0, &v1);
        for (int r = 0; r < 4; r++) {
            const float wr = w[(size_t)r * ldw + j];
            xl[r] = vfmaq_n_f32(xl[r], v0, wr);
            xh[r] = vfmaq_n_f32(xh[r], v1, wr);
        }
    }
    for (int r = 0; r < 4; r++) {
        vst1q_f32(acc + (size_t)r * hd + c, xl[r]);
        vst1q_f32(acc + (size_t)r * hd + c + 4, xh[r]);
    }
}

#define KZ_NEON_VB 16 /* positions per V block */

int kz_attn_partial_neon(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                         float *ml, float *acc, float *scratch) {
    const int hd = kv->head_dim, n_rep = kv->n_head / kv->n_head_kv, n = p1 - p0;
    if (n_rep != 4 || hd % 8 || (kv->type != KZ_KV_F16 && kv->type != KZ_KV_F32) || n <= 0) return 0;
    memset(acc, 0, (size_t)n_rep * hd * sizeof(float));
    const size_t rb = kz_kv_row_bytes(kv);
    const char *kbase = kz_kv_row(kv, 0, g, p0), *vbase = kz_kv_row(kv, 1, g, p0);
    float *sc = scratch; /* sc[r * n + t] */
    for (int t = 0; t < n; t += 2) {
        const int two = t + 1 < n;
        dot_rows2(kv, kbase + (size_t)t * rb, kbase + (size_t)(two ? t + 1 : t) * rb, two, q, ldq, hd, scale, sc + t,
                  (size_t)n);
    }
    kz_attn_softmax_partial(sc, 4, n, ml);
    for (int t0 = 0; t0 < n; t0 += KZ_NEON_VB) {
        const int nb = n - t0 < KZ_NEON_VB ? n - t0 : KZ_NEON_VB;
        for (int c = 0; c < hd; c += 8) pv_cols8(kv, vbase + (size_t)t0 * rb, rb, nb, sc + t0, (size_t)n, acc, hd, c);
    }
    return 1;
}
#endif
