/* 32-element block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL. Scalar reference dequantize,
 * the quantizers llama-quantize runs (quantize_row_*_ref; IQ4_NL: quantize_iq4_nl with ntry = 7,
 * no imatrix), and the reference dots every SIMD level reproduces.
 *
 * Block layouts (ggml): element j in the low nibble of qs[j], element j+16 in the high nibble;
 * Q5 types keep the 5th bit of element i in bit i of the little-endian u32 qh.
 *   Q8_0   34 B: fp16 d, int8 qs[32]              x = d*q
 *   Q4_0   18 B: fp16 d, qs[16]                   x = d*(q - 8)        (q 0..15)
 *   Q4_1   20 B: fp16 d, fp16 m, qs[16]           x = d*q + m          (q 0..15)
 *   Q5_0   22 B: fp16 d, qh[4], qs[16]            x = d*(q - 16)       (q 0..31)
 *   Q5_1   24 B: fp16 d, fp16 m, qh[4], qs[16]    x = d*q + m          (q 0..31)
 *   IQ4_NL 18 B: fp16 d, qs[16]                   x = d*kv[q]
 * Activations: Q4_1 / Q5_1 dot with Q8_1 (fp16 d, fp16 s = d*sum(a), int8 a[32]), the others
 * with Q8_0.
 *
 * Float op order of the dots (every SIMD level reproduces it lane by lane, no FMA):
 *   Q8_0, Q4_0, Q5_0, IQ4_NL:  s = s + (float)sumi * (d_w * d_a)
 *   Q4_1, Q5_1:                s = s + ((float)sumi * (d_w * d_a) + m_w * s_a)
 * with sumi the exact int32 block dot, blocks in order, s = 0 at the start. */
#include <math.h>
#include <string.h>

#include "sys/fp16.h"
#include "matmul/block.h"
#include "matmul/kernels.h"
#include "matmul/ref/ref.h"
#include "matmul/ref/act.h"
#include "model/types.h"

/* reference rounding: product and sum rounded separately (gguf-py, and the formula order) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QK 32
#define Q4_1_B 20
#define Q5_0_B 22
#define Q5_1_B 24
#define IQ4_NL_B 18
#define Q8_0_B 34
#define Q4_0_B 18

const int8_t kz_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};


/* the 32 codes of a block: nibbles (element order) plus the Q5 high bit when qh != NULL */
static inline void codes(const uint8_t *qs, const uint8_t *qh, int q[32]) {
    const uint32_t h = qh ? rd32(qh) : 0;
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0f) | (int)(((h >> j) & 1u) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((h >> (j + 16)) & 1u) << 4);
    }
}

/* ---------------- Q8_0 / Q4_0 ---------------- */

void kz_ref_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q8_0_B) {
        float d = h2f(b);
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < QK; j++) dst[ib * QK + j] = (float)qs[j] * d;
    }
}

void kz_ref_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_0_B) {
        float d = h2f(b);
        const uint8_t *qs = b + 2;
        float *y = dst + ib * QK;
        /* byte j: element j in the low nibble, element j+16 in the high nibble */
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
            y[j + QK / 2] = (float)((int)(qs[j] >> 4) - 8) * d;
        }
    }
}

/* The Q4_0 reference quantizer's rounding depends on whether x*id + 8.5f is contracted into an
 * FMA (see kz_quant_q4_0_ref): this file forbids contraction whatever the build flags, so the
 * default is the two-rounding form. */
size_t kz_ref_quant_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q8_0_B) {
        const float *x = src + ib * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) {
            float a = fabsf(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        f2h(b, d);
        int8_t *qs = (int8_t *)(b + 2);
        for (int j = 0; j < QK; j++) qs[j] = q8_round(x[j] * id);
    }
    return (size_t)(n / QK) * Q8_0_B;
}

/* Truncation of t (expected in [0, 16.5]) clamped to the nibble range; NaN -> 0. Equal to
 * min(15, (int8_t)t) of the reference for every finite t >= 0. */
static inline uint8_t q4_trunc(float t) {
    if (!(t >= 0.0f)) return 0;
    if (t >= 15.0f) return 15;
    return (uint8_t)t;
}

size_t kz_quant_q4_0_ref(const float *src, void *dst, int64_t n, int fused) {
    if (n < 0 || n % QK) return 0;
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_0_B) {
        const float *x = src + ib * QK;
        /* signed value of largest magnitude, first occurrence wins */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            float a = fabsf(x[j]);
            if (amax < a) {
                amax = a;
                max = x[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        f2h(b, d);
        uint8_t *qs = b + 2;
        for (int j = 0; j < QK / 2; j++) {
            float t0, t1;
            if (fused) {
                t0 = fmaf(x[j], id, 8.5f);
                t1 = fmaf(x[j + QK / 2], id, 8.5f);
            } else {
                /* two roundings: product to float, then the add (separate statements) */
                float p0 = x[j] * id;
                float p1 = x[j + QK / 2] * id;
                t0 = p0 + 8.5f;
                t1 = p1 + 8.5f;
            }
            qs[j] = (uint8_t)(q4_trunc(t0) | (q4_trunc(t1) << 4));
        }
    }
    return (size_t)(n / QK) * Q4_0_B;
}

size_t kz_ref_quant_q4_0(const float *src, void *dst, int64_t n) { return kz_quant_q4_0_ref(src, dst, n, 0); }

/* Integer dot per block, scaled by d_w * d_a in float, blocks summed in float. */
float kz_ref_dot_q8_0(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q8_0_B, y += Q8_0_B) {
        const int8_t *qx = (const int8_t *)(x + 2), *qy = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += (int32_t)qx[j] * (int32_t)qy[j];
        s += (float)sumi * (h2f(x) * h2f(y));
    }
    return s;
}

