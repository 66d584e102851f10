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
/* The same from a GGUF image in memory (e.g. an uncompressed Android asset, or a file built into
 * the program); buf must stay valid and unchanged until kz_model_free. name is used in messages. */
KZ_API kz_model *kz_model_load_memory(const void *buf, size_t size, const char *name,
                                      const kz_model_params *params, char *err, size_t errlen);
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
 * recurrent states, position, the last logits when there are any, the MTP draft cache when
 * the model drafts; docs/mtp.md: older images load too) as a versioned binary
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
/* Plain-text completion, for base models (no chat template applied, special-token syntax in
 * text not parsed): continues text up to max_tokens (<= 0: no limit) or an end-of-text token,
 * streaming through cb. Same return, stats, prefix reuse and cancel as kz_generate. */
KZ_API int kz_complete(kz_context *c, const char *text, int max_tokens, kz_piece_cb cb, void *userdata,
                       kz_stats *stats);
/* Thread-safe: asks a running kz_generate or kz_eval on c to stop soon (at the next token, or
 * inside a prefill chunk). Each of those calls clears a pending request when it starts. */
KZ_API void kz_cancel(kz_context *c);

/* ---- quantize (issue 23, quant): GGUF -> GGUF quantisation, as llama-quantize ----
 * kz_quantize reads IN tensor by tensor (mmap, never the whole model in memory), converts each
 * 2-D weight to the type the recipe picks for it (the mixes choose per tensor the way
 * llama-quantize does: output / embedding, attn_v, ffn_down, the GDN attn_qkv ...), keeps norms
 * and other 1-D tensors as they are, copies the metadata (general.file_type set to llama.cpp's
 * ftype value, general.quantization_version 2) and writes OUT through a temporary file beside it
 * that is renamed at the end: on any error (or a cancel) no OUT is left behind. Warnings
 * (requantising a quantised source, type fallbacks, tensors missing from the imatrix) go to the
 * kz_log_set callback. */
typedef struct {
    int i_tensor, n_tensors;    /* the tensor being written, 1-based */
    const char *name;           /* its name */
    const char *type_in;        /* "F16", ... */
    const char *type_out;       /* "Q4_K", ... */
    uint64_t bytes_done;        /* source bytes processed so far */
    uint64_t bytes_total;       /* source bytes of all tensors */
    uint64_t bytes_out;         /* output tensor bytes written so far */
    double seconds;             /* since the start */
    int finished;               /* 1 on the last call: OUT is complete and in place */
} kz_quantize_progress;
typedef void (*kz_quantize_progress_fn)(const kz_quantize_progress *p, void *userdata);

typedef struct {
    const char *type;           /* Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS Q2_K Q3_K_S Q3_K_M Q3_K_L
                                 * Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K F16 BF16 F32 (Q3_K, Q4_K, Q5_K:
                                 * llama-quantize's aliases of the _M mixes); case-insensitive */
    int n_threads;              /* <= 0: all CPUs */
    const char *imatrix;        /* importance matrix GGUF (llama-imatrix's format) or NULL */
    const char *const *tensor_types; /* NULL-terminated "REGEX=TYPE" list (POSIX extended regex,
                                 * searched in the tensor name; the first match wins) or NULL */
    int pure;                   /* 1: every quantised tensor in the type itself, no mix rules */
    int leave_output;           /* 1: output.weight kept as it is */
    kz_quantize_progress_fn progress; /* called at each tensor and as rows are done; may be NULL */
    void *userdata;
    const int *cancel;          /* set *cancel non-zero (any thread) to stop: KZ_ERR_CANCELLED */
} kz_quantize_params;

KZ_API kz_quantize_params kz_quantize_default_params(void);
/* Quantise in to out (see above). Returns KZ_OK, or a status with a one-line message in err. */
KZ_API kz_status kz_quantize(const char *in, const char *out, const kz_quantize_params *p, char *err,
                             size_t errlen);
