/* Tiny random qwen35 models for the C tests (kz_mkmodel's "qwen35-tiny" preset), written to
 * path and loaded with 2 threads; NULL (and the reason on stderr) on failure. */
#ifndef KT_MODEL_H
#define KT_MODEL_H
#include <stdint.h>
#include <stdio.h>
#include "kazeia.h"
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
#endif
