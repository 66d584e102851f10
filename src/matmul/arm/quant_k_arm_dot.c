/* AArch64 kernels for Q4_K / Q5_K / Q6_K x Q8_K: SDOT (built with +dotprod by the Makefile; called only where cpu.c found FEAT_DotProd).
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
#define KA_DOT32(w0, w1, a0, a1) vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, a0), w1, a1))
#define KA(name) name##_dotprod
#define KA_EXPORT(name) kz_dotprod_##name
#include "matmul/arm/kquant_tmpl.h"

#else
typedef int kz_quant_k_dotprod_unused; /* not AArch64 */
#endif
