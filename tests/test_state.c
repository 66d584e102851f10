/* Prompt state (kz_state_save / kz_state_load, memory and file) and kz_generate's system
 * prefix reuse, on tiny random models: a restored state continues with bit-identical logits;
 * another model's, a truncated, a corrupt or an incompatible image is refused with a clear
 * message and leaves the context as it was; a second kz_generate with the same system prompt
 * evaluates only the tokens after the system block and writes the same text as a fresh context. */
#include <stdint.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "tools/mkmodel/mkmodel.h"
#include "model/types.h"

static const char *SYS = "You are a terse assistant. Answer in one line.";

static kz_model *make_model(const char *preset, int n_layer, uint32_t wtype, const char *path) {
    kz_mkmodel_cfg c;
    char err[256];
    if (kz_mkmodel_preset(preset, &c) != 0) return NULL;
    if (n_layer) c.n_layer = n_layer;
    c.wtype = wtype;
    c.n_threads = 1;
    if (kz_mkmodel_write(&c, path, err, sizeof err)) { fprintf(stderr, "mkmodel %s: %s\n", path, err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load %s: %s\n", path, err);
    return m;
}

static kz_context *ctx(kz_model *m, int n_ctx, kz_kv_type kv) {
    kz_context_params p = kz_context_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = 16;
    p.n_threads = 1;
    p.kv_type = kv;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    if (!c) fprintf(stderr, "kz_context_new: %s\n", err);
    return c;
}

static void toks(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; t[i] = 32 + (int32_t)((seed >> 16) % 200); }
}

static int contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

typedef struct { char text[4096]; size_t len; } sink;
static int sink_cb(const char *p, size_t n, void *ud) {
    sink *s = ud;
    if (s->len + n < sizeof s->text) { memcpy(s->text + s->len, p, n); s->len += n; s->text[s->len] = 0; }
    return 0;
}

/* save after 40 tokens, continue 12 more in the original and in a restored context */
static void test_roundtrip(kz_model *m, const char *name, kz_kv_type kv) {
    const int V = kz_model_n_vocab(m), N0 = 40, N1 = 12;
    int32_t t[64];
    toks(t, N0 + N1, 7);
    kz_context *a = ctx(m, 128, kv), *b = ctx(m, 128, kv);
    CHECK(a && b);
    if (!a || !b) return;
    float *la = malloc((size_t)N1 * V * sizeof(float)), *lb = malloc((size_t)N1 * V * sizeof(float));
    CHECK(kz_eval(a, t, N0, la, 0) == 0);
    size_t n = kz_state_size(a);
    unsigned char *buf = malloc(n);
    CHECK(n > 128 && kz_state_save(a, buf, n) == n);
    CHECK(!memcmp(buf, "KZSTATE", 8) && buf[8] == 2); /* magic, format version 2 */
    CHECK(kz_state_save(a, buf, n - 1) == 0 && contains(kz_context_error(a), "too small"));
    CHECK(kz_eval(a, t + N0, N1, la, 1) == 0);
    CHECKF(kz_state_load(b, buf, n) == 0, "%s: %s", name, kz_context_error(b));
    CHECK(kz_context_n_past(b) == N0);
    CHECK(kz_eval(b, t + N0, N1, lb, 1) == 0);
    CHECKF(!memcmp(la, lb, (size_t)N1 * V * sizeof(float)), "%s: logits after load differ", name);
    /* file, and a load over a context that already holds another sequence */
    char path[64];
    snprintf(path, sizeof path, "/tmp/kz_state_%d.bin", (int)getpid());
    kz_context_reset(a);
    CHECK(kz_eval(a, t, N0, NULL, 0) == 0);
    CHECKF(kz_state_save_file(a, path) == 0, "%s", kz_context_error(a));
    CHECK(kz_state_load_file(b, path) == 0 && kz_context_n_past(b) == N0);
    CHECK(kz_eval(b, t + N0, N1, lb, 1) == 0);
    CHECKF(!memcmp(la, lb, (size_t)N1 * V * sizeof(float)), "%s: logits after file load differ", name);
    CHECK(kz_state_load_file(b, "/nonexistent/dir/x.bin") == -1 && contains(kz_context_error(b), "/nonexistent/dir/x.bin"));
    remove(path);
    printf("%s kv %s: state of %d tokens = %zu bytes, bit-identical logits after load\n", name,
           kv == KZ_KV_F32 ? "f32" : kv == KZ_KV_F16 ? "f16" : "q8_0", N0, n);
    /* empty state */
    kz_context_reset(a);
    n = kz_state_size(a);
    CHECK(n > 0 && kz_state_save(a, buf, n) == n && kz_state_load(b, buf, n) == 0 && kz_context_n_past(b) == 0);
    free(la); free(lb); free(buf);
    kz_context_free(a); kz_context_free(b);
}

/* saved logits: generating the saved prompt again needs no prefill and gives the same text */
static void test_logits_saved(kz_model *m) {
    kz_context *a = ctx(m, 256, KZ_KV_F16), *b = ctx(m, 256, KZ_KV_F16);
    CHECK(a && b);
    if (!a || !b) return;
    int32_t pt[256];
    int32_t *p = NULL;
    int np = kz_context_prompt_tokens(a, SYS, "Hi", &p);
    CHECK(np > 0 && np < 256);
    memcpy(pt, p, (size_t)np * 4);
    free(p);
    float *lg = malloc((size_t)kz_model_n_vocab(m) * sizeof(float));
    CHECK(kz_eval(a, pt, np, lg, 0) == 0);
    size_t n = kz_state_size(a);
    unsigned char *buf = malloc(n);
    CHECK(kz_state_save(a, buf, n) == n && kz_state_load(b, buf, n) == 0);
    sink sa = {{0}, 0}, sb = {{0}, 0};
    kz_stats st;
    CHECK(kz_generate(a, SYS, "Hi", 10, sink_cb, &sa, &st) == 0 && st.n_reused == np && st.n_prompt == 0);
    CHECK(kz_generate(b, SYS, "Hi", 10, sink_cb, &sb, &st) == 0);
    CHECKF(st.n_reused == np && st.n_prompt == 0, "reused %d of %d", st.n_reused, np);
    CHECK(sa.len == sb.len && !memcmp(sa.text, sb.text, sa.len));
    free(lg); free(buf);
    kz_context_free(a); kz_context_free(b);
}

/* every refused image leaves the context as it was */
static void expect_refused(kz_context *c, const void *buf, size_t n, const char *want, const char *what) {
    int before = kz_context_n_past(c);
    int r = kz_state_load(c, buf, n);
    CHECKF(r == -1 && contains(kz_context_error(c), want), "%s: r %d, error '%s', want '%s'", what, r,
           kz_context_error(c), want);
    CHECK(kz_context_n_past(c) == before);
}

static void test_refused(kz_model *m, kz_model *other_arch, kz_model *other_layers, kz_model *other_type) {
    const int V = kz_model_n_vocab(m);
    int32_t t[48];
    toks(t, 48, 3);
    kz_context *a = ctx(m, 128, KZ_KV_F16), *b = ctx(m, 128, KZ_KV_F16);
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(kz_eval(a, t, 30, NULL, 0) == 0);
    const size_t n = kz_state_size(a);
    unsigned char *buf = malloc(n), *bad = malloc(n);
    CHECK(kz_state_save(a, buf, n) == n);
    /* b holds another sequence; after all refusals it must continue exactly like a twin */
    CHECK(kz_eval(b, t + 10, 20, NULL, 0) == 0);

    kz_model *others[] = {other_arch, other_layers, other_type};
    const char *why[] = {"other arch", "other layer count", "other weight type"};
    for (int i = 0; i < 3; i++) {
        kz_context *o = others[i] ? ctx(others[i], 128, KZ_KV_F16) : NULL;
        CHECK(o != NULL);
        if (!o) continue;
        expect_refused(o, buf, n, "different model", why[i]);
        printf("refused (%s): %s\n", why[i], kz_context_error(o));
        if (i == 2) CHECK(contains(kz_context_error(o), "other tensor shapes or types"));
        kz_context_free(o);
    }
    expect_refused(b, buf, n - 1, "truncated", "one byte short");
    expect_refused(b, buf, n / 2, "truncated", "half");
    expect_refused(b, buf, 100, "truncated", "inside the header");
    expect_refused(b, buf, 3, "not a Kazeia state", "3 bytes");
    expect_refused(b, NULL, 0, "not a Kazeia state", "empty");
    const size_t offs[] = {130, n / 2, n - 200, n - 1};
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
        memcpy(bad, buf, n);
        bad[offs[i]] ^= 0x10;
        expect_refused(b, bad, n, "corrupt (checksum mismatch)", "flipped bit");
    }
    memcpy(bad, buf, n);
    bad[0] = 'X';
    expect_refused(b, bad, n, "not a Kazeia state file", "bad magic");
    memcpy(bad, buf, n);
    bad[8] = 3;
    expect_refused(b, bad, n, "version 3 is not supported", "future version");
    unsigned char *longer = malloc(n + 5);
    memcpy(longer, buf, n);
    memset(longer + n, 0, 5);
    expect_refused(b, longer, n + 5, "too long", "trailing bytes");
    free(longer);
    /* incompatible contexts */
    kz_context *k32 = ctx(m, 128, KZ_KV_F32), *small = ctx(m, 16, KZ_KV_F16);
    CHECK(k32 && small);
    if (k32) { expect_refused(k32, buf, n, "KV cache", "kv type"); kz_context_free(k32); }
    if (small) { expect_refused(small, buf, n, "n_ctx 16", "n_ctx"); kz_context_free(small); }

    /* b is untouched: it continues like a twin that saw the same tokens */
    kz_context *twin = ctx(m, 128, KZ_KV_F16);
    float *l1 = malloc((size_t)V * sizeof(float)), *l2 = malloc((size_t)V * sizeof(float));
    CHECK(twin && kz_eval(twin, t + 10, 20, NULL, 0) == 0);
    CHECK(kz_eval(b, t + 40, 3, l1, 0) == 0 && kz_eval(twin, t + 40, 3, l2, 0) == 0);
    CHECK(!memcmp(l1, l2, (size_t)V * sizeof(float)));
    /* state files: wrong model through the file API names the file */
    char path[64];
    snprintf(path, sizeof path, "/tmp/kz_state_bad_%d.bin", (int)getpid());
    CHECK(kz_state_save_file(a, path) == 0);
    kz_context *o = other_arch ? ctx(other_arch, 128, KZ_KV_F16) : NULL;
    if (o) {
        CHECK(kz_state_load_file(o, path) == -1 && contains(kz_context_error(o), path) &&
              contains(kz_context_error(o), "different model"));
        kz_context_free(o);
    }
    FILE *f = fopen(path, "r+b");
    if (f) { fseek(f, 200, SEEK_SET); fputc(0x55, f); fclose(f); }
    CHECK(kz_state_load_file(b, path) == -1 && contains(kz_context_error(b), "corrupt"));
    CHECK(truncate(path, (off_t)(n - 10)) == 0);
    CHECK(kz_state_load_file(b, path) == -1 && contains(kz_context_error(b), "truncated"));
    remove(path);
    free(l1); free(l2); free(buf); free(bad);
    kz_context_free(a); kz_context_free(b); kz_context_free(twin);
}

