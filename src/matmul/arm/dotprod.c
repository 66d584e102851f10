/* AArch64 SDOT (FEAT_DotProd) kernels of every block type, and the q4_0_16x4 gemm of the
 * dotprod and i8mm levels. The Makefile builds this unit with -march=armv8.2-a+dotprod; traits.c
 * hands its kernels out only where cpu.c found asimddp. Contracts: kernels.h. */

#include "matmul/kernels.h"

#if defined(__aarch64__)
#include "matmul/arm/simd.h"

#if !defined(__ARM_FEATURE_DOTPROD)
#error "dotprod.c needs -march=armv8.2-a+dotprod (see the Makefile)"
#endif

/* ======== Q8_0 / Q4_0 ======== */
/* arm/b32_tmpl.h with vdotq_s32 block dots */
#define AQ(name) name##_dotprod
#define AQ_EXPORT(name) kz_dotprod_##name
#define AQ_SDOT 1
#include "matmul/arm/b32_tmpl.h"

#undef AQ
#undef AQ_EXPORT
#undef AQ_SDOT

/* ======== Q4_1 / Q5_0 / Q5_1 / IQ4_NL ======== */
/* arm/b32_legacy_tmpl.h with vdotq_s32 block dots */
#define LA(name) legacy_##name##_dotprod
#define LA_EXPORT(name) kz_dotprod_##name
#define LA_SDOT 1
#include "matmul/arm/b32_legacy_tmpl.h"

/* ======== Q4_K / Q5_K / Q6_K ======== */
/* arm/kquant_tmpl.h with SDOT */
#define KA_DOT32(w0, w1, a0, a1) vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1))
#define KA_DOT32V(w0, w1, a0, a1) vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1)
#define KA_DOT16V(w, a) vdotq_s32(vdupq_n_s32(0), w, a)
#define KA(name) kq_##name##_dotprod
#define KA_EXPORT(name) kz_dotprod_##name
#include "matmul/arm/kquant_tmpl.h"

/* ======== Q2_K / Q3_K / IQ4_XS ======== */
/* arm/kquant2_tmpl.h with SDOT */
#define K2(nm) kz_dotprod_##nm
#define K2_DOT16(w, a) vaddvq_s32(vdotq_s32(vdupq_n_s32(0), (w), (a)))
#include "matmul/arm/kquant2_tmpl.h"

/* GCC's pre-RA scheduler hoists all 16 nibble decodes of a block ahead of the dots and then
 * spills the accumulators every block (GCC 12, objdump of the tile loops); without it the
 * loops stay in registers. Out-of-order cores reorder on their own. From here to the end of
 * the file only: the q4_0_16x4 kernels. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif

/* ======== Q4_0 in the q4_0_16x4 layout ======== */
/* AArch64 SDOT (FEAT_DotProd) gemm over the 16-row packed Q4_0 layout (kz_repack_q4_0_16x4), the
 * kernel of the dotprod and i8mm levels for repacked weights. Lane = weight row: dword j of 4
 * consecutive rows is one 16-byte load (rows' nibbles of elements 4j..4j+3 low, 16+4j.. high),
 * and vdotq_laneq_s32 with lane j of the activation's 16 low (high) bytes adds each row's
 * 4-element partial dot into its own int32 lane: no horizontal sums, and the 16 rows' scales
 * are one contiguous load. Unsigned nibbles with the -8 * sum(a) correction, float part per
 * lane as the reference (arm/q4_0_16x4_tmpl.h), so every output equals the scalar Q4_0 x Q8_0
 * vec_dot bit for bit.
 *   decode (1 token): 16 rows per step, streaming each group's blocks once;
 *   prefill: register tile 8 rows x 4 tokens, each weight block decoded once per tile. */
#include "matmul/arm/q4_0_16x4_tmpl.h"

/* one dword j (a literal: the SDOT lane) of one block, rows 4k..4k+3 for k < 4 */
#define GV_DW(j)                                                                                  \
    do {                                                                                          \
        KZ_UNROLL(4)                                                                              \
        for (int k = 0; k < 4; k++) {                                                             \
            const uint8x16_t q = vld1q_u8(p + 64 * (j) + 16 * k);                                 \
            s[k] = vdotq_laneq_s32(s[k], vreinterpretq_s8_u8(vandq_u8(q, m)), alo, j);            \
            s[k] = vdotq_laneq_s32(s[k], vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), ahi, j);          \
        }                                                                                         \
    } while (0)

