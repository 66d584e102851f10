/* Q2_K / Q3_K / IQ4_XS: every available ISA level against the scalar reference (vec_dot and
 * gemm bit-identical), dequant(quant(x)) error bounds, and kz_matmul against a double
 * reference built from the dequantized weights and activations. Random non-zero data, odd row
 * counts, lengths 256*k for odd k. KZ_TEST_SMALL=1 shrinks the sizes (qemu). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sys/cpu.h"
#include "kt.h"
#include "matmul/matmul.h"
#include "sys/threadpool.h"
#include "model/types.h"

/* one matrix through kz_matmul */
static void matmul1(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy, void *work) {
    kz_matmul(pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n_tok, .y = {y}, .ldy = {ldy}, .work = work});
}
static size_t matmul1_work(const kz_wmat *w, int n_tok) {
    return kz_matmul_work_bytes(&(kz_mm){.w = {w}, .nw = 1, .n_tok = n_tok});
}

static const uint32_t TYPES[3] = { KZ_T_Q2_K, KZ_T_Q3_K, KZ_T_IQ4_XS };
static const char *NAMES[3] = { "Q2_K", "Q3_K", "IQ4_XS" };
/* relative rmse bound of dequant(quant(x)) for uniform [-1,1) data with outliers */
static const double RMSE_BOUND[3] = { 0.45, 0.30, 0.15 };

static int same_bits(float a, float b) { uint32_t x, y; memcpy(&x, &a, 4); memcpy(&y, &b, 4); return x == y; }

