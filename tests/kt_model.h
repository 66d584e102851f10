/* Tiny random qwen35 models for the C tests (kz_mkmodel's "qwen35-tiny" preset), written to
 * path and loaded with 2 threads; NULL (and the reason on stderr) on failure. Below them, what
 * the MTP tests share: their contexts, a copy of a context's history, a stopping callback. */
#ifndef KT_MODEL_H
#define KT_MODEL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "api/api.h"
#include "tools/mkmodel/mkmodel.h"

static inline kz_model *kt_tiny_qwen35(const char *path, uint32_t wtype, int nextn, uint64_t seed) {
    kz_mkmodel_cfg c;
    char err[256];
    kz_mkmodel_preset("qwen35-tiny", &c);
    c.wtype = wtype;
    c.n_nextn = nextn;
    c.seed = seed;
    c.n_threads = 1;
    if (kz_mkmodel_write(&c, path, err, sizeof err)) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load: %s\n", err);
    return m;
}

/* An MTP test's context, named field by field (what is left out is 0): n_ctx and n_batch 0 are
 * the engine's defaults; kv 0 is KZ_KV_F32, so name the type; temperature 0 is greedy; k drafts
 * per verify, 0 = MTP off; adaptive 1: 0..k per step, 0: always k; draft_vocab 0: the whole head. */
typedef struct {
    int n_ctx, n_batch;
    kz_kv_type kv;
    float temperature;
    uint64_t seed;
    int k, adaptive, draft_vocab;
} kt_mtp_cfg;

/* A context on m with 2 threads (the tiny models' pool) and MTP set as g says; NULL (and the
 * reason on stderr) on failure. */
static inline kz_context *kt_mtp_context(kz_model *m, kt_mtp_cfg g) {
    kz_context_params p = kz_context_default_params();
    p.n_ctx = g.n_ctx;
    p.n_batch = g.n_batch;
    p.n_threads = 2;
    p.kv_type = g.kv;
    p.temperature = g.temperature;
    p.seed = g.seed;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    if (!c) { fprintf(stderr, "context: %s\n", err); return NULL; }
    kz_mtp_params mp = kz_mtp_default_params();
    mp.enabled = g.k > 0;
    if (g.k > 0) mp.max_draft = g.k; /* off: the default, unused */
    mp.adaptive = g.adaptive;
    mp.draft_vocab = g.draft_vocab;
    if (kz_context_set_mtp(c, &mp)) {
        fprintf(stderr, "set_mtp: %s\n", kz_context_error(c));
        kz_context_free(c);
        return NULL;
    }
    return c;
}

/* c's history (prompt + evaluated tokens) copied into *out, malloc'd with room for extra more
 * entries (the caller's); its length returned, or -1 (*out NULL) when out of memory. */
static inline int kt_history(const kz_context *c, int extra, int32_t **out) {
    int n = 0;
    const int32_t *h = kz_context_history(c, &n);
    *out = malloc(((size_t)n + (size_t)extra + 1) * sizeof **out); /* + 1: never malloc(0) */
    if (!*out) { fprintf(stderr, "history: out of memory\n"); return -1; }
    if (n) memcpy(*out, h, (size_t)n * sizeof **out);
    return n;
}

/* kz_generate's piece callback: counts the pieces in n and stops at piece stop_at (0: never). */
typedef struct {
    int n, stop_at;
} kt_stop_at;
static inline int kt_stop_at_piece(const char *s, size_t n, void *ud) {
    (void)s;
    (void)n;
    kt_stop_at *c = ud;
    return ++c->n == c->stop_at;
}
#endif
