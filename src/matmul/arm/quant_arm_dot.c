/* AArch64 SDOT (FEAT_DotProd) integer dots: the quant_arm_q.h template with vdotq_s32. The
 * Makefile builds this file with -march=armv8.2-a+dotprod; dispatch calls it only when the CPU
 * reports asimddp. Bit-identical to the scalar reference (see quant_arm_q.h). */
#include "matmul/kernels.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#if !defined(__ARM_FEATURE_DOTPROD)
#error "quant_arm_dot.c needs -march=armv8.2-a+dotprod (see the Makefile)"
#endif

#define AQ(name) name##_dotprod
#define AQ_EXPORT(name) kz_dotprod_##name
#define AQ_SDOT 1
#include "matmul/arm/b32_tmpl.h"

#else
typedef int kz_quant_arm_dot_unused; /* not AArch64: nothing to build */
#endif
