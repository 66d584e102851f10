/* The feed-forward block: down(silu(gate x) * up x). Buffers: s->ffn (internal.h). */
#include "forward/internal.h"
#include "forward/mm.h"
#include "nn/ops.h"

/* SwiGLU rows of fewer elements stay on the calling thread (a dispatch would cost about as
 * much); measured on a 9216-wide decode row, not tuned further. */
#ifndef KZ_SWIGLU_PAR_MIN
#define KZ_SWIGLU_PAR_MIN 4096
#endif

typedef struct {
    float *a;
    const float *b;
    size_t lda, ldb;
    int n, rows;
} swiglu_task;

static void swiglu_fn(void *arg, int ith, int nth) {
    const swiglu_task *t = arg;
    long lo, hi;
    kz_split((long)t->rows * t->n, ith, nth, &lo, &hi);
    /* split the flat index range so a single token's row also uses all threads */
    while (lo < hi) {
        long r = lo / t->n, c = lo % t->n;
        long e = hi - lo < t->n - c ? hi - lo : t->n - c;
        kz_swiglu(t->a + (size_t)r * t->lda + c, t->b + (size_t)r * t->ldb + c, (int)e);
        lo += e;
    }
}

void kz_ffn_layer(kz_seq *s, const kz_layer *ly, int n, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    const kz_ffn_bufs *b = &s->ffn;
    const kz_wmat *w[] = {&ly->ffn_gate, &ly->ffn_up};
    float *y[] = {b->gate, b->up};
    const size_t ld[] = {b->ld, b->ld};
    mm_group(s, w, 2, s->hn, n, y, ld, pre);
    prof(s, KZ_PROF_FFN);
    /* one token (or a verify batch, a few decode steps): the SwiGLU is applied as the down
     * projection quantises its input, no dispatch of its own */
    if ((n == 1 || s->spec_rec) && !seq_aborted(s)) {
        mm_swiglu_down(s, &ly->ffn_down, b->gate, b->up, s->out, n);
    } else {
        swiglu_task st = {b->gate, b->up, b->ld, b->ld, hp->n_ff, n};
        if ((long)n * hp->n_ff < KZ_SWIGLU_PAR_MIN) swiglu_fn(&st, 0, 1);
        else run_task(s, swiglu_fn, &st);
        prof(s, KZ_PROF_FFN_ACT);
        mm(s, &ly->ffn_down, b->gate, n, s->out, (size_t)hp->n_embd);
    }
    prof(s, KZ_PROF_FFN);
}
