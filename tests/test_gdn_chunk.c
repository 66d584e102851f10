/* Chunkwise gated delta rule (kz_gdn_chunked) against the token-by-token form
 * (kz_gdn_recurrent, itself checked against transformers) and a double-precision recurrence:
 * T in {1, 63, 64, 65, 500}, strong (g ~ -5) and weak (g ~ -0.01) decay, random beta,
 * non-zero initial state, H_v != H_k, head dims 32 / 128 and an odd dk != dv.
 * kz_sgemm (the products inside) is checked per ISA level against a double product, and the
 * whole test runs again in a child with KZ_ISA=scalar (the level is fixed per process).
 * `test_gdn_chunk --bench` times both forms for T = 512, 16 heads x 128 (one thread). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "sys/cpu.h"
#include "nn/gdn.h"
#include "kt.h"
#include "nn/sgemm.h"

static unsigned long long rs = 0x2545f4914f6cdd1dull;

typedef struct {
    int Hk, Hv, dk, dv, T;
    size_t ld;
    float *in, *g, *beta, *M0;
} gdn_case;

static float *fmalloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

/* decay: 0 strong (g ~ -5), 1 weak (g ~ -0.01), 2 mixed (softplus gates as in the model) */
static void make_case(gdn_case *c, int Hk, int Hv, int dk, int dv, int T, int decay) {
    c->Hk = Hk; c->Hv = Hv; c->dk = dk; c->dv = dv; c->T = T;
    c->ld = (size_t)2 * Hk * dk + (size_t)Hv * dv;
    c->in = fmalloc((size_t)T * c->ld);
    c->g = fmalloc((size_t)T * Hv);
    c->beta = fmalloc((size_t)T * Hv);
    c->M0 = fmalloc((size_t)Hv * dv * dk);
    for (size_t i = 0; i < (size_t)T * c->ld; i++) c->in[i] = kt_randf(&rs);
    for (int t = 0; t < T; t++) kz_gdn_qk_norm(c->in + (size_t)t * c->ld, Hk, dk, 1e-6f);
    for (int i = 0; i < T * Hv; i++) {
        const float u = kt_randf(&rs);
        if (decay == 0) c->g[i] = -5.0f * (1.0f + 0.5f * u);
        else if (decay == 1) c->g[i] = -0.01f * (1.0f + 0.5f * u);
        else c->g[i] = -expf(0.5f * kt_randf(&rs)) * log1pf(expf(2.0f * u));
        c->beta[i] = 1.0f / (1.0f + expf(-3.0f * kt_randf(&rs)));
    }
    for (size_t i = 0; i < (size_t)Hv * dv * dk; i++) c->M0[i] = 0.3f * kt_randf(&rs);
}

static void free_case(gdn_case *c) { free(c->in); free(c->g); free(c->beta); free(c->M0); }

static void run_rec(const gdn_case *c, float *M, float *out) {
    kz_gdn_shape sh = {c->Hk, c->Hv, c->dk, c->dv};
    const size_t kd = (size_t)c->Hk * c->dk;
    kz_gdn_recurrent(&sh, c->T, c->in, c->in + kd, c->in + 2 * kd, c->ld, c->g, c->beta, c->Hv, M, out,
                     (size_t)c->Hv * c->dv, 0, c->Hv);
}

/* chunked over token pieces [0, split) and [split, T) and head ranges [0, hs), [hs, Hv) */
static void run_chunk(const gdn_case *c, float *M, float *out, int split, int hs, float *scr) {
    kz_gdn_shape sh = {c->Hk, c->Hv, c->dk, c->dv};
    const size_t kd = (size_t)c->Hk * c->dk, ldo = (size_t)c->Hv * c->dv;
    const int pieces[2][2] = {{0, split}, {split, c->T}};
    for (int p = 0; p < 2; p++) {
        const int t0 = pieces[p][0], n = pieces[p][1] - t0;
        if (n <= 0) continue;
        const float *x = c->in + (size_t)t0 * c->ld;
        const float *g = c->g + (size_t)t0 * c->Hv, *b = c->beta + (size_t)t0 * c->Hv;
        float *o = out + (size_t)t0 * ldo;
        if (hs > 0) kz_gdn_chunked(&sh, n, x, x + kd, x + 2 * kd, c->ld, g, b, c->Hv, M, o, ldo, 0, hs, scr);
        if (hs < c->Hv) kz_gdn_chunked(&sh, n, x, x + kd, x + 2 * kd, c->ld, g, b, c->Hv, M, o, ldo, hs, c->Hv, scr);
    }
}