/* ---- guard cascade and memory budget (issue 24: guard) ----
 * A guard model (Qwen3Guard-Gen: a Qwen3 dense GGUF) moderating the user's prompt before the
 * main model (the "thinker") answers, and the answer while it streams. Usage:
 *
 *   kz_guard *g = kz_guard_new(guard_model, NULL, err, sizeof err);
 *   kz_guard_verdict v;
 *   if (kz_guard_check_prompt(g, user, &v) == 0 && !v.blocked) {
 *       kz_guard_stream gs = {g, on_piece, app_data};          (the app's own piece callback)
 *       kz_guard_response_begin(g, user);
 *       kz_generate(thinker, NULL, user, 512, kz_guard_stream_piece, &gs, &stats);
 *       kz_guard_stream_end(&gs);                      final check unless a verdict stopped it
 *       if (gs.verdict.blocked) ... withdraw the answer ...
 *   }
 *
 * Cores: the guard has its own context and worker pool and runs only inside these calls, on
 * the caller's thread; in the flow above that is the thinker's piece callback, while the
 * thinker waits (its workers sleep after a 50 us spin), so the two never compute at once and
 * the cores are not oversubscribed. Do not call a guard while a thinker runs on another thread.
 * One kz_guard is used by one thread at a time. */
typedef struct kz_guard kz_guard;

typedef enum { KZ_GUARD_SAFE = 0, KZ_GUARD_CONTROVERSIAL = 1, KZ_GUARD_UNSAFE = 2 } kz_guard_label;
typedef enum {
    KZ_GUARD_STRICT = 0, /* Controversial counts as Unsafe */
    KZ_GUARD_LOOSE = 1   /* Controversial counts as Safe */
} kz_guard_policy;
typedef enum {
    KZ_GUARD_BLOCK = 0,  /* an unsafe verdict sets blocked: kz_guard_stream_piece stops generation */
    KZ_GUARD_FLAG = 1    /* an unsafe verdict is reported (unsafe = 1), nothing is stopped */
} kz_guard_action;

/* Categories (bits of kz_guard_verdict.categories), as Qwen3Guard-Gen names them. */
#define KZ_GUARD_CAT_VIOLENT      (1u << 0) /* "Violent" */
#define KZ_GUARD_CAT_ILLEGAL      (1u << 1) /* "Non-violent Illegal Acts" */
#define KZ_GUARD_CAT_SEXUAL       (1u << 2) /* "Sexual Content or Sexual Acts" */
#define KZ_GUARD_CAT_PII          (1u << 3) /* "PII" */
#define KZ_GUARD_CAT_SELF_HARM    (1u << 4) /* "Suicide & Self-Harm" */
#define KZ_GUARD_CAT_UNETHICAL    (1u << 5) /* "Unethical Acts" */
#define KZ_GUARD_CAT_POLITICAL    (1u << 6) /* "Politically Sensitive Topics" */
#define KZ_GUARD_CAT_COPYRIGHT    (1u << 7) /* "Copyright Violation" */
#define KZ_GUARD_CAT_JAILBREAK    (1u << 8) /* "Jailbreak" (prompts only) */
/* The category's name for bit i (0..8), or NULL. */
KZ_API const char *kz_guard_category_name(int i);

typedef struct {
    kz_guard_policy policy; /* default STRICT */
    kz_guard_action action; /* default BLOCK */
    int check_every;        /* response: a check every N pieces (one per generated token) of the
                             * answer, and one at the end; 0 = only at the end. Default 32 */
    int max_verdict_tokens; /* tokens generated after the label for the Categories / Refusal lines
                             * (greedy); 0 = the label alone (one forward pass). Default 24.
                             * Checks in mid-answer generate them only when the label is not Safe */
    int n_ctx;              /* guard context (prompt + answer + ~420 template tokens); 0 = 4096 */
    int n_threads;          /* 0 = the guard model's pool size */
    kz_kv_type kv_type;     /* default F16 */
} kz_guard_params;

