/* The (gated) attention layer: q/k/v projections, q/k RMSNorm + RoPE, K/V into the cache,
 * causal softmax attention, the sigmoid output gate (qwen35), the output projection.
 * Buffers: s->attn (internal.h). */
#include <math.h>
#include <stdatomic.h>
#include "forward/internal.h"
#include "forward/mm.h"
#include "nn/attention.h"
#include "nn/ops.h"

/* One layer's attention over n tokens at positions p0..: the tasks below share it. */
typedef struct {
    kz_seq *s;
    const kz_layer *ly;
    kz_kv_layer *kv;
    int n, p0;
    int hd, n_head, n_head_kv, n_rep; /* n_rep: q heads per kv head */
    int qh;                 /* floats per q head in b->q: its q, then (gated) its output gate */
    int gated;              /* qwen35: sigmoid output gate */
    float scale;            /* 1 / sqrt(head_dim) */
    int n_split;            /* position splits per (token, kv head) (attn_fn) */
    int prep_first;         /* decode step, verify batch: the prep items run first in attn_fn's dispatch */
    int steps;              /* a verify batch: each token's items split as its own decode step's */
    int step_ns[KZ_SPEC_NMAX];      /* steps: token t's position splits */
    long step_off[KZ_SPEC_NMAX + 1]; /* steps: token t's first item; items of (t, g) are adjacent */
    kz_dyn next;            /* next work item */
    kz_dyn prep_next;
    kz_phase prep_done;
} attn_task;

/* token t's item i: q head i (i < n_head), else kv head i - n_head (k norm + rope, then its K
 * and V rows into the cache) */
static void attn_prep_item(const attn_task *a, long t, int i) {
    const kz_hparams *hp = &a->s->m->hp;
    const kz_attn_bufs *b = &a->s->attn;
    const float *cs = a->s->rope + (size_t)t * hp->n_rot;
    if (i < a->n_head) {
        float *q = b->q + (size_t)t * b->ld_q + (size_t)i * a->qh;
        kz_rmsnorm(q, q, a->ly->q_norm, a->hd, hp->rms_eps);
        kz_rope_neox(q, hp->n_rot, cs);
        return;
    }
    const int g = i - a->n_head;
    float *k = b->k + (size_t)t * b->ld_kv + (size_t)g * a->hd;
    kz_rmsnorm(k, k, a->ly->k_norm, a->hd, hp->rms_eps);
    kz_rope_neox(k, hp->n_rot, cs);
    kz_kv_store_head(a->kv, a->p0 + (int)t, g, k, b->v + (size_t)t * b->ld_kv + (size_t)g * a->hd);
}

