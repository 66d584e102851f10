/* Model (weights + hparams + vocab, immutable after load) and per-sequence state. */
#ifndef KZ_MODEL_H
#define KZ_MODEL_H
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include "kazeia.h"
#include "model/gguf.h"
#include "matmul/matmul.h"
#include "text/tokenizer.h"
#include "sys/threadpool.h"
#include "nn/attention.h"

typedef enum { KZ_ARCH_QWEN3 = 0, KZ_ARCH_QWEN35 = 1 } kz_arch;

typedef struct {
    kz_arch arch;
    int n_layer;        /* main layers (block_count - nextn_predict_layers) */
    int n_embd, n_ff, n_vocab, n_ctx_train;
    int n_head, n_head_kv, head_dim, n_rot;
    float rms_eps, rope_base;
    int full_attn_interval; /* qwen35 */
    int ssm_d_conv, ssm_d_state, ssm_n_k_heads, ssm_n_v_heads, ssm_d_inner, ssm_head_v_dim;
    /* derived / extra (forward engineer) */
    int n_layer_all;        /* block_count, including trailing MTP blocks */
    int rope_sections[4];   /* qwen35 IMROPE sections (all 0 = plain NEOX) */
    int ssm_key_dim, ssm_conv_dim; /* n_k_heads*d_state, 2*key_dim + d_inner */
    int n_attn_layers, n_gdn_layers;
} kz_hparams;

typedef struct {
    int is_gdn;
    int state_idx;          /* index among the layers of its kind (KV slot / GDN state slot) */
    const float *attn_norm, *post_norm;     /* [n_embd] */
    kz_wmat ffn_gate, ffn_up, ffn_down;
    /* full attention */
    kz_wmat wq, wk, wv, wo;
    const float *q_norm, *k_norm;           /* [head_dim] */
    /* gated delta net */
    kz_wmat wqkv, wgate, wbeta, walpha, wssm_out;
    const float *conv1d;                    /* [conv_dim][d_conv] */
    const float *dt_bias, *ssm_a;           /* [n_v_heads] */
    const float *ssm_norm;                  /* [head_v_dim] */
} kz_layer;

struct kz_model {
    kz_gguf *gguf;
    kz_hparams hp;
    kz_tokenizer *tok;
    kz_layer *layers;
    kz_wmat tok_embd, output;
    const float *output_norm;
    float *f32_pool;        /* owned f32 copies of small 1-D tensors stored as F16/BF16 */
    void *p16_buf;          /* owned 16-row packed copies of Q4_0 matrices (repack_weights) */
    size_t p16_bytes;
    int n_threads;
    char arch_name[16];
};

/* kz_model_load on a caller-owned GGUF image (same validation; used by the fuzzer). buf must
 * outlive the model; name labels the data in error messages (NULL = "<memory>"). */
kz_model *kz_model_load_mem(const void *buf, size_t size, const char *name,
                            const kz_model_params *params, char *err, size_t errlen);

/* Per-sequence state: KV cache, GDN conv + recurrent states, scratch, worker pool. */
typedef struct kz_seq kz_seq;
kz_seq *kz_seq_new(const kz_model *m, int n_ctx, int n_batch, int n_threads, kz_kv_type kv,
                   char *err, size_t errlen);
void kz_seq_free(kz_seq *s);
void kz_seq_reset(kz_seq *s);
int kz_seq_n_past(const kz_seq *s);
int kz_seq_n_ctx(const kz_seq *s);
/* The sequence's state buffers, for saving / restoring it (state.c). */
typedef struct {
    int n_past, n_ctx;
    kz_kv_type kv_type;
    int n_kv_layers;
    kz_kv_layer *kv;            /* [n_kv_layers]; rows [0, n_past) hold the cached tokens */
    float *conv, *ssm;          /* every GDN layer's conv / recurrent state, contiguous */
    size_t n_conv, n_ssm;       /* floats */
} kz_seq_view;
void kz_seq_view_get(kz_seq *s, kz_seq_view *v);
/* Position after the state buffers were filled from a saved state; -1 unless 0 <= n <= n_ctx. */
int kz_seq_set_n_past(kz_seq *s, int n_past);
/* Optional per-part wall-time breakdown of kz_forward (off by default; on, it reads the clock
 * twice per part and layer). Parts in forward order. */
typedef enum {
    KZ_PROF_EMBED,      /* token embedding rows, RoPE tables */
    KZ_PROF_NORM,       /* RMSNorms, residual adds */
    KZ_PROF_ATTN_PROJ,  /* full attention: Q/K/V/O matmuls */
    KZ_PROF_ATTN,       /* q/k norm + RoPE + KV store, softmax attention, output gate */
    KZ_PROF_GDN_PROJ,   /* GDN: qkv / gate / beta / alpha / out matmuls */
    KZ_PROF_GDN_CONV,   /* causal conv + SiLU, q/k L2 norms, gates (one dispatch) */
    KZ_PROF_GDN_CORE,   /* gated delta rule + gated RMSNorm (one dispatch) */
    KZ_PROF_FFN,        /* gate / up / down matmuls */
    KZ_PROF_FFN_ACT,    /* SwiGLU */
    KZ_PROF_HEAD,       /* output norm + LM head */
    KZ_PROF_COUNT
} kz_prof_part;
typedef struct {
    double ms[KZ_PROF_COUNT];
    long tokens, calls;   /* tokens and kz_forward calls measured */
} kz_profile;
void kz_seq_profile_enable(kz_seq *s, int on); /* on: also clears the totals */
const kz_profile *kz_seq_profile(const kz_seq *s);
const char *kz_prof_name(int part);
/* Breakdown table (part, ms, %, ms per token) written to f. */
void kz_profile_print(const kz_profile *p, FILE *f);

/* Append n tokens (any n >= 1; split internally into n_batch chunks).
 * logits: NULL, or want_all ? n*n_vocab : n_vocab floats. 0 ok, -1 error (message in err),
 * KZ_FWD_ABORTED when the abort flag stopped a chunk: n_past then counts the chunks before it
 * and the state is exactly that of those tokens. */
#define KZ_FWD_ABORTED (-2)
/* flag checked inside prefill chunks (n > 1); NULL disables. Must outlive its use. */
void kz_seq_set_abort(kz_seq *s, const atomic_int *flag);
int kz_forward(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, float *logits,
               int want_all, char *err, size_t errlen);
/* kz_argmax of the last logits row the last kz_forward wrote, when it wrote one row (the LM head
 * finds it as it writes the row: greedy decoding skips a scan of n_vocab floats); else -1. */
int64_t kz_seq_logits_argmax(const kz_seq *s);
#endif