typedef struct {
    kz_guard_label label;   /* the verdict (after the fallback, see malformed) */
    float p_safe, p_controversial, p_unsafe; /* probabilities (softmax over the whole vocabulary)
                             * of the three labels' first tokens after "Safety:" */
    unsigned categories;    /* KZ_GUARD_CAT_* bits parsed from the Categories line (0 = None) */
    int refusal;            /* response checks: 1 "Refusal: Yes", 0 "No"; -1 not given */
    int unsafe;             /* the label counts as unsafe under the policy */
    int blocked;            /* unsafe and the action is BLOCK */
    /* 1 when the guard's output did not follow the grammar (docs/guard.md). Fallback: the label
     * of the "Safety:" line when that line is valid; else the most probable of the three labels
     * when they hold at least half the probability; else Controversial (so STRICT blocks and
     * LOOSE lets through). Categories keep the names recognised; refusal -1 when its line is bad. */
    int malformed;
    int n_eval;             /* guard tokens evaluated by this check (prompt part, suffix, lines) */
    int n_reused;           /* guard tokens kept from the previous check (not evaluated again) */
    double t_ms;            /* wall time of the check */
    char text[160];         /* the guard's output from "Safety:" on (cut to fit), for logs */
} kz_guard_verdict;

KZ_API kz_guard_params kz_guard_default_params(void);
/* A guard on guard_model (an attention-only qwen3 model; it must outlive the guard). p NULL =
 * defaults. NULL on failure with the message in err. */
KZ_API kz_guard *kz_guard_new(kz_model *guard_model, const kz_guard_params *p, char *err, size_t errlen);
KZ_API void kz_guard_free(kz_guard *g);
/* The last call's message ("" after a success) and status. */
KZ_API const char *kz_guard_error(const kz_guard *g);
KZ_API kz_status kz_guard_status(const kz_guard *g);

/* Prompt moderation of one user message. 0 (verdict in *v) or -1 (error: v->blocked is set
 * anyway, so a caller that ignores the return value fails closed). */
KZ_API int kz_guard_check_prompt(kz_guard *g, const char *user, kz_guard_verdict *v);
/* Moderation of a conversation: roles "system" / "user" / "assistant"; the last message's
 * role picks the task (user: prompt moderation, else response moderation). 0 or -1 as above. */
KZ_API int kz_guard_check_messages(kz_guard *g, const char *const *roles, const char *const *contents, int n,
                                   kz_guard_verdict *v);

/* Response moderation of one answer, append-only: begin with the user's prompt, feed the
 * answer's text as it is produced (each call one piece), end. A check every check_every pieces
 * re-uses the guard's state of the previous check: only the tokens after the longest common
 * token prefix (the last word of the previous text, the new text and the fixed tail of the
 * template) are evaluated.
 * feed: 1 when a check ran (verdict in *v), 0 when the text was only buffered, -1 on error. */
KZ_API int kz_guard_response_begin(kz_guard *g, const char *user);
KZ_API int kz_guard_response_feed(kz_guard *g, const char *text, size_t len, kz_guard_verdict *v);
/* The final check of the whole answer (lines always generated). 0 or -1 (v->blocked set). */
KZ_API int kz_guard_response_end(kz_guard *g, kz_guard_verdict *v);

/* Streaming glue: pass kz_guard_stream_piece as the kz_piece_cb of kz_generate (or of any
 * generator with that callback type) and a kz_guard_stream as its userdata. Each piece goes to
 * cb first (when set), then to kz_guard_response_feed; a blocking verdict or a guard error
 * returns non-zero, which stops the generation (fail closed). */
