/* Perplexity, KL divergence and importance-matrix collection (eval/eval.h). The formulas are
 * llama.cpp's (tools/perplexity/perplexity.cpp, tools/imatrix/imatrix.cpp), re-derived here so
 * that the numbers and the --kl-divergence-base files are interchangeable with its tools. */
#include "eval/eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sys/err.h"

char *kz_eval_read_text(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { kz_seterr(err, errlen, "cannot open '%s': %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break;
        char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        free(b);
        kz_seterr(err, errlen, bad ? "cannot read '%s'" : "out of memory reading '%s'", path);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

int32_t kz_eval_bos(const kz_model *m, char *err, size_t errlen) {
    int add_bos = 0;
    uint32_t id = 0;
    if (kz_gguf_get_bool(m->gguf, "tokenizer.ggml.add_bos_token", &add_bos) || !add_bos) return -1;
    if (kz_gguf_get_u32(m->gguf, "tokenizer.ggml.bos_token_id", &id) || (int64_t)id >= m->hp.n_vocab) {
        kz_seterr(err, errlen, "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is missing or out of range");
        return -2;
    }
    return (int32_t)id;
}

int kz_eval_tokenize(const kz_model *m, const char *text, size_t len, int32_t **out, int32_t *bos, char *err,
                     size_t errlen) {
    *out = NULL;
    if ((*bos = kz_eval_bos(m, err, errlen)) == -2) return -1;
    const int add_bos = *bos >= 0;
    if (len > (size_t)INT32_MAX - 2) { kz_seterr(err, errlen, "text of %zu bytes is too long", len); return -1; }
    /* byte-level BPE: at most one token per byte */
    int cap = (int)len + 1;
    int32_t *t = malloc((size_t)(cap + 1) * sizeof *t);
    if (!t) { kz_seterr(err, errlen, "out of memory for the tokens of %zu bytes", len); return -1; }
    int n = kz_tokenize(m, text, len, 0, t + add_bos, cap);
    if (n < 0 || n > cap) {
        free(t);
        kz_seterr(err, errlen, "tokenization failed (the text must be UTF-8)");
        return -1;
    }
    if (add_bos) t[0] = *bos;
    *out = t;
    return n + add_bos;
}

int kz_eval_window(const kz_model *m, kz_seq *s, const int32_t *tok, int n_ctx, int first, int32_t bos, int n_batch,
                   float *rows, kz_eval_row_fn fn, void *user, char *err, size_t errlen) {
    const int nv = m->hp.n_vocab;
    if (n_ctx < 2 || first < 0 || first > n_ctx || n_batch < 1) {
        kz_seterr(err, errlen, "bad window (n_ctx %d, first %d, n_batch %d)", n_ctx, first, n_batch);
        return -1;
    }
    kz_seq_reset(s);
    /* pieces of at most n_batch tokens, split at first: the rows before it need no LM head */
    for (int p = 0; p < n_ctx;) {
        int end = p < first ? first : n_ctx;
        int nb = end - p < n_batch ? end - p : n_batch;
        int32_t head[1];
        const int32_t *in = tok + p;
        int32_t *buf = NULL;
        if (p == 0 && bos >= 0) { /* the window starts with BOS instead of its first token */
            if (nb == 1) {
                head[0] = bos;
                in = head;
            } else {
                if (!(buf = malloc((size_t)nb * sizeof *buf))) { kz_seterr(err, errlen, "out of memory"); return -1; }
                memcpy(buf, tok, (size_t)nb * sizeof *buf);
                buf[0] = bos;
                in = buf;
            }
        }
        const int want = p >= first;
        int rc = kz_forward(m, s, in, nb, want ? rows : NULL, 1, err, errlen);
        free(buf);
        if (rc) return -1;
        if (want && fn)
            for (int r = 0; r < nb && p + r < n_ctx - 1; r++) {
                int v = fn(user, p + r, rows + (size_t)r * nv);
                if (v) return v;
            }
        p += nb;
    }
    return 0;
}

double kz_nll(const float *logits, int n_vocab, int tok) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)mx);
    return log(sum) - ((double)logits[tok] - (double)mx);
}

