/* Small dense f32 matrix products (see sgemm.h): a register-tiled kernel in plain C that GCC
 * -O2 vectorises (SSE / NEON), and on x86-64 CPUs with AVX2+FMA (chosen at run time through
 * cpu.c) a 4 x 16 FMA kernel. No packing: the operands here are a few hundred KB at most.
 * On AArch64 (FMA in every core) the plain kernel fuses too: c = fmaf(a, b, c), k in order,
 * the reference that the NEON kernel equals bit for bit; on x86 it stays multiply, then add. */
#include <math.h>
#include <string.h>
#include "sys/cpu.h"
#include "nn/sgemm.h"

#if defined(__aarch64__)
#define MAC(c, x, b) ((c) = fmaf((x), (b), (c)))
#else
#define MAC(c, x, b) ((c) += (x) * (b))
#endif

#define MR 4 /* tile rows */
#define NR 8 /* tile columns: 4 x 8 accumulators fit in 8 SSE / 4 AVX / 8 NEON registers */

/* o[0..nr) = cb * o + alpha * (lo | hi)  (cb == 0: o is not read) */
static inline void store_row(float *o, int nr, const float *lo, const float *hi, float alpha, float cb) {
    float c[NR];
    for (int l = 0; l < 4; l++) { c[l] = alpha * lo[l]; c[4 + l] = alpha * hi[l]; }
    if (nr == NR) { /* fixed trip counts: vectorised at -O2 */
        if (cb == 0.0f) for (int l = 0; l < NR; l++) o[l] = c[l];
        else if (cb == 1.0f) for (int l = 0; l < NR; l++) o[l] += c[l];
        else for (int l = 0; l < NR; l++) o[l] = cb * o[l] + c[l];
    } else {
        for (int l = 0; l < nr; l++) o[l] = (cb == 0.0f ? 0.0f : cb * o[l]) + c[l];
    }
}

/* one MR x NR tile: C[r] = cb * C[r] + alpha * ra[r] * (A[0..mr)[0..K) . B[0..K)[0..nr)), ra NULL = 1.
 * The accumulators are eight 4-float arrays: each `l < 4` loop is exactly one SSE / NEON
 * vector, which GCC -O2 vectorises and keeps in registers (one 8-float array per row is
 * vectorised as a 2-trip loop through memory instead: 2x slower). */
static void tile(int mr, int nr, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                 size_t ldc, float alpha, const float *ra, float cb) {
    float c0[4] = {0}, c1[4] = {0}, c2[4] = {0}, c3[4] = {0}, d0[4] = {0}, d1[4] = {0}, d2[4] = {0}, d3[4] = {0};
    if (mr == MR && nr == NR) {
        const float *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
        for (int k = 0; k < K; k++) {
            const float *b = B + (size_t)k * ldb;
            const float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
            for (int l = 0; l < 4; l++) {
                MAC(c0[l], x0, b[l]); MAC(c1[l], x1, b[l]); MAC(c2[l], x2, b[l]); MAC(c3[l], x3, b[l]);
            }
            for (int l = 0; l < 4; l++) {
                MAC(d0[l], x0, b[4 + l]); MAC(d1[l], x1, b[4 + l]); MAC(d2[l], x2, b[4 + l]); MAC(d3[l], x3, b[4 + l]);
            }
        }
    } else { /* edge tile: missing rows read as 0, missing columns are not stored */
        for (int k = 0; k < K; k++) {
            float b[NR] = {0}, x[MR] = {0};
            for (int l = 0; l < nr; l++) b[l] = B[(size_t)k * ldb + l];
            for (int r = 0; r < mr; r++) x[r] = A[(size_t)r * lda + k];
            for (int l = 0; l < 4; l++) {
                MAC(c0[l], x[0], b[l]); MAC(c1[l], x[1], b[l]); MAC(c2[l], x[2], b[l]); MAC(c3[l], x[3], b[l]);
            }
            for (int l = 0; l < 4; l++) {
                MAC(d0[l], x[0], b[4 + l]); MAC(d1[l], x[1], b[4 + l]); MAC(d2[l], x[2], b[4 + l]); MAC(d3[l], x[3], b[4 + l]);
            }
        }
    }
    store_row(C, nr, c0, d0, ra ? alpha * ra[0] : alpha, cb);
    if (mr > 1) store_row(C + ldc, nr, c1, d1, ra ? alpha * ra[1] : alpha, cb);
    if (mr > 2) store_row(C + 2 * ldc, nr, c2, d2, ra ? alpha * ra[2] : alpha, cb);
    if (mr > 3) store_row(C + 3 * ldc, nr, c3, d3, ra ? alpha * ra[3] : alpha, cb);
}

