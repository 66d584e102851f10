/* AVX2 kernels over Q4_0 rows in the q4_0_16x4 layout (quant.c's repack): the GEMV of decode,
 * the thin gemm of a speculative verify (2-4 tokens) and the prefill gemm. Lane = weight row (8
 * rows per ymm, two per 16-row group), so as in the AVX-512 kernels (b32.c) a block needs no
 * horizontal sum and no gather, and its weights are loaded and unpacked once for all the tokens
 * of a call, which the row-layout AVX2 tiles (x86/b32_tmpl.h) repeat per block and 8 rows
 * (measurements: docs/perf-journal.md, 2026-12-07).
 *
 * AVX2 has no u8 x s8 dword dot. VPMADDUBSW gives int16 sums of two nibble x quant products
 * (|.| <= 2 x 15 x 128); a block's eight of them are added in int16 (|.| <= 30720 < 2^15: exact)
 * and one VPMADDWD by ones gives the row's int32 dot of the unsigned nibbles, corrected by
 * -8 x the sum of the block's quants. Per lane the float step is the reference's,
 * acc += (float)sumi * (d_w * d_a), blocks in order: every output equals dot_q4_0 bit for bit. */
#include "matmul/kernels.h"

#if defined(__x86_64__)
#include "matmul/x86/simd.h"

#define A2_NB 1024  /* blocks per sweep (the tokens' terms on the stack: 32 KiB) */
#define A2_PF 2048  /* software prefetch distances (L1, L2) in bytes ahead of the block read */
#define A2_PF2 12288

/* T tokens (a constant after inlining) x the nr rows at pk: token t's Q8_0 row at a + t * as,
 * its terms at aux + t * nb (NULL: computed here), its outputs at y + t * ldy */
T_AVX2 KZ_INL void a2_body(const int T, int64_t nb, const uint8_t *pk, int64_t nr, const uint8_t *a, size_t as,
                           const int32_t *aux, float *y, int64_t ldy) {
    int32_t corr[A2_NB][X86_THIN_MAX];
    float da[A2_NB][X86_THIN_MAX];
    const __m256i m = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const int64_t ng = nr / 16, gs = nb * 288;
    for (int64_t b0 = 0; b0 < nb; b0 += A2_NB) {
        const int nbc = nb - b0 < A2_NB ? (int)(nb - b0) : A2_NB;
        x86_thin_terms(T, nb, b0, nbc, a, as, aux, corr, da);
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *p = pk + (size_t)(g * gs + b0 * 288);
            __m256 acc[X86_THIN_MAX][2];
            KZ_UNROLL(4)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < 2; h++)
                    acc[t][h] = b0 ? _mm256_loadu_ps(y + t * ldy + 16 * g + 8 * h) : _mm256_setzero_ps();
            for (int b = 0; b < nbc; b++, p += 288) {
                /* 5 lines per 288-byte block at each distance: every line at least once */
                for (int k = 0; k < 5; k++) _mm_prefetch((const char *)p + A2_PF + 64 * k, _MM_HINT_T0);
                for (int k = 0; k < 5; k++) _mm_prefetch((const char *)p + A2_PF2 + 64 * k, _MM_HINT_T1);
                const uint8_t *ab = a + (size_t)(b0 + b) * 34;
                /* s[t][h]: rows 8h..8h+7 (bytes [32h, 32h + 32) of each 64); per dword j both
                 * halves' nibbles, then each token's two activation dwords broadcast once */
                __m256i s[X86_THIN_MAX][2];
                KZ_UNROLL(4)
                for (int j = 0; j < 4; j++) { /* dword j of each row: elements 4j.. low, 16 + 4j.. high */
                    const __m256i q0 = _mm256_loadu_si256((const __m256i *)(p + 64 * j));
                    const __m256i q1 = _mm256_loadu_si256((const __m256i *)(p + 64 * j + 32));
                    const __m256i l0 = _mm256_and_si256(q0, m), h0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), m);
                    const __m256i l1 = _mm256_and_si256(q1, m), h1 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), m);
                    KZ_UNROLL(4)
                    for (int t = 0; t < T; t++) {
                        const uint8_t *at = ab + (size_t)t * as;
                        const __m256i xl = _mm256_set1_epi32(x86_ld32(at + 2 + 4 * j));
                        const __m256i xh = _mm256_set1_epi32(x86_ld32(at + 18 + 4 * j));
                        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, xl), _mm256_maddubs_epi16(h0, xh));
                        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, xl), _mm256_maddubs_epi16(h1, xh));
                        s[t][0] = j ? _mm256_add_epi16(s[t][0], p0) : p0;
                        s[t][1] = j ? _mm256_add_epi16(s[t][1], p1) : p1;
                    }
                }
                const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 256)));
                const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 272)));
                KZ_UNROLL(4)
                for (int t = 0; t < T; t++) {
                    const __m256i c = _mm256_set1_epi32(corr[b][t]);
                    const __m256 d = _mm256_set1_ps(da[b][t]);
                    const __m256i i0 = _mm256_add_epi32(_mm256_madd_epi16(s[t][0], ones), c);
                    const __m256i i1 = _mm256_add_epi32(_mm256_madd_epi16(s[t][1], ones), c);
                    acc[t][0] = _mm256_add_ps(acc[t][0], _mm256_mul_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(dw0, d)));
                    acc[t][1] = _mm256_add_ps(acc[t][1], _mm256_mul_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(dw1, d)));
                }
            }
            KZ_UNROLL(4)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + t * ldy + 16 * g + 8 * h, acc[t][h]);
        }
    }
}