/* double-precision recurrence in the state layout M[j][r][i] = S_j[i][r] */
static void run_double(const gdn_case *c, double *M, double *out) {
    const int dk = c->dk, dv = c->dv;
    for (size_t i = 0; i < (size_t)c->Hv * dv * dk; i++) M[i] = c->M0[i];
    for (int j = 0; j < c->Hv; j++) {
        double *Mj = M + (size_t)j * dv * dk;
        for (int t = 0; t < c->T; t++) {
            const float *row = c->in + (size_t)t * c->ld;
            const float *q = row + (j % c->Hk) * dk, *k = row + (size_t)c->Hk * dk + (j % c->Hk) * dk;
            const float *v = row + (size_t)2 * c->Hk * dk + (size_t)j * dv;
            const double a = exp((double)c->g[t * c->Hv + j]), b = c->beta[t * c->Hv + j];
            for (int r = 0; r < dv; r++) {
                double *m = Mj + (size_t)r * dk, kv = 0, o = 0;
                for (int i = 0; i < dk; i++) kv += a * m[i] * k[i];
                const double d = b * (v[r] - kv);
                for (int i = 0; i < dk; i++) { m[i] = a * m[i] + d * k[i]; o += m[i] * q[i]; }
                out[((size_t)t * c->Hv + j) * dv + r] = o;
            }
        }
    }
}

/* max |a - b| / max |b| */
static double rel_ff(const float *a, const float *b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > e || isnan(d)) e = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 1e-30 ? m : 1e-30);
}
static double rel_fd(const float *a, const double *b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > e || isnan(d)) e = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 1e-30 ? m : 1e-30);
}

static double worst_out = 0, worst_state = 0;

static void check_case(int Hk, int Hv, int dk, int dv, int T, int decay) {
    static const char *dn[] = {"strong", "weak", "mixed"};
    gdn_case c;
    make_case(&c, Hk, Hv, dk, dv, T, decay);
    const size_t ns = (size_t)Hv * dv * dk, no = (size_t)T * Hv * dv;
    kz_gdn_shape sh = {Hk, Hv, dk, dv};
    float *Mr = fmalloc(ns), *Mc = fmalloc(ns), *Ms = fmalloc(ns), *orr = fmalloc(no), *oc = fmalloc(no),
          *os = fmalloc(no), *scr = fmalloc(kz_gdn_chunk_scratch_floats(&sh));
    double *Md = malloc(ns * sizeof(double)), *od = malloc(no * sizeof(double));
    if (!Md || !od) { fprintf(stderr, "out of memory\n"); exit(2); }
    memcpy(Mr, c.M0, ns * sizeof(float));
    memcpy(Mc, c.M0, ns * sizeof(float));
    memcpy(Ms, c.M0, ns * sizeof(float));
    for (size_t i = 0; i < no; i++) oc[i] = os[i] = NAN; /* every output must be written */
    run_rec(&c, Mr, orr);
    run_chunk(&c, Mc, oc, T, Hv, scr);
    /* an uneven token split (not on a chunk boundary) and a head split, as threads would do */
    run_chunk(&c, Ms, os, T > 1 ? T / 3 + 1 : 1, Hv / 2, scr);
    run_double(&c, Md, od);
    const double eo = rel_ff(oc, orr, no), es = rel_ff(Mc, Mr, ns);
    const double eos = rel_ff(os, orr, no), ess = rel_ff(Ms, Mr, ns);
    const double dco = rel_fd(oc, od, no), dro = rel_fd(orr, od, no);
    const double dcs = rel_fd(Mc, Md, ns), drs = rel_fd(Mr, Md, ns);
    printf("  Hk %d Hv %d dk %3d dv %3d T %3d %-6s: chunk vs rec out %.2e state %.2e | split %.2e %.2e | "
           "vs f64: chunk %.2e/%.2e rec %.2e/%.2e\n",
           Hk, Hv, dk, dv, T, dn[decay], eo, es, eos, ess, dco, dcs, dro, drs);
    CHECKF(eo <= 1e-5, "output rel %g (Hv %d dk %d T %d %s)", eo, Hv, dk, T, dn[decay]);
    CHECKF(es <= 1e-5, "state rel %g (Hv %d dk %d T %d %s)", es, Hv, dk, T, dn[decay]);
    CHECKF(eos <= 1e-5 && ess <= 1e-5, "split calls rel %g / %g (T %d %s)", eos, ess, T, dn[decay]);
    /* the chunked form must not be less accurate than the recurrent one (vs exact) by much */
    CHECKF(dco <= 2 * dro + 1e-6 && dcs <= 2 * drs + 1e-6, "chunk vs f64 %g/%g, rec %g/%g", dco, dcs, dro, drs);
    if (eo > worst_out) worst_out = eo;
    if (es > worst_state) worst_state = es;
    free(Mr); free(Mc); free(Ms); free(orr); free(oc); free(os); free(scr); free(Md); free(od);
    free_case(&c);
}

