/* IEEE half and bfloat16 conversions (scalar, exact; RNE for narrowing). */
#ifndef KZ_FP16_H
#define KZ_FP16_H
#include <stdint.h>
#include <string.h>

static inline float kz_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kz_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Exact half -> float: the half's exponent+mantissa placed in a float's low exponent bits
 * and scaled by 2^112 rebias normal halves exactly; subnormal halves become float
 * subnormals m * 2^-136, and the scaling makes them m * 2^-24, also exact (slower on x86
 * only for those rare inputs). Inf/NaN (exponent 31) keep their payload bits. */
static inline float kz_fp16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t em = h & 0x7fffu; /* exponent and mantissa */
    if (em >= 0x7c00u) return kz_bits_f32(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    return kz_bits_f32(sign | kz_f32_bits(kz_bits_f32(em << 13) * 0x1.0p112f));
}

static inline uint16_t kz_f32_to_fp16(float f) {
    uint32_t x = kz_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow (after rounding) -> inf */
    if (ax < 0x38800000u) { /* subnormal or zero in half */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1); /* RNE on the 13 dropped bits */
    r -= 0x38000000u;                            /* rebias 127 -> 15 */
    return (uint16_t)(sign | (r >> 13));
}

static inline float kz_bf16_to_f32(uint16_t b) { return kz_bits_f32((uint32_t)b << 16); }
static inline uint16_t kz_f32_to_bf16(float f) {
    uint32_t u = kz_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
#endif
