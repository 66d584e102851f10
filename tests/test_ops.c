/* Unit tests of the forward-pass kernels (ops, GDN, attention) against straightforward
 * double-precision references on odd sizes and random non-zero data. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "nn/attention.h"
#include "sys/cpu.h"
#include "sys/fp16.h"
#include "nn/gdn.h"
#include "kt.h"
#include "nn/ops.h"

static unsigned long long rs = 0x9e3779b97f4a7c15ull;
static void fill(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = kt_randf(&rs) * scale;
}
/* max |a-b| / max(max|b|, tiny) */
static double relmax(const float *a, const double *b, int n) {
    double m = 0, e = 0;
    for (int i = 0; i < n; i++) {
        if (fabs(b[i]) > m) m = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (d > e) e = d;
    }
    return e / (m > 1e-30 ? m : 1e-30);
}

static void test_rmsnorm(void) {
    const int ns[] = {1, 7, 33, 333};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int n = ns[k];
        float *x = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        double *r = malloc(n * sizeof(double));
        fill(x, n, 3.0f);
        fill(w, n, 1.5f);
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / n + 1e-6);
        for (int i = 0; i < n; i++) r[i] = x[i] * inv * w[i];
        kz_rmsnorm(y, x, w, n, 1e-6f);
        CHECKF(relmax(y, r, n) < 1e-6, "rmsnorm n=%d rel %g", n, relmax(y, r, n));
        for (int i = 0; i < n; i++) r[i] = x[i] * inv;
        kz_rmsnorm(x, x, NULL, n, 1e-6f); /* in place, no weight */
        CHECKF(relmax(x, r, n) < 1e-6, "rmsnorm in-place n=%d", n);
        free(x); free(w); free(y); free(r);
    }
    /* eps matters for a tiny row: 1e-4 values with eps 1e-6 */
    float t[3] = {1e-4f, -2e-4f, 3e-4f}, o[3];
    kz_rmsnorm(o, t, NULL, 3, 1e-6f);
    double ms = (1e-8 + 4e-8 + 9e-8) / 3.0, inv = 1.0 / sqrt(ms + 1e-6);
    double rr[3] = {1e-4 * inv, -2e-4 * inv, 3e-4 * inv};
    CHECKF(relmax(o, rr, 3) < 1e-5, "rmsnorm eps");
}

static void test_l2norm(void) {
    float x[37];
    double r[37];
    fill(x, 37, 2.0f);
    double ss = 0;
    for (int i = 0; i < 37; i++) ss += (double)x[i] * x[i];
    for (int i = 0; i < 37; i++) r[i] = x[i] / sqrt(ss);
    kz_l2norm(x, 37, 1e-6f);
    CHECKF(relmax(x, r, 37) < 1e-6, "l2norm");
    /* below eps: divided by eps (llama.cpp), not blown up to unit length */
    float t[5] = {1e-8f, -2e-8f, 0, 3e-8f, 0};
    double tr[5] = {1e-2, -2e-2, 0, 3e-2, 0};
    kz_l2norm(t, 5, 1e-6f);
    CHECKF(relmax(t, tr, 5) < 1e-5, "l2norm tiny: %g %g", t[0], t[3]);
    float z[4] = {0, 0, 0, 0};
    kz_l2norm(z, 4, 1e-6f);
    CHECK(z[0] == 0 && z[3] == 0 && !isnan(z[1]));
}

static void test_scalar_fns(void) {
    const double xs[] = {-100, -30, -20, -5, -1e-3, 0, 1e-3, 0.7, 5, 19.99, 20, 20.01, 50, 100};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
        double x = xs[i];
        double sp = x > 20 ? x : log1p(exp(x));
        float s = kz_softplus((float)x);
        CHECKF(isfinite(s) && fabs(s - sp) <= 2e-6 * fabs(sp) + 1e-44, "softplus(%g) = %g, want %g", x, s, sp);
        double sg = 1.0 / (1.0 + exp(-x));
        CHECKF(fabs(kz_sigmoid((float)x) - sg) < 1e-6, "sigmoid(%g)", x);
        double si = x * sg;
        float fs = kz_silu((float)x);
        CHECKF(isfinite(fs) && fabs(fs - si) <= 1e-6 * (fabs(si) + 1e-30) + 1e-37, "silu(%g) = %g want %g", x, fs, si);
    }
    CHECK(kz_softplus(0.0f) == (float)log(2.0));
    CHECK(kz_silu(-1000.0f) == 0.0f && kz_sigmoid(1000.0f) == 1.0f && kz_sigmoid(-1000.0f) == 0.0f);
    /* softmax: large values, stable; odd n */
    float v[5] = {1000.0f, 999.0f, -1000.0f, 998.5f, 1000.0f};
    double e[5], sum = 0;
    for (int i = 0; i < 5; i++) { e[i] = exp((double)v[i] - 1000.0); sum += e[i]; }
    for (int i = 0; i < 5; i++) e[i] /= sum;
    kz_softmax(v, 5);
    CHECKF(relmax(v, e, 5) < 1e-6, "softmax large");
    float one[1] = {-3.0f};
    kz_softmax(one, 1);
    CHECK(one[0] == 1.0f);
    /* swiglu and dot on odd n */
    float a[13], b[13], d1 = 0;
    double ra[13], dd = 0;
    fill(a, 13, 4.0f);
    fill(b, 13, 2.0f);
    for (int i = 0; i < 13; i++) { dd += (double)a[i] * b[i]; ra[i] = a[i] / (1 + exp(-(double)a[i])) * b[i]; }
    d1 = kz_dot(a, b, 13);
    CHECKF(fabs(d1 - dd) < 1e-5 * (fabs(dd) + 1), "dot");
    kz_swiglu(a, b, 13);
    CHECKF(relmax(a, ra, 13) < 1e-6, "swiglu");
}

