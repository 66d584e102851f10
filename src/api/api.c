/* Public context / token / eval / generation API (include/kazeia.h) on top of kz_seq + kz_forward.
 *
 * Defaults (kz_context_default_params): greedy decoding (temperature 0) so a plain call is
 * reproducible; when a caller sets temperature > 0 the filters default to llama.cpp's
 * (top_k 40, top_p 0.95, min_p 0.05). Penalties are off. Thinking on (model default).
 *
 * Token history: c->hist holds exactly the tokens evaluated into the sequence state
 * (n_hist == kz_seq_n_past). The penalties' window is taken from it, so it includes the prompt
 * (as llama.cpp does when it feeds prompt tokens to its sampler).
 *
 * Prefix reuse: the GDN recurrent state cannot be rewound, so a state is reusable only whole:
 * (1) the current sequence, when the tokens already evaluated are an exact prefix of the new
 * prompt (kz_eval-primed prefixes, a prompt resubmitted after a cancelled prefill), and (2) a
 * snapshot (state.c image, in memory) that kz_generate takes right after the system block, so
 * the next call with the same system prompt and a new user message restores it and evaluates
 * only the rest. The longer of the two wins (n_reused reports it); anything else resets.
 * Prefill always splits at the end of the system block, so a run from the snapshot computes
 * exactly the same batches, hence bit-identical logits, as a run from scratch.
 *
 * kz_generate: max_tokens <= 0 means no limit (until end of turn or a full context). n_gen
 * counts every sampled token, the final EOG included; the last sampled token is never
 * evaluated, so afterwards n_past = prompt + n_gen - 1. Control tokens are not printed. The
 * sampler is reseeded with params.seed at every call (same prompt + seed -> same text).
 * Cancellation (kz_cancel or a non-zero callback) is checked before every prefill chunk, inside
 * each chunk at every layer (forward.c rolls the chunk back) and before every sample/eval; the
 * context stays consistent and reusable, holding the prompt tokens of the chunks that finished. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "api/api.h"
#include "api/context.h"
#include "text/chat.h"
#include "model/model.h"
#include "forward/seq.h"
#include "api/sample.h"
#include "forward/state.h"
#include "text/tokenizer.h"
#include "sys/cpu.h"
#include "sys/log.h"
#include "sys/clock.h"
#include "sys/err.h"

__attribute__((format(printf, 3, 4)))
void kz_ctx_seterr(kz_context *c, kz_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    c->status = st;
}

void kz_ctx_begin(kz_context *c) {
    c->err[0] = 0;
    c->status = KZ_OK;
}

/* ---- tokens ---- */

int kz_tokenize(const kz_model *m, const char *text, size_t len, int parse_special,
                int32_t *out, int max) {
    if (!m || !m->tok || (!text && len > 0) || max < 0 || (max > 0 && !out)) return -1;
    return kz_tok_encode(m->tok, text ? text : "", len, parse_special, out, max);
}

int kz_token_bytes(const kz_model *m, int32_t tok, char *buf, size_t len) {
    if (!m || !m->tok || (!buf && len > 0)) return -1;
    return kz_tok_bytes(m->tok, tok, buf, len);
}

int kz_token_is_eog(const kz_model *m, int32_t tok) {
    if (!m || !m->tok) return 0;
    return kz_tok_is_eog(m->tok, tok);
}

/* ---- context ---- */

kz_context_params kz_context_default_params(void) {
    kz_context_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 0;
    p.n_batch = 0;
    p.n_threads = 0;
    p.kv_type = KZ_KV_F16;
    p.temperature = 0.0f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.seed = 0;
    p.think = 1;
    return p;
}

kz_sampler_params kz_ctx_sampler_params(const kz_context_params *p) {
    kz_sampler_params s;
    s.temperature = p->temperature;
    s.top_k = p->top_k;
    s.top_p = p->top_p;
    s.min_p = p->min_p;
    s.repeat_penalty = p->repeat_penalty;
    s.repeat_last_n = p->repeat_last_n;
    s.presence_penalty = p->presence_penalty;
    s.frequency_penalty = p->frequency_penalty;
    s.seed = p->seed;
    return s;
}

static const char *kv_name(kz_kv_type t) { return t == KZ_KV_F32 ? "f32" : t == KZ_KV_F16 ? "f16" : "q8_0"; }