float kz_ref_dot_q4_0(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q4_0_B, y += Q8_0_B) {
        const uint8_t *qx = x + 2;
        const int8_t *qy = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += ((int32_t)(qx[j] & 0x0f) - 8) * qy[j];
            sumi += ((int32_t)(qx[j] >> 4) - 8) * qy[j + QK / 2];
        }
        s += (float)sumi * (h2f(x) * h2f(y));
    }
    return s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_q8_0, kz_ref_dot_q8_0)
KZ_SCALAR_GEMM(kz_ref_gemm_q4_0, kz_ref_dot_q4_0)

/* ---------------- dequantize ---------------- */

void kz_ref_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_1_B, dst += QK) {
        const float d = h2f(b), m = h2f(b + 2);
        codes(b + 4, NULL, q);
        for (int j = 0; j < QK; j++) dst[j] = d * (float)q[j] + m;
    }
}

void kz_ref_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q5_0_B, dst += QK) {
        const float d = h2f(b);
        codes(b + 6, b + 2, q);
        for (int j = 0; j < QK; j++) dst[j] = d * (float)(q[j] - 16);
    }
}

void kz_ref_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q5_1_B, dst += QK) {
        const float d = h2f(b), m = h2f(b + 2);
        codes(b + 8, b + 4, q);
        for (int j = 0; j < QK; j++) dst[j] = d * (float)q[j] + m;
    }
}

void kz_ref_dequant_iq4_nl(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += IQ4_NL_B, dst += QK) {
        const float d = h2f(b);
        codes(b + 2, NULL, q);
        for (int j = 0; j < QK; j++) dst[j] = d * (float)kz_iq4nl_values[q[j]];
    }
}

/* ---------------- reference quantizers ---------------- */

/* (int)t truncated toward zero, clamped to [0, hi]; NaN and negatives -> 0 (the reference's
 * uint8/int8 casts are only defined on [0, hi + 1) anyway, which finite inputs stay in) */
static inline int trunc_code(float t, int hi) {
    if (!(t >= 0.0f)) return 0;
    if (t >= (float)hi) return hi;
    return (int)t;
}

/* pack 32 codes (0..15 or 0..31): nibbles to qs, bit 4 to qh (if qh) */
void kz_ref_pack32(const int q[32], uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if (qh) {
        qh[0] = (uint8_t)h;
        qh[1] = (uint8_t)(h >> 8);
        qh[2] = (uint8_t)(h >> 16);
        qh[3] = (uint8_t)(h >> 24);
    }
}

/* min/max types: d = (max - min) / nmax, code = trunc((x - min) * id + 0.5) */
static void q_minmax_blk(const float *x, int nmax, uint8_t *dm, int q[32]) {
    float mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < QK; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    if (!(mn <= mx)) mn = mx = 0.0f; /* all NaN: a zero block, never UB */
    const float d = (mx - mn) / (float)nmax;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(dm, kz_f32_to_fp16(d));
    wr16(dm + 2, kz_f32_to_fp16(mn));
    for (int j = 0; j < QK; j++) {
        const float v = (x[j] - mn) * id;
        q[j] = trunc_code(v + 0.5f, nmax);
    }
}

size_t kz_ref_quant_q4_1(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_1_B, src += QK) {
        q_minmax_blk(src, 15, b, q);
        kz_ref_pack32(q, b + 4, NULL);
    }
    return (size_t)(n / QK) * Q4_1_B;
}

size_t kz_ref_quant_q5_1(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q5_1_B, src += QK) {
        q_minmax_blk(src, 31, b, q);
        kz_ref_pack32(q, b + 8, b + 4);
    }
    return (size_t)(n / QK) * Q5_1_B;
}

/* signed value of largest magnitude, first occurrence wins (strict '<') */
static float signed_absmax(const float *x, float *amax_out) {
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < QK; j++) {
        const float a = fabsf(x[j]);
        if (amax < a) {
            amax = a;
            mx = x[j];
        }
    }
    *amax_out = amax;
    return mx;
}

