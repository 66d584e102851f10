/* AArch64 SMMLA (FEAT_I8MM) prefill over the 16-row packed Q4_0 layout (kz_repack_q4_0_16x4), the
 * packed kernel of the i8mm level; decode (1 token) is the SDOT one (quant_arm_p16_dot.c).
 * Register tile 8 rows x 4 tokens as 4 row pairs x 2 token pairs, each a 2x2 SMMLA result
 * (lanes (r0,t0) (r0,t1) (r1,t0) (r1,t1)). Operands come straight from the packed dwords:
 * vzip1q_u32 / vzip2q_u32 of the 4-row registers of dwords j and j+1 (j = 0, 2) give rows
 * (0,1) / (2,3) x 8 consecutive bytes, i.e. after the nibble split 2 rows x 8 consecutive
 * elements (4j..4j+7 low, 16+4j.. high); the activations' matching operand is a 64-bit zip of
 * two tokens' 8-byte runs. Unsigned nibbles with the -8 * sum(a) correction as
 * the accumulators' start, float part per lane as the reference (quant_arm_p16_q.h), so every
 * output equals the scalar vec_dot bit for bit. The Makefile builds this file with
 * -march=armv8.2-a+dotprod+i8mm; dispatch calls it only when the CPU reports i8mm and asimddp. */
#include "matmul/kernels.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
/* GCC's pre-RA scheduler hoists all 16 nibble decodes of a block ahead of the dots and then
 * spills the accumulators every block (GCC 12, objdump of the tile loops); without it the
 * loops stay in registers. Out-of-order cores reorder on their own. */
#pragma GCC optimize("no-schedule-insns")
#endif
#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "quant_arm_p16_i8mm.c needs -march=armv8.2-a+dotprod+i8mm (see the Makefile)"
#endif

#include "matmul/arm/q4_0_16x4_tmpl.h"

/* one row pair: w (2 rows x bytes 8jp.. of dwords (0,1) / (2,3)) split into the 4 operands
 * of elements 0..7, 8..15, 16..23, 24..31; dwp2 its scales (r0 r0 r1 r1); ce / co the
 * accumulators of token pairs 0 / 1 */
#define MM_PAIR(z0, z1, dwp2, ce, co)                                                             \
    do {                                                                                          \
        const int8x16_t w0 = vreinterpretq_s8_u8(vandq_u8(z0, m)), w1 = vreinterpretq_s8_u8(vandq_u8(z1, m)); \
        const int8x16_t w2 = vreinterpretq_s8_u8(vshrq_n_u8(z0, 4)), w3 = vreinterpretq_s8_u8(vshrq_n_u8(z1, 4)); \
        int32x4_t s0 = vmmlaq_s32(c01, w0, x[0][0]), s1 = vmmlaq_s32(c23, w0, x[1][0]);           \
        s0 = vmmlaq_s32(s0, w1, x[0][1]);                                                         \
        s1 = vmmlaq_s32(s1, w1, x[1][1]);                                                         \
        s0 = vmmlaq_s32(s0, w2, x[0][2]);                                                         \
        s1 = vmmlaq_s32(s1, w2, x[1][2]);                                                         \
        s0 = vmmlaq_s32(s0, w3, x[0][3]);                                                         \
        s1 = vmmlaq_s32(s1, w3, x[1][3]);                                                         \
        ce = vaddq_f32(ce, vmulq_f32(vcvtq_f32_s32(s0), vmulq_f32(dwp2, da01)));                  \
        co = vaddq_f32(co, vmulq_f32(vcvtq_f32_s32(s1), vmulq_f32(dwp2, da23)));                  \
    } while (0)

/* rows 4k..4k+3 of the half group (k a literal): row pairs 2k (zip1 of the dwords) and 2k+1
 * (zip2), accumulators c_a, c_b (pair 2k) and c_c, c_d (pair 2k+1) */
#define MM_QUARTER(k, c_a, c_b, c_c, c_d)                                                         \
    do {                                                                                          \
        const uint32x4_t q0 = vreinterpretq_u32_u8(vld1q_u8(p + 16 * (k)));                       \
        const uint32x4_t q1 = vreinterpretq_u32_u8(vld1q_u8(p + 64 + 16 * (k)));                  \
        const uint32x4_t q2 = vreinterpretq_u32_u8(vld1q_u8(p + 128 + 16 * (k)));                 \
        const uint32x4_t q3 = vreinterpretq_u32_u8(vld1q_u8(p + 192 + 16 * (k)));                 \
        MM_PAIR(vreinterpretq_u8_u32(vzip1q_u32(q0, q1)), vreinterpretq_u8_u32(vzip1q_u32(q2, q3)), \
                vzip1q_f32(dwq[k], dwq[k]), c_a, c_b);                                            \
        MM_PAIR(vreinterpretq_u8_u32(vzip2q_u32(q0, q1)), vreinterpretq_u8_u32(vzip2q_u32(q2, q3)), \
                vzip2q_f32(dwq[k], dwq[k]), c_c, c_d);                                            \
    } while (0)

/* 8 rows (p: the block's half group) x 4 tokens over nbc blocks; acc[2 rp + tp] = rows 2rp,
 * 2rp+1 x tokens 2tp, 2tp+1 (SMMLA lane order). corr/dact: [b * P16_TG + t] from the tile's
 * first token. */
