/* SDOT (FEAT_DotProd) Q2_K / Q3_K / IQ4_XS dots; built with +dotprod by the Makefile. */
#if defined(__aarch64__)
#include "matmul/quant_k2_isa.h"
#define K2(nm) kz_dotprod_##nm
#define K2_DOT16(w, a) vaddvq_s32(vdotq_s32(vdupq_n_s32(0), (w), (a)))
#include "matmul/arm/kquant2_tmpl.h"
#else
typedef int kz_quant_k2_arm_dot_unused; /* ISO C: no empty translation unit */
#endif
