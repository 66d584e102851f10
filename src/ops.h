/* Small numeric kernels of the forward pass (f32 in, f32 out, scalar C the compiler can
 * vectorise). Every function works on one row / one head so callers split work over threads. */
#ifndef KZ_OPS_H
#define KZ_OPS_H
#include <math.h>
#include <stddef.h>

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
/* softmax in place, numerically stable (max subtracted); n >= 1 */
void kz_softmax(float *x, int n);
float kz_dot(const float *a, const float *b, int n);

static inline float kz_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float kz_silu(float x) { return x / (1.0f + expf(-x)); }
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
#endif