static int gen(kz_context *c, const char *sys, const char *user, sink *s, kz_stats *st) {
    memset(s, 0, sizeof *s);
    return kz_generate(c, sys, user, 12, sink_cb, s, st);
}

static int same_history(kz_context *a, kz_context *b) {
    int na, nb;
    const int32_t *ha = kz_context_history(a, &na), *hb = kz_context_history(b, &nb);
    return na == nb && !memcmp(ha, hb, (size_t)na * 4);
}

/* system block length: tokens before the user turn's <|im_start|> */
static int sys_len(kz_model *m, const char *sys) {
    char blk[512];
    snprintf(blk, sizeof blk, "<|im_start|>system\n%s<|im_end|>\n", sys);
    int32_t t[512];
    return kz_tokenize(m, blk, strlen(blk), 1, t, 512);
}

static void test_prefix_reuse(kz_model *m, const char *name) {
    kz_context *c = ctx(m, 512, KZ_KV_F16);
    CHECK(c != NULL);
    if (!c) return;
    const int ns = sys_len(m, SYS);
    const char *users[] = {"Name a color.", "What is two plus two? Think briefly.", "Name a color."};
    for (int i = 0; i < 3; i++) {
        int32_t *p = NULL;
        int np = kz_context_prompt_tokens(c, SYS, users[i], &p);
        free(p);
        sink s, sf;
        kz_stats st, stf;
        CHECK(gen(c, SYS, users[i], &s, &st) == 0);
        CHECKF(st.n_reused == (i ? ns : 0) && st.n_prompt == np - st.n_reused, "%s call %d: reused %d (system %d), "
               "evaluated %d of %d", name, i, st.n_reused, ns, st.n_prompt, np);
        kz_context *f = ctx(m, 512, KZ_KV_F16); /* fresh context, same request */
        CHECK(f && gen(f, SYS, users[i], &sf, &stf) == 0 && stf.n_reused == 0 && stf.n_prompt == np);
        CHECKF(s.len == sf.len && !memcmp(s.text, sf.text, s.len) && same_history(c, f),
               "%s call %d: text differs from a fresh context", name, i);
        if (i == 1) printf("%s: second generate evaluated %d of %d prompt tokens (system block %d reused), "
                           "prefill %.2f ms vs %.2f ms fresh\n", name, st.n_prompt, np, st.n_reused,
                           st.t_prefill_ms, stf.t_prefill_ms);
        kz_context_free(f);
    }
    /* another system prompt replaces the snapshot; no system prompt reuses nothing */
    sink s;
    kz_stats st;
    CHECK(gen(c, "Other rules.", "Name a color.", &s, &st) == 0 && st.n_reused == 0);
    CHECK(gen(c, "Other rules.", "And a fruit?", &s, &st) == 0 && st.n_reused == sys_len(m, "Other rules."));
    CHECK(gen(c, NULL, "And a fruit?", &s, &st) == 0 && st.n_reused == 0);
    CHECK(gen(c, SYS, "And a fruit?", &s, &st) == 0 && st.n_reused == 0);
    /* the snapshot outlives a reset (it is a cache keyed by the tokens) */
    kz_context_reset(c);
    CHECK(gen(c, SYS, "One more.", &s, &st) == 0 && st.n_reused == ns);
    kz_context_free(c);
}

