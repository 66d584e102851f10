/* eval/: the matmul observer leaves every logit bit unchanged (prefill chunks and the one-token
 * paths it unfuses) and sees each weight's input rows; the imatrix collector's filter; window
 * evaluation against one plain forward; log-softmax, perplexity and its standard error, and the
 * KL-divergence row codec against direct double computations. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "eval/eval.h"
#include "kt.h"
#include "model/types.h"
#include "tools/mkmodel/mkmodel.h"

#define N_TOK 46
#define N_PRE 40

typedef struct {
    const char *names[256];
    long rows[256];
    int n, bad_width;
} obs_log;

static void observe(void *user, const kz_wmat *w, const float *x, int n) {
    obs_log *o = user;
    (void)x;
    const char *nm = w->name ? w->name : "(null)";
    int i = 0;
    while (i < o->n && strcmp(o->names[i], nm)) i++;
    if (i == o->n && o->n < 256) o->names[o->n++] = nm;
    if (i < 256) o->rows[i] += n;
}

/* prefill N_PRE tokens in chunks of 32 + 8 (want_all), then one-token steps */
static int run(kz_model *m, const int32_t *tok, float *lg, kz_mm_observer fn, void *user) {
    char err[256];
    kz_seq *s = kz_seq_new(m, 64, 32, 2, KZ_KV_F32, err, sizeof err);
    if (!s) { fprintf(stderr, "%s\n", err); return -1; }
    kz_seq_set_mm_observer(s, fn, user);
    const int nv = m->hp.n_vocab;
    int rc = kz_forward(m, s, tok, N_PRE, lg, 1, err, sizeof err);
    for (int i = N_PRE; i < N_TOK && !rc; i++) rc = kz_forward(m, s, tok + i, 1, lg + (size_t)i * nv, 0, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    kz_seq_free(s);
    return rc;
}

static kz_model *make(const char *preset, uint32_t wtype, const char *path) {
    kz_mkmodel_cfg cfg;
    char err[256];
    if (kz_mkmodel_preset(preset, &cfg)) return NULL;
    cfg.wtype = wtype;
    cfg.n_threads = 1;
    if (kz_mkmodel_write(&cfg, path, err, sizeof err)) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "%s\n", err);
    return m;
}

typedef struct {
    const float *ref; /* full-forward logits */
    int nv, n_rows, bad;
    double worst;
} win_check;

static int win_row(void *user, int pos, const float *row) {
    win_check *w = user;
    const float *r = w->ref + (size_t)pos * w->nv;
    double num = 0, den = 0;
    for (int i = 0; i < w->nv; i++) {
        num += (double)(row[i] - r[i]) * (row[i] - r[i]);
        den += (double)r[i] * r[i];
    }
    double rel = sqrt(num / den);
    if (rel > w->worst) w->worst = rel;
    w->n_rows++;
    return 0;
}

