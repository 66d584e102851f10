/* AArch64 SDOT (FEAT_DotProd) kernels for Q4_1 / Q5_0 / Q5_1 / IQ4_NL: quant_legacy_arm_q.h with
 * vdotq_s32. The Makefile builds quant_*_dot.c with -march=armv8.2-a+dotprod; the dispatch
 * calls it only when the CPU reports asimddp (levels dotprod and i8mm). */
#include "matmul/quant_legacy_isa.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#if !defined(__ARM_FEATURE_DOTPROD)
#error "quant_legacy_arm_dot.c needs -march=armv8.2-a+dotprod (see the Makefile)"
#endif
#include <arm_neon.h>

#include "sys/fp16.h"

#define LA(name) name##_dotprod
#define LA_EXPORT(name) kz_dotprod_##name
#define LA_SDOT 1
#include "matmul/arm/b32_legacy_tmpl.h"

#else
typedef int kz_quant_legacy_arm_dot_unused; /* not AArch64: nothing to build */
#endif
