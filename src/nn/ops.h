/* Small numeric kernels of the forward pass (f32 in, f32 out, scalar C the compiler can
 * vectorise). Every function works on one row / one head so callers split work over threads. */
#ifndef KZ_OPS_H
#define KZ_OPS_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w  (w NULL: no weight). y may alias x. */
void kz_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* x = x / max(||x||_2, eps) in place (llama.cpp's ggml_l2_norm). */
void kz_l2norm(float *x, int n, float eps);
/* x[i] *= s */
void kz_scale(float *x, int n, float s);
/* y[i] += x[i] */
void kz_add(float *y, const float *x, int n);
/* a[i] = silu(a[i]) * b[i]  (SwiGLU) */
void kz_swiglu(float *a, const float *b, int n);
/* o = rmsnorm(o, w) * silu(z)  (Qwen3.5 GDN output norm) */
void kz_rmsnorm_gated(float *o, const float *z, const float *w, int n, float eps);
/* y[i] = e^x[i], silu(x[i]) (y may alias x); o[i] *= sigmoid(g[i]) */
void kz_exp_row(float *y, const float *x, int n);
void kz_silu_row(float *y, const float *x, int n);
void kz_mul_sigmoid(float *o, const float *g, int n);
/* x += d, then y = rmsnorm(x, w) (the residual add fused into the next norm); y must not
 * overlap x or d */
void kz_add_rmsnorm(float *x, const float *d, float *y, const float *w, int n, float eps);
/* softmax in place, numerically stable (max subtracted); n >= 1 */
void kz_softmax(float *x, int n);
float kz_dot(const float *a, const float *b, int n);
/* index of the largest of x[0..n): the first on ties, NaN never wins, 0 when none exceeds -inf */
int kz_argmax(const float *x, int n);
/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (8 x 8 tiles: both sides touch
 * few cache lines at a time); dst and src must not overlap */
void kz_transpose(float *dst, size_t ldd, const float *src, size_t lds, int rows, int cols);

/* e^x in plain branch-free float arithmetic, so a loop over it vectorises with the project's
 * flags (no libm call). Within 1 ulp of the correctly rounded e^x for every float input
 * (checked over all 2^32 of them; test_ops samples): 0 below -104, inf above ~88.72,
 * denormal results rounded once, NaN passes. The same function serves the
 * scalar tails, so an element's value never depends on where a row was split.
 * n = round(x / ln2) by the 1.5 * 2^23 trick, r = x - n ln2 with ln2 split so n * LN2_HI is
 * exact, e^r by a degree-6 polynomial fitted on |r| <= ln2 / 2, then 2^n in two halves (each
 * a normal float for every n in [-150, 128]) so results near FLT_MAX and in the denormal range
 * come out right. */
static inline float kz_exp(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float t = x * 1.44269504088896341f + magic;
    const float n = t - magic;
    union { float f; uint32_t u; } ti = {.f = t}, s1, s2;
    /* unsigned: no overflow for out-of-range x, whose lanes the selects below replace */
    const int32_t ni = (int32_t)(ti.u - 0x4b400000u), n1 = ni / 2, n2 = ni - n1;
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p = 1.3814610429e-3f;
    p = p * r + 8.3687100559e-3f;
    p = p * r + 4.1668388993e-2f;
    p = p * r + 1.6666521132e-1f;
    p = p * r + 4.9999994040e-1f;
    const float e = 1.0f + (r + (r * r) * p);
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n2 + 127) << 23;
    union { float f; uint32_t u; } y = {.f = e * s1.f * s2.f};
    /* range ends as bit masks after the arithmetic: written as ?: (or as a clamp of x first)
     * the compiler moves the arithmetic into one branch or folds a constant path that could
     * trap, and then does not vectorise. NaN fails both tests and stays NaN. */
    const uint32_t zero = 0u - (uint32_t)(x < -104.0f), inf = 0u - (uint32_t)(x > 88.75f);
    y.u = (y.u & ~zero & ~inf) | (0x7f800000u & inf);
    return y.f;
}
static inline float kz_sigmoid(float x) { return 1.0f / (1.0f + kz_exp(-x)); }
static inline float kz_silu(float x) { return x / (1.0f + kz_exp(-x)); }
/* log(1 + e^x), linear above 20 as ggml/torch do (avoids overflow of e^x) */
static inline float kz_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Rotary embedding tables for one position: cs[2*i] = cos(theta_i), cs[2*i+1] = sin(theta_i),
 * i < n_rot/2, theta_i = pos * base^(-2i/n_rot) computed in double. use_pos (may be NULL):
 * per pair 0 means "this pair belongs to the unused 4th M-RoPE section" (position 0 for text,
 * i.e. identity rotation), exactly what llama.cpp's IMROPE does with text positions (p,p,p,0). */
void kz_rope_table(float *cs, int n_rot, int pos, float base, const unsigned char *use_pos);
/* NEOX rotation of the first n_rot dims of one head: pairs (i, i + n_rot/2); dims >= n_rot
 * untouched. cs from kz_rope_table. */
void kz_rope_neox(float *x, int n_rot, const float *cs);
/* Fill use_pos[n_rot/2] for IMROPE sections (sec[0..3]); all ones when the sections sum to 0. */
void kz_imrope_mask(unsigned char *use_pos, int n_rot, const int sec[4]);
/* Row helpers shared by attention.c, gdn.c, gdn_chunk.c and ops.c. Always inlined, so the AVX2
 * builds of the decode kernels (attention.c, gdn.c) get them at AVX2 too; 8 lanes in a fixed
 * order, so every build gives the same bits. */
#define KZ_AINL static inline __attribute__((always_inline))
/* sum a[i] b[i]: 8 partial sums (vectorises without -ffast-math) */
KZ_AINL float kz_dot8(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
/* y = a x */
KZ_AINL void kz_scale_to(float *restrict y, const float *restrict x, float a, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) y[i + l] = a * x[i + l];
    for (; i < n; i++) y[i] = a * x[i];
}
/* max(m, s[0..n)): 8 running maxima, combined in a fixed order */
KZ_AINL float kz_row_max(const float *s, float m, int n) {
    float mm[8];
    for (int l = 0; l < 8; l++) mm[l] = m;
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) mm[l] = s[j + l] > mm[l] ? s[j + l] : mm[l];
    for (; j < n; j++) m = s[j] > m ? s[j] : m;
    for (int l = 0; l < 8; l++) m = mm[l] > m ? mm[l] : m;
    return m;
}
/* s[j] = e^(s[j] - m) for j < n, returns their sum (8 partial sums in double, fixed order) */
KZ_AINL double kz_exp_sum(float *s, float m, int n) {
    double acc[8] = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        float e[8];
        for (int l = 0; l < 8; l++) e[l] = kz_exp(s[j + l] - m);
        for (int l = 0; l < 8; l++) { s[j + l] = e[l]; acc[l] += e[l]; }
    }
    double sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; j++) { s[j] = kz_exp(s[j] - m); sum += s[j]; }
    return sum;
}

#endif
