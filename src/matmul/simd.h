/* What the SIMD units of both architectures share (x86/simd.h and arm/simd.h include it): the
 * inline / unroll macros, ld16, and the tile drivers of the gemms, written once. A driver walks
 * the output in register tiles and leaves the arithmetic to the kernel's tile function, so every
 * element is the kernel's own (row, token) chain whatever the tiling. A partial row tile repeats
 * its last row (valid memory, the extra lanes are dropped). Each driver macro defines a static
 * always-inline function NAME; ATTR is the kernel's target attribute (empty on ARM), ty or k a
 * type selector passed through to the tiles. */
#ifndef KZ_MATMUL_SIMD_H
#define KZ_MATMUL_SIMD_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KZ_INL static inline __attribute__((always_inline))
/* full unrolling keeps per-row / per-token values in registers instead of stack arrays */
#define KZ_PRAGMA(x) _Pragma(#x)
#define KZ_UNROLL(n) KZ_PRAGMA(GCC unroll n)

/* little-endian u16 at any alignment (an fp16 block scale) */
static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* One activation row over rows [0, nr): tiles of R rows, TILE(ty, nb, wp, a, out) writing the R
 * results to out[0..R) (y itself when the tile is full). */
#define KZ_TILE_GEMV(ATTR, NAME, R, TILE)                                                          \
    ATTR static inline __attribute__((always_inline)) void NAME(const int ty, int64_t nb, const uint8_t *w, \
                                                                size_t ws, int64_t nr, const uint8_t *a, float *y) { \
        for (int64_t r0 = 0; r0 < nr; r0 += (R)) {                                                 \
            const int nv = nr - r0 < (R) ? (int)(nr - r0) : (R);                                   \
            const uint8_t *wp[R];                                                                  \
            for (int r = 0; r < (R); r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;   \
            float buf[R];                                                                          \
            float *o = nv == (R) ? y + r0 : buf;                                                   \
            TILE(ty, nb, wp, a, o);                                                                \
            if (o == buf)                                                                          \
                for (int r = 0; r < nv; r++) y[r0 + r] = buf[r];                                   \
        }                                                                                          \
    }

/* y[t * ldy + r] for r < nr, t < nt (the kz_gemm_fn contract, blocks of 32 elements): rows outer
 * in tiles of 4, so 4 weight rows stay in L1 while the caller's token block streams by; tokens
 * in tiles of 4 through TILE(ty, nb, wp, ap, out, ldo), which writes token t's 4 results to
 * out + t * ldo. A last 2 or 3 tokens (a speculative verify's thin batch) go through the same
 * tile with the last token repeated (extra lanes dropped): each weight block is decoded once
 * for all of them instead of once per token; a last single token goes through GEMV (a
 * KZ_TILE_GEMV function). */
#define KZ_TILE_GEMM_4X4(ATTR, NAME, TILE, GEMV)                                                   \
    ATTR static inline __attribute__((always_inline)) void NAME(const int ty, int64_t n, const uint8_t *w, \
                                                                size_t ws, int64_t nr, const uint8_t *a, size_t as, \
                                                                int64_t nt, float *y, int64_t ldy) { \
        const int64_t nb = n / 32;                                                                 \
        const int64_t t_tiled = nt % 4 == 1 ? nt - 1 : nt;                                         \
        if (t_tiled >= 2) {                                                                        \
            for (int64_t r0 = 0; r0 < nr; r0 += 4) {                                               \
                const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;                                   \
                const uint8_t *wp[4];                                                              \
                for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws; \
                for (int64_t t0 = 0; t0 < t_tiled; t0 += 4) {                                      \
                    const int tv = t_tiled - t0 < 4 ? (int)(t_tiled - t0) : 4;                     \
                    const uint8_t *ap[4];                                                          \
                    for (int t = 0; t < 4; t++) ap[t] = a + (size_t)(t0 + (t < tv ? t : tv - 1)) * as; \
                    float buf[16];                                                                 \
                    if (nv == 4 && tv == 4) {                                                      \
                        TILE(ty, nb, wp, ap, y + t0 * ldy + r0, ldy);                              \
                    } else {                                                                       \
                        TILE(ty, nb, wp, ap, buf, 4);                                              \
                        for (int t = 0; t < tv; t++)                                               \
                            for (int r = 0; r < nv; r++) y[(t0 + t) * ldy + r0 + r] = buf[t * 4 + r]; \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int64_t t = t_tiled > 0 ? t_tiled : 0; t < nt; t++)                                   \
            GEMV(ty, nb, w, ws, nr, a + (size_t)t * as, y + t * ldy);                              \
    }

/* The float gemms (any n): rows in tiles of 4, tokens in pairs, FTILE(k, 4, nt, n, wp, ap, out)
 * writing token t's 4 results to out[t * 4 ..]; an odd last token alone. */
#define KZ_TILE_GEMM_4X2(ATTR, NAME, FTILE)                                                        \
    ATTR static inline __attribute__((always_inline)) void NAME(const int k, int64_t n, const uint8_t *w, size_t ws, \
                                                                int64_t nr, const uint8_t *a, size_t as, int64_t nt, \
                                                                float *y, int64_t ldy) {           \
        for (int64_t r0 = 0; r0 < nr; r0 += 4) {                                                   \
            const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;                                       \
            const uint8_t *wp[4];                                                                  \
            for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;     \
            int64_t t0 = 0;                                                                        \
            float out[8];                                                                          \
            for (; t0 + 2 <= nt; t0 += 2) {                                                        \
                const uint8_t *ap[2] = { a + (size_t)t0 * as, a + (size_t)(t0 + 1) * as };         \
                FTILE(k, 4, 2, n, wp, ap, out);                                                    \
                for (int t = 0; t < 2; t++)                                                        \
                    for (int r = 0; r < nv; r++) y[(t0 + t) * ldy + r0 + r] = out[t * 4 + r];      \
            }                                                                                      \
            if (t0 < nt) {                                                                         \
                const uint8_t *ap[1] = { a + (size_t)t0 * as };                                    \
                FTILE(k, 4, 1, n, wp, ap, out);                                                    \
                for (int r = 0; r < nv; r++) y[t0 * ldy + r0 + r] = out[r];                        \
            }                                                                                      \
        }                                                                                          \
    }
#endif