static void sgemm_c(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                 size_t ldc, float alpha, const float *ra, float cb, int tri) {
    for (int m0 = 0; m0 < M; m0 += MR) {
        const int mr = M - m0 < MR ? M - m0 : MR;
        const int ke = tri == KZ_TRI_K && m0 + mr < K ? m0 + mr : K;
        const int ne = tri == KZ_TRI_N && m0 + mr < N ? m0 + mr : N;
        for (int n0 = 0; n0 < ne; n0 += NR)
            tile(mr, ne - n0 < NR ? ne - n0 : NR, ke, A + (size_t)m0 * lda, lda, B + n0, ldb,
                 C + (size_t)m0 * ldc + n0, ldc, alpha, ra ? ra + m0 : NULL, cb);
    }
}


#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define T_AVX2 __attribute__((target("avx2,fma")))

/* C row o[0..nr) = cb * o + al * (v0 | v1) */
T_AVX2 static inline void store16(float *o, int nr, __m256 v0, __m256 v1, float al, float cb) {
    const __m256 a = _mm256_set1_ps(al);
    v0 = _mm256_mul_ps(a, v0);
    v1 = _mm256_mul_ps(a, v1);
    if (nr == 16) {
        if (cb != 0.0f) {
            const __m256 cbv = _mm256_set1_ps(cb);
            v0 = _mm256_fmadd_ps(cbv, _mm256_loadu_ps(o), v0);
            v1 = _mm256_fmadd_ps(cbv, _mm256_loadu_ps(o + 8), v1);
        }
        _mm256_storeu_ps(o, v0);
        _mm256_storeu_ps(o + 8, v1);
    } else {
        float t[16];
        _mm256_storeu_ps(t, v0);
        _mm256_storeu_ps(t + 8, v1);
        for (int l = 0; l < nr; l++) o[l] = (cb == 0.0f ? 0.0f : cb * o[l]) + t[l];
    }
}

/* 4 x 16 tile: 8 ymm accumulators (named, so they stay in registers), one FMA per row and
 * half-row per k */
T_AVX2 static void tile_avx2(int mr, int nr, int K, const float *A, size_t lda, const float *B, size_t ldb,
                             float *C, size_t ldc, float alpha, const float *ra, float cb) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    if (mr == MR && nr == 16) {
        const float *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
        for (int k = 0; k < K; k++) {
            const float *b = B + (size_t)k * ldb;
            const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            __m256 x = _mm256_broadcast_ss(a0 + k);
            c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
            x = _mm256_broadcast_ss(a1 + k);
            c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
            x = _mm256_broadcast_ss(a2 + k);
            c20 = _mm256_fmadd_ps(x, b0, c20); c21 = _mm256_fmadd_ps(x, b1, c21);
            x = _mm256_broadcast_ss(a3 + k);
            c30 = _mm256_fmadd_ps(x, b0, c30); c31 = _mm256_fmadd_ps(x, b1, c31);
        }
    } else { /* edge tile: missing rows read as 0, missing columns are not stored */
        for (int k = 0; k < K; k++) {
            float bb[16] = {0};
            memcpy(bb, B + (size_t)k * ldb, (size_t)nr * sizeof(float));
            const __m256 b0 = _mm256_loadu_ps(bb), b1 = _mm256_loadu_ps(bb + 8);
            const __m256 x0 = _mm256_set1_ps(A[k]), x1 = _mm256_set1_ps(mr > 1 ? A[lda + k] : 0.0f);
            const __m256 x2 = _mm256_set1_ps(mr > 2 ? A[2 * lda + k] : 0.0f);
            const __m256 x3 = _mm256_set1_ps(mr > 3 ? A[3 * lda + k] : 0.0f);
            c00 = _mm256_fmadd_ps(x0, b0, c00); c01 = _mm256_fmadd_ps(x0, b1, c01);
            c10 = _mm256_fmadd_ps(x1, b0, c10); c11 = _mm256_fmadd_ps(x1, b1, c11);
            c20 = _mm256_fmadd_ps(x2, b0, c20); c21 = _mm256_fmadd_ps(x2, b1, c21);
            c30 = _mm256_fmadd_ps(x3, b0, c30); c31 = _mm256_fmadd_ps(x3, b1, c31);
        }
    }
    store16(C, nr, c00, c01, ra ? alpha * ra[0] : alpha, cb);
    if (mr > 1) store16(C + ldc, nr, c10, c11, ra ? alpha * ra[1] : alpha, cb);
    if (mr > 2) store16(C + 2 * ldc, nr, c20, c21, ra ? alpha * ra[2] : alpha, cb);
    if (mr > 3) store16(C + 3 * ldc, nr, c30, c31, ra ? alpha * ra[3] : alpha, cb);
}

