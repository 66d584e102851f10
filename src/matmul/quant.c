/* Scalar reference kernels for the weight types the engine computes with (F32, F16, BF16,
 * Q8_0, Q4_0): dequantize, reference quantize (bit-exact with llama-quantize / gguf-py),
 * row dot products; the row API of quant.h over the kernel table (traits.c), and the
 * q4_0_16x4 repack. */
#include "matmul/matmul.h"
#include "matmul/ref/ref.h"

#include <math.h>
#include <string.h>

#include "sys/cpu.h"
#include "sys/fp16.h"
#include "matmul/kernels.h"
#include "model/types.h"

/* The Q4_0 reference quantizer's rounding depends on whether x*id + 8.5f is contracted into
 * an FMA (see kz_quant_q4_0_ref). We want the two-rounding form by default, so forbid
 * contraction for this file whatever the build flags (-std=gnu11 / -ffp-contract=fast would
 * let GCC fuse across statements, clang fuses within one expression by default). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QK 32          /* elements per Q8_0 / Q4_0 block */
#define Q8_0_BYTES 34  /* fp16 d + 32 x int8 */
#define Q4_0_BYTES 18  /* fp16 d + 16 bytes of nibbles */

/* Little-endian fp16 scale at the start of a block (byte access: no alignment assumption). */
static inline float blk_d(const uint8_t *b) { return kz_fp16_to_f32((uint16_t)(b[0] | (b[1] << 8))); }
static inline void blk_set_d(uint8_t *b, float d) {
    uint16_t h = kz_f32_to_fp16(d);
    b[0] = (uint8_t)(h & 0xff);
    b[1] = (uint8_t)(h >> 8);
}
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v & 0xff); p[1] = (uint8_t)(v >> 8); }

/* ---------------- dequantize (scalar reference) ---------------- */

void kz_ref_dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void kz_ref_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kz_fp16_to_f32(rd16(s + 2 * i));
}

void kz_ref_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kz_bf16_to_f32(rd16(s + 2 * i));
}

void kz_ref_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q8_0_BYTES) {
        float d = blk_d(b);
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < QK; j++) dst[ib * QK + j] = (float)qs[j] * d;
    }
}

void kz_ref_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_0_BYTES) {
        float d = blk_d(b);
        const uint8_t *qs = b + 2;
        float *y = dst + ib * QK;
        /* byte j: element j in the low nibble, element j+16 in the high nibble */
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
            y[j + QK / 2] = (float)((int)(qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---------------- quantize (reference, what llama-quantize writes) ---------------- */

size_t kz_ref_quant_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * 4);
    return (size_t)n * 4;
}

size_t kz_ref_quant_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr16(d + 2 * i, kz_f32_to_fp16(src[i]));
    return (size_t)n * 2;
}

size_t kz_ref_quant_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr16(d + 2 * i, kz_f32_to_bf16(src[i]));
    return (size_t)n * 2;
}

/* roundf (half away from zero) of a value known to be in [-127.5, 127.5] or NaN; NaN -> 0 so
 * that bad input never reaches an undefined float->int conversion. */
static inline int8_t q8_round(float v) {
    if (!(v == v)) return 0;
    float r = roundf(v);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    return (int8_t)r;
}

size_t kz_ref_quant_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q8_0_BYTES) {
        const float *x = src + ib * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) {
            float a = fabsf(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blk_set_d(b, d);
        int8_t *qs = (int8_t *)(b + 2);
        for (int j = 0; j < QK; j++) qs[j] = q8_round(x[j] * id);
    }
    return (size_t)(n / QK) * Q8_0_BYTES;
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
    for (int64_t ib = 0; ib < n / QK; ib++, b += Q4_0_BYTES) {
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
        blk_set_d(b, d);
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
    return (size_t)(n / QK) * Q4_0_BYTES;
}

size_t kz_ref_quant_q4_0(const float *src, void *dst, int64_t n) { return kz_quant_q4_0_ref(src, dst, n, 0); }

/* ---------------- row dot products (weight row x quantised activation row) ---------------- */

/* Float dots accumulate in double (every f32, f16 and bf16 product is exact in double): the
 * reference is then the correctly rounded dot up to ~n*2^-53, and SIMD kernels, which must sum
 * in another order, are compared against it (they sum float chunks into double). */
float kz_ref_dot_f32(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a; /* byte access: rows need not be 4-byte aligned */
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float xv, yv;
        memcpy(&xv, x + 4 * i, 4);
        memcpy(&yv, y + 4 * i, 4);
        s += (double)xv * yv;
    }
    return (float)s;
}

