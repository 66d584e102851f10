/* AArch64 baseline NEON kernels of every block type (Advanced SIMD is mandatory in AArch64:
 * no extra flags): activation quantizers, float dots, integer dots without SDOT. dotprod.c and
 * i8mm.c hold the variants the Makefile builds with the matching -march; traits.c hands them
 * out only where cpu.c found the feature. Contracts: kernels.h. */

#include "matmul/kernels.h"

#if defined(__aarch64__)
#include "matmul/arm/simd.h"

/* ======== F32 / F16 / BF16, Q8_0 / Q4_0 ======== */
/* Activation quantizers give the reference bytes; float dots sum 4-lane float partials over
 * chunks of 128 elements, flush each chunk into double and round once (gemm == dot bit for bit);
 * the integer dots are the arm/b32_tmpl.h template with vmull_s8 block dots. */

#define AQ(name) name##_neon
#define AQ_EXPORT(name) kz_neon_##name
#define AQ_SDOT 0
#include "matmul/arm/b32_tmpl.h"
#undef AQ
#undef AQ_EXPORT
#undef AQ_SDOT

/* ---------------- activation conversion ---------------- */

/* f32 -> Q8_0 blocks, the reference's arithmetic: amax ignores NaN, d = amax / 127,
 * id = 1 / d, q = roundf(x * id) (FRINTA: half away from zero) clamped to +-127, NaN -> 0. */
size_t kz_neon_quant_q8_0(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    const float32x4_t lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    for (int64_t ib = 0; ib < n / 32; ib++, b += 34, x += 32) {
        float32x4_t v[8];
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(x + 4 * j);
            /* NaN lanes -> 0 before the max (FMAX would propagate them) */
            const uint32x4_t ok = vceqq_f32(v[j], v[j]);
            m = vmaxq_f32(m, vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vabsq_f32(v[j])), ok)));
        }
        const float amax = vmaxvq_f32(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = kz_f32_to_fp16(d);
        memcpy(b, &h, 2);
        int16x8_t q16[4];
        for (int j = 0; j < 4; j++) {
            int32x4_t q[2];
            for (int k = 0; k < 2; k++) {
                /* FMAX / FMIN keep a NaN, FCVTAS (round half away, as roundf) makes it 0 */
                const float32x4_t t = vminq_f32(vmaxq_f32(vmulq_n_f32(v[2 * j + k], id), lo), hi);
                q[k] = vcvtaq_s32_f32(t);
            }
            q16[j] = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
        }
        vst1q_s8((int8_t *)(b + 2), vcombine_s8(vmovn_s16(q16[0]), vmovn_s16(q16[1])));
        vst1q_s8((int8_t *)(b + 18), vcombine_s8(vmovn_s16(q16[2]), vmovn_s16(q16[3])));
    }
    return (size_t)(n / 32) * 34;
}

/* fp16 -> f32 with FCVTL (exact, as the reference); groups holding an inf/NaN half go through
 * the reference, which keeps a signalling NaN's payload where FCVTL would quiet it */
void kz_neon_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint16_t h[4];
        memcpy(h, s + 2 * i, 8);
        const uint16x4_t hv = vld1_u16(h);
        if (vmaxv_u16(vceq_u16(vand_u16(hv, vdup_n_u16(0x7c00)), vdup_n_u16(0x7c00)))) {
            for (int j = 0; j < 4; j++) dst[i + j] = kz_fp16_to_f32(h[j]);
            continue;
        }
        vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(hv)));
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = kz_fp16_to_f32(h);
    }
}

/* f32 -> fp16 with FCVTN (round to nearest even under the default FPCR); NaN lanes go
 * through the reference (0x7e00 | sign) */