static void rope_ref(double *out, const float *x, int hd, int n_rot, int pos, double base, const unsigned char *use) {
    for (int i = 0; i < hd; i++) out[i] = x[i];
    for (int i = 0; i < n_rot / 2; i++) {
        double th = (use && !use[i]) ? 0 : pos * pow(base, -2.0 * i / n_rot);
        double x0 = x[i], x1 = x[i + n_rot / 2];
        out[i] = x0 * cos(th) - x1 * sin(th);
        out[i + n_rot / 2] = x0 * sin(th) + x1 * cos(th);
    }
}

static void test_rope(void) {
    struct { int hd, n_rot, pos; double base; } cs[] = {
        {40, 12, 0, 1e7}, {40, 12, 1, 1e7}, {40, 12, 12345, 1e7}, {24, 24, 77, 1e6}, {256, 64, 262000, 1e7},
        {6, 2, 3, 10000}};
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        float x[256], tab[256];
        double r[256];
        int hd = cs[k].hd, nr = cs[k].n_rot;
        fill(x, hd, 2.0f);
        rope_ref(r, x, hd, nr, cs[k].pos, cs[k].base, NULL);
        kz_rope_table(tab, nr, cs[k].pos, (float)cs[k].base, NULL);
        float y[256];
        for (int i = 0; i < hd; i++) y[i] = x[i];
        kz_rope_neox(y, nr, tab);
        CHECKF(relmax(y, r, hd) < 2e-6, "rope hd=%d n_rot=%d pos=%d: %g", hd, nr, cs[k].pos, relmax(y, r, hd));
        int same = 1;
        for (int i = nr; i < hd; i++) same &= y[i] == x[i];
        CHECKF(same, "rope leaves dims >= n_rot untouched");
    }
    /* IMROPE masks: real sections cover every pair; an "e" slot means no rotation */
    unsigned char m[64];
    const int s1[4] = {11, 11, 10, 0};
    kz_imrope_mask(m, 64, s1);
    int all = 1;
    for (int i = 0; i < 32; i++) all &= m[i] == 1;
    CHECK(all);
    const int s2[4] = {1, 1, 1, 1}; /* 4 sectors, sector 3 is the e slot */
    kz_imrope_mask(m, 16, s2);
    const unsigned char want[8] = {1, 1, 1, 0, 1, 1, 1, 0};
    int eq = 1;
    for (int i = 0; i < 8; i++) eq &= m[i] == want[i];
    CHECKF(eq, "imrope mask [1,1,1,1]: %d%d%d%d%d%d%d%d", m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
    const int s0[4] = {0, 0, 0, 0};
    kz_imrope_mask(m, 16, s0);
    CHECK(m[0] == 1 && m[7] == 1);
    float x[16], tab[16], y[16];
    double r[16];
    fill(x, 16, 1.0f);
    kz_imrope_mask(m, 16, s2);
    kz_rope_table(tab, 16, 500, 1e4f, m);
    for (int i = 0; i < 16; i++) y[i] = x[i];
    kz_rope_neox(y, 16, tab);
    rope_ref(r, x, 16, 16, 500, 1e4, m);
    CHECKF(relmax(y, r, 16) < 2e-6, "rope with e-slot mask");
    CHECK(y[3] == x[3] && y[11] == x[11]);
}

/* conv over a whole sequence with zero history, in double */
static void test_gdn_conv(void) {
    const int C = 11, K = 4, T = 9;
    float x[9 * 11], w[11 * 4], st[11 * 3] = {0}, y[9 * 11];
    fill(x, T * C, 2.0f);
    fill(w, C * K, 1.0f);
    double r[9 * 11];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int i = 0; i < K; i++) {
                int src = t - (K - 1) + i;
                if (src >= 0) acc += (double)w[c * K + i] * x[src * C + c];
            }
            r[t * C + c] = acc / (1 + exp(-acc));
        }
    /* uneven pieces (1, 2, 5 tokens) must carry the state exactly */
    const int pieces[] = {1, 2, 5, 1};
    int t0 = 0;
    for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
        int n = pieces[p];
        /* two channel ranges, as two threads would */
        kz_gdn_conv(0, 4, n, K, x + t0 * C, C, y + t0 * C, C, w, st);
        kz_gdn_conv(4, C, n, K, x + t0 * C, C, y + t0 * C, C, w, st);
        t0 += n;
    }
    CHECKF(relmax(y, r, T * C) < 1e-6, "gdn conv pieces: %g", relmax(y, r, T * C));
    /* state = last 3 raw inputs */
    int ok = 1;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < 3; i++) ok &= st[c * 3 + i] == x[(T - 3 + i) * C + c];
    CHECK(ok);
}

/* ulps between two floats (same sign convention as their ordering); NaN handled by callers */
static long long ulp_diff(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    long long oa = ia < 0 ? -(long long)(ia & 0x7fffffff) : ia, ob = ib < 0 ? -(long long)(ib & 0x7fffffff) : ib;
    return oa > ob ? oa - ob : ob - oa;
}

/* kz_exp against exp() in double rounded to float: random bit patterns (every magnitude,
 * denormals, inf, NaN), a dense sweep of the useful range and the edges of the float range */