/* thread CPU time: the build machine is shared, wall time swings with the other jobs */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(void) {
    const int Hk = 16, Hv = 16, d = 128, T = 512, reps = 5;
    gdn_case c;
    make_case(&c, Hk, Hv, d, d, T, 2);
    kz_gdn_shape sh = {Hk, Hv, d, d};
    const size_t ns = (size_t)Hv * d * d, no = (size_t)T * Hv * d;
    float *M = fmalloc(ns), *o = fmalloc(no), *o2 = fmalloc(no), *scr = fmalloc(kz_gdn_chunk_scratch_floats(&sh));
    double tr = 1e9, tc = 1e9;
    for (int r = 0; r < reps; r++) {
        memcpy(M, c.M0, ns * sizeof(float));
        double t0 = now_s();
        run_rec(&c, M, o);
        double t1 = now_s();
        memcpy(M, c.M0, ns * sizeof(float));
        run_chunk(&c, M, o2, T, Hv, scr);
        double t2 = now_s();
        if (t1 - t0 < tr) tr = t1 - t0;
        if (t2 - t1 < tc) tc = t2 - t1;
    }
    printf("GDN core T=%d, %d heads x %d, 1 thread: recurrent %.2f ms, chunked %.2f ms (%.2fx), rel diff %.2e\n", T,
           Hv, d, tr * 1e3, tc * 1e3, tr / tc, rel_ff(o2, o, no));
    free(M); free(o); free(o2); free(scr);
    free_case(&c);
    return 0;
}