/* kz_context_new's work; *st says why it failed (every early return sets err and st) */
static kz_context *context_new(kz_model *m, const kz_context_params *pp, kz_status *st, char *err,
                               size_t errlen) {
    *st = KZ_ERR_INVALID_ARG;
    if (!m) { kz_seterr(err, errlen, "kz_context_new: model is NULL"); return NULL; }
    kz_context_params p = pp ? *pp : kz_context_default_params();
    if (p.n_ctx < 0) { kz_seterr(err, errlen, "n_ctx must be >= 0 (got %d)", p.n_ctx); return NULL; }
    if (p.n_batch < 0) { kz_seterr(err, errlen, "n_batch must be >= 0 (got %d)", p.n_batch); return NULL; }
    if (p.n_threads < 0) { kz_seterr(err, errlen, "n_threads must be >= 0 (got %d)", p.n_threads); return NULL; }
    if (p.kv_type != KZ_KV_F32 && p.kv_type != KZ_KV_F16 && p.kv_type != KZ_KV_Q8_0) {
        kz_seterr(err, errlen, "unknown kv_type %d (use KZ_KV_F32, KZ_KV_F16 or KZ_KV_Q8_0)", (int)p.kv_type);
        return NULL;
    }
    if (isnan(p.temperature) || isnan(p.top_p) || isnan(p.min_p) || isnan(p.repeat_penalty) ||
        isnan(p.presence_penalty) || isnan(p.frequency_penalty)) {
        kz_seterr(err, errlen, "sampling parameters must not be NaN");
        return NULL;
    }
    if (p.repeat_penalty <= 0.0f) {
        kz_seterr(err, errlen, "repeat_penalty must be > 0 (1 = off), got %g", (double)p.repeat_penalty);
        return NULL;
    }
    if (p.repeat_last_n < 0) { kz_seterr(err, errlen, "repeat_last_n must be >= 0 (0 = whole context)"); return NULL; }

    int n_train = kz_model_n_ctx_train(m);
    int n_ctx = p.n_ctx;
    if (n_ctx == 0) n_ctx = (n_train > 0 && n_train < 4096) ? n_train : 4096;
    int n_batch = p.n_batch ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    int n_threads = p.n_threads ? p.n_threads : m->n_threads;
    int n_vocab = kz_model_n_vocab(m);
    if (n_vocab < 1) { kz_seterr(err, errlen, "model has an empty vocabulary"); return NULL; }
    /* the token history is n_ctx int32s: on 32-bit systems n_ctx * 4 can wrap size_t */
    if ((uint64_t)n_ctx * sizeof(int32_t) > SIZE_MAX / 2) {
        kz_seterr(err, errlen, "n_ctx %d is too large for this system's address space", n_ctx);
        *st = KZ_ERR_NOMEM;
        return NULL;
    }

    *st = KZ_ERR_NOMEM;
    kz_context *c = calloc(1, sizeof *c);
    if (!c) { kz_seterr(err, errlen, "out of memory allocating the context"); return NULL; }
    c->m = m;
    c->p = p;
    c->logits_argmax = -1;
    c->p.n_ctx = n_ctx;
    c->p.n_batch = n_batch;
    c->p.n_threads = n_threads;
    c->n_vocab = n_vocab;
    atomic_init(&c->cancel, 0);
    char e[512] = "";
    c->seq = kz_seq_new(m, n_ctx, n_batch, n_threads, p.kv_type, e, sizeof e);
    if (!c->seq) {
        kz_seterr(err, errlen, "%s", e);
        *st = kz_status_from_message(e, KZ_ERR_INVALID_ARG);
        kz_context_free(c);
        return NULL;
    }
    kz_sampler_params sp = kz_ctx_sampler_params(&p);
    c->smp = kz_sampler_new(n_vocab, &sp);
    c->hist = malloc((size_t)n_ctx * sizeof *c->hist);
    c->logits = malloc((size_t)n_vocab * sizeof *c->logits);
    c->piece_cap = 256;
    c->piece = malloc(c->piece_cap);
    if (!c->smp || !c->hist || !c->logits || !c->piece) {
        kz_seterr(err, errlen, "out of memory allocating the context (n_ctx %d, vocab %d)", n_ctx, n_vocab);
        kz_context_free(c);
        return NULL;
    }
    *st = KZ_OK;
    kz_logf(KZ_LOG_INFO, "context: n_ctx %d, n_batch %d, %d threads, KV %s, %s kernels", n_ctx, n_batch, n_threads,
            kv_name(p.kv_type), kz_isa_name(kz_isa_active()));
    return c;
}