static void test_fast_exp(void) {
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *y2 = malloc(N * sizeof(float));
    long long worst = 0;
    float wx = 0;
    int nan_ok = 1, lanes_ok = 1, silu_ok = 1;
    for (int pass = 0; pass < 40; pass++) {
        for (int i = 0; i < N; i++) {
            if (pass % 2) { /* uniform over [-110, 95] */
                x[i] = 102.5f * kt_randf(&rs) - 7.5f;
            } else { /* any bit pattern */
                uint32_t u = (uint32_t)kt_rng(&rs);
                memcpy(&x[i], &u, 4);
            }
        }
        if (pass == 0) {
            const float edge[] = {-104.0f, -103.97f, -103.972077f, -103.2789f, -100.0f, -88.0f, -87.3365f, -87.33654f,
                                  -86.6f, -1e-30f, -0.0f, 0.0f, 1e-45f, 1e-7f, 0.34657359f, -0.34657359f, 1.0f,
                                  10.0f, 88.0f, 88.37626f, 88.7f, 88.72283f, 88.722839f, 88.7229f, 88.75f, 89.0f,
                                  100.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN, -NAN};
            memcpy(x, edge, sizeof edge);
        }
        kz_exp_row(y, x, N - 3); /* odd length: vector blocks and scalar tail */
        for (int i = N - 3; i < N; i++) y[i] = kz_exp(x[i]);
        for (int i = 0; i < N; i++) { /* row lanes = the scalar function, bit for bit */
            const float sc = kz_exp(x[i]);
            lanes_ok &= memcmp(&sc, &y[i], 4) == 0;
        }
        kz_silu_row(y2, x, N - 5); /* and SiLU, which the rows compute through the vector exp */
        for (int i = 0; i < N - 5; i++) {
            const float sc = kz_silu(x[i]);
            silu_ok &= memcmp(&sc, &y2[i], 4) == 0 || (isnan(sc) && isnan(y2[i]));
        }
        for (int i = 0; i < N; i++) {
            const float ref = (float)exp((double)x[i]);
            if (isnan(x[i])) { nan_ok &= isnan(y[i]); continue; }
            const long long d = ulp_diff(y[i], ref);
            if (d > worst) { worst = d; wx = x[i]; }
        }
    }
    CHECKF(worst <= 2, "kz_exp: %lld ulp from exp at x = %.9g (got %.9g, want %.9g)", worst, wx, kz_exp(wx),
           (float)exp((double)wx));
    CHECK(nan_ok);
    CHECK(lanes_ok);
    CHECK(silu_ok);
    CHECK(kz_exp(-104.0f) == 0.0f && kz_exp(-1e30f) == 0.0f && kz_exp(-INFINITY) == 0.0f);
    CHECK(isinf(kz_exp(88.7229f)) && isinf(kz_exp(1e30f)) && isinf(kz_exp(INFINITY)));
    CHECK(kz_exp(0.0f) == 1.0f && kz_exp(-0.0f) == 1.0f && isfinite(kz_exp(88.72283f)));
    CHECK(kz_exp(-88.0f) > 0.0f && kz_exp(-88.0f) < 1.17549435e-38f); /* denormal result kept */
    printf("kz_exp: max %lld ulp vs exp() over %d values\n", worst, 40 * N);
    free(x); free(y); free(y2);
}

/* the row forms on odd lengths against double references, and split rows = whole rows bit for bit */
static void test_elementwise_rows(void) {
    const int n = 1037;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
          *y2 = malloc(n * sizeof(float));
    double *r = malloc(n * sizeof(double));
    fill(a, n, 12.0f);
    fill(b, n, 2.0f);
    a[5] = -95.0f; a[6] = 95.0f; a[7] = -30.0f;
    for (int i = 0; i < n; i++) r[i] = a[i] / (1.0 + exp(-(double)a[i]));
    kz_silu_row(y, a, n);
    CHECKF(relmax(y, r, n) < 1e-6, "silu row %g", relmax(y, r, n));
    int rel_ok = 1;
    for (int i = 0; i < n; i++) rel_ok &= fabs(y[i] - r[i]) <= 4e-7 * fabs(r[i]) + 1e-38;
    CHECK(rel_ok);
    for (int i = 0; i < n; i++) r[i] = a[i] / (1.0 + exp(-(double)a[i])) * b[i];
    memcpy(y, a, n * sizeof(float));
    kz_swiglu(y, b, n);
    rel_ok = 1;
    for (int i = 0; i < n; i++) rel_ok &= fabs(y[i] - r[i]) <= 5e-7 * fabs(r[i]) + 1e-38;
    CHECKF(rel_ok, "swiglu row");
    const int cuts[] = {1, 3, 8, 13, 500, 1000}; /* as thread splits would cut the row */
    int same = 1;
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        memcpy(y2, a, n * sizeof(float));
        kz_swiglu(y2, b, cuts[k]);
        kz_swiglu(y2 + cuts[k], b + cuts[k], n - cuts[k]);
        same &= memcmp(y, y2, n * sizeof(float)) == 0;
    }
    CHECK(same);
    for (int i = 0; i < n; i++) r[i] = b[i] / (1.0 + exp(-(double)a[i]));
    memcpy(y, b, n * sizeof(float));
    kz_mul_sigmoid(y, a, n);
    rel_ok = 1;
    for (int i = 0; i < n; i++) rel_ok &= fabs(y[i] - r[i]) <= 4e-7 * fabs(r[i]) + 1e-38;
    CHECKF(rel_ok, "mul_sigmoid row");
    /* gated norm: rmsnorm(o, w) * silu(z) */
    const int dv = 131;
    double ss = 0;
    for (int i = 0; i < dv; i++) ss += (double)b[i] * b[i];
    for (int i = 0; i < dv; i++) r[i] = b[i] / sqrt(ss / dv + 1e-6) * a[200 + i] * (a[i] / (1.0 + exp(-(double)a[i])));
    memcpy(y, b, dv * sizeof(float));
    kz_rmsnorm_gated(y, a, a + 200, dv, 1e-6f);
    CHECKF(relmax(y, r, dv) < 1e-6, "rmsnorm_gated %g", relmax(y, r, dv));
    /* softmax over a long odd row, spread scores */
    for (int i = 0; i < n; i++) y[i] = a[i] * 3.0f;
    double mx = -1e300, sum = 0;
    for (int i = 0; i < n; i++) if (y[i] > mx) mx = y[i];
    for (int i = 0; i < n; i++) { r[i] = exp((double)y[i] - mx); sum += r[i]; }
    for (int i = 0; i < n; i++) r[i] /= sum;
    kz_softmax(y, n);
    rel_ok = 1;
    for (int i = 0; i < n; i++) rel_ok &= fabs(y[i] - r[i]) <= 1e-6 * r[i] + 1e-37;
    CHECKF(rel_ok, "softmax long row");
    /* wide rmsnorm (partial sums) and the fused residual add */
    const int E = 1029;
    float *x = malloc(E * sizeof(float)), *d = malloc(E * sizeof(float)), *hn = malloc(E * sizeof(float));
    double *xr = malloc(E * sizeof(double));
    fill(x, E, 5.0f);
    fill(d, E, 3.0f);
    ss = 0;
    for (int i = 0; i < E; i++) { xr[i] = (float)(x[i] + d[i]); ss += xr[i] * xr[i]; }
    for (int i = 0; i < E; i++) r[i] = xr[i] / sqrt(ss / E + 1e-6) * b[i];
    float *xs = malloc(E * sizeof(float));
    for (int i = 0; i < E; i++) xs[i] = x[i] + d[i];
    kz_add_rmsnorm(x, d, hn, b, E, 1e-6f);
    CHECK(memcmp(x, xs, E * sizeof(float)) == 0); /* x += d exactly */
    CHECKF(relmax(hn, r, E) < 1e-6, "add_rmsnorm %g", relmax(hn, r, E));
    kz_rmsnorm(y, xs, b, E, 1e-6f);
    CHECK(memcmp(y, hn, E * sizeof(float)) == 0); /* fused = add then norm, bit for bit */
    free(x); free(d); free(hn); free(xr); free(xs);
    free(a); free(b); free(y); free(y2); free(r);
}

