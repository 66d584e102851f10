/* mkmodel library: tiny models read back through the GGUF reader with the expected keys,
 * tensors, types and sane values; output independent of the thread count; bad configs are
 * refused with a message and leave no file behind. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "matmul/quant.h"
#include "model/types.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(sz > 0 ? (size_t)sz : 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static uint32_t u32(const kz_gguf *g, const char *k) {
    uint32_t v = 0xffffffffu;
    if (kz_gguf_get_u32(g, k, &v)) return 0xffffffffu;
    return v;
}

/* mean / std of a tensor's dequantized values */
static int stats(const kz_tensor_info *t, double *mean, double *sd, double *mn, double *mx) {
    int64_t n = t->ne[0], rows = t->nbytes / kz_row_bytes(t->type, n);
    float *row = malloc(sizeof(float) * n);
    double s = 0, s2 = 0;
    *mn = INFINITY; *mx = -INFINITY;
    size_t rb = kz_row_bytes(t->type, n);
    for (int64_t r = 0; r < rows; r++) {
        if (kz_dequant_row(t->type, (const uint8_t *)t->data + r * rb, row, n)) { free(row); return -1; }
        for (int64_t i = 0; i < n; i++) {
            s += row[i]; s2 += (double)row[i] * row[i];
            if (row[i] < *mn) *mn = row[i];
            if (row[i] > *mx) *mx = row[i];
        }
    }
    double cnt = (double)n * rows;
    *mean = s / cnt;
    *sd = sqrt(s2 / cnt - *mean * *mean);
    free(row);
    return 0;
}

