/* Writes the binary seed corpora (fuzz/corpus/{model,gguf}) with the engine's own writers:
 * tiny valid qwen35 / qwen3 models in every matrix type (tied and untied, an MTP block, a vocab
 * with real merges), a vocab-only file, a file with every metadata type and nested arrays, and
 * a header-only file. Deterministic. Run by `make fuzz-seeds`; the output is committed.
 *     gen_seeds OUTDIR   (writes OUTDIR/model/..., OUTDIR/gguf/...) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "model/gguf.h"
#include "tools/mkmodel/mkmodel.h"
#include "text/tokenizer.h"
#include "model/types.h"
#include "vocab_small.h"

static char out_dir[512];

static void die(const char *what, const char *err) {
    fprintf(stderr, "gen_seeds: %s: %s\n", what, err);
    exit(1);
}

/* tiny shapes: n_embd 32 (a Q4_0/Q8_0 block), 4 layers = 2 GDN + 2 attention for qwen35 */
static void tiny(kz_mkmodel_cfg *c, const char *arch) {
    kz_mkmodel_preset(!strcmp(arch, "qwen35") ? "qwen35-tiny" : "qwen3-tiny", c);
    c->n_layer = 4;
    c->n_embd = 32;
    c->n_ff = 32;
    c->n_head = 2;
    c->n_head_kv = 1;
    c->head_dim = 16;
    c->n_rot = !strcmp(arch, "qwen35") ? 8 : 16;
    c->n_ctx_train = 64;
    c->full_attn_interval = 2;
    c->ssm_d_conv = 4;
    c->ssm_d_state = 8;
    c->ssm_n_group = 1;
    c->ssm_dt_rank = 2;
    c->ssm_d_inner = 16;
    c->n_vocab = 261; /* the synthetic vocab: 256 bytes + 5 specials */
    c->n_threads = 1;
    c->seed = 7;
}

static void model(const char *file, const char *arch, uint32_t wtype, int tied, int nextn, const char *vocab) {
    kz_mkmodel_cfg c;
    char path[1024], err[512];
    tiny(&c, arch);
    c.wtype = wtype;
    c.tied = tied;
    c.n_nextn = nextn;
    if (vocab) { c.vocab_path = vocab; c.n_vocab = 0; }
    snprintf(path, sizeof path, "%s/model/%s", out_dir, file);
    if (kz_mkmodel_write(&c, path, err, sizeof err)) die(path, err);
}

static void copy(const char *from_rel, const char *to_rel) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", out_dir, from_rel);
    snprintf(b, sizeof b, "%s/%s", out_dir, to_rel);
    FILE *f = fopen(a, "rb"), *g = fopen(b, "wb");
    if (!f || !g) die(a, "cannot copy");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, g);
    fclose(f);
    fclose(g);
}

static int in_set(const char *s, size_t n, int n_tok) {
    for (int i = 0; i < n_tok; i++)
        if (strlen(fz_tokens[i]) == n && !memcmp(fz_tokens[i], s, n)) return 1;
    return 0;
}

