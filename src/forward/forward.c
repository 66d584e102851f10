/* The forward pass: token embedding, then per layer norm -> Gated DeltaNet or attention ->
 * residual -> norm -> FFN -> residual, then the final norm and the LM head. Prefill runs
 * chunks of up to n_batch tokens through each layer together (matmuls over the chunk).
 * The layers are in attention_layer.c, gdn_layer.c and ffn.c; the state in seq.c. */
#include <stdint.h>
#include <string.h>
#include "forward/internal.h"
#include "forward/mm.h"
#include "nn/ops.h"
#include "sys/err.h"

/* ---------------- norms (each fused with the residual add before it) ---------------- */

typedef struct {
    float *src;
    const float *add; /* non-NULL: src += add first (the residual add fused into the norm) */
    float *dst;
    const float *w;
    int n, rows;
    float eps;
} norm_task;

static void norm_fn(void *arg, int ith, int nth) {
    const norm_task *a = arg;
    long lo, hi;
    kz_split(a->rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *x = a->src + (size_t)r * a->n, *y = a->dst + (size_t)r * a->n;
        if (a->add) kz_add_rmsnorm(x, a->add + (size_t)r * a->n, y, a->w, a->n, a->eps);
        else kz_rmsnorm(y, x, a->w, a->n, a->eps);
    }
}

/* A norm of a few rows handed to the dispatch of the matmul group that reads its output
 * (kz_mm_pre: the caller runs it there while the other threads prefetch their first weights,
 * instead of alone before the dispatch while they wait; with no other threads it runs first) */
typedef struct {
    kz_seq *s;
    norm_task t;
    kz_mm_pre pre;
} norm_pre;
static void norm_pre_fn(void *arg) {
    norm_pre *p = arg;
    norm_fn(&p->t, 0, 1);
    prof(p->s, KZ_PROF_NORM);
}

/* dst = rmsnorm(src += add (when add is not NULL)) for rows of n floats. Up to KZ_MM_PRE_ROWS
 * rows (a decode step, a verify batch) are returned as np->pre for the next matmul group to run;
 * more run here, on the pool (NULL returned).
 * A cancelled chunk skips it: its outputs are dropped. */
static const kz_mm_pre *norm(kz_seq *s, norm_pre *np, float *src, const float *add, float *dst,
                             const float *w, int n, int rows) {
    *np = (norm_pre){s, {src, add, dst, w, n, rows, s->m->hp.rms_eps}, {norm_pre_fn, np}};
    if (seq_aborted(s)) return NULL;
    if (rows <= KZ_MM_PRE_ROWS) return &np->pre;
    run_task(s, norm_fn, &np->t);
    prof(s, KZ_PROF_NORM);
    return NULL;
}

/* ---------------- the layer loop ---------------- */

static void embed(kz_seq *s, const int32_t *tok, int n, int p0) {
    const kz_model *m = s->m;
    const kz_hparams *hp = &m->hp;
    const int E = hp->n_embd;
    for (int t = 0; t < n; t++)
        kz_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tok[t] * m->tok_embd.row_bytes,
                       s->x + (size_t)t * E, E);
    if (hp->n_attn_layers)
        for (int t = 0; t < n; t++)
            kz_rope_table(s->rope + (size_t)t * hp->n_rot, hp->n_rot, p0 + t, hp->rope_base,
                          hp->arch == KZ_ARCH_QWEN35 ? s->rope_use_pos : NULL);
    prof(s, KZ_PROF_EMBED);
}

/* The final norm (with the last layer's residual add) and the LM head, for rows [lrow0, n)
 * only: x dies with the chunk. One row brings its argmax along (greedy decoding). */
static void lm_head(kz_seq *s, int n, int lrow0, float *lout) {
    const kz_model *m = s->m;
    const int E = m->hp.n_embd, nr = n - lrow0;
    norm_pre np;
    const kz_mm_pre *pre = norm(s, &np, s->x + (size_t)lrow0 * E, m->hp.n_layer > 0 ? s->out + (size_t)lrow0 * E : NULL,
                                s->hn, m->output_norm, E, nr);
    if (nr == 1 && !seq_aborted(s)) {
        s->logits_argmax = mm_argmax(s, &m->output, s->hn, lout, pre);
    } else {
        if (pre) pre->fn(pre->arg);
        mm(s, &m->output, s->hn, nr, lout, (size_t)m->hp.n_vocab);
    }
    prof(s, KZ_PROF_HEAD);
}

/* With the MTP block on: the final norm of every row into s->hfin (the MTP's input), then
 * the LM head on rows [lrow0, n) of it. The same norm and matmul as lm_head: the same bits. */
