/* Speculative verification on a sequence: a verify batch (the last accepted token + the
 * drafts) runs as one chunk whose numerics equal one-token decode steps (forward.c,
 * attention_layer.c, gdn_layer.c check s->spec_rec), and keeps what dropping its tail needs.
 * Rollback is "snapshot + replay": the GDN conv + recurrent states before the batch, and per
 * GDN layer and token the conv inputs and the delta rule's inputs (q, k, v, g, beta); keeping
 * the first `keep` tokens restores the snapshot and reruns only the delta rule over them (no
 * weights read). The snapshot costs no copy: the state has two buffers, and a batch reads the
 * one before it and writes the other (which then becomes the live one). KV rows need no undo: n_past moves back and later tokens overwrite them. */
#include <stdlib.h>
#include <string.h>
#include "forward/internal.h"
#include "nn/gdn.h"
#include "sys/err.h"
#include "sys/mem.h"

int kz_seq_has_mtp(const kz_seq *s) { return s && s->m->mtp != NULL; }

void kz_seq_mtp_kv_clear(kz_seq *s, int n) {
    const kz_hparams *hp = &s->m->hp;
    kz_kv_layer *kv = &s->kv[hp->n_attn_layers];
    const size_t row = (size_t)hp->n_head_kv * kz_kv_type_row_bytes((kz_kv_type)kv->type, hp->head_dim);
    memset(kv->k, 0, (size_t)n * row);
    memset(kv->v, 0, (size_t)n * row);
}

int kz_seq_mtp_enable(kz_seq *s, int on) {
    if (!s || (on && !s->m->mtp)) return -1;
    if (on && !s->mtp_on && s->n_past) kz_seq_mtp_kv_clear(s, s->n_past);
    s->mtp_on = on != 0;
    s->mtp_n = 0;
    s->mtp_pend = 0;
    if (s->mtp_h) memset(s->mtp_h, 0, (size_t)s->m->hp.n_embd * sizeof(float));
    return 0;
}

const float *kz_seq_mtp_hidden(const kz_seq *s) { return s && s->mtp_on && s->n_past > 0 ? s->mtp_h : NULL; }

/* record layout per GDN layer: qkv [N][conv_dim], conv [N][conv_dim], g [N][Hv], beta [N][Hv],
 * replay output [N][d_inner] */
static size_t rec_layer_floats(const kz_hparams *hp) {
    return (size_t)KZ_SPEC_NMAX * (2 * (size_t)hp->ssm_conv_dim + 2 * (size_t)hp->ssm_n_v_heads + (size_t)hp->ssm_d_inner);
}

int kz_seq_verify_begin(kz_seq *s, char *err, size_t errlen) {
    const kz_hparams *hp = &s->m->hp;
    if (!s->rec_qkv) {
        const size_t nl = (size_t)hp->n_gdn_layers, per = rec_layer_floats(hp);
        const size_t st = (s->conv_per_layer + s->ssm_per_layer) * nl;
        s->rec_state = kz_alloc_huge((st ? st : 1) * sizeof(float)); /* written per verify (gdn_layer.c) */
        s->rec_qkv = malloc((nl * per + (size_t)KZ_SPEC_NMAX * (size_t)hp->n_embd) * sizeof(float));
        if (!s->rec_state || !s->rec_qkv) {
            free(s->rec_state);
            free(s->rec_qkv);
            s->rec_state = s->rec_qkv = NULL;
            kz_seterr(err, errlen, "out of memory for the %.1f MiB speculative-decoding state copy",
                      (st + nl * per) * sizeof(float) / 1048576.0);
            return -1;
        }
        const size_t N = KZ_SPEC_NMAX;
        s->rec_conv = s->rec_qkv + N * (size_t)hp->ssm_conv_dim * nl;
        s->rec_g = s->rec_conv + N * (size_t)hp->ssm_conv_dim * nl;
        s->rec_beta = s->rec_g + N * (size_t)hp->ssm_n_v_heads * nl;
        s->rec_scr = s->rec_beta + N * (size_t)hp->ssm_n_v_heads * nl;
        s->rec_h = s->rec_scr + N * (size_t)hp->ssm_d_inner * nl;
    }
    kz_mtp_flush(s); /* the batch records mtp_n for its rollback */
    s->spec_rec = 1;
    s->rec_valid = 0;
    return 0;
}

