/* Model loading / sequence errors: every bad input gives a clear one-line message naming the
 * thing, never a crash, and the model / sequence stays usable where that makes sense. Also
 * forward-pass invariants that need no external reference (chunking, threads, reset). Models
 * are tiny random GGUFs from kz_mkmodel, rewritten into bad variants with the gguf writer. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sys/fp16.h"
#include "model/gguf.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "forward/seq.h"
#include "model/types.h"

static char g_dir[64];
static char g_good35[128], g_good3[128];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static void small_cfg(kz_mkmodel_cfg *c, const char *arch) {
    kz_mkmodel_preset(!strcmp(arch, "qwen35") ? "qwen35-tiny" : "qwen3-tiny", c);
    c->n_layer = 4;
    c->n_embd = 64;
    c->n_ff = 96;
    c->n_head = 4;
    c->n_head_kv = 2;
    c->head_dim = 32;
    c->n_rot = !strcmp(arch, "qwen35") ? 8 : 32;
    c->n_vocab = 0; /* synthetic vocab */
    c->n_ctx_train = 256;
    if (!strcmp(arch, "qwen35")) {
        c->ssm_d_state = 16;
        c->ssm_n_group = 2;
        c->ssm_dt_rank = 6; /* H_v != H_k */
        c->ssm_d_inner = 6 * 16;
    }
    c->wtype = KZ_T_F32;
    c->n_threads = 1;
    c->seed = 7;
}

/* ---- rewriting a good file into a bad variant ---- */
typedef struct {
    const char *base;                       /* file to rewrite; NULL = the good qwen35 one */
    const char *drop_key;
    const char *str_key, *str_val;          /* set/replace a string kv */
    const char *u32_key; uint32_t u32_val;  /* set/replace a u32 kv */
    const char *arr_key; const uint8_t *arr_bool; uint64_t arr_n; /* add a bool array kv */
    const char *drop_tensor;
    const char *shape_tensor; int64_t ne1;  /* change ne[1] (data: zeros) */
    const char *type_tensor; uint32_t type; /* change type (data converted from f32 when F16/BF16, else zeros) */
} variant;

static int rewrite(const char *src, const char *dst, const variant *v) {
    char err[512];
    kz_gguf *g = kz_gguf_open(src, err, sizeof err);
    if (!g) { fprintf(stderr, "rewrite: %s\n", err); return -1; }
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    int rc = 0;
    for (uint64_t i = 0; i < g->n_kv && !rc; i++) {
        const kz_gguf_kv *kv = &g->kv[i];
        if (v->drop_key && !strcmp(kv->key, v->drop_key)) continue;
        if (v->str_key && !strcmp(kv->key, v->str_key)) continue;
        if (v->u32_key && !strcmp(kv->key, v->u32_key)) continue;
        rc = kz_gguf_w_copy_kv(w, g, kv);
    }
    if (v->str_key) rc |= kz_gguf_w_str(w, v->str_key, v->str_val);
    if (v->u32_key) rc |= kz_gguf_w_u32(w, v->u32_key, v->u32_val);
    if (v->arr_key) rc |= kz_gguf_w_arr(w, v->arr_key, KZ_GGUF_BOOL, v->arr_bool, v->arr_n);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t type = t->type;
        if (v->shape_tensor && !strcmp(t->name, v->shape_tensor)) ne[1] = v->ne1;
        if (v->type_tensor && !strcmp(t->name, v->type_tensor)) type = v->type;
        rc = kz_gguf_w_tensor_info(w, t->name, t->n_dims, ne, type);
    }
    if (!rc) rc = kz_gguf_writer_begin(w, dst);
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        if (v->drop_tensor && !strcmp(t->name, v->drop_tensor)) continue;
        int reshaped = v->shape_tensor && !strcmp(t->name, v->shape_tensor);
        int retyped = v->type_tensor && !strcmp(t->name, v->type_tensor);
        if (!reshaped && !retyped) { rc = kz_gguf_writer_write_tensor(w, t->data, (size_t)t->nbytes); continue; }
        int64_t ne0 = t->ne[0], rows = (reshaped ? v->ne1 : t->ne[1]) * t->ne[2] * t->ne[3];
        uint32_t type = retyped ? v->type : t->type;
        size_t nb = kz_row_bytes(type, ne0) * (size_t)rows;
        uint8_t *buf = calloc(nb ? nb : 1, 1);
        if (retyped && !reshaped && t->type == KZ_T_F32 && (type == KZ_T_F16 || type == KZ_T_BF16)) {
            const float *f = t->data;
            for (int64_t j = 0; j < ne0 * rows; j++) {
                uint16_t h = type == KZ_T_F16 ? kz_f32_to_fp16(f[j]) : kz_f32_to_bf16(f[j]);
                memcpy(buf + 2 * j, &h, 2);
            }
        }
        rc = kz_gguf_writer_write_tensor(w, buf, nb);
        free(buf);
    }
    if (!rc) rc = kz_gguf_writer_finish(w);
    if (rc) fprintf(stderr, "rewrite %s: %s\n", dst, kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    kz_gguf_close(g);
    return rc ? -1 : 0;
}