/* vocab-only file: the first 600 tokens of the fuzz vocab, the merges among them, the specials */
static void vocab_file(const char *path) {
    enum { N_BASE = 600 };
    int first_sp = FZ_N_TOKENS; /* the added tokens close the list */
    while (first_sp > 0 && fz_types[first_sp - 1] != KZ_TOKTYPE_NORMAL) first_sp--;
    const char *toks[N_BASE + 32];
    uint64_t lens[N_BASE + 32];
    int32_t types[N_BASE + 32];
    int n = 0;
    for (int i = 0; i < N_BASE; i++) { toks[n] = fz_tokens[i]; types[n++] = fz_types[i]; }
    for (int i = first_sp; i < FZ_N_TOKENS && n < N_BASE + 32; i++) { toks[n] = fz_tokens[i]; types[n++] = fz_types[i]; }
    for (int i = 0; i < n; i++) lens[i] = strlen(toks[i]);
    const char **mg = malloc(FZ_N_MERGES * sizeof *mg);
    uint64_t *ml = malloc(FZ_N_MERGES * sizeof *ml);
    int nm = 0;
    for (int r = 0; r < FZ_N_MERGES; r++) {
        const char *m = fz_merges[r], *sp = strchr(m, ' ');
        char joined[256];
        size_t la = (size_t)(sp - m), lb = strlen(sp + 1);
        if (la + lb >= sizeof joined) continue;
        memcpy(joined, m, la);
        memcpy(joined + la, sp + 1, lb);
        if (in_set(m, la, N_BASE) && in_set(sp + 1, lb, N_BASE) && in_set(joined, la + lb, N_BASE)) {
            mg[nm] = m;
            ml[nm++] = strlen(m);
        }
    }
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    int32_t im_end = -1, eot = -1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(toks[i], "<|im_end|>")) im_end = i;
        if (!strcmp(toks[i], "<|endoftext|>")) eot = i;
    }
    int rc = kz_gguf_w_str(w, "general.architecture", "qwen3") |
             kz_gguf_w_str(w, "tokenizer.ggml.model", "gpt2") |
             kz_gguf_w_str(w, "tokenizer.ggml.pre", "qwen2") |
             kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, lens, (uint64_t)n) |
             kz_gguf_w_arr(w, "tokenizer.ggml.token_type", KZ_GGUF_I32, types, (uint64_t)n) |
             kz_gguf_w_arr_str(w, "tokenizer.ggml.merges", mg, ml, (uint64_t)nm) |
             kz_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)im_end) |
             kz_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)eot) |
             kz_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0) |
             kz_gguf_writer_begin(w, path) | kz_gguf_writer_finish(w);
    if (rc) die(path, kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    free(mg);
    free(ml);
}