static __attribute__((noinline)) void mm_tile8x4(int nbc, const uint8_t *p, const uint8_t *dwp, const uint8_t *const ap[4],
                       const int32_t *corr, const float *dact, float32x4_t acc[8]) {
    const uint8x16_t m = vdupq_n_u8(15);
    /* accumulators as locals (an array reached through the pointer is kept in memory) */
    float32x4_t c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3], c4 = acc[4], c5 = acc[5], c6 = acc[6], c7 = acc[7];
    for (int b = 0; b < nbc; b++, p += P16_BB, dwp += P16_BB) {
        /* activation operands x[tp][c]: tokens 2tp, 2tp+1 x elements 8c..8c+7 */
        int8x16_t x[2][4];
        KZ_UNROLL(2)
        for (int tp = 0; tp < 2; tp++) {
            const uint8_t *a0 = ap[2 * tp] + (size_t)b * 34, *a1 = ap[2 * tp + 1] + (size_t)b * 34;
            const int64x2_t l0 = vreinterpretq_s64_s8(vld1q_s8((const int8_t *)(a0 + 2)));
            const int64x2_t l1 = vreinterpretq_s64_s8(vld1q_s8((const int8_t *)(a1 + 2)));
            const int64x2_t h0 = vreinterpretq_s64_s8(vld1q_s8((const int8_t *)(a0 + 18)));
            const int64x2_t h1 = vreinterpretq_s64_s8(vld1q_s8((const int8_t *)(a1 + 18)));
            x[tp][0] = vreinterpretq_s8_s64(vzip1q_s64(l0, l1));
            x[tp][1] = vreinterpretq_s8_s64(vzip2q_s64(l0, l1));
            x[tp][2] = vreinterpretq_s8_s64(vzip1q_s64(h0, h1));
            x[tp][3] = vreinterpretq_s8_s64(vzip2q_s64(h0, h1));
        }
        const int32x4_t cv = vld1q_s32(corr + b * P16_TG);
        const int32x4_t c01 = vcombine_s32(vget_low_s32(cv), vget_low_s32(cv));
        const int32x4_t c23 = vcombine_s32(vget_high_s32(cv), vget_high_s32(cv));
        const float32x4_t da = vld1q_f32(dact + b * P16_TG);
        const float32x4_t da01 = vcombine_f32(vget_low_f32(da), vget_low_f32(da));
        const float32x4_t da23 = vcombine_f32(vget_high_f32(da), vget_high_f32(da));
        const float16x8_t hw = vreinterpretq_f16_u8(vld1q_u8(dwp));
        const float32x4_t dwq[2] = { vcvt_f32_f16(vget_low_f16(hw)), vcvt_high_f32_f16(hw) };
        MM_QUARTER(0, c0, c1, c2, c3);
        MM_QUARTER(1, c4, c5, c6, c7);
    }
    acc[0] = c0;
    acc[1] = c1;
    acc[2] = c2;
    acc[3] = c3;
    acc[4] = c4;
    acc[5] = c5;
    acc[6] = c6;
    acc[7] = c7;
}

/* one tile for q16x4_prefill: the SMMLA accumulators hold 2 rows x 2 tokens each, so the partial
 * sums are regrouped with zips when read from y and unzipped into per-token rows when written */
static void mm_tile(int nbc, const uint8_t *w, const uint8_t *dw, const uint8_t *const ap[4], const int32_t *corr,
                    const float *dact, float *const yp[4], int tv, int resume) {
    float32x4_t acc[8];
    for (int i = 0; i < 8; i++) acc[i] = vdupq_n_f32(0.0f);
    if (resume) /* rows 4k.. of tokens 2tp, 2tp+1 -> row pairs 2k, 2k+1 of token pair tp */
        for (int k = 0; k < 2; k++)
            for (int tp = 0; tp < 2; tp++) {
                const float32x4_t u = vld1q_f32(yp[2 * tp] + 4 * k), v = vld1q_f32(yp[2 * tp + 1] + 4 * k);
                acc[2 * (2 * k) + tp] = vzip1q_f32(u, v);
                acc[2 * (2 * k + 1) + tp] = vzip2q_f32(u, v);
            }
    mm_tile8x4(nbc, w, dw, ap, corr, dact, acc);
    for (int k = 0; k < 2; k++)
        for (int tp = 0; tp < 2; tp++) {
            const float32x4_t e = acc[2 * (2 * k) + tp], o = acc[2 * (2 * k + 1) + tp];
            if (2 * tp < tv) vst1q_f32(yp[2 * tp] + 4 * k, vuzp1q_f32(e, o));
            if (2 * tp + 1 < tv) vst1q_f32(yp[2 * tp + 1] + 4 * k, vuzp2q_f32(e, o));
        }
}

void kz_i8mm_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                           int64_t ldy) {
    if (nt >= 2) {
        q16x4_prefill(n, pk, nr, a, as, nt, y, ldy, mm_tile); /* the SDOT kernel's loop, SMMLA tiles */
        return;
    }
    kz_dotprod_gemm_q4_0_16x4(n, pk, nr, a, as, nt, y, ldy); /* decode: lane = row SDOT GEMV */
}

#else
typedef int kz_quant_arm_p16_i8mm_unused; /* not AArch64: nothing to build */
#endif
