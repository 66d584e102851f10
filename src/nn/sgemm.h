/* Small dense f32 matrix products for the chunkwise GDN and the tiled attention:
 *   C (M x N) = cb * C + alpha * diag(ra) A (M x K) . B (K x N)
 * all row-major with leading dimensions lda / ldb / ldc; cb == 0: C is only written (never
 * read); ra NULL: no row scale. Summation over k is in order, so a result does not depend on
 * how the caller blocks M and N.
 * tri = KZ_TRI_K: A is lower triangular (A[m][k] = 0 for k > m, stored as 0): row block m0
 *                 stops at k = m0 + 4.
 * tri = KZ_TRI_N: only C[m][n] with n <= m are wanted: row block m0 stops at n = m0 + 4 (a few
 *                 entries above the diagonal are written too; the caller masks them). */
#ifndef KZ_SGEMM_H
#define KZ_SGEMM_H
#include <stddef.h>

enum { KZ_TRI_NONE = 0, KZ_TRI_K = 1, KZ_TRI_N = 2 };

void kz_sgemm(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc,
              float alpha, const float *ra, float cb, int tri);
/* The same with the kernel of one ISA level (a kz_isa, cpu.h; levels without a kernel of their
 * own, or not available here, use the plain C one). kz_sgemm uses the active level. The AVX2
 * kernel fuses multiply-adds, so its results differ from the plain one by rounding. On AArch64
 * every level, the plain one included, fuses (c = fmaf(a, b, c), k in order): one result per
 * input on all ARM levels, different from x86's plain one by rounding. */
void kz_sgemm_isa(int isa, int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                  size_t ldc, float alpha, const float *ra, float cb, int tri);
#endif
