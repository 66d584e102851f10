/* kz_quantize on random models written by the dev mkmodel (qwen35 with an MTP block and an untied
 * head, F16 and F32): the result loads with kz_model_load; every tensor has the type llama-quantize's
 * rules give it (derived here from the rules, not from our code: LM head Q6_K, attn_v / attn_qkv
 * and ffn_down Q6_K in use_more_bits layers for Q4_K_M, fallback Q5_0 for rows of 128, norms,
 * ssm_a, ssm_conv1d kept); --pure, --leave-output, --tensor-type; the metadata keys; the
 * imatrix changes the bytes; and the error paths: unknown type, same file (also through a hard
 * link), a directory that cannot hold the output, an unsupported source type, a cancel, a write
 * error (file size limit) - each with a message, a status, and no output or temporary left. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kazeia.h"
#include "kt.h"
#include "model/gguf.h"
#include "model/imatrix.h"
#include "model/types.h"
#include "tools/mkmodel/mkmodel.h"

static char dir[256];

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}
/* entries of dir holding ".tmp" (a temporary left behind) */
static int n_temps(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp")) n++;
    if (d) closedir(d);
    return n;
}
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }
static int layer(const char *n) {
    int l = -1;
    return sscanf(n, "blk.%d.", &l) == 1 ? l : -1;
}
static uint32_t type_of(const kz_gguf *g, const char *name) {
    const kz_tensor_info *t = kz_gguf_find_tensor(g, name);
    return t ? t->type : 9999;
}

static char warn_buf[4096];
static void on_log(kz_log_level lv, const char *msg, void *u) {
    (void)u;
    if (lv >= KZ_LOG_WARN && strlen(warn_buf) + strlen(msg) + 2 < sizeof warn_buf) {
        strcat(warn_buf, msg);
        strcat(warn_buf, "\n");
    }
}

static kz_status quant(const char *in, const char *out, const char *type, kz_quantize_params *pp, char *err) {
    kz_quantize_params p = pp ? *pp : kz_quantize_default_params();
    p.type = type;
    if (!p.n_threads) p.n_threads = 2;
    return kz_quantize(in, out, &p, err, 512);
}

static int loads(const char *path) {
    char err[512];
    kz_model_params mp = kz_model_default_params();
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load %s: %s\n", path, err);
    kz_model_free(m);
    return m != NULL;
}

/* Q4_K_M of the tiny qwen35 (8 layers + 1 MTP block: 9 blocks, one attn_v or attn_qkv each) */
static void check_q4_k_m(const char *path) {
    char err[512];
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    uint32_t ft = 0, qv = 0;
    CHECK(!kz_gguf_get_u32(g, "general.file_type", &ft) && ft == 15);
    CHECK(!kz_gguf_get_u32(g, "general.quantization_version", &qv) && qv == 2);
    int n_checked = 0, n_mtp = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        const char *n = t->name;
        const int il = layer(n), two_d = t->ne[1] > 1;
        uint32_t want;
        if (!strcmp(n, "output.weight")) want = KZ_T_Q6_K;
        else if (!two_d || strstr(n, "ssm_conv1d") || strstr(n, "_norm.weight")) want = KZ_T_F32;
        else if (strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight") || strstr(n, "ffn_down"))
            want = use_more_bits(il, 9) ? KZ_T_Q6_K : KZ_T_Q4_K;
        else if (strstr(n, "ssm_out")) want = KZ_T_Q5_0; /* 128 columns: Q4_K's fallback */
        else want = KZ_T_Q4_K;
        CHECKF(t->type == want, "%s: %s, want %s", n, kz_type_get(t->type)->name, kz_type_get(want)->name);
        n_checked++;
        if (strstr(n, "nextn")) n_mtp++;
    }
    CHECK(n_checked > 100 && n_mtp == 4);
    CHECK(type_of(g, "blk.8.nextn.eh_proj.weight") == KZ_T_Q4_K);
    CHECK(type_of(g, "blk.0.attn_qkv.weight") == KZ_T_Q6_K && type_of(g, "blk.1.attn_qkv.weight") == KZ_T_Q4_K);
    kz_gguf_close(g);
}

