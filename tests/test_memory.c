/* Memory budget (src/api/memory.c): kz_memory_estimate against the resident memory this process
 * actually gains (VmRSS) when it loads the model, runs a turn and touches a full context, on
 * small random-weight models with real layer shapes (Q4_0, repacked where the CPU packs); and
 * its KV / GDN terms against the formulas from the shapes (docs/qwen35.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "forward/seq.h"
#include "model/types.h"
#include "tools/mkmodel/mkmodel.h"

static long long vmrss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) { v = atoll(line + 6); break; }
    fclose(f);
    return v;
}

static int quiet(const char *p, size_t n, void *u) { (void)p; (void)n; (void)u; return 0; }

/* predicted vs measured for one model at n_ctx; returns the relative error. Run in a fresh
 * child process: memory freed by an earlier model stays in malloc's free lists (and raises its
 * mmap threshold), which would hide part of the next one. */
static double measure_here(const char *path, int n_ctx, kz_kv_type kv) {
    char err[256];
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_context_params cp = kz_context_default_params();
    cp.n_ctx = n_ctx;
    cp.kv_type = kv;
    kz_memory_report r;
    CHECKF(kz_memory_estimate(path, &mp, &cp, &r, err, sizeof err) == 0, "%s", err);
    const long long before = vmrss_kib();
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    kz_context *c = m ? kz_context_new(m, &cp, err, sizeof err) : NULL;
    CHECKF(m && c, "%s", err);
    if (!c) { kz_model_free(m); return 1.0; }
    kz_memory_report rm;
    CHECK(kz_memory_estimate_model(m, &cp, &rm, err, sizeof err) == 0);
    CHECK(rm.total == r.total); /* the same prediction before and after loading */
    kz_stats st;
    CHECK(kz_generate(c, "You are a helpful assistant.", "Hello, how are you?", 2, quiet, NULL, &st) == 0);
    kz_seq_touch(kz_context_seq(c));
    const long long after = vmrss_kib();
    const double meas = (double)(after - before) * 1024.0, e = ((double)r.total - meas) / meas;
    printf("%s n_ctx %d: predicted %.1f MiB (model %.1f, context %.1f: KV %.1f), measured %.1f MiB, error %+.2f %%\n",
           path, n_ctx, r.total / 1048576.0, r.model_total / 1048576.0, r.context_total / 1048576.0, r.kv / 1048576.0,
           meas / 1048576.0, 100 * e);
    kz_context_free(c);
    kz_model_free(m);
    return e;
}