kz_context *kz_context_new_ex(kz_model *m, const kz_context_params *p, kz_status *status, char *err,
                              size_t errlen) {
    kz_status st;
    if (err && errlen) err[0] = 0;
    kz_context *c = context_new(m, p, &st, err, errlen);
    if (status) *status = st;
    return c;
}

kz_context *kz_context_new(kz_model *m, const kz_context_params *p, char *err, size_t errlen) {
    return kz_context_new_ex(m, p, NULL, err, errlen);
}

void kz_context_free(kz_context *c) {
    if (!c) return;
    kz_spec_free(c->spec);
    kz_seq_free(c->seq);
    kz_sampler_free(c->smp);
    free(c->hist);
    free(c->logits);
    free(c->piece);
    free(c->snap);
    free(c->snap_tok);
    free(c);
}

void kz_context_reset(kz_context *c) {
    if (!c) return;
    kz_seq_reset(c->seq);
    c->n_hist = 0;
    c->logits_valid = 0;
    c->logits_argmax = -1;
}

int kz_context_n_past(const kz_context *c) { return c ? c->n_hist : 0; }
int kz_context_n_ctx(const kz_context *c) { return c ? c->p.n_ctx : 0; }
int kz_context_n_batch(const kz_context *c) { return c ? c->p.n_batch : 0; }
int kz_context_n_threads(const kz_context *c) { return c ? c->p.n_threads : 0; }
kz_kv_type kz_context_kv_type(const kz_context *c) { return c ? c->p.kv_type : KZ_KV_F32; }

kz_seq *kz_context_seq(kz_context *c) { return c ? c->seq : NULL; }
int64_t kz_context_logits_argmax(const kz_context *c) { return c && kz_logits(c) ? c->logits_argmax : -1; }

const char *kz_context_error(const kz_context *c) { return c ? c->err : "context is NULL"; }
kz_status kz_context_status(const kz_context *c) { return c ? c->status : KZ_ERR_INVALID_ARG; }

const int32_t *kz_context_history(const kz_context *c, int *n) {
    *n = c ? c->n_hist : 0;
    return c ? c->hist : NULL;
}

static int build_prompt(kz_context *c, const char *system, const char *user, int32_t **out) {
    kz_chat_seg segs[KZ_CHAT_MAX_SEGS];
    kz_chat_arch arch = c->m->hp.arch == KZ_ARCH_QWEN35 ? KZ_CHAT_QWEN35 : KZ_CHAT_QWEN3;
    int nseg = kz_chat_segments(arch, system, user, c->p.think, segs);
    int n = kz_chat_tokenize(c->m->tok, segs, nseg, out, c->err, sizeof c->err);
    if (n < 0) c->status = kz_status_from_message(c->err, KZ_ERR_INVALID_ARG);
    return n;
}

/* plain text, special-token syntax not parsed (a completion prompt is data) */
static int raw_prompt(kz_context *c, const char *text, int32_t **out) {
    *out = NULL;
    if (!text) { kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "no text given"); return -1; }
    size_t len = strlen(text);
    if (!len) { kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "empty prompt: a completion needs text to continue"); return -1; }
    int cap = (int)(len < (size_t)INT_MAX - 1 ? len + 1 : INT_MAX);
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) { kz_ctx_seterr(c, KZ_ERR_NOMEM, "out of memory (%d prompt tokens)", cap); return -1; }
    int n = kz_tokenize(c->m, text, len, 0, t, cap);
    if (n <= 0) {
        free(t);
        kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "cannot tokenize the prompt");
        return -1;
    }
    *out = t;
    return n;
}

int kz_context_prompt_tokens(kz_context *c, const char *system, const char *user, int32_t **out) {
    *out = NULL;
    if (!c) return -1;
    kz_ctx_begin(c);
    return build_prompt(c, system, user, out);
}

/* ---- evaluation ---- */

