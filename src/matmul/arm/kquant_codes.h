/* K-quant codes unpacked into bytes, shared by the SDOT dots (kquant_tmpl.h) and the SMMLA gemms
 * (i8mm.c): one NEON definition of each bit layout, whose scalar twin is in ref/kquant.c. */
#ifndef KZ_MATMUL_ARM_KQUANT_CODES_H
#define KZ_MATMUL_ARM_KQUANT_CODES_H
#include "matmul/arm/simd.h"

/* Q4_K / Q5_K codes 0..31 of elements 64c .. 64c + 63 (c = 0..3): u[0], u[1] = sub-block 2c
 * (elements l < 16, l >= 16), u[2], u[3] = sub-block 2c + 1. qs: the nibbles; h0, h1: qh bytes
 * 0-15 and 16-31, whose bit 2c / 2c + 1 is bit 4 of sub-block 2c / 2c + 1 (q5 only). */
KZ_INL void kz_arm_q45_codes(const int q5, const uint8_t *qs, uint8x16_t h0, uint8x16_t h1, int c,
                                    uint8x16_t u[4]) {
    const uint8x16_t m4 = vdupq_n_u8(15), one = vdupq_n_u8(1);
    const uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16);
    u[0] = vandq_u8(v0, m4);
    u[1] = vandq_u8(v1, m4);
    u[2] = vshrq_n_u8(v0, 4);
    u[3] = vshrq_n_u8(v1, 4);
    if (q5) {
        const int8x16_t s0 = vdupq_n_s8((int8_t)(-2 * c)), s1 = vdupq_n_s8((int8_t)(-2 * c - 1));
        u[0] = vorrq_u8(u[0], vshlq_n_u8(vandq_u8(vshlq_u8(h0, s0), one), 4));
        u[1] = vorrq_u8(u[1], vshlq_n_u8(vandq_u8(vshlq_u8(h1, s0), one), 4));
        u[2] = vorrq_u8(u[2], vshlq_n_u8(vandq_u8(vshlq_u8(h0, s1), one), 4));
        u[3] = vorrq_u8(u[3], vshlq_n_u8(vandq_u8(vshlq_u8(h1, s1), one), 4));
    }
}

/* Q6_K codes 0..63 (q + 32) of the 16 elements 128c + 32g + 16hlf .. + 15 into u[g], g = 0..3
 * (scale group 8c + 2g + hlf): low 4 bits from ql, high 2 bits from qh */
KZ_INL void kz_arm_q6_codes(const uint8_t *x, int c, int hlf, uint8x16_t u[4]) {
    const uint8_t *ql = x, *qh = x + 128;
    const uint8x16_t m6 = vdupq_n_u8(63), m30 = vdupq_n_u8(0x30);
    const uint8x16_t l0 = vld1q_u8(ql + 64 * c + 16 * hlf), l1 = vld1q_u8(ql + 64 * c + 32 + 16 * hlf);
    const uint8x16_t h = vld1q_u8(qh + 32 * c + 16 * hlf), h2 = vshrq_n_u8(h, 2);
    /* insert instructions (SRI / SLI) merge the two bit fields: 9 instructions for 4 vectors */
    u[2] = vsriq_n_u8(vandq_u8(h, m30), l0, 4);            /* (l0 >> 4) | (h bits 4-5 << 4) */
    u[3] = vsriq_n_u8(vandq_u8(h2, m30), l1, 4);           /* (l1 >> 4) | (h bits 6-7 << 4) */
    u[0] = vandq_u8(vsliq_n_u8(l0, h, 4), m6);             /* (l0 & 15) | (h bits 0-1 << 4) */
    u[1] = vandq_u8(vsliq_n_u8(l1, h2, 4), m6);            /* (l1 & 15) | (h bits 2-3 << 4) */
}
#endif
