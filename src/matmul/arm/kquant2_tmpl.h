/* Q2_K / Q3_K / IQ4_XS x Q8_K dots for arm64, included by arm/neon.c (NEON: vmull_s8 pairs)
 * and arm/dotprod.c (SDOT) with K2(name) naming the variant and K2_DOT16(w, a) giving the
 * exact int32 sum of 16 int8 products. Weights are decoded 16 at a time (one sub-block of 16 =
 * one scale); isum and the float ops are those of the scalar reference in ref/kquant.c. */
#include "matmul/arm/simd.h"

static inline float k2_h2f(const uint8_t *p) { return kz_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
static inline float k2_act_d(const uint8_t *a) { float d; memcpy(&d, a, 4); return d; }

float K2(dot_q2_K)(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 84, y += 292) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        int32_t isum = 0, summ = 0;
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x + 16 + 32 * h), q1 = vld1q_u8(x + 16 + 32 * h + 16);
            for (int g = 0; g < 4; g++) {
                const int s = 8 * h + 2 * g;
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                const int8x16_t w0 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q0, sh), m3));
                const int8x16_t w1 = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q1, sh), m3));
                const int8_t *ap = q8 + 128 * h + 32 * g;
                isum += (x[s] & 0xF) * K2_DOT16(w0, vld1q_s8(ap));
                isum += (x[s + 1] & 0xF) * K2_DOT16(w1, vld1q_s8(ap + 16));
            }
        }
        for (int s = 0; s < 16; s++) {
            int16_t b;
            memcpy(&b, y + 260 + 2 * s, 2);
            summ += (x[s] >> 4) * b;
        }
        const float da = k2_act_d(y);
        acc += (da * k2_h2f(x + 80)) * (float)isum - (da * k2_h2f(x + 82)) * (float)summ;
    }
    return acc;
}

float K2(dot_q3_K)(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 110, y += 292) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        const uint8_t *s12 = x + 96;
        int sc[16];
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
            sc[j] = (lo | (((s12[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        }
        const uint8x16_t hm0 = vld1q_u8(x), hm1 = vld1q_u8(x + 16);
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(x + 32 + 32 * h), q1 = vld1q_u8(x + 32 + 32 * h + 16);
            for (int g = 0; g < 4; g++) {
                const int s = 8 * h + 2 * g;
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + g)));
                const int8x16_t w0 = vreinterpretq_s8_u8(
                    vsubq_u8(vandq_u8(vshlq_u8(q0, sh), m3), vbicq_u8(four, vtstq_u8(hm0, bit))));
                const int8x16_t w1 = vreinterpretq_s8_u8(
                    vsubq_u8(vandq_u8(vshlq_u8(q1, sh), m3), vbicq_u8(four, vtstq_u8(hm1, bit))));
                const int8_t *ap = q8 + 128 * h + 32 * g;
                isum += sc[s] * K2_DOT16(w0, vld1q_s8(ap));
                isum += sc[s + 1] * K2_DOT16(w1, vld1q_s8(ap + 16));
            }
        }
        acc += (k2_act_d(y) * k2_h2f(x + 108)) * (float)isum;
    }
    return acc;
}

float K2(dot_iq4_xs)(const void *w, const void *a, int64_t n) {
    static const int8_t kvt[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    const int8x16_t kv = vld1q_s8(kvt);
    const uint8x16_t m15 = vdupq_n_u8(15);
    const uint8_t *x = w, *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 136, y += 292) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        const int shb = x[2] | (x[3] << 8);
        int32_t isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((shb >> (2 * ib)) & 3) << 4))) - 32;
            const uint8x16_t b = vld1q_u8(x + 8 + 16 * ib);
            const int8x16_t w0 = vqtbl1q_s8(kv, vandq_u8(b, m15)), w1 = vqtbl1q_s8(kv, vshrq_n_u8(b, 4));
            const int32_t p = K2_DOT16(w0, vld1q_s8(q8 + 32 * ib)) + K2_DOT16(w1, vld1q_s8(q8 + 32 * ib + 16));
            isum += ls * p;
        }
        acc += (k2_act_d(y) * k2_h2f(x)) * (float)isum;
    }
    return acc;
}

#define K2_GEMM(nm, dot)                                                                          \
    void K2(nm)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
                float *y, int64_t ldy) {                                                          \
        for (int64_t r = 0; r < nr; r++)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                      \
                y[t * ldy + r] = K2(dot)((const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as, n); \
    }
K2_GEMM(gemm_q2_K, dot_q2_K)
K2_GEMM(gemm_q3_K, dot_q3_K)
K2_GEMM(gemm_iq4_xs, dot_iq4_xs)
