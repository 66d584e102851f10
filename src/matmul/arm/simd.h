/* The AArch64 SIMD preamble, included first by neon.c, dotprod.c and i8mm.c (and by the
 * templates they instantiate). */
#ifndef KZ_MATMUL_ARM_SIMD_H
#define KZ_MATMUL_ARM_SIMD_H
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "matmul/simd.h"
#include "sys/fp16.h"

/* The float part of the integer kernels must round like the scalar reference (product, then
 * add): no contraction into FMADD, whatever the build flags. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* v with lane l (a constant once inlined and unrolled) loaded from p: clang checks an intrinsic's
 * lane index (and an asm "i" operand) before unrolling makes it constant, so the templates' lane
 * loads go through these switches of literal lanes there */
static inline __attribute__((always_inline)) uint16x8_t kz_arm_lane16(uint16x8_t v, const void *p, int l) {
    const uint16_t *q = (const uint16_t *)p;
    switch (l) {
    case 0: return vld1q_lane_u16(q, v, 0);
    case 1: return vld1q_lane_u16(q, v, 1);
    case 2: return vld1q_lane_u16(q, v, 2);
    case 3: return vld1q_lane_u16(q, v, 3);
    case 4: return vld1q_lane_u16(q, v, 4);
    case 5: return vld1q_lane_u16(q, v, 5);
    case 6: return vld1q_lane_u16(q, v, 6);
    default: return vld1q_lane_u16(q, v, 7);
    }
}
static inline __attribute__((always_inline)) uint32x4_t kz_arm_lane32(uint32x4_t v, const void *p, int l) {
    const uint32_t *q = (const uint32_t *)p;
    switch (l) {
    case 0: return vld1q_lane_u32(q, v, 0);
    case 1: return vld1q_lane_u32(q, v, 1);
    case 2: return vld1q_lane_u32(q, v, 2);
    default: return vld1q_lane_u32(q, v, 3);
    }
}

#endif