/* one activation row against nr (a multiple of 16) packed rows */
static void q16x4_gemv(int64_t nb, const uint8_t *pk, int64_t nr, const uint8_t *a, float *y) {
    const uint8x16_t m = vdupq_n_u8(15);
    int32_t corr[Q16X4_CH];
    float dact[Q16X4_CH];
    for (int64_t b0 = 0; b0 < nb; b0 += Q16X4_CH) {
        const int nbc = nb - b0 < Q16X4_CH ? (int)(nb - b0) : Q16X4_CH;
        for (int b = 0; b < nbc; b++) {
            corr[b] = q16x4_corr(a + (size_t)(b0 + b) * 34);
            dact[b] = kz_fp16_to_f32(ld16(a + (size_t)(b0 + b) * 34));
        }
        for (int64_t g = 0; g < nr / 16; g++) {
            const uint8_t *p = pk + ((size_t)g * (size_t)nb + (size_t)b0) * Q16X4_BB;
            float *yg = y + 16 * g;
            float32x4_t acc[4];
            KZ_UNROLL(4)
            for (int k = 0; k < 4; k++) acc[k] = b0 ? vld1q_f32(yg + 4 * k) : vdupq_n_f32(0.0f);
            for (int b = 0; b < nbc; b++, p += Q16X4_BB) {
                const uint8_t *ab = a + (size_t)(b0 + b) * 34;
                const int8x16_t alo = vld1q_s8((const int8_t *)(ab + 2)), ahi = vld1q_s8((const int8_t *)(ab + 18));
                int32x4_t s[4];
                s[0] = vdupq_n_s32(corr[b]);
                s[1] = s[0];
                s[2] = s[0];
                s[3] = s[0];
                GV_DW(0);
                GV_DW(1);
                GV_DW(2);
                GV_DW(3);
                float32x4_t dw[4];
                q16x4_dw(p, dw);
                KZ_UNROLL(4)
                for (int k = 0; k < 4; k++)
                    acc[k] = vaddq_f32(acc[k], vmulq_f32(vcvtq_f32_s32(s[k]), vmulq_n_f32(dw[k], dact[b])));
            }
            KZ_UNROLL(4)
            for (int k = 0; k < 4; k++) vst1q_f32(yg + 4 * k, acc[k]);
        }
    }
}

/* low (sh = 0) or high (sh = 1) nibbles of dword j (a literal) of rows 8h..8h+7 against the
 * 4 tokens' activation bytes av (elements 0..15 or 16..31) */
#define TL_DW(j, sh)                                                                              \
    do {                                                                                          \
        KZ_UNROLL(2)                                                                              \
        for (int k = 0; k < 2; k++) {                                                             \
            const uint8x16_t q = vld1q_u8(p + 64 * (j) + 16 * k);                                 \
            const int8x16_t w = vreinterpretq_s8_u8((sh) ? vshrq_n_u8(q, 4) : vandq_u8(q, m));    \
            KZ_UNROLL(4)                                                                          \
            for (int t = 0; t < 4; t++) s[k][t] = vdotq_laneq_s32(s[k][t], w, av[t], j);          \
        }                                                                                         \
    } while (0)

/* 8 rows (p: the first block, already offset to the half-group) x 4 tokens over nbc blocks;
 * acc[2 t + k] = rows 4k..4k+3 of token t. corr/dact: [b * Q16X4_TG + t], t from the tile's
 * first token. */
