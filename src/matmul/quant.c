/* The row API of quant.h over the kernel table (traits.c), and the q4_0_16x4 repack. */
#include "matmul/matmul.h"

#include <math.h>
#include <string.h>

#include "model/types.h"

#define QK 32         /* elements per Q4_0 block */
#define Q4_0_BYTES 18 /* fp16 d + 16 bytes of nibbles */

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
