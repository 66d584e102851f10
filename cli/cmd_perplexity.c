/* kazeia perplexity: llama-perplexity's measure (non-overlapping windows of n_ctx tokens, the
 * second half of each scored, BOS first where the vocabulary adds one), and its KL-divergence
 * mode: --kl-divergence-base saves a reference model's log-probabilities in llama.cpp's file
 * format, --kl-divergence compares another model (a quantisation) with them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "eval/eval.h"
#include "forward/seq.h"
#include "sys/clock.h"

#define PROG "kazeia perplexity"

static void ppl_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia perplexity -m MODEL.gguf -f TEXT [options]\n"
            "  -c N                      window (context) size in tokens (default 512)\n"
            "  -b N                      tokens per forward chunk (default 512, at most -c)\n"
            "  --chunks N                evaluate at most N windows (default: all the text holds)\n"
            "  -t N                      threads (default: all CPUs)\n"
            "  --kv f32|f16|q8_0         KV cache type (default f16)\n"
            "  --kl-divergence-base F    also save the log-probabilities to F (llama.cpp's format)\n"
            "  --kl-divergence F         compare with the reference saved in F (tokens come from F;\n"
            "                            -f and -c are not needed): mean KLD, top-1 agreement, PPLs\n"
            "The text needs at least 2 windows of tokens. Scored: positions n_ctx/2 .. n_ctx-2 of each\n"
            "window, as llama-perplexity does, so the numbers compare.\n");
}

typedef struct {
    const int32_t *tok; /* the window's tokens */
    int first, nv;
    kz_ppl ppl;
    /* --kl-divergence-base */
    uint16_t *rows_out; /* [n_ctx - 1 - first][words] */
    /* --kl-divergence */
    const uint16_t *rows_in;
    kz_kld kld;
    float *kld_values;
    long n_kld_values;
    int nonfinite;
    size_t words;
} score_ctx;