/* odd shapes, strided rows: every element lands once, nothing else is written */
static void test_transpose(void) {
    const int shapes[][2] = {{1, 1}, {3, 17}, {8, 8}, {19, 8}, {33, 45}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int R = shapes[k][0], C = shapes[k][1], lds = C + 3, ldd = R + 5;
        float *src = malloc((size_t)R * lds * sizeof(float)), *dst = malloc((size_t)C * ldd * sizeof(float));
        fill(src, R * lds, 1.0f);
        for (int i = 0; i < C * ldd; i++) dst[i] = 7.0f;
        kz_transpose(dst, (size_t)ldd, src, (size_t)lds, R, C);
        int ok = 1;
        for (int c = 0; c < C; c++)
            for (int r = 0; r < ldd; r++) ok &= dst[c * ldd + r] == (r < R ? src[r * lds + c] : 7.0f);
        CHECKF(ok, "transpose %dx%d", R, C);
        free(src); free(dst);
    }
}

/* wide conv (several channel blocks, vector lanes and tails, K from 1 to past the blocked
 * form's limit), non-zero state, against double; token-by-token = one call, bit for bit */
static void test_gdn_conv_wide(void) {
    const int Ks[] = {1, 2, 4, 5, 16, 17, 24};
    const int C = 2309, T = 11;
    float *x = malloc((size_t)T * C * sizeof(float)), *y = malloc((size_t)T * C * sizeof(float)),
          *y1 = malloc((size_t)T * C * sizeof(float)), *w = malloc((size_t)C * 24 * sizeof(float)),
          *st0 = malloc((size_t)C * 23 * sizeof(float)), *st = malloc((size_t)C * 23 * sizeof(float)),
          *st1 = malloc((size_t)C * 23 * sizeof(float));
    double *r = malloc((size_t)T * C * sizeof(double));
    for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) {
        const int K = Ks[k], ks = K - 1;
        fill(x, T * C, 2.0f);
        fill(w, C * K, 0.7f);
        fill(st0, C * (ks > 0 ? ks : 1), 1.5f);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int i = 0; i < K; i++) {
                    const int src = t - ks + i;
                    acc += (double)w[c * K + i] * (src >= 0 ? x[(size_t)src * C + c] : st0[c * ks + ks + src]);
                }
                r[(size_t)t * C + c] = acc / (1 + exp(-acc));
            }
        memcpy(st, st0, (size_t)C * (ks > 0 ? ks : 1) * sizeof(float));
        memcpy(st1, st0, (size_t)C * (ks > 0 ? ks : 1) * sizeof(float));
        kz_gdn_conv(0, 13, T, K, x, C, y, C, w, st); /* two channel ranges, as two threads */
        kz_gdn_conv(13, C, T, K, x, C, y, C, w, st);
        double e = relmax(y, r, T * C);
        CHECKF(e < 1e-6, "gdn conv K=%d: rel %g", K, e);
        for (int t = 0; t < T; t++) kz_gdn_conv(0, C, 1, K, x + (size_t)t * C, C, y1 + (size_t)t * C, C, w, st1);
        CHECKF(memcmp(y, y1, (size_t)T * C * sizeof(float)) == 0, "gdn conv K=%d: decode = prefill", K);
        CHECKF(memcmp(st, st1, (size_t)C * ks * sizeof(float)) == 0, "gdn conv K=%d: state", K);
        int ok = 1; /* new state = the last ks of [old state, x_0 .. x_{T-1}] */
        for (int c = 0; c < C; c++)
            for (int i = 0; i < ks; i++) {
                const int src = T - ks + i;
                ok &= st[c * ks + i] == (src >= 0 ? x[(size_t)src * C + c] : st0[c * ks + ks + src]);
            }
        CHECKF(ok, "gdn conv K=%d: new state = last inputs", K);
    }
    free(x); free(y); free(y1); free(w); free(st0); free(st); free(st1); free(r);
}