static void lm_head_all(kz_seq *s, int n, int lrow0, float *lout) {
    const kz_model *m = s->m;
    const int E = m->hp.n_embd, nr = n - lrow0;
    norm_pre np;
    const kz_mm_pre *pre = norm(s, &np, s->x, m->hp.n_layer > 0 ? s->out : NULL, s->hfin, m->output_norm, E, n);
    if (pre) pre->fn(pre->arg);
    if (!lout || nr <= 0 || seq_aborted(s)) return;
    if (nr == 1)
        s->logits_argmax = mm_argmax(s, &m->output, s->hfin + (size_t)lrow0 * E, lout, NULL);
    else
        mm(s, &m->output, s->hfin + (size_t)lrow0 * E, nr, lout, (size_t)m->hp.n_vocab);
    prof(s, KZ_PROF_HEAD);
}

/* One chunk of n <= n_batch tokens at positions p0..; logits rows [lrow0, n) -> lout.
 * Returns 0, or 1 when the abort flag stopped it (state as before the chunk). */
static int forward_chunk(kz_seq *s, const int32_t *tok, int n, int p0, float *lout, int lrow0) {
    const kz_model *m = s->m;
    const int E = m->hp.n_embd;
    norm_pre np;
    const kz_mm_pre *pre;
    embed(s, tok, n, p0);
    kz_seq_chunk_begin(s, n);
    /* each residual add (x += out) runs fused into the norm after it */
    for (int il = 0; il < m->hp.n_layer; il++) {
        const kz_layer *ly = &m->layers[il];
        /* a cancel is seen between the parts of a layer; the ops it skips are dropped anyway */
        if (seq_aborted(s)) return kz_seq_chunk_end(s);
        pre = norm(s, &np, s->x, il > 0 ? s->out : NULL, s->hn, ly->attn_norm, E, n);
        if (ly->is_gdn) {
            kz_seq_gdn_save(s, ly->state_idx);
            kz_gdn_layer(s, ly, n, pre);
        } else {
            kz_attn_layer(s, ly, n, p0, pre);
        }
        if (seq_aborted(s)) return kz_seq_chunk_end(s);
        pre = norm(s, &np, s->x, s->out, s->hn, ly->post_norm, E, n);
        kz_ffn_layer(s, ly, n, pre);
    }
    if (s->mtp_on) {
        lm_head_all(s, n, lrow0, lout);
        if (!seq_aborted(s)) {
            if (s->spec_rec) memcpy(s->rec_h, s->hfin, (size_t)n * E * sizeof(float));
            kz_mtp_fill(s, tok, n, p0);
        }
    } else if (lout && lrow0 < n) {
        lm_head(s, n, lrow0, lout);
    }
    return kz_seq_chunk_end(s); /* a cancel during the LM head: its logits were skipped */
}

int kz_forward(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, float *logits,
               int want_all, char *err, size_t errlen) {
    if (kz_seq_check_append(m, s, tokens, n, err, errlen)) {
        if (s && s->m == m) s->spec_rec = 0; /* a refused verify batch leaves no verify mode behind */
        return -1;
    }
    s->logits_argmax = -1;
    if (s->prof_on) {
        s->prof_t = kz_now_ms();
        s->prof.tokens += n;
        s->prof.calls++;
    }
    if (s->spec_rec) { /* a verify batch: one chunk, the state before it kept for verify_keep */
        if (n > KZ_SPEC_NMAX || n > s->n_batch) {
            s->spec_rec = 0;
            kz_seterr(err, errlen, "verify batch of %d tokens (at most %d and n_batch %d)", n, KZ_SPEC_NMAX, s->n_batch);
            return -1;
        }
        /* the GDN state before it becomes s->rec_state, which the batch reads (gdn_layer.c) */
        if (s->conv_state) kz_seq_verify_swap(s);
        s->rec_p0 = s->n_past;
        s->rec_n = n;
        s->rec_mtp_n = s->mtp_n;
    }
    s->rec_valid = 0;
    for (int i0 = 0; i0 < n; i0 += s->n_batch) {
        const int nb = n - i0 < s->n_batch ? n - i0 : s->n_batch;
        float *lout = NULL;
        int lrow0 = nb;
        if (logits) {
            if (want_all) { lout = logits + (size_t)i0 * m->hp.n_vocab; lrow0 = 0; }
            else if (i0 + nb == n) { lout = logits; lrow0 = nb - 1; }
        }
        if (forward_chunk(s, tokens + i0, nb, s->n_past, lout, lrow0)) {
            kz_seterr(err, errlen, "cancelled after %d of %d tokens", i0, n);
            if (s->spec_rec && s->conv_state) kz_seq_verify_swap(s); /* the old buffer is untouched */
            s->spec_rec = 0;
            return KZ_FWD_ABORTED;
        }
        s->n_past += nb;
    }
    s->rec_valid = s->spec_rec;
    s->spec_rec = 0;
    return 0;
}