/* Append n tokens via kz_forward (logits as its contract). Keeps hist in step with the sequence even when the forward fails part-way. */
int kz_ctx_eval_chunk(kz_context *c, const int32_t *toks, int n, float *logits, int want_all) {
    int before = c->n_hist;
    char e[384];
    e[0] = 0;
    int r = kz_forward(c->m, c->seq, toks, n, logits, want_all, e, sizeof e);
    if (r == KZ_FWD_ABORTED) { /* whole chunks before the cancelled one went in */
        int np = kz_seq_n_past(c->seq);
        memcpy(c->hist + before, toks, (size_t)(np - before) * sizeof *toks);
        c->n_hist = np;
        c->logits_valid = 0;
        c->logits_argmax = -1;
        return KZ_FWD_ABORTED;
    }
    if (r == 0) {
        memcpy(c->hist + before, toks, (size_t)n * sizeof *toks);
        c->n_hist = before + n;
        return 0;
    }
    kz_ctx_seterr(c, kz_status_from_message(e, KZ_ERR_INTERNAL), "%s", e[0] ? e : "forward pass failed");
    int np = kz_seq_n_past(c->seq);
    if (np >= before && np <= before + n) { /* a prefix of the chunk went in */
        memcpy(c->hist + before, toks, (size_t)(np - before) * sizeof *toks);
        c->n_hist = np;
    } else {
        kz_context_reset(c); /* unknown state: start over rather than guess */
    }
    c->logits_valid = 0;
    c->logits_argmax = -1;
    return -1;
}

/* 0 when the tokens can go in */
static int eval_check(kz_context *c, const int32_t *tokens, int n) {
    if (n < 1 || !tokens) { kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "kz_eval: need at least one token (got %d)", n); return -1; }
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab) {
            kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "kz_eval: token %d at position %d is outside the vocabulary (0..%d)",
                    tokens[i], i, c->n_vocab - 1);
            return -1;
        }
    }
    if (n > c->p.n_ctx - c->n_hist) {
        kz_ctx_seterr(c, KZ_ERR_CTX_FULL, "context full: %d tokens in the sequence + %d new > n_ctx %d", c->n_hist, n,
                c->p.n_ctx);
        return -1;
    }
    return 0;
}

int kz_eval(kz_context *c, const int32_t *tokens, int n, float *logits, int want_all) {
    if (!c) return -1;
    kz_ctx_begin(c);
    atomic_store(&c->cancel, 0);
    if (eval_check(c, tokens, n) != 0) return -1;
    const int before = c->n_hist;
    /* without a caller buffer the LM head writes straight into the context's row: no copy (a
     * pass over n_vocab floats per token) */
    const int own_row = logits == NULL;
    kz_seq_set_abort(c->seq, &c->cancel);
    int r = kz_ctx_eval_chunk(c, tokens, n, own_row ? c->logits : logits, own_row ? 0 : want_all);
    kz_seq_set_abort(c->seq, NULL);
    if (r == KZ_FWD_ABORTED) {
        kz_ctx_seterr(c, KZ_ERR_CANCELLED, "kz_eval: cancelled after %d of %d tokens", c->n_hist - before, n);
        return -1;
    }
    if (r != 0) return -1;
    /* keep the last logits in the context: kz_logits, and a following kz_generate continues */
    if (!own_row) {
        const float *last = want_all ? logits + (size_t)(n - 1) * (size_t)c->n_vocab : logits;
        memcpy(c->logits, last, (size_t)c->n_vocab * sizeof *c->logits);
    }
    c->logits_valid = 1;
    c->logits_argmax = kz_seq_logits_argmax(c->seq);
    return 0;
}

const float *kz_logits(const kz_context *c) { return c && c->logits_valid && c->n_hist > 0 ? c->logits : NULL; }

/* ---- prompt state ---- */

size_t kz_state_size(kz_context *c) {
    if (!c) return 0;
    kz_ctx_begin(c);
    size_t n = kz_state_image_size(c->m, c->seq, c->logits_valid && c->n_hist > 0);
    if (!n) kz_ctx_seterr(c, KZ_ERR_NOMEM, "state of %d tokens is too large to save", c->n_hist);
    return n;
}