/* kz_sgemm_isa vs a double product: odd sizes, triangular modes, alpha / row scale / cb */
static void check_sgemm(int isa) {
    const int dims[][3] = {{1, 1, 1}, {4, 16, 8}, {7, 13, 5}, {33, 70, 41}, {64, 128, 128}, {5, 3, 64}};
    const int tris[] = {KZ_TRI_NONE, KZ_TRI_K, KZ_TRI_N};
    double worst = 0;
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        for (int ti = 0; ti < 3; ti++)
            for (int mode = 0; mode < 3; mode++) {
                const int M = dims[d][0], N = dims[d][1], tri = tris[ti];
                const int K = tri == KZ_TRI_K ? M : dims[d][2]; /* TRI_K: A square lower */
                const size_t lda = (size_t)K + 3, ldb = (size_t)N + 5, ldc = (size_t)N + 2;
                float *A = fmalloc((size_t)M * lda), *B = fmalloc((size_t)K * ldb), *C = fmalloc((size_t)M * ldc),
                      *C0 = fmalloc((size_t)M * ldc), *ra = fmalloc((size_t)M);
                for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = kt_randf(&rs);
                if (tri == KZ_TRI_K)
                    for (int m = 0; m < M; m++)
                        for (int k = m + 1; k < K; k++) A[(size_t)m * lda + k] = 0.0f;
                for (size_t i = 0; i < (size_t)K * ldb; i++) B[i] = kt_randf(&rs);
                for (size_t i = 0; i < (size_t)M * ldc; i++) C0[i] = kt_randf(&rs);
                for (int m = 0; m < M; m++) ra[m] = 0.5f + kt_randf(&rs);
                memcpy(C, C0, (size_t)M * ldc * sizeof(float));
                const float alpha = mode == 1 ? -1.0f : 0.75f, cb = mode == 0 ? 0.0f : mode == 1 ? 1.0f : 0.3f;
                const float *rap = mode == 2 ? ra : NULL;
                kz_sgemm_isa(isa, M, N, K, A, lda, B, ldb, C, ldc, alpha, rap, cb, tri);
                double e = 0, mx = 0;
                int padding_ok = 1;
                for (int m = 0; m < M; m++) {
                    for (int n = 0; n < N; n++) {
                        if (tri == KZ_TRI_N && n > m) continue; /* not wanted */
                        double r = 0;
                        for (int k = 0; k < K; k++) r += (double)A[(size_t)m * lda + k] * B[(size_t)k * ldb + n];
                        r = (double)cb * C0[(size_t)m * ldc + n] + alpha * (rap ? rap[m] : 1.0f) * r;
                        e = fmax(e, fabs(r - C[(size_t)m * ldc + n]));
                        mx = fmax(mx, fabs(r));
                    }
                    for (size_t n = (size_t)N; n < ldc; n++) padding_ok &= C[(size_t)m * ldc + n] == C0[(size_t)m * ldc + n];
                }
                CHECKF(e <= 1e-5 * mx + 1e-6 && padding_ok, "sgemm isa %d M %d N %d K %d tri %d mode %d: err %g / %g%s",
                       isa, M, N, K, tri, mode, e, mx, padding_ok ? "" : ", wrote past N");
                worst = fmax(worst, e / (mx > 0 ? mx : 1));
                free(A); free(B); free(C); free(C0); free(ra);
            }
    printf("sgemm %s: worst rel error %.2e\n", kz_isa_name((kz_isa)isa), worst);
}

/* the AArch64 levels' kz_sgemm_isa equals the plain kernel bit for bit (every ARM level gives
 * the same logits): sizes around the 8 x 8 tile, triangular modes, scales, and B columns with
 * inf / NaN next to the wanted ones */
#if defined(__aarch64__)
/* AArch64's contract (nn/sgemm.h): every level, the plain one included, computes each element
 * as s = fmaf(A[m][k], B[k][n], s) for k in order from s = 0 (TRI_K: k below the end of the
 * row's group of 4), then cb * C + (alpha * ra[m]) * s. Checked bit for bit against that
 * formula written out here (a zero of either sign counts as one value: the kernels write
 * cb == 0 results as c or 0 + c) */
static void check_sgemm_fmaf(int isa) {
    if (!kz_isa_available((kz_isa)isa)) return;
    const int dims[][3] = {{1, 1, 1}, {4, 16, 8}, {7, 13, 5}, {9, 9, 9}, {33, 70, 41}, {64, 128, 128}, {3, 7, 600}};
    const int tris[] = {KZ_TRI_NONE, KZ_TRI_K, KZ_TRI_N};
    int n_cases = 0, bad = 0;
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        for (int ti = 0; ti < 3; ti++)
            for (int mode = 0; mode < 3; mode++) {
                const int M = dims[d][0], N = dims[d][1], tri = tris[ti];
                const int K = tri == KZ_TRI_K ? M : dims[d][2];
                const size_t lda = (size_t)K + 1, ldb = (size_t)N + 3, ldc = (size_t)N + 1;
                float *A = fmalloc((size_t)M * lda), *B = fmalloc((size_t)K * ldb), *C = fmalloc((size_t)M * ldc);
                float *C0 = fmalloc((size_t)M * ldc), *ra = fmalloc((size_t)M);
                for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = kt_randf(&rs);
                if (tri == KZ_TRI_K)
                    for (int m = 0; m < M; m++)
                        for (int k = m + 1; k < K; k++) A[(size_t)m * lda + k] = 0.0f;
                for (size_t i = 0; i < (size_t)K * ldb; i++) B[i] = kt_randf(&rs);
                for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = C0[i] = kt_randf(&rs);
                for (int m = 0; m < M; m++) ra[m] = 0.5f + kt_randf(&rs);
                const float alpha = mode == 1 ? -1.0f : 0.75f, cb = mode == 0 ? 0.0f : mode == 1 ? 1.0f : 0.3f;
                const float *rap = mode == 2 ? ra : NULL;
                kz_sgemm_isa(isa, M, N, K, A, lda, B, ldb, C, ldc, alpha, rap, cb, tri);
                int same = 1;
                for (int m = 0; m < M; m++) {
                    const int ke = tri == KZ_TRI_K && m - m % 4 + 4 < K ? m - m % 4 + 4 : K;
                    const float al = rap ? alpha * rap[m] : alpha;
                    for (int n = 0; n < N; n++) {
                        if (tri == KZ_TRI_N && n > m) continue;
                        float acc = 0.0f;
                        for (int k = 0; k < ke; k++) acc = fmaf(A[(size_t)m * lda + k], B[(size_t)k * ldb + n], acc);
                        const float v = al * acc, o = C0[(size_t)m * ldc + n];
                        const float want = cb == 0.0f ? v : cb == 1.0f ? o + v : cb * o + v;
                        const float got = C[(size_t)m * ldc + n];
                        same &= !memcmp(&want, &got, 4) || (want == 0.0f && got == 0.0f);
                    }
                }
                CHECKF(same, "sgemm %s != fmaf formula: M %d N %d K %d tri %d mode %d", kz_isa_name((kz_isa)isa), M, N,
                       K, tri, mode);
                bad += !same;
                n_cases++;
                free(A); free(B); free(C); free(C0); free(ra);
            }
    printf("sgemm %s: %d cases bit-identical to the fmaf formula (%d differ)\n", kz_isa_name((kz_isa)isa), n_cases, bad);
}
#endif

