/* Byte helpers of the scalar block code (ref/ and quant.c), defined once: blocks are read
 * byte by byte (no alignment assumption, little-endian fields), and the scalar gemm macro. */
#ifndef KZ_MATMUL_BLOCK_H
#define KZ_MATMUL_BLOCK_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sys/fp16.h"

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
/* the fp16 at p (a block scale) as float, and its store */
static inline float h2f(const uint8_t *p) { return kz_fp16_to_f32(rd16(p)); }
static inline void f2h(uint8_t *p, float v) { wr16(p, kz_f32_to_fp16(v)); }
/* the f32 scale of a Q8_K block */
static inline float act_d(const uint8_t *a) {
    float d;
    memcpy(&d, a, 4);
    return d;
}

/* round half to even via 1.5*2^23 (ggml's nearest_int), valid for |v| <= 2^22; NaN or huge
 * inputs give some value that the callers clamp (no UB either way) */
static inline int nearest_int(float v) {
    const float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
/* roundf (half away from zero) clamped to +-127, NaN -> 0 (no undefined float->int conversion):
 * the Q8_0 / Q8_1 quantizers' rounding */
static inline int8_t q8_round(float v) {
    if (!(v == v)) return 0;
    float r = roundf(v);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    return (int8_t)r;
}

/* The scalar gemm of every type: one reference dot per element, rows outer (each weight row
 * read once). Defines name(...) with the kz_gemm_fn signature. */
#define KZ_SCALAR_GEMM(name, dot)                                                                 \
    void name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
              float *y, int64_t ldy) {                                                            \
        for (int64_t r = 0; r < nr; r++)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                      \
                y[t * ldy + r] = dot((const uint8_t *)w + (size_t)r * ws,                         \
                                     (const uint8_t *)a + (size_t)t * as, n);                     \
    }
#endif
