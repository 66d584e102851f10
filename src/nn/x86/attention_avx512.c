/* Decode attention partial (kz_attn_partial) with AVX-512: the same numbers as the generic body
 * in attention.c, bit for bit, with a fraction of its instructions.
 *
 * Why a separate kernel: the generic body converts each block of F16 rows into a float buffer,
 * then every multiply takes one operand from memory, which left its K pass load-bound. Here the
 * F16 rows are converted in registers (VCVTPH2PS) as they are read, 4 key rows share each query
 * chunk held in registers (32 vector registers), and two rows ride in one zmm.
 *
 * Same bits as the generic body: each score is its 8 fused lane sums, in the same order,
 * reduced by the same tree ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), times scale; the PV sums run
 * over positions in order, one fused multiply-add per element (VFMADD rounds once, as fmaf).
 * F16 -> f32 is exact for every half but a signalling NaN, which VCVTPH2PS quiets where the
 * reference keeps it; the first fused multiply-add would quiet it anyway, with the same payload,
 * so the results agree. */
#include "nn/attention_isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kazeia.h"
#include "nn/ops.h"

#define T512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,f16c,avx2,fma")))

/* The loaders and the two passes take the storage as a constant (f16: 1 IEEE half, 0 f32) and
 * are always inlined, once per type: with the type read from the cache inside the loops, the
 * K pass carried a compare and branch per load, spilled row pointers, and ran its one-line
 * prefetch as a loop (~30 instructions around 8 multiply-adds). */
#define KZ_AI512 T512 static inline __attribute__((always_inline))

/* rows a and b (8 values from column i) as one zmm: a in the low half */
KZ_AI512 __m512 ld_pair(int f16, const void *ra, const void *rb, int i) {
    if (f16) {
        const __m128i ha = _mm_loadu_si128((const __m128i *)((const uint16_t *)ra + i));
        const __m128i hb = _mm_loadu_si128((const __m128i *)((const uint16_t *)rb + i));
        return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(ha), hb, 1));
    }
    const __m256 fa = _mm256_loadu_ps((const float *)ra + i), fb = _mm256_loadu_ps((const float *)rb + i);
    return _mm512_insertf32x8(_mm512_castps256_ps512(fa), fb, 1);
}

/* 16 consecutive values of a row from column c */
KZ_AI512 __m512 ld_row16(int f16, const void *r, int c) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)r + c)));
    return _mm512_loadu_ps((const float *)r + c);
}

/* level 1 of the tree for one head: rows 0, 1 in a, rows 2, 3 in b (8 lanes each); result
 * 128-bit lane j = row j, element k = lane k + lane k + 4 */
