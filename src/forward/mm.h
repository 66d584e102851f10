/* Every matmul the forward pass makes goes through these helpers: they add the sequence's
 * pool, work area and cancel flag, and keep the matmul API in one place. */
#ifndef KZ_FORWARD_MM_H
#define KZ_FORWARD_MM_H
#include "forward/internal.h"
#include "matmul/matmul.h"
#include "nn/ops.h"

/* rows up to which a norm is handed to the matmul dispatch that reads it (kz_mm.pre) */
#define KZ_MM_PRE_ROWS 4

/* y[t][0..n_out) (row stride ldy) = w x[t] for n tokens */
static inline void mm(kz_seq *s, const kz_wmat *w, const float *x, int n, float *y, size_t ldy) {
    if (seq_aborted(s)) return;
    if (s->observe) s->observe(s->observe_user, w, x, n);
    kz_matmul(s->pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n, .y = {y}, .ldy = {(int64_t)ldy},
                                .abort = s->chunk_abort, .work = s->mm_work});
}

/* nw matrices on the same input: X quantised once, one pool dispatch for all their rows; pre
 * (n <= KZ_MM_PRE_ROWS, else NULL): the norm that makes X, run inside that dispatch (kz_mm_pre) */
static inline void mm_group(kz_seq *s, const kz_wmat *const *w, int nw, const float *x, int n, float *const *y,
                            const size_t *ldy, const kz_mm_pre *pre) {
    if (!pre && seq_aborted(s)) return;
    if (s->observe) { /* the input must exist before the observer sees it: run pre first */
        if (pre) pre->fn(pre->arg);
        pre = NULL;
        for (int i = 0; i < nw; i++) s->observe(s->observe_user, w[i], x, n);
    }
    kz_mm a = {.nw = nw, .x = x, .n_tok = n, .pre = pre, .abort = pre ? NULL : s->chunk_abort, .work = s->mm_work};
    for (int i = 0; i < nw; i++) {
        a.w[i] = w[i];
        a.y[i] = y[i];
        a.ldy[i] = (int64_t)ldy[i];
    }
    kz_matmul(s->pool, &a);
}

/* n tokens (decode: 1): y = w_down silu(gate) * up, the SwiGLU done as X is quantised */
static inline void mm_swiglu_down(kz_seq *s, const kz_wmat *w, float *gate, const float *up, float *y, int n) {
    if (s->observe) { /* the SwiGLU into gate first (as the multi-token path does), then a plain matmul */
        kz_swiglu(gate, up, n * (int)w->n_in);
        mm(s, w, gate, n, y, 0);
        return;
    }
    kz_matmul(s->pool, &(kz_mm){.w = {w}, .nw = 1, .n_tok = n, .swiglu = {gate, up}, .y = {y}, .work = s->mm_work});
}

/* one row of logits y = w x (x made by pre, as mm_group's), returning its argmax */
static inline int64_t mm_argmax(kz_seq *s, const kz_wmat *w, const float *x, float *y, const kz_mm_pre *pre) {
    int64_t am = -1;
    if (s->observe) {
        if (pre) pre->fn(pre->arg);
        pre = NULL;
        s->observe(s->observe_user, w, x, 1);
    }
    kz_matmul(s->pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = 1, .y = {y}, .pre = pre, .argmax = &am,
                                .work = s->mm_work});
    return am;
}

/* Work area bytes for every matmul and group above on up to n_tok tokens. */
static inline size_t mm_work(const kz_wmat *const *w, int nw, int n_tok) {
    kz_mm a = {.nw = nw, .n_tok = n_tok};
    for (int i = 0; i < nw; i++) a.w[i] = w[i];
    return kz_matmul_work_bytes(&a);
}
static inline size_t mm_maxz(size_t a, size_t b) { return a > b ? a : b; }
static inline size_t mm_work_bytes(const kz_model *m, int n_tok) {
    const kz_wmat *out = &m->output;
    size_t w = mm_work(&out, 1, n_tok);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const kz_layer *l = &m->layers[il];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j]->data) w = mm_maxz(w, mm_work(&ws[j], 1, n_tok));
        /* the groups the layers apply to one input: one quantised X per activation type */
        const kz_wmat *g_attn[] = {&l->wq, &l->wk, &l->wv}, *g_gdn[] = {&l->wqkv, &l->wgate, &l->wbeta, &l->walpha},
                      *g_ffn[] = {&l->ffn_gate, &l->ffn_up};
        if (l->wq.data) w = mm_maxz(w, mm_work(g_attn, 3, n_tok));
        if (l->wqkv.data) w = mm_maxz(w, mm_work(g_gdn, 4, n_tok));
        if (l->ffn_gate.data) w = mm_maxz(w, mm_work(g_ffn, 2, n_tok));
    }
    if (m->mtp) { /* the MTP block: eh_proj reads 2 n_embd wide rows */
        const kz_layer *l = &m->mtp->ly;
        const kz_wmat *g_attn[] = {&l->wq, &l->wk, &l->wv}, *g_ffn[] = {&l->ffn_gate, &l->ffn_up},
                      *ws[] = {&m->mtp->eh_proj, &m->mtp->head, &l->wo, &l->ffn_down};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++) w = mm_maxz(w, mm_work(&ws[j], 1, n_tok));
        w = mm_maxz(w, mm_work(g_attn, 3, n_tok));
        w = mm_maxz(w, mm_work(g_ffn, 2, n_tok));
    }
    return w;
}
/* for any chunk of 1..n_batch tokens: the largest is n_batch's, or a thin batch's (its terms) */
static inline size_t mm_work_bytes_upto(const kz_model *m, int n_batch) {
    size_t w = mm_work_bytes(m, n_batch);
    for (int n = 1; n <= KZ_MM_THIN && n < n_batch; n++) w = mm_maxz(w, mm_work_bytes(m, n));
    return w;
}
#endif
