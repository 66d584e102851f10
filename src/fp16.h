/* IEEE half and bfloat16 conversions (scalar, exact; RNE for narrowing). */
#ifndef KZ_FP16_H
#define KZ_FP16_H
#include <stdint.h>
#include <string.h>

static inline float kz_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kz_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float kz_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return kz_bits_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return kz_bits_f32(sign | 0x7f800000u | (man << 13));
    return kz_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
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