typedef struct {
    kz_guard *guard;
    kz_piece_cb cb;           /* the application's own callback, or NULL */
    void *userdata;           /* its userdata */
    kz_guard_verdict verdict; /* the last check's verdict (zeroed: none yet) */
    int n_checks;             /* checks run */
    int stopped;              /* 1: a verdict (or a guard error) stopped the generation */
    int error;                /* 1: the guard failed (kz_guard_error says why) */
} kz_guard_stream;
KZ_API int kz_guard_stream_piece(const char *piece, size_t len, void *stream);
/* After the generation: the final check unless the stream was stopped. 0 or -1. */
KZ_API int kz_guard_stream_end(kz_guard_stream *s);

/* The whole cascade for one turn of kz_generate: prompt check (a blocking verdict returns
 * before the thinker runs: stats->n_prompt = n_gen = 0, stop CANCELLED), then the answer
 * generated with response moderation every check_every pieces (a blocking verdict stops it,
 * stop CANCELLED) and the final check. *v: the verdict that stopped it or the last one.
 * 0, or -1 on a thinker or guard error (v->blocked is then set). */
KZ_API int kz_guard_generate(kz_guard *g, kz_context *thinker, const char *system, const char *user, int max_tokens,
                             kz_piece_cb cb, void *userdata, kz_stats *stats, kz_guard_verdict *v);

/* Memory budget: the resident bytes a model and one context on it will take, predicted from
 * the file's header, the model's shapes and the parameters, before anything large is
 * allocated (the file is opened and its header and vocabulary read; no weight is touched).
 * Resident means what a long conversation makes resident: the weight pages a forward pass
 * reads (the whole file but the untied embedding table, whose rows are read one per token),
 * the repacked copies that replace file pages, and the context's KV cache filled to n_ctx. */
typedef struct {
    /* model */
    uint64_t file_bytes;        /* the GGUF file, mapped (not all of it resident) */
    uint64_t weights_file;      /* file pages a forward pass reads (header and vocabulary included) */
    uint64_t weights_repacked;  /* anonymous copies of the Q4_0 matrices (repack_weights) */
    uint64_t model_heap;        /* f32 copies of small tensors, tokenizer tables, metadata */
    uint64_t model_total;
    /* context */
    uint64_t kv;                /* KV cache at n_ctx */
    uint64_t gdn_state;         /* Gated DeltaNet conv + recurrent state and its cancel copy */
    uint64_t checkpoints;       /* kz_generate's snapshot after a system prompt (without its KV rows) */
    uint64_t scratch;           /* activations arena, matmul work area, token history, logits, sampler */
    uint64_t context_total;
    uint64_t total;             /* model_total + context_total */
    /* one kz_chat checkpoint: the GDN conv + recurrent state and its tokens at a full context
     * (n_ctx x 4 bytes); not in the totals: a conversation adds up to kz_chat_params.
     * max_checkpoints (default 2) of them (a Qwen3 checkpoint holds only its tokens) */
    uint64_t chat_checkpoint;
} kz_memory_report;
/* path: the GGUF file; mp / cp: the parameters it will be loaded and run with (NULL =
 * defaults). 0, or -1 with a message in err. */
KZ_API int kz_memory_estimate(const char *path, const kz_model_params *mp, const kz_context_params *cp,
                              kz_memory_report *out, char *err, size_t errlen);
/* The same for a loaded model (its load parameters as they were). */
KZ_API int kz_memory_estimate_model(const kz_model *m, const kz_context_params *cp, kz_memory_report *out,
                                    char *err, size_t errlen);
/* ---- end of guard cascade and memory budget ---- */
/* ---- conversations (issue 24, chat) ----
 * A multi-turn conversation on a context: add system / user messages, generate each assistant
 * reply. Each reply renders the whole history exactly as the model's own chat template does
 * (earlier turns lose their <think> content, the thinking switch, ...), tokenises it, and
 * evaluates only the tokens the context does not already hold. The Gated DeltaNet state of
 * Qwen3.5 cannot be rewound, so the conversation keeps checkpoints of it (the N most recent, at
 * the end of each user turn, where the rendering of the previous reply changes) and restores the
 * latest one that the new rendering extends. A conversation owns its context's sequence: other
 * calls on the context in between (kz_eval, kz_generate, reset) are allowed, they only cost a
 * re-evaluation. Cancel a reply with kz_cancel(context) from any thread.
 * Errors: -1 / NULL, with kz_chat_error / kz_chat_status (or the err buffer of kz_chat_new). */
