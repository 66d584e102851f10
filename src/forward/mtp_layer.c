/* Qwen3.5's MTP block (model.h kz_mtp, docs/qwen35.md#mtp-blocks): the draft head of
 * self-speculative decoding. Its attention and FFN are the trunk's code (attention_layer.c,
 * ffn.c) on the block's own layer and KV slot; what is its own is the input projection
 * u = eh_proj [rmsnorm(embed(x_{t+1}), enorm); rmsnorm(h_t, hnorm)] and the head norm. KV slot
 * t holds the pair (h_t, x_{t+1}) at rope position t + 1. */
#include <string.h>
#include "forward/internal.h"
#include "forward/mm.h"
#include "matmul/quant.h"
#include "nn/ops.h"

/* row r of s->mtp_cat = [rmsnorm(embed(tok), enorm); rmsnorm(h, hnorm)], and its rope row at
 * position slot + 1 */
static void mtp_cat_row(kz_seq *s, int r, const float *h, int32_t tok, int slot) {
    const kz_hparams *hp = &s->m->hp;
    const kz_mtp *t = s->m->mtp;
    const int E = hp->n_embd;
    float *cat = s->mtp_cat + (size_t)r * 2 * E;
    /* the embedding row is dequantised into the second half, then normalised into the first */
    kz_dequant_row(t->embed.type, (const uint8_t *)t->embed.data + (size_t)tok * t->embed.row_bytes, cat + E, E);
    kz_rmsnorm(cat, cat + E, t->enorm, E, hp->rms_eps);
    kz_rmsnorm(cat + E, h, t->hnorm, E, hp->rms_eps);
    kz_rope_table(s->rope + (size_t)r * hp->n_rot, hp->n_rot, slot + 1, hp->rope_base, s->rope_use_pos);
}

/* s->x = eh_proj mtp_cat, s->hn = rmsnorm(s->x, attn_norm) for n rows */
static void mtp_project(kz_seq *s, int n) {
    const kz_hparams *hp = &s->m->hp;
    const kz_mtp *t = s->m->mtp;
    const int E = hp->n_embd;
    mm(s, &t->eh_proj, s->mtp_cat, n, s->x, (size_t)E);
    for (int r = 0; r < n; r++)
        kz_rmsnorm(s->hn + (size_t)r * E, s->x + (size_t)r * E, t->ly.attn_norm, E, hp->rms_eps);
}

void kz_mtp_flush(kz_seq *s) {
    if (!s->mtp_pend) return;
    const int E = s->m->hp.n_embd, n = s->mtp_pend;
    for (int r = 0; r < n; r++)
        mtp_cat_row(s, r, s->mtp_pend_h + (size_t)r * E, s->mtp_pend_tok[r], s->mtp_n + r);
    mtp_project(s, n);
    kz_attn_kv_layer(s, &s->m->mtp->ly, n, s->mtp_n, NULL);
    s->mtp_n += n;
    s->mtp_pend = 0;
}

void kz_mtp_fill(kz_seq *s, const int32_t *tok, int n, int p0) {
    const int E = s->m->hp.n_embd;
    if (n == 1 && p0 > 0 && !s->spec_rec && s->mtp_n >= 0 && s->mtp_n + s->mtp_pend == p0 - 1) {
        /* a plain step: its slot p0 - 1 waits (the ring full: the waiting ones go first) */
        if (s->mtp_pend == s->mtp_pend_max) kz_mtp_flush(s);
        memcpy(s->mtp_pend_h + (size_t)s->mtp_pend * E, s->mtp_h, (size_t)E * sizeof(float));
        s->mtp_pend_tok[s->mtp_pend++] = tok[0];
        memcpy(s->mtp_h, s->hfin, (size_t)E * sizeof(float));
        return;
    }
    kz_mtp_flush(s);
    /* token p0 + i pairs with the hidden at p0 + i - 1: the previous call's last one for i = 0
     * (none at the start of the sequence) */
    const int i0 = p0 == 0 ? 1 : 0;
    for (int i = i0; i < n; i++)
        mtp_cat_row(s, i - i0, i == 0 ? s->mtp_h : s->hfin + (size_t)(i - 1) * E, tok[i], p0 + i - 1);
    if (n > i0) {
        mtp_project(s, n - i0);
        kz_attn_kv_layer(s, &s->m->mtp->ly, n - i0, p0 + i0 - 1, NULL);
    }
    memcpy(s->mtp_h, s->hfin + (size_t)(n - 1) * E, (size_t)E * sizeof(float));
    s->mtp_n = p0 + n - 1;
}

int32_t kz_seq_mtp_draft(kz_seq *s, const float *h, int32_t tok, int slot, float *logits, float *h_out) {
    const kz_hparams *hp = &s->m->hp;
    const kz_mtp *t = s->m->mtp;
    const int E = hp->n_embd;
    kz_mtp_flush(s); /* the draft attends over the whole MTP KV */
    mtp_cat_row(s, 0, h, tok, slot);
    mtp_project(s, 1);
    kz_attn_layer(s, &t->ly, 1, slot, NULL);
    kz_add_rmsnorm(s->x, s->out, s->hn, t->ly.post_norm, E, hp->rms_eps);
    kz_ffn_layer(s, &t->ly, 1, NULL);
    kz_add_rmsnorm(s->x, s->out, h_out, t->head_norm, E, hp->rms_eps);
    kz_wmat head = t->head;
    if (s->mtp_vocab > 0 && s->mtp_vocab < head.n_out) { /* a prefix of the rows: same data, fewer rows */
        head.n_out = s->mtp_vocab;
        if (head.n_q4_0_16x4 > head.n_out) head.n_q4_0_16x4 = head.n_out; /* whole 16-row groups */
    }
    return (int32_t)mm_argmax(s, &head, h_out, logits, NULL);
}

int kz_seq_mtp_set_vocab(kz_seq *s, int n) {
    const int64_t V = s->m->mtp ? s->m->mtp->head.n_out : s->m->hp.n_vocab;
    const int64_t r = n <= 0 ? 0 : ((int64_t)n + 63) / 64 * 64;
    s->mtp_vocab = r >= V ? 0 : (int)r;
    return s->mtp_vocab ? s->mtp_vocab : (int)V;
}