size_t kz_state_save(kz_context *c, void *buf, size_t len) {
    if (!c) return 0;
    kz_ctx_begin(c);
    size_t n = kz_state_image_write(c->m, c->seq, c->hist, kz_logits(c), 1, buf, len, NULL, c->err, sizeof c->err);
    if (!n) c->status = kz_status_from_message(c->err, KZ_ERR_INVALID_ARG); /* buffer too small */
    return n;
}

/* the state file at path opened for a kz_state_*_file call (mode "wb" or "rb"), or NULL with
 * the error set */
static FILE *state_file(kz_context *c, const char *fn, const char *path, const char *mode) {
    if (!path) { kz_ctx_seterr(c, KZ_ERR_INVALID_ARG, "%s: no path given", fn); return NULL; }
    FILE *f = fopen(path, mode);
    if (!f)
        kz_ctx_seterr(c, KZ_ERR_IO, "%s: cannot %s the state file: %s", path, mode[0] == 'w' ? "create" : "open",
                strerror(errno));
    return f;
}

int kz_state_save_file(kz_context *c, const char *path) {
    if (!c) return -1;
    kz_ctx_begin(c);
    FILE *f = state_file(c, "kz_state_save_file", path, "wb");
    if (!f) return -1;
    char e[384];
    size_t n = kz_state_image_write(c->m, c->seq, c->hist, kz_logits(c), 1, NULL, 0, f, e, sizeof e);
    int bad = fclose(f) != 0;
    if (!n || bad) {
        kz_ctx_seterr(c, n ? KZ_ERR_IO : kz_status_from_message(e, KZ_ERR_IO), "%s: %s", path,
                n ? "cannot write the state file (disk full?)" : e);
        remove(path);
        return -1;
    }
    return 0;
}

/* restore an image into the context (sequence, history, logits); on error nothing changes */
int kz_ctx_state_load(kz_context *c, const void *buf, size_t len, char *e, size_t elen) {
    kz_state_info info;
    if (kz_state_image_read(c->m, c->seq, buf, len, c->hist, c->p.n_ctx, c->logits, &info, e, elen) != 0) return -1;
    c->n_hist = info.n_past;
    c->logits_valid = info.has_logits;
    c->logits_argmax = -1;
    return 0;
}

int kz_state_load(kz_context *c, const void *buf, size_t len) {
    if (!c) return -1;
    kz_ctx_begin(c);
    int r = kz_ctx_state_load(c, buf, len, c->err, sizeof c->err);
    if (r) c->status = kz_status_from_message(c->err, KZ_ERR_FORMAT);
    return r;
}

int kz_state_load_file(kz_context *c, const char *path) {
    if (!c) return -1;
    kz_ctx_begin(c);
    FILE *f = state_file(c, "kz_state_load_file", path, "rb");
    if (!f) return -1;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        kz_ctx_seterr(c, KZ_ERR_IO, "%s: cannot read the state file (not a regular file?)", path);
        fclose(f);
        return -1;
    }
    void *buf = malloc(sz > 0 ? (size_t)sz : 1);
    if (!buf) { kz_ctx_seterr(c, KZ_ERR_NOMEM, "%s: out of memory reading %ld bytes", path, sz); fclose(f); return -1; }
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    char e[384] = "cannot read the state file";
    int r = got == (size_t)sz ? kz_ctx_state_load(c, buf, got, e, sizeof e) : -1;
    if (r) kz_ctx_seterr(c, got == (size_t)sz ? kz_status_from_message(e, KZ_ERR_FORMAT) : KZ_ERR_IO, "%s: %s", path, e);
    free(buf);
    return r;
}

/* ---- prefix snapshot ---- */

/* Tokens of the system block that starts prompt (0 if there is none): everything before the
 * user turn's <|im_start|>. A special token ends it, so it tokenises the same alone. */
static int system_prefix_len(kz_context *c, const char *system, const char *user, const int32_t *prompt,
                             int n_prompt) {
    if (!system || !system[0]) return 0;
    kz_chat_seg segs[KZ_CHAT_MAX_SEGS];
    kz_chat_arch arch = c->m->hp.arch == KZ_ARCH_QWEN35 ? KZ_CHAT_QWEN35 : KZ_CHAT_QWEN3;
    int nseg = kz_chat_segments(arch, system, user, c->p.think, segs), k = -1, starts = 0;
    for (int i = 0; i < nseg && k < 0; i++)
        if (segs[i].special && segs[i].len == 12 && !memcmp(segs[i].text, "<|im_start|>", 12) && ++starts == 2) k = i;
    if (k <= 0) return 0;
    int32_t *t = NULL;
    char e[256];
    int n = kz_chat_tokenize(c->m->tok, segs, k, &t, e, sizeof e);
    int ok = n > 0 && n < n_prompt && !memcmp(t, prompt, (size_t)n * sizeof *t);
    free(t);
    return ok ? n : 0;
}

