/* Inside the forward pass: the sequence's fields, its named scratch buffers, and what the
 * layer files share (dispatch, profiling, the cancel check). Not for callers outside
 * src/forward (they use forward/seq.h). */
#ifndef KZ_FORWARD_INTERNAL_H
#define KZ_FORWARD_INTERNAL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "forward/seq.h"
#include "nn/attention.h"
#include "sys/threadpool.h"
#include "sys/clock.h"

/* plain steps whose MTP KV slots may wait for one batched fill (kz_mtp_flush) */
#define KZ_MTP_PEND_MAX 64

/* attention work items wanted per layer before positions get split (>= typical thread counts) */
#define KZ_ATTN_MIN_ITEMS 16
/* batches of at least this many tokens use the tiled attention (kz_attn_tile); the choice
 * depends on sizes only, so results never depend on the thread count */
#define KZ_ATTN_TILE_MIN 16

/* Scratch of one chunk of up to n_batch (B) tokens, one row per token. The layer views
 * (attn, gdn, ffn) share one region of the arena: layers run one at a time, and nothing in
 * them outlives its layer. Planned once by plan_scratch (seq.c), which sizes every buffer. */
typedef struct {
    float *q;               /* [B][ld_q]: per head its q (qwen35: then its output gate) */
    float *k, *v;           /* [B][ld_kv] */
    float *out;             /* [B][ld_out] attention output (gated), the input of wo */
    size_t ld_q, ld_kv, ld_out;
    float *ml, *acc;        /* decode partial softmaxes: [max_items][2 n_rep], [max_items][n_rep hd] */
    atomic_int *cnt;        /* [max_items] position splits done per (token, kv head) */
    size_t max_items;
    float *part_scr;        /* kz_attn_partial scratch, part_scr_floats per thread */
    float *tile_scr;        /* kz_attn_tile scratch, tile_scr_floats per thread; NULL if B < KZ_ATTN_TILE_MIN */
    size_t part_scr_floats, tile_scr_floats;
} kz_attn_bufs;

typedef struct {
    float *qkv;             /* [B][ld_qkv] projection: the conv's input */
    float *conv;            /* [B][ld_qkv] conv + SiLU: [q heads | k heads | v heads], q/k L2-normed */
    float *z;               /* [B][ld_z] output gate of the gated norm */
    float *beta, *alpha;    /* [B][n_v_heads] projections; in place after the gates: beta, g */
    float *core;            /* [B][ld_z] delta rule output, then gated-normed (the input of wssm_out) */
    size_t ld_qkv, ld_z, ld_gate;
    float *chunk_scr;       /* kz_gdn_chunked scratch, chunk_scr_floats per thread */
    size_t chunk_scr_floats;
} kz_gdn_bufs;

typedef struct {
    float *gate, *up;       /* [B][ld]; the SwiGLU runs in place into gate */
    size_t ld;
} kz_ffn_bufs;

struct kz_seq {
    const kz_model *m;
    int n_ctx, n_batch, n_past, nth;
    kz_kv_type kv_type;
    kz_pool *pool;
    kz_kv_layer *kv;        /* [n_attn_layers] */
    void *kv_mem;
    float *conv_state;      /* [n_gdn][conv_dim][d_conv-1] raw inputs, oldest first */
    float *ssm_state;       /* [n_gdn][H_v][dv][dk] */
    size_t conv_per_layer, ssm_per_layer;
    /* the scratch arena and its views */
    float *arena;
    float *x;               /* [B][n_embd] residual stream */
    float *hn;              /* [B][n_embd] normed x, the input of the layer's matmuls */
    float *out;             /* [B][n_embd] the layer's output, added into x by the next norm */
    float *rope;            /* [B][n_rot] cos/sin table of each token's position */
    kz_attn_bufs attn;
    kz_gdn_bufs gdn;
    kz_ffn_bufs ffn;
    void *mm_work;          /* matmul work area (mm_work_bytes) */
    unsigned char *rope_use_pos;
    int64_t logits_argmax;  /* kz_seq_logits_argmax */
    /* cancel */
    const atomic_int *abort_flag;  /* non-NULL: prefill chunks stop when it becomes non-zero */
    const atomic_int *chunk_abort; /* abort_flag while an abortable chunk runs, else NULL */
    float *state_bak;       /* GDN conv + ssm state before the current chunk, same layout */
    int n_gdn_saved;        /* GDN layers (in state_idx order) whose state state_bak holds */
    kz_mm_observer observe; /* kz_seq_set_mm_observer; NULL: none */
    void *observe_user;
    /* MTP draft head (mtp_layer.c): with mtp_on every forward also fills its KV (slot s holds
     * the pair (trunk hidden at s, token s+1), rope position s+1) */
    int mtp_on;
    int mtp_n;              /* MTP KV slots filled (+ mtp_pend waiting): n_past - 1 once it has tokens */
    /* plain one-token steps defer their MTP KV slot: (hidden, token) pairs wait here and are
     * filled as one batch (kz_mtp_flush) before anything reads the MTP KV, or when it is full;
     * a model decoding without drafts then pays no per-step MTP work */
    float *mtp_pend_h;      /* [mtp_pend_max][n_embd] trunk hiddens of slots mtp_n .. */
    int32_t *mtp_pend_tok;  /* [mtp_pend_max] the tokens paired with them */
    int mtp_pend, mtp_pend_max; /* min(n_batch, KZ_MTP_PEND_MAX) */
    float *mtp_h;           /* [n_embd] trunk hidden after the final norm at position n_past - 1 */
    float *hfin;            /* [B][n_embd] the chunk's final-normed hiddens (mtp_on) */
    float *mtp_cat;         /* [B][2 n_embd] eh_proj input, embedding half first */
    int mtp_vocab;          /* 0: drafts use the whole LM head, else its first mtp_vocab rows */
    /* verify batch (kz_seq_verify_begin): per-token numerics identical to one-token steps, and
     * what kz_seq_verify_keep needs to keep only a prefix of it */
    int spec_rec;           /* the next forward chunk is a verify batch */
    int rec_valid, rec_n, rec_p0, rec_mtp_n;
    float *rec_state;       /* GDN conv + ssm state before the batch (state layout): the second
                             * state buffer, swapped with conv_state per verify */
    float *rec_qkv, *rec_conv, *rec_g, *rec_beta; /* [n_gdn][KZ_SPEC_NMAX][conv_dim | conv_dim | H_v | H_v] */
    float *rec_h;           /* [KZ_SPEC_NMAX][n_embd] final-normed hiddens of the batch */
    float *rec_scr;         /* [KZ_SPEC_NMAX][d_inner] replay output scratch */
    /* profiling */
    int prof_on;
    double prof_t;          /* clock at the end of the last profiled part */
    kz_profile prof;
};

