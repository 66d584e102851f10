/* Model: weights, hparams and vocabulary, immutable after load (the sequence: forward/seq.h). */
#ifndef KZ_MODEL_H
#define KZ_MODEL_H
#include <stdint.h>
#include "kazeia.h"
#include "model/gguf.h"
#include "matmul/matmul.h"
#include "text/tokenizer.h"
#include "sys/threadpool.h"

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

/* Qwen3.5's multi-token-prediction block (blk.{n_layer}: docs/qwen35.md#mtp-blocks), the draft
 * head of self-speculative decoding: u = eh_proj [rmsnorm(embed(x), enorm); rmsnorm(h, hnorm)],
 * one gated full-attention layer + FFN (ly, its own KV slot), rmsnorm(head_norm), the LM head.
 * embed / head / head_norm are the trunk's unless the file has the block's own. */
typedef struct {
    kz_layer ly;            /* is_gdn 0, state_idx = n_attn_layers (the KV slot after the trunk's) */
    kz_wmat eh_proj;        /* n_in 2 n_embd (embedding half first), n_out n_embd */
    const float *enorm, *hnorm, *head_norm;
    kz_wmat embed, head;
} kz_mtp;

struct kz_model {
    kz_gguf *gguf;
    kz_hparams hp;
    kz_tokenizer *tok;
    kz_layer *layers;
    kz_wmat tok_embd, output;
    const float *output_norm;
    kz_mtp *mtp;            /* NULL: no MTP block in the file */
    float *f32_pool;        /* owned f32 copies of small 1-D tensors stored as F16/BF16 */
    void *repack_buf;       /* owned q4_0_16x4 copies of the Q4_0 matrices (repack_weights) */
    size_t repack_bytes;
    int n_threads;
    char arch_name[16];
};

/* Planning only (kz_memory_estimate on a model loaded without repack_weights): marks the
 * matrices repack_weights would pack as packed, so the work-area sizes planned for it are the
 * packed model's (the i8mm prefill reads activation records only for packed rows). The marks
 * point at the file's rows: the model must not be run afterwards, only freed. */
void kz_model_plan_packed(kz_model *m);

/* kz_model_load on a caller-owned GGUF image (same validation; used by the fuzzer). buf must
 * outlive the model; name labels the data in error messages (NULL = "<memory>"). */
kz_model *kz_model_load_mem(const void *buf, size_t size, const char *name,
                            const kz_model_params *params, char *err, size_t errlen);

#endif