/* several tokens: the prep items of a range of tokens per thread */
static void attn_prep_fn(void *arg, int ith, int nth) {
    const attn_task *a = arg;
    long lo, hi;
    kz_split(a->n, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        for (int i = 0; i < a->n_head + a->n_head_kv; i++) attn_prep_item(a, t, i);
}

/* o (one head's output) *= sigmoid(its gate, stored after its q) */
static void attn_gate(const attn_task *a, float *o, const float *q_head) {
    kz_mul_sigmoid(o, q_head + a->hd, a->hd);
}

/* merge the ns position splits of (token t, kv head g), whose partials are items i0.., then
 * the output gate */
static void attn_merge_one(const attn_task *a, int t, int g, int ns, long i0) {
    const kz_attn_bufs *b = &a->s->attn;
    const int hd = a->hd, n_rep = a->n_rep;
    float *o = b->out + (size_t)t * b->ld_out + (size_t)g * n_rep * hd;
    kz_attn_merge(n_rep, hd, ns, b->ml + (size_t)i0 * 2 * n_rep, b->acc + (size_t)i0 * n_rep * hd, o, (size_t)hd);
    if (a->gated)
        for (int r = 0; r < n_rep; r++)
            attn_gate(a, o + (size_t)r * hd, b->q + (size_t)t * b->ld_q + (size_t)(g * n_rep + r) * a->qh);
}

/* item = (token t, kv head g, position split sp): partial softmax of the group's q heads, taken
 * from a shared counter; whoever completes the last split of a (token, kv head) merges it, so
 * the merge needs no second dispatch */
static void attn_fn(void *arg, int ith, int nth) {
    (void)nth;
    attn_task *a = arg;
    const kz_attn_bufs *b = &a->s->attn;
    const int Hkv = a->n_head_kv, n_rep = a->n_rep;
    float *scr = b->part_scr + (size_t)ith * b->part_scr_floats;
    if (a->prep_first) { /* the q heads and kv heads of every token, then (all done: a token reads
                          * the K/V of those before it) the attention items */
        const long per = a->n_head + Hkv, n_prep = (long)a->n * per;
        for (long i; (i = kz_dyn_take(&a->prep_next, 1)) < n_prep;) {
            attn_prep_item(a, i / per, (int)(i % per));
            kz_phase_add(&a->prep_done, 1);
        }
        kz_phase_wait(&a->prep_done, n_prep);
    }
    const long n_items = a->steps ? a->step_off[a->n] : (long)a->n * Hkv * a->n_split;
    for (long it; (it = kz_dyn_take(&a->next, 1)) < n_items;) {
        int t = 0, ns = a->n_split;
        long i0 = 0; /* first item of token t */
        if (a->steps) {
            while (it >= a->step_off[t + 1]) t++;
            ns = a->step_ns[t];
            i0 = a->step_off[t];
        } else {
            t = (int)(it / ((long)Hkv * ns));
            i0 = (long)t * Hkv * ns;
        }
        const int rem = (int)(it - i0), g = rem / ns, sp = rem % ns;
        const int total = a->p0 + t + 1, len = (total + ns - 1) / ns;
        const int lo = sp * len, hi = lo + len < total ? lo + len : total;
        const float *q = b->q + (size_t)t * b->ld_q + (size_t)g * n_rep * a->qh;
        kz_attn_partial(a->kv, g, lo, hi, q, (size_t)a->qh, a->scale, b->ml + (size_t)it * 2 * n_rep,
                        b->acc + (size_t)it * n_rep * a->hd, scr);
        /* acq_rel: the last one sees the other splits' partials */
        if (ns == 1 || atomic_fetch_add_explicit(&b->cnt[t * Hkv + g], 1, memory_order_acq_rel) == ns - 1)
            attn_merge_one(a, t, g, ns, i0 + (long)g * ns);
    }
}

/* prefill: item = (query block of KZ_ATTN_BQ tokens, kv head g), tiled attention + output gate */
static void attn_tile_fn(void *arg, int ith, int nth) {
    (void)nth;
    attn_task *a = arg;
    const kz_attn_bufs *b = &a->s->attn;
    const int Hkv = a->n_head_kv, nblk = (a->n + KZ_ATTN_BQ - 1) / KZ_ATTN_BQ;
    float *scr = b->tile_scr + (size_t)ith * b->tile_scr_floats;
    const long n_items = (long)nblk * Hkv;
    /* shared counter, last blocks (the most positions) first */
    for (long k; (k = kz_dyn_take(&a->next, 1)) < n_items;) {
        const long it = n_items - 1 - k;
        const int blk = (int)(it / Hkv), g = (int)(it % Hkv), t0 = blk * KZ_ATTN_BQ;
        const int nt = a->n - t0 < KZ_ATTN_BQ ? a->n - t0 : KZ_ATTN_BQ;
        const float *q = b->q + (size_t)t0 * b->ld_q + (size_t)g * a->n_rep * a->qh;
        float *o = b->out + (size_t)t0 * b->ld_out + (size_t)g * a->n_rep * a->hd;
        kz_attn_tile(a->kv, g, a->p0 + t0, nt, q, b->ld_q, (size_t)a->qh, a->scale, o, b->ld_out, scr);
        if (a->gated)
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < a->n_rep; r++)
                    attn_gate(a, o + (size_t)t * b->ld_out + (size_t)r * a->hd,
                              q + (size_t)t * b->ld_q + (size_t)r * a->qh);
    }
}

/* Position splits per (token, kv head) for a batch of n tokens at p0: a decode step has too
 * few items for all threads, so its positions are split too (>= 256 per split). Sizes only,
 * not the thread count, decide it: results are the same for any -t. */
