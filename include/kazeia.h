/* Kazeia-Engine public C API: load a GGUF model (Qwen3.5 / Qwen3), tokenize, evaluate, generate.
 *
 * One header, C11, no dependency beyond libc/libm/pthread; link build/libkazeia.so or
 * build/libkazeia.a with -lm -lpthread. A typical program:
 *   kz_model *m = kz_model_load("model.gguf", NULL, err, sizeof err);
 *   kz_context *c = kz_context_new(m, NULL, err, sizeof err);
 *   kz_generate(c, NULL, "Hello!", 64, on_piece, NULL, NULL);
 *   kz_context_free(c); kz_model_free(m);
 *
 * Errors: every function that can fail says so by its return value (NULL, -1 or 0 bytes) and
 * leaves a one-line message a user can act on (in the caller's err buffer, or
 * kz_context_error) plus a kz_status saying which kind of failure it was.
 * Threads: a model is immutable after load and may be shared by any number of contexts; a
 * context is used by one thread at a time (kz_cancel excepted). The library never prints: its
 * diagnostics go to the callback set with kz_log_set (none by default). */
#ifndef KAZEIA_H
#define KAZEIA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The symbols the shared library exports (everything else is hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define KZ_API __attribute__((visibility("default")))
#else
#define KZ_API
#endif

/* ---- version ---- */
#define KZ_VERSION_MAJOR 0
#define KZ_VERSION_MINOR 1
#define KZ_VERSION_PATCH 0
#define KZ_VERSION "0.1.0"
#define KZ_VERSION_STRING KZ_VERSION /* older spelling */

/* The library's version ("0.1.0"): compare with KZ_VERSION to detect a header/library mismatch. */
KZ_API const char *kz_version(void);

/* ---- status codes ---- */
typedef enum {
    KZ_OK = 0,
    KZ_ERR_INVALID_ARG,  /* a NULL / out-of-range argument or parameter, a token outside the vocab */
    KZ_ERR_IO,           /* a file that cannot be opened, read, mapped or written */
    KZ_ERR_FORMAT,       /* a malformed GGUF file or state image, or one made for another model */
    KZ_ERR_UNSUPPORTED,  /* well-formed but not handled: architecture, GGUF version, weight type */
    KZ_ERR_NOMEM,        /* out of memory or address space */
    KZ_ERR_CTX_FULL,     /* the tokens do not fit in the context's n_ctx */
    KZ_ERR_CANCELLED,    /* kz_cancel stopped a kz_eval */
    KZ_ERR_INTERNAL      /* anything else (a bug: please report it with the message) */
} kz_status;

/* "ok", "invalid argument", ...; "unknown status" for a value outside the enum. */
KZ_API const char *kz_status_name(kz_status s);

/* ---- logging ----
 * Diagnostics (the kernel level chosen for this CPU and the KZ_ISA override, a refused KZ_ISA,
 * each new context's sizes) go to one process-wide callback; none is set by default, so the
 * library is silent. The callback may be called from any thread that calls into the library,
 * several at once. Set it before loading a model: the kernel level is chosen (and reported)
 * once per process, on first use. */
typedef enum { KZ_LOG_DEBUG = 0, KZ_LOG_INFO = 1, KZ_LOG_WARN = 2, KZ_LOG_ERROR = 3 } kz_log_level;
typedef void (*kz_log_fn)(kz_log_level level, const char *msg, void *user);
/* Installs fn (NULL: silent again) with its user pointer; thread-safe. */
KZ_API void kz_log_set(kz_log_fn fn, void *user);

/* ---- model ---- */
typedef struct kz_model kz_model;     /* immutable weights (mmap), vocab, hparams */
typedef struct kz_context kz_context; /* per-sequence state: KV, GDN state, scratch, sampler */

typedef struct {
    int n_threads; /* threads for the shared worker pool; 0 = the fast cores (big.LITTLE aware) */
    /* 1 (default): on CPUs with AVX-512 VNNI, copy the Q4_0 matrices at load into a 16-row
     * interleaved layout their kernels stream contiguously (decode ~1.6x faster, same results
     * bit for bit). The copy replaces the file pages (resident size stays ~1x) but is no longer
     * zero-copy and loading reads the weights once. Elsewhere nothing is copied. 0: never. */
    int repack_weights;
} kz_model_params;