static void test_model(const char *preset, uint32_t wtype, const char *path, unsigned long long *rng) {
    kz_model *m = make(preset, wtype, path);
    CHECKF(m != NULL, "%s", preset);
    if (!m) return;
    const int nv = m->hp.n_vocab;
    int32_t tok[N_TOK];
    for (int i = 0; i < N_TOK; i++) tok[i] = (int32_t)(kt_rng(rng) % (unsigned)nv);
    float *a = malloc((size_t)N_TOK * nv * sizeof *a), *b = malloc((size_t)N_TOK * nv * sizeof *b);
    obs_log *o = calloc(1, sizeof *o);
    CHECK(run(m, tok, a, NULL, NULL) == 0);
    CHECK(run(m, tok, b, observe, o) == 0);
    CHECKF(!memcmp(a, b, (size_t)N_TOK * nv * sizeof *a), "%s %s: logits change with an observer", preset,
           kz_type_get(wtype)->name);

    /* every layer weight saw every token; the LM head the rows asked for */
    int n_layer_w = 0;
    for (int i = 0; i < o->n; i++) {
        if (!strncmp(o->names[i], "blk.", 4)) {
            n_layer_w++;
            CHECKF(o->rows[i] == N_TOK, "%s: %ld rows", o->names[i], o->rows[i]);
        } else {
            CHECKF(!strcmp(o->names[i], m->output.name) && o->rows[i] == N_TOK, "%s: %ld rows", o->names[i], o->rows[i]);
        }
    }
    const kz_hparams *hp = &m->hp;
    CHECKF(n_layer_w == 3 * hp->n_layer + 5 * hp->n_gdn_layers + 4 * hp->n_attn_layers, "%d weights observed", n_layer_w);

    /* the collector keeps calls of >= 16 rows (the 32-token chunk) of the blk.* weights */
    kz_im_collector col = {.im = kz_imatrix_new()};
    CHECK(run(m, tok, b, kz_im_collect, &col) == 0 && !col.failed);
    CHECK(kz_imatrix_count(col.im) == n_layer_w);
    const int64_t *cnt;
    CHECK(kz_imatrix_entry(col.im, "blk.0.ffn_down.weight", NULL, NULL, NULL, &cnt) == 0 && cnt[0] == 32);
    CHECK(kz_imatrix_entry(col.im, m->output.name, NULL, NULL, NULL, &cnt) == -1);
    kz_imatrix_free(col.im);

    /* a window: BOS swapped in, pieces of <= n_batch split at first (here 0-16, 16-20 without
     * logits, 20-36, 36-40 with), rows [first, n_ctx - 1) handed over: the same bits as those
     * pieces run by hand */
    char err[256];
    int32_t wt[N_PRE];
    memcpy(wt, tok, sizeof wt);
    wt[0] = 7;
    kz_seq *s = kz_seq_new(m, 64, 16, 2, KZ_KV_F32, err, sizeof err);
    CHECK(s && kz_forward(m, s, wt, 16, NULL, 1, err, sizeof err) == 0 && kz_forward(m, s, wt + 16, 4, NULL, 1, err, sizeof err) == 0 &&
          kz_forward(m, s, wt + 20, 16, a + (size_t)20 * nv, 1, err, sizeof err) == 0 &&
          kz_forward(m, s, wt + 36, 4, a + (size_t)36 * nv, 1, err, sizeof err) == 0);
    win_check wc = {.ref = a, .nv = nv};
    float *rows = malloc((size_t)16 * nv * sizeof *rows);
    CHECKF(kz_eval_window(m, s, tok, N_PRE, 20, 7, 16, rows, win_row, &wc, err, sizeof err) == 0, "%s", err);
    CHECKF(wc.n_rows == N_PRE - 1 - 20 && wc.worst == 0, "%s %s: %d rows, rel err %g", preset, kz_type_get(wtype)->name,
           wc.n_rows, wc.worst);
    /* and close to one plain forward of the whole window (float noise of other chunk sizes) */
    kz_seq_reset(s);
    CHECK(kz_forward(m, s, wt, N_PRE, a, 1, err, sizeof err) == 0);
    wc = (win_check){.ref = a, .nv = nv};
    CHECK(kz_eval_window(m, s, tok, N_PRE, 20, 7, 16, rows, win_row, &wc, err, sizeof err) == 0);
    CHECKF(wc.worst < 5e-2, "%s: rel err %g against one forward", preset, wc.worst);
    CHECK(kz_eval_window(m, s, tok, 1, 0, -1, 16, rows, win_row, &wc, err, sizeof err) == -1);
    free(rows);
    kz_seq_free(s);
    free(a);
    free(b);
    free(o);
    kz_model_free(m);
    unlink(path);
}

static void test_formulas(unsigned long long *rng) {
    /* -log softmax against a long double sum */
    float row[1001];
    for (int i = 0; i < 1001; i++) row[i] = 20.0f * kt_randf(rng);
    long double s = 0;
    for (int i = 0; i < 1001; i++) s += expl((long double)row[i]);
    for (int t = 0; t < 1001; t += 97) CHECK(fabs(kz_nll(row, 1001, t) - (double)(logl(s) - row[t])) < 1e-9);

    kz_ppl p = {0};
    kz_ppl_add(&p, 1);
    kz_ppl_add(&p, 2);
    kz_ppl_add(&p, 3);
    double e, v = kz_ppl_value(&p, &e);
    CHECK(fabs(v - exp(2.0)) < 1e-12 && fabs(e - sqrt((2.0 / 3) / 2) * exp(2.0)) < 1e-12);
    kz_ppl one = {0};
    kz_ppl_add(&one, 1);
    kz_ppl_value(&one, &e);
    CHECK(e == -1);

    /* the 16-bit row: self KLD ~ 0, same top; against another row, the exact KLD */
    uint16_t *code = malloc(kz_klrow_words(1001) * sizeof *code);
    CHECK(kz_klrow_words(1001) == 1006 && kz_klrow_words(1000) == 1004);
    double nll = kz_klrow_encode(row, 1001, 5, code);
    CHECK(fabs(nll - kz_nll(row, 1001, 5)) < 1e-4);
    kz_kld k = {0};
    double kl = kz_kld_add(&k, row, 1001, code, 5);
    CHECKF(fabs(kl) < 1e-5 && k.n_same_top == 1 && k.count == 1, "self KLD %g", kl);
    CHECK(fabs(k.nll_base - k.nll) < 1e-3);
    float q[1001];
    for (int i = 0; i < 1001; i++) q[i] = row[i] + 0.5f * kt_randf(rng);
    long double sp = 0, sq = 0, ex = 0;
    for (int i = 0; i < 1001; i++) { sp += expl((long double)row[i]); sq += expl((long double)q[i]); }
    for (int i = 0; i < 1001; i++) {
        long double lp = row[i] - logl(sp), lq = q[i] - logl(sq);
        if (lp > -16) ex += expl(lp) * (lp - lq);
    }
    kl = kz_kld_add(&k, q, 1001, code, 5);
    CHECKF(fabs(kl - (double)ex) < 1e-3 * (double)ex + 1e-5, "KLD %g, exact %g", kl, (double)ex);
    CHECK(k.count == 2);
    double mean, err;
    kz_mean_err(3.0, 5.0, 2, &mean, &err);
    CHECK(mean == 1.5 && err == 0); /* fewer than 11 samples: no error, as llama.cpp */
    free(code);
}