static void check_sgemm_same(int isa) {
    if (!kz_isa_available((kz_isa)isa)) return;
    const int dims[][3] = {{1, 1, 1}, {4, 16, 8}, {7, 13, 5}, {9, 9, 9}, {33, 70, 41}, {64, 128, 128}, {5, 3, 64},
                           {32, 32, 32}, {12, 256, 64}, {3, 7, 600}};
    const int tris[] = {KZ_TRI_NONE, KZ_TRI_K, KZ_TRI_N};
    int n_cases = 0;
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        for (int ti = 0; ti < 3; ti++)
            for (int mode = 0; mode < 3; mode++) {
                const int M = dims[d][0], N = dims[d][1], tri = tris[ti];
                const int K = tri == KZ_TRI_K ? M : dims[d][2];
                const size_t lda = (size_t)K + 3, ldb = (size_t)N + 5, ldc = (size_t)N + 2;
                float *A = fmalloc((size_t)M * lda), *B = fmalloc((size_t)K * ldb), *C[2], *ra = fmalloc((size_t)M);
                C[0] = fmalloc((size_t)M * ldc);
                C[1] = fmalloc((size_t)M * ldc);
                for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = kt_randf(&rs);
                if (tri == KZ_TRI_K)
                    for (int m = 0; m < M; m++)
                        for (int k = m + 1; k < K; k++) A[(size_t)m * lda + k] = 0.0f;
                for (size_t i = 0; i < (size_t)K * ldb; i++) B[i] = kt_randf(&rs);
                for (int k = 0; k < K; k++) /* B's padding columns: never part of a result */
                    for (size_t n = (size_t)N; n < ldb; n++) B[(size_t)k * ldb + n] = (n & 1) ? INFINITY : NAN;
                for (size_t i = 0; i < (size_t)M * ldc; i++) C[0][i] = C[1][i] = kt_randf(&rs);
                for (int m = 0; m < M; m++) ra[m] = 0.5f + kt_randf(&rs);
                const float alpha = mode == 1 ? -1.0f : 0.75f, cb = mode == 0 ? 0.0f : mode == 1 ? 1.0f : 0.3f;
                const float *rap = mode == 2 ? ra : NULL;
                kz_sgemm_isa(KZ_ISA_SCALAR, M, N, K, A, lda, B, ldb, C[0], ldc, alpha, rap, cb, tri);
                kz_sgemm_isa(isa, M, N, K, A, lda, B, ldb, C[1], ldc, alpha, rap, cb, tri);
                int same = 1;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++)
                        if (!(tri == KZ_TRI_N && n > m)) same &= !memcmp(&C[0][(size_t)m * ldc + n], &C[1][(size_t)m * ldc + n], 4);
                CHECKF(same, "sgemm %s != plain: M %d N %d K %d tri %d mode %d", kz_isa_name((kz_isa)isa), M, N, K, tri, mode);
                n_cases++;
                free(A); free(B); free(C[0]); free(C[1]); free(ra);
            }
    printf("sgemm %s: %d cases bit-identical to the plain kernel\n", kz_isa_name((kz_isa)isa), n_cases);
}