/* load a variant; expect failure with every needle in the message */
static void expect_load_error(const char *label, const variant *v, const char *n1, const char *n2) {
    char p[160], err[512] = "";
    path_in(p, sizeof p, "bad.gguf");
    if (rewrite(v->base ? v->base : g_good35, p, v)) { CHECKF(0, "%s: could not write the variant", label); return; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load(p, &mp, err, sizeof err);
    CHECKF(m == NULL, "%s: bad model loaded", label);
    CHECKF(n1 == NULL || strstr(err, n1), "%s: message '%s' lacks '%s'", label, err, n1);
    CHECKF(n2 == NULL || strstr(err, n2), "%s: message '%s' lacks '%s'", label, err, n2);
    CHECKF(strchr(err, '\n') == NULL && strlen(err) > 10, "%s: not a one-line message: '%s'", label, err);
    kz_model_free(m);
    unlink(p);
}

static kz_model *load(const char *p) {
    char err[512];
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(p, &mp, err, sizeof err);
    CHECKF(m != NULL, "load %s: %s", p, err);
    return m;
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return sqrt(d / (s > 0 ? s : 1));
}

static int all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++) if (!isfinite(a[i])) return 0;
    return 1;
}

/* evaluate toks (prefill pre, then decode) -> logits [n][nv] */
static int eval(const kz_model *m, int n_batch, int n_threads, kz_kv_type kv, const int32_t *toks, int n,
                int pre, float *out) {
    char err[256];
    kz_seq *s = kz_seq_new(m, 64, n_batch, n_threads, kv, err, sizeof err);
    if (!s) { fprintf(stderr, "seq: %s\n", err); return -1; }
    int nv = kz_model_n_vocab(m), rc = 0;
    if (pre && kz_forward(m, s, toks, pre, out, 1, err, sizeof err)) rc = -1;
    for (int i = pre; i < n && !rc; i++)
        if (kz_forward(m, s, toks + i, 1, out + (size_t)i * nv, 0, err, sizeof err)) rc = -1;
    if (rc) fprintf(stderr, "forward: %s\n", err);
    kz_seq_free(s);
    return rc;
}