double kz_ppl_value(const kz_ppl *p, double *err) {
    if (err) *err = -1.0;
    if (p->count <= 0) return NAN;
    const double mean = p->nll / (double)p->count, ppl = exp(mean);
    const double var = p->nll2 / (double)p->count - mean * mean;
    if (err && var > 0 && p->count > 1) *err = sqrt(var / (double)(p->count - 1)) * ppl;
    return ppl;
}

/* llama.cpp's nearest_int: round half to even in float (the default rounding mode) */
static int nearest(float v) { return (int)lrintf(v); }

double kz_klrow_encode(const float *logits, int n_vocab, int tok, uint16_t *row) {
    float mx = logits[0], mn = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > mx) mx = logits[i];
        if (logits[i] < mn) mn = logits[i];
    }
    if (mn < mx - 16) mn = mx - 16;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    const float lse = (float)log(sum);
    const float min_log_prob = mn - mx - lse, scale = (mx - mn) / 65535.f;
    memcpy(row, &scale, 4);
    memcpy(row + 2, &min_log_prob, 4);
    uint16_t *code = row + 4;
    if (scale != 0.0f) {
        const float inv = 1 / scale;
        for (int i = 0; i < n_vocab; i++) code[i] = logits[i] > mn ? (uint16_t)nearest(inv * (logits[i] - mn)) : 0;
    } else {
        memset(code, 0, (size_t)n_vocab * sizeof *code);
    }
    for (size_t i = 4 + (size_t)n_vocab; i < kz_klrow_words(n_vocab); i++) row[i] = 0;
    return (double)mx + lse - logits[tok];
}

double kz_kld_add(kz_kld *k, const float *logits, int n_vocab, const uint16_t *base_row, int tok) {
    float mx = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) { mx = logits[i]; imax = i; }
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - mx);
    const float lse = (float)log(sum_exp);
    float scale, min_log_prob;
    memcpy(&scale, base_row, 4);
    memcpy(&min_log_prob, base_row + 2, 4);
    const uint16_t *code = base_row + 4;

    const float nll = mx + lse - logits[tok];
    const float nll_base = -(scale * code[tok] + min_log_prob);
    k->nll += nll;
    k->nll2 += (double)nll * nll;
    k->nll_base += nll_base;
    k->nll_base2 += (double)nll_base * nll_base;
    k->nll_nll_base += (double)nll * nll_base;

    const float log_norm = mx + lse;
    double kl = 0.0;
    int imax_base = 0;
    float lb_max = 0.0f;
    for (int i = 0; i < n_vocab; i++) {
        const float lb = scale * code[i] + min_log_prob;
        if (i == 0 || lb > lb_max) { lb_max = lb; imax_base = i; }
        if (lb > -16.f) kl += expf(lb) * (lb - logits[i] + log_norm); /* p_base (log p_base - log p) */
    }
    k->kld += kl;
    k->kld2 += kl * kl;
    k->count++;
    k->n_same_top += imax == imax_base;
    const double pd = (double)expf(-nll) - (double)expf(-nll_base);
    k->p_diff += pd;
    k->p_diff2 += pd * pd;
    k->p_diff4 += pd * pd * pd * pd;
    if (fabs(pd) > k->max_p_diff) k->max_p_diff = fabs(pd);
    return kl;
}

void kz_mean_err(double sum, double sum2, long count, double *mean, double *err) {
    *mean = count > 0 ? sum / (double)count : 0.0;
    double v = count > 0 ? sum2 / (double)count - *mean * *mean : 0.0;
    *err = v > 0 && count > 10 ? sqrt(v / (double)(count - 1)) : 0.0;
}

void kz_im_collect(void *user, const kz_wmat *w, const float *x, int n) {
    kz_im_collector *c = user;
    if (c->failed || !w->name || n < 16) return; /* llama-imatrix ignores batches under 16 rows */
    if (strncmp(w->name, "blk.", 4) && !(c->process_output && !strcmp(w->name, "output.weight"))) return;
    for (int64_t i = 0; i < (int64_t)n * w->n_in; i++)
        if (!isfinite(x[i])) {
            snprintf(c->err, sizeof c->err, "non-finite activation entering %s (row %lld)", w->name,
                     (long long)(i / w->n_in));
            c->failed = 1;
            return;
        }
    if (kz_imatrix_add(c->im, w->name, w->n_in, x, n, c->err, sizeof c->err)) c->failed = 1;
}