KZ_API kz_model_params kz_model_default_params(void);
/* Loads a GGUF file (params NULL = defaults). NULL on failure, with a message in err (if
 * errlen > 0). */
KZ_API kz_model *kz_model_load(const char *path, const kz_model_params *params, char *err, size_t errlen);
/* The same, also storing the failure's kind in *status (KZ_OK on success) when status != NULL. */
KZ_API kz_model *kz_model_load_ex(const char *path, const kz_model_params *params, kz_status *status,
                                  char *err, size_t errlen);
KZ_API void kz_model_free(kz_model *m);

/* Model facts (0 or "" for a NULL model). */
KZ_API const char *kz_model_arch(const kz_model *m); /* "qwen35" / "qwen3" */
KZ_API int kz_model_n_vocab(const kz_model *m);      /* token ids are 0 .. n_vocab-1 */
KZ_API int kz_model_n_ctx_train(const kz_model *m);  /* context length it was trained for */
KZ_API int kz_model_n_layer(const kz_model *m);      /* layers evaluated (MTP blocks excluded) */
KZ_API int kz_model_n_embd(const kz_model *m);       /* hidden size */
KZ_API uint64_t kz_model_size(const kz_model *m);    /* bytes of all tensors in the file */
KZ_API uint64_t kz_model_n_params(const kz_model *m);/* elements of all tensors in the file */
/* One-paragraph human description (arch, sizes, types). Returns bytes written (snprintf style). */
KZ_API int kz_model_describe(const kz_model *m, char *buf, size_t len);

/* ---- tokens ---- */
/* Tokenize UTF-8 text. parse_special != 0: control/user-defined token texts inside `text`
 * become their ids. Returns the number of tokens (may exceed max: call again with a bigger
 * buffer), or -1 on error. */
KZ_API int kz_tokenize(const kz_model *m, const char *text, size_t len, int parse_special,
                       int32_t *out, int max);
/* Raw bytes of one token (byte-level BPE decoded; may be a partial UTF-8 sequence).
 * Returns length (may exceed len: call again), or -1 for an invalid id. */
KZ_API int kz_token_bytes(const kz_model *m, int32_t tok, char *buf, size_t len);
/* 1 if tok ends a turn (<|im_end|>, EOS), else 0. */
KZ_API int kz_token_is_eog(const kz_model *m, int32_t tok);

/* ---- context ---- */
typedef enum { KZ_KV_F32 = 0, KZ_KV_F16 = 1, KZ_KV_Q8_0 = 2 } kz_kv_type;