/* every value type, nested arrays, a non-default alignment, tensors of several types */
static void allkv_file(const char *path) {
    kz_gguf_writer *w = kz_gguf_writer_new(64);
    uint8_t u8 = 200; int8_t i8 = -5; uint16_t u16 = 60000; int16_t i16 = -30000;
    int32_t i32 = -7; uint64_t u64 = 1ull << 40; int64_t i64 = -(1ll << 40); double f64 = 2.5;
    int32_t arr[5] = {1, -2, 3, -4, 5};
    float farr[3] = {0.5f, -1.0f, 3.0f};
    uint8_t barr[4] = {1, 0, 1, 1};
    const char *sarr[3] = {"a", "", "\xc3\xa9t\xc3\xa9"};
    int rc = kz_gguf_w_str(w, "general.architecture", "qwen3") |
             kz_gguf_w_u32(w, "general.alignment", 64) |
             kz_gguf_w_scalar(w, "t.u8", KZ_GGUF_U8, &u8) | kz_gguf_w_scalar(w, "t.i8", KZ_GGUF_I8, &i8) |
             kz_gguf_w_scalar(w, "t.u16", KZ_GGUF_U16, &u16) | kz_gguf_w_scalar(w, "t.i16", KZ_GGUF_I16, &i16) |
             kz_gguf_w_u32(w, "t.u32", 123456) | kz_gguf_w_scalar(w, "t.i32", KZ_GGUF_I32, &i32) |
             kz_gguf_w_f32(w, "t.f32", 1.5f) | kz_gguf_w_bool(w, "t.bool", 1) |
             kz_gguf_w_scalar(w, "t.u64", KZ_GGUF_U64, &u64) | kz_gguf_w_scalar(w, "t.i64", KZ_GGUF_I64, &i64) |
             kz_gguf_w_scalar(w, "t.f64", KZ_GGUF_F64, &f64) | kz_gguf_w_str(w, "t.str", "hello") |
             kz_gguf_w_arr(w, "t.arr_i32", KZ_GGUF_I32, arr, 5) | kz_gguf_w_arr(w, "t.arr_f32", KZ_GGUF_F32, farr, 3) |
             kz_gguf_w_arr(w, "t.arr_bool", KZ_GGUF_BOOL, barr, 4) |
             kz_gguf_w_arr_str(w, "t.arr_str", sarr, NULL, 3);
    int64_t ne1[1] = {32}, ne2[2] = {32, 3}, ne4[4] = {32, 2, 1, 2};
    rc |= kz_gguf_w_tensor_info(w, "a.f32", 1, ne1, KZ_T_F32) | kz_gguf_w_tensor_info(w, "b.q4_0", 2, ne2, KZ_T_Q4_0) |
          kz_gguf_w_tensor_info(w, "c.f16", 4, ne4, KZ_T_F16) | kz_gguf_writer_begin(w, path);
    uint8_t data[512];
    for (int i = 0; i < (int)sizeof data; i++) data[i] = (uint8_t)(i * 37 + 11);
    const kz_type_info *q4 = kz_type_get(KZ_T_Q4_0);
    rc |= kz_gguf_writer_write_tensor(w, data, 128) |
          kz_gguf_writer_write_tensor(w, data, (size_t)q4->bytes * 3) |
          kz_gguf_writer_write_tensor(w, data, 32 * 4 * 2) | kz_gguf_writer_finish(w);
    if (rc) die(path, kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    /* a nested array (array of arrays) the writer has no call for: patch it in by hand as a
     * second file, header + 1 kv, no tensors */
    char p2[1024];
    snprintf(p2, sizeof p2, "%s/gguf/nested.gguf", out_dir);
    FILE *f = fopen(p2, "wb");
    if (!f) die(p2, "cannot write");
    uint8_t h[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    h[16] = 1; /* n_kv = 1, n_tensors = 0 */
    fwrite(h, 1, 24, f);
    uint64_t kl = 6;
    fwrite(&kl, 8, 1, f);
    fwrite("t.nest", 1, 6, f);
    uint32_t ty = KZ_GGUF_ARR, et = KZ_GGUF_ARR;
    uint64_t n = 2;
    fwrite(&ty, 4, 1, f); fwrite(&et, 4, 1, f); fwrite(&n, 8, 1, f);
    for (int k = 0; k < 2; k++) { /* [u16 x2], [str x1] */
        uint32_t e = k ? KZ_GGUF_STR : KZ_GGUF_U16;
        uint64_t c = k ? 1 : 2;
        fwrite(&e, 4, 1, f); fwrite(&c, 8, 1, f);
        if (!k) { uint16_t v[2] = {7, 9}; fwrite(v, 2, 2, f); }
        else { uint64_t l = 2; fwrite(&l, 8, 1, f); fwrite("xy", 1, 2, f); }
    }
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gen_seeds OUTDIR\n"); return 2; }
    snprintf(out_dir, sizeof out_dir, "%s", argv[1]);
    char d[1100];
    mkdir(out_dir, 0755);
    snprintf(d, sizeof d, "%s/model", out_dir); mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/gguf", out_dir); mkdir(d, 0755);

    model("q35_f32.gguf", "qwen35", KZ_T_F32, 1, 0, NULL);
    model("q35_q4_0.gguf", "qwen35", KZ_T_Q4_0, 1, 0, NULL);
    model("q35_q8_0_untied.gguf", "qwen35", KZ_T_Q8_0, 0, 0, NULL);
    model("q35_bf16_mtp.gguf", "qwen35", KZ_T_BF16, 1, 1, NULL);
    model("q3_f16.gguf", "qwen3", KZ_T_F16, 1, 0, NULL);
    model("q3_q4_0_untied.gguf", "qwen3", KZ_T_Q4_0, 0, 0, NULL);
    model("q3_q8_0.gguf", "qwen3", KZ_T_Q8_0, 1, 0, NULL);
    char vp[1100];
    snprintf(vp, sizeof vp, "%s/gguf/vocab_only.gguf", out_dir);
    vocab_file(vp);
    model("q3_q4_0_merges.gguf", "qwen3", KZ_T_Q4_0, 1, 0, vp);
    snprintf(vp, sizeof vp, "%s/gguf/allkv.gguf", out_dir);
    allkv_file(vp);
    copy("model/q35_q4_0.gguf", "gguf/q35_q4_0.gguf");
    copy("model/q3_q8_0.gguf", "gguf/q3_q8_0.gguf");
    /* header only: GGUF v3, no tensors, no kvs */
    snprintf(vp, sizeof vp, "%s/gguf/empty_v3.gguf", out_dir);
    FILE *f = fopen(vp, "wb");
    uint8_t h[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    fwrite(h, 1, 24, f);
    fclose(f);
    return 0;
}
