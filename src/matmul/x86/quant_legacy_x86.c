/* x86-64 kernels for Q4_1 / Q5_0 / Q5_1 / IQ4_NL: AVX2 (+FMA+F16C) and AVX-512 VNNI (256-bit
 * VPDPBUSD). Target attributes only, so the file builds in a baseline x86-64 build; quant.c's
 * dispatch decides at run time whether they may be called. Bit-identical to the scalar
 * reference of quant_legacy.c (see quant_legacy_x86_q.h). */
#include "matmul/quant_legacy_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

/* the float part must round like the reference (product, then add): no contraction */
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

static inline uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2); /* little-endian, unaligned */
    return v;
}

/* lane i of the result = sum of the 8 int32 lanes of p[i] */
T_AVX2 KZ_INL __m256i x86_hsum8(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i h03 = _mm256_hadd_epi32(h01, h23), h47 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h03, h47, 0x20), _mm256_permute2x128_si256(h03, h47, 0x31));
}

#define LX(name) name##_avx2
#define LX_EXPORT(name) kz_avx2_##name
#define LX_TGT T_AVX2
#define LX_VNNI 0
#include "matmul/x86/b32_legacy_tmpl.h"
#undef LX
#undef LX_EXPORT
#undef LX_TGT
#undef LX_VNNI

#define LX(name) name##_avx512
#define LX_EXPORT(name) kz_avx512_##name
#define LX_TGT T_AVX512
#define LX_VNNI 1
#include "matmul/x86/b32_legacy_tmpl.h"
#undef LX
#undef LX_EXPORT
#undef LX_TGT
#undef LX_VNNI

#else
typedef int kz_quant_legacy_x86_empty; /* ISO C forbids an empty translation unit */
#endif
