/* kazeia bench --cascade: resident memory of a thinker + guard cascade, measured and predicted.
 *
 * For each model in turn (thinker, then guard): kz_memory_estimate predicts its bytes from the
 * file and the parameters; then the model is loaded, a context made, one short turn generated
 * with a system prompt (every weight a forward pass reads is touched, the cancel copy of the GDN
 * state and the system-prompt snapshot are made), and the KV cache, scratch arena and matmul
 * work area are touched page by page as a full context would (kz_seq_touch). VmRSS
 * (/proc/self/status) and RssFile / RssAnon (/proc/self/smaps_rollup) are read before the
 * load, after it, after the turn and after the touch: the model's share is what the load made
 * resident plus the file pages the turn read, the context's the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/args.h"
#include "api/api.h"
#include "forward/seq.h"
#include "kazeia.h"

typedef struct {
    long long rss, file, anon; /* KiB */
} rss_t;

static long long field(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k)) { v = atoll(line + k); break; }
    fclose(f);
    return v;
}
static rss_t rss_now(void) {
    rss_t r;
    r.rss = field("/proc/self/status", "VmRSS:");
    r.file = field("/proc/self/smaps_rollup", "Rss_File:");
    if (r.file < 0) r.file = field("/proc/self/status", "RssFile:");
    r.anon = field("/proc/self/smaps_rollup", "Rss_Anon:");
    if (r.anon < 0) r.anon = field("/proc/self/status", "RssAnon:");
    return r;
}

static double mib(long long kib) { return kib / 1024.0; }
static double mibb(uint64_t b) { return b / 1048576.0; }

static int quiet_piece(const char *p, size_t n, void *u) { (void)p; (void)n; (void)u; return 0; }

typedef struct {
    const char *role, *path;
    kz_memory_report pred;
    rss_t r0, rl, r1, r2; /* before, after the load, after the turn, after touching the context */
} row;

static int measure(row *w, int n_ctx, int threads, kz_kv_type kv, int repack, kz_model **mo, kz_context **co) {
    char err[512];
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = threads;
    if (repack >= 0) mp.repack_weights = repack;
    kz_context_params cp = kz_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.kv_type = kv;
    if (kz_memory_estimate(w->path, &mp, &cp, &w->pred, err, sizeof err)) { fprintf(stderr, "kazeia bench: %s\n", err); return -1; }
    w->r0 = rss_now();
    kz_model *m = kz_model_load(w->path, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "kazeia bench: %s\n", err); return -1; }
    w->rl = rss_now();
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) { fprintf(stderr, "kazeia bench: %s\n", err); kz_model_free(m); return -1; }
    kz_stats st;
    if (kz_generate(c, "You are a helpful assistant.", "Hello, how are you today?", 2, quiet_piece, NULL, &st)) {
        fprintf(stderr, "kazeia bench: %s\n", kz_context_error(c));
        kz_context_free(c);
        kz_model_free(m);
        return -1;
    }
    w->r1 = rss_now();
    kz_seq_touch(kz_context_seq(c));
    w->r2 = rss_now();
    *mo = m;
    *co = c;
    return 0;
}

