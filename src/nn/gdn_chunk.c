/* Chunkwise-parallel gated delta rule (WY / UT-transform form) for prefill.
 *
 * Per value head and chunk of n <= KZ_GDN_CHUNK tokens, S0 = state entering the chunk (dk x dv):
 *   G_r = sum_{u<=r} g_u,  D[r][s] = exp(G_r - G_s) (s <= r)
 *   A = strict_lower(diag(beta) K K^T . D),   (I + A) [U | W] = [diag(beta) V | diag(beta e^G) K]
 *   V_new = U - W S0
 *   O     = diag(e^G) Q S0 + lower(Q K^T . D) V_new
 *   S     = e^{G_last} S0 + (diag(e^{G_last - G}) K)^T V_new
 * Everything is a small dense matrix product (kz_sgemm, sgemm.c).
 * While a call runs, a head's state is kept as row-major S [dk][dv] (the transpose of the
 * recurrent layout), so all products are "row of A times rows of B" with contiguous rows. */
#include <math.h>
#include <string.h>
#include <stdint.h>
#include "nn/gdn.h"
#include "nn/ops.h"
#include "nn/sgemm.h"

#ifndef CS
#define CS KZ_GDN_CHUNK
#endif
#define MR 4 /* rows per block of the forward substitution */
/* exp of a log-decay (<= 0). Below -80 the factor is < 2e-35, negligible next to any O(1)
 * term; returning 0 there keeps denormals (slow on many CPUs) out of the products. */
static inline float dexpf(float x) {
    union { float f; uint32_t u; } e = {.f = kz_exp(x)};
    e.u &= (uint32_t)(x < -80.0f) - 1u; /* mask, not ?:, so loops over it vectorise */
    return e.f;
}
static inline float dexp(double x) { return dexpf((float)x); }

/* y -= a x: blocks of 8 with a fixed inner trip count, which GCC -O2 vectorises
 * (its cheap cost model skips loops whose count is not a known multiple of the vector) */
static void axpy_sub(float *restrict y, const float *restrict x, float a, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) y[i + l] -= a * x[i + l];
    for (; i < n; i++) y[i] -= a * x[i];
}

size_t kz_gdn_chunk_scratch_floats(const kz_gdn_shape *sh) {
    const size_t dk = (size_t)sh->dk, dv = (size_t)sh->dv;
    /* G (CS doubles = 2*CS floats), eG, beta, S, K^T, P, A, X; rounded up to 64 bytes so that
     * per-thread slices of one allocation keep G double-aligned */
    const size_t n = 2 * CS + 2 * CS + dk * dv + dk * CS + 2 * (size_t)CS * CS + (size_t)CS * (dv + dk);
    return (n + 15) & ~(size_t)15;
}

