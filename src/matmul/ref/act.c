/* Activation-only block types: Q8_1 (for Q4_1 / Q5_1 weights) and Q8_K (for the K-quants and
 * IQ4_XS). Weights are never stored in them, so they have a quantizer (what the activation row
 * is converted with) and a dequantizer (for tests), but no weight dot.
 *
 *   Q8_1 (36 B / 32): fp16 d, fp16 s = d * sum(qs), int8 qs[32]     (ggml block_q8_1)
 *   Q8_K (292 B / 256): f32 d, int8 qs[256], int16 bsums[16]        (ggml block_q8_K)
 * The quantizers follow ggml's reference ones (quantize_row_q8_1_ref / q8_K_ref), so a dot
 * with them gives what llama.cpp's generic CPU path gives. SIMD levels use the same scalar
 * quantizer: it runs once per activation row, not per weight row. */
#include <math.h>
#include <string.h>

#include "sys/fp16.h"
#include "matmul/block.h"
#include "matmul/ref/ref.h"
#include "matmul/ref/act.h"
#include "model/types.h"

size_t kz_ref_quant_q8_1(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / 32; ib++, b += KZ_Q8_1_BYTES) {
        const float *x = src + ib * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int8_t *qs = (int8_t *)(b + 4);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            qs[j] = q8_round(x[j] * id);
            sum += qs[j];
        }
        wr16(b, kz_f32_to_fp16(d));
        wr16(b + 2, kz_f32_to_fp16((float)sum * d));
    }
    return (size_t)(n / 32) * KZ_Q8_1_BYTES;
}

void kz_ref_dequant_q8_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / 32; ib++, b += KZ_Q8_1_BYTES) {
        const float d = kz_fp16_to_f32(rd16(b));
        const int8_t *qs = (const int8_t *)(b + 4);
        for (int j = 0; j < 32; j++) dst[ib * 32 + j] = (float)qs[j] * d;
    }
}

size_t kz_ref_quant_q8_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t ib = 0; ib < n / 256; ib++, b += KZ_Q8_K_BYTES) {
        const float *x = src + ib * 256;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++) {
            float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        int8_t *qs = (int8_t *)(b + 4);
        float d = 0.0f;
        if (amax != 0.0f) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < 256; j++) {
                int v = nearest_int(iscale * x[j]);
                qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
            }
            d = 1.0f / iscale;
        } else {
            memset(qs, 0, 256);
        }
        memcpy(b, &d, 4);
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += qs[16 * s + j];
            int16_t v = (int16_t)sum;
            memcpy(b + 4 + 256 + 2 * s, &v, 2);
        }
    }
    return (size_t)(n / 256) * KZ_Q8_K_BYTES;
}

void kz_ref_dequant_q8_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / 256; ib++, b += KZ_Q8_K_BYTES) {
        float d;
        memcpy(&d, b, 4);
        const int8_t *qs = (const int8_t *)(b + 4);
        for (int j = 0; j < 256; j++) dst[ib * 256 + j] = (float)qs[j] * d;
    }
}
