/* kz_model_params.repack_weights: the 16-row packed Q4_0 copy must give the same logits bit for
 * bit as the mmap'd weights (prefill chunks of several sizes, then decode steps), on both archs.
 * Where the CPU level has no packed kernel the option must be a no-op (no copy made).
 * KZ_TEST_SMALL=1 (qemu): 36 tokens, 3 schedules. Two threads: under qemu-user this test found a
 * lost wakeup in the pool's sleep handshake (the caller slept on cv_done with pending already 0,
 * about 1 run in 10), fixed in threadpool.c with a read-modify-write announcement. */
#include <stdlib.h>
#include <unistd.h>

#include "kazeia.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "model/model.h"
#include "matmul/matmul.h"
#include "model/types.h"

static int n_packed(const kz_model *m) {
    int n = m->output.q4_0_16x4 != NULL;
    for (int i = 0; i < m->hp.n_layer; i++) {
        const kz_layer *l = &m->layers[i];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++) n += ws[j]->q4_0_16x4 != NULL;
    }
    return n;
}

/* logits of n tokens: a prefill of np tokens (want_all), then one decode step per token */
static float *run(kz_model *m, const int32_t *tok, int n, int np, int nv, int nth) {
    char err[256];
    kz_context_params cp = kz_context_default_params();
    cp.n_ctx = n + 4;
    cp.n_threads = nth;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) { fprintf(stderr, "context: %s\n", err); return NULL; }
    float *lg = malloc(sizeof(float) * (size_t)n * nv);
    int ok = kz_eval(c, tok, np, lg, 1) == 0;
    for (int i = np; i < n && ok; i++) ok = kz_eval(c, tok + i, 1, lg + (size_t)i * nv, 0) == 0;
    kz_context_free(c);
    if (!ok) { free(lg); return NULL; }
    return lg;
}

int main(void) {
    const char *presets[2] = {"qwen35-tiny", "qwen3-tiny"};
    const int have = kz_q4_0_16x4_supported();
    const int small = getenv("KZ_TEST_SMALL") && atoi(getenv("KZ_TEST_SMALL")), nth = 2;
    for (int k = 0; k < 2; k++) {
        char path[256], err[256];
        snprintf(path, sizeof path, "/tmp/kz_test_repack_%d_%s.gguf", (int)getpid(), presets[k]);
        kz_mkmodel_cfg cfg;
        CHECK(kz_mkmodel_preset(presets[k], &cfg) == 0);
        cfg.wtype = KZ_T_Q4_0;
        cfg.n_threads = 1;
        if (kz_mkmodel_write(&cfg, path, err, sizeof err) != 0) { fprintf(stderr, "mkmodel: %s\n", err); CHECK(0); continue; }
        kz_model_params mp = kz_model_default_params();
        mp.n_threads = nth;
        CHECK(mp.repack_weights == 1); /* the default */
        mp.repack_weights = 0;
        kz_model *m0 = kz_model_load(path, &mp, err, sizeof err);
        mp.repack_weights = 1;
        kz_model *m1 = kz_model_load(path, &mp, err, sizeof err);
        CHECK(m0 && m1);
        if (!m0 || !m1) { kz_model_free(m0); kz_model_free(m1); unlink(path); continue; }
        const int np1 = n_packed(m1);
        CHECK(n_packed(m0) == 0);
        CHECKF(have ? np1 > 0 : np1 == 0, "%s: %d matrices packed (packed kernel %s)", presets[k], np1,
               have ? "present" : "absent");
        const int nv = kz_model_n_vocab(m0), n = small ? 36 : 90;
        int32_t tok[90];
        unsigned long long s = 7 + (unsigned long long)k;
        for (int i = 0; i < n; i++) tok[i] = (int32_t)(kt_rng(&s) % (unsigned long long)nv);
        const int NP[] = { 1, 9, small ? 36 : 70, 90 }, n_sched = small ? 3 : 4;
        for (int pi = 0; pi < n_sched; pi++) {
            float *a = run(m0, tok, n, NP[pi], nv, nth), *b = run(m1, tok, n, NP[pi], nv, nth);
            CHECK(a && b);
            if (a && b) {
                long bad = 0;
                for (size_t i = 0; i < (size_t)n * nv; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
                int finite = 1;
                for (size_t i = 0; i < (size_t)n * nv; i++) finite &= isfinite(a[i]) && a[i] != 0.0f;
                CHECK(finite);
                CHECKF(bad == 0, "%s prefill %d: %ld of %d logits differ with repacked weights", presets[k], NP[pi],
                       bad, n * nv);
            }
            free(a);
            free(b);
        }
        printf("  %s: %d matrices packed, logits of %d prefill/decode schedules identical\n", presets[k], np1, n_sched);
        kz_model_free(m0);
        kz_model_free(m1);
        unlink(path);
    }
    KT_END();
}