static void test_load_errors(void) {
    char err[512];
    kz_model *m = kz_model_load("/nonexistent/dir/model.gguf", NULL, err, sizeof err);
    CHECKF(!m && strstr(err, "/nonexistent/dir/model.gguf"), "missing file: '%s'", err);

    variant v;
    memset(&v, 0, sizeof v);
    v.drop_tensor = "blk.1.ssm_a";
    expect_load_error("missing tensor", &v, "missing tensor 'blk.1.ssm_a'", NULL);
    memset(&v, 0, sizeof v);
    v.drop_tensor = "output_norm.weight";
    expect_load_error("missing output_norm", &v, "output_norm.weight", NULL);

    memset(&v, 0, sizeof v);
    v.shape_tensor = "blk.3.attn_q.weight"; /* expected [64, 2*4*32 = 256] */
    v.ne1 = 128;
    expect_load_error("wrong shape", &v, "tensor blk.3.attn_q.weight has shape [64, 128], expected [64, 256]", NULL);
    memset(&v, 0, sizeof v);
    v.shape_tensor = "blk.0.attn_qkv.weight"; /* conv_dim = 2*2*16 + 96 = 160 */
    v.ne1 = 161;
    expect_load_error("wrong gdn shape", &v, "blk.0.attn_qkv.weight", "expected [64, 160]");
    memset(&v, 0, sizeof v);
    v.shape_tensor = "token_embd.weight"; /* any n_vocab is fine, but n_embd must match */
    v.ne1 = 100;
    {
        char p[160];
        path_in(p, sizeof p, "vocab100.gguf");
        CHECK(rewrite(g_good35, p, &v) == 0);
        kz_model *mv = kz_model_load(p, NULL, err, sizeof err);
        /* token_embd with 100 rows loads (n_vocab from its shape) */
        CHECKF(mv && kz_model_n_vocab(mv) == 100, "n_vocab from token_embd: %s", mv ? "" : err);
        kz_model_free(mv);
        unlink(p);
    }

    memset(&v, 0, sizeof v);
    v.str_key = "general.architecture";
    v.str_val = "llama";
    expect_load_error("unsupported arch", &v, "unsupported architecture 'llama' (supported: qwen35, qwen3)", NULL);

    /* a matrix type the engine cannot compute with: first known type that is not computable */
    const uint32_t cand[] = {KZ_T_Q4_1, KZ_T_Q5_0, KZ_T_Q5_1, KZ_T_IQ4_NL, KZ_T_Q8_1};
    uint32_t bad = UINT32_MAX;
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++)
        if (kz_type_get(cand[i]) && !kz_type_compute_ok(cand[i]) && kz_row_bytes(cand[i], 64)) { bad = cand[i]; break; }
    if (bad != UINT32_MAX) {
        memset(&v, 0, sizeof v);
        v.type_tensor = "blk.2.ffn_up.weight";
        v.type = bad;
        expect_load_error("uncomputable matrix type", &v, "blk.2.ffn_up.weight", kz_type_get(bad)->name);
    } else {
        CHECKF(0, "no uncomputable type found to test with");
    }
    memset(&v, 0, sizeof v);
    v.type_tensor = "blk.0.attn_norm.weight";
    v.type = KZ_T_Q8_0;
    expect_load_error("quantized 1-D tensor", &v, "blk.0.attn_norm.weight", "expected F32, F16 or BF16");

    memset(&v, 0, sizeof v);
    v.drop_key = "qwen35.embedding_length";
    expect_load_error("missing key", &v, "missing metadata key 'qwen35.embedding_length'", NULL);
    memset(&v, 0, sizeof v);
    v.drop_key = "qwen35.ssm.state_size";
    expect_load_error("missing ssm key", &v, "qwen35.ssm.state_size", NULL);
    memset(&v, 0, sizeof v);
    v.drop_key = "qwen35.attention.layer_norm_rms_epsilon";
    expect_load_error("missing eps", &v, "qwen35.attention.layer_norm_rms_epsilon", NULL);
    memset(&v, 0, sizeof v);
    v.str_key = "qwen35.block_count";
    v.str_val = "four";
    expect_load_error("key of wrong type", &v, "qwen35.block_count", "wrong type");
    memset(&v, 0, sizeof v);
    v.u32_key = "qwen35.attention.head_count_kv";
    v.u32_val = 3;
    expect_load_error("heads not divisible", &v, "head_count", NULL);
    memset(&v, 0, sizeof v);
    v.u32_key = "qwen35.full_attention_interval";
    v.u32_val = 2; /* layer 1 would need attention tensors */
    expect_load_error("layer pattern from interval", &v, "missing tensor 'blk.1.attn_q.weight'", NULL);
    static const uint8_t all_rec[4] = {1, 1, 1, 1};
    memset(&v, 0, sizeof v);
    v.arr_key = "qwen35.attention.recurrent_layers";
    v.arr_bool = all_rec;
    v.arr_n = 4;
    expect_load_error("recurrent_layers overrides interval", &v, "missing tensor 'blk.3.attn_qkv.weight'", NULL);
    memset(&v, 0, sizeof v);
    v.drop_key = "tokenizer.ggml.tokens";
    expect_load_error("missing tokenizer", &v, "tokenizer", NULL);
    memset(&v, 0, sizeof v);
    v.base = g_good3;
    v.drop_tensor = "blk.0.ffn_norm.weight";
    expect_load_error("qwen3 missing ffn_norm", &v, "missing tensor 'blk.0.ffn_norm.weight'", NULL);
}