static int cancel_after; /* progress calls before the cancel flag is set */
static int cancel_flag;
static void cancel_cb(const kz_quantize_progress *p, void *u) {
    (void)u;
    if (p->i_tensor >= cancel_after) __atomic_store_n(&cancel_flag, 1, __ATOMIC_RELAXED);
}
static int n_progress, last_i, finished;
static uint64_t last_done, total;
static void count_cb(const kz_quantize_progress *p, void *u) {
    (void)u;
    n_progress++;
    if (p->i_tensor < last_i || p->bytes_done < last_done) n_progress = -100000; /* must not go back */
    last_i = p->i_tensor;
    last_done = p->bytes_done;
    total = p->bytes_total;
    finished |= p->finished;
}

int main(void) {
    char err[512], f16[300], f32[300], out[300], out2[300];
    snprintf(dir, sizeof dir, "/tmp/kz_test_quantize_%d", (int)getpid());
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(f16, sizeof f16, "%s/m-f16.gguf", dir);
    snprintf(f32, sizeof f32, "%s/m-f32.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    snprintf(out2, sizeof out2, "%s/out2.gguf", dir);
    kz_log_set(on_log, NULL);

    kz_mkmodel_cfg c;
    kz_mkmodel_preset("qwen35-tiny", &c);
    c.n_nextn = 1;
    c.tied = 0;
    c.wtype = KZ_T_F16;
    c.seed = 5;
    CHECKF(kz_mkmodel_write(&c, f16, err, sizeof err) == 0, "%s", err);
    c.wtype = KZ_T_F32;
    CHECKF(kz_mkmodel_write(&c, f32, err, sizeof err) == 0, "%s", err);

    /* Q4_K_M from F16: types, metadata, loads; progress monotone and complete */
    kz_quantize_params p = kz_quantize_default_params();
    p.progress = count_cb;
    CHECKF(quant(f16, out, "Q4_K_M", &p, err) == KZ_OK, "%s", err);
    CHECK(n_progress > 100 && finished && last_done == total && total > 0);
    check_q4_k_m(out);
    CHECK(loads(out));
    CHECK(n_temps() == 0);
    /* the same from 2 threads and from 1: same bytes; "Q4_K" is llama-quantize's alias */
    p = kz_quantize_default_params();
    p.n_threads = 1;
    CHECKF(quant(f16, out2, "q4_k", &p, err) == KZ_OK, "%s", err);
    {
        kz_gguf *a = kz_gguf_open(out, err, sizeof err), *b = kz_gguf_open(out2, err, sizeof err);
        CHECK(a && b && a->size == b->size && !memcmp(a->map, b->map, a->size));
        kz_gguf_close(a);
        kz_gguf_close(b);
    }

    /* Q4_0 from F32: LM head Q6_K, the rest Q4_0; --pure: LM head Q4_0; --leave-output: kept */
    CHECKF(quant(f32, out, "Q4_0", NULL, err) == KZ_OK, "%s", err);
    kz_gguf *g = kz_gguf_open(out, err, sizeof err);
    CHECK(g && type_of(g, "output.weight") == KZ_T_Q6_K && type_of(g, "blk.0.ssm_out.weight") == KZ_T_Q4_0 &&
          type_of(g, "blk.3.attn_v.weight") == KZ_T_Q4_0 && type_of(g, "token_embd.weight") == KZ_T_Q4_0 &&
          type_of(g, "blk.0.ssm_a") == KZ_T_F32 && type_of(g, "blk.0.ssm_conv1d.weight") == KZ_T_F32);
    kz_gguf_close(g);
    CHECK(loads(out));
    p = kz_quantize_default_params();
    p.pure = 1;
    const char *ov[] = {"ffn_up=Q8_0", "blk\\.[0-3]\\.attn_gate\\.weight=q5_1", NULL};
    p.tensor_types = ov;
    CHECKF(quant(f16, out, "Q4_0", &p, err) == KZ_OK, "%s", err);
    g = kz_gguf_open(out, err, sizeof err);
    CHECK(g && type_of(g, "output.weight") == KZ_T_Q4_0 && type_of(g, "blk.2.ffn_up.weight") == KZ_T_Q8_0 &&
          type_of(g, "blk.2.attn_gate.weight") == KZ_T_Q5_1 && type_of(g, "blk.4.attn_gate.weight") == KZ_T_Q4_0 &&
          type_of(g, "blk.2.ffn_down.weight") == KZ_T_Q4_0);
    kz_gguf_close(g);
    p = kz_quantize_default_params();
    p.leave_output = 1;
    CHECKF(quant(f16, out, "Q6_K", &p, err) == KZ_OK, "%s", err);
    g = kz_gguf_open(out, err, sizeof err);
    CHECK(g && type_of(g, "output.weight") == KZ_T_F16 && type_of(g, "blk.2.ffn_up.weight") == KZ_T_Q6_K &&
          type_of(g, "blk.0.ssm_out.weight") == KZ_T_Q8_0 /* Q6_K's fallback */);
    kz_gguf_close(g);
    /* F16 from F32: 2-D weights F16, 1-D kept */
    CHECKF(quant(f32, out, "F16", NULL, err) == KZ_OK, "%s", err);
    g = kz_gguf_open(out, err, sizeof err);
    CHECK(g && type_of(g, "blk.2.ffn_up.weight") == KZ_T_F16 && type_of(g, "output_norm.weight") == KZ_T_F32);
    kz_gguf_close(g);

    /* requantising a Q8_0 model works and says it loses quality */
    char q8[300];
    snprintf(q8, sizeof q8, "%s/m-q8.gguf", dir);
    CHECKF(quant(f16, q8, "Q8_0", NULL, err) == KZ_OK, "%s", err);
    warn_buf[0] = 0;
    CHECKF(quant(q8, out, "IQ4_NL", NULL, err) == KZ_OK, "%s", err);
    CHECKF(strstr(warn_buf, "requantising") != NULL, "no requantising warning: %s", warn_buf);
    CHECK(loads(out));

    /* imatrix: importance for every 2-D weight changes the IQ4_NL bytes */
    {
        char imf[300];
        snprintf(imf, sizeof imf, "%s/im.gguf", dir);
        kz_gguf *src = kz_gguf_open(f16, err, sizeof err);
        kz_imatrix *im = kz_imatrix_new();
        unsigned long long s = 77;
        for (uint64_t i = 0; src && i < src->n_tensors; i++) {
            const kz_tensor_info *t = &src->tensors[i];
            if (t->ne[1] <= 1) continue;
            float x[4 * 512];
            for (int j = 0; j < 4 * t->ne[0]; j++) x[j] = kt_randf(&s) * (1.0f + (float)(j % 7));
            CHECK(kz_imatrix_add(im, t->name, t->ne[0], x, 4, err, sizeof err) == 0);
        }
        CHECKF(kz_imatrix_write(im, imf, "test", 1, 4, err, sizeof err) == 0, "%s", err);
        kz_imatrix_free(im);
        kz_gguf_close(src);
        CHECKF(quant(f16, out, "IQ4_NL", NULL, err) == KZ_OK, "%s", err);
        p = kz_quantize_default_params();
        p.imatrix = imf;
        CHECKF(quant(f16, out2, "IQ4_NL", &p, err) == KZ_OK, "%s", err);
        kz_gguf *a = kz_gguf_open(out, err, sizeof err), *b = kz_gguf_open(out2, err, sizeof err);
        CHECK(a && b && a->n_tensors == b->n_tensors);
        int n_diff = 0;
        for (uint64_t i = 0; a && b && i < a->n_tensors; i++) {
            const kz_tensor_info *ta = &a->tensors[i], *tb = kz_gguf_find_tensor(b, ta->name);
            if (tb && ta->nbytes == tb->nbytes && memcmp(ta->data, tb->data, ta->nbytes)) n_diff++;
        }
        CHECKF(n_diff > 50, "only %d tensors changed with the imatrix", n_diff);
        /* with an imatrix the early ffn_down keep IQ4_NL (no Q5_K bump, as llama-quantize) */
        CHECK(a && b && type_of(a, "blk.0.ffn_down.weight") == KZ_T_Q5_K && type_of(b, "blk.0.ffn_down.weight") == KZ_T_IQ4_NL);
        kz_gguf_close(a);
        kz_gguf_close(b);
        CHECK(loads(out2));
        /* an imatrix made for another model (an entry of another width): refused, as llama-quantize */
        kz_imatrix *im2 = kz_imatrix_new();
        float x2[128];
        for (int j = 0; j < 128; j++) x2[j] = 0.5f + (float)j;
        CHECK(kz_imatrix_add(im2, "blk.0.ffn_up.weight", 128, x2, 1, err, sizeof err) == 0);
        CHECK(kz_imatrix_write(im2, imf, "test", 1, 1, err, sizeof err) == 0);
        kz_imatrix_free(im2);
        unlink(out2);
        CHECK(quant(f16, out2, "Q4_K_M", &p, err) == KZ_ERR_FORMAT && strstr(err, "blk.0.ffn_up.weight") && !exists(out2));
        p.imatrix = "/nonexistent/im.gguf";
        unlink(out2);
        CHECK(quant(f16, out2, "IQ4_NL", &p, err) != KZ_OK && strstr(err, "nonexistent") && !exists(out2));
    }

    /* errors: a message, a status, no output, no temporary */
    unlink(out);
    CHECK(quant(f16, out, "Q4_Z", NULL, err) == KZ_ERR_INVALID_ARG && strstr(err, "Q4_Z") && !exists(out));
    CHECK(quant(f16, f16, "Q4_0", NULL, err) == KZ_ERR_INVALID_ARG && strstr(err, "same file"));
    char hl[300];
    snprintf(hl, sizeof hl, "%s/hard.gguf", dir);
    CHECK(link(f16, hl) == 0);
    CHECK(quant(f16, hl, "Q4_0", NULL, err) == KZ_ERR_INVALID_ARG && strstr(err, "same file"));
    unlink(hl);
    CHECK(loads(f16)); /* the input is intact */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/out.gguf", f16); /* parent is a file */
    CHECK(quant(f16, bad, "Q4_0", NULL, err) == KZ_ERR_IO && strstr(err, "cannot create"));
    snprintf(bad, sizeof bad, "%s/no/such/dir/out.gguf", dir);
    CHECK(quant(f16, bad, "Q4_0", NULL, err) == KZ_ERR_IO && !exists(bad));
    const char *ovbad[] = {"ffn_up=IQ2_XXS", NULL};
    p = kz_quantize_default_params();
    p.tensor_types = ovbad;
    CHECK(quant(f16, out, "Q4_0", &p, err) == KZ_ERR_INVALID_ARG && strstr(err, "IQ2_XXS") && !exists(out));
    const char *ovre[] = {"ffn_(up=Q4_0", NULL};
    p.tensor_types = ovre;
    CHECK(quant(f16, out, "Q4_0", &p, err) == KZ_ERR_INVALID_ARG && !exists(out));
    CHECK(quant("/nonexistent.gguf", out, "Q4_0", NULL, err) == KZ_ERR_IO && !exists(out));
    /* an unsupported source type: a 2-D tensor in IQ2_XXS */
    {
        char odd[300];
        snprintf(odd, sizeof odd, "%s/iq2.gguf", dir);
        kz_gguf_writer *w = kz_gguf_writer_new(0);
        kz_gguf_w_str(w, "general.architecture", "qwen3");
        const int64_t ne[2] = {256, 4};
        kz_gguf_w_tensor_info(w, "blk.0.ffn_up.weight", 2, ne, KZ_T_IQ2_XXS);
        const size_t nb = kz_row_bytes(KZ_T_IQ2_XXS, 256) * 4;
        uint8_t *z = calloc(1, nb);
        for (size_t i = 0; i < nb; i++) z[i] = (uint8_t)(i * 37 + 1);
        CHECK(kz_gguf_writer_begin(w, odd) == 0 && kz_gguf_writer_write_tensor(w, z, nb) == 0 && kz_gguf_writer_finish(w) == 0);
        kz_gguf_writer_free(w);
        free(z);
        CHECK(quant(odd, out, "Q4_0", NULL, err) == KZ_ERR_UNSUPPORTED && strstr(err, "IQ2_XXS") && !exists(out));
    }
    /* cancel after the 20th tensor */
    p = kz_quantize_default_params();
    p.progress = cancel_cb;
    p.cancel = &cancel_flag;
    cancel_after = 20;
    cancel_flag = 0;
    CHECK(quant(f16, out, "Q4_K_M", &p, err) == KZ_ERR_CANCELLED && !exists(out));
    /* a write error (the file size limit stands in for a full disk), in a child process */
    {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {200000, 200000};
            setrlimit(RLIMIT_FSIZE, &rl);
            char e[512];
            const kz_status st = quant(f16, out, "Q8_0", NULL, e);
            _exit(st == KZ_ERR_IO && (strstr(e, "write") || strstr(e, "clos")) && !exists(out) ? 0 : 1);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
        CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "write error path (status %d)", ws);
        CHECK(!exists(out));
    }
    CHECK(n_temps() == 0);

    unlink(f16);
    unlink(f32);
    unlink(q8);
    unlink(out);
    unlink(out2);
    char tmpf[300];
    snprintf(tmpf, sizeof tmpf, "%s/iq2.gguf", dir);
    unlink(tmpf);
    snprintf(tmpf, sizeof tmpf, "%s/im.gguf", dir);
    unlink(tmpf);
    CHECK(rmdir(dir) == 0);
    KT_END();
}