T_AVX2 static void sgemm_avx2(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb,
                              float *C, size_t ldc, float alpha, const float *ra, float cb, int tri) {
    for (int m0 = 0; m0 < M; m0 += MR) {
        const int mr = M - m0 < MR ? M - m0 : MR;
        const int ke = tri == KZ_TRI_K && m0 + mr < K ? m0 + mr : K;
        const int ne = tri == KZ_TRI_N && m0 + mr < N ? m0 + mr : N;
        for (int n0 = 0; n0 < ne; n0 += 16)
            tile_avx2(mr, ne - n0 < 16 ? ne - n0 : 16, ke, A + (size_t)m0 * lda, lda, B + n0, ldb,
                      C + (size_t)m0 * ldc + n0, ldc, alpha, ra ? ra + m0 : NULL, cb);
    }
}
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
/* AArch64 NEON levels: the plain kernel's arithmetic exactly (per k, c = fmaf(x, b, c), k in
 * order, the same row groups for the triangular modes: the same bits as sgemm_c, so every ARM
 * level gives the same logits), organised for fewer instructions: 8 x 8 tiles (TRI_NONE), A
 * read four k at a time and FMLA by lane, edge columns from a zero-padded copy of the B panel. */
#define NEON_KMAX 512 /* longest K with a padded B panel on the stack (16 KiB); longer: sgemm_c */
#define NEON_UNROLL _Pragma("GCC unroll 8") /* the row loops unrolled: accumulators in registers */

#define NEON_STEP(j)                                                                              \
    do {                                                                                          \
        const float32x4_t b0 = vld1q_f32(B + (size_t)(k + (j)) * ldb), b1 = vld1q_f32(B + (size_t)(k + (j)) * ldb + 4); \
        NEON_UNROLL for (int r = 0; r < MRN; r++) {                                               \
            c[r][0] = vfmaq_laneq_f32(c[r][0], b0, av[r], j);                                     \
            c[r][1] = vfmaq_laneq_f32(c[r][1], b1, av[r], j);                                     \
        }                                                                                         \
    } while (0)

/* one MRN x 8 tile (mr valid rows, nr valid columns; B has 8 readable columns per row) */
static inline __attribute__((always_inline)) void tile_neon(const int MRN, int mr, int nr, int K, const float *A,
                                                            size_t lda, const float *B, size_t ldb, float *C,
                                                            size_t ldc, float alpha, const float *ra, float cb) {
    float32x4_t c[8][2];
    const float *ar[8];
    NEON_UNROLL for (int r = 0; r < MRN; r++) {
        c[r][0] = c[r][1] = vdupq_n_f32(0.0f);
        ar[r] = A + (size_t)(r < mr ? r : mr - 1) * lda; /* a missing row repeats one (never stored) */
    }
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        float32x4_t av[8];
        NEON_UNROLL for (int r = 0; r < MRN; r++) av[r] = vld1q_f32(ar[r] + k);
        NEON_STEP(0);
        NEON_STEP(1);
        NEON_STEP(2);
        NEON_STEP(3);
    }
    for (; k < K; k++) {
        const float32x4_t b0 = vld1q_f32(B + (size_t)k * ldb), b1 = vld1q_f32(B + (size_t)k * ldb + 4);
        NEON_UNROLL for (int r = 0; r < MRN; r++) {
            const float32x4_t x = vdupq_n_f32(ar[r][k]);
            c[r][0] = vfmaq_f32(c[r][0], x, b0);
            c[r][1] = vfmaq_f32(c[r][1], x, b1);
        }
    }
    NEON_UNROLL for (int r = 0; r < MRN; r++) {
        if (r >= mr) break;
        float lo[4], hi[4];
        vst1q_f32(lo, c[r][0]);
        vst1q_f32(hi, c[r][1]);
        store_row(C + (size_t)r * ldc, nr, lo, hi, ra ? alpha * ra[r] : alpha, cb);
    }
}
/* the GCC scheduling option of this tile (a3e4a71) is unknown to clang (the NDK compiler) */
#if defined(__clang__)
#define SG_NOSCHED
#else
#define SG_NOSCHED optimize("no-schedule-insns")
#endif
static __attribute__((noinline, SG_NOSCHED)) void tile_neon8(int mr, int nr, int K, const float *A, size_t lda, const float *B,
                                                 size_t ldb, float *C, size_t ldc, float alpha, const float *ra,
                                                 float cb) {
    tile_neon(8, mr, nr, K, A, lda, B, ldb, C, ldc, alpha, ra, cb);
}
static __attribute__((noinline)) void tile_neon4(int mr, int nr, int K, const float *A, size_t lda, const float *B,
                                                 size_t ldb, float *C, size_t ldc, float alpha, const float *ra,
                                                 float cb) {
    tile_neon(4, mr, nr, K, A, lda, B, ldb, C, ldc, alpha, ra, cb);
}

