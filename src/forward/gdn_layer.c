/* The Gated DeltaNet layer: qkv / z / beta / alpha projections, causal conv + SiLU, q/k L2
 * norms, gates, the delta rule (chunkwise for >= 2 tokens, the exact recurrent form for one),
 * the gated RMSNorm, the output projection. Buffers: s->gdn (internal.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "forward/internal.h"
#include "forward/mm.h"
#include "nn/gdn.h"
#include "nn/ops.h"

typedef struct {
    kz_seq *s;
    const kz_layer *ly;
    float *conv_state, *ssm_state;
    /* a verify batch: this layer's state before the batch, in the other of the two state buffers
     * (kz_seq_verify_swap): the batch reads it and writes the live one, so it stays as rollback's
     * snapshot without a copy; NULL otherwise */
    const float *old_conv, *old_ssm;
    int n;
    int n_runs; /* work items (conv units, value heads) in one run per thread */
    kz_run run[KZ_RUNS_MAX];
    kz_run run2[KZ_RUNS_MAX]; /* one dispatch (gdn_step_fn): the value heads' runs */
    long in_units;            /* conv units: q and k heads, then v heads */
    kz_phase in_done;         /* one dispatch: conv units + the gates finished */
} gdn_task;

/* conv + SiLU, then the q/k head L2 norms, of conv units [lo, hi): whole heads of the conv
 * channels [q heads | k heads | v heads], so a thread normalises the q/k heads it just convolved
 * (elementwise per head: the same bits as separate passes) */
static void gdn_in_units(const gdn_task *a, long lo, long hi) {
    const kz_hparams *hp = &a->s->m->hp;
    const kz_gdn_bufs *b = &a->s->gdn;
    const int hk = hp->ssm_n_k_heads, dk = hp->ssm_d_state, dv = hp->ssm_head_v_dim;
    const long qk = 2L * hk;
    const long c0 = lo <= qk ? lo * dk : qk * dk + (lo - qk) * dv;
    const long c1 = hi <= qk ? hi * dk : qk * dk + (hi - qk) * dv;
    if (a->old_conv) { /* small: the conv then updates the live copy in place */
        const size_t K1 = (size_t)hp->ssm_d_conv - 1;
        memcpy(a->conv_state + (size_t)c0 * K1, a->old_conv + (size_t)c0 * K1, (size_t)(c1 - c0) * K1 * sizeof(float));
    }
    if (a->s->spec_rec) /* a verify batch: decode's one-token conv per token (the blocked one's
                         * transposed copies cost more than the conv for 2-4 tokens) */
        for (int t = 0; t < a->n; t++)
            kz_gdn_conv((int)c0, (int)c1, 1, hp->ssm_d_conv, b->qkv + (size_t)t * b->ld_qkv, b->ld_qkv,
                        b->conv + (size_t)t * b->ld_qkv, b->ld_qkv, a->ly->conv1d, a->conv_state);
    else
        kz_gdn_conv((int)c0, (int)c1, a->n, hp->ssm_d_conv, b->qkv, b->ld_qkv, b->conv, b->ld_qkv, a->ly->conv1d,
                    a->conv_state);
    const float qs = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < a->n; t++) {
        float *row = b->conv + (size_t)t * b->ld_qkv;
        for (long u = lo; u < hi && u < qk; u++) {
            float *h = row + (size_t)u * dk;
            kz_l2norm(h, dk, hp->rms_eps);
            if (u < hk) kz_scale(h, dk, qs); /* q heads */
        }
    }
    if (a->s->spec_rec) kz_seq_rec_gdn(a->s, a->ly->state_idx, a->n, (int)c0, (int)c1, 0); /* while in cache */
}

/* items [0, n) in one run per thread (threadpool.h), set before the dispatch publishes them */
static void gdn_runs_set(gdn_task *a, long n, int nth) {
    a->n_runs = nth < KZ_RUNS_MAX ? nth : KZ_RUNS_MAX;
    kz_runs_split(a->run, a->n_runs, n);
}

/* conv units (q heads, k heads: dk channels each; v heads: dv) in runs of adjacent channels per
 * thread, a quarter of what is left at a time; thread 0 also computes the gates. With done, each
 * finished unit (and the gates, as one more) is counted there. */
static void gdn_in_part(gdn_task *a, int ith, kz_phase *done) {
    const kz_gdn_bufs *b = &a->s->gdn;
    const int Hv = a->s->m->hp.ssm_n_v_heads;
    int k = 0;
    int64_t c0, c1;
    while (kz_runs_next(a->run, a->n_runs, ith, 4, &k, &c0, &c1)) {
        gdn_in_units(a, (long)c0, (long)c1);
        if (done) kz_phase_add(done, (long)(c1 - c0));
    }
    if (ith == 0) {
        for (int t = 0; t < a->n; t++) {
            float *beta = b->beta + (size_t)t * b->ld_gate, *alpha = b->alpha + (size_t)t * b->ld_gate;
            kz_gdn_gates(Hv, beta, alpha, a->ly->dt_bias, a->ly->ssm_a, beta, alpha); /* in place: alpha -> g */
        }
        if (a->s->spec_rec) kz_seq_rec_gdn(a->s, a->ly->state_idx, a->n, 0, 0, 1);
        if (done) kz_phase_add(done, 1);
    }
}
static void gdn_in_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_in_part(arg, ith, NULL);
}

