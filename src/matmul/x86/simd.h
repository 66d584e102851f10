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

/* 4 bytes at p as an int32 (an activation dword to broadcast) */
static inline int32_t x86_ld32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* -8 x the sum of the 32 quants of the Q8_0 block at ab: the unsigned-nibble Q4_0 kernels'
 * exact per-(token, block) correction (SAD of the bytes made unsigned by + 128) */
T_AVX2 KZ_INL int32_t x86_q8_0_corr(const uint8_t *ab) {
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(ab + 2)), _mm256_set1_epi8((char)0x80));
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
    return -8 * (_mm_cvtsi128_si32(h) - 32 * 128);
}

/* tokens per pass of the packed thin kernels (AVX2 and AVX-512) */
#define X86_THIN_MAX 4

/* The per-(block, token) terms a packed thin pass reads, token-minor so one block's terms of
 * all T tokens share a cache line: blocks [b0, b0 + nbc) of T Q8_0 rows at a (stride as), the
 * corrections from aux (token t's at aux + t * nb) or computed, and the scales as floats. */
T_AVX2 KZ_INL void x86_thin_terms(const int T, int64_t nb, int64_t b0, int nbc, const uint8_t *a, size_t as,
                                  const int32_t *aux, int32_t (*corr)[X86_THIN_MAX], float (*da)[X86_THIN_MAX]) {
    for (int t = 0; t < T; t++)
        for (int b = 0; b < nbc; b++) {
            const uint8_t *ab = a + (size_t)t * as + (size_t)(b0 + b) * 34;
            corr[b][t] = aux ? aux[(size_t)t * (size_t)nb + (size_t)(b0 + b)] : x86_q8_0_corr(ab);
            da[b][t] = _cvtsh_ss(ld16(ab));
        }
}

/* A template's gemm drivers (matmul/simd.h) over its 8x1 tile (one __m256, lane = row) and 4x4
 * tile (acc[j] lane (t & 1) * 4 + r for token 2j + (t & 1)): defines ST8X1 / ST4X4 (the tiles'
 * stores), GEMV (one token) and GEMM. */
#define X86_TILE_DRIVERS(TGT, TILE8X1, TILE4X4, ST8X1, ST4X4, GEMV, GEMM)                          \
    TGT KZ_INL void ST8X1(const int ty, int64_t nb, const uint8_t *const w[8], const uint8_t *a, float *out) { \
        _mm256_storeu_ps(out, TILE8X1(ty, nb, w, a));                                              \
    }                                                                                              \
    TGT KZ_INL void ST4X4(const int ty, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4], \
                          float *out, int64_t ldo) {                                               \
        __m256 acc[2];                                                                             \
        TILE4X4(ty, nb, w, a, acc);                                                                \
        _mm_storeu_ps(out, _mm256_castps256_ps128(acc[0]));                                        \
        _mm_storeu_ps(out + ldo, _mm256_extractf128_ps(acc[0], 1));                                \
        _mm_storeu_ps(out + 2 * ldo, _mm256_castps256_ps128(acc[1]));                              \
        _mm_storeu_ps(out + 3 * ldo, _mm256_extractf128_ps(acc[1], 1));                            \
    }                                                                                              \
    KZ_TILE_GEMV(TGT, GEMV, 8, ST8X1)                                                              \
    KZ_TILE_GEMM_4X4(TGT, GEMM, ST4X4, GEMV)
#endif
