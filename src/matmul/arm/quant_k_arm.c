/* AArch64 kernels for Q4_K / Q5_K / Q6_K x Q8_K: baseline NEON (SMULL/SMLAL pair products).
 * The template is quant_k_arm_q.h; contract in quant_k_isa.h. */
#include "matmul/quant_k_isa.h"

#if defined(__aarch64__)
#include <arm_neon.h>

#include "sys/fp16.h"

/* the float chain must round like the scalar reference: no contraction into FMADD */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define KA_INL static inline __attribute__((always_inline))
static inline int32_t kzk_dot32_neon(int8x16_t w0, int8x16_t w1, int8x16_t a0, int8x16_t a1) {
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
    p = vmlal_s8(p, vget_high_s8(w0), vget_high_s8(a0));
    int16x8_t q = vmull_s8(vget_low_s8(w1), vget_low_s8(a1));
    q = vmlal_s8(q, vget_high_s8(w1), vget_high_s8(a1));
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p), q));
}
#define KA_DOT32(w0, w1, a0, a1) kzk_dot32_neon(w0, w1, a0, a1)
#define KA(name) name##_neon
#define KA_EXPORT(name) kz_neon_##name
#include "matmul/arm/kquant_tmpl.h"

#else
typedef int kz_quant_k_neon_unused; /* not AArch64 */
#endif