/* the delta rule for value head j, then the gated RMSNorm of its outputs */
static void gdn_core_head(const gdn_task *a, int ith, int j) {
    const kz_hparams *hp = &a->s->m->hp;
    const kz_gdn_bufs *b = &a->s->gdn;
    const kz_gdn_shape sh = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim};
    const float *q = b->conv, *k = q + hp->ssm_key_dim, *v = k + hp->ssm_key_dim;
    if (a->s->spec_rec) /* a verify batch steps token by token, as decode does, each state row
                         * through all its tokens at once, from the old buffer into the live one */
        kz_gdn_recurrent_rows(&sh, a->n, q, k, v, b->ld_qkv, b->alpha, b->beta, b->ld_gate, a->old_ssm,
                              a->ssm_state, NULL, b->core, b->ld_z, j, j + 1);
    else if (a->n >= 2)
        kz_gdn_chunked(&sh, a->n, q, k, v, b->ld_qkv, b->alpha, b->beta, b->ld_gate, a->ssm_state, b->core, b->ld_z,
                       j, j + 1, b->chunk_scr + (size_t)ith * b->chunk_scr_floats);
    else
        kz_gdn_recurrent(&sh, a->n, q, k, v, b->ld_qkv, b->alpha, b->beta, b->ld_gate, a->ssm_state, b->core,
                         b->ld_z, j, j + 1);
    const int dv = sh.dv;
    for (int t = 0; t < a->n; t++) {
        float *o = b->core + (size_t)t * b->ld_z + (size_t)j * dv;
        const float *z = b->z + (size_t)t * b->ld_z + (size_t)j * dv;
        kz_rmsnorm_gated(o, z, a->ly->ssm_norm, dv, hp->rms_eps);
    }
}

/* Value heads in runs (threadpool.h): a thread works through adjacent heads, whose states are
 * adjacent, so its state stream stays one ascending stream that the prefetch carries into the
 * next head; heads handed out one at a time interleave the threads and start every head cold. */
static void gdn_core_part(const gdn_task *a, kz_run *run, int ith) {
    int k = 0;
    int64_t c0, c1;
    while (kz_runs_next(run, a->n_runs, ith, UINT32_MAX, &k, &c0, &c1)) gdn_core_head(a, ith, (int)c0);
}
static void gdn_core_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_task *a = arg;
    gdn_core_part(a, a->run, ith);
}

/* one token: conv units + gates, then (once all are done: the heads read every q/k head and
 * the gates) the value heads, in one dispatch instead of two (a decode step pays a pool wake-up
 * and an end-of-dispatch wait per dispatch) */
static void gdn_step_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_task *a = arg;
    gdn_in_part(a, ith, &a->in_done);
    kz_phase_wait(&a->in_done, a->in_units + 1);
    if (ith == 0) prof(a->s, KZ_PROF_GDN_CONV); /* the caller's clock (prof is caller-only) */
    gdn_core_part(a, a->run2, ith);
}

void kz_gdn_layer(kz_seq *s, const kz_layer *ly, int n, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    const kz_gdn_bufs *b = &s->gdn;
    const long Hv = hp->ssm_n_v_heads;
    gdn_task gt = {.s = s, .ly = ly, .in_units = 2L * hp->ssm_n_k_heads + Hv,
                   .conv_state = s->conv_state + (size_t)ly->state_idx * s->conv_per_layer,
                   .ssm_state = s->ssm_state + (size_t)ly->state_idx * s->ssm_per_layer, .n = n};
    if (s->spec_rec) {
        gt.old_conv = s->rec_state + (size_t)ly->state_idx * s->conv_per_layer;
        gt.old_ssm = s->rec_state + s->conv_per_layer * (size_t)hp->n_gdn_layers +
                      (size_t)ly->state_idx * s->ssm_per_layer;
    }
    const kz_wmat *w[] = {&ly->wqkv, &ly->wgate, &ly->wbeta, &ly->walpha};
    float *y[] = {b->qkv, b->z, b->beta, b->alpha};
    const size_t ld[] = {b->ld_qkv, b->ld_z, b->ld_gate, b->ld_gate};
    mm_group(s, w, 4, s->hn, n, y, ld, pre);
    prof(s, KZ_PROF_GDN_PROJ);

    gdn_runs_set(&gt, gt.in_units, kz_pool_size(s->pool));
    if (n == 1 || s->spec_rec) { /* conv + q/k norms + gates, then delta rule + gated norm, one dispatch
                                  * (a verify batch: the recurrent form, as decode steps) */
        kz_runs_split(gt.run2, gt.n_runs, Hv);
        atomic_init(&gt.in_done.done, 0);
        run_task(s, gdn_step_fn, &gt);
    } else {
        run_task(s, gdn_in_fn, &gt); /* conv + q/k norms + gates */
        prof(s, KZ_PROF_GDN_CONV);
        gdn_runs_set(&gt, Hv, kz_pool_size(s->pool));
        run_task(s, gdn_core_fn, &gt); /* delta rule + gated norm */
    }
    prof(s, KZ_PROF_GDN_CORE);
    mm(s, &ly->wssm_out, b->core, n, s->out, (size_t)hp->n_embd);
    prof(s, KZ_PROF_GDN_PROJ);
}