/* The recurrent step's bits, written out row at a time (gdn.c's contract): per row of M,
 * kv = decay * dot(row, k), d = beta (v - kv), row = fma(row, decay, d k), out = dot(row, q),
 * each dot 16 lane sums of fmaf (lane i % 16) reduced as h[l] = a[l] + a[l+8], then
 * ((h0+h4)+(h1+h5))+((h2+h6)+(h3+h7)), the dk % 16 tail fused in after. Every ISA level's
 * kernel (software-pipelined over rows) must give these bits exactly. */
static float rows_hsum16(const float *a) {
    float h[8];
    for (int l = 0; l < 8; l++) h[l] = a[l] + a[l + 8];
    return ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]));
}
static void gdn_rows_ref(int Hk, int Hv, int dk, int dv, int T, const float *in, int ld, const float *g,
                         const float *beta, float *M, float *out) {
    for (int j = 0; j < Hv; j++)
        for (int t = 0; t < T; t++) {
            const float *q = in + t * ld + (j % Hk) * dk, *k = in + t * ld + Hk * dk + (j % Hk) * dk,
                        *v = in + t * ld + 2 * Hk * dk + j * dv;
            const float decay = kz_exp(g[t * Hv + j]), bt = beta[t * Hv + j];
            const int n16 = dk / 16 * 16;
            for (int r = 0; r < dv; r++) {
                float *row = M + ((size_t)j * dv + r) * dk;
                float acc[16] = {0};
                for (int i = 0; i < n16; i++) acc[i % 16] = fmaf(row[i], k[i], acc[i % 16]);
                float s = rows_hsum16(acc);
                for (int i = n16; i < dk; i++) s = fmaf(row[i], k[i], s);
                const float d = bt * (v[r] - decay * s);
                for (int l = 0; l < 16; l++) acc[l] = 0.0f;
                for (int i = 0; i < n16; i++) {
                    row[i] = fmaf(row[i], decay, d * k[i]);
                    acc[i % 16] = fmaf(row[i], q[i], acc[i % 16]);
                }
                s = rows_hsum16(acc);
                for (int i = n16; i < dk; i++) {
                    row[i] = fmaf(row[i], decay, d * k[i]);
                    s = fmaf(row[i], q[i], s);
                }
                out[((size_t)t * Hv + j) * dv + r] = s;
            }
        }
}

