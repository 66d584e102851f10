/* Every matmul the forward pass makes goes through these helpers: they add the sequence's
 * pool, work area and cancel flag, and keep the matmul API in one place. */
#ifndef KZ_FORWARD_MM_H
#define KZ_FORWARD_MM_H
#include "forward/internal.h"
#include "matmul/quant.h"

/* y[t][0..n_out) (row stride ldy) = w x[t] for n tokens */
static inline void mm(kz_seq *s, const kz_wmat *w, const float *x, int n, float *y, size_t ldy) {
    if (seq_aborted(s)) return;
    kz_matmul_abortable(s->pool, w, x, n, y, (int64_t)ldy, s->mm_work, s->chunk_abort);
}

/* nw matrices on the same input: X converted once, one pool dispatch for all their rows; pre
 * (one token, else NULL): the norm that makes X, run inside that dispatch (kz_mm_pre) */
static inline void mm_group(kz_seq *s, const kz_wmat *const *w, int nw, const float *x, int n, float *const *y,
                            const size_t *ldy, const kz_mm_pre *pre) {
    if (pre) {
        kz_matmul_multi_pre(s->pool, w, nw, x, y, s->mm_work, pre);
        return;
    }
    if (seq_aborted(s)) return;
    int64_t ld[KZ_MM_MAX];
    for (int i = 0; i < nw; i++) ld[i] = (int64_t)ldy[i];
    kz_matmul_multi(s->pool, w, nw, x, n, y, ld, s->mm_work, s->chunk_abort);
}

/* one token: y = w_down silu(gate) * up, the SwiGLU done with the conversion of X */
static inline void mm_swiglu_down(kz_seq *s, const kz_wmat *w, float *gate, const float *up, float *y) {
    kz_matmul_swiglu(s->pool, w, gate, up, y, s->mm_work);
}

/* one row of logits y = w x (x made by pre, as mm_group's), returning its argmax */
static inline int64_t mm_argmax(kz_seq *s, const kz_wmat *w, const float *x, float *y, const kz_mm_pre *pre) {
    return kz_matmul_argmax(s->pool, w, x, y, s->mm_work, pre);
}

/* Work area bytes for every matmul and group above on up to n_tok tokens. */
static inline size_t mm_maxz(size_t a, size_t b) { return a > b ? a : b; }
static inline size_t mm_work_bytes(const kz_model *m, int n_tok) {
    size_t w = kz_matmul_work_bytes(&m->output, n_tok);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const kz_layer *l = &m->layers[il];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j]->data) w = mm_maxz(w, kz_matmul_work_bytes(ws[j], n_tok));
        /* the groups the layers apply to one input: one converted X per activation type */
        const kz_wmat *g_attn[] = {&l->wq, &l->wk, &l->wv}, *g_gdn[] = {&l->wqkv, &l->wgate, &l->wbeta, &l->walpha},
                      *g_ffn[] = {&l->ffn_gate, &l->ffn_up};
        if (l->wq.data) w = mm_maxz(w, kz_matmul_multi_work_bytes(g_attn, 3, n_tok));
        if (l->wqkv.data) w = mm_maxz(w, kz_matmul_multi_work_bytes(g_gdn, 4, n_tok));
        if (l->ffn_gate.data) w = mm_maxz(w, kz_matmul_multi_work_bytes(g_ffn, 2, n_tok));
    }
    return w;
}
#endif
