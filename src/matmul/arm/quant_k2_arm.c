/* NEON (baseline AArch64) Q2_K / Q3_K / IQ4_XS dots: 16 int8 products via vmull_s8 (each
 * |w*a| <= 127*128, a pair <= 32512: exact in int16), widened pairwise to int32. */
#if defined(__aarch64__)
#include "matmul/quant_k2_isa.h"
static inline int32_t k2_neon_dot16(int8x16_t w, int8x16_t a) {
    const int16x8_t p = vaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a));
    return vaddvq_s32(vpaddlq_s16(p));
}
#define K2(nm) kz_neon_##nm
#define K2_DOT16(w, a) k2_neon_dot16(w, a)
#include "matmul/arm/kquant2_tmpl.h"
#else
typedef int kz_quant_k2_arm_unused; /* ISO C: no empty translation unit */
#endif
