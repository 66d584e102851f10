/* AArch64 SMMLA (FEAT_I8MM) gemm for Q4_1 / Q5_0 / Q5_1 / IQ4_NL: tiles of 2 weight rows x 2
 * tokens, 4 SMMLA per 32-element block give the four exact int32 block dots at once; each
 * (row, token) then takes the scalar reference's float step (quant_legacy_arm_q.h), so every
 * element equals the dotprod / scalar vec_dot bit for bit. Odd rows / tokens use the dotprod
 * decode + dot. Built with -march=armv8.2-a+dotprod+i8mm by the Makefile. */
#include "matmul/quant_legacy_isa.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "quant_legacy_arm_i8mm.c needs -march=armv8.2-a+dotprod+i8mm (see the Makefile)"
#endif
#include <arm_neon.h>

#include "sys/fp16.h"

#define LA(name) name##_i8mm
#define LA_SDOT 1
#define LA_NO_EXPORT 1
#include "matmul/arm/b32_legacy_tmpl.h"

/* the 8-element chunk c (0..3) of two decoded blocks as one 2x8 SMMLA operand */
static inline int8x16_t pair8(LA(wblk) a, LA(wblk) b, int c) {
    const int8x16_t x = c < 2 ? a.lo : a.hi, y = c < 2 ? b.lo : b.hi;
    const int64x2_t xs = vreinterpretq_s64_s8(x), ys = vreinterpretq_s64_s8(y);
    return vreinterpretq_s8_s64((c & 1) ? vzip2q_s64(xs, ys) : vzip1q_s64(xs, ys));
}

static inline __attribute__((always_inline)) void gemm_smmla(const int ty, int64_t n, const uint8_t *w, size_t ws,
                                                            int64_t nr, const uint8_t *a, size_t as, int64_t nt,
                                                            float *y, int64_t ldy) {
    const int64_t nb = n / 32, nr2 = nr - nr % 2, nt2 = nt - nt % 2;
    for (int64_t r = 0; r < nr2; r += 2) {
        const uint8_t *w0 = w + (size_t)r * ws, *w1 = w0 + ws;
        for (int64_t t = 0; t < nt2; t += 2) {
            const uint8_t *a0 = a + (size_t)t * as, *a1 = a0 + as;
            float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const size_t ow = (size_t)b * LT_WB(ty), oa = (size_t)b * LT_AB(ty);
                const LA(wblk) d0 = LA(decode)(ty, w0 + ow), d1 = LA(decode)(ty, w1 + ow);
                const int8_t *q0 = (const int8_t *)(a0 + oa + LT_AQ(ty)), *q1 = (const int8_t *)(a1 + oa + LT_AQ(ty));
                int32x4_t acc = vdupq_n_s32(0); /* lanes: r0t0, r0t1, r1t0, r1t1 */
                for (int c = 0; c < 4; c++)
                    acc = vmmlaq_s32(acc, pair8(d0, d1, c), vcombine_s8(vld1_s8(q0 + 8 * c), vld1_s8(q1 + 8 * c)));
                s00 = LA(step)(ty, s00, vgetq_lane_s32(acc, 0), w0 + ow, a0 + oa);
                s01 = LA(step)(ty, s01, vgetq_lane_s32(acc, 1), w0 + ow, a1 + oa);
                s10 = LA(step)(ty, s10, vgetq_lane_s32(acc, 2), w1 + ow, a0 + oa);
                s11 = LA(step)(ty, s11, vgetq_lane_s32(acc, 3), w1 + ow, a1 + oa);
            }
            y[t * ldy + r] = s00;
            y[(t + 1) * ldy + r] = s01;
            y[t * ldy + r + 1] = s10;
            y[(t + 1) * ldy + r + 1] = s11;
        }
    }
    /* leftovers: the last row (all tokens) and the last token (even rows) */
    if (nr2 < nr) LA(gemm)(ty, n, w + (size_t)nr2 * ws, ws, 1, a, as, nt, y + nr2, ldy);
    if (nt2 < nt && nr2 > 0) LA(gemm)(ty, n, w, ws, nr2, a + (size_t)nt2 * as, as, 1, y + nt2 * ldy, ldy);
}

#define I8_DEF(t, ty)                                                                                         \
    void kz_i8mm_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
                          float *y, int64_t ldy) {                                                           \
        gemm_smmla(ty, n, w, ws, nr, a, as, nt, y, ldy);                                                      \
    }
I8_DEF(q4_1, 0)
I8_DEF(q5_0, 1)
I8_DEF(q5_1, 2)
I8_DEF(iq4_nl, 3)

#else
typedef int kz_quant_legacy_arm_i8mm_unused; /* not AArch64: nothing to build */
#endif
