/* kazeia imatrix: the importance matrix of a model on a text, as llama-imatrix computes it (the
 * per-column sums of squares of the activations entering every block weight, windows of n_ctx
 * tokens, BOS first where the vocabulary adds one), written in its GGUF format; the perplexity
 * of the second half of each window is printed along, as it does. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "eval/eval.h"
#include "forward/seq.h"
#include "sys/clock.h"

#define PROG "kazeia imatrix"

static void imatrix_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia imatrix -m MODEL.gguf -f TEXT -o IMATRIX.gguf [options]\n"
            "  -c N                    window (chunk) size in tokens (default 512)\n"
            "  -b N                    tokens per forward chunk (default 512, at most -c)\n"
            "  --chunks N              process at most N windows (default: all the text holds)\n"
            "  -t N                    threads (default: all CPUs)\n"
            "  --output-frequency N    also write the file every N chunks (default 10; 0: only at the end)\n"
            "  --process-output        collect output.weight too (llama-imatrix's option; off by default)\n"
            "  --kv f32|f16|q8_0       KV cache type (default f16)\n"
            "The file is llama-imatrix's GGUF format: `kazeia quantize --imatrix` and llama-quantize read it.\n");
}

typedef struct {
    const int32_t *tok;
    int first, nv;
    kz_ppl ppl;
} ppl_ctx;

static int score_row(void *user, int pos, const float *logits) {
    ppl_ctx *c = user;
    if (pos >= c->first) kz_ppl_add(&c->ppl, kz_nll(logits, c->nv, c->tok[pos + 1]));
    return 0;
}

int cmd_imatrix(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *out_path = NULL, *kvs = "f16";
    int n_ctx = 512, n_batch = 512, n_chunks = -1, threads = 0, out_freq = 10, process_output = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { imatrix_usage(stdout); return 0; }
        if (!strcmp(a, "--process-output")) { process_output = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, PROG ": option %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) text_path = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out_path = v;
        else if (!strcmp(a, "--kv")) kvs = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (kz_arg_int(PROG, a, v, 4, 1 << 20, &n_ctx)) return 2; }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (kz_arg_int(PROG, a, v, 1, 1 << 20, &n_batch)) return 2; }
        else if (!strcmp(a, "--chunks")) { if (kz_arg_int(PROG, a, v, 1, 1 << 30, &n_chunks)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (kz_arg_int(PROG, a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--output-frequency")) { if (kz_arg_int(PROG, a, v, 0, 1 << 30, &out_freq)) return 2; }
        else { fprintf(stderr, PROG ": unknown option '%s'\n", a); imatrix_usage(stderr); return 2; }
    }
    if (!model || !text_path || !out_path) {
        fprintf(stderr, PROG ": -m, -f and -o are required\n");
        imatrix_usage(stderr);
        return 2;
    }
    if (n_batch > n_ctx) n_batch = n_ctx;
    kz_kv_type kv;
    if (!strcmp(kvs, "f32")) kv = KZ_KV_F32;
    else if (!strcmp(kvs, "f16")) kv = KZ_KV_F16;
    else if (!strcmp(kvs, "q8_0")) kv = KZ_KV_Q8_0;
    else { fprintf(stderr, PROG ": unknown --kv '%s' (use f32, f16 or q8_0)\n", kvs); return 2; }

    char err[512];
    int rc = 1, n_tok;
    int32_t *tok = NULL, bos;
    char *text = NULL;
    float *rows = NULL;
    kz_seq *s = NULL;
    kz_im_collector col = {.process_output = process_output};
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = threads;
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, PROG ": %s\n", err); return 1; }
    ppl_ctx pc = {.nv = kz_model_n_vocab(m), .first = n_ctx / 2};
    size_t len;
    if (!(text = kz_eval_read_text(text_path, &len, err, sizeof err))) { fprintf(stderr, PROG ": %s\n", err); goto out; }
    if ((n_tok = kz_eval_tokenize(m, text, len, &tok, &bos, err, sizeof err)) < 0) {
        fprintf(stderr, PROG ": %s: %s\n", text_path, err);
        goto out;
    }
    if (n_tok < n_ctx) {
        fprintf(stderr, PROG ": you need at least %d tokens for a context of %d; '%s' tokenizes to only %d\n", n_ctx,
                n_ctx, text_path, n_tok);
        goto out;
    }
    int n_chunk = n_tok / n_ctx;
    if (n_chunks > 0 && n_chunks < n_chunk) n_chunk = n_chunks;
    if (!(col.im = kz_imatrix_new()) || !(rows = malloc((size_t)n_batch * pc.nv * sizeof *rows))) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    if (!(s = kz_seq_new(m, n_ctx, n_batch, threads, kv, err, sizeof err))) { fprintf(stderr, PROG ": %s\n", err); goto out; }
    kz_seq_set_mm_observer(s, kz_im_collect, &col);
    fprintf(stderr, PROG ": computing over %d chunks, n_ctx=%d, batch_size=%d%s\n", n_chunk, n_ctx, n_batch,
            bos >= 0 ? ", BOS first" : "");
    double t0 = kz_now_ms();
    for (int i = 0; i < n_chunk; i++) {
        pc.tok = tok + (size_t)i * n_ctx;
        /* logits of every row, as llama-imatrix asks for: the forward chunks then start at
         * multiples of n_batch like its batches (which decides the ones under 16 rows) */
        int r = kz_eval_window(m, s, pc.tok, n_ctx, 0, bos, n_batch, rows, score_row, &pc, err, sizeof err);
        if (r < 0) { fprintf(stderr, PROG ": %s\n", err); goto out; }
        if (col.failed) { fprintf(stderr, PROG ": %s\n", col.err); goto out; }
        if (i == 0) {
            double sec = (kz_now_ms() - t0) / 1e3;
            fprintf(stderr, PROG ": %.2f seconds per pass - ETA %.2f minutes\n", sec, sec * (n_chunk - 1) / 60.0);
        }
        printf("[%d]%.4f,", i + 1, exp(pc.ppl.nll / (double)pc.ppl.count));
        fflush(stdout);
        if (out_freq > 0 && (i + 1) % out_freq == 0 && i + 1 < n_chunk &&
            kz_imatrix_write(col.im, out_path, text_path, i + 1, n_ctx, err, sizeof err)) {
            fprintf(stderr, "\n" PROG ": %s\n", err);
            goto out;
        }
    }
    double e, ppl = kz_ppl_value(&pc.ppl, &e);
    printf("\n");
    if (e >= 0) printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, e);
    if (kz_imatrix_write(col.im, out_path, text_path, n_chunk, n_ctx, err, sizeof err)) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    double sec = (kz_now_ms() - t0) / 1e3;
    fprintf(stderr, PROG ": %d entries from %d chunks (%.2f s) written to %s\n", kz_imatrix_count(col.im), n_chunk, sec,
            out_path);
    rc = 0;
out:
    kz_imatrix_free(col.im);
    free(rows);
    free(tok);
    free(text);
    kz_seq_free(s);
    kz_model_free(m);
    return rc;
}
