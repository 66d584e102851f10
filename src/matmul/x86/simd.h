/* The x86-64 SIMD preamble, included first by every unit of this folder: each kernel carries a
 * target attribute, so the units build in a baseline x86-64 build and traits.c decides at run
 * time (through cpu.c) whether a level's kernels may be called. */
#ifndef KZ_MATMUL_X86_SIMD_H
#define KZ_MATMUL_X86_SIMD_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "matmul/simd.h"
#include "sys/fp16.h"

/* The float part of the integer kernels must round like the scalar reference (product, then
 * add): no contraction into FMA, whatever the build flags. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* sum of the 8 int32 lanes */
T_AVX2 KZ_INL int32_t x86_hsum_epi32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* lane i of the result = sum of the 8 int32 lanes of p[i] */
T_AVX2 KZ_INL __m256i x86_hsum8(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i h03 = _mm256_hadd_epi32(h01, h23), h47 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h03, h47, 0x20), _mm256_permute2x128_si256(h03, h47, 0x31));
}
#endif