/* dense reference: S_j = a (I - b k k^T) S_j + b k v^T (dk x dv), o = S^T q */
static void test_gdn_recurrent(void) {
    const int cfgs[][4] = {{2, 6, 7, 5}, {3, 3, 16, 16}, {1, 2, 9, 4}, {1, 2, 8, 1}, {2, 4, 40, 7}, {1, 2, 128, 128}};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        const int Hk = cfgs[c][0], Hv = cfgs[c][1], dk = cfgs[c][2], dv = cfgs[c][3], T = 6;
        const int ld = 2 * Hk * dk + Hv * dv;
        kz_gdn_shape sh = {Hk, Hv, dk, dv};
        float *in = malloc((size_t)T * ld * sizeof(float)), *g = malloc(T * Hv * sizeof(float)),
              *beta = malloc(T * Hv * sizeof(float)), *M = malloc((size_t)Hv * dv * dk * sizeof(float)),
              *out = malloc((size_t)T * Hv * dv * sizeof(float));
        double *S = malloc((size_t)Hv * dk * dv * sizeof(double)), *ro = malloc((size_t)T * Hv * dv * sizeof(double));
        fill(in, T * ld, 1.0f);
        for (int t = 0; t < T; t++) kz_gdn_qk_norm(in + t * ld, Hk, dk, 1e-6f);
        for (int i = 0; i < T * Hv; i++) { g[i] = -fabsf(kt_randf(&rs)) * 2.0f; beta[i] = 0.5f + 0.5f * kt_randf(&rs); }
        fill(M, Hv * dv * dk, 0.3f); /* non-zero initial state */
        float *M2 = malloc((size_t)Hv * dv * dk * sizeof(float)), *out2 = malloc((size_t)T * Hv * dv * sizeof(float));
        memcpy(M2, M, (size_t)Hv * dv * dk * sizeof(float));
        gdn_rows_ref(Hk, Hv, dk, dv, T, in, ld, g, beta, M2, out2);
        for (int j = 0; j < Hv; j++)
            for (int i = 0; i < dk; i++)
                for (int r = 0; r < dv; r++) S[((size_t)j * dk + i) * dv + r] = M[((size_t)j * dv + r) * dk + i];
        for (int t = 0; t < T; t++)
            for (int j = 0; j < Hv; j++) {
                const float *q = in + t * ld + (j % Hk) * dk, *k = in + t * ld + Hk * dk + (j % Hk) * dk,
                            *v = in + t * ld + 2 * Hk * dk + j * dv;
                double a = exp(g[t * Hv + j]), b = beta[t * Hv + j];
                double *Sj = S + (size_t)j * dk * dv;
                double *kS = calloc(dv, sizeof(double)); /* k^T S */
                for (int i = 0; i < dk; i++)
                    for (int r = 0; r < dv; r++) kS[r] += k[i] * Sj[i * dv + r];
                for (int i = 0; i < dk; i++)
                    for (int r = 0; r < dv; r++)
                        Sj[i * dv + r] = a * (Sj[i * dv + r] - b * k[i] * kS[r]) + b * k[i] * v[r];
                for (int r = 0; r < dv; r++) {
                    double o = 0;
                    for (int i = 0; i < dk; i++) o += Sj[i * dv + r] * q[i];
                    ro[((size_t)t * Hv + j) * dv + r] = o;
                }
                free(kS);
            }
        /* split heads like two threads, tokens in two calls */
        const int h1 = Hv / 2;
        kz_gdn_recurrent(&sh, 2, in, in + Hk * dk, in + 2 * Hk * dk, ld, g, beta, Hv, M, out, Hv * dv, 0, h1);
        kz_gdn_recurrent(&sh, 2, in, in + Hk * dk, in + 2 * Hk * dk, ld, g, beta, Hv, M, out, Hv * dv, h1, Hv);
        const float *i2 = in + 2 * ld;
        kz_gdn_recurrent(&sh, T - 2, i2, i2 + Hk * dk, i2 + 2 * Hk * dk, ld, g + 2 * Hv, beta + 2 * Hv, Hv, M,
                         out + 2 * Hv * dv, Hv * dv, 0, Hv);
        double e = relmax(out, ro, T * Hv * dv);
        CHECKF(e < 1e-5, "gdn recurrent Hk=%d Hv=%d dk=%d dv=%d: rel %g", Hk, Hv, dk, dv, e);
        double se = 0, sm = 0;
        for (int j = 0; j < Hv; j++)
            for (int i = 0; i < dk; i++)
                for (int r = 0; r < dv; r++) {
                    double ref = S[((size_t)j * dk + i) * dv + r], got = M[((size_t)j * dv + r) * dk + i];
                    if (fabs(ref) > sm) sm = fabs(ref);
                    if (fabs(ref - got) > se) se = fabs(ref - got);
                }
        CHECKF(se / sm < 1e-5, "gdn final state rel %g", se / sm);
        CHECKF(memcmp(out, out2, (size_t)T * Hv * dv * sizeof(float)) == 0 &&
                   memcmp(M, M2, (size_t)Hv * dv * dk * sizeof(float)) == 0,
               "gdn recurrent dk=%d dv=%d: the bits of the row-at-a-time form", dk, dv);
        free(M2); free(out2);
        free(in); free(g); free(beta); free(M); free(out); free(S); free(ro);
    }
    /* gates: beta = sigmoid(b), g = ssm_a * softplus(a + dt) */
    float b[3] = {-2.0f, 0.0f, 3.0f}, a[3] = {-30.0f, 0.5f, 25.0f}, dt[3] = {0.1f, -0.2f, 1.0f},
          A[3] = {-0.5f, -2.0f, -7.0f}, be[3], gg[3];
    kz_gdn_gates(3, b, a, dt, A, be, gg);
    for (int i = 0; i < 3; i++) {
        double x = (double)a[i] + dt[i], sp = x > 20 ? x : log1p(exp(x));
        CHECKF(fabs(gg[i] - A[i] * sp) <= 1e-6 * fabs(A[i] * sp) + 1e-30, "gate g[%d] %g vs %g", i, gg[i], A[i] * sp);
        CHECK(fabs(be[i] - 1.0 / (1.0 + exp(-(double)b[i]))) < 1e-7);
    }
    /* q/k norm: q scaled by 1/sqrt(dk), k unit; v untouched */
    float row[2 * 2 * 5 + 3];
    fill(row, 23, 2.0f);
    float v0 = row[20];
    kz_gdn_qk_norm(row, 2, 5, 1e-6f);
    double nq = 0, nk = 0;
    for (int i = 0; i < 5; i++) { nq += row[5 + i] * row[5 + i]; nk += row[15 + i] * row[15 + i]; }
    CHECK(fabs(sqrt(nq) - 1 / sqrt(5.0)) < 1e-6 && fabs(sqrt(nk) - 1) < 1e-6 && row[20] == v0);
}

static void test_h2f(void) {
    int bad = 0;
    for (uint32_t x = 0; x < 65536; x += 8) {
        uint16_t h[11];
        float f[11];
        for (int i = 0; i < 11; i++) h[i] = (uint16_t)((x + (uint32_t)i * 7) & 0xffff);
        kz_h2f_row(f, h, 11); /* 8-block + tail */
        for (int i = 0; i < 11; i++) {
            float r = kz_fp16_to_f32(h[i]);
            if (memcmp(&r, &f[i], 4) && !(isnan(r) && isnan(f[i]))) bad++;
        }
    }
    CHECKF(bad == 0, "h2f_row: %d mismatches", bad);
}

/* the decode partial's score sum (before the scale), one element at a time: lane l of 8 is
 * s_l = fmaf(q_i, k_i, s_l) over i = l, l + 8, ..., the lanes reduced as kz_dot8, a tail
 * fmaf'd onto the total */
static float dot8_fma_ref(const float *q, const float *k, int n) {
    float a[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] = fmaf(q[i + l], k[i + l], a[l]);
    float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    for (; i < n; i++) s = fmaf(q[i], k[i], s);
    return s;
}

