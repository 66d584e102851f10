/* kazeia logits: dump float32 logits of a token sequence (prefill + decode steps), the interface
 * the conformance tests (transformers / llama.cpp) drive. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "args.h"
#include "forward/seq.h"
#include "sys/clock.h"

static void logits_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia logits -m MODEL.gguf --tokens 1,2,3,... -o OUT.bin [options]\n"
            "  --prefill N     evaluate the first N tokens in one call (default: all), the rest one by one\n"
            "  -t THREADS      worker threads (default: all CPUs)\n"
            "  --kv f32|f16|q8_0  KV cache type (default f32)\n"
            "  --n-batch B     max tokens per forward chunk (default 512)\n"
            "  --ctx N         context size (default: number of tokens)\n"
            "  --profile       per-part time breakdown of the prefill on stderr\n"
            "  --no-repack     keep Q4_0 weights zero-copy (default: 16-row repack at load on AVX2/AVX-512/dotprod)\n"
            "Writes float32 little-endian logits [n_tokens][n_vocab] to OUT.bin.\n");
}

/* "1,2,3" -> array; returns count or -1 */
static int parse_tokens(const char *s, int32_t **out) {
    int cap = 64, n = 0;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "kazeia logits: bad token list near '%.20s' (expected comma-separated ids >= 0)\n", p);
            free(t);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *nt = realloc(t, (size_t)cap * sizeof *t);
            if (!nt) { free(t); return -1; }
            t = nt;
        }
        t[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *out = t;
    return n;
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *toks = NULL, *outp = NULL, *kvs = "f32";
    int prefill = -1, threads = 0, n_batch = 0, n_ctx = 0, profile = 0, repack = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { logits_usage(stdout); return 0; }
        if (!strcmp(a, "--profile")) { profile = 1; continue; }
        if (!strcmp(a, "--repack")) { repack = 1; continue; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia logits: option %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--tokens")) toks = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) outp = v;
        else if (!strcmp(a, "--kv")) kvs = v;
        else if (!strcmp(a, "--prefill")) { if (kz_arg_int("kazeia logits", a, v, 0, INT32_MAX, &prefill)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (kz_arg_int("kazeia logits", a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--n-batch")) { if (kz_arg_int("kazeia logits", a, v, 1, INT32_MAX, &n_batch)) return 2; }
        else if (!strcmp(a, "--ctx")) { if (kz_arg_int("kazeia logits", a, v, 1, INT32_MAX, &n_ctx)) return 2; }
        else { fprintf(stderr, "kazeia logits: unknown option '%s'\n", a); logits_usage(stderr); return 2; }
    }
    if (!model || !toks || !outp) {
        fprintf(stderr, "kazeia logits: -m, --tokens and -o are required\n");
        logits_usage(stderr);
        return 2;
    }
    kz_kv_type kv;
    if (!strcmp(kvs, "f32")) kv = KZ_KV_F32;
    else if (!strcmp(kvs, "f16")) kv = KZ_KV_F16;
    else if (!strcmp(kvs, "q8_0")) kv = KZ_KV_Q8_0;
    else { fprintf(stderr, "kazeia logits: unknown --kv '%s' (use f32, f16 or q8_0)\n", kvs); return 2; }

    int32_t *tok = NULL;
    int n = parse_tokens(toks, &tok);
    if (n < 0) return 2;
    if (n == 0) { fprintf(stderr, "kazeia logits: empty token list\n"); free(tok); return 2; }
    if (prefill < 0 || prefill > n) prefill = n;
    if (n_ctx == 0) n_ctx = n;

    char err[512];
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = threads;
    if (repack >= 0) mp.repack_weights = repack;
    double t0 = kz_now_ms();
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "kazeia logits: %s\n", err); free(tok); return 1; }
    double t_load = kz_now_ms() - t0;
    kz_seq *s = kz_seq_new(m, n_ctx, n_batch, threads, kv, err, sizeof err);
    if (!s) { fprintf(stderr, "kazeia logits: %s\n", err); kz_model_free(m); free(tok); return 1; }
    const int nv = kz_model_n_vocab(m);
    float *lg = malloc((size_t)n * (size_t)nv * sizeof(float));
    if (!lg) {
        fprintf(stderr, "kazeia logits: out of memory for %d x %d logits\n", n, nv);
        kz_seq_free(s); kz_model_free(m); free(tok);
        return 1;
    }
    int rc = 0;
    double tp = kz_now_ms();
    kz_seq_profile_enable(s, profile);
    if (prefill > 0 && kz_forward(m, s, tok, prefill, lg, 1, err, sizeof err)) rc = 1;
    tp = kz_now_ms() - tp;
    if (profile && !rc) kz_profile_print(kz_seq_profile(s), stderr);
    kz_seq_profile_enable(s, 0);
    double td = kz_now_ms();
    for (int i = prefill; i < n && !rc; i++)
        if (kz_forward(m, s, tok + i, 1, lg + (size_t)i * nv, 0, err, sizeof err)) rc = 1;
    td = kz_now_ms() - td;
    if (rc) fprintf(stderr, "kazeia logits: %s\n", err);
    if (!rc) {
        FILE *f = fopen(outp, "wb");
        if (!f || fwrite(lg, sizeof(float), (size_t)n * nv, f) != (size_t)n * nv) {
            fprintf(stderr, "kazeia logits: cannot write %s: %s\n", outp, strerror(errno));
            rc = 1;
        }
        if (f && fclose(f) && !rc) { fprintf(stderr, "kazeia logits: cannot write %s\n", outp); rc = 1; }
    }
    if (!rc) {
        fprintf(stderr, "n_vocab %d\n", nv);
        fprintf(stderr, "load %.1f ms; prefill %d tokens %.1f ms (%.1f tok/s); decode %d tokens %.1f ms (%.1f tok/s)\n",
                t_load, prefill, tp, prefill ? prefill * 1e3 / (tp > 0 ? tp : 1e-9) : 0.0, n - prefill, td,
                n > prefill ? (n - prefill) * 1e3 / (td > 0 ? td : 1e-9) : 0.0);
    }
    free(lg);
    kz_seq_free(s);
    kz_model_free(m);
    free(tok);
    return rc;
}
