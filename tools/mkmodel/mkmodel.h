/* Random-weight GGUF model writer (qwen35 / qwen3), the library behind tools/kz-mkmodel.
 * Writes the keys and tensor names/shapes llama.cpp's converter writes, with weights drawn so
 * a forward pass stays finite and non-degenerate. Streams one row block at a time: memory use
 * does not grow with the model size. Deterministic: same cfg -> same bytes, whatever
 * n_threads is. C tests can create tiny models without a subprocess:
 *
 *     kz_mkmodel_cfg c;
 *     kz_mkmodel_preset("qwen35-tiny", &c);
 *     c.wtype = KZ_T_Q8_0;
 *     if (kz_mkmodel_write(&c, "/tmp/t.gguf", err, sizeof err)) ...
 */
#ifndef KZ_MKMODEL_H
#define KZ_MKMODEL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char arch[16];          /* "qwen35" or "qwen3" */
    char name[64];          /* general.name */
    int n_layer;            /* main decoder blocks (without MTP blocks) */
    int n_embd, n_ff;
    int n_vocab;            /* 0 = the vocab file's size, or 512 for the synthetic vocab */
    int n_ctx_train;        /* <arch>.context_length */
    int n_head, n_head_kv, head_dim;
    int n_rot;              /* rotated dims per head (qwen3: head_dim) */
    float rms_eps, rope_base;
    int rope_sections[4];   /* qwen35; all zero = [11,11,10,0] scaled to n_rot/2 */
    int full_attn_interval; /* qwen35: every N-th layer is full attention */
    int ssm_d_conv;         /* qwen35 GDN: conv kernel width */
    int ssm_d_state;        /* key head dim */
    int ssm_n_group;        /* key heads */
    int ssm_dt_rank;        /* value heads */
    int ssm_d_inner;        /* value heads * value head dim */
    int n_nextn;            /* qwen35: trailing MTP blocks (nextn_predict_layers), usually 0 or 1 */
    int tied;               /* 1: no output.weight (LM head = token_embd) */
    uint32_t wtype;         /* KZ_T_F32/F16/BF16/Q8_0/Q4_0 for 2-D matrices */
    uint64_t seed;
    const char *vocab_path; /* vocab-only GGUF (tokenizer.* kvs); NULL = synthetic byte vocab */
    int n_threads;          /* 0 = all CPUs (capped at 8) */
    FILE *log;              /* notes such as type fallbacks; NULL = quiet */
    int mix;                /* KZ_MKMODEL_MIX_Q4_K_M: llama.cpp's Q4_K_M per-tensor mix (wtype ignored) */
} kz_mkmodel_cfg;
#define KZ_MKMODEL_MIX_Q4_K_M 1

/* Fill cfg with a preset: qwen35-0.8b, qwen35-2b, qwen35-4b, qwen35-9b, qwen3-0.6b,
 * qwen3-4b, qwen3-8b,
 * qwen35-tiny, qwen3-tiny. Type defaults to F16, seed 1. Returns 0, or -1 if unknown. */
int kz_mkmodel_preset(const char *name, kz_mkmodel_cfg *cfg);
/* NULL-terminated list of preset names */
const char *const *kz_mkmodel_preset_names(void);
/* Write the model to path. 0 on success; -1 with a one-line message in err (the partial
 * file is removed). */
int kz_mkmodel_write(const kz_mkmodel_cfg *cfg, const char *path, char *err, size_t errlen);
/* llama.cpp general.file_type for a matrix type (ALL_F32 0, MOSTLY_F16 1, Q4_0 2, Q8_0 7,
 * BF16 32, Q4_K 14 (Q4_K_S), Q5_K 16 (Q5_K_S), Q6_K 18); -1 if the type cannot be used for matrices */
int kz_mkmodel_file_type(uint32_t wtype);
#endif