typedef struct kz_chat kz_chat;
typedef enum { KZ_ROLE_SYSTEM = 0, KZ_ROLE_USER = 1, KZ_ROLE_ASSISTANT = 2 } kz_role;

typedef struct {
    int think;           /* replies think by default (1, default) or answer directly (0) */
    int max_checkpoints; /* state checkpoints kept (the most recent); 0 = 2: the next turn needs
                          * the last, editing the last user message the one before. Each holds the
                          * GDN state (Qwen3.5-0.8B: 19 MiB; see kz_chat_memory); a Qwen3
                          * checkpoint holds only its tokens */
} kz_chat_params;
KZ_API kz_chat_params kz_chat_default_params(void);

/* One reply's settings. kz_gen_default_params gives the model card's recommendation for the
 * architecture and thinking mode (Qwen3: thinking T 0.6, top-p 0.95, top-k 20, min-p 0;
 * non-thinking 0.7 / 0.8 / 20 / 0. Qwen3.5: thinking 1.0 / 0.95 / 20 / 0, non-thinking
 * 0.7 / 0.8 / 20 / 0, both with presence penalty 1.5). */
typedef struct {
    int max_tokens;          /* <= 0: until end of turn or a full context */
    int think;               /* -1: the conversation's setting, 0 off, 1 on */
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1 = off */
    int repeat_last_n;       /* penalty window (prompt included); 0 = whole context */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    uint64_t seed;           /* same history + seed -> same reply */
    const char *const *stop; /* n_stop stop strings: the reply ends before the first one (not
                              * streamed, not recorded); stats->stop is then KZ_STOP_EOG */
    int n_stop;
} kz_gen_params;
/* m NULL: the Qwen3 values. A file's own recommendation (general.sampling.* keys, written by
 * the converters from generation_config.json) replaces the architecture's where it is given. */
KZ_API kz_gen_params kz_gen_default_params(const kz_model *m, int think);
/* Overwrites the fields of g that m's GGUF general.sampling.{temp, top_k, top_p, min_p,
 * penalty_repeat, penalty_last_n} keys give (values out of range are ignored); returns how many. */
KZ_API int kz_model_sampling(const kz_model *m, kz_gen_params *g);

/* A conversation on c (p NULL = defaults); c must outlive it. NULL on failure (message in err). */
KZ_API kz_chat *kz_chat_new(kz_context *c, const kz_chat_params *p, char *err, size_t errlen);
KZ_API void kz_chat_free(kz_chat *chat);
/* Appends a message (role SYSTEM only first, or for Qwen3 anywhere; ASSISTANT lets an app
 * restore a conversation it stored itself). 0 or -1. */
KZ_API int kz_chat_add(kz_chat *chat, kz_role role, const char *text);
/* Sets (text non-empty) or removes (NULL / "") the system message at the start. The next reply
 * re-evaluates the history once. 0 or -1. */
KZ_API int kz_chat_set_system(kz_chat *chat, const char *text);
/* Generates the assistant's reply to the messages so far (the last must be a user message),
 * streams its text through cb (may be NULL; a non-zero return stops it) and appends it to the
 * conversation: the raw text, thinking included (a thinking block cut short is closed), up to a
 * stop string. gp NULL = kz_gen_default_params for the conversation's think setting. stats
 * (may be NULL): n_reused = tokens kept (from the context or a checkpoint), n_prompt = tokens
 * evaluated, n_gen, times, stop. A reply cancelled before its first token appends nothing.
 * Returns 0 (any stop reason but ERROR), or -1. */
