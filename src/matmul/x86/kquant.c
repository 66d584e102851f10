/* x86-64 kernels for Q4_K / Q5_K / Q6_K x Q8_K: AVX2 and AVX-512 VNNI (256-bit) variants of
 * one template (quant_k_x86_q.h). Target attributes keep the file buildable in a baseline
 * x86-64 build; traits.c hands them out only for levels cpu.c found available. */
#include "matmul/quant_k_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* the float chain must round like the scalar reference: no contraction into FMA */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define KZ_INL static inline __attribute__((always_inline))
#define KZ_PRAGMA(x) _Pragma(#x)
#define KZ_UNROLL(n) KZ_PRAGMA(GCC unroll n)

#define KX(name) name##_avx2
#define KX_EXPORT(name) kz_avx2_##name
#define KX_TGT T_AVX2
#define KX_VNNI 0
#include "matmul/x86/kquant_tmpl.h"
#undef KX
#undef KX_EXPORT
#undef KX_TGT
#undef KX_VNNI

#define KX(name) name##_avx512
#define KX_EXPORT(name) kz_avx512_##name
#define KX_TGT T_AVX512
#define KX_VNNI 1
#include "matmul/x86/kquant_tmpl.h"
#undef KX
#undef KX_EXPORT
#undef KX_TGT
#undef KX_VNNI

#else
typedef int kz_quant_k_x86_unused; /* not x86-64 */
#endif