/* ---- appending and cancel (seq.c) ---- */

/* The sequence's invariants for appending tokens[0..n) (ids in range, room in n_ctx), and
 * the cancel copy of the GDN states a cancellable prefill needs. 0, or -1 with err set. */
int kz_seq_check_append(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, char *err, size_t errlen);

/* Once an abortable chunk sees the flag, every remaining op is skipped (its outputs are
 * dropped with the chunk), so the wait for a cancel is at most the op running at that moment. */
static inline int seq_aborted(const kz_seq *s) {
    return s->chunk_abort && atomic_load(s->chunk_abort);
}
/* Start a chunk of n tokens: abortable when a flag is set and n > 1 (decode steps are not
 * split: a cancel waits for at most one of them). */
void kz_seq_chunk_begin(kz_seq *s, int n);
/* Before GDN layer idx changes its state in an abortable chunk: keep a copy. */
void kz_seq_gdn_save(kz_seq *s, int idx);
/* End of the chunk. Returns 0, or 1 when it was cancelled: the GDN states are restored and
 * the KV rows it wrote are past n_past, so the sequence is as before the chunk. */
int kz_seq_chunk_end(kz_seq *s);

/* ---- dispatch and profiling ---- */

static inline void run_task(kz_seq *s, kz_task_fn fn, void *arg) {
    if (seq_aborted(s)) return;
    kz_pool_run(s->pool, fn, arg);
}

/* the time since the previous mark goes to part (caller thread only) */
static inline void prof(kz_seq *s, int part) {
    if (!s->prof_on) return;
    const double t = kz_now_ms();
    s->prof.ms[part] += t - s->prof_t;
    s->prof_t = t;
}

/* ---- layers: read s->hn (or normalise into it through pre), write s->out ---- */
void kz_attn_layer(kz_seq *s, const kz_layer *ly, int n, int p0, const kz_mm_pre *pre);
void kz_gdn_layer(kz_seq *s, const kz_layer *ly, int n, const kz_mm_pre *pre);
void kz_ffn_layer(kz_seq *s, const kz_layer *ly, int n, const kz_mm_pre *pre);
/* only the K/V rows of n tokens at positions p0.. into the layer's cache (the MTP fill) */
void kz_attn_kv_layer(kz_seq *s, const kz_layer *ly, int n, int p0, const kz_mm_pre *pre);
/* MTP fill after a trunk chunk of tok[0..n) at p0 whose final-normed hiddens are in s->hfin
 * (mtp_layer.c) */
void kz_mtp_fill(kz_seq *s, const int32_t *tok, int n, int p0);
/* the deferred MTP KV slots filled now (a no-op when none wait) */
void kz_mtp_flush(kz_seq *s);
/* zero the MTP block's K/V rows [0, n): slots no fill wrote (a restored state) read as
 * neutral instead of stale or uninitialised (verify.c) */
void kz_seq_mtp_kv_clear(kz_seq *s, int n);
/* GDN layer idx's rows of a verify batch into the record: conv channels [c0, c1) (raw and
 * convolved + normed), and with gates the gates (gdn_layer.c, right after computing them) */
void kz_seq_rec_gdn(kz_seq *s, int idx, int n, int c0, int c1, int gates);
/* swaps the live GDN state buffer (conv_state / ssm_state) with rec_state */
void kz_seq_verify_swap(kz_seq *s);
#endif