static void test_variants_that_load(void) {
    /* 1-D tensors stored as F16 / BF16 are converted; results stay close to the F32 file */
    kz_model *m0 = load(g_good35);
    if (!m0) return;
    const int nv = kz_model_n_vocab(m0), n = 12;
    int32_t toks[12];
    for (int i = 0; i < n; i++) toks[i] = (i * 37 + 5) % nv;
    float *ref = malloc((size_t)n * nv * sizeof(float)), *got = malloc((size_t)n * nv * sizeof(float));
    CHECK(eval(m0, 64, 2, KZ_KV_F32, toks, n, 10, ref) == 0);
    const char *names[] = {"output_norm.weight", "blk.0.ssm_a", "blk.3.attn_q_norm.weight", "blk.1.ssm_conv1d.weight"};
    const uint32_t types[] = {KZ_T_F16, KZ_T_BF16, KZ_T_F16, KZ_T_BF16};
    for (int k = 0; k < 4; k++) {
        variant v;
        memset(&v, 0, sizeof v);
        v.type_tensor = names[k];
        v.type = types[k];
        char p[160];
        path_in(p, sizeof p, "f16vec.gguf");
        CHECK(rewrite(g_good35, p, &v) == 0);
        kz_model *m = load(p);
        if (m) {
            CHECK(eval(m, 64, 2, KZ_KV_F32, toks, n, 10, got) == 0);
            double r = rel_diff(got, ref, (size_t)n * nv);
            CHECKF(r > 0 && r < 3e-2, "%s as %s: rel %g", names[k], kz_type_get(types[k])->name, r);
            kz_model_free(m);
        }
        unlink(p);
    }
    free(ref);
    free(got);
    kz_model_free(m0);

    /* untied LM head, MTP block (ignored), F16/Q8_0 matrices */
    kz_mkmodel_cfg c;
    small_cfg(&c, "qwen35");
    c.tied = 0;
    c.n_nextn = 1;
    char p[160], err[512], desc[1024];
    path_in(p, sizeof p, "mtp.gguf");
    CHECKF(kz_mkmodel_write(&c, p, err, sizeof err) == 0, "mkmodel: %s", err);
    kz_model *m = load(p);
    if (m) {
        CHECK(m->hp.n_layer == 4 && m->hp.n_layer_all == 5 && m->output.data != m->tok_embd.data);
        kz_model_describe(m, desc, sizeof desc);
        CHECKF(strstr(desc, "qwen35") && strstr(desc, "MTP") && strstr(desc, "separate"), "describe: %s", desc);
        CHECK(!strcmp(kz_model_arch(m), "qwen35") && kz_model_n_ctx_train(m) == 256);
        kz_model_free(m);
    }
    unlink(p);
    const uint32_t wts[] = {KZ_T_F16, KZ_T_BF16, KZ_T_Q8_0, KZ_T_Q4_0};
    for (int k = 0; k < 4; k++) {
        small_cfg(&c, k % 2 ? "qwen3" : "qwen35");
        c.wtype = wts[k];
        path_in(p, sizeof p, "typed.gguf");
        CHECKF(kz_mkmodel_write(&c, p, err, sizeof err) == 0, "mkmodel: %s", err);
        m = load(p);
        if (m) {
            float *lg = malloc((size_t)4 * kz_model_n_vocab(m) * sizeof(float));
            int32_t t4[4] = {1, 2, 3, 4};
            CHECK(eval(m, 64, 2, KZ_KV_F16, t4, 4, 3, lg) == 0);
            CHECKF(all_finite(lg, (size_t)4 * kz_model_n_vocab(m)), "type %u: non-finite logits", wts[k]);
            kz_model_describe(m, desc, sizeof desc);
            CHECKF(strstr(desc, kz_type_get(wts[k])->name) != NULL, "describe lacks type: %s", desc);
            free(lg);
            kz_model_free(m);
        }
        unlink(p);
    }
}