static void check_qwen35_tiny(const char *path, uint32_t wtype) {
    char err[256];
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    kz_str s;
    CHECK(kz_gguf_get_str(g, "general.architecture", &s) == 0 && s.len == 6 && !memcmp(s.ptr, "qwen35", 6));
    CHECK(u32(g, "qwen35.block_count") == 8);
    CHECK(u32(g, "qwen35.embedding_length") == 256);
    CHECK(u32(g, "qwen35.feed_forward_length") == 512);
    CHECK(u32(g, "qwen35.attention.head_count") == 4 && u32(g, "qwen35.attention.head_count_kv") == 2);
    CHECK(u32(g, "qwen35.attention.key_length") == 64 && u32(g, "qwen35.attention.value_length") == 64);
    CHECK(u32(g, "qwen35.rope.dimension_count") == 16);
    CHECK(u32(g, "qwen35.full_attention_interval") == 4);
    CHECK(u32(g, "qwen35.ssm.conv_kernel") == 4 && u32(g, "qwen35.ssm.state_size") == 32);
    CHECK(u32(g, "qwen35.ssm.group_count") == 2 && u32(g, "qwen35.ssm.time_step_rank") == 4);
    CHECK(u32(g, "qwen35.ssm.inner_size") == 128);
    CHECK(u32(g, "general.file_type") == (uint32_t)kz_mkmodel_file_type(wtype));
    const kz_gguf_kv *sec = kz_gguf_get_kv(g, "qwen35.rope.dimension_sections");
    CHECK(sec && sec->type == KZ_GGUF_ARR && sec->arr_type == KZ_GGUF_I32 && sec->n == 4);
    if (sec && sec->n == 4) {
        int64_t v[4];
        for (int i = 0; i < 4; i++) kz_gguf_arr_i64(sec, (uint64_t)i, &v[i]);
        CHECKF(v[0] + v[1] + v[2] + v[3] == 8 && v[3] == 0, "sections %lld %lld %lld %lld", (long long)v[0],
               (long long)v[1], (long long)v[2], (long long)v[3]);
    }
    float eps = 0;
    CHECK(kz_gguf_get_f32(g, "qwen35.attention.layer_norm_rms_epsilon", &eps) == 0 && eps == 1e-6f);
    const kz_gguf_kv *toks = kz_gguf_get_kv(g, "tokenizer.ggml.tokens");
    CHECK(toks && toks->n == 512);
    CHECK(u32(g, "tokenizer.ggml.eos_token_id") == 258);
    if (toks && toks->n == 512) CHECK(toks->strs[258].len == 10 && !memcmp(toks->strs[258].ptr, "<|im_end|>", 10));

    /* 8 layers: 6 GDN (14 tensors) + 2 attention (11), + token_embd + output_norm; tied */
    CHECKF(g->n_tensors == 6 * 14 + 2 * 11 + 2, "%llu tensors", (unsigned long long)g->n_tensors);
    CHECK(kz_gguf_find_tensor(g, "output.weight") == NULL);
    const kz_tensor_info *t;
    CHECK((t = kz_gguf_find_tensor(g, "token_embd.weight")) && t->ne[0] == 256 && t->ne[1] == 512 && t->type == wtype);
    CHECK((t = kz_gguf_find_tensor(g, "blk.0.attn_qkv.weight")) && t->ne[0] == 256 && t->ne[1] == 2 * 64 + 128 && t->type == wtype);
    CHECK((t = kz_gguf_find_tensor(g, "blk.0.ssm_conv1d.weight")) && t->ne[0] == 4 && t->ne[1] == 256 && t->type == KZ_T_F32);
    CHECK((t = kz_gguf_find_tensor(g, "blk.0.ssm_beta.weight")) && t->ne[1] == 4 && t->type == KZ_T_F32);
    CHECK((t = kz_gguf_find_tensor(g, "blk.0.ssm_norm.weight")) && t->n_dims == 1 && t->ne[0] == 32);
    CHECK((t = kz_gguf_find_tensor(g, "blk.3.attn_q.weight")) && t->ne[0] == 256 && t->ne[1] == 2 * 4 * 64);
    CHECK((t = kz_gguf_find_tensor(g, "blk.3.attn_output.weight")) && t->ne[0] == 4 * 64 && t->ne[1] == 256);
    CHECK((t = kz_gguf_find_tensor(g, "blk.7.attn_k_norm.weight")) && t->ne[0] == 64);
    CHECK(kz_gguf_find_tensor(g, "blk.3.attn_qkv.weight") == NULL && kz_gguf_find_tensor(g, "blk.2.attn_q.weight") == NULL);

    /* value sanity: matrices ~ N(0, 1/n_in), norms ~ 1, ssm_a in (-e, -1/e), all finite */
    double m, sd, mn, mx;
    t = kz_gguf_find_tensor(g, "blk.1.ffn_up.weight");
    CHECK(t && stats(t, &m, &sd, &mn, &mx) == 0 && fabs(m) < 0.005 && fabs(sd * sqrt(256.0) - 1) < 0.1);
    /* residual-branch output projections: std / sqrt(2 * n_layer) */
    t = kz_gguf_find_tensor(g, "blk.1.ffn_down.weight");
    CHECK(t && stats(t, &m, &sd, &mn, &mx) == 0 && fabs(m) < 0.005 && fabs(sd * sqrt(512.0) * 4 - 1) < 0.1);
    t = kz_gguf_find_tensor(g, "blk.1.ssm_out.weight");
    CHECK(t && stats(t, &m, &sd, &mn, &mx) == 0 && fabs(sd * sqrt(128.0) * 4 - 1) < 0.1);
    t = kz_gguf_find_tensor(g, "blk.1.attn_norm.weight");
    CHECK(t && stats(t, &m, &sd, &mn, &mx) == 0 && fabs(m - 1) < 0.03 && sd > 0.05 && sd < 0.15 && mn > 0.5);
    t = kz_gguf_find_tensor(g, "blk.2.ssm_a");
    CHECK(t && stats(t, &m, &sd, &mn, &mx) == 0 && mn > -2.72 && mx < -0.36 && sd > 0);
    /* rows and tensors get independent streams: no two rows / same-shape tensors coincide */
    {
        const kz_tensor_info *a = kz_gguf_find_tensor(g, "blk.1.ffn_gate.weight");
        const kz_tensor_info *b = kz_gguf_find_tensor(g, "blk.1.ffn_up.weight");
        CHECK(a && b && a->nbytes == b->nbytes);
        if (a && b && a->nbytes == b->nbytes) {
            size_t rb = kz_row_bytes(a->type, a->ne[0]);
            int same = 0;
            for (int64_t r = 0; r + 1 < a->ne[1]; r++)
                same += !memcmp((const uint8_t *)a->data + r * rb, (const uint8_t *)a->data + (r + 1) * rb, rb);
            CHECKF(same == 0, "%d pairs of equal adjacent rows", same);
            CHECK(memcmp(a->data, b->data, rb) != 0);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        double a, b, c, d;
        CHECKF(stats(&g->tensors[i], &a, &b, &c, &d) == 0 && isfinite(c) && isfinite(d) && b > 0,
               "%s not finite / constant", g->tensors[i].name);
    }
    kz_gguf_close(g);
}

int main(void) {
    char dir[] = "/tmp/kz_test_mkmodel_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p1[256], p2[256], p3[256];
    snprintf(p1, sizeof p1, "%s/a.gguf", dir);
    snprintf(p2, sizeof p2, "%s/b.gguf", dir);
    snprintf(p3, sizeof p3, "%s/c.gguf", dir);
    char err[256];

    kz_mkmodel_cfg c;
    CHECK(kz_mkmodel_preset("nope", &c) == -1);
    for (const char *const *p = kz_mkmodel_preset_names(); *p; p++) CHECK(kz_mkmodel_preset(*p, &c) == 0);
    CHECK(kz_mkmodel_preset("qwen35-4b", &c) == 0 && c.n_embd == 2560 && c.ssm_dt_rank == 32 && c.tied && c.n_vocab == 248320);
    CHECK(kz_mkmodel_preset("qwen35-9b", &c) == 0 && !c.tied && c.n_embd == 4096);
    CHECK(kz_mkmodel_preset("qwen3-4b", &c) == 0 && c.n_layer == 36 && c.head_dim == 128 && c.n_vocab == 151936);

    static const uint32_t types[] = { KZ_T_Q4_0, KZ_T_Q8_0, KZ_T_BF16 };
    for (int i = 0; i < 3; i++) {
        kz_mkmodel_preset("qwen35-tiny", &c);
        c.wtype = types[i];
        c.n_threads = 1;
        CHECKF(kz_mkmodel_write(&c, p1, err, sizeof err) == 0, "%s", err);
        check_qwen35_tiny(p1, types[i]);
    }

    /* same bytes whatever the thread count; a different seed changes them */
    kz_mkmodel_preset("qwen3-tiny", &c);
    c.wtype = KZ_T_Q4_0;
    c.n_threads = 1;
    CHECKF(kz_mkmodel_write(&c, p1, err, sizeof err) == 0, "%s", err);
    c.n_threads = 3;
    CHECKF(kz_mkmodel_write(&c, p2, err, sizeof err) == 0, "%s", err);
    c.seed = 2;
    CHECKF(kz_mkmodel_write(&c, p3, err, sizeof err) == 0, "%s", err);
    size_t n1 = 0, n2 = 0, n3 = 0;
    char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2), *b3 = slurp(p3, &n3);
    CHECK(b1 && b2 && b3 && n1 == n2 && n1 == n3 && n1 > 100000);
    if (b1 && b2 && b3 && n1 == n2 && n1 == n3) {
        CHECK(memcmp(b1, b2, n1) == 0);
        CHECK(memcmp(b1, b3, n1) != 0);
    }
    free(b1); free(b2); free(b3);
    {
        kz_gguf *g = kz_gguf_open(p1, err, sizeof err);
        CHECKF(g != NULL, "%s", err);
        if (g) {
            CHECK(g->n_tensors == 8 * 11 + 2);
            const kz_tensor_info *t = kz_gguf_find_tensor(g, "blk.5.ffn_norm.weight");
            CHECK(t && t->type == KZ_T_F32 && t->ne[0] == 256);
            CHECK((t = kz_gguf_find_tensor(g, "blk.5.attn_q.weight")) && t->ne[1] == 4 * 64);
            CHECK(kz_gguf_find_key(g, "qwen3.rope.dimension_count") < 0); /* the converter writes none */
            CHECK(u32(g, "tokenizer.ggml.bos_token_id") == 256);
            kz_gguf_close(g);
        }
    }

    /* untied + MTP block + a row length that forces the F16 fallback */
    kz_mkmodel_preset("qwen35-tiny", &c);
    c.wtype = KZ_T_Q8_0;
    c.tied = 0;
    c.n_nextn = 1;
    c.n_ff = 300; /* ffn_down rows of 300 elements */
    CHECKF(kz_mkmodel_write(&c, p1, err, sizeof err) == 0, "%s", err);
    {
        kz_gguf *g = kz_gguf_open(p1, err, sizeof err);
        CHECKF(g != NULL, "%s", err);
        if (g) {
            const kz_tensor_info *t;
            CHECK(u32(g, "qwen35.block_count") == 9 && u32(g, "qwen35.nextn_predict_layers") == 1);
            CHECK((t = kz_gguf_find_tensor(g, "output.weight")) && t->type == KZ_T_Q8_0);
            CHECK((t = kz_gguf_find_tensor(g, "blk.8.nextn.eh_proj.weight")) && t->ne[0] == 512 && t->ne[1] == 256);
            CHECK((t = kz_gguf_find_tensor(g, "blk.8.attn_q.weight")) != NULL); /* MTP block = attention */
            CHECK((t = kz_gguf_find_tensor(g, "blk.0.ffn_down.weight")) && t->type == KZ_T_F16 && t->ne[0] == 300);
            CHECK((t = kz_gguf_find_tensor(g, "blk.0.ffn_up.weight")) && t->type == KZ_T_Q8_0);
            kz_gguf_close(g);
        }
    }

    /* refusals: message names the problem, no file is left behind */
    struct { const char *what, *needle; } bad[] = {
        { "heads", "n_head_kv" }, { "v-heads", "ssm_n_group" }, { "arch", "arch" },
        { "type", "type" }, { "vocab", "n_vocab" }, { "rot", "n_rot" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kz_mkmodel_preset("qwen35-tiny", &c);
        if (i == 0) c.n_head_kv = 3;
        if (i == 1) c.ssm_dt_rank = 3, c.ssm_d_inner = 96;
        if (i == 2) strcpy(c.arch, "llama");
        if (i == 3) c.wtype = KZ_T_IQ2_XXS;
        if (i == 4) c.n_vocab = 100;
        if (i == 5) c.n_rot = 65;
        unlink(p3);
        err[0] = 0;
        CHECKF(kz_mkmodel_write(&c, p3, err, sizeof err) == -1 && strstr(err, bad[i].needle), "%s: '%s'", bad[i].what, err);
        CHECK(access(p3, F_OK) != 0);
    }
    kz_mkmodel_preset("qwen35-tiny", &c);
    c.vocab_path = "/nonexistent/vocab.gguf";
    CHECK(kz_mkmodel_write(&c, p3, err, sizeof err) == -1 && strstr(err, "vocab"));
    c.vocab_path = NULL;
    CHECK(kz_mkmodel_write(&c, "/nonexistent-dir/x.gguf", err, sizeof err) == -1 && strstr(err, "nonexistent-dir"));

    unlink(p1); unlink(p2); unlink(p3);
    rmdir(dir);
    KT_END();
}
