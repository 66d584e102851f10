/* AArch64 SMMLA (FEAT_I8MM) GEMM for Q8_0 / Q4_0 x Q8_0: 4 weight rows x 4 tokens per register
 * tile, as four 2x2 SMMLA sub-tiles (each vmmlaq_s32 is a 2x8 by 8x2 int8 product, 32 MACs).
 * Decode (1 token) and token leftovers go to the SDOT kernels. The Makefile builds this file
 * with -march=armv8.2-a+dotprod+i8mm; dispatch calls it only when the CPU reports i8mm and
 * asimddp.
 *
 * Exactness: each 2x2 result lane is the exact integer block dot of one (row, token) pair;
 * the float part is the scalar reference's, lane by lane (no FMA), so results are bit-identical
 * to the scalar reference and to the dotprod kernels. Lanes of a sub-tile: (r0,t0), (r0,t1),
 * (r1,t0), (r1,t1). */
#include "matmul/kernels.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "quant_arm_i8mm.c needs -march=armv8.2-a+dotprod+i8mm (see the Makefile)"
#endif

#include "matmul/arm/b32_tmpl.h"

/* a block pair as SMMLA operands: m[j] = (row0 k 8j..8j+7 | row1 k 8j..8j+7), j = 0..3 */
typedef struct {
    int8x16_t m[4];
} mm_pair;

KZ_INL mm_pair mm_zip(arm_blk x0, arm_blk x1) {
    mm_pair p;
    const int64x2_t l0 = vreinterpretq_s64_s8(x0.lo), l1 = vreinterpretq_s64_s8(x1.lo);
    const int64x2_t h0 = vreinterpretq_s64_s8(x0.hi), h1 = vreinterpretq_s64_s8(x1.hi);
    p.m[0] = vreinterpretq_s8_s64(vzip1q_s64(l0, l1));
    p.m[1] = vreinterpretq_s8_s64(vzip2q_s64(l0, l1));
    p.m[2] = vreinterpretq_s8_s64(vzip1q_s64(h0, h1));
    p.m[3] = vreinterpretq_s8_s64(vzip2q_s64(h0, h1));
    return p;
}

KZ_INL int32x4_t mm_dot(mm_pair w, mm_pair a) {
    int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), w.m[0], a.m[0]);
    s = vmmlaq_s32(s, w.m[1], a.m[1]);
    s = vmmlaq_s32(s, w.m[2], a.m[2]);
    return vmmlaq_s32(s, w.m[3], a.m[3]);
}

/* acc[2 * rp + tp]: rows 2rp, 2rp+1 x tokens 2tp, 2tp+1 */
KZ_INL void tile4x4_i8mm(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4],
                         float32x4_t acc[4]) {
    const size_t wbs = q4 ? 18 : 34;
    float32x4_t c[4];
    for (int i = 0; i < 4; i++) c[i] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs, oa = (size_t)b * 34;
        const mm_pair w01 = mm_zip(arm_wload(q4, w[0] + o), arm_wload(q4, w[1] + o));
        const mm_pair w23 = mm_zip(arm_wload(q4, w[2] + o), arm_wload(q4, w[3] + o));
        const mm_pair a01 = mm_zip(arm_aload(a[0] + oa), arm_aload(a[1] + oa));
        const mm_pair a23 = mm_zip(arm_aload(a[2] + oa), arm_aload(a[3] + oa));
        const float32x4_t dw = arm_d4(w[0] + o, w[1] + o, w[2] + o, w[3] + o);
        const float32x4_t da = arm_d4(a[0] + oa, a[1] + oa, a[2] + oa, a[3] + oa);
        /* scale lanes (r, t) in sub-tile order: dw = [r0 r0 r1 r1], da = [t0 t1 t0 t1] */
        const float32x4_t dw01 = vzip1q_f32(dw, dw), dw23 = vzip2q_f32(dw, dw);
        const float32x4_t da01 = vcombine_f32(vget_low_f32(da), vget_low_f32(da));
        const float32x4_t da23 = vcombine_f32(vget_high_f32(da), vget_high_f32(da));
        const int32x4_t s0 = mm_dot(w01, a01), s1 = mm_dot(w01, a23), s2 = mm_dot(w23, a01), s3 = mm_dot(w23, a23);
        c[0] = vaddq_f32(c[0], vmulq_f32(vcvtq_f32_s32(s0), vmulq_f32(dw01, da01)));
        c[1] = vaddq_f32(c[1], vmulq_f32(vcvtq_f32_s32(s1), vmulq_f32(dw01, da23)));
        c[2] = vaddq_f32(c[2], vmulq_f32(vcvtq_f32_s32(s2), vmulq_f32(dw23, da01)));
        c[3] = vaddq_f32(c[3], vmulq_f32(vcvtq_f32_s32(s3), vmulq_f32(dw23, da23)));
    }
    for (int i = 0; i < 4; i++) acc[i] = c[i];
}

KZ_INL void gemm_i8mm(const int q4, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                      int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / 32, nt4 = nt - nt % 4;
    for (int64_t r0 = 0; r0 < nr && nt4 > 0; r0 += 4) {
        const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;
        const uint8_t *wp[4];
        for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        for (int64_t t0 = 0; t0 < nt4; t0 += 4) {
            const uint8_t *ap[4];
            for (int t = 0; t < 4; t++) ap[t] = a + (size_t)(t0 + t) * as;
            float32x4_t acc[4];
            tile4x4_i8mm(q4, nb, wp, ap, acc);
            float out[16];
            for (int i = 0; i < 4; i++) vst1q_f32(out + 4 * i, acc[i]);
            for (int rp = 0; rp < 2; rp++)
                for (int tp = 0; tp < 2; tp++)
                    for (int i = 0; i < 4; i++) {
                        const int r = 2 * rp + (i >> 1), t = 2 * tp + (i & 1);
                        if (r < nv) y[(t0 + t) * ldy + r0 + r] = out[4 * (2 * rp + tp) + i];
                    }
        }
    }
    if (nt4 < nt) {
        if (q4) kz_dotprod_gemm_q4_0(n, w, ws, nr, a + (size_t)nt4 * as, as, nt - nt4, y + nt4 * ldy, ldy);
        else kz_dotprod_gemm_q8_0(n, w, ws, nr, a + (size_t)nt4 * as, as, nt - nt4, y + nt4 * ldy, ldy);
    }
}

void kz_i8mm_gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                       float *y, int64_t ldy) {
    gemm_i8mm(0, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_i8mm_gemm_q4_0(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                       float *y, int64_t ldy) {
    gemm_i8mm(1, n, w, ws, nr, a, as, nt, y, ldy);
}

#else
typedef int kz_quant_arm_i8mm_unused; /* not AArch64: nothing to build */
#endif