static __attribute__((noinline)) void q16x4_tile8x4(int nbc, const uint8_t *p, const uint8_t *dwp, const uint8_t *const ap[4],
                        const int32_t *corr, const float *dact, float32x4_t acc[8]) {
    const uint8x16_t m = vdupq_n_u8(15);
    /* accumulators as locals (an array reached through the pointer is kept in memory) */
    float32x4_t c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3], c4 = acc[4], c5 = acc[5], c6 = acc[6], c7 = acc[7];
    for (int b = 0; b < nbc; b++, p += Q16X4_BB, dwp += Q16X4_BB) {
        const int32x4_t cv = vld1q_s32(corr + b * Q16X4_TG);
        int32x4_t s[2][4];
        s[0][0] = s[1][0] = vdupq_laneq_s32(cv, 0);
        s[0][1] = s[1][1] = vdupq_laneq_s32(cv, 1);
        s[0][2] = s[1][2] = vdupq_laneq_s32(cv, 2);
        s[0][3] = s[1][3] = vdupq_laneq_s32(cv, 3);
        int8x16_t av[4];
        KZ_UNROLL(4)
        for (int t = 0; t < 4; t++) av[t] = vld1q_s8((const int8_t *)(ap[t] + (size_t)b * 34 + 2));
        TL_DW(0, 0);
        TL_DW(1, 0);
        TL_DW(2, 0);
        TL_DW(3, 0);
        KZ_UNROLL(4)
        for (int t = 0; t < 4; t++) av[t] = vld1q_s8((const int8_t *)(ap[t] + (size_t)b * 34 + 18));
        TL_DW(0, 1);
        TL_DW(1, 1);
        TL_DW(2, 1);
        TL_DW(3, 1);
        const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(dwp));
        const float32x4_t dw0 = vcvt_f32_f16(vget_low_f16(h)), dw1 = vcvt_high_f32_f16(h);
        const float32x4_t da = vld1q_f32(dact + b * Q16X4_TG);
        c0 = vaddq_f32(c0, vmulq_f32(vcvtq_f32_s32(s[0][0]), vmulq_laneq_f32(dw0, da, 0)));
        c1 = vaddq_f32(c1, vmulq_f32(vcvtq_f32_s32(s[1][0]), vmulq_laneq_f32(dw1, da, 0)));
        c2 = vaddq_f32(c2, vmulq_f32(vcvtq_f32_s32(s[0][1]), vmulq_laneq_f32(dw0, da, 1)));
        c3 = vaddq_f32(c3, vmulq_f32(vcvtq_f32_s32(s[1][1]), vmulq_laneq_f32(dw1, da, 1)));
        c4 = vaddq_f32(c4, vmulq_f32(vcvtq_f32_s32(s[0][2]), vmulq_laneq_f32(dw0, da, 2)));
        c5 = vaddq_f32(c5, vmulq_f32(vcvtq_f32_s32(s[1][2]), vmulq_laneq_f32(dw1, da, 2)));
        c6 = vaddq_f32(c6, vmulq_f32(vcvtq_f32_s32(s[0][3]), vmulq_laneq_f32(dw0, da, 3)));
        c7 = vaddq_f32(c7, vmulq_f32(vcvtq_f32_s32(s[1][3]), vmulq_laneq_f32(dw1, da, 3)));
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

/* one tile for q16x4_prefill: partial sums in and out as 8 rows per token (lane = row) */
static void q16x4_tile(int nbc, const uint8_t *w, const uint8_t *dw, const uint8_t *const ap[4], const int32_t *corr,
                     const float *dact, float *const yp[4], int tv, int resume) {
    float32x4_t acc[8];
    for (int t = 0; t < 4; t++) {
        acc[2 * t] = resume ? vld1q_f32(yp[t]) : vdupq_n_f32(0.0f);
        acc[2 * t + 1] = resume ? vld1q_f32(yp[t] + 4) : vdupq_n_f32(0.0f);
    }
    q16x4_tile8x4(nbc, w, dw, ap, corr, dact, acc);
    for (int t = 0; t < tv; t++) {
        vst1q_f32(yp[t], acc[2 * t]);
        vst1q_f32(yp[t] + 4, acc[2 * t + 1]);
    }
}

void kz_dotprod_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                              int64_t ldy) {
    if (nt >= 2) {
        q16x4_prefill(n, pk, nr, a, as, nt, y, ldy, q16x4_tile);
        return;
    }
    if (nt == 1) q16x4_gemv(n / 32, pk, nr, a, y);
}

#else
typedef int kz_matmul_arm_dotprod_unused; /* not AArch64: nothing to build */
#endif