KZ_AI512 __m512 l1_pair(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* scores of 4 key rows (rows[0..3]; repeats fill a short tail, only nrows are written) for the
 * 4 query heads: out[r * ldo + j]. Two row pairs x 4 heads = 8 accumulators; each query chunk
 * is loaded once for the 4 rows. */
KZ_AI512 void dot_rows4(int f16, const void *const *rows, const float *q2, int hd, float scale, float *out,
                       size_t ldo, int nrows, const char *pf_k, const char *pf_v) {
    /* the 4 rows span hd / 8 * pf_step bytes: a slice per step of a later K group into L1 and of
     * this group's V rows into L2 (read after the K pass); prefetching a line already cached is
     * harmless, so callers with nothing to prefetch pass rows they read anyway */
    const size_t pf_step = f16 ? 64 : 128;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int i = 0; i < hd; i += 8) {
        for (size_t o = 0; o < pf_step; o += 64) {
            _mm_prefetch(pf_k + (size_t)i / 8 * pf_step + o, _MM_HINT_T0);
            _mm_prefetch(pf_v + (size_t)i / 8 * pf_step + o, _MM_HINT_T1);
        }
        const __m512 k01 = ld_pair(f16, rows[0], rows[1], i), k23 = ld_pair(f16, rows[2], rows[3], i);
        const float *qi = q2 + (size_t)i * 2;
        __m512 qv = _mm512_loadu_ps(qi);
        a0 = _mm512_fmadd_ps(qv, k01, a0);
        b0 = _mm512_fmadd_ps(qv, k23, b0);
        qv = _mm512_loadu_ps(qi + 2 * (size_t)hd);
        a1 = _mm512_fmadd_ps(qv, k01, a1);
        b1 = _mm512_fmadd_ps(qv, k23, b1);
        qv = _mm512_loadu_ps(qi + 4 * (size_t)hd);
        a2 = _mm512_fmadd_ps(qv, k01, a2);
        b2 = _mm512_fmadd_ps(qv, k23, b2);
        qv = _mm512_loadu_ps(qi + 6 * (size_t)hd);
        a3 = _mm512_fmadd_ps(qv, k01, a3);
        b3 = _mm512_fmadd_ps(qv, k23, b3);
    }
    /* The 16 sums (4 rows x 4 heads) by kz_dot8's tree in three levels across registers, each
     * two-source shuffle serving two of them: level 1 pairs lanes l and l + 4 of one row, level 2
     * the results 0 + 1 and 2 + 3, level 3 the two halves; IEEE addition commutes, so every
     * sum is ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)) bit for bit. A row's 8 lanes are a 256-bit half
     * of a (rows 0, 1) or b (rows 2, 3). */
    const __m512 s0 = l1_pair(a0, b0), s1 = l1_pair(a1, b1), s2 = l1_pair(a2, b2), s3 = l1_pair(a3, b3);
    /* s_r: 128-bit lane j = row j, element k = lanes k + (k + 4) of head r */
    const __m512 u01 = _mm512_add_ps(_mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 u23 = _mm512_add_ps(_mm512_shuffle_ps(s2, s3, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_ps(s2, s3, _MM_SHUFFLE(3, 1, 3, 1)));
    /* u: per row [h0: 0+1, h0: 2+3, h1: 0+1, h1: 2+3] (heads 0, 1 / 2, 3) */
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
    /* t: 128-bit lane j = row j, element r = head r; transposed so that lane r holds head r */
    const __m512 o = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                           _mm512_mul_ps(t, _mm512_set1_ps(scale)));
    const __mmask8 m = (__mmask8)((1u << nrows) - 1u);
    _mm_mask_storeu_ps(out, m, _mm512_castps512_ps128(o));
    _mm_mask_storeu_ps(out + ldo, m, _mm512_extractf32x4_ps(o, 1));
    _mm_mask_storeu_ps(out + 2 * ldo, m, _mm512_extractf32x4_ps(o, 2));
    _mm_mask_storeu_ps(out + 3 * ldo, m, _mm512_extractf32x4_ps(o, 3));
}

/* acc_r[c..c+32) += sum_j w_r[j] v_j[c..c+32) for the 4 heads, j in order: 8 accumulators */
KZ_AI512 void pv_cols32(int f16, const void *const *rows, int nb, const float *w, size_t ldw, float *acc, int hd,
                       int c, const char *pf, size_t rb) {
    float *y0 = acc + c, *y1 = y0 + hd, *y2 = y1 + hd, *y3 = y2 + hd;
    __m512 x0 = _mm512_loadu_ps(y0), x1 = _mm512_loadu_ps(y1), x2 = _mm512_loadu_ps(y2), x3 = _mm512_loadu_ps(y3);
    __m512 z0 = _mm512_loadu_ps(y0 + 16), z1 = _mm512_loadu_ps(y1 + 16), z2 = _mm512_loadu_ps(y2 + 16),
           z3 = _mm512_loadu_ps(y3 + 16);
    const size_t cb = f16 ? 64 : 128; /* bytes of 32 values */
    for (int j = 0; j < nb; j++) {
        /* the same columns of the next block's rows (the stride of a row defeats the hardware
         * prefetchers; pf is this block when there is no next one) */
        for (size_t o = 0; o < cb; o += 64) _mm_prefetch(pf + (size_t)j * rb + (size_t)c / 32 * cb + o, _MM_HINT_T0);
        const __m512 va = ld_row16(f16, rows[j], c), vb = ld_row16(f16, rows[j], c + 16);
        __m512 wr = _mm512_set1_ps(w[j]);
        x0 = _mm512_fmadd_ps(wr, va, x0);
        z0 = _mm512_fmadd_ps(wr, vb, z0);
        wr = _mm512_set1_ps(w[ldw + j]);
        x1 = _mm512_fmadd_ps(wr, va, x1);
        z1 = _mm512_fmadd_ps(wr, vb, z1);
        wr = _mm512_set1_ps(w[2 * ldw + j]);
        x2 = _mm512_fmadd_ps(wr, va, x2);
        z2 = _mm512_fmadd_ps(wr, vb, z2);
        wr = _mm512_set1_ps(w[3 * ldw + j]);
        x3 = _mm512_fmadd_ps(wr, va, x3);
        z3 = _mm512_fmadd_ps(wr, vb, z3);
    }
    _mm512_storeu_ps(y0, x0), _mm512_storeu_ps(y1, x1), _mm512_storeu_ps(y2, x2), _mm512_storeu_ps(y3, x3);
    _mm512_storeu_ps(y0 + 16, z0), _mm512_storeu_ps(y1 + 16, z1), _mm512_storeu_ps(y2 + 16, z2),
        _mm512_storeu_ps(y3 + 16, z3);
}

#define KZ_AVX512_VB 16 /* positions per V block (the row pointers of one PV pass) */
#define KZ_PF_ROWS 16   /* K prefetch distance in positions */

KZ_AI512 void partial_body(int f16, const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq,
                          float scale, float *ml, float *acc, float *scratch) {
    const int hd = kv->head_dim, n_rep = 4, n = p1 - p0;
    memset(acc, 0, (size_t)n_rep * hd * sizeof(float));
    const size_t rb = kz_kv_row_bytes(kv);
    const char *kbase = kz_kv_row(kv, 0, g, p0), *vbase = kz_kv_row(kv, 1, g, p0);
    /* scratch: scores sc[r * n + t], then each query chunk of 8 twice (q2[r][i / 8][16]) so one
     * load fills both halves of a pair's zmm (kz_attn_scratch_floats leaves KZ_ATTN_VB * hd
     * floats after the scores; this needs 8 * hd) */
    float *sc = scratch, *q2 = scratch + (size_t)n_rep * n;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < hd; i += 8) {
            const __m256 c = _mm256_loadu_ps(q + (size_t)r * ldq + i);
            _mm512_storeu_ps(q2 + ((size_t)r * hd + i) * 2, _mm512_insertf32x8(_mm512_castps256_ps512(c), c, 1));
        }
    for (int t = 0; t < n; t += 4) {
        const void *rows[4];
        const int nr = n - t < 4 ? n - t : 4;
        for (int j = 0; j < 4; j++) rows[j] = kbase + (size_t)(t + (j < nr ? j : nr - 1)) * rb;
        /* the sequential prefetchers do not follow 4 rows read side by side: prefetch by hand,
         * KZ_PF_ROWS positions ahead (a miss per row otherwise stalled the loop on every load) */
        const char *pf_k = t + KZ_PF_ROWS + 4 <= n ? kbase + (size_t)(t + KZ_PF_ROWS) * rb : kbase + (size_t)t * rb;
        const char *pf_v = nr == 4 ? vbase + (size_t)t * rb : kbase + (size_t)t * rb; /* only rows of this span */
        dot_rows4(f16, rows, q2, hd, scale, sc + t, (size_t)n, nr, pf_k, pf_v);
    }
    kz_attn_softmax_partial(sc, 4, n, ml);
    for (int t0 = 0; t0 < n; t0 += KZ_AVX512_VB) {
        const int nb = n - t0 < KZ_AVX512_VB ? n - t0 : KZ_AVX512_VB;
        const void *rows[KZ_AVX512_VB];
        for (int j = 0; j < nb; j++) rows[j] = vbase + (size_t)(t0 + j) * rb;
        const char *pf = t0 + 2 * KZ_AVX512_VB <= n ? vbase + (size_t)(t0 + KZ_AVX512_VB) * rb : vbase + (size_t)t0 * rb;
        for (int c = 0; c < hd; c += 32) pv_cols32(f16, rows, nb, sc + t0, (size_t)n, acc, hd, c, pf, rb);
    }
}

T512 int kz_attn_partial_avx512(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq,
                                float scale, float *ml, float *acc, float *scratch) {
    const int hd = kv->head_dim, n_rep = kv->n_head / kv->n_head_kv;
    if (n_rep != 4 || hd % 32 || (kv->type != KZ_KV_F16 && kv->type != KZ_KV_F32) || p1 <= p0) return 0;
    if (kv->type == KZ_KV_F16) partial_body(1, kv, g, p0, p1, q, ldq, scale, ml, acc, scratch);
    else partial_body(0, kv, g, p0, p1, q, ldq, scale, ml, acc, scratch);
    return 1;
}
#endif
