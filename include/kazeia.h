/* Kazeia-Engine public C API.
 * One header, C11, no dependency beyond libc/libm/pthread.
 * Every function that can fail returns an error code and/or fills an
 * error buffer with a one-line message a user can act on. */
#ifndef KAZEIA_H
#define KAZEIA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KZ_VERSION_STRING "0.1.0"

typedef struct kz_model kz_model;     /* immutable weights (mmap), vocab, hparams */
typedef struct kz_context kz_context; /* per-sequence state: KV, GDN state, scratch, sampler */

/* ---- model ---- */
typedef struct {
    int n_threads; /* threads for the shared worker pool; 0 = number of online CPUs */
    /* 1 (kz_model_default_params): copy the Q4_0 matrices at load into a 16-row interleaved
     * layout that the AVX-512 VNNI kernels stream contiguously (decode ~1.6x faster, prefill
     * ~5-10 %, same results bit for bit). The copy is anonymous memory of the same size as those
     * matrices; the file pages it replaces are released (MADV_DONTNEED) matrix by matrix, so
     * resident weights stay ~1x, but they are no longer zero-copy and loading reads them all
     * once (~0.5 s/GB on 2 threads). Nothing is done where the CPU has no such kernel (ARM64,
     * AVX2-only x86): the weights stay zero-copy mmap. 0: never repack. */
    int repack_weights;
} kz_model_params;

kz_model_params kz_model_default_params(void);
/* Returns NULL on failure and writes a message to err (if errlen > 0). */
kz_model *kz_model_load(const char *path, const kz_model_params *params, char *err, size_t errlen);
void kz_model_free(kz_model *m);

int kz_model_n_vocab(const kz_model *m);
int kz_model_n_ctx_train(const kz_model *m);
const char *kz_model_arch(const kz_model *m); /* "qwen35" / "qwen3" */
/* One-paragraph human description (arch, sizes, types). Returns bytes written (snprintf style). */
int kz_model_describe(const kz_model *m, char *buf, size_t len);

/* ---- tokens ---- */
/* Tokenize UTF-8 text. parse_special != 0: control/user-defined token texts inside `text`
 * become their ids. Returns the number of tokens (may exceed max: call again with a bigger
 * buffer), or -1 on error. */
int kz_tokenize(const kz_model *m, const char *text, size_t len, int parse_special,
                int32_t *out, int max);
/* Raw bytes of one token (byte-level BPE decoded; may be a partial UTF-8 sequence).
 * Returns length, or -1 for an invalid id. */
int kz_token_bytes(const kz_model *m, int32_t tok, char *buf, size_t len);
int kz_token_is_eog(const kz_model *m, int32_t tok);

/* ---- context ---- */
typedef enum { KZ_KV_F32 = 0, KZ_KV_F16 = 1, KZ_KV_Q8_0 = 2 } kz_kv_type;

typedef struct {
    int n_ctx;          /* max tokens in the sequence; 0 = min(train ctx, 4096) */
    int n_batch;        /* max tokens per forward chunk in prefill; 0 = 512 */
    int n_threads;      /* 0 = model's pool size */
    kz_kv_type kv_type; /* KV cache storage type */
    /* sampling (defaults: greedy is temperature 0) */
    float temperature;  /* <= 0: greedy argmax */
    int top_k;          /* <= 0: off */
    float top_p;        /* >= 1: off */
    float min_p;        /* <= 0: off */
    float repeat_penalty;   /* 1 = off (llama.cpp style: divide positive logits, multiply negative) */
    int repeat_last_n;      /* window for repeat/presence penalties; 0 = whole context */
    float presence_penalty; /* 0 = off (subtract once per token present in window) */
    float frequency_penalty;/* 0 = off */
    uint64_t seed;
    int think;          /* 1 = thinking on (model default), 0 = empty think block */
} kz_context_params;

kz_context_params kz_context_default_params(void);
kz_context *kz_context_new(kz_model *m, const kz_context_params *p, char *err, size_t errlen);
void kz_context_free(kz_context *c);
/* Forget the sequence (KV, recurrent state, position). */
void kz_context_reset(kz_context *c);
int kz_context_n_past(const kz_context *c);
const char *kz_context_error(const kz_context *c); /* last error message, "" if none */

/* ---- low-level evaluation ----
 * Appends n tokens to the sequence. If logits != NULL: want_all ? n x n_vocab floats
 * (one row per token) : n_vocab floats for the last token. Returns 0 or -1 (see error). */
int kz_eval(kz_context *c, const int32_t *tokens, int n, float *logits, int want_all);
/* The same, keeping the last token's logits in the context only (no copy): read them with
 * kz_logits. */
int kz_eval_last(kz_context *c, const int32_t *tokens, int n);
/* The context's logits of the last evaluated token (n_vocab floats), or NULL when there are none
 * (nothing evaluated yet, a reset, an eval without logits, an error). Owned by the context;
 * valid until its next eval, generate, state load or reset. */
const float *kz_logits(const kz_context *c);

/* ---- prompt state ----
 * Everything the context has evaluated (token history, KV rows, Gated DeltaNet conv and
 * recurrent states, position, and the last logits when there are any) as a versioned binary
 * image. It is tied to the model by a fingerprint (architecture, hyperparameters, tensor
 * names/shapes/types; not the weights) and needs a context with the same KV type and an n_ctx
 * that holds it. Loading validates the whole image first: on any error (other model, truncated
 * or corrupt data, other version) the context is left as it was and -1 is returned with a
 * message in kz_context_error. */
size_t kz_state_size(kz_context *c);                            /* bytes kz_state_save writes now */
size_t kz_state_save(kz_context *c, void *buf, size_t len);     /* bytes written; 0 on error */
int kz_state_load(kz_context *c, const void *buf, size_t len);  /* 0 or -1 */
int kz_state_save_file(kz_context *c, const char *path);        /* 0 or -1 */
int kz_state_load_file(kz_context *c, const char *path);        /* 0 or -1 */

/* ---- high-level generation ---- */
/* Called with each piece of valid UTF-8 text as it is produced. Return non-zero to stop. */
typedef int (*kz_piece_cb)(const char *piece, size_t len, void *userdata);

typedef enum {
    KZ_STOP_EOG = 0,       /* model emitted <|im_end|> / EOS */
    KZ_STOP_MAX_TOKENS = 1,
    KZ_STOP_CANCELLED = 2, /* kz_cancel or callback returned non-zero */
    KZ_STOP_CTX_FULL = 3,
    KZ_STOP_ERROR = 4
} kz_stop_reason;

typedef struct {
    int n_prompt;        /* prompt tokens evaluated (prefill) */
    int n_reused;        /* prompt tokens not evaluated again: kept from the previous call, or
                          * restored from the snapshot kz_generate takes after the system block */
    int n_gen;           /* tokens generated */
    double t_prefill_ms;
    double t_decode_ms;
    kz_stop_reason stop;
} kz_stats;

/* Builds the ChatML prompt (system may be NULL or ""), runs prefill, samples up to max_tokens,
 * streams text through cb. Returns 0 on success (any stop reason but ERROR), -1 on error.
 * Prefix reuse: tokens already in the context that start the new prompt are kept; besides,
 * the state right after the system block is kept in memory, so a later call with the same
 * system prompt (and any user message) evaluates only the tokens after it. */
int kz_generate(kz_context *c, const char *system, const char *user, int max_tokens,
                kz_piece_cb cb, void *userdata, kz_stats *stats);
/* Thread-safe: asks a running kz_generate on c to stop at the next token. */
void kz_cancel(kz_context *c);

#ifdef __cplusplus
}
#endif
#endif
