/* A sequence: the per-conversation state one model runs on (KV cache, GDN conv + recurrent
 * states, scratch, worker pool), and kz_forward, which appends tokens to it. */
#ifndef KZ_FORWARD_SEQ_H
#define KZ_FORWARD_SEQ_H
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include "model/model.h"
#include "nn/attention.h"

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
    /* the MTP draft cache (NULL when the model has no block or it is off): KV slots
     * [0, n_past - 1) and the trunk hidden at n_past - 1; mtp_ready when they match the
     * sequence (not after a restore without them: kz_seq_mtp_restore) */
    kz_kv_layer *mtp_kv;
    float *mtp_h;               /* [n_embd] */
    int mtp_ready;
} kz_seq_view;
void kz_seq_view_get(kz_seq *s, kz_seq_view *v);
/* Position after the state buffers were filled from a saved state; -1 unless 0 <= n <= n_ctx.
 * The MTP draft cache is cleared (drafting waits for the next forward to give the hidden). */
int kz_seq_set_n_past(kz_seq *s, int n_past);
/* After kz_seq_set_n_past: the view's mtp_kv slots [0, n_past - 1) and mtp_h were restored
 * too, so drafting continues as if the sequence had never left. 0, or -1 (MTP off). */
int kz_seq_mtp_restore(kz_seq *s);
/* Back to the first n_past (<= n_past now) tokens after the caller restored their GDN state (a
 * conversation checkpoint): KV rows and the MTP cache slots before it are this sequence's own
 * and stay; mtp_h: the trunk hidden at n_past - 1 saved with the checkpoint, or NULL (drafting
 * then waits for the next forward). 0, or -1 on a bad n_past. */
int kz_seq_rewind(kz_seq *s, int n_past, const float *mtp_h);
/* Memory budget: the bytes kz_seq_new allocates for these parameters (n_threads: the pool
 * size), without allocating. 0, or -1 on a bad parameter or an overflow. */
typedef struct {
    size_t kv;        /* KV cache, all attention layers, n_ctx rows */
    size_t gdn_state; /* GDN conv + recurrent states (a cancellable prefill adds one copy) */
    size_t arena;     /* activation scratch of one n_batch chunk */
    size_t mm_work;   /* matmul work area */
    size_t attn_cnt;  /* decode attention counters */
} kz_seq_bytes;
int kz_seq_plan_bytes(const kz_model *m, int n_ctx, int n_batch, int n_threads, kz_kv_type kv, kz_seq_bytes *out);
/* Write one byte of every page of the KV cache, the scratch arena and the matmul work area, as
 * a full context and a full prefill chunk would: the resident size of a full context can then
 * be measured without evaluating n_ctx tokens (kazeia bench --cascade). Each byte is written
 * with its own value: the state does not change. */
void kz_seq_touch(kz_seq *s);
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
/* Observer of every matrix multiplication (kazeia imatrix): called on the kz_forward thread with
 * the weight (w->name: its GGUF tensor) and the n f32 rows of w->n_in floats about to enter it.
 * While one is set, one-token steps compute their input before the matmul instead of inside it
 * (slower; the outputs are unchanged). NULL (the default) costs one pointer test per matmul. */
typedef void (*kz_mm_observer)(void *user, const kz_wmat *w, const float *x, int n);
void kz_seq_set_mm_observer(kz_seq *s, kz_mm_observer fn, void *user);
int kz_forward(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, float *logits,
               int want_all, char *err, size_t errlen);
/* kz_argmax of the last logits row the last kz_forward wrote, when it wrote one row (the LM head
 * finds it as it writes the row: greedy decoding skips a scan of n_vocab floats); else -1. */
int64_t kz_seq_logits_argmax(const kz_seq *s);

/* ---- MTP draft head and speculative verification (mtp_layer.c, seq.c) ---- */
#define KZ_SPEC_NMAX 9 /* tokens in one verify batch: the last accepted one + up to 8 drafts */
/* 1 when the model has an MTP block */
int kz_seq_has_mtp(const kz_seq *s);
/* on: every kz_forward also fills the MTP block's KV, so drafting can start after any call.
 * Turning it on needs an empty sequence (0, else -1). */
int kz_seq_mtp_enable(kz_seq *s, int on);
/* the trunk's final-normed hidden at position n_past - 1 (NULL before any token / MTP off) */
const float *kz_seq_mtp_hidden(const kz_seq *s);
/* 1 when a draft can start now: MTP on, and the hidden at n_past - 1 is known (not right after
 * a restore without the MTP cache, until the next forward) */
int kz_seq_mtp_ready(const kz_seq *s);
/* One draft step: the MTP block on (hidden h, token tok) at KV slot `slot` (rope slot + 1);
 * the first draft after n_past tokens uses slot n_past - 1 and kz_seq_mtp_hidden, a chained
 * one the previous step's h_out and slot + 1. Writes n_vocab logits (may be NULL) and h_out
 * (n_embd), returns the argmax. Draft slots beyond n_past - 1 are overwritten by the next fill. */
int32_t kz_seq_mtp_draft(kz_seq *s, const float *h, int32_t tok, int slot, float *logits, float *h_out);
/* Draft steps use only the LM head rows of token ids [0, n) (n rounded up to 64; 0 or >= n_vocab:
 * all): their logits then have that many entries. Returns the rows used. */
int kz_seq_mtp_set_vocab(kz_seq *s, int n);
/* The next kz_forward (n <= KZ_SPEC_NMAX tokens, one chunk) is a verify batch: every row's
 * logits equal those of one-token steps bit for bit, and kz_seq_verify_keep can then drop
 * its tail. 0, or -1 (out of memory for the record: message in err). */
int kz_seq_verify_begin(kz_seq *s, char *err, size_t errlen);
/* Keep the first keep (1..n) tokens of the last verify batch: KV truncated, GDN states
 * restored and replayed over the kept tokens, MTP hidden/slots to match. Callable again
 * with a smaller keep until the next forward. 0, or -1 (no such batch). */
int kz_seq_verify_keep(kz_seq *s, int keep);
#endif