static void test_seq_errors(const char *path) {
    kz_model *m = load(path);
    if (!m) return;
    char err[512] = "";
    const int nv = kz_model_n_vocab(m);
    kz_seq *s = kz_seq_new(m, INT32_MAX, 512, 2, KZ_KV_F32, err, sizeof err);
    CHECKF(!s && strstr(err, "n_ctx"), "huge n_ctx: '%s'", err);
    kz_seq_free(s);
    s = kz_seq_new(m, 64, 8, 2, (kz_kv_type)7, err, sizeof err);
    CHECKF(!s && strstr(err, "unknown KV cache type 7"), "bad kv type: '%s'", err);
    kz_seq_free(s);
    s = kz_seq_new(m, 64, 8, 2, KZ_KV_Q8_0, err, sizeof err); /* q8_0 cache (head_dim % 32 == 0) */
    CHECKF(s != NULL, "q8_0 kv: '%s'", err);
    kz_seq_free(s);

    s = kz_seq_new(m, 16, 4, 3, KZ_KV_F32, err, sizeof err);
    CHECKF(s != NULL, "seq: %s", err);
    if (!s) { kz_model_free(m); return; }
    CHECK(kz_seq_n_ctx(s) == 16 && kz_seq_n_past(s) == 0);
    float *lg = malloc((size_t)16 * nv * sizeof(float)), *ref = malloc((size_t)16 * nv * sizeof(float));
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = (i * 53 + 11) % nv;

    int32_t bad[3] = {1, nv, 3};
    CHECK(kz_forward(m, s, bad, 3, lg, 1, err, sizeof err) == -1);
    char want[64];
    snprintf(want, sizeof want, "token id %d", nv);
    CHECKF(strstr(err, want) && strstr(err, "out of range"), "bad token: '%s'", err);
    bad[1] = -5;
    CHECK(kz_forward(m, s, bad, 3, lg, 1, err, sizeof err) == -1 && strstr(err, "-5"));
    CHECK(kz_forward(m, s, toks, 0, lg, 1, err, sizeof err) == -1);
    CHECK(kz_seq_n_past(s) == 0);

    CHECK(kz_forward(m, s, toks, 10, lg, 1, err, sizeof err) == 0);
    CHECK(kz_forward(m, s, toks + 10, 7, lg + (size_t)10 * nv, 1, err, sizeof err) == -1);
    CHECKF(strstr(err, "context full") && strstr(err, "16"), "ctx full: '%s'", err);
    CHECK(kz_seq_n_past(s) == 10);
    CHECK(kz_forward(m, s, toks + 10, 6, lg + (size_t)10 * nv, 1, err, sizeof err) == 0);
    CHECK(kz_seq_n_past(s) == 16);
    CHECK(kz_forward(m, s, toks, 1, NULL, 0, err, sizeof err) == -1 && strstr(err, "context full"));

    /* the errors changed nothing: same logits as a fresh sequence with the same chunking */
    kz_seq *s2 = kz_seq_new(m, 16, 4, 1, KZ_KV_F32, err, sizeof err);
    CHECK(s2 && kz_forward(m, s2, toks, 10, ref, 1, err, sizeof err) == 0 &&
          kz_forward(m, s2, toks + 10, 6, ref + (size_t)10 * nv, 1, err, sizeof err) == 0);
    CHECKF(memcmp(lg, ref, (size_t)16 * nv * sizeof(float)) == 0, "errors changed the state (or threads change bits)");
    /* reset reproduces exactly (same batches); logits == NULL skips the head */
    kz_seq_reset(s);
    CHECK(kz_seq_n_past(s) == 0);
    CHECK(kz_forward(m, s, toks, 8, NULL, 0, err, sizeof err) == 0);
    CHECK(kz_forward(m, s, toks + 8, 2, lg, 0, err, sizeof err) == 0);
    CHECKF(memcmp(lg, ref + (size_t)9 * nv, (size_t)nv * sizeof(float)) == 0, "reset differs");
    /* other batches: the chunkwise GDN sums in another order, equal to float rounding */
    kz_seq_reset(s);
    CHECK(kz_forward(m, s, toks, 9, NULL, 0, err, sizeof err) == 0);
    CHECK(kz_forward(m, s, toks + 9, 1, lg, 0, err, sizeof err) == 0);
    CHECKF(rel_diff(lg, ref + (size_t)9 * nv, (size_t)nv) < 1e-5, "reset + split differs");
    kz_seq_free(s2);
    kz_seq_free(s);
    free(lg);
    free(ref);
    kz_model_free(m);
}

