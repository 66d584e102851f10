/* The context's fields, shared by api.c and the decoders beside it (speculative.c). Internal. */
#ifndef KZ_API_CONTEXT_H
#define KZ_API_CONTEXT_H
#include <stdatomic.h>
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
#endif