static int attn_splits(int n, int n_head_kv, int p0) {
    const long items = (long)n * n_head_kv;
    if (items >= KZ_ATTN_MIN_ITEMS) return 1;
    int n_split = (int)((KZ_ATTN_MIN_ITEMS + items - 1) / items);
    const int by_len = (p0 + n + 255) / 256;
    if (n_split > by_len) n_split = by_len;
    return n_split < 1 ? 1 : n_split;
}

void kz_attn_layer(kz_seq *s, const kz_layer *ly, int n, int p0, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    kz_attn_bufs *b = &s->attn;
    const kz_wmat *w[] = {&ly->wq, &ly->wk, &ly->wv};
    float *y[] = {b->q, b->k, b->v};
    const size_t ld[] = {b->ld_q, b->ld_kv, b->ld_kv};
    mm_group(s, w, 3, s->hn, n, y, ld, pre);
    prof(s, KZ_PROF_ATTN_PROJ);

    const int hd = hp->head_dim, gated = hp->arch == KZ_ARCH_QWEN35;
    attn_task at = {.s = s, .ly = ly, .kv = &s->kv[ly->state_idx], .n = n, .p0 = p0, .hd = hd,
                    .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .n_rep = hp->n_head / hp->n_head_kv,
                    .qh = gated ? 2 * hd : hd, .gated = gated, .scale = 1.0f / sqrtf((float)hd)};
    if (n > 1 && s->spec_rec) {
        /* a verify batch: each token attends as its own decode step would (same position
         * splits, same merge order), so its logits are those of plain decoding bit for bit;
         * all of it (prep included) in one dispatch, as a decode step */
        at.steps = at.prep_first = 1;
        for (int t = 0; t < n; t++) {
            at.step_ns[t] = attn_splits(1, hp->n_head_kv, p0 + t);
            at.step_off[t + 1] = at.step_off[t] + (long)hp->n_head_kv * at.step_ns[t];
        }
        for (long i = 0; i < (long)n * hp->n_head_kv; i++) atomic_init(&b->cnt[i], 0);
        run_task(s, attn_fn, &at);
    } else if (n > 1 && n >= KZ_ATTN_TILE_MIN && b->tile_scr) {
        run_task(s, attn_prep_fn, &at);
        at.n_split = 1;
        run_task(s, attn_tile_fn, &at);
    } else {
        if (n > 1) run_task(s, attn_prep_fn, &at); /* one token: in the attention's dispatch */
        at.n_split = attn_splits(n, hp->n_head_kv, p0);
        at.prep_first = n == 1;
        for (long i = 0; i < (long)n * hp->n_head_kv; i++) atomic_init(&b->cnt[i], 0);
        run_task(s, attn_fn, &at); /* partials + merges + output gate */
    }
    prof(s, KZ_PROF_ATTN);
    mm(s, &ly->wo, b->out, n, s->out, (size_t)hp->n_embd);
    prof(s, KZ_PROF_ATTN_PROJ);
}

/* the K/V items of one token range per thread (kv heads of every token) */
static void attn_kv_fn(void *arg, int ith, int nth) {
    const attn_task *a = arg;
    long lo, hi;
    kz_split((long)a->n * a->n_head_kv, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) attn_prep_item(a, i / a->n_head_kv, a->n_head + (int)(i % a->n_head_kv));
}

void kz_attn_kv_layer(kz_seq *s, const kz_layer *ly, int n, int p0, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    kz_attn_bufs *b = &s->attn;
    const kz_wmat *w[] = {&ly->wk, &ly->wv};
    float *y[] = {b->k, b->v};
    const size_t ld[] = {b->ld_kv, b->ld_kv};
    mm_group(s, w, 2, s->hn, n, y, ld, pre);
    const int hd = hp->head_dim;
    attn_task at = {.s = s, .ly = ly, .kv = &s->kv[ly->state_idx], .n = n, .p0 = p0, .hd = hd,
                    .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .n_rep = hp->n_head / hp->n_head_kv,
                    .qh = 2 * hd, .gated = 1, .scale = 1.0f / sqrtf((float)hd)};
    run_task(s, attn_kv_fn, &at);
    prof(s, KZ_PROF_ATTN);
}