void kz_seq_rec_gdn(kz_seq *s, int idx, int n, int c0, int c1, int gates) {
    const kz_hparams *hp = &s->m->hp;
    const kz_gdn_bufs *b = &s->gdn;
    const size_t N = KZ_SPEC_NMAX, C = (size_t)hp->ssm_conv_dim, H = (size_t)hp->ssm_n_v_heads;
    for (int t = 0; t < n; t++) {
        const size_t r = ((size_t)idx * N + (size_t)t) * C + (size_t)c0, nc = (size_t)(c1 - c0);
        memcpy(s->rec_qkv + r, b->qkv + (size_t)t * b->ld_qkv + c0, nc * sizeof(float));
        memcpy(s->rec_conv + r, b->conv + (size_t)t * b->ld_qkv + c0, nc * sizeof(float));
        if (gates) {
            memcpy(s->rec_g + ((size_t)idx * N + t) * H, b->alpha + (size_t)t * b->ld_gate, H * sizeof(float));
            memcpy(s->rec_beta + ((size_t)idx * N + t) * H, b->beta + (size_t)t * b->ld_gate, H * sizeof(float));
        }
    }
}

void kz_seq_verify_swap(kz_seq *s) {
    float *live = s->conv_state;
    s->conv_state = s->rec_state;
    s->rec_state = live;
    s->ssm_state = s->conv_state + s->conv_per_layer * (size_t)s->m->hp.n_gdn_layers;
}

typedef struct {
    kz_seq *s;
    int keep;
} replay_task;

/* item = (GDN layer, value head): the delta rule over the kept tokens, read from the snapshot
 * and written to the state; the same kernel and inputs as the verify batch ran, so the same
 * bits as if it had stopped there */
static void replay_fn(void *arg, int ith, int nth) {
    const replay_task *r = arg;
    kz_seq *s = r->s;
    const kz_hparams *hp = &s->m->hp;
    const kz_gdn_shape sh = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim};
    const size_t N = KZ_SPEC_NMAX, C = (size_t)hp->ssm_conv_dim, H = (size_t)hp->ssm_n_v_heads;
    long lo, hi;
    kz_split((long)hp->n_gdn_layers * sh.n_v_heads, ith, nth, &lo, &hi);
    for (long it = lo; it < hi; it++) {
        const int l = (int)(it / sh.n_v_heads), j = (int)(it % sh.n_v_heads);
        const float *q = s->rec_conv + (size_t)l * N * C, *k = q + hp->ssm_key_dim, *v = k + hp->ssm_key_dim;
        kz_gdn_recurrent_rows(&sh, r->keep, q, k, v, C, s->rec_g + (size_t)l * N * H, s->rec_beta + (size_t)l * N * H,
                              H, s->rec_state + s->conv_per_layer * (size_t)hp->n_gdn_layers + (size_t)l * s->ssm_per_layer,
                              s->ssm_state + (size_t)l * s->ssm_per_layer, NULL,
                              s->rec_scr + (size_t)l * N * (size_t)hp->ssm_d_inner, (size_t)hp->ssm_d_inner, j, j + 1);
    }
}

int kz_seq_verify_keep(kz_seq *s, int keep) {
    if (!s || !s->rec_valid || keep < 1 || keep > s->n_past - s->rec_p0) return -1;
    const kz_hparams *hp = &s->m->hp;
    const int E = hp->n_embd;
    if (s->mtp_on) {
        s->mtp_n = s->rec_p0 + keep - 1;
        memcpy(s->mtp_h, s->rec_h + (size_t)(keep - 1) * E, (size_t)E * sizeof(float));
    }
    if (keep == s->n_past - s->rec_p0) return 0;
    s->n_past = s->rec_p0 + keep;
    s->logits_argmax = -1;
    const size_t nl = (size_t)hp->n_gdn_layers, N = KZ_SPEC_NMAX, C = (size_t)hp->ssm_conv_dim;
    if (!nl) return 0;
    /* the conv state after `keep` tokens: the last K-1 of (state before the batch, kept inputs) */
    const int K1 = hp->ssm_d_conv - 1;
    for (size_t l = 0; l < nl; l++) {
        const float *old = s->rec_state + l * s->conv_per_layer, *in = s->rec_qkv + l * N * C;
        float *cs = s->conv_state + l * s->conv_per_layer;
        for (size_t c = 0; c < C; c++)
            for (int j = 0; j < K1; j++) {
                const int i = keep + j; /* index in old ++ in */
                cs[c * (size_t)K1 + j] = i < K1 ? old[c * (size_t)K1 + i] : in[(size_t)(i - K1) * C + c];
            }
    }
    replay_task rt = {s, keep};
    kz_pool_run(s->pool, replay_fn, &rt);
    return 0;
}