/* nt tokens in passes of up to X86_THIN_MAX (T fixed per call site, so the accumulators stay in
 * registers); aux: the tokens' block terms (token-major), or NULL */
T_AVX2 KZ_INL void a2_gemm(int64_t n, const void *pk, int64_t nr, const void *act, size_t as, int64_t nt,
                           const int32_t *aux, float *y, int64_t ldy) {
    const uint8_t *a = act;
    const int64_t nb = n / 32;
    for (int64_t t0 = 0; t0 < nt;) {
        const int T = nt - t0 >= X86_THIN_MAX ? X86_THIN_MAX : (int)(nt - t0);
        const uint8_t *at = a + (size_t)t0 * as;
        const int32_t *xt = aux ? aux + (size_t)t0 * (size_t)nb : NULL;
        float *yt = y + t0 * ldy;
        if (T == 4) a2_body(4, nb, pk, nr, at, as, xt, yt, ldy);
        else if (T == 3) a2_body(3, nb, pk, nr, at, as, xt, yt, ldy);
        else if (T == 2) a2_body(2, nb, pk, nr, at, as, xt, yt, ldy);
        else a2_body(1, nb, pk, nr, at, as, xt, yt, ldy);
        t0 += T;
    }
}

/* prefill (and any n_tok): weights of a row block come from cache after the first pass */
T_AVX2 void kz_avx2_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                   float *y, int64_t ldy) {
    a2_gemm(n, pk, nr, a, as, nt, NULL, y, ldy);
}
/* the corrections of one Q8_0 activation row, which the packed GEMV and thin gemm need per block
 * (this level's and AVX-512's): made once per dispatch (kz_gemv_q4_0_16x4) instead of once per
 * kernel call - a thread makes ~5-20 calls per matrix (its run in shrinking pieces, then steals) */
T_AVX2 void kz_avx2_q8_0_corr(const void *act, int64_t n, int32_t *corr) {
    const uint8_t *a = act;
    for (int64_t b = 0; b < n / 32; b++) corr[b] = x86_q8_0_corr(a + (size_t)b * 34);
}
T_AVX2 void kz_avx2_gemv_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, const int32_t *corr,
                                   float *y) {
    a2_body(1, n / 32, pk, nr, a, 0, corr, y, 0);
}
T_AVX2 void kz_avx2_thin_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                   const int32_t *aux, float *y, int64_t ldy) {
    a2_gemm(n, pk, nr, a, as, nt, aux, y, ldy);
}
#else
typedef int kz_q4_0_16x4_avx2_unused; /* not x86-64: nothing to build (ISO C wants a declaration) */
#endif
