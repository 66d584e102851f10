/* x86-64 kernels for Q4_K / Q5_K / Q6_K x Q8_K: AVX2 and AVX-512 VNNI (256-bit) variants of
 * one template (x86/kquant_tmpl.h). Target attributes keep the file buildable in a baseline
 * x86-64 build; traits.c hands them out only for levels cpu.c found available. */

#include "matmul/kernels.h"
#if defined(__x86_64__)
#include "matmul/x86/simd.h"

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


/* ---------------- Q2_K / Q3_K / IQ4_XS (AVX2; the AVX-512 level uses these too) ---------------- */
/* AVX2 dots of Q2_K / Q3_K / IQ4_XS with Q8_K (see kernels.h for the contract). Each
 * 32-element chunk: weights decoded to int8 w (Q2_K 0..3, Q3_K -4..3, IQ4_XS codebook values),
 * p16 = maddubs(|w|, sign(a, w)) (pairs <= 2*127*127, no saturation), p32 = madd(p16, scale of
 * the chunk's two 16-element halves) summed into int32 lanes: the exact integer isum of the
 * scalar reference, then its float ops unchanged (no FMA: this file forbids contraction). */
#define Q8K 292

static inline float h2f(const uint8_t *p) { return kz_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }
static inline float act_d(const uint8_t *a) { float d; memcpy(&d, a, 4); return d; }

T_AVX2 static inline __m256i chunk(__m256i acc, __m256i w, const uint8_t *a, int s_lo, int s_hi) {
    const __m256i av = _mm256_loadu_si256((const __m256i *)a);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(av, w));
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)s_hi), _mm_set1_epi16((short)s_lo));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, sc));
}

T_AVX2 float kz_avx2_dot_q2_K(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 84, y += Q8K) {
        __m256i vi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 16 + 32 * h));
            for (int g = 0; g < 4; g++) {
                const int s = 8 * h + 2 * g;
                const __m256i wv = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3);
                vi = chunk(vi, wv, y + 4 + 128 * h + 32 * g, x[s] & 0xF, x[s + 1] & 0xF);
            }
        }
        int32_t summ = 0;
        for (int s = 0; s < 16; s++) {
            int16_t b;
            memcpy(&b, y + 260 + 2 * s, 2);
            summ += (x[s] >> 4) * b;
        }
        const int32_t isum = x86_hsum_epi32(vi);
        const float da = act_d(y);
        acc += (da * h2f(x + 80)) * (float)isum - (da * h2f(x + 82)) * (float)summ;
    }
    return acc;
}

T_AVX2 float kz_avx2_dot_q3_K(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 110, y += Q8K) {
        int8_t sc[16];
        const uint8_t *s12 = x + 96;
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? s12[j] & 0xF : s12[j - 8] >> 4;
            sc[j] = (int8_t)((lo | (((s12[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
        }
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x);
        __m256i vi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 32 + 32 * h));
            for (int g = 0; g < 4; g++) {
                const int s = 8 * h + 2 * g;
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + g)));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                const __m256i wv = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3),
                                                   _mm256_andnot_si256(set, four));
                vi = chunk(vi, wv, y + 4 + 128 * h + 32 * g, sc[s], sc[s + 1]);
            }
        }
        acc += (act_d(y) * h2f(x + 108)) * (float)x86_hsum_epi32(vi);
    }
    return acc;
}

T_AVX2 float kz_avx2_dot_iq4_xs(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    const __m256i kv = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
    const __m256i m15 = _mm256_set1_epi8(15);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++, x += 136, y += Q8K) {
        const int sh = x[2] | (x[3] << 8);
        __m256i vi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4))) - 32;
            const __m128i b = _mm_loadu_si128((const __m128i *)(x + 8 + 16 * ib));
            const __m256i nib = _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(b, 4), b), m15); /* low half: elems 0..15, high: 16..31 */
            vi = chunk(vi, _mm256_shuffle_epi8(kv, nib), y + 4 + 32 * ib, ls, ls);
        }
        acc += (act_d(y) * h2f(x)) * (float)x86_hsum_epi32(vi);
    }
    return acc;
}

#define GEMM(name, dot)                                                                           \
    void name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
              float *y, int64_t ldy) {                                                            \
        for (int64_t r = 0; r < nr; r++)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                      \
                y[t * ldy + r] = dot((const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)t * as, n); \
    }
GEMM(kz_avx2_gemm_q2_K, kz_avx2_dot_q2_K)
GEMM(kz_avx2_gemm_q3_K, kz_avx2_dot_q3_K)
GEMM(kz_avx2_gemm_iq4_xs, kz_avx2_dot_iq4_xs)
#else
typedef int kz_quant_k_x86_unused; /* not x86-64 */
#endif
