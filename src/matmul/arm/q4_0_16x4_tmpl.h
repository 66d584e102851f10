/* Helpers shared by the AArch64 kernels over the 16-row packed Q4_0 layout (kz_repack_q4_0_16x4):
 * arm/dotprod.c (SDOT, lane = weight row) and arm/i8mm.c (SMMLA prefill).
 *
 * Weights are used as unsigned nibbles u (0..15, a valid int8): sum((u - 8) * a) = sum(u * a)
 * - 8 * sum(a), the correction -8 * sum(a) of each (token, block) computed once per call and
 * used as the initial value of the integer accumulators: exact integers, so the block sum
 * equals the reference's sumi. The float part per lane is the reference's acc = acc +
 * (float)sumi * (d_w * d_a), blocks in order, no FMA (the including files forbid contraction
 * and only use vmulq/vaddq). */
#ifndef KZ_MATMUL_ARM_Q4_0_16X4_TMPL_H
#define KZ_MATMUL_ARM_Q4_0_16X4_TMPL_H
#include <arm_neon.h>
#include <stdint.h>

#include "matmul/arm/b32_tmpl.h" /* ld16, KZ_INL, KZ_UNROLL */

#define Q16X4_BB 288 /* bytes of one 16-row block: 4 x 64 nibble bytes + 16 fp16 scales */
#define Q16X4_CH 64  /* blocks per chunk (precomputed corrections, partial sums kept in y) */
#define Q16X4_TG 64  /* tokens per correction group (stride of the per-block token arrays) */

/* -8 * sum of the 32 activation int8 of a Q8_0 block */
KZ_INL int32_t q16x4_corr(const uint8_t *ab) {
    const int16x8_t s = vpaddlq_s8(vld1q_s8((const int8_t *)(ab + 2)));
    return -8 * vaddlvq_s16(vpadalq_s8(s, vld1q_s8((const int8_t *)(ab + 18))));
}

/* the 16 rows' fp16 scales of a packed block as 4 x 4 floats (exact conversion) */
KZ_INL void q16x4_dw(const uint8_t *p, float32x4_t dw[4]) {
    const float16x8_t h0 = vreinterpretq_f16_u8(vld1q_u8(p + 256)), h1 = vreinterpretq_f16_u8(vld1q_u8(p + 272));
    dw[0] = vcvt_f32_f16(vget_low_f16(h0));
    dw[1] = vcvt_high_f32_f16(h0);
    dw[2] = vcvt_f32_f16(vget_low_f16(h1));
    dw[3] = vcvt_high_f32_f16(h1);
}

/* corrections and activation scales of tokens [0, ntp) x blocks [b0, b0 + nbc) of the
 * activation rows a (stride as), stored at [b * Q16X4_TG + t]; tokens from nt on (padding up to
 * a whole tile) repeat the last real token */
KZ_INL void q16x4_prep(const uint8_t *a, size_t as, int nt, int ntp, int64_t b0, int nbc, int32_t *corr, float *dact) {
    for (int t = 0; t < ntp; t++) {
        const uint8_t *at = a + (size_t)(t < nt ? t : nt - 1) * as + (size_t)b0 * 34;
        for (int b = 0; b < nbc; b++) {
            corr[b * Q16X4_TG + t] = q16x4_corr(at + (size_t)b * 34);
            dact[b * Q16X4_TG + t] = kz_fp16_to_f32(ld16(at + (size_t)b * 34));
        }
    }
}

/* One 8-row x 4-token tile over a chunk of nbc blocks: w = the half group's first nibble dword
 * column, dw = its 8 fp16 scales, ap[t] = token t's activation blocks, corr / dact = the chunk's
 * per-(block, token) terms at [b * Q16X4_TG + t]; reads the partial sums of the tile's rows from
 * yp[t] when `resume` (later chunks), writes those of the tv real tokens back. */
typedef void (*q16x4_tile_fn)(int nbc, const uint8_t *w, const uint8_t *dw, const uint8_t *const ap[4],
                            const int32_t *corr, const float *dact, float *const yp[4], int tv, int resume);

/* The prefill loop of both packed kernels (n_tok >= 2): per group of up to Q16X4_TG tokens and
 * chunk of Q16X4_CH blocks the corrections, then every 8-row half group x 4-token tile; partial
 * sums go through y between chunks (an exact float round trip). Inlined with a constant tile. */
KZ_INL void q16x4_prefill(int64_t n, const uint8_t *pk, int64_t nr, const uint8_t *a, size_t as, int64_t nt, float *y,
                        int64_t ldy, q16x4_tile_fn tile) {
    const int64_t nb = n / 32;
    int32_t corr[Q16X4_CH * Q16X4_TG];
    float dact[Q16X4_CH * Q16X4_TG];
    for (int64_t tg = 0; tg < nt; tg += Q16X4_TG) {
        const int ntg = nt - tg < Q16X4_TG ? (int)(nt - tg) : Q16X4_TG;
        const int ntp = (ntg + 3) & ~3;
        const uint8_t *ag = a + (size_t)tg * as;
        for (int64_t b0 = 0; b0 < nb; b0 += Q16X4_CH) {
            const int nbc = nb - b0 < Q16X4_CH ? (int)(nb - b0) : Q16X4_CH;
            q16x4_prep(ag, as, ntg, ntp, b0, nbc, corr, dact);
            for (int64_t r0 = 0; r0 < nr; r0 += 8) {
                const int h = (int)(r0 % 16) / 8;
                const uint8_t *pg = pk + ((size_t)(r0 / 16) * (size_t)nb + (size_t)b0) * Q16X4_BB;
                for (int t0 = 0; t0 < ntg; t0 += 4) {
                    const int tv = ntg - t0 < 4 ? ntg - t0 : 4;
                    const uint8_t *ap[4];
                    float *yp[4];
                    for (int t = 0; t < 4; t++) {
                        const int tt = t0 + (t < tv ? t : tv - 1); /* padding repeats the last token */
                        ap[t] = ag + (size_t)tt * as + (size_t)b0 * 34;
                        yp[t] = y + (tg + tt) * ldy + r0;
                    }
                    tile(nbc, pg + 32 * h, pg + 256 + 16 * h, ap, corr + t0, dact + t0, yp, tv, b0 > 0);
                }
            }
        }
    }
}
#endif
