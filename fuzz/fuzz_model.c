/* libFuzzer target: model validation (kz_model_load_mem: hparams, every tensor's presence,
 * shape and type, the tokenizer) for both architectures; seeds are tiny valid qwen35 / qwen3
 * models, and a custom mutator aims most mutations at the metadata / tensor infos. A model that
 * loads is used: describe, tokenize, a context with a tiny n_ctx, an eval of a few tokens and
 * (one input in 4) a 2-token generation, so a hostile file that passes validation still cannot
 * drive the forward pass or the sampler out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "model/model.h"
#include "fuzz_check.h"

/* Floats of sequence state the model implies at n_ctx 32; files of a few KB can declare
 * dimensions whose product is large but legitimate, which the fuzzer's 2 GB malloc limit would
 * report as a crash. */
static double state_floats(const kz_hparams *hp) {
    double kv = 2.0 * hp->n_attn_layers * hp->n_head_kv * hp->head_dim * 32;
    double gdn = (double)hp->n_gdn_layers *
                 ((double)hp->ssm_conv_dim * hp->ssm_d_conv + (double)hp->ssm_d_inner * hp->ssm_d_state);
    double scr = 8.0 * (3.0 * hp->n_embd + 4.0 * hp->n_ff + 4.0 * hp->ssm_conv_dim + 4.0 * hp->n_head * hp->head_dim);
    return kv + gdn + scr + (double)hp->n_vocab * 2;
}

/* Most of a model file is tensor data, where a mutation only changes a weight; 7 mutations in
 * 8 go to the metadata + tensor-info part instead (everything before the data section, found by
 * parsing; the tensor data is kept and re-aligned after it). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    kz_gguf *g = kz_gguf_open_mem(data, size, NULL, 0);
    size_t lim = g && g->n_tensors ? (size_t)g->data_offset : size;
    kz_gguf_close(g);
    if (seed % 8 == 0 || lim >= size || lim == 0) return LLVMFuzzerMutate(data, size, max_size);
    size_t tail = size - lim;
    if (tail + 64 > max_size) return LLVMFuzzerMutate(data, size, max_size);
    uint8_t *t = malloc(tail);
    memcpy(t, data + lim, tail);
    size_t room = max_size - tail - 32; /* prefix may grow; keep space for re-alignment */
    size_t n = LLVMFuzzerMutate(data, lim, room < lim ? lim : room);
    size_t at = (n + 31) & ~(size_t)31; /* default alignment */
    memset(data + n, 0, at - n);
    memcpy(data + at, t, tail);
    free(t);
    return at + tail;
}

static int count_cb(const char *p, size_t n, void *ud) {
    (void)p;
    *(size_t *)ud += n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    err[0] = 0;
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load_mem(data, size, "fuzz.gguf", &mp, err, sizeof err);
    if (!m) {
        FZ_CHECK(fz_msg_ok(err, sizeof err), "bad error message: '%s'", err);
        return 0;
    }
    char desc[1024];
    FZ_CHECK(kz_model_describe(m, desc, sizeof desc) > 0, "describe");
    int V = kz_model_n_vocab(m);
    FZ_CHECK(V >= 1, "n_vocab %d", V);
    int32_t ids[64];
    int n = kz_tokenize(m, "Hi <|im_end|> x", 15, 1, ids, 64);
    FZ_CHECK(n >= 0, "tokenize");
    if (state_floats(&m->hp) < 16e6) {
        kz_context_params cp = kz_context_default_params();
        cp.n_ctx = 32;
        cp.n_batch = 4;
        cp.n_threads = 1;
        cp.kv_type = KZ_KV_F32;
        kz_context *c = kz_context_new(m, &cp, err, sizeof err);
        if (c) {
            int32_t toks[5];
            for (int i = 0; i < 5; i++) toks[i] = (int32_t)((i * 37 + 1) % V);
            float *lg = malloc((size_t)V * sizeof *lg);
            FZ_CHECK(kz_eval(c, toks, 5, lg, 0) == 0, "eval: %s", kz_context_error(c));
            FZ_CHECK(kz_eval(c, toks, 1, lg, 0) == 0, "eval: %s", kz_context_error(c));
            free(lg);
            /* sampling + streaming on whatever logits the file gives (one input in 4: the
             * ChatML prefill is the slowest part); the vocab may lack ChatML tokens or the
             * prompt may not fit: an error is fine, a crash is not */
            if (data[size / 2] % 4 == 0) {
                size_t out = 0;
                kz_stats st;
                (void)kz_generate(c, NULL, "a", 2, count_cb, &out, &st);
            }
            kz_context_free(c);
        } else {
            FZ_CHECK(fz_msg_ok(err, sizeof err), "bad context error message: '%s'", err);
        }
    }
    kz_model_free(m);
    return 0;
}