size_t kz_neon_quant_f16(const float *x, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        if (vminvq_u32(vceqq_f32(v, v)) == 0) {
            for (int j = 0; j < 4; j++) {
                const uint16_t h = kz_f32_to_fp16(x[i + j]);
                memcpy(d + 2 * (i + j), &h, 2);
            }
            continue;
        }
        uint16_t h[4];
        vst1_u16(h, vreinterpret_u16_f16(vcvt_f16_f32(v)));
        memcpy(d + 2 * i, h, 8);
    }
    for (; i < n; i++) {
        const uint16_t h = kz_f32_to_fp16(x[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

/* f32 -> bf16: the reference's integer rounding (RNE on the low 16 bits, NaN -> quiet) */
size_t kz_neon_quant_bf16(const float *x, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    const uint32x4_t c7fff = vdupq_n_u32(0x7fff), c1 = vdupq_n_u32(1), inf = vdupq_n_u32(0x7f800000u);
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i));
        const uint32x4_t r = vaddq_u32(vaddq_u32(u, c7fff), vandq_u32(vshrq_n_u32(u, 16), c1));
        const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), inf);
        const uint32x4_t v = vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(64u << 16)), r);
        uint16_t h[4];
        vst1_u16(h, vshrn_n_u32(v, 16));
        memcpy(d + 2 * i, h, 8);
    }
    for (; i < n; i++) {
        const uint16_t h = kz_f32_to_bf16(x[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

/* ---------------- float dots (F32 x F32, F16 x F16, BF16 x BF16) ---------------- */

enum { K_F32 = 0, K_F16 = 1, K_BF16 = 2 };
#define FCHUNK 32 /* vectors of 4 per float chunk: 128 elements, then flushed into double */

KZ_INL float32x4_t fload4(const int k, const uint8_t *p) {
    if (k == K_F32) {
        float f[4];
        memcpy(f, p, 16);
        return vld1q_f32(f);
    }
    uint16_t h[4];
    memcpy(h, p, 8);
    const uint16x4_t v = vld1_u16(h);
    if (k == K_F16) return vcvt_f32_f16(vreinterpret_f16_u16(v));
    return vreinterpretq_f32_u32(vshll_n_u16(v, 16));
}

static inline float fel(const int k, const uint8_t *p, int64_t i) {
    if (k == K_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    return k == K_F16 ? kz_fp16_to_f32(ld16(p + 2 * i)) : kz_bf16_to_f32(ld16(p + 2 * i));
}

/* R weight rows x T activation rows (R <= 4, T <= 2); out[t * R + r] */
KZ_INL void ftile(const int k, const int R, const int T, int64_t n, const uint8_t *const *w, const uint8_t *const *a,
                  float *out) {
    const size_t es = k == K_F32 ? 4 : 2;
    const int64_t nv = n / 4;
    float64x2_t dacc[8];
    for (int p = 0; p < R * T; p++) dacc[p] = vdupq_n_f64(0.0);
    for (int64_t v0 = 0; v0 < nv; v0 += FCHUNK) {
        const int64_t v1 = nv - v0 < FCHUNK ? nv : v0 + FCHUNK;
        float32x4_t acc[8];
        for (int p = 0; p < R * T; p++) acc[p] = vdupq_n_f32(0.0f);
        for (int64_t v = v0; v < v1; v++) {
            const size_t o = (size_t)v * 4 * es;
            float32x4_t xw[4], xa[2];
            KZ_UNROLL(4)
            for (int r = 0; r < R; r++) xw[r] = fload4(k, w[r] + o);
            KZ_UNROLL(2)
            for (int t = 0; t < T; t++) xa[t] = fload4(k, a[t] + o);
            KZ_UNROLL(2)
            for (int t = 0; t < T; t++)
                KZ_UNROLL(4)
                for (int r = 0; r < R; r++) acc[t * R + r] = vfmaq_f32(acc[t * R + r], xw[r], xa[t]);
        }
        for (int p = 0; p < R * T; p++)
            dacc[p] = vaddq_f64(dacc[p], vaddq_f64(vcvt_f64_f32(vget_low_f32(acc[p])), vcvt_high_f64_f32(acc[p])));
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            double s = vgetq_lane_f64(dacc[t * R + r], 0) + vgetq_lane_f64(dacc[t * R + r], 1);
            for (int64_t i = nv * 4; i < n; i++) s += (double)fel(k, w[r], i) * fel(k, a[t], i);
            out[t * R + r] = (float)s;
        }
}

KZ_TILE_GEMM_4X2(, fgemm, ftile)

#define FKERNELS(name, k)                                                                          \
    float kz_neon_dot_##name(const void *w, const void *a, int64_t n) {                            \
        const uint8_t *wp[1] = { w }, *ap[1] = { a };                                              \
        float out;                                                                                 \
        ftile(k, 1, 1, n, wp, ap, &out);                                                           \
        return out;                                                                                \
    }                                                                                              \
    void kz_neon_gemm_##name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,       \
                             size_t as, int64_t nt, float *y, int64_t ldy) {                       \
        fgemm(k, n, w, ws, nr, a, as, nt, y, ldy);                                                 \
    }
FKERNELS(f32, K_F32)
FKERNELS(f16, K_F16)
FKERNELS(bf16, K_BF16)

/* ======== Q4_1 / Q5_0 / Q5_1 / IQ4_NL ======== */
/* arm/b32_legacy_tmpl.h with vmull_s8 block dots */
#define LA(name) legacy_##name##_neon
#define LA_EXPORT(name) kz_neon_##name
#define LA_SDOT 0
#include "matmul/arm/b32_legacy_tmpl.h"

/* ======== Q4_K / Q5_K / Q6_K ======== */
/* arm/kquant_tmpl.h with SMULL/SMLAL pair products */
static inline int32_t kzk_dot32_neon(int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
    p = vmlal_s8(p, vget_high_s8(w0), vget_high_s8(a0));
    int16x8_t q = vmull_s8(vget_low_s8(w1), vget_low_s8(a1));
    q = vmlal_s8(q, vget_high_s8(w1), vget_high_s8(a1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p), q));
}
#define KA_DOT32(w0, w1, a0, a1) kzk_dot32_neon(w0, w1, a0, a1)
#define KA(name) kq_##name##_neon
#define KA_EXPORT(name) kz_neon_##name
#include "matmul/arm/kquant_tmpl.h"

/* ======== Q2_K / Q3_K / IQ4_XS ======== */
/* arm/kquant2_tmpl.h with 16 int8 products via vmull_s8 (each |w*a| <= 127*128, a pair <=
 * 32512: exact in int16), widened pairwise to int32 */
static inline int32_t k2_neon_dot16(int8x16_t w, int8x16_t a) {
    const int16x8_t p = vaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a));
    return vaddvq_s32(vpaddlq_s16(p));
}
#define K2(nm) kz_neon_##nm
#define K2_DOT16(w, a) k2_neon_dot16(w, a)
#include "matmul/arm/kquant2_tmpl.h"

#else
typedef int kz_matmul_arm_neon_unused; /* not AArch64: nothing to build */
#endif
