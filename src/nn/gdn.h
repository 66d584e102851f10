/* Gated DeltaNet (Qwen3.5 linear-attention) core: causal depthwise conv, q/k normalisation,
 * gates, and the gated delta rule. The recurrent (token-by-token) form here is the exact
 * reference; kz_gdn_chunked (gdn_chunk.c) is the chunkwise form behind the same interface.
 *
 * GGUF order: value head j pairs with key head j % n_k_heads. State per value head j: dv rows
 * of dk floats, M[j][r][i] = S_j[i][r] (transposed), so every inner loop is a contiguous dot/axpy
 * over dk. */
#ifndef KZ_GDN_H
#define KZ_GDN_H
#include <stddef.h>

typedef struct {
    int n_k_heads, n_v_heads, dk, dv;
} kz_gdn_shape;

/* Causal depthwise conv (kernel K, window = K-1 previous raw inputs + current) then SiLU,
 * for channels [c0, c1) over T tokens. x: raw inputs, token t channel c at x[t*ldx + c];
 * y: outputs at y[t*ldy + c] (y must not alias x). w: [C][K], tap K-1 = current token.
 * state: [C][K-1] previous raw inputs, oldest first; updated to the last K-1 inputs. */
void kz_gdn_conv(int c0, int c1, int T, int K, const float *x, size_t ldx, float *y, size_t ldy,
                 const float *w, float *state);

/* For one token's conv output row [q (n_k*dk) | k (n_k*dk) | v]: L2-normalise every q and k
 * head (eps as llama.cpp: x / max(||x||, eps)) and scale q by 1/sqrt(dk). */
void kz_gdn_qk_norm(float *row, int n_k_heads, int dk, float eps);

/* beta_j = sigmoid(b_j), g_j = ssm_a_j * softplus(a_j + dt_bias_j) for j < n (ssm_a = -exp(A_log)
 * as stored in GGUF). b/beta and a/g may alias. */
void kz_gdn_gates(int n, const float *b, const float *a, const float *dt_bias, const float *ssm_a,
                  float *beta, float *g);

/* Gated delta rule, recurrent form, for value heads [h0, h1) over T tokens:
 *   S <- exp(g) S;  d = beta (v - S^T k);  S <- S + k d^T;  o = S^T q
 * q, k: token t key head i at q[t*ld_in + i*dk] (q already scaled); v: token t value head j at
 * v[t*ld_in + j*dv]; g, beta: token t head j at g[t*ld_gb + j]; state: [n_v_heads][dv][dk];
 * out: token t value head j at out[t*ld_out + j*dv]. Heads outer, tokens inner, so one head's
 * state stays in cache for the whole chunk. */
void kz_gdn_recurrent(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1);
/* the same at a given ISA level (a kz_isa; tests): every level (plain C with fmaf, AVX2 + FMA,
 * AVX-512, NEON) computes the same fused 16-lane sums (gdn.c), bit-identical to the others */
void kz_gdn_recurrent_isa(int isa, const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                          size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                          float *out, size_t ld_out, int h0, int h1);

/* The same result as kz_gdn_recurrent, bit for bit, for a few tokens (a verify batch, its
 * replay): each state row takes all T tokens while in cache. The state before is read from src
 * (may be state itself) and, if snap is not NULL, copied there ([n_v_heads][dv][dk] as state);
 * the state after goes to state. */
#define KZ_GDN_ROWS_T 16 /* tokens per pass over the state */
void kz_gdn_recurrent_rows(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                           size_t ld_in, const float *g, const float *beta, size_t ld_gb, const float *src,
                           float *state, float *snap, float *out, size_t ld_out, int h0, int h1);
void kz_gdn_recurrent_rows_isa(int isa, const kz_gdn_shape *sh, int T, const float *q, const float *k,
                               const float *v, size_t ld_in, const float *g, const float *beta, size_t ld_gb,
                               const float *src, float *state, float *snap, float *out, size_t ld_out, int h0,
                               int h1);

/* Chunk length of the chunkwise form: per token 3 dk*dv (as the recurrent form) plus ~C/2
 * (3 dk + 2 dv) for the in-chunk products, so shorter is cheaper until the products get too
 * small to tile (tuned: docs/PERFORMANCE.md). Any value >= 1 is correct. */
#define KZ_GDN_CHUNK 32

/* Scratch floats kz_gdn_chunked needs (one buffer per concurrent caller). */
size_t kz_gdn_chunk_scratch_floats(const kz_gdn_shape *sh);

/* Same contract and result as kz_gdn_recurrent (to float rounding), computed chunkwise:
 * per chunk of KZ_GDN_CHUNK tokens the decays and delta-rule corrections become small matrix
 * products (WY / UT form), the state is carried from chunk to chunk. For prefill (T >= 2);
 * f32 throughout, cumulative log-decays in double. scratch: kz_gdn_chunk_scratch_floats
 * floats, from malloc (double-aligned), private to the caller. */
void kz_gdn_chunked(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v, size_t ld_in,
                    const float *g, const float *beta, size_t ld_gb, float *state, float *out, size_t ld_out,
                    int h0, int h1, float *scratch);
#endif