/* every SIMD build of the recurrent step equals the plain one bit for bit (outputs and state) */
static void check_rec_isa_one(int level, int Hk, int Hv, int dk, int dv, int T, int decay) {
    if (!kz_isa_available((kz_isa)level)) return;
    gdn_case c;
    make_case(&c, Hk, Hv, dk, dv, T, decay);
    kz_gdn_shape sh = {Hk, Hv, dk, dv};
    const size_t kd = (size_t)Hk * dk, ns = (size_t)Hv * dv * dk, no = (size_t)T * Hv * dv;
    float *M[2], *o[2];
    const int isa[2] = {KZ_ISA_SCALAR, level};
    for (int i = 0; i < 2; i++) {
        M[i] = malloc(ns * sizeof(float));
        o[i] = malloc(no * sizeof(float));
        memcpy(M[i], c.M0, ns * sizeof(float));
        kz_gdn_recurrent_isa(isa[i], &sh, T, c.in, c.in + kd, c.in + 2 * kd, c.ld, c.g, c.beta, c.Hv, M[i], o[i],
                             (size_t)Hv * dv, 0, Hv);
    }
    CHECKF(!memcmp(M[0], M[1], ns * sizeof(float)) && !memcmp(o[0], o[1], no * sizeof(float)),
           "recurrent step %s != plain (Hk %d Hv %d dk %d dv %d T %d)", kz_isa_name((kz_isa)level), Hk, Hv, dk, dv,
           T);
    for (int i = 0; i < 2; i++) { free(M[i]); free(o[i]); }
    free_case(&c);
}
static void check_rec_isa(int Hk, int Hv, int dk, int dv, int T, int decay) {
    for (int level = KZ_ISA_AVX2; level < KZ_ISA_COUNT; level++) check_rec_isa_one(level, Hk, Hv, dk, dv, T, decay);
}

/* kz_gdn_recurrent_rows (verify batches: every row through its tokens at once, the state read
 * from src, the old one copied to snap) equals the plain token-by-token step bit for bit at
 * every level: outputs, state, snapshot; src = state or apart, the snapshot 64-byte aligned
 * (streaming stores) or not, T past one group of KZ_GDN_ROWS_T */