KZ_API int kz_chat_reply(kz_chat *chat, const kz_gen_params *gp, kz_piece_cb cb, void *userdata,
                         kz_stats *stats);
/* Removes the last message (to edit or regenerate a turn, or drop a reply a guard blocked). 0, or
 * -1 when there is none. */
KZ_API int kz_chat_pop(kz_chat *chat);
/* Forgets every message but the system message, and the checkpoints. */
KZ_API void kz_chat_reset(kz_chat *chat);
KZ_API int kz_chat_n_messages(const kz_chat *chat);
/* Message i (0-based): its role (-1 when out of range) and text (NULL when out of range; valid
 * until the conversation changes). */
KZ_API int kz_chat_message_role(const kz_chat *chat, int i);
KZ_API const char *kz_chat_message_text(const kz_chat *chat, int i);
/* Checkpoints held now, and the bytes the conversation holds beyond its context (checkpoints,
 * messages). */
KZ_API int kz_chat_n_checkpoints(const kz_chat *chat);
KZ_API size_t kz_chat_memory(const kz_chat *chat);
/* The whole conversation (messages, settings, the context's state, checkpoints) to a file
 * (written beside it, then renamed: never half-written), and back into a conversation on a
 * context of the same model, KV type and an n_ctx that holds it, in this or another process.
 * On a load error the conversation and its context are unchanged. 0 or -1. */
KZ_API int kz_chat_save(kz_chat *chat, const char *path);
KZ_API int kz_chat_load(kz_chat *chat, const char *path);
/* The last call's outcome: message ("" after a success) and status. */
KZ_API const char *kz_chat_error(const kz_chat *chat);
KZ_API kz_status kz_chat_status(const kz_chat *chat);
/* ---- MTP self-speculative decoding (issue 25; docs/mtp.md) ----
 * A Qwen3.5 GGUF with an MTP block (nextn_predict_layers) drafts tokens with it and kz_generate
 * verifies them in one batch through the model: the output is exactly plain decoding's (the
 * sampler picks every token from the model's own logits; a draft only saves the pass that
 * would have produced it). On by default when the model has the block. */
typedef struct {
    int enabled;    /* 1 (default): speculate when the model has an MTP block */
    int max_draft;  /* drafts per verify, 1..8 (default 3) */
    int adaptive;   /* 1 (default): choose 0..max_draft per step from the measured acceptance
                     * and costs; 0: always max_draft */
    int draft_vocab; /* 0 (default): the drafts use the whole LM head; N: only its rows of token
                      * ids below N (rounded up to 64; byte-level BPE ids run from the most
                      * frequent merges down, docs/mtp.md): a cheaper draft, same output */
} kz_mtp_params;
KZ_API kz_mtp_params kz_mtp_default_params(void);
KZ_API int kz_model_has_mtp(const kz_model *m);
/* Set before the first kz_eval / kz_generate (the MTP block's cache is filled along with the
 * prompt); changing it later restarts the draft cache empty. 0 or -1 (bad value: message in
 * kz_context_error). */
KZ_API int kz_context_set_mtp(kz_context *c, const kz_mtp_params *p);
#define KZ_MTP_MAX_DRAFT 8
typedef struct {
    long verifies;                        /* verify batches run */
    long drafted, accepted;               /* drafts proposed / taken by the sampler */
    long drafted_at[KZ_MTP_MAX_DRAFT];    /* per draft position (0 = the first draft) */
    long accepted_at[KZ_MTP_MAX_DRAFT];
    long plain_steps;                     /* decode steps without drafts (adaptive k = 0) */
    long tokens;                          /* tokens those steps and verifies produced */
    double t_verify_ms, t_draft_ms, t_plain_ms; /* wall time in each */
} kz_mtp_stats;
/* Totals since the context was made (or kz_context_set_mtp); 0, or -1 if c is NULL. */
KZ_API int kz_context_mtp_stats(const kz_context *c, kz_mtp_stats *out);
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
