/* Causal softmax attention over a per-layer KV cache (f32, f16 or q8_0 storage), f32 accumulation.
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
    int type;     /* storage, a kz_kv_type: 0 f32, 1 IEEE half, 2 q8_0 (head_dim % 32 == 0) */
    void *k, *v;  /* [n_head_kv][n_ctx] rows of head_dim values (kz_kv_row_bytes each) */
    /* half -> float row converter of the active ISA level (exact, like kz_h2f_row, which is
     * used when NULL): decode attention converts every cached row it reads */
    void (*h2f)(const void *src, float *dst, int64_t n);
} kz_kv_layer;

/* Bytes of one cached row (head_dim values) in a storage type; 0 if the type cannot hold
 * head_dim values (q8_0 needs a multiple of 32). */
size_t kz_kv_type_row_bytes(int type, int head_dim);
size_t kz_kv_row_bytes(const kz_kv_layer *kv);
/* Row of kv head g at position pos in K (which = 0) or V (which = 1). */
void *kz_kv_row(const kz_kv_layer *kv, int which, int g, int pos);
/* Row back to floats (the values attention reads). */
void kz_kv_row_get(const kz_kv_layer *kv, int which, int g, int pos, float *dst);

/* half -> float row conversion (branch-free, vectorisable, exact) */
void kz_h2f_row(float *dst, const uint16_t *src, int n);

/* Write one token's k and v ([n_head_kv*head_dim] each) at position pos (< n_ctx). */
void kz_kv_store(kz_kv_layer *kv, int pos, const float *k, const float *v);
/* the same for kv head g alone (its rows kg, vg of head_dim values) */
void kz_kv_store_head(kz_kv_layer *kv, int pos, int g, const float *kg, const float *vg);

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

/* Prefill attention, tiled (flash-attention style): nt consecutive query tokens at positions
 * pos0 .. pos0+nt-1 (each sees the positions up to its own) for the n_rep query heads of kv
 * group g. K/V are read in blocks of KZ_ATTN_BK positions, turned into f32 once per block for
 * all nt * n_rep queries (GQA: the group's heads share every row read), and combined with an
 * online softmax (running max and sum, output rescaled when the max grows): no score matrix
 * beyond nt * n_rep x KZ_ATTN_BK, whatever the context length.
 * q: token t, head r at q + t*ldq_t + r*ldq_r (head_dim floats); out: token t, head r at
 * out + t*ldo_t + r*head_dim. scratch: kz_attn_tile_scratch_floats(kv, nt) floats. */
#define KZ_ATTN_BQ 16 /* query tokens per tile (callers' choice; up to any nt works) */
#define KZ_ATTN_BK 64 /* positions per K/V block */
size_t kz_attn_tile_scratch_floats(const kz_kv_layer *kv, int nt);
void kz_attn_tile(const kz_kv_layer *kv, int g, int pos0, int nt, const float *q, size_t ldq_t, size_t ldq_r,
                  float scale, float *out, size_t ldo_t, float *scratch);

/* out = softmax_{t<=pos}(q . K[t] * scale) V for one query head h (reference path, tests). */
void kz_attn_head(const kz_kv_layer *kv, int h, int pos, const float *q, float scale, float *out,
                  float *scratch);
#endif
