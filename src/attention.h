/* Causal softmax attention over a per-layer KV cache (f32 or f16 storage), f32 accumulation.
 * Cache layout per layer: K and V each [n_head_kv][n_ctx][head_dim], so one kv head's rows are
 * contiguous for the scan over positions. GQA: q head h reads kv head h / (n_head / n_head_kv),
 * so the n_rep = n_head / n_head_kv consecutive q heads of group g share every K/V row read.
 * Work is split into partial softmaxes over position ranges (m = running max, l = sum of
 * exp(s - m), acc = sum exp(s - m) v) that kz_attn_merge combines exactly, so one decode token
 * can use all threads. */
#ifndef KZ_ATTENTION_H
#define KZ_ATTENTION_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_head, n_head_kv, head_dim, n_ctx;
    int f16;      /* 1: cache holds IEEE half, 0: f32 */
    void *k, *v;  /* [n_head_kv][n_ctx][head_dim] */
} kz_kv_layer;

/* half -> float row conversion (branch-free, vectorisable, exact) */
void kz_h2f_row(float *dst, const uint16_t *src, int n);

/* Write one token's k and v ([n_head_kv*head_dim] each) at position pos (< n_ctx). */
void kz_kv_store(kz_kv_layer *kv, int pos, const float *k, const float *v);

/* Scratch floats kz_attn_partial needs for a span of up to n_pos positions (per thread). */
size_t kz_attn_scratch_floats(const kz_kv_layer *kv, int n_pos);

/* Partial attention of the n_rep query heads of kv group g over positions [p0, p1) (p1 > p0
 * or an empty partial). q: head r at q + r*ldq (head_dim floats each). Writes ml[2r] = max
 * score, ml[2r+1] = sum of exp(score - max), acc[r*head_dim ..] = sum exp(score - max) v. */
void kz_attn_partial(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch);

/* Combine n_part partials of n_rep heads (partial i: ml + i*2*n_rep, acc + i*n_rep*hd) into
 * out (head r at out + r*ldo). */
void kz_attn_merge(int n_rep, int hd, int n_part, const float *ml, const float *acc, float *out, size_t ldo);

/* out = softmax_{t<=pos}(q . K[t] * scale) V for one query head h (reference path, tests). */
void kz_attn_head(const kz_kv_layer *kv, int h, int pos, const float *q, float scale, float *out,
                  float *scratch);
#endif
