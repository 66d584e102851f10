/* The context's insides, shared by the files of src/api/ that implement kazeia.h (api.c: contexts,
 * eval, state, kz_generate; decode.c: the decode loop; chat_api.c: conversations; speculative.c:
 * MTP drafts and verify). Not installed. */
#ifndef KZ_API_CONTEXT_H
#define KZ_API_CONTEXT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "kazeia.h"
#include "api/sample.h"
#include "forward/seq.h"
#include "model/model.h"

struct kz_spec; /* speculative.c */

struct kz_context {
    kz_model *m;
    kz_seq *seq;
    kz_context_params p; /* as given, with n_ctx, n_batch and n_threads resolved */
    int n_vocab;
    kz_sampler *smp;
    int32_t *hist;      /* n_ctx: tokens in the sequence state */
    int n_hist;
    float *logits;      /* n_vocab: logits after hist[n_hist-1] when logits_valid */
    int logits_valid;
    int64_t logits_argmax; /* kz_argmax of logits when the forward that wrote them found it, else -1 */
    char *piece;        /* token bytes scratch */
    size_t piece_cap;
    atomic_int cancel;
    /* prefix snapshot: state image after snap_tok[0..snap_ntok) (the last system block) */
    unsigned char *snap;
    size_t snap_cap, snap_len;
    int32_t *snap_tok;
    int snap_ntok;
    char err[512];      /* the last call's message and status ("" and KZ_OK after a success) */
    kz_status status;
    struct kz_spec *spec; /* MTP speculative decoding (speculative.c); NULL: not set up yet */
};

/* error plumbing: every public call starts with kz_ctx_begin and fails through kz_ctx_seterr */
void kz_ctx_seterr(kz_context *c, kz_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kz_ctx_begin(kz_context *c);
kz_sampler_params kz_ctx_sampler_params(const kz_context_params *p);
/* Append toks[0..n) through kz_forward, keeping hist in step with the sequence even when the
 * forward fails part-way. 0, -1 (error set) or KZ_FWD_ABORTED (the chunks before the cancelled
 * one went in). The caller sets logits_valid / logits_argmax. */
int kz_ctx_eval_chunk(kz_context *c, const int32_t *toks, int n, float *logits, int want_all);
int kz_ctx_cancelled(kz_context *c);
/* bytes of token tok into c->piece; length or -1 */
int kz_ctx_token_piece(kz_context *c, int32_t tok);
/* restore a state image (sequence, history, logits); on error nothing changes */
int kz_ctx_state_load(kz_context *c, const void *buf, size_t len, char *e, size_t elen);

/* ---- the decode loop (decode.c), shared by kz_generate and kz_chat_reply ---- */
typedef struct {
    int max_tokens;               /* <= 0: until end of turn or a full context */
    const kz_sampler_params *sp;  /* sampling for this call (NULL: the context's), seeded with sp->seed */
    const char *const *stop;      /* n_stop stop strings: the text ends before the first one produced */
    int n_stop;
    kz_piece_cb cb;               /* text as it is produced (never a stop string or a part of one) */
    kz_token_cb tcb;              /* instead of cb: every token's id and raw bytes (no stop strings) */
    void *ud;
} kz_decode_opts;
/* Samples from the context's current logits and evaluates each sampled token until end of turn,
 * max_tokens, a stop string, a full context, a cancel or an error. Fills st->n_gen, st->stop and
 * st->t_decode_ms. Requires valid logits. Returns 0, or -1 on error (st->stop = KZ_STOP_ERROR). */
int kz_decode_run(kz_context *c, const kz_decode_opts *o, kz_stats *st);

/* speculative.c: the decode loop's step for token tok (appends it to the sequence, leaves the
 * logits after it in c->logits); 1 = not speculating (the caller evaluates tok itself). */
int kz_spec_decode(kz_context *c, int32_t tok);
/* speculative.c: after the decode loop, drop verified tokens the loop did not take */
void kz_spec_end(kz_context *c);
void kz_spec_free(struct kz_spec *sp);
/* Tests: drafts from fn instead of the MTP block (the i-th draft after token tok, which follows
 * hist[0..n_hist)), so the verify/accept path runs at any acceptance rate. NULL: the MTP block. */
typedef int32_t (*kz_spec_oracle)(void *ud, const int32_t *hist, int n_hist, int32_t tok, int i);
int kz_spec_set_oracle(kz_context *c, kz_spec_oracle fn, void *ud);
/* Tests: the adaptive rule's costs relative to a plain step given instead of timed: a draft
 * step, and verify[i] for a verify of i = 1..n tokens (verify[1] = 1; longer ones cost verify[n]).
 * verify NULL: timed again. */
int kz_spec_set_costs(kz_context *c, double draft, const double *verify, int n);
#endif