int main(void) {
    const int small = getenv("KZ_TEST_SMALL") && atoi(getenv("KZ_TEST_SMALL"));
    const int kmax = small ? 3 : 7, nrows = small ? 5 : 13, ntok = small ? 3 : 7;
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    const kz_qtraits *q8k = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_Q8_K);
    CHECK(q8k != NULL);
    if (!q8k) KT_END();
    for (int ti = 0; ti < 3; ti++) {
        const kz_qtraits *ref = kz_qtraits_get_isa(KZ_ISA_SCALAR, TYPES[ti]);
        CHECKF(ref && ref->vec_dot && ref->gemm && ref->act_type == KZ_T_Q8_K, "%s", NAMES[ti]);
        if (!ref) continue;
        double worst_rel = 0;
        for (int k = 1; k <= kmax; k += 2) {
            const int64_t n = 256 * k;
            const size_t wb = (size_t)(n / 256) * ref->bytes, ab = (size_t)(n / 256) * q8k->bytes;
            float *x = malloc(sizeof(float) * (size_t)(n * (nrows > ntok ? nrows : ntok)));
            float *dq = malloc(sizeof(float) * (size_t)n);
            uint8_t *w = malloc(wb * (size_t)nrows), *a = malloc(ab * (size_t)ntok);
            float *yref = malloc(sizeof(float) * (size_t)(nrows * ntok)), *y = malloc(sizeof(float) * (size_t)(nrows * ntok));
            /* weights: quantize random rows, check the round-trip error */
            for (int r = 0; r < nrows; r++) {
                float *xr = x + (size_t)r * n;
                kt_fill_row(xr, n, &s);
                CHECK(ref->quant(xr, w + (size_t)r * wb, n) == wb);
                ref->dequant(w + (size_t)r * wb, dq, n);
                double e2 = 0, x2 = 0;
                for (int64_t i = 0; i < n; i++) { e2 += ((double)dq[i] - xr[i]) * ((double)dq[i] - xr[i]); x2 += (double)xr[i] * xr[i]; }
                const double rel = sqrt(e2 / x2);
                if (rel > worst_rel) worst_rel = rel;
                CHECKF(rel > 0 && rel < RMSE_BOUND[ti], "%s n=%lld row %d: rel rmse %g", NAMES[ti], (long long)n, r, rel);
            }
            for (int t = 0; t < ntok; t++) {
                kt_fill_row(x, n, &s);
                q8k->quant(x, a + (size_t)t * ab, n);
            }
            /* scalar gemm == scalar vec_dot, and every level == scalar bit for bit */
            ref->gemm(n, w, wb, nrows, a, ab, ntok, yref, nrows);
            int nz = 0;
            for (int r = 0; r < nrows; r++)
                for (int t = 0; t < ntok; t++) {
                    float d = ref->vec_dot(w + (size_t)r * wb, a + (size_t)t * ab, n);
                    CHECK(same_bits(d, yref[t * nrows + r]));
                    nz += d != 0.0f;
                }
            CHECK(nz > nrows * ntok / 2);
            for (int isa = 1; isa < KZ_ISA_COUNT; isa++) {
                const kz_qtraits *tr = kz_qtraits_get_isa(isa, TYPES[ti]);
                if (!tr) continue;
                int bad = 0;
                for (int r = 0; r < nrows; r++)
                    for (int t = 0; t < ntok; t++)
                        bad += !same_bits(tr->vec_dot(w + (size_t)r * wb, a + (size_t)t * ab, n), yref[t * nrows + r]);
                /* gemm on odd sub-tiles: rows [1, nrows), tokens [1, ntok) */
                memset(y, 0, sizeof(float) * (size_t)(nrows * ntok));
                tr->gemm(n, w + wb, wb, nrows - 1, a + ab, ab, ntok - 1, y, nrows);
                for (int r = 1; r < nrows; r++)
                    for (int t = 1; t < ntok; t++) bad += !same_bits(y[(t - 1) * nrows + (r - 1)], yref[t * nrows + r]);
                CHECKF(bad == 0, "%s level %s n=%lld: %d mismatches", NAMES[ti], kz_isa_name((kz_isa)isa), (long long)n, bad);
            }
            free(x); free(dq); free(w); free(a); free(yref); free(y);
        }
        printf("%s: dequant(quant(x)) worst relative rmse %.4f (bound %.2f)\n", NAMES[ti], worst_rel, RMSE_BOUND[ti]);
    }
    /* kz_matmul (active level, threads) vs a double reference on the dequantized operands */
    kz_pool *pool = kz_pool_new(2);
    CHECK(pool != NULL);
    for (int ti = 0; ti < 3; ti++) {
        const int64_t n = 256 * (small ? 3 : 5);
        const int no = small ? 7 : 19, nt = 3;
        const kz_qtraits *tr = kz_qtraits_get(TYPES[ti]);
        if (!tr) { CHECK(0); continue; }
        const size_t wb = (size_t)(n / 256) * tr->bytes, ab = (size_t)(n / 256) * q8k->bytes;
        float *wf = malloc(sizeof(float) * (size_t)(n * no)), *xf = malloc(sizeof(float) * (size_t)(n * nt));
        float *wd = malloc(sizeof(float) * (size_t)(n * no)), *ad = malloc(sizeof(float) * (size_t)n);
        uint8_t *wq = malloc(wb * (size_t)no), *aq = malloc(ab);
        for (int r = 0; r < no; r++) {
            kt_fill_row(wf + r * n, n, &s);
            tr->quant(wf + r * n, wq + (size_t)r * wb, n);
            tr->dequant(wq + (size_t)r * wb, wd + r * n, n);
        }
        for (int t = 0; t < nt; t++) kt_fill_row(xf + t * n, n, &s);
        kz_wmat W = { .type = TYPES[ti], .n_in = n, .n_out = no, .row_bytes = wb, .data = wq };
        const int64_t ldy = no + 2;
        float *yy = malloc(sizeof(float) * (size_t)(ldy * nt));
        void *work = malloc(matmul1_work(&W, nt) + 1);
        matmul1(pool, &W, xf, nt, yy, ldy, work);
        double worst = 0;
        for (int t = 0; t < nt; t++) {
            q8k->quant(xf + t * n, aq, n);
            q8k->dequant(aq, ad, n);
            for (int r = 0; r < no; r++) {
                double sref = 0, sabs = 0;
                for (int64_t i = 0; i < n; i++) { sref += (double)wd[r * n + i] * ad[i]; sabs += fabs((double)wd[r * n + i] * ad[i]); }
                const double err = fabs(yy[t * ldy + r] - sref) / (sabs + 1e-30);
                if (err > worst) worst = err;
            }
        }
        CHECKF(worst < 1e-5, "%s matmul: worst error %g of sum|w*a|", NAMES[ti], worst);
        printf("%s: matmul vs double reference: worst %.3g of sum|w*a|\n", NAMES[ti], worst);
        free(wf); free(xf); free(wd); free(ad); free(wq); free(aq); free(yy); free(work);
    }
    kz_pool_free(pool);
    KT_END();
}