/* prefill chunking, token-by-token decode, want_all=0, f16 KV: all agree */
static void test_consistency(const char *path) {
    kz_model *m = load(path);
    if (!m) return;
    const int nv = kz_model_n_vocab(m), n = 23;
    int32_t toks[23];
    for (int i = 0; i < n; i++) toks[i] = (i * 97 + 3) % nv;
    size_t sz = (size_t)n * nv;
    float *a = malloc(sz * sizeof(float)), *b = malloc(sz * sizeof(float)), *c = malloc(sz * sizeof(float));
    CHECK(eval(m, 64, 2, KZ_KV_F32, toks, n, n, a) == 0);       /* one chunk */
    CHECK(eval(m, 5, 3, KZ_KV_F32, toks, n, n, b) == 0);        /* chunks of 5 */
    CHECK(eval(m, 64, 1, KZ_KV_F32, toks, n, 0, c) == 0);       /* all decode steps */
    CHECK(all_finite(a, sz));
    double r1 = rel_diff(b, a, sz), r2 = rel_diff(c, a, sz);
    CHECKF(r1 < 1e-5 && r2 < 1e-5, "%s: chunked rel %g, token-by-token rel %g", m->arch_name, r1, r2);
    /* logits must depend on the context (a test that cannot fail is a defect) */
    CHECK(rel_diff(a + (size_t)(n - 1) * nv, a + (size_t)(n - 2) * nv, nv) > 1e-2);
    CHECK(eval(m, 64, 2, KZ_KV_F16, toks, n, 15, b) == 0);
    double r3 = rel_diff(b, a, sz);
    CHECKF(r3 > 0 && r3 < 2e-2, "%s: f16 kv rel %g", m->arch_name, r3);
    /* want_all = 0 gives the last row */
    char err[256];
    kz_seq *s = kz_seq_new(m, 64, 64, 2, KZ_KV_F32, err, sizeof err);
    CHECK(s && kz_forward(m, s, toks, n, b, 0, err, sizeof err) == 0);
    CHECK(memcmp(b, a + (size_t)(n - 1) * nv, (size_t)nv * sizeof(float)) == 0);
    kz_seq_free(s);
    free(a);
    free(b);
    free(c);
    kz_model_free(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kz_model_errors_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    char err[512];
    kz_mkmodel_cfg c;
    small_cfg(&c, "qwen35");
    path_in(g_good35, sizeof g_good35, "good35.gguf");
    int ok = kz_mkmodel_write(&c, g_good35, err, sizeof err) == 0;
    CHECKF(ok, "mkmodel qwen35: %s", err);
    small_cfg(&c, "qwen3");
    path_in(g_good3, sizeof g_good3, "good3.gguf");
    ok &= kz_mkmodel_write(&c, g_good3, err, sizeof err) == 0;
    CHECKF(ok, "mkmodel qwen3: %s", err);
    if (ok) {
        test_load_errors();
        test_variants_that_load();
        test_seq_errors(g_good35);
        test_seq_errors(g_good3);
        test_consistency(g_good35);
        test_consistency(g_good3);
    }
    unlink(g_good35);
    unlink(g_good3);
    rmdir(g_dir);
    KT_END();
}