/* The decode partial does the group's query heads four at a time (one pass over each K row,
 * V rows in blocks with 16 columns of 4 heads in registers). Its result must be bit for bit
 * the plain per-head form: scores dot8_fma_ref(q, k) * scale, max, kz_exp_sum, then
 * acc = fmaf(p_t, v_t, acc) over positions in order. Group sizes 1..8 (the 4-head path, its
 * remainder, and none), head_dim with and without a 16-column tail, spans across V blocks. */
static void test_attention_groups(void) {
    const int ns[] = {1, 5, 16, 17, 40, 45}, hds[] = {37, 64, 19, 256};
    int bad = 0, cases = 0;
    for (int f16 = 0; f16 <= 1; f16++)
        for (int n_rep = 1; n_rep <= 8; n_rep++)
            for (size_t ih = 0; ih < sizeof hds / sizeof *hds; ih++) {
                const int hd = hds[ih], Hkv = 2, n_ctx = 48;
                kz_kv_layer kv = {n_rep * Hkv, Hkv, hd, n_ctx, f16, NULL, NULL, NULL};
                const size_t esz = f16 ? 2 : 4;
                kv.k = malloc((size_t)Hkv * n_ctx * hd * esz);
                kv.v = malloc((size_t)Hkv * n_ctx * hd * esz);
                float *kr = malloc((size_t)Hkv * hd * sizeof(float)), *vr = malloc((size_t)Hkv * hd * sizeof(float));
                for (int p = 0; p < n_ctx; p++) {
                    fill(kr, Hkv * hd, 2.0f);
                    fill(vr, Hkv * hd, 2.0f);
                    kz_kv_store(&kv, p, kr, vr);
                }
                const size_t ldq = (size_t)hd + 3; /* heads not adjacent, as the gated q rows */
                float *q = malloc((size_t)n_rep * ldq * sizeof(float));
                fill(q, n_rep * (int)ldq, 1.5f);
                float *scr = malloc(kz_attn_scratch_floats(&kv, n_ctx) * sizeof(float));
                float *acc = malloc((size_t)n_rep * hd * sizeof(float)), *ref = malloc((size_t)n_rep * hd * sizeof(float));
                float *sc = malloc((size_t)n_ctx * sizeof(float)), *krow = malloc((size_t)hd * sizeof(float));
                float ml[16], mlr[16];
                const float scale = 1.0f / sqrtf((float)hd);
                for (size_t in = 0; in < sizeof ns / sizeof *ns; in++) {
                    const int g = 1, p0 = 3, p1 = p0 + ns[in];
                    kz_attn_partial(&kv, g, p0, p1, q, ldq, scale, ml, acc, scr);
                    for (int r = 0; r < n_rep; r++) {
                        for (int t = 0; t < p1 - p0; t++) {
                            kz_kv_row_get(&kv, 0, g, p0 + t, krow);
                            sc[t] = dot8_fma_ref(q + (size_t)r * ldq, krow, hd) * scale;
                        }
                        float mx = sc[0];
                        for (int t = 1; t < p1 - p0; t++) mx = sc[t] > mx ? sc[t] : mx;
                        mlr[2 * r] = mx;
                        mlr[2 * r + 1] = (float)kz_exp_sum(sc, mx, p1 - p0);
                        float *o = ref + (size_t)r * hd;
                        for (int c = 0; c < hd; c++) o[c] = 0.0f;
                        for (int t = 0; t < p1 - p0; t++) {
                            kz_kv_row_get(&kv, 1, g, p0 + t, krow);
                            for (int c = 0; c < hd; c++) o[c] = fmaf(sc[t], krow[c], o[c]);
                        }
                    }
                    cases++;
                    if (memcmp(ml, mlr, (size_t)2 * n_rep * sizeof(float)) ||
                        memcmp(acc, ref, (size_t)n_rep * hd * sizeof(float))) {
                        if (bad++ < 5)
                            fprintf(stderr, "attention group: f16 %d n_rep %d hd %d n %d differs\n", f16, n_rep, hd, ns[in]);
                    }
                }
                free(kv.k), free(kv.v), free(kr), free(vr), free(q), free(scr), free(acc), free(ref), free(sc), free(krow);
            }
    CHECKF(bad == 0 && cases == 2 * 8 * 4 * 6, "decode attention partial = per-head form bit for bit: %d of %d differ", bad,
           cases);
}