float kz_ref_dot_f16(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kz_fp16_to_f32(rd16(x + 2 * i)) * kz_fp16_to_f32(rd16(y + 2 * i));
    return (float)s;
}

float kz_ref_dot_bf16(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)kz_bf16_to_f32(rd16(x + 2 * i)) * kz_bf16_to_f32(rd16(y + 2 * i));
    return (float)s;
}

/* Integer dot per block, scaled by d_w * d_a in float, blocks summed in float. */
float kz_ref_dot_q8_0(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q8_0_BYTES, y += Q8_0_BYTES) {
        const int8_t *qx = (const int8_t *)(x + 2), *qy = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += (int32_t)qx[j] * (int32_t)qy[j];
        s += (float)sumi * (blk_d(x) * blk_d(y));
    }
    return s;
}

float kz_ref_dot_q4_0(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / QK; ib++, x += Q4_0_BYTES, y += Q8_0_BYTES) {
        const uint8_t *qx = x + 2;
        const int8_t *qy = (const int8_t *)(y + 2);
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += ((int32_t)(qx[j] & 0x0f) - 8) * qy[j];
            sumi += ((int32_t)(qx[j] >> 4) - 8) * qy[j + QK / 2];
        }
        s += (float)sumi * (blk_d(x) * blk_d(y));
    }
    return s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_f32, kz_ref_dot_f32)
KZ_SCALAR_GEMM(kz_ref_gemm_f16, kz_ref_dot_f16)
KZ_SCALAR_GEMM(kz_ref_gemm_bf16, kz_ref_dot_bf16)
KZ_SCALAR_GEMM(kz_ref_gemm_q8_0, kz_ref_dot_q8_0)
KZ_SCALAR_GEMM(kz_ref_gemm_q4_0, kz_ref_dot_q4_0)

void kz_repack_q4_0_16x4(const void *w, size_t ws, int64_t n_rows, int64_t n, void *dst) {
    const int64_t nb = n / QK;
    uint8_t *d = dst;
    for (int64_t g = 0; g < n_rows / 16; g++)
        for (int64_t b = 0; b < nb; b++, d += 16 * Q4_0_BYTES)
            for (int r = 0; r < 16; r++) {
                const uint8_t *src = (const uint8_t *)w + (size_t)(g * 16 + r) * ws + (size_t)b * Q4_0_BYTES;
                for (int j = 0; j < 4; j++) memcpy(d + 64 * j + 4 * r, src + 2 + 4 * j, 4);
                memcpy(d + 256 + 2 * r, src, 2);
            }
}

/* bytes of n elements of a traits' type; 0 if n is not a whole number of blocks */
static size_t tr_bytes(const kz_qtraits *t, int64_t n) {
    if (!t || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * t->bytes;
}

int kz_type_compute_ok(uint32_t type) {
    const kz_qtraits *t = kz_qtraits_get(type);
    return t && t->vec_dot; /* activation-only types (Q8_1, Q8_K) have no weight dot */
}

int kz_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const kz_qtraits *t = kz_qtraits_get(type);
    if (!t || n < 0 || n % t->blck) return -1;
    t->dequant(src, dst, n);
    return 0;
}

size_t kz_quant_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const kz_qtraits *t = kz_qtraits_get(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return t->quant(src, dst, n);
}

uint32_t kz_act_type(uint32_t wtype) {
    const kz_qtraits *t = kz_qtraits_get(wtype);
    return t ? t->act_type : (uint32_t)KZ_T_F32;
}

size_t kz_act_row_bytes(uint32_t wtype, int64_t n) {
    const kz_qtraits *t = kz_qtraits_get(wtype);
    if (!t || n < 0 || n % t->blck) return 0;
    return tr_bytes(kz_qtraits_get(t->act_type), n);
}

void kz_act_quant(uint32_t wtype, const float *x, void *dst, int64_t n) {
    const kz_qtraits *t = kz_qtraits_get(wtype);
    if (!t || n < 0 || n % t->blck) return;
    /* The activation quantizer gives the reference bytes (llama.cpp's generic CPU path) at
     * every ISA level: the SIMD ones reproduce roundf, not round-half-even. */
    kz_qtraits_get(t->act_type)->quant(x, dst, n);
}

float kz_vec_dot(uint32_t wtype, const void *wrow, const void *act, int64_t n) {
    const kz_qtraits *t = kz_qtraits_get(wtype);
    if (!t || !t->vec_dot || n < 0 || n % t->blck) return NAN;
    return t->vec_dot(wrow, act, n);
}
