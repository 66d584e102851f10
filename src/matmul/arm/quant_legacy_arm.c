/* AArch64 baseline NEON kernels for Q4_1 / Q5_0 / Q5_1 / IQ4_NL (quant_legacy_arm_q.h with
 * vmull_s8 block dots). Bit-identical to the scalar reference of quant_legacy.c. */
#include "matmul/quant_legacy_isa.h"

#if defined(__aarch64__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <arm_neon.h>

#include "sys/fp16.h"

#define LA(name) name##_neon
#define LA_EXPORT(name) kz_neon_##name
#define LA_SDOT 0
#include "matmul/arm/b32_legacy_tmpl.h"

#else
typedef int kz_quant_legacy_arm_unused; /* not AArch64: nothing to build */
#endif