/* length of the snapshot when it is a proper prefix of prompt (something is left to evaluate:
 * the snapshot has no logits), else 0 */
static int snapshot_usable(const kz_context *c, const int32_t *prompt, int n) {
    if (!c->snap_len || c->snap_ntok <= 0 || c->snap_ntok >= n) return 0;
    return memcmp(c->snap_tok, prompt, (size_t)c->snap_ntok * sizeof *prompt) ? 0 : c->snap_ntok;
}

/* snapshot the current sequence (it holds exactly toks[0..n)); best effort: no snapshot on OOM */
static void snapshot_take(kz_context *c, const int32_t *toks, int n) {
    c->snap_len = 0;
    c->snap_ntok = 0;
    size_t need = kz_state_image_size(c->m, c->seq, 0);
    if (!need) return;
    if (need > c->snap_cap) {
        unsigned char *b = realloc(c->snap, need);
        if (!b) return;
        c->snap = b;
        c->snap_cap = need;
    }
    if (!c->snap_tok && !(c->snap_tok = malloc((size_t)c->p.n_ctx * sizeof *c->snap_tok))) return;
    char e[256];
    /* no checksum: the image never leaves the process */
    size_t w = kz_state_image_write(c->m, c->seq, c->hist, NULL, 0, c->snap, c->snap_cap, NULL, e, sizeof e);
    if (!w) return;
    memcpy(c->snap_tok, toks, (size_t)n * sizeof *toks);
    c->snap_len = w;
    c->snap_ntok = n;
}

/* How many leading tokens of prompt[0..n) the current sequence state already holds and can keep.
 * Only the whole current sequence qualifies (recurrent state cannot be rewound), and when it
 * covers the entire prompt we also need the logits after it. */
static int usable_prefix(const kz_context *c, const int32_t *prompt, int n) {
    int h = c->n_hist;
    if (h == 0 || h > n || kz_seq_n_past(c->seq) != h) return 0;
    if (memcmp(c->hist, prompt, (size_t)h * sizeof *prompt) != 0) return 0;
    if (h == n && !c->logits_valid) return 0;
    return h;
}

/* ---- generation ---- */

void kz_cancel(kz_context *c) {
    if (c) atomic_store(&c->cancel, 1);
}

int kz_ctx_cancelled(kz_context *c) { return atomic_load(&c->cancel) != 0; }

/* token bytes into c->piece; returns length or -1 */
int kz_ctx_token_piece(kz_context *c, int32_t tok) {
    int r = kz_tok_bytes(c->m->tok, tok, c->piece, c->piece_cap);
    if (r >= 0 && (size_t)r > c->piece_cap) {
        char *b = realloc(c->piece, (size_t)r);
        if (!b) return -1;
        c->piece = b;
        c->piece_cap = (size_t)r;
        r = kz_tok_bytes(c->m->tok, tok, c->piece, c->piece_cap);
        if (r < 0 || (size_t)r > c->piece_cap) return -1;
    }
    return r;
}