static void print_row(const row *w, int json, int last) {
    const kz_memory_report *p = &w->pred;
    /* the model: what the load made resident and the file pages the turn read; the context: the
     * rest (its anonymous memory) */
    long long model_kib = w->rl.rss - w->r0.rss + (w->r1.file - w->rl.file), tot = w->r2.rss - w->r0.rss;
    long long ctx_kib = tot - model_kib;
    double err_pct = 100.0 * ((double)p->total / 1024.0 - (double)tot) / (double)tot;
    if (json) {
        printf("  {\"role\": \"%s\", \"path\": \"%s\", \"pred_model\": %llu, \"pred_context\": %llu, \"pred_total\": %llu, "
               "\"pred_weights_file\": %llu, \"pred_repacked\": %llu, \"pred_model_heap\": %llu, \"pred_kv\": %llu, "
               "\"pred_gdn_state\": %llu, \"pred_checkpoints\": %llu, \"pred_scratch\": %llu, "
               "\"meas_model\": %lld, \"meas_context\": %lld, \"meas_total\": %lld, "
               "\"meas_file\": %lld, \"meas_anon\": %lld, \"err_pct\": %.2f}%s\n",
               w->role, w->path, (unsigned long long)p->model_total, (unsigned long long)p->context_total,
               (unsigned long long)p->total, (unsigned long long)p->weights_file,
               (unsigned long long)p->weights_repacked, (unsigned long long)p->model_heap,
               (unsigned long long)p->kv, (unsigned long long)p->gdn_state, (unsigned long long)p->checkpoints,
               (unsigned long long)p->scratch, model_kib * 1024, ctx_kib * 1024, tot * 1024,
               (w->r2.file - w->r0.file) * 1024, (w->r2.anon - w->r0.anon) * 1024, err_pct, last ? "" : ",");
        return;
    }
    printf("%-8s %s\n", w->role, w->path);
    printf("  model    predicted %9.1f MiB (file pages %.1f, repacked %.1f, heap %.1f; file %.1f)   measured %9.1f MiB\n",
           mibb(p->model_total), mibb(p->weights_file), mibb(p->weights_repacked), mibb(p->model_heap),
           mibb(p->file_bytes), mib(model_kib));
    printf("  context  predicted %9.1f MiB (KV %.1f, GDN state %.1f, checkpoints %.1f, scratch %.1f)   measured %9.1f MiB\n",
           mibb(p->context_total), mibb(p->kv), mibb(p->gdn_state), mibb(p->checkpoints), mibb(p->scratch), mib(ctx_kib));
    printf("  total    predicted %9.1f MiB   measured %9.1f MiB (RssFile %+.1f, RssAnon %+.1f)   error %+.2f %%\n",
           mibb(p->total), mib(tot), mib(w->r2.file - w->r0.file), mib(w->r2.anon - w->r0.anon), err_pct);
}

static void cascade_usage(FILE *f) {
    fprintf(f, "usage: kazeia bench --cascade -m THINKER.gguf --guard GUARD.gguf [options]\n"
               "  resident memory of each model and context, predicted (kz_memory_estimate) and measured (RSS)\n"
               "  -c N          context of both (default 4096); --guard-ctx N: the guard's (default: -c)\n"
               "  -t T          threads (default: all CPUs)\n"
               "  --kv f16|f32|q8_0  KV cache type (default f16)\n"
               "  --no-repack   keep the Q4_0 weights zero-copy\n"
               "  --predict     only the prediction (nothing is loaded)\n"
               "  --json        one JSON object on stdout\n");
}