static void test_attention(int f16) {
    const int H = 6, Hkv = 2, hd = 13, n_ctx = 11, npos = 9;
    kz_kv_layer kv = {H, Hkv, hd, n_ctx, f16, NULL, NULL, NULL};
    size_t esz = f16 ? 2 : 4;
    kv.k = malloc((size_t)Hkv * n_ctx * hd * esz);
    kv.v = malloc((size_t)Hkv * n_ctx * hd * esz);
    float K[9][2 * 13], Vv[9][2 * 13], q[6 * 13], o[6 * 13], scr[3 * 11 + 16 * 13];
    for (int p = 0; p < npos; p++) {
        fill(K[p], Hkv * hd, 2.0f);
        fill(Vv[p], Hkv * hd, 2.0f);
        if (f16) /* reference sees what the cache holds */
            for (int i = 0; i < Hkv * hd; i++) {
                K[p][i] = kz_fp16_to_f32(kz_f32_to_fp16(K[p][i]));
                Vv[p][i] = kz_fp16_to_f32(kz_f32_to_fp16(Vv[p][i]));
            }
        kz_kv_store(&kv, p, K[p], Vv[p]);
    }
    CHECK(kz_attn_scratch_floats(&kv, n_ctx) <= 3 * 11 + 16 * 13);
    const float scale = 1.0f / sqrtf((float)hd);
    double worst = 0, worst_split = 0;
    for (int pos = 0; pos < npos; pos++) {
        fill(q, H * hd, 2.0f);
        double rall[6 * 13];
        for (int h = 0; h < H; h++) {
            const int g = h / (H / Hkv); /* grouped GQA */
            double *r = rall + h * hd;
            double s[9], mx = -1e300, sum = 0;
            for (int i = 0; i < hd; i++) r[i] = 0;
            for (int t = 0; t <= pos; t++) {
                s[t] = 0;
                for (int i = 0; i < hd; i++) s[t] += (double)q[h * hd + i] * K[t][g * hd + i];
                s[t] *= scale;
                if (s[t] > mx) mx = s[t];
            }
            for (int t = 0; t <= pos; t++) { s[t] = exp(s[t] - mx); sum += s[t]; }
            for (int t = 0; t <= pos; t++)
                for (int i = 0; i < hd; i++) r[i] += s[t] / sum * Vv[t][g * hd + i];
            kz_attn_head(&kv, h, pos, q + h * hd, scale, o, scr);
            double e = relmax(o, r, hd);
            if (e > worst) worst = e;
        }
        /* grouped partials over 1..3 position splits (some empty), merged */
        for (int ns = 1; ns <= 3; ns++) {
            float ml[3][2 * 3], acc[3][3 * 13];
            const int total = pos + 1, len = (total + ns - 1) / ns;
            for (int g = 0; g < Hkv; g++) {
                for (int sp = 0; sp < ns; sp++) {
                    int lo = sp * len, hi = lo + len < total ? lo + len : total;
                    kz_attn_partial(&kv, g, lo, hi, q + g * 3 * hd, hd, scale, ml[sp], acc[sp], scr);
                }
                kz_attn_merge(3, hd, ns, ml[0], acc[0], o, hd);
                double e = relmax(o, rall + g * 3 * hd, 3 * hd);
                if (e > worst_split) worst_split = e;
            }
        }
    }
    CHECKF(worst < 1e-5, "attention (f16 cache %d) rel %g", f16, worst);
    CHECKF(worst_split < 1e-5, "split attention (f16 cache %d) rel %g", f16, worst_split);
    free(kv.k);
    free(kv.v);
}

/* The decode partial dispatches on the active ISA level, which a process fixes once: each
 * available level below the best runs the bit-for-bit group test in a child with KZ_ISA set
 * (forked before this process asks for its own level), the best one runs it below. */
static int attention_groups_levels(void) {
    int failed = 0;
    const kz_isa best = kz_isa_best();
    for (int i = 0; i < KZ_ISA_COUNT; i++) {
        if (i == (int)best || !kz_isa_available((kz_isa)i)) continue;
        fflush(stdout);
        fflush(stderr);
        const pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            setenv("KZ_ISA", kz_isa_name((kz_isa)i), 1);
            if (kz_isa_active() != (kz_isa)i) _exit(2);
            test_attention_groups();
            fflush(stdout);
            _exit(kt_fail ? 1 : 0);
        }
        int st = 0;
        const int ok = waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        CHECKF(ok, "decode attention partial at KZ_ISA=%s", kz_isa_name((kz_isa)i));
        failed += !ok;
    }
    return failed;
}

/* kz_argmax against the plain scan (first maximum, NaN never wins, 0 when none exceeds -inf) on
 * random rows of many lengths, with ties, NaNs, infinities and the maximum in the tail */
static int argmax_ref(const float *x, int n) {
    int b = 0;
    float bl = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > bl) bl = x[i], b = i;
    return b;
}
static void test_argmax(void) {
    const int nmax = 248320 + 13;
    float *x = malloc(nmax * sizeof(float));
    int bad = 0, cases = 0;
    for (int rep = 0; rep < 400; rep++) {
        const int n = rep < 40 ? rep + 1 : rep == 399 ? nmax : 1 + (int)(kt_rng(&rs) % 3000);
        fill(x, n, 8.0f);
        const unsigned kind = (unsigned)(rep % 8);
        if (kind == 1) /* a tie between two lanes or blocks: the first must win */
            for (int k = 0; k < 3; k++) x[kt_rng(&rs) % n] = 9.0f;
        if (kind == 2) for (int k = 0; k < n / 7 + 1; k++) x[kt_rng(&rs) % n] = NAN;
        if (kind == 3) x[kt_rng(&rs) % n] = INFINITY, x[kt_rng(&rs) % n] = INFINITY;
        if (kind == 4) for (int i = 0; i < n; i++) x[i] = (i % 3) ? -INFINITY : NAN; /* nothing above -inf */
        if (kind == 5) x[n - 1] = 20.0f;                                               /* in the tail */
        if (kind == 6) for (int i = 0; i < n; i++) x[i] = (float)(int)(x[i]);          /* many ties */
        if (kind == 7) x[0] = NAN;
        const int got = kz_argmax(x, n), want = argmax_ref(x, n);
        if (got != want && bad++ < 5) fprintf(stderr, "argmax n=%d kind %u: %d, want %d\n", n, kind, got, want);
        cases++;
    }
    CHECKF(bad == 0, "argmax: %d of %d rows differ", bad, cases);
    free(x);
}

int main(void) {
    attention_groups_levels();
    test_rmsnorm();
    test_l2norm();
    test_scalar_fns();
    test_rope();
    test_gdn_conv();
    test_gdn_conv_wide();
    test_fast_exp();
    test_elementwise_rows();
    test_transpose();
    test_gdn_recurrent();
    test_h2f();
    test_attention(0);
    test_attention(1);
    test_attention_groups();
    test_argmax();
    KT_END();
}