/* kz_generate (cb: UTF-8 text pieces) and kz_generate_raw (tcb: every token's raw bytes) */
/* raw: user is plain text continued as is (no template, no system block) */
static int generate(kz_context *c, const char *system, const char *user, int raw, int max_tokens,
                    kz_piece_cb cb, kz_token_cb tcb, void *userdata, kz_stats *stats) {
    kz_stats st;
    memset(&st, 0, sizeof st);
    st.stop = KZ_STOP_ERROR;
    if (stats) *stats = st;
    if (!c) return -1;
    kz_ctx_begin(c);
    atomic_store(&c->cancel, 0);

    /* 1. prompt */
    int32_t *prompt = NULL;
    int n_prompt = raw ? raw_prompt(c, user, &prompt) : build_prompt(c, system, user, &prompt);
    if (n_prompt < 0) goto fail;
    if (n_prompt > c->p.n_ctx) {
        kz_ctx_seterr(c, KZ_ERR_CTX_FULL, "prompt is %d tokens, context is %d (raise n_ctx / -c)", n_prompt, c->p.n_ctx);
        goto fail;
    }

    /* 2. prefill, reusing the sequence or the snapshot when it is a prefix of this prompt */
    double t0 = kz_now_ms();
    const int sys_len = raw ? 0 : system_prefix_len(c, system, user, prompt, n_prompt);
    int reused = usable_prefix(c, prompt, n_prompt);
    const int snap = snapshot_usable(c, prompt, n_prompt);
    if (snap > reused) {
        char e[384];
        if (kz_ctx_state_load(c, c->snap, c->snap_len, e, sizeof e) == 0) reused = snap;
        else { reused = 0; c->snap_len = 0; } /* cannot happen (same model, own image); recompute */
    }
    if (reused == 0 && c->n_hist > 0) kz_context_reset(c);
    if (reused == 0 && kz_seq_n_past(c->seq) != 0) kz_context_reset(c);
    st.n_reused = reused;
    const int want_snap = sys_len > reused && snapshot_usable(c, prompt, n_prompt) != sys_len;
    for (int i = reused; i < n_prompt;) {
        if (kz_ctx_cancelled(c)) {
            st.n_prompt = i - reused;
            st.t_prefill_ms = kz_now_ms() - t0;
            st.stop = KZ_STOP_CANCELLED;
            goto done;
        }
        int n = n_prompt - i < c->p.n_batch ? n_prompt - i : c->p.n_batch;
        if (i < sys_len && i + n > sys_len) n = sys_len - i; /* same batches with or without the snapshot */
        int last = i + n == n_prompt;
        c->logits_valid = 0;
        c->logits_argmax = -1;
        kz_seq_set_abort(c->seq, &c->cancel);
        int r = kz_ctx_eval_chunk(c, prompt + i, n, last ? c->logits : NULL, 0);
        kz_seq_set_abort(c->seq, NULL);
        if (r == KZ_FWD_ABORTED) {
            kz_ctx_begin(c); /* a cancel is not an error */
            st.n_prompt = c->n_hist > reused ? c->n_hist - reused : 0;
            st.t_prefill_ms = kz_now_ms() - t0;
            st.stop = KZ_STOP_CANCELLED;
            goto done;
        }
        if (r != 0) {
            st.n_prompt = c->n_hist > reused ? c->n_hist - reused : 0;
            goto fail;
        }
        if (last) c->logits_valid = 1;
        if (last) c->logits_argmax = kz_seq_logits_argmax(c->seq);
        i += n;
        if (i == sys_len && want_snap) snapshot_take(c, prompt, sys_len);
    }
    st.n_prompt = n_prompt - reused;
    st.t_prefill_ms = kz_now_ms() - t0;

    /* 3. decode */
    kz_decode_opts dopt = {.max_tokens = max_tokens, .cb = cb, .tcb = tcb, .ud = userdata};
    kz_decode_run(c, &dopt, &st);
    if (st.stop == KZ_STOP_ERROR) goto fail_keep;

done:
    free(prompt);
    if (stats) *stats = st;
    return 0;

fail:
    st.stop = KZ_STOP_ERROR;
fail_keep:
    if (c->status == KZ_OK) c->status = KZ_ERR_INTERNAL; /* every failure above says why */
    free(prompt);
    if (stats) *stats = st;
    return -1;
}

int kz_generate(kz_context *c, const char *system, const char *user, int max_tokens,
                kz_piece_cb cb, void *userdata, kz_stats *stats) {
    return generate(c, system, user, 0, max_tokens, cb, NULL, userdata, stats);
}

int kz_complete(kz_context *c, const char *text, int max_tokens, kz_piece_cb cb, void *userdata,
                kz_stats *stats) {
    return generate(c, NULL, text, 1, max_tokens, cb, NULL, userdata, stats);
}

int kz_generate_raw(kz_context *c, const char *system, const char *user, int max_tokens,
                    kz_token_cb cb, void *userdata, kz_stats *stats) {
    return generate(c, system, user, 0, max_tokens, NULL, cb, userdata, stats);
}