void kz_gdn_chunked(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v, size_t ld_in,
                    const float *g, const float *beta, size_t ld_gb, float *state, float *out, size_t ld_out,
                    int h0, int h1, float *scratch) {
    const int dk = sh->dk, dv = sh->dv, hk = sh->n_k_heads, LX = dk + dv;
    double *G = (double *)scratch; /* malloc or a 64-byte multiple into it: double-aligned */
    float *eG = scratch + 2 * CS, *bt = eG + CS, *S = bt + CS, *KT = S + (size_t)dk * dv;
    float *P = KT + (size_t)dk * CS, *Am = P + (size_t)CS * CS, *X = Am + (size_t)CS * CS;
    for (int j = h0; j < h1; j++) {
        float *M = state + (size_t)j * dv * dk;
        const int ik = j % hk;
        kz_transpose(S, (size_t)dv, M, (size_t)dk, dv, dk);
        for (int t0 = 0; t0 < T; t0 += CS) {
            const int n = T - t0 < CS ? T - t0 : CS;
            const float *Q = q + (size_t)t0 * ld_in + (size_t)ik * dk;
            const float *K = k + (size_t)t0 * ld_in + (size_t)ik * dk;
            const float *V = v + (size_t)t0 * ld_in + (size_t)j * dv;
            float *O = out + (size_t)t0 * ld_out + (size_t)j * dv;
            /* cumulative log-decay in double: exp(G_r - G_s) stays exact to float rounding
             * even when G reaches -300 (strong decay) */
            double acc = 0.0;
            for (int r = 0; r < n; r++) {
                acc += g[(size_t)(t0 + r) * ld_gb + j];
                G[r] = acc;
                eG[r] = dexp(acc);
                bt[r] = beta[(size_t)(t0 + r) * ld_gb + j];
            }
            kz_transpose(KT, CS, K, ld_in, n, dk);
            /* P = Q K^T, A = K K^T (lower parts), then decay / beta / causal masks */
            kz_sgemm(n, n, dk, Q, ld_in, KT, CS, P, CS, 1.0f, NULL, 0.0f, KZ_TRI_N);
            kz_sgemm(n, n, dk, K, ld_in, KT, CS, Am, CS, 1.0f, NULL, 0.0f, KZ_TRI_N);
            for (int r = 0; r < n; r++) {
                float *pr = P + (size_t)r * CS, *ar = Am + (size_t)r * CS;
                const double gr = G[r];
                const float br = bt[r];
                int s = 0;
                for (; s + 8 <= r; s += 8) { /* blocks of 8: vectorised */
                    float d[8];
                    for (int l = 0; l < 8; l++) d[l] = dexpf((float)(gr - G[s + l]));
                    for (int l = 0; l < 8; l++) {
                        pr[s + l] *= d[l];
                        ar[s + l] *= br * d[l];
                    }
                }
                for (; s < r; s++) {
                    const float d = dexpf((float)(gr - G[s]));
                    pr[s] *= d;
                    ar[s] *= br * d;
                }
                for (int s = r + 1; s < n; s++) pr[s] = 0.0f; /* gemm TRI_K reads the in-block upper part */
            }
            /* right-hand sides [beta V | beta e^G K], then (I + A) X = RHS by blocked forward
             * substitution in place: a row block first takes all earlier blocks in one product,
             * then resolves its own few rows */
            for (int r = 0; r < n; r++) {
                kz_scale_to(X + (size_t)r * LX, V + (size_t)r * ld_in, bt[r], dv);
                kz_scale_to(X + (size_t)r * LX + dv, K + (size_t)r * ld_in, bt[r] * eG[r], dk);
            }
            for (int m0 = 0; m0 < n; m0 += MR) {
                const int mr = n - m0 < MR ? n - m0 : MR;
                if (m0 > 0)
                    kz_sgemm(mr, LX, m0, Am + (size_t)m0 * CS, CS, X, LX, X + (size_t)m0 * LX, LX, -1.0f, NULL, 1.0f, KZ_TRI_NONE);
                for (int r = m0 + 1; r < m0 + mr; r++)
                    for (int s = m0; s < r; s++)
                        axpy_sub(X + (size_t)r * LX, X + (size_t)s * LX, Am[(size_t)r * CS + s], LX);
            }
            /* V_new = U - W S0 (into the U columns of X) */
            kz_sgemm(n, dv, dk, X + dv, LX, S, dv, X, LX, -1.0f, NULL, 1.0f, KZ_TRI_NONE);
            /* O = e^G (Q S0) + P V_new */
            kz_sgemm(n, dv, dk, Q, ld_in, S, dv, O, ld_out, 1.0f, eG, 0.0f, KZ_TRI_NONE);
            kz_sgemm(n, dv, n, P, CS, X, LX, O, ld_out, 1.0f, NULL, 1.0f, KZ_TRI_K);
            /* S = e^{G_last} S0 + K^T (diag(e^{G_last - G}) V_new): the decay goes on the rows
             * of V_new (no longer needed), so K^T serves as is */
            const double gl = G[n - 1];
            for (int r = 0; r < n; r++) kz_scale(X + (size_t)r * LX, dv, dexp(gl - G[r]));
            kz_sgemm(dk, dv, n, KT, CS, X, LX, S, dv, 1.0f, NULL, eG[n - 1], KZ_TRI_NONE);
        }
        kz_transpose(M, (size_t)dk, S, (size_t)dv, dk, dv);
    }
}
