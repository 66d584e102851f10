/* Model-level API (include/kazeia.h) that sits above src/model: loading with a status, and the
 * model facts read from its hparams and GGUF tensor table. */
#include <stdint.h>
#include <stdio.h>
#include "kazeia.h"
#include "api/api.h"
#include "model/gguf.h"
#include "model/model.h"

kz_model *kz_model_load_ex(const char *path, const kz_model_params *params, kz_status *status, char *err,
                           size_t errlen) {
    /* the whole message is needed to classify it, even when the caller's buffer is small */
    char e[1024];
    const int own = !err || errlen < sizeof e;
    char *msg = own ? e : err;
    msg[0] = 0;
    kz_model *m = kz_model_load(path, params, msg, own ? sizeof e : errlen);
    if (own && err && errlen) snprintf(err, errlen, "%s", e);
    if (status) *status = m ? KZ_OK : !path ? KZ_ERR_INVALID_ARG : kz_status_from_message(msg, KZ_ERR_FORMAT);
    return m;
}

int kz_model_n_layer(const kz_model *m) { return m ? m->hp.n_layer : 0; }
int kz_model_n_embd(const kz_model *m) { return m ? m->hp.n_embd : 0; }

uint64_t kz_model_size(const kz_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; m && i < m->gguf->n_tensors; i++) n += m->gguf->tensors[i].nbytes;
    return n;
}

uint64_t kz_model_n_params(const kz_model *m) {
    uint64_t n = 0;
    for (uint64_t i = 0; m && i < m->gguf->n_tensors; i++) {
        const kz_tensor_info *t = &m->gguf->tensors[i];
        n += (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    }
    return n;
}

/* general.sampling.*: llama.cpp's keys for a model's recommended sampler (gguf-py
 * Keys.General.SAMPLING_*); penalty_last_n -1 there means the whole context, 0 here */
int kz_model_sampling(const kz_model *m, kz_gen_params *g) {
    if (!m || !g) return 0;
    const kz_gguf *f = m->gguf;
    int n = 0;
    float v;
    int64_t i;
    if (kz_gguf_get_f32(f, "general.sampling.temp", &v) == 0 && v >= 0 && v <= 100) { g->temperature = v; n++; }
    if (kz_gguf_get_i64(f, "general.sampling.top_k", &i) == 0 && i >= 0 && i <= INT32_MAX) { g->top_k = (int)i; n++; }
    if (kz_gguf_get_f32(f, "general.sampling.top_p", &v) == 0 && v >= 0 && v <= 1) { g->top_p = v; n++; }
    if (kz_gguf_get_f32(f, "general.sampling.min_p", &v) == 0 && v >= 0 && v <= 1) { g->min_p = v; n++; }
    if (kz_gguf_get_f32(f, "general.sampling.penalty_repeat", &v) == 0 && v > 0 && v <= 100) {
        g->repeat_penalty = v;
        n++;
    }
    if (kz_gguf_get_i64(f, "general.sampling.penalty_last_n", &i) == 0 && i >= -1 && i <= INT32_MAX) {
        g->repeat_last_n = i < 0 ? 0 : (int)i;
        n++;
    }
    return n;
}