int cmd_bench_cascade(int argc, char **argv) {
    const char *thinker = NULL, *guard = NULL, *kvs = "f16";
    long n_ctx = 4096, g_ctx = -1, threads = 0;
    int json = 0, repack = -1, predict = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--cascade")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cascade_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (!strcmp(a, "--predict")) { predict = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia bench: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) thinker = v;
        else if (!strcmp(a, "--guard")) guard = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) bad = kz_arg_long("kazeia bench", a, v, 1, 1 << 24, &n_ctx);
        else if (!strcmp(a, "--guard-ctx")) bad = kz_arg_long("kazeia bench", a, v, 1, 1 << 24, &g_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_long("kazeia bench", a, v, 1, 512, &threads);
        else if (!strcmp(a, "--kv")) kvs = v;
        else { fprintf(stderr, "kazeia bench: unknown option '%s'\n", a); cascade_usage(stderr); return 2; }
        if (bad) return 2;
    }
    if (!thinker && !guard) { cascade_usage(stderr); return 2; }
    kz_kv_type kv;
    if (!strcmp(kvs, "f16")) kv = KZ_KV_F16;
    else if (!strcmp(kvs, "f32")) kv = KZ_KV_F32;
    else if (!strcmp(kvs, "q8_0")) kv = KZ_KV_Q8_0;
    else { fprintf(stderr, "kazeia bench: bad value '%s' for --kv (expected f16, f32 or q8_0)\n", kvs); return 2; }
    if (g_ctx < 0) g_ctx = n_ctx;

    if (predict) {
        const char *paths[2] = {thinker, guard}, *roles[2] = {"thinker", "guard"};
        const long ctxs[2] = {n_ctx, g_ctx};
        uint64_t total = 0;
        for (int k = 0; k < 2; k++) {
            if (!paths[k]) continue;
            char err[512];
            kz_model_params mp = kz_model_default_params();
            mp.n_threads = (int)threads;
            if (repack >= 0) mp.repack_weights = repack;
            kz_context_params cp = kz_context_default_params();
            cp.n_ctx = (int)ctxs[k];
            cp.n_threads = (int)threads;
            cp.kv_type = kv;
            kz_memory_report r;
            if (kz_memory_estimate(paths[k], &mp, &cp, &r, err, sizeof err)) { fprintf(stderr, "kazeia bench: %s\n", err); return 1; }
            printf("%-8s n_ctx %-6ld model %9.1f MiB  context %9.1f MiB (KV %.1f, GDN %.1f, checkpoints %.1f, scratch %.1f)"
                   "  total %9.1f MiB  %s\n",
                   roles[k], ctxs[k], mibb(r.model_total), mibb(r.context_total), mibb(r.kv), mibb(r.gdn_state),
                   mibb(r.checkpoints), mibb(r.scratch), mibb(r.total), paths[k]);
            total += r.total;
        }
        printf("TOTAL predicted %.1f MiB (%.2f GiB), KV %s\n", mibb(total), total / 1073741824.0, kvs);
        return 0;
    }
    row rows[2];
    int nr = 0, rc = 0;
    kz_model *ms[2] = {NULL, NULL};
    kz_context *cs[2] = {NULL, NULL};
    const char *paths[2] = {thinker, guard}, *roles[2] = {"thinker", "guard"};
    const long ctxs[2] = {n_ctx, g_ctx};
    rss_t start = rss_now();
    for (int k = 0; k < 2 && !rc; k++) {
        if (!paths[k]) continue;
        memset(&rows[nr], 0, sizeof rows[nr]);
        rows[nr].role = roles[k];
        rows[nr].path = paths[k];
        if (measure(&rows[nr], (int)ctxs[k], (int)threads, kv, repack, &ms[k], &cs[k])) rc = 1;
        else nr++;
    }
    if (!rc) {
        uint64_t pred = 0;
        for (int i = 0; i < nr; i++) pred += rows[i].pred.total;
        rss_t end = rss_now();
        long long meas = end.rss - start.rss;
        double e = 100.0 * ((double)pred / 1024.0 - (double)meas) / (double)meas;
        if (json) {
            printf("{\"n_ctx\": %ld, \"guard_ctx\": %ld, \"kv\": \"%s\", \"rows\": [\n", n_ctx, g_ctx, kvs);
            for (int i = 0; i < nr; i++) print_row(&rows[i], 1, i == nr - 1);
            printf("], \"pred_total\": %llu, \"meas_total\": %lld, \"meas_vmrss_end\": %lld, \"err_pct\": %.2f}\n",
                   (unsigned long long)pred, meas * 1024, end.rss * 1024, e);
        } else {
            printf("cascade memory: n_ctx %ld (guard %ld), KV %s; process VmRSS %.1f MiB before loading\n", n_ctx, g_ctx,
                   kvs, mib(start.rss));
            for (int i = 0; i < nr; i++) print_row(&rows[i], 0, 0);
            printf("TOTAL    predicted %9.1f MiB   measured %9.1f MiB (VmRSS now %.1f MiB)   error %+.2f %%\n",
                   mibb(pred), mib(meas), mib(end.rss), e);
        }
    }
    for (int k = 0; k < 2; k++) {
        kz_context_free(cs[k]);
        kz_model_free(ms[k]);
    }
    return rc;
}