typedef struct {
    int n_ctx;          /* max tokens in the sequence; 0 = min(train ctx, 4096) */
    int n_batch;        /* max tokens per forward chunk in prefill; 0 = 512 */
    int n_threads;      /* 0 = model's pool size */
    kz_kv_type kv_type; /* KV cache storage type (default F16) */
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

KZ_API kz_context_params kz_context_default_params(void);
/* A new sequence on m (p NULL = defaults); m must outlive it. NULL on failure (message in err). */
KZ_API kz_context *kz_context_new(kz_model *m, const kz_context_params *p, char *err, size_t errlen);
/* The same, also storing the failure's kind in *status (KZ_OK on success) when status != NULL. */
KZ_API kz_context *kz_context_new_ex(kz_model *m, const kz_context_params *p, kz_status *status,
                                     char *err, size_t errlen);
KZ_API void kz_context_free(kz_context *c);
/* Forget the sequence (KV, recurrent state, position). */
KZ_API void kz_context_reset(kz_context *c);
/* The last call's outcome on c: its message ("" if it succeeded) and its status (KZ_OK). */
KZ_API const char *kz_context_error(const kz_context *c);
KZ_API kz_status kz_context_status(const kz_context *c);

/* Context facts, after defaults were resolved (0 for a NULL context). */
KZ_API int kz_context_n_past(const kz_context *c);    /* tokens in the sequence now */
KZ_API int kz_context_n_ctx(const kz_context *c);     /* capacity in tokens */
KZ_API int kz_context_n_batch(const kz_context *c);   /* max tokens per forward chunk */
KZ_API int kz_context_n_threads(const kz_context *c); /* threads of its worker pool */
KZ_API kz_kv_type kz_context_kv_type(const kz_context *c);

/* ---- low-level evaluation ---- */
/* Appends n tokens to the sequence (split into n_batch chunks). logits NULL: the last token's
 * logits stay in the context only (read them with kz_logits; no copy). Else also copied out:
 * want_all ? n x n_vocab floats (one row per token) : n_vocab floats of the last token.
 * Returns 0, or -1 (kz_context_status: INVALID_ARG, CTX_FULL, CANCELLED when kz_cancel stopped
 * it; the sequence then holds the chunks that finished). */
KZ_API int kz_eval(kz_context *c, const int32_t *tokens, int n, float *logits, int want_all);
/* The logits after the last evaluated token (n_vocab floats), or NULL when there are none
 * (nothing evaluated yet, a reset, an error). Owned by the context; valid until its next eval,
 * generate, state load or reset. */
KZ_API const float *kz_logits(const kz_context *c);

/* ---- prompt state ----
 * Everything the context has evaluated (token history, KV rows, Gated DeltaNet conv and
 * recurrent states, position, and the last logits when there are any) as a versioned binary
 * image. It is tied to the model by a fingerprint (architecture, hyperparameters, tensor
 * names/shapes/types; not the weights) and needs a context with the same KV type and an n_ctx
 * that holds it. Loading validates the whole image first: on any error (other model, truncated
 * or corrupt data, other version) the context is left as it was and -1 is returned. */
KZ_API size_t kz_state_size(kz_context *c);                           /* bytes kz_state_save writes now */
KZ_API size_t kz_state_save(kz_context *c, void *buf, size_t len);    /* bytes written; 0 on error */
KZ_API int kz_state_load(kz_context *c, const void *buf, size_t len); /* 0 or -1 */
KZ_API int kz_state_save_file(kz_context *c, const char *path);       /* 0 or -1 */
KZ_API int kz_state_load_file(kz_context *c, const char *path);       /* 0 or -1 */

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

/* Builds the ChatML prompt (system may be NULL or ""), runs prefill, samples up to max_tokens
 * (<= 0: no limit), streams text through cb. Returns 0 on success (any stop reason but ERROR,
 * see stats->stop), -1 on error. Prefix reuse: tokens already in the context that start the
 * new prompt are kept, and the state after the system block is kept in memory, so a later call
 * with the same system prompt evaluates only the tokens after it. */
KZ_API int kz_generate(kz_context *c, const char *system, const char *user, int max_tokens,
                       kz_piece_cb cb, void *userdata, kz_stats *stats);
/* Thread-safe: asks a running kz_generate or kz_eval on c to stop soon (at the next token, or
 * inside a prefill chunk). Each of those calls clears a pending request when it starts. */
KZ_API void kz_cancel(kz_context *c);

/* ---- android (issue 26): raw token streaming, for language bindings ----
 * kz_piece_cb hands out text already cut at code points; a binding that decodes itself (the JNI
 * layer: Java's NewStringUTF aborts the VM on partial or 4-byte UTF-8) wants each token's bytes
 * as they are, with its id. */
/* Called once per sampled token but the final end-of-turn, with its raw bytes: possibly a
 * partial or ill-formed UTF-8 sequence, to be decoded incrementally by the caller; len 0 for a
 * control token (not printed). Return non-zero to stop (stats->stop = KZ_STOP_CANCELLED). */
typedef int (*kz_token_cb)(int32_t tok, const char *bytes, size_t len, void *userdata);
/* kz_generate with a token callback: same prompt, prefix reuse, sampling, cancel and stats. */
KZ_API int kz_generate_raw(kz_context *c, const char *system, const char *user, int max_tokens,
                           kz_token_cb cb, void *userdata, kz_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