int main(void) {
    char p1[64], p2[64], p3[64], p4[64];
    const int pid = (int)getpid();
    snprintf(p1, sizeof p1, "/tmp/kz_st35_%d.gguf", pid);
    snprintf(p2, sizeof p2, "/tmp/kz_st3_%d.gguf", pid);
    snprintf(p3, sizeof p3, "/tmp/kz_st35l_%d.gguf", pid);
    snprintf(p4, sizeof p4, "/tmp/kz_st35q_%d.gguf", pid);
    kz_model *m35 = make_model("qwen35-tiny", 0, KZ_T_F16, p1);
    kz_model *m3 = make_model("qwen3-tiny", 0, KZ_T_F16, p2);
    kz_model *m35l = make_model("qwen35-tiny", 4, KZ_T_F16, p3);
    kz_model *m35q = make_model("qwen35-tiny", 0, KZ_T_Q8_0, p4);
    CHECK(m35 && m3 && m35l && m35q);
    if (m35 && m3) {
        test_roundtrip(m35, "qwen35", KZ_KV_F16);
        test_roundtrip(m35, "qwen35", KZ_KV_F32);
        test_roundtrip(m35, "qwen35", KZ_KV_Q8_0);
        test_roundtrip(m3, "qwen3", KZ_KV_F16);
        test_logits_saved(m35);
        test_refused(m35, m3, m35l, m35q);
        test_prefix_reuse(m35, "qwen35");
        test_prefix_reuse(m3, "qwen3");
    }
    kz_model_free(m35); kz_model_free(m3); kz_model_free(m35l); kz_model_free(m35q);
    remove(p1); remove(p2); remove(p3); remove(p4);
    KT_END();
}