static void sgemm_neon(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                       size_t ldc, float alpha, const float *ra, float cb, int tri) {
    if (K > NEON_KMAX) {
        sgemm_c(M, N, K, A, lda, B, ldb, C, ldc, alpha, ra, cb, tri);
        return;
    }
    float bp[NEON_KMAX * NR];
    const int step = tri == KZ_TRI_NONE ? 8 : MR; /* triangular bounds per MR rows, as sgemm_c */
    for (int m0 = 0; m0 < M; m0 += step) {
        const int mr = M - m0 < step ? M - m0 : step;
        const int ke = tri == KZ_TRI_K && m0 + mr < K ? m0 + mr : K;
        const int ne = tri == KZ_TRI_N && m0 + mr < N ? m0 + mr : N;
        for (int n0 = 0; n0 < ne; n0 += NR) {
            const int nr = ne - n0 < NR ? ne - n0 : NR;
            const float *bb = B + n0;
            size_t lb = ldb;
            if (nr < NR) { /* edge panel: its columns, then zeros */
                for (int k = 0; k < ke; k++)
                    for (int l = 0; l < NR; l++) bp[k * NR + l] = l < nr ? B[(size_t)k * ldb + n0 + l] : 0.0f;
                bb = bp;
                lb = NR;
            }
            if (mr > 4)
                tile_neon8(mr, nr, ke, A + (size_t)m0 * lda, lda, bb, lb, C + (size_t)m0 * ldc + n0, ldc, alpha,
                           ra ? ra + m0 : NULL, cb);
            else
                tile_neon4(mr, nr, ke, A + (size_t)m0 * lda, lda, bb, lb, C + (size_t)m0 * ldc + n0, ldc, alpha,
                           ra ? ra + m0 : NULL, cb);
        }
    }
}
#endif

void kz_sgemm_isa(int isa, int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                  size_t ldc, float alpha, const float *ra, float cb, int tri) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kz_isa_has_avx2((kz_isa)isa) && kz_isa_available(KZ_ISA_AVX2)) {
        sgemm_avx2(M, N, K, A, lda, B, ldb, C, ldc, alpha, ra, cb, tri);
        return;
    }
#endif
#if defined(__aarch64__)
    if ((isa == KZ_ISA_NEON || isa == KZ_ISA_DOTPROD || isa == KZ_ISA_I8MM) && kz_isa_available((kz_isa)isa)) {
        sgemm_neon(M, N, K, A, lda, B, ldb, C, ldc, alpha, ra, cb, tri);
        return;
    }
#endif
    (void)isa;
    sgemm_c(M, N, K, A, lda, B, ldb, C, ldc, alpha, ra, cb, tri);
}

void kz_sgemm(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc,
              float alpha, const float *ra, float cb, int tri) {
    kz_sgemm_isa((int)kz_isa_active(), M, N, K, A, lda, B, ldb, C, ldc, alpha, ra, cb, tri);
}