/* path with tokenizer.ggml.add_bos_token = true (and bos_token_id = bos unless < 0) */
static int rewrite_bos(const char *src, const char *dst, int bos) {
    char err[256];
    kz_gguf *g = kz_gguf_open(src, err, sizeof err);
    if (!g) return -1;
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, "tokenizer.ggml.add_bos_token") && strcmp(g->kv[i].key, "tokenizer.ggml.bos_token_id"))
            kz_gguf_w_copy_kv(w, g, &g->kv[i]);
    kz_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    if (bos >= 0) kz_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        kz_gguf_w_tensor_info(w, g->tensors[i].name, g->tensors[i].n_dims, g->tensors[i].ne, g->tensors[i].type);
    kz_gguf_writer_begin(w, dst);
    for (uint64_t i = 0; i < g->n_tensors; i++) kz_gguf_writer_write_tensor(w, g->tensors[i].data, g->tensors[i].nbytes);
    int rc = kz_gguf_writer_finish(w);
    if (rc) fprintf(stderr, "%s\n", kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    kz_gguf_close(g);
    return rc;
}

/* BOS: none for the Qwen vocabularies; first when the file asks for one; an error when it asks
 * without naming it */
static void test_bos(const char *path) {
    char p2[300], err[256];
    snprintf(p2, sizeof p2, "%s.bos", path);
    kz_model *m = make("qwen3-tiny", KZ_T_F32, path);
    CHECK(m != NULL);
    if (!m) return;
    const char *text = "Hello world, again.";
    int32_t *t0 = NULL, *t1 = NULL, bos;
    int n0 = kz_eval_tokenize(m, text, strlen(text), &t0, &bos, err, sizeof err);
    CHECKF(n0 > 3 && bos == -1, "%d %d", n0, bos);
    CHECK(rewrite_bos(path, p2, 5) == 0);
    kz_model_params mp = kz_model_default_params();
    kz_model *mb = kz_model_load(p2, &mp, err, sizeof err);
    CHECKF(mb != NULL, "%s", err);
    if (mb) {
        int n1 = kz_eval_tokenize(mb, text, strlen(text), &t1, &bos, err, sizeof err);
        CHECKF(n1 == n0 + 1 && bos == 5 && t1[0] == 5 && !memcmp(t1 + 1, t0, (size_t)n0 * sizeof *t0), "%d %d", n1, bos);
        kz_model_free(mb);
    }
    CHECK(rewrite_bos(path, p2, -1) == 0);
    if ((mb = kz_model_load(p2, &mp, err, sizeof err))) {
        free(t1);
        t1 = NULL;
        CHECK(kz_eval_tokenize(mb, text, strlen(text), &t1, &bos, err, sizeof err) == -1 && strstr(err, "bos_token_id"));
        CHECK(kz_eval_bos(mb, err, sizeof err) == -2);
        kz_model_free(mb);
    }
    free(t0);
    free(t1);
    kz_model_free(m);
    unlink(p2);
    unlink(path);
}

int main(void) {
    unsigned long long rng = 0x5EED0F23ull;
    char path[256];
    const char *td = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/kz_test_eval_%d.gguf", td && td[0] ? td : "/tmp", (int)getpid());
    test_formulas(&rng);
    test_model("qwen35-tiny", KZ_T_Q8_0, path, &rng);
    test_model("qwen35-tiny", KZ_T_F32, path, &rng);
    test_model("qwen3-tiny", KZ_T_Q4_0, path, &rng);
    test_bos(path);
    KT_END();
}