static double measure(const char *path, int n_ctx, kz_kv_type kv) {
    int fd[2];
    double e = 1.0;
    if (pipe(fd)) return e;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        kt_fail = 0;
        double r = measure_here(path, n_ctx, kv);
        if (kt_fail) r = 1.0;
        ssize_t w = write(fd[1], &r, sizeof r);
        fflush(stdout);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    if (pid > 0 && read(fd[0], &e, sizeof e) != (ssize_t)sizeof e) e = 1.0;
    close(fd[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return e;
}

static int write_model(const char *preset, int n_layer, int n_vocab, const char *path) {
    kz_mkmodel_cfg cfg;
    char err[256];
    if (kz_mkmodel_preset(preset, &cfg)) return -1;
    cfg.n_layer = n_layer;
    if (n_vocab) cfg.n_vocab = n_vocab;
    cfg.wtype = KZ_T_Q4_0;
    cfg.n_threads = 2;
    if (kz_mkmodel_write(&cfg, path, err, sizeof err)) { fprintf(stderr, "mkmodel: %s\n", err); return -1; }
    return 0;
}

/* the KV and GDN terms from the shapes alone */
static void test_formulas(const char *q3, const char *q35) {
    char err[256];
    kz_context_params cp = kz_context_default_params();
    kz_memory_report a, b, q;
    cp.n_ctx = 1000;
    CHECK(kz_memory_estimate(q3, NULL, &cp, &a, err, sizeof err) == 0);
    cp.n_ctx = 3000;
    CHECK(kz_memory_estimate(q3, NULL, &cp, &b, err, sizeof err) == 0);
    cp.kv_type = KZ_KV_Q8_0;
    CHECK(kz_memory_estimate(q3, NULL, &cp, &q, err, sizeof err) == 0);
    /* qwen3-0.6b shapes, 4 layers: 8 kv heads x 128 dims, K and V, f16 */
    CHECK(a.kv == 4ull * 2 * 1000 * 8 * 128 * 2);
    CHECK(b.kv == 3 * a.kv && b.model_total == a.model_total && a.gdn_state == 0 && a.checkpoints == 0);
    CHECK(q.kv == 4ull * 2 * 3000 * 8 * (128 / 32) * 34); /* Q8_0 blocks of 32: 34 bytes */
    CHECK(a.chat_checkpoint == 1000 * 4); /* a qwen3 chat checkpoint: its tokens only */
    /* the file's pages read for weights: no more than the file's own pages (with no repack on
     * this CPU, every matrix of the file is mapped: then equal) */
    CHECK(a.total == a.model_total + a.context_total && a.weights_file <= (a.file_bytes + 4095) / 4096 * 4096);
    /* qwen35-0.8b shapes, 4 layers: one attention layer (2 kv heads x 256), three GDN layers */
    cp = kz_context_default_params();
    cp.n_ctx = 2048;
    CHECK(kz_memory_estimate(q35, NULL, &cp, &a, err, sizeof err) == 0);
    CHECK(a.kv == 1ull * 2 * 2048 * 2 * 256 * 2);
    const unsigned long long conv = (2ull * 16 * 128 + 2048) * 3, ssm = 16ull * 128 * 128;
    CHECK(a.gdn_state == 2 * ((3 * (conv + ssm) * 4 + 4095) / 4096 * 4096));
    CHECK(a.chat_checkpoint == 3 * (conv + ssm) * 4 + 2048 * 4);
    /* errors */
    CHECK(kz_memory_estimate("/nonexistent.gguf", NULL, NULL, &a, err, sizeof err) == -1 && strstr(err, "nonexistent"));
    cp.n_ctx = -5;
    CHECK(kz_memory_estimate(q3, NULL, &cp, &a, err, sizeof err) == -1 && strstr(err, "n_ctx"));
}

int main(void) {
    char q3[256], q35[256];
    snprintf(q3, sizeof q3, "/tmp/kz_test_memory_%d_qwen3.gguf", (int)getpid());
    snprintf(q35, sizeof q35, "/tmp/kz_test_memory_%d_qwen35.gguf", (int)getpid());
    /* real layer shapes, fewer layers and (qwen35) a smaller vocabulary: ~110 and ~60 MB files */
    CHECK(write_model("qwen3-0.6b", 4, 0, q3) == 0);
    CHECK(write_model("qwen35-0.8b", 4, 65536, q35) == 0);
#ifdef __SANITIZE_ADDRESS__
    /* ASan's allocator and shadow memory make RSS unlike a normal build's: formulas only */
    const int rss = 0;
#else
    const int rss = 1;
#endif
    if (rss) {
    double e1 = measure(q3, 4096, KZ_KV_F16);
    double e2 = measure(q35, 8192, KZ_KV_F16);
    double e3 = measure(q3, 2048, KZ_KV_Q8_0);
    CHECKF(e1 > -0.05 && e1 < 0.05, "qwen3 error %.2f %%", 100 * e1);
    CHECKF(e2 > -0.05 && e2 < 0.05, "qwen35 error %.2f %%", 100 * e2);
    CHECKF(e3 > -0.05 && e3 < 0.05, "qwen3 q8_0 KV error %.2f %%", 100 * e3);
    }
    test_formulas(q3, q35);
    unlink(q3);
    unlink(q35);
    KT_END();
}