static void check_rows_one(int level, int Hk, int Hv, int dk, int dv, int T, int decay, int apart, int align) {
    if (!kz_isa_available((kz_isa)level)) return;
    gdn_case c;
    make_case(&c, Hk, Hv, dk, dv, T, decay);
    kz_gdn_shape sh = {Hk, Hv, dk, dv};
    const size_t kd = (size_t)Hk * dk, ns = (size_t)Hv * dv * dk, no = (size_t)T * Hv * dv;
    float *M[2], *o[2], *src = fmalloc(ns);
    float *snap_buf = aligned_alloc(64, (ns + 16 + 15) / 16 * 64), *snap = snap_buf + (align ? 0 : 1); /* size: 64 x k */
    if (!snap_buf) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (int i = 0; i < 2; i++) {
        M[i] = fmalloc(ns);
        o[i] = fmalloc(no);
        memcpy(M[i], c.M0, ns * sizeof(float));
    }
    kz_gdn_recurrent_isa(KZ_ISA_SCALAR, &sh, T, c.in, c.in + kd, c.in + 2 * kd, c.ld, c.g, c.beta, c.Hv, M[0], o[0],
                         (size_t)Hv * dv, 0, Hv);
    if (apart) { /* M[1] holds garbage that must be overwritten */
        memcpy(src, c.M0, ns * sizeof(float));
        for (size_t i = 0; i < ns; i++) M[1][i] = -7.0f;
    }
    const int h1 = Hv / 2; /* two head ranges */
    for (int r = 0; r < 2; r++)
        kz_gdn_recurrent_rows_isa(level, &sh, T, c.in, c.in + kd, c.in + 2 * kd, c.ld, c.g, c.beta, c.Hv,
                                  apart ? src : M[1], M[1], snap, o[1], (size_t)Hv * dv, r ? h1 : 0, r ? Hv : h1);
    CHECKF(!memcmp(M[0], M[1], ns * sizeof(float)) && !memcmp(o[0], o[1], no * sizeof(float)) &&
               !memcmp(snap, c.M0, ns * sizeof(float)),
           "recurrent rows %s != plain step (Hk %d Hv %d dk %d dv %d T %d apart %d align %d)",
           kz_isa_name((kz_isa)level), Hk, Hv, dk, dv, T, apart, align);
    for (int i = 0; i < 2; i++) { free(M[i]); free(o[i]); }
    free(src);
    free(snap_buf);
    free_case(&c);
}
static void check_rows(int Hk, int Hv, int dk, int dv, int T, int decay) {
    for (int level = KZ_ISA_SCALAR; level < KZ_ISA_COUNT; level++)
        for (int v = 0; v < 4; v++) check_rows_one(level, Hk, Hv, dk, dv, T, decay, v & 1, v >> 1);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
    printf("active ISA level: %s\n", kz_isa_name(kz_isa_active()));
    check_sgemm(KZ_ISA_SCALAR);
    if (!getenv("KZ_ISA") && kz_isa_available(KZ_ISA_AVX2)) check_sgemm(KZ_ISA_AVX2);
    for (int level = KZ_ISA_NEON; level <= KZ_ISA_I8MM; level++) check_sgemm_same(level);
#if defined(__aarch64__)
    check_sgemm_fmaf(KZ_ISA_SCALAR);
    for (int level = KZ_ISA_NEON; level <= KZ_ISA_I8MM; level++) check_sgemm_fmaf(level);
#endif
    const int Ts[] = {1, 63, 64, 65, 500};
    for (size_t it = 0; it < sizeof Ts / sizeof *Ts; it++)
        for (int decay = 0; decay < 3; decay++) {
            check_case(2, 6, 32, 32, Ts[it], decay);  /* H_v = 3 H_k, tiled pairing */
            check_case(1, 2, 128, 128, Ts[it], decay); /* real head size */
        }
    check_case(3, 3, 24, 40, 130, 2); /* odd dk != dv: edge tiles everywhere */
    check_rec_isa(1, 2, 128, 128, 1, 2);
    check_rec_isa(2, 6, 32, 32, 9, 0);
    check_rec_isa(2, 4, 13, 7, 5, 1); /* lengths with scalar tails */
    check_rec_isa(1, 3, 48, 20, 4, 2); /* 16-lane blocks, dk not a power of two */
    check_case(2, 4, 13, 7, 70, 1);
    const int Tr[] = {1, 2, 3, 4, 9, KZ_GDN_ROWS_T + 3};
    for (size_t it = 0; it < sizeof Tr / sizeof *Tr; it++) {
        check_rows(1, 2, 128, 128, Tr[it], 2);
        check_rows(2, 6, 32, 32, Tr[it], 0);
        check_rows(2, 4, 13, 7, Tr[it], 1);
        check_rows(1, 3, 48, 20, Tr[it], 2);
        check_rows(1, 2, 32, 22, Tr[it], 1); /* dv past whole groups of the SIMD rows */
    }
    printf("recurrent rows: T 1..%d bit-identical to the plain step at every level\n", KZ_GDN_ROWS_T + 3);
    printf("worst chunk vs recurrent: output %.2e, state %.2e\n", worst_out, worst_state);
    const kz_isa act = kz_isa_active();
    if (!getenv("KZ_ISA") && (act == KZ_ISA_AVX2 || act == KZ_ISA_AVX512)) { /* again with the plain C kernel */
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("KZ_ISA", "scalar", 1);
            execv(argv[0], argv);
            _exit(127);
        }
        int st = 0;
        const int ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st);
        if (ok && WEXITSTATUS(st) == 127) printf("note: could not re-run %s with KZ_ISA=scalar\n", argv[0]);
        else CHECKF(ok && WEXITSTATUS(st) == 0, "the KZ_ISA=scalar run failed (status %d)", st);
    }
    KT_END();
}