static int score_row(void *user, int pos, const float *logits) {
    score_ctx *c = user;
    const int tok = c->tok[pos + 1];
    const size_t r = (size_t)(pos - c->first);
    double nll;
    if (c->rows_in) {
        c->kld_values[c->n_kld_values++] = (float)kz_kld_add(&c->kld, logits, c->nv, c->rows_in + r * c->words, tok);
        return 0;
    }
    if (c->rows_out) nll = kz_klrow_encode(logits, c->nv, tok, c->rows_out + r * c->words);
    else nll = kz_nll(logits, c->nv, tok);
    if (!isfinite(nll)) { c->nonfinite = 1; return 1; }
    kz_ppl_add(&c->ppl, nll);
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
static double percentile(const float *v, long n, double f) {
    if (n <= 0) return 0;
    double p = f * (double)(n - 1);
    long ip = (long)p;
    p -= (double)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

static void print_kld(const score_ctx *c) {
    const kz_kld *k = &c->kld;
    double lp, lp_e, lb, lb_e, kl, kl_e, pd2, pd2_e;
    kz_mean_err(k->nll, k->nll2, k->count, &lp, &lp_e);
    kz_mean_err(k->nll_base, k->nll_base2, k->count, &lb, &lb_e);
    kz_mean_err(k->kld, k->kld2, k->count, &kl, &kl_e);
    kz_mean_err(k->p_diff2, k->p_diff4, k->count, &pd2, &pd2_e);
    const double cov = k->count >= 10 ? (k->nll_nll_base / k->count - (k->nll / k->count) * (k->nll_base / k->count)) /
                                            (double)(k->count - 1)
                                      : 0.0;
    const double ppl = exp(lp), ppl_e = ppl * lp_e, pplb = exp(lb), pplb_e = pplb * lb_e;
    const double lr = lp - lb, lr_e = sqrt(fmax(0, lp_e * lp_e + lb_e * lb_e - 2 * cov));
    const double dp = ppl - pplb, dp_e = sqrt(fmax(0, ppl_e * ppl_e + pplb_e * pplb_e - 2 * ppl * pplb * cov));
    const double top = (double)k->n_same_top / (double)k->count;
    const double top_e = k->count > 1 ? sqrt(top * (1 - top) / (double)(k->count - 1)) : 0;
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl_e);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", pplb, pplb_e);
    if (lp_e > 0 && lb_e > 0) printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cov / (lp_e * lb_e));
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, lr_e);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lr), exp(lr) * lr_e);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", dp, dp_e);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", kl, kl_e);
    float *v = c->kld_values;
    long n = c->n_kld_values;
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    printf("Maximum KLD: %10.6f\n", n ? v[n - 1] : 0.0f);
    printf("99.0%%   KLD: %10.6f\n", percentile(v, n, 0.99));
    printf("Median  KLD: %10.6f\n", percentile(v, n, 0.5));
    printf("Minimum KLD: %10.6f\n", n ? v[0] : 0.0f);
    printf("\n====== Token probability statistics ======\n");
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * sqrt(pd2), pd2 > 0 ? 100.0 * 0.5 / sqrt(pd2) * pd2_e : 0.0);
    printf("Maximum |Δp|: %6.3f%%\n", 100.0 * k->max_p_diff);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * top, 100.0 * top_e);
}

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *kl_base = NULL, *kl_in = NULL, *kvs = "f16";
    int n_ctx = 512, n_batch = 512, n_chunks = -1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { ppl_usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, PROG ": option %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) text_path = v;
        else if (!strcmp(a, "--kl-divergence-base")) kl_base = v;
        else if (!strcmp(a, "--kl-divergence")) kl_in = v;
        else if (!strcmp(a, "--kv")) kvs = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (kz_arg_int(PROG, a, v, 4, 1 << 20, &n_ctx)) return 2; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (kz_arg_int(PROG, a, v, 1, 1 << 20, &n_batch)) return 2; }
        else if (!strcmp(a, "--chunks")) { if (kz_arg_int(PROG, a, v, 1, 1 << 30, &n_chunks)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (kz_arg_int(PROG, a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, PROG ": unknown option '%s'\n", a); ppl_usage(stderr); return 2; }
    }
    if (!model || (!text_path && !kl_in)) {
        fprintf(stderr, PROG ": -m and -f are required (-f not with --kl-divergence)\n");
        ppl_usage(stderr);
        return 2;
    }
    if (kl_base && kl_in) { fprintf(stderr, PROG ": --kl-divergence-base and --kl-divergence exclude each other\n"); return 2; }
    kz_kv_type kv;
    if (!strcmp(kvs, "f32")) kv = KZ_KV_F32;
    else if (!strcmp(kvs, "f16")) kv = KZ_KV_F16;
    else if (!strcmp(kvs, "q8_0")) kv = KZ_KV_Q8_0;
    else { fprintf(stderr, PROG ": unknown --kv '%s' (use f32, f16 or q8_0)\n", kvs); return 2; }

    char err[512];
    int rc = 1, n_tok = 0, n_chunk = 0;
    int32_t *tok = NULL, bos = -1;
    char *text = NULL, *tmp_path = NULL;
    float *rows = NULL;
    FILE *fin = NULL, *fout = NULL;
    kz_seq *s = NULL;
    score_ctx c = {0};

    kz_model_params mp = kz_model_default_params();
    mp.n_threads = threads;
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, PROG ": %s\n", err); return 1; }
    const int nv = kz_model_n_vocab(m);
    c.nv = nv;
    c.words = kz_klrow_words(nv);

    if (kl_in) { /* the reference's tokens and window size */
        if (!(fin = fopen(kl_in, "rb"))) { fprintf(stderr, PROG ": cannot open '%s': %s\n", kl_in, strerror(errno)); goto out; }
        char magic[8];
        uint32_t fctx;
        int32_t fnv, fnc;
        if (fread(magic, 1, 8, fin) != 8 || memcmp(magic, "_logits_", 8) || fread(&fctx, 4, 1, fin) != 1 ||
            fread(&fnv, 4, 1, fin) != 1 || fread(&fnc, 4, 1, fin) != 1) {
            fprintf(stderr, PROG ": '%s' is not a log-probability file (--kl-divergence-base output)\n", kl_in);
            goto out;
        }
        if (fnv != nv) {
            fprintf(stderr, PROG ": '%s' was made with a vocabulary of %d tokens, this model has %d\n", kl_in, fnv, nv);
            goto out;
        }
        if (fctx < 4 || fctx > (1u << 20) || fnc < 1 || (int64_t)fnc * fctx > (1 << 30)) {
            fprintf(stderr, PROG ": '%s': bad window size %u or chunk count %d\n", kl_in, fctx, fnc);
            goto out;
        }
        n_ctx = (int)fctx;
        n_chunk = fnc;
        n_tok = n_ctx * n_chunk;
        if (!(tok = malloc((size_t)n_tok * sizeof *tok)) || fread(tok, 4, (size_t)n_tok, fin) != (size_t)n_tok) {
            fprintf(stderr, PROG ": '%s' is truncated (tokens)\n", kl_in);
            goto out;
        }
        for (int i = 0; i < n_tok; i++)
            if (tok[i] < 0 || tok[i] >= nv) { fprintf(stderr, PROG ": '%s': token %d out of range\n", kl_in, tok[i]); goto out; }
        if ((bos = kz_eval_bos(m, err, sizeof err)) == -2) { fprintf(stderr, PROG ": %s\n", err); goto out; }
        if (n_chunks > 0 && n_chunks < n_chunk) n_chunk = n_chunks;
    } else {
        size_t len;
        if (!(text = kz_eval_read_text(text_path, &len, err, sizeof err))) { fprintf(stderr, PROG ": %s\n", err); goto out; }
        if ((n_tok = kz_eval_tokenize(m, text, len, &tok, &bos, err, sizeof err)) < 0) {
            fprintf(stderr, PROG ": %s: %s\n", text_path, err);
            goto out;
        }
        if (n_tok < 2 * n_ctx) {
            fprintf(stderr, PROG ": you need at least %d tokens for a context of %d; '%s' tokenizes to only %d\n",
                    2 * n_ctx, n_ctx, text_path, n_tok);
            goto out;
        }
        n_chunk = n_tok / n_ctx;
        if (n_chunks > 0 && n_chunks < n_chunk) n_chunk = n_chunks;
    }
    if (n_batch > n_ctx) n_batch = n_ctx;
    const int first = n_ctx / 2, n_scored = n_ctx - 1 - first;

    if (!(s = kz_seq_new(m, n_ctx, n_batch, threads, kv, err, sizeof err))) { fprintf(stderr, PROG ": %s\n", err); goto out; }
    if (!(rows = malloc((size_t)n_batch * nv * sizeof *rows))) {
        fprintf(stderr, PROG ": out of memory for %d x %d logits\n", n_batch, nv);
        goto out;
    }
    if (kl_base || kl_in) {
        uint16_t *r = malloc((size_t)n_scored * c.words * sizeof *r);
        if (!r) { fprintf(stderr, PROG ": out of memory for the log-probabilities of a window\n"); goto out; }
        if (kl_base) c.rows_out = r;
        else c.rows_in = r;
    }
    if (kl_in && !(c.kld_values = malloc((size_t)n_chunk * n_scored * sizeof *c.kld_values))) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    if (kl_base) { /* beside the target, renamed when complete */
        size_t pl = strlen(kl_base);
        if (!(tmp_path = malloc(pl + 16))) goto out;
        snprintf(tmp_path, pl + 16, "%s.tmp.XXXXXX", kl_base);
        int fd = mkstemp(tmp_path);
        if (fd < 0 || !(fout = fdopen(fd, "wb"))) {
            fprintf(stderr, PROG ": cannot create a file beside '%s': %s\n", kl_base, strerror(errno));
            if (fd >= 0) { close(fd); unlink(tmp_path); }
            free(tmp_path);
            tmp_path = NULL;
            goto out;
        }
        uint32_t u = (uint32_t)n_ctx;
        int32_t i_nv = nv, i_nc = n_chunk;
        if (write_all(fout, "_logits_", 8) || write_all(fout, &u, 4) || write_all(fout, &i_nv, 4) ||
            write_all(fout, &i_nc, 4) || write_all(fout, tok, (size_t)n_chunk * n_ctx * sizeof *tok))
            goto write_fail;
    }

    fprintf(stderr, PROG ": %d tokens, %d chunks, n_ctx=%d, batch_size=%d, scoring %d tokens per chunk%s\n", n_tok,
            n_chunk, n_ctx, n_batch, n_scored, bos >= 0 ? ", BOS first" : "");
    if (kl_in) printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Same top p\n");
    double t0 = kz_now_ms();
    for (int i = 0; i < n_chunk; i++) {
        const int32_t *w = tok + (size_t)i * n_ctx;
        c.tok = w;
        c.first = first;
        if (kl_in && fread((void *)c.rows_in, sizeof(uint16_t), (size_t)n_scored * c.words, fin) != (size_t)n_scored * c.words) {
            fprintf(stderr, PROG ": '%s' is truncated (log-probabilities of chunk %d)\n", kl_in, i + 1);
            goto out;
        }
        int r = kz_eval_window(m, s, w, n_ctx, first, bos, n_batch, rows, score_row, &c, err, sizeof err);
        if (r < 0) { fprintf(stderr, PROG ": %s\n", err); goto out; }
        if (c.nonfinite) { fprintf(stderr, PROG ": non-finite logits in chunk %d: the model is broken\n", i + 1); goto out; }
        if (fout && write_all(fout, c.rows_out, (size_t)n_scored * c.words * sizeof *c.rows_out)) goto write_fail;
        if (i == 0) {
            double sec = (kz_now_ms() - t0) / 1e3;
            fprintf(stderr, PROG ": %.2f seconds per pass - ETA %.2f minutes\n", sec, sec * (n_chunk - 1) / 60.0);
        }
        if (kl_in) {
            const kz_kld *k = &c.kld;
            double lp, lp_e, lb, lb_e, kl, kl_e;
            kz_mean_err(k->nll, k->nll2, k->count, &lp, &lp_e);
            kz_mean_err(k->nll_base, k->nll_base2, k->count, &lb, &lb_e);
            kz_mean_err(k->kld, k->kld2, k->count, &kl, &kl_e);
            double top = (double)k->n_same_top / (double)k->count;
            printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f %%\n", i + 1, exp(lp),
                   exp(lp) * lp_e, lp - lb, sqrt(lp_e * lp_e + lb_e * lb_e), kl, kl_e, 100.0 * top);
        } else {
            printf("[%d]%.4f,", i + 1, exp(c.ppl.nll / (double)c.ppl.count));
        }
        fflush(stdout);
    }
    double sec = (kz_now_ms() - t0) / 1e3;
    if (kl_in) {
        print_kld(&c);
    } else {
        double e;
        double ppl = kz_ppl_value(&c.ppl, &e);
        printf("\n");
        if (e >= 0) printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, e);
        else printf("Final estimate: PPL = %.4f (standard error undefined: the log-probabilities do not vary)\n", ppl);
    }
    fprintf(stderr, PROG ": %d chunks in %.2f s (%.1f tokens/s)\n", n_chunk, sec, (double)n_chunk * n_ctx / (sec > 0 ? sec : 1e-9));
    if (fout) {
        if (fflush(fout) || fsync(fileno(fout))) goto write_fail;
        FILE *f = fout;
        fout = NULL;
        if (fclose(f)) goto write_fail;
        if (rename(tmp_path, kl_base)) {
            fprintf(stderr, PROG ": cannot rename '%s' to '%s': %s\n", tmp_path, kl_base, strerror(errno));
            goto out;
        }
        free(tmp_path);
        tmp_path = NULL;
        fprintf(stderr, PROG ": log-probabilities of %d chunks saved to %s\n", n_chunk, kl_base);
    }
    rc = 0;
    goto out;
write_fail:
    fprintf(stderr, PROG ": writing '%s' failed: %s\n", kl_base, strerror(errno));
out:
    if (fout) fclose(fout);
    if (tmp_path) { unlink(tmp_path); free(tmp_path); }
    if (fin) fclose(fin);
    free(c.rows_out);
    free((void *)c.rows_in);
    free(c.kld_values);
    free(rows);
    free(tok);
    free(text);
    kz_seq_free(s);
    kz_model_free(m);
    return rc;
}
