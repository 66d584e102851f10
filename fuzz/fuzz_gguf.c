/* libFuzzer target: the GGUF reader on arbitrary bytes. A file that opens is walked completely
 * (every kv through every getter, every string and array element, every tensor's first and
 * last byte, name lookups) so ASan sees any pointer the reader let out of the buffer; then the
 * tokenizer is built from it (hostile tokenizer metadata) and, if that works, used once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/gguf.h"
#include "text/tokenizer.h"
#include "fuzz_check.h"

static volatile unsigned sink; /* keeps the reads */

static int in_buf(const void *p, uint64_t n, const uint8_t *b, size_t size) {
    const uint8_t *q = p;
    return q >= b && q <= b + size && n <= (uint64_t)(b + size - q);
}

static void touch(const void *p, uint64_t n) {
    const uint8_t *q = p;
    if (n) sink += q[0] + q[n - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    err[0] = 0;
    kz_gguf *g = kz_gguf_open_mem(data, size, err, sizeof err);
    if (!g) {
        FZ_CHECK(fz_msg_ok(err, sizeof err), "bad error message: '%s'", err);
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kz_gguf_kv *kv = &g->kv[i];
        FZ_CHECK(kz_gguf_find_key(g, kv->key) == (int64_t)i, "key lookup");
        FZ_CHECK(kv->type < KZ_GGUF_NTYPES, "type %u", kv->type);
        FZ_CHECK(in_buf(kv->data, kv->size, data, size), "kv '%s' value outside the buffer", kv->key);
        touch(kv->data, kv->size);
        uint32_t u; int64_t s; float f; int b; kz_str str;
        sink += (unsigned)kz_gguf_get_u32(g, kv->key, &u) + (unsigned)kz_gguf_get_i64(g, kv->key, &s) +
                (unsigned)kz_gguf_get_f32(g, kv->key, &f) + (unsigned)kz_gguf_get_bool(g, kv->key, &b);
        if (kz_gguf_get_str(g, kv->key, &str) == 0) {
            FZ_CHECK(in_buf(str.ptr, str.len, data, size), "string outside the buffer");
            touch(str.ptr, str.len);
        }
        if (kv->type == KZ_GGUF_ARR) {
            uint64_t n = kv->n;
            for (uint64_t k = 0; k < n; k++) {
                if (k == 64 && n > 128) k = n - 64; /* ends of long arrays */
                int64_t iv; double dv;
                sink += (unsigned)kz_gguf_arr_i64(kv, k, &iv) + (unsigned)kz_gguf_arr_f64(kv, k, &dv);
                if (kv->strs) {
                    FZ_CHECK(in_buf(kv->strs[k].ptr, kv->strs[k].len, data, size), "array string outside");
                    touch(kv->strs[k].ptr, kv->strs[k].len);
                }
            }
            sink += (unsigned)kz_gguf_arr_i64(kv, n, &s); /* one past the end: must be refused */
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        FZ_CHECK(kz_gguf_find_tensor(g, t->name) == t, "tensor lookup");
        FZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4, "n_dims");
        FZ_CHECK(in_buf(t->data, t->nbytes, data, size), "tensor '%s' data outside the buffer", t->name);
        touch(t->data, t->nbytes);
    }
    sink += kz_gguf_find_tensor(g, "token_embd.weight") != NULL;
    sink += kz_gguf_find_key(g, "general.architecture") >= 0;

    kz_tokenizer *tk = kz_tokenizer_from_gguf(g, err, sizeof err);
    if (tk) {
        static const char txt[] = "Hello <|im_start|>wörld 123 \xff<think>";
        int32_t ids[128];
        int n = kz_tok_encode(tk, txt, sizeof txt - 1, 1, ids, 128);
        FZ_CHECK(n >= 0 && n <= 128, "encode %d", n);
        for (int i = 0; i < n; i++) {
            char pb[64];
            FZ_CHECK(kz_tok_bytes(tk, ids[i], pb, sizeof pb) >= 0, "id %d from encode is invalid", ids[i]);
            sink += (unsigned)kz_tok_is_eog(tk, ids[i]);
        }
        kz_tokenizer_free(tk);
    } else {
        FZ_CHECK(fz_msg_ok(err, sizeof err), "bad tokenizer error message: '%s'", err);
    }
    kz_gguf_close(g);
    return 0;
}