size_t kz_ref_quant_q5_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q5_0_B, src += QK) {
        float amax;
        const float mx = signed_absmax(src, &amax);
        const float d = mx / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(b, kz_f32_to_fp16(d));
        for (int j = 0; j < QK; j++) {
            const float v = src[j] * id; /* two roundings, as gguf-py */
            q[j] = trunc_code(v + 16.5f, 31);
        }
        kz_ref_pack32(q, b + 6, b + 2);
    }
    return (size_t)(n / QK) * Q5_0_B;
}

/* nearest codebook index, ties to the upper one (ggml's best_index_int8) */
int kz_ref_iq4_index(float v) {
    const int8_t *k = kz_iq4nl_values;
    if (!(v > k[0])) return 0; /* also NaN */
    if (v >= k[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < k[mid]) hi = mid;
        else lo = mid;
    }
    return v - k[hi - 1] < k[hi] - v ? hi - 1 : hi;
}

/* weighted fit of one assignment with inverse scale id: sum w*q*x and sum w*q*q (w NULL: x^2) */
static void iq4_fit(const float *x, const float *w, float id, float *sqx, float *sq2) {
    float a = 0.0f, b = 0.0f;
    for (int j = 0; j < QK; j++) {
        const float q = (float)kz_iq4nl_values[kz_ref_iq4_index(id * x[j])];
        const float wj = w ? w[j] : x[j] * x[j];
        const float wq = wj * q;
        a += wq * x[j];
        b += wq * q;
    }
    *sqx = a;
    *sq2 = b;
}

/* the scale of one 32-block (quantize_row_iq4_nl_impl, ntry = 7): the one maximising
 * (sum wqx)^2 / sum wq^2 over the start point -max/kv[0] and the 15 scales that map max onto
 * kv[0] + itry; 0 for a block of (near) zeros */
float kz_ref_iq4_scale(const float *x, const float *w) {
    const int ntry = 7;
    float amax;
    const float mx = signed_absmax(x, &amax);
    if (amax < 1e-15f) return 0.0f;
    const float d0 = -mx / (float)kz_iq4nl_values[0];
    float sqx, sq2;
    iq4_fit(x, w, 1.0f / d0, &sqx, &sq2);
    float d = sq2 > 0.0f ? sqx / sq2 : 0.0f;
    float best = d * sqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        const float id = (float)(itry + kz_iq4nl_values[0]) / mx;
        iq4_fit(x, w, id, &sqx, &sq2);
        if (sq2 > 0.0f && sqx * sqx > best * sq2) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    return d;
}

/* one IQ4_NL block with scale d: fp16 d, codes from the f32 d (as quantize_iq4_nl) */
void kz_ref_iq4_nl_block(const float *x, float d, uint8_t *b) {
    int q[32];
    wr16(b, kz_f32_to_fp16(d));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; j++) q[j] = kz_ref_iq4_index(id * x[j]);
    kz_ref_pack32(q, b + 2, NULL);
}

/* quantize_iq4_nl without imatrix: weights x^2 */
size_t kz_ref_quant_iq4_nl(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++, b += IQ4_NL_B, src += QK) kz_ref_iq4_nl_block(src, kz_ref_iq4_scale(src, NULL), b);
    return (size_t)(n / QK) * IQ4_NL_B;
}

/* ---------------- reference dots ---------------- */

float kz_ref_dot_q4_1(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q4_1_B, y += KZ_Q8_1_BYTES) {
        const int8_t *ya = (const int8_t *)(y + 4);
        codes(x + 4, NULL, q);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += q[j] * ya[j];
        s += (float)sumi * (h2f(x) * h2f(y)) + h2f(x + 2) * h2f(y + 2);
    }
    return s;
}

float kz_ref_dot_q5_1(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q5_1_B, y += KZ_Q8_1_BYTES) {
        const int8_t *ya = (const int8_t *)(y + 4);
        codes(x + 8, x + 4, q);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += q[j] * ya[j];
        s += (float)sumi * (h2f(x) * h2f(y)) + h2f(x + 2) * h2f(y + 2);
    }
    return s;
}

float kz_ref_dot_q5_0(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q5_0_B, y += Q8_0_B) {
        const int8_t *ya = (const int8_t *)(y + 2);
        codes(x + 6, x + 2, q);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += (q[j] - 16) * ya[j];
        s += (float)sumi * (h2f(x) * h2f(y));
    }
    return s;
}

float kz_ref_dot_iq4_nl(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    int q[32];
    for (int64_t ib = 0; ib < n / QK; ib++, x += IQ4_NL_B, y += Q8_0_B) {
        const int8_t *ya = (const int8_t *)(y + 2);
        codes(x + 2, NULL, q);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += kz_iq4nl_values[q[j]] * ya[j];
        s += (float)sumi * (h2f(x) * h2f(y));
    }
    return s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_q4_1, kz_ref_dot_q4_1)
KZ_SCALAR_GEMM(kz_ref_gemm_q5_0, kz_ref_dot_q5_0)
KZ_SCALAR_GEMM(kz_ref_gemm_q5_1, kz_ref_dot_q5_1)
KZ_SCALAR_GEMM(kz_ref_gemm_iq4_nl, kz_ref_dot_iq4_nl)
