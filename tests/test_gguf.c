/* GGUF reader/writer: round trip of every value type and several tensor types, hand-built
 * hostile files (each must fail with a message naming the problem), truncation at every length
 * and a fixed-seed mutation loop (run under ASan+UBSan in CI). */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "kt.h"
#include "model/types.h"

typedef unsigned long long ull;

static char g_dir[256];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) { free(p); p = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* open_mem on an exact-size heap copy so ASan flags any read past the end */
static kz_gguf *open_copy(const uint8_t *buf, size_t n, uint8_t **copy, char *err, size_t errlen) {
    *copy = malloc(n ? n : 1);
    if (n) memcpy(*copy, buf, n);
    return kz_gguf_open_mem(*copy, n, err, errlen);
}

/* ---------- byte builder for hand-made files ---------- */
typedef struct { uint8_t *p; size_t n, cap; } bb;
static void bb_put(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) { uint8_t x[4]; for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> 8 * i); bb_put(b, x, 4); }
static void bb_u64(bb *b, uint64_t v) { uint8_t x[8]; for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> 8 * i); bb_put(b, x, 8); }
static void bb_str(bb *b, const char *s) { bb_u64(b, strlen(s)); bb_put(b, s, strlen(s)); }
static void bb_pad(bb *b, size_t a) { while (b->n % a) bb_u8(b, 0); }
static void bb_hdr(bb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, nt);
    bb_u64(b, nkv);
}
static void bb_kv_u32(bb *b, const char *k, uint32_t v) { bb_str(b, k); bb_u32(b, KZ_GGUF_U32); bb_u32(b, v); }
static void bb_kv_str(bb *b, const char *k, const char *v) { bb_str(b, k); bb_u32(b, KZ_GGUF_STR); bb_str(b, v); }
static void bb_ti(bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, nd);
    for (uint32_t d = 0; d < nd; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_data(bb *b, size_t n, unsigned long long *rng) {
    for (size_t i = 0; i < n; i++) bb_u8(b, (uint8_t)(kt_rng(rng) | 1));
}

/* A valid two-tensor file: "a" F32[8] at 0, "b" Q8_0[32,2] (68 bytes) at 32. */
static void base_file(bb *b, unsigned long long *rng) {
    bb_hdr(b, 3, 2, 2);
    bb_kv_str(b, "general.architecture", "test");
    bb_kv_u32(b, "general.alignment", 32);
    bb_ti(b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 0);
    bb_ti(b, "b", 2, (uint64_t[]){32, 2}, KZ_T_Q8_0, 32);
    bb_pad(b, 32);
    bb_data(b, 32 + 68, rng);
}

static int ci_contains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

static void expect_fail(bb *b, const char *what, const char *needle) {
    char err[512] = "";
    uint8_t *copy;
    kz_gguf *g = open_copy(b->p, b->n, &copy, err, sizeof err);
    if (getenv("KZ_TEST_VERBOSE")) printf("  %-40s -> %s\n", what, err);
    CHECKF(g == NULL, "%s: hostile file was accepted", what);
    CHECKF(err[0] != 0, "%s: empty error message", what);
    CHECKF(ci_contains(err, needle), "%s: message '%s' does not mention '%s'", what, err, needle);
    CHECKF(!strchr(err, '\n'), "%s: message is not one line", what);
    kz_gguf_close(g);
    free(copy);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void expect_ok(bb *b, const char *what) {
    char err[512] = "";
    uint8_t *copy;
    kz_gguf *g = open_copy(b->p, b->n, &copy, err, sizeof err);
    CHECKF(g != NULL, "%s: valid file rejected: %s", what, err);
    kz_gguf_close(g);
    free(copy);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---------- round trip ---------- */

typedef struct { const char *name; uint32_t type, nd; int64_t ne[4]; size_t nbytes; uint8_t *data; } ttest;

static void test_roundtrip(unsigned long long *rng, char *path_out, size_t path_len) {
    char path[300];
    tmp_path(path, sizeof path, "rt.gguf");
    snprintf(path_out, path_len, "%s", path);
    kz_gguf_writer *w = kz_gguf_writer_new(64);
    CHECK(w != NULL);

    /* one kv of each scalar type, with values chosen to exercise sign/width handling */
    uint8_t u8 = 250; int8_t i8 = -100; uint16_t u16 = 65000; int16_t i16 = -30000;
    uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = -3.25e-7f;
    uint8_t bl = 1; uint64_t u64 = 0xF123456789ABCDEFull; int64_t i64 = -1234567890123456789ll;
    double f64 = 2.718281828459045e200;
    CHECK(kz_gguf_w_str(w, "general.architecture", "qwen35") == 0);
    CHECK(kz_gguf_w_scalar(w, "t.u8", KZ_GGUF_U8, &u8) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.i8", KZ_GGUF_I8, &i8) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.u16", KZ_GGUF_U16, &u16) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.i16", KZ_GGUF_I16, &i16) == 0);
    CHECK(kz_gguf_w_u32(w, "t.u32", u32) == 0);
    CHECK(kz_gguf_w_i32(w, "t.i32", i32) == 0);
    CHECK(kz_gguf_w_f32(w, "t.f32", f32) == 0);
    CHECK(kz_gguf_w_bool(w, "t.bool", bl) == 0);
    CHECK(kz_gguf_w_u64(w, "t.u64", u64) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.i64", KZ_GGUF_I64, &i64) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.f64", KZ_GGUF_F64, &f64) == 0);
    CHECK(kz_gguf_w_u32(w, "t.small", 7) == 0);
    CHECK(kz_gguf_w_scalar(w, "t.f64small", KZ_GGUF_F64, &(double){0.5}) == 0);
    CHECK(kz_gguf_w_str(w, "t.empty_str", "") == 0);

    /* arrays of every scalar type with random values */
    enum { AN = 13 };
    uint8_t arrdata[KZ_GGUF_NTYPES][AN * 8];
    for (uint32_t t = 0; t < KZ_GGUF_NTYPES; t++) {
        if (t == KZ_GGUF_STR || t == KZ_GGUF_ARR) continue;
        for (int i = 0; i < AN * 8; i++) arrdata[t][i] = (uint8_t)kt_rng(rng);
        if (t == KZ_GGUF_BOOL) for (int i = 0; i < AN; i++) arrdata[t][i] &= 1;
        if (t == KZ_GGUF_F32) for (int i = 0; i < AN; i++) { float v = kt_randf(rng) * 1000; memcpy(arrdata[t] + 4 * i, &v, 4); }
        if (t == KZ_GGUF_F64) for (int i = 0; i < AN; i++) { double v = kt_randf(rng) * 1e10; memcpy(arrdata[t] + 8 * i, &v, 8); }
        char key[32];
        snprintf(key, sizeof key, "arr.%s", kz_gguf_type_name(t));
        CHECK(kz_gguf_w_arr(w, key, t, arrdata[t], AN) == 0);
    }
    CHECK(kz_gguf_w_arr(w, "arr.empty", KZ_GGUF_I32, NULL, 0) == 0);
    const char *strs[] = {"hello", "", "w\xc3\xb6rld", "a\0b", "tab\tnewline\n"};
    const uint64_t lens[] = {5, 0, 6, 3, 12};
    CHECK(kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", strs, lens, 5) == 0);
    CHECK(kz_gguf_w_arr_str(w, "arr.str_empty", NULL, NULL, 0) == 0);

    /* writer-side rejections (checked on a separate writer so this one stays usable) */
    {
        kz_gguf_writer *w2 = kz_gguf_writer_new(0);
        CHECK(kz_gguf_w_u32(w2, "k", 1) == 0);
        CHECK(kz_gguf_w_u32(w2, "k", 2) == -1);
        CHECK(ci_contains(kz_gguf_writer_error(w2), "duplicate"));
        CHECK(kz_gguf_w_u32(w2, "k2", 2) == -1); /* sticky */
        kz_gguf_writer_free(w2);
        w2 = kz_gguf_writer_new(0);
        CHECK(kz_gguf_w_u32(w2, "general.alignment", 3) == -1);
        CHECK(ci_contains(kz_gguf_writer_error(w2), "power of two"));
        kz_gguf_writer_free(w2);
        w2 = kz_gguf_writer_new(64);
        CHECK(kz_gguf_w_u32(w2, "general.alignment", 32) == -1);
        CHECK(ci_contains(kz_gguf_writer_error(w2), "conflicts"));
        kz_gguf_writer_free(w2);
        w2 = kz_gguf_writer_new(0);
        CHECK(kz_gguf_w_tensor_info(w2, "x", 2, (int64_t[]){33, 2}, KZ_T_Q8_0) == -1);
        CHECK(ci_contains(kz_gguf_writer_error(w2), "multiple"));
        kz_gguf_writer_free(w2);
        w2 = kz_gguf_writer_new(0);
        CHECK(kz_gguf_w_tensor_info(w2, "x", 1, (int64_t[]){4}, 4) == -1);
        kz_gguf_writer_free(w2);
        w2 = kz_gguf_writer_new(0);
        uint8_t two = 2;
        CHECK(kz_gguf_w_scalar(w2, "b", KZ_GGUF_BOOL, &two) == -1);
        kz_gguf_writer_free(w2);
    }

    ttest ts[] = {
        {"token_embd.weight", KZ_T_F32, 2, {7, 3, 1, 1}, 0, NULL},
        {"blk.0.attn_norm.weight", KZ_T_F16, 1, {5, 1, 1, 1}, 0, NULL},
        {"blk.0.ffn_up.weight", KZ_T_Q8_0, 2, {64, 3, 1, 1}, 0, NULL},
        {"blk.0.ffn_down.weight", KZ_T_Q4_K, 2, {256, 2, 1, 1}, 0, NULL},
        {"blk.0.ssm_conv1d.weight", KZ_T_BF16, 3, {3, 2, 5, 1}, 0, NULL},
        {"rope.i32", KZ_T_I32, 4, {1, 2, 3, 2}, 0, NULL},
    };
    enum { NT = sizeof ts / sizeof ts[0] };
    for (int i = 0; i < NT; i++) {
        ts[i].nbytes = kz_row_bytes(ts[i].type, ts[i].ne[0]) * (size_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        CHECK(ts[i].nbytes > 0);
        ts[i].data = malloc(ts[i].nbytes);
        for (size_t j = 0; j < ts[i].nbytes; j++) ts[i].data[j] = (uint8_t)(kt_rng(rng) | 0x10);
        CHECK(kz_gguf_w_tensor_info(w, ts[i].name, ts[i].nd, ts[i].ne, ts[i].type) == 0);
    }
    CHECKF(kz_gguf_writer_begin(w, path) == 0, "begin: %s", kz_gguf_writer_error(w));
    for (int i = 0; i < NT; i++) {
        if (i == 2) { /* streamed in odd-sized parts */
            size_t done = 0;
            while (done < ts[i].nbytes) {
                size_t n = ts[i].nbytes - done < 7 ? ts[i].nbytes - done : 7;
                CHECK(kz_gguf_writer_write_part(w, ts[i].data + done, n) == 0);
                done += n;
            }
            CHECK(kz_gguf_writer_end_tensor(w) == 0);
        } else {
            CHECKF(kz_gguf_writer_write_tensor(w, ts[i].data, ts[i].nbytes) == 0, "%s", kz_gguf_writer_error(w));
        }
    }
    CHECKF(kz_gguf_writer_finish(w) == 0, "finish: %s", kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);

    char err[512] = "";
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "open: %s", err);
    if (!g) goto out;
    CHECK(g->version == 3);
    CHECK(g->alignment == 64);
    CHECK(g->data_offset % 64 == 0);
    CHECK(g->n_tensors == NT);
    /* 15 scalars + 11 scalar arrays + empty + 2 string arrays + the general.alignment begin() adds */
    CHECKF(g->n_kv == 15 + 11 + 1 + 2 + 1, "n_kv %llu", (ull)g->n_kv);
    uint32_t v32;
    CHECK(kz_gguf_get_u32(g, "general.alignment", &v32) == 0 && v32 == 64);
    kz_str s;
    CHECK(kz_gguf_get_str(g, "general.architecture", &s) == 0 && s.len == 6 && !memcmp(s.ptr, "qwen35", 6));
    CHECK(kz_gguf_get_str(g, "t.empty_str", &s) == 0 && s.len == 0);
    CHECK(kz_gguf_get_u32(g, "t.u8", &v32) == 0 && v32 == 250);
    CHECK(kz_gguf_get_u32(g, "t.u16", &v32) == 0 && v32 == 65000);
    CHECK(kz_gguf_get_u32(g, "t.u32", &v32) == 0 && v32 == u32);
    CHECK(kz_gguf_get_u32(g, "t.bool", &v32) == 0 && v32 == 1);
    CHECK(kz_gguf_get_u32(g, "t.i8", &v32) == -2);   /* negative */
    CHECK(kz_gguf_get_u32(g, "t.u64", &v32) == -2);  /* too big */
    CHECK(kz_gguf_get_u32(g, "t.f32", &v32) == -2);  /* not an integer */
    CHECK(kz_gguf_get_u32(g, "general.architecture", &v32) == -2);
    CHECK(kz_gguf_get_u32(g, "missing.key", &v32) == -1);
    int64_t v64;
    CHECK(kz_gguf_get_i64(g, "t.i8", &v64) == 0 && v64 == -100);
    CHECK(kz_gguf_get_i64(g, "t.i16", &v64) == 0 && v64 == -30000);
    CHECK(kz_gguf_get_i64(g, "t.i32", &v64) == 0 && v64 == i32);
    CHECK(kz_gguf_get_i64(g, "t.i64", &v64) == 0 && v64 == i64);
    CHECK(kz_gguf_get_i64(g, "t.u32", &v64) == 0 && v64 == (int64_t)u32);
    CHECK(kz_gguf_get_i64(g, "t.u64", &v64) == -2); /* > INT64_MAX */
    CHECK(kz_gguf_get_i64(g, "t.small", &v64) == 0 && v64 == 7);
    float vf;
    CHECK(kz_gguf_get_f32(g, "t.f32", &vf) == 0 && vf == f32);
    CHECK(kz_gguf_get_f32(g, "t.f64small", &vf) == 0 && vf == 0.5f);
    CHECK(kz_gguf_get_f32(g, "t.f64", &vf) == -2); /* out of float range */
    CHECK(kz_gguf_get_f32(g, "t.u32", &vf) == -2);
    int vb;
    CHECK(kz_gguf_get_bool(g, "t.bool", &vb) == 0 && vb == 1);
    CHECK(kz_gguf_get_bool(g, "t.u8", &vb) == -2);
    const kz_gguf_kv *kv = kz_gguf_get_kv(g, "t.f64");
    CHECK(kv && kv->type == KZ_GGUF_F64 && kv->size == 8 && !memcmp(kv->data, &f64, 8));
    kv = kz_gguf_get_kv(g, "t.u64");
    CHECK(kv && kv->type == KZ_GGUF_U64 && !memcmp(kv->data, &u64, 8));
    CHECK(kz_gguf_find_key(g, "t.i16") >= 0 && kz_gguf_find_key(g, "t.i1") == -1);
    CHECK(kz_gguf_get_kv(g, "") == NULL);

    for (uint32_t t = 0; t < KZ_GGUF_NTYPES; t++) {
        if (t == KZ_GGUF_STR || t == KZ_GGUF_ARR) continue;
        char key[32];
        snprintf(key, sizeof key, "arr.%s", kz_gguf_type_name(t));
        kv = kz_gguf_get_kv(g, key);
        CHECKF(kv && kv->type == KZ_GGUF_ARR && kv->arr_type == t && kv->n == AN, "%s", key);
        if (!kv) continue;
        size_t esz = kv->size / AN;
        CHECKF(kv->size == esz * AN && !memcmp(kv->data, arrdata[t], kv->size), "%s bytes", key);
        int64_t iv;
        double dv;
        for (uint64_t i = 0; i < AN; i++) {
            const uint8_t *p = arrdata[t] + i * esz;
            if (t == KZ_GGUF_F32) {
                float f; memcpy(&f, p, 4);
                CHECK(kz_gguf_arr_f64(kv, i, &dv) == 0 && dv == (double)f);
                CHECK(kz_gguf_arr_i64(kv, i, &iv) == -2);
            } else if (t == KZ_GGUF_F64) {
                double d; memcpy(&d, p, 8);
                CHECK(kz_gguf_arr_f64(kv, i, &dv) == 0 && dv == d);
            } else {
                int64_t want = 0; uint64_t uw = 0; int big = 0;
                switch (t) {
                case KZ_GGUF_U8: case KZ_GGUF_BOOL: want = p[0]; break;
                case KZ_GGUF_I8: { int8_t x; memcpy(&x, p, 1); want = x; break; }
                case KZ_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); want = x; break; }
                case KZ_GGUF_I16: { int16_t x; memcpy(&x, p, 2); want = x; break; }
                case KZ_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); want = x; break; }
                case KZ_GGUF_I32: { int32_t x; memcpy(&x, p, 4); want = x; break; }
                case KZ_GGUF_U64: memcpy(&uw, p, 8); big = uw > INT64_MAX; want = big ? 0 : (int64_t)uw; break;
                case KZ_GGUF_I64: memcpy(&want, p, 8); break;
                }
                int rc = kz_gguf_arr_i64(kv, i, &iv);
                if (big) CHECK(rc == -2);
                else CHECKF(rc == 0 && iv == want, "%s[%llu]: rc %d %lld != %lld", key, (ull)i, rc, (long long)iv, (long long)want);
            }
        }
        CHECK(kz_gguf_arr_i64(kv, AN, &iv) == -2);
        CHECK(kz_gguf_arr_f64(kv, AN, &dv) == -2);
    }
    kv = kz_gguf_get_kv(g, "arr.empty");
    CHECK(kv && kv->type == KZ_GGUF_ARR && kv->n == 0 && kv->size == 0);
    kv = kz_gguf_get_kv(g, "tokenizer.ggml.tokens");
    CHECK(kv && kv->arr_type == KZ_GGUF_STR && kv->n == 5 && kv->strs);
    if (kv && kv->strs)
        for (int i = 0; i < 5; i++) CHECKF(kv->strs[i].len == lens[i] && !memcmp(kv->strs[i].ptr, strs[i], lens[i]), "token %d", i);
    kv = kz_gguf_get_kv(g, "arr.str_empty");
    CHECK(kv && kv->arr_type == KZ_GGUF_STR && kv->n == 0);
    CHECK(kz_gguf_arr_i64(kz_gguf_get_kv(g, "tokenizer.ggml.tokens"), 0, &v64) == -2);
    CHECK(kz_gguf_arr_i64(kz_gguf_get_kv(g, "t.u32"), 0, &v64) == -2); /* not an array */

    for (int i = 0; i < NT; i++) {
        const kz_tensor_info *t = kz_gguf_find_tensor(g, ts[i].name);
        CHECKF(t != NULL, "tensor %s missing", ts[i].name);
        if (!t) continue;
        CHECK(t == &g->tensors[i]);
        CHECK(t->type == ts[i].type && t->n_dims == ts[i].nd);
        for (int d = 0; d < 4; d++) CHECK(t->ne[d] == ts[i].ne[d]);
        CHECK(t->nbytes == ts[i].nbytes);
        CHECK(t->offset % 64 == 0);
        CHECK(((const uint8_t *)t->data - (const uint8_t *)g->map) % 64 == 0);
        CHECKF(!memcmp(t->data, ts[i].data, ts[i].nbytes), "tensor %s bytes differ", ts[i].name);
    }
    CHECK(kz_gguf_find_tensor(g, "nope") == NULL);
    CHECK(kz_gguf_find_tensor(g, "token_embd.weigh") == NULL);

    /* copy every kv into a new file and compare the raw encodings */
    {
        char p2[300];
        tmp_path(p2, sizeof p2, "copy.gguf");
        kz_gguf_writer *wc = kz_gguf_writer_new(0);
        for (uint64_t i = 0; i < g->n_kv; i++) CHECKF(kz_gguf_w_copy_kv(wc, g, &g->kv[i]) == 0, "copy %s: %s", g->kv[i].key, kz_gguf_writer_error(wc));
        CHECK(kz_gguf_w_tensor_info(wc, "only", 1, (int64_t[]){32}, KZ_T_Q8_0) == 0);
        CHECKF(kz_gguf_writer_begin(wc, p2) == 0, "%s", kz_gguf_writer_error(wc));
        CHECK(kz_gguf_writer_write_tensor(wc, ts[2].data, 34) == 0);
        CHECKF(kz_gguf_writer_finish(wc) == 0, "%s", kz_gguf_writer_error(wc));
        kz_gguf_writer_free(wc);
        kz_gguf *g2 = kz_gguf_open(p2, err, sizeof err);
        CHECKF(g2 != NULL, "open copy: %s", err);
        if (g2) {
            CHECK(g2->n_kv == g->n_kv && g2->alignment == 64);
            for (uint64_t i = 0; i < g->n_kv && i < g2->n_kv; i++) {
                const kz_gguf_kv *a = &g->kv[i], *b = &g2->kv[i];
                CHECKF(!strcmp(a->key, b->key) && a->type == b->type && a->arr_type == b->arr_type && a->n == b->n &&
                           a->size == b->size && !memcmp(a->data, b->data, a->size),
                       "copied kv %s differs", a->key);
            }
            const kz_tensor_info *t = kz_gguf_find_tensor(g2, "only");
            CHECK(t && t->nbytes == 34 && !memcmp(t->data, ts[2].data, 34));
            kz_gguf_close(g2);
        }
        unlink(p2);
    }
    kz_gguf_close(g);
out:
    for (int i = 0; i < NT; i++) free(ts[i].data);
}

/* ---------- writer error paths ---------- */
static void test_writer_errors(void) {
    char path[300];
    tmp_path(path, sizeof path, "werr.gguf");
    struct stat st;
    /* missing tensor data: finish fails, file removed */
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_w_tensor_info(w, "b", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == -1);
    CHECK(ci_contains(kz_gguf_writer_error(w), "duplicate tensor"));
    kz_gguf_writer_free(w);

    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_w_tensor_info(w, "b", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    float d[4] = {1, 2, 3, 4};
    CHECK(kz_gguf_writer_write_tensor(w, d, 16) == 0);
    CHECK(kz_gguf_writer_finish(w) == -1);
    CHECKF(ci_contains(kz_gguf_writer_error(w), "'b'"), "%s", kz_gguf_writer_error(w));
    CHECK(stat(path, &st) != 0);
    kz_gguf_writer_free(w);

    /* wrong byte count */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    CHECK(kz_gguf_writer_write_tensor(w, d, 12) == -1);
    CHECKF(ci_contains(kz_gguf_writer_error(w), "expected 16"), "%s", kz_gguf_writer_error(w));
    CHECK(stat(path, &st) != 0);
    kz_gguf_writer_free(w);

    /* too many bytes in parts, and end_tensor on a short tensor */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    CHECK(kz_gguf_writer_write_part(w, d, 8) == 0);
    CHECK(kz_gguf_writer_end_tensor(w) == -1);
    CHECKF(ci_contains(kz_gguf_writer_error(w), "only 8 of its 16"), "%s", kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    CHECK(kz_gguf_writer_write_part(w, d, 12) == 0);
    CHECK(kz_gguf_writer_write_part(w, d, 8) == -1);
    CHECK(ci_contains(kz_gguf_writer_error(w), "more than its size"));
    kz_gguf_writer_free(w);
    CHECK(stat(path, &st) != 0);

    /* metadata after begin() */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    CHECK(kz_gguf_w_u32(w, "late", 1) == -1);
    CHECK(ci_contains(kz_gguf_writer_error(w), "after kz_gguf_writer_begin"));
    CHECK(kz_gguf_writer_finish(w) == -1); /* sticky */
    kz_gguf_writer_free(w);
    CHECK(stat(path, &st) != 0);

    /* abandoned writer removes its file */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_tensor_info(w, "a", 1, (int64_t[]){4}, KZ_T_F32) == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    kz_gguf_writer_free(w);
    CHECK(stat(path, &st) != 0);

    /* unwritable path */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_writer_begin(w, "/nonexistent-dir-kz/x.gguf") == -1);
    CHECK(ci_contains(kz_gguf_writer_error(w), "cannot create"));
    kz_gguf_writer_free(w);

    /* disk full: /dev/full accepts the open and fails the writes (the device is never removed) */
    if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
        w = kz_gguf_writer_new(0);
        CHECK(kz_gguf_w_tensor_info(w, "big", 1, (int64_t[]){1 << 16}, KZ_T_F32) == 0);
        CHECK(kz_gguf_writer_begin(w, "/dev/full") == 0 || 1);
        float *big = calloc(1 << 16, sizeof(float));
        for (int i = 0; i < 1 << 16; i++) big[i] = (float)i + 1;
        int rc = kz_gguf_writer_write_tensor(w, big, (size_t)4 << 16);
        if (rc == 0) rc = kz_gguf_writer_finish(w);
        CHECK(rc == -1);
        CHECKF(ci_contains(kz_gguf_writer_error(w), "space"), "%s", kz_gguf_writer_error(w));
        kz_gguf_writer_free(w);
        free(big);
        CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    }

    /* a vocab-only file (no tensors) reads back */
    w = kz_gguf_writer_new(0);
    CHECK(kz_gguf_w_str(w, "general.architecture", "qwen3") == 0);
    CHECK(kz_gguf_writer_begin(w, path) == 0);
    CHECK(kz_gguf_writer_finish(w) == 0);
    kz_gguf_writer_free(w);
    char err[256];
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g && g->n_tensors == 0 && g->n_kv == 1, "%s", g ? "" : err);
    kz_gguf_close(g);
    unlink(path);

    /* reader on a missing file and a directory */
    g = kz_gguf_open("/nonexistent-kz.gguf", err, sizeof err);
    CHECK(!g && ci_contains(err, "nonexistent-kz.gguf") && ci_contains(err, "cannot open"));
    g = kz_gguf_open(g_dir, err, sizeof err);
    CHECK(!g && ci_contains(err, "regular file"));
    g = kz_gguf_open_mem("", 0, err, sizeof err);
    CHECK(!g && err[0]);
    CHECK(kz_gguf_open_mem("GGUF", 4, NULL, 0) == NULL); /* err may be NULL */
}

/* ---------- hand-made hostile files ---------- */
static void test_hostile(unsigned long long *rng) {
    bb b = {0};
    base_file(&b, rng);
    expect_ok(&b, "base file");

    base_file(&b, rng); memcpy(b.p, "GGUX", 4); expect_fail(&b, "bad magic", "magic");
    bb_put(&b, "GG", 2); expect_fail(&b, "2-byte file", "too small");
    bb_put(&b, "GGUF\3\0\0\0", 8); expect_fail(&b, "8-byte file", "truncated");
    base_file(&b, rng); b.p[4] = 1; expect_fail(&b, "version 1", "version 1");
    base_file(&b, rng); b.p[4] = 4; expect_fail(&b, "version 4", "version 4");
    base_file(&b, rng); b.p[4] = 0; expect_fail(&b, "version 0", "version 0");
    base_file(&b, rng); b.p[4] = 0; b.p[7] = 3; expect_fail(&b, "byte-swapped version", "byte-swapped");
    base_file(&b, rng); b.p[4] = 2; expect_ok(&b, "version 2");

    bb_hdr(&b, 3, 0, 1ull << 60); bb_kv_u32(&b, "a", 1); expect_fail(&b, "n_kv 2^60", "n_kv");
    bb_hdr(&b, 3, 1ull << 60, 1); bb_kv_u32(&b, "a", 1); expect_fail(&b, "n_tensors 2^60", "n_tensors");
    bb_hdr(&b, 3, UINT64_MAX, 0); bb_data(&b, 200, rng); expect_fail(&b, "n_tensors -1", "n_tensors");
    bb_hdr(&b, 3, 0, 3); bb_kv_u32(&b, "a", 1); bb_kv_u32(&b, "b", 1); expect_fail(&b, "n_kv just too big", "n_kv");

    /* strings */
    bb_hdr(&b, 3, 0, 1); bb_u64(&b, 1ull << 62); bb_put(&b, "abcdefgh", 8); expect_fail(&b, "key length huge", "length");
    bb_hdr(&b, 3, 0, 1); bb_u64(&b, UINT64_MAX); bb_put(&b, "abcdefgh", 8); expect_fail(&b, "key length 2^64-1", "length");
    bb_hdr(&b, 3, 0, 1); bb_u64(&b, 0); bb_u32(&b, KZ_GGUF_U32); bb_u32(&b, 1); expect_fail(&b, "empty key", "empty");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "k"); bb_u32(&b, KZ_GGUF_STR); bb_u64(&b, 1ull << 62); bb_put(&b, "xyz", 3);
    expect_fail(&b, "value string length huge", "string length");
    bb_hdr(&b, 3, 0, 1); bb_u64(&b, 3); bb_put(&b, "a\0b", 3); bb_u32(&b, KZ_GGUF_U8); bb_u8(&b, 1); bb_data(&b, 4, rng);
    expect_fail(&b, "key with NUL", "NUL");

    /* arrays */
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_U32); bb_u64(&b, 1ull << 61); bb_data(&b, 64, rng);
    expect_fail(&b, "u32 array count huge", "array");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_U64); bb_u64(&b, 1ull << 62); bb_data(&b, 64, rng);
    expect_fail(&b, "u64 array count*8 overflows", "array");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_STR); bb_u64(&b, 1ull << 61); bb_data(&b, 64, rng);
    expect_fail(&b, "string array count huge", "strings");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_STR); bb_u64(&b, 2); bb_str(&b, "ok");
    bb_u64(&b, 1000); bb_put(&b, "short", 5); expect_fail(&b, "string element past EOF", "element 1");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, 13); bb_u64(&b, 1); bb_data(&b, 16, rng);
    expect_fail(&b, "array element type 13", "element type");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_ARR); bb_u64(&b, 1ull << 60); bb_data(&b, 64, rng);
    expect_fail(&b, "nested array count huge", "arrays");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "arr"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_BOOL); bb_u64(&b, 3);
    bb_u8(&b, 1); bb_u8(&b, 0); bb_u8(&b, 2); expect_fail(&b, "bool array element 2", "bool");
    /* valid nested array: [[1,2,3],["x","yz"]] plus a following kv; getters refuse it */
    bb_hdr(&b, 3, 0, 2); bb_str(&b, "nest"); bb_u32(&b, KZ_GGUF_ARR); bb_u32(&b, KZ_GGUF_ARR); bb_u64(&b, 2);
    bb_u32(&b, KZ_GGUF_U8); bb_u64(&b, 3); bb_u8(&b, 1); bb_u8(&b, 2); bb_u8(&b, 3);
    bb_u32(&b, KZ_GGUF_STR); bb_u64(&b, 2); bb_str(&b, "x"); bb_str(&b, "yz");
    bb_kv_u32(&b, "after", 77);
    {
        char err[256];
        uint8_t *copy;
        kz_gguf *g = open_copy(b.p, b.n, &copy, err, sizeof err);
        CHECKF(g != NULL, "nested array rejected: %s", err);
        if (g) {
            const kz_gguf_kv *kv = kz_gguf_get_kv(g, "nest");
            CHECK(kv && kv->type == KZ_GGUF_ARR && kv->arr_type == KZ_GGUF_ARR && kv->n == 2 && !kv->strs);
            CHECK(kv && kv->size == 12 + 3 + 12 + 9 + 10);
            int64_t x; double dx;
            CHECK(kz_gguf_arr_i64(kv, 0, &x) == -2 && kz_gguf_arr_f64(kv, 0, &dx) == -2);
            uint32_t v;
            CHECK(kz_gguf_get_u32(g, "after", &v) == 0 && v == 77);
            /* nested arrays survive kz_gguf_w_copy_kv byte for byte */
            char p[300];
            tmp_path(p, sizeof p, "nest.gguf");
            kz_gguf_writer *w = kz_gguf_writer_new(0);
            for (uint64_t i = 0; i < g->n_kv; i++) CHECK(kz_gguf_w_copy_kv(w, g, &g->kv[i]) == 0);
            CHECKF(kz_gguf_writer_begin(w, p) == 0 && kz_gguf_writer_finish(w) == 0, "%s", kz_gguf_writer_error(w));
            kz_gguf_writer_free(w);
            kz_gguf *g2 = kz_gguf_open(p, err, sizeof err);
            CHECKF(g2 != NULL, "%s", err);
            const kz_gguf_kv *k2 = g2 ? kz_gguf_get_kv(g2, "nest") : NULL;
            CHECK(k2 && kv && k2->size == kv->size && k2->n == 2 && k2->arr_type == KZ_GGUF_ARR && !memcmp(k2->data, kv->data, kv->size));
            kz_gguf_close(g2);
            unlink(p);
        }
        kz_gguf_close(g);
        free(copy);
        free(b.p);
        memset(&b, 0, sizeof b);
    }
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "deep"); bb_u32(&b, KZ_GGUF_ARR);
    for (int i = 0; i < 20; i++) { bb_u32(&b, KZ_GGUF_ARR); bb_u64(&b, 1); }
    bb_u32(&b, KZ_GGUF_U8); bb_u64(&b, 0);
    expect_fail(&b, "arrays nested 20 deep", "nested");

    /* kv types and values */
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "k"); bb_u32(&b, 13); bb_data(&b, 16, rng); expect_fail(&b, "kv type 13", "unknown value type");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "k"); bb_u32(&b, 0x80000000u); bb_data(&b, 16, rng); expect_fail(&b, "kv type 2^31", "unknown value type");
    bb_hdr(&b, 3, 0, 2); bb_kv_u32(&b, "dup", 1); bb_kv_u32(&b, "dup", 2); expect_fail(&b, "duplicate key", "duplicate metadata key 'dup'");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "flag"); bb_u32(&b, KZ_GGUF_BOOL); bb_u8(&b, 2); bb_data(&b, 16, rng); expect_fail(&b, "bool 2", "bool");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "v"); bb_u32(&b, KZ_GGUF_U64); bb_u32(&b, 5); expect_fail(&b, "u64 value truncated", "truncated");

    /* alignment */
    const uint32_t bad_al[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        bb_hdr(&b, 3, 1, 1); bb_kv_u32(&b, "general.alignment", bad_al[i]);
        bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32); bb_data(&b, 32, rng);
        expect_fail(&b, "bad alignment value", "general.alignment");
    }
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "general.alignment"); bb_u32(&b, KZ_GGUF_I32); bb_u32(&b, 32); expect_fail(&b, "alignment as i32", "u32");
    bb_hdr(&b, 3, 0, 1); bb_str(&b, "general.alignment"); bb_u32(&b, KZ_GGUF_U64); bb_u64(&b, 32); expect_fail(&b, "alignment as u64", "u32");
    bb_hdr(&b, 3, 1, 1); bb_kv_u32(&b, "general.alignment", 8);
    bb_ti(&b, "a", 1, (uint64_t[]){2}, KZ_T_F32, 0); bb_pad(&b, 8); bb_data(&b, 8, rng);
    expect_ok(&b, "alignment 8");

    /* tensor infos: each after one valid kv */
#define TI_HDR(nt) do { bb_hdr(&b, 3, nt, 1); bb_kv_str(&b, "general.architecture", "t"); } while (0)
    TI_HDR(1); bb_ti(&b, "a", 0, NULL, KZ_T_F32, 0); bb_data(&b, 64, rng); expect_fail(&b, "n_dims 0", "n_dims");
    TI_HDR(1); bb_ti(&b, "a", 5, (uint64_t[]){1, 1, 1, 1, 1}, KZ_T_F32, 0); bb_data(&b, 64, rng); expect_fail(&b, "n_dims 5", "n_dims");
    TI_HDR(1); bb_ti(&b, "a", 2, (uint64_t[]){1ull << 40, 1ull << 40}, KZ_T_F32, 0); bb_data(&b, 64, rng);
    expect_fail(&b, "ne 2^40 x 2^40", "overflow");
    TI_HDR(1); bb_ti(&b, "a", 4, (uint64_t[]){1ull << 20, 1ull << 20, 1ull << 20, 1ull << 5}, KZ_T_F32, 0); bb_data(&b, 64, rng);
    expect_fail(&b, "ne product 2^65", "overflow");
    TI_HDR(1); bb_ti(&b, "a", 2, (uint64_t[]){1ull << 62, 1}, KZ_T_F64, 0); bb_data(&b, 64, rng);
    expect_fail(&b, "nbytes 2^65", "overflow");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){1ull << 63}, KZ_T_F32, 0); bb_data(&b, 64, rng); expect_fail(&b, "ne negative", "negative");
    TI_HDR(1); bb_ti(&b, "a", 2, (uint64_t[]){8, 0}, KZ_T_F32, 0); bb_data(&b, 64, rng); expect_fail(&b, "ne 0", "is 0");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){33}, KZ_T_Q8_0, 0); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "ne0 33 for Q8_0", "multiple");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){128}, KZ_T_Q4_K, 0); bb_pad(&b, 32); bb_data(&b, 200, rng); expect_fail(&b, "ne0 128 for Q4_K", "multiple");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){32}, 4, 0); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "tensor type 4", "type 4");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){32}, 99, 0); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "tensor type 99", "type 99");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){32}, 31, 0); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "tensor type 31", "type 31");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32); bb_data(&b, 31, rng); expect_fail(&b, "data past EOF", "past the end");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 1ull << 62); bb_pad(&b, 32); bb_data(&b, 64, rng);
    expect_fail(&b, "offset 2^62", "past the end");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, UINT64_MAX - 31); bb_pad(&b, 32); bb_data(&b, 64, rng);
    expect_fail(&b, "offset near 2^64 (offset+nbytes wraps)", "past the end");
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 16); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "offset 16", "alignment");
    TI_HDR(2); bb_ti(&b, "a", 1, (uint64_t[]){16}, KZ_T_F32, 0); bb_ti(&b, "b", 1, (uint64_t[]){8}, KZ_T_F32, 32); bb_pad(&b, 32);
    bb_data(&b, 128, rng); expect_fail(&b, "overlapping tensors", "overlap");
    TI_HDR(2); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 32); bb_ti(&b, "b", 1, (uint64_t[]){8}, KZ_T_F32, 32); bb_pad(&b, 32);
    bb_data(&b, 128, rng); expect_fail(&b, "same offset", "overlap");
    TI_HDR(2); bb_ti(&b, "b", 1, (uint64_t[]){8}, KZ_T_F32, 32); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32);
    bb_data(&b, 64, rng); expect_ok(&b, "tensors out of offset order");
    TI_HDR(2); bb_ti(&b, "w", 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_ti(&b, "w", 1, (uint64_t[]){8}, KZ_T_F32, 32); bb_pad(&b, 32);
    bb_data(&b, 64, rng); expect_fail(&b, "duplicate tensor name", "duplicate tensor name 'w'");
    TI_HDR(1); bb_ti(&b, "", 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32); bb_data(&b, 64, rng); expect_fail(&b, "empty tensor name", "empty");
    {
        char longname[301];
        memset(longname, 'x', 300);
        longname[300] = 0;
        TI_HDR(1); bb_ti(&b, longname, 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32); bb_data(&b, 64, rng);
        expect_fail(&b, "300-byte tensor name", "limit");
        longname[255] = 0;
        TI_HDR(1); bb_ti(&b, longname, 1, (uint64_t[]){8}, KZ_T_F32, 0); bb_pad(&b, 32); bb_data(&b, 64, rng);
        expect_ok(&b, "255-byte tensor name");
    }
    TI_HDR(1); bb_ti(&b, "a", 1, (uint64_t[]){8}, KZ_T_F32, 0); expect_fail(&b, "no data section", "truncated");
#undef TI_HDR
}

/* ---------- truncation and mutation ---------- */

static uint64_t end_of_data(const kz_gguf *g) {
    uint64_t e = g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes > e) e = g->data_offset + g->tensors[i].offset + g->tensors[i].nbytes;
    return e;
}

/* touch everything a valid handle exposes, so ASan sees any pointer outside the buffer */
static unsigned walk(const kz_gguf *g) {
    unsigned acc = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kz_gguf_kv *kv = &g->kv[i];
        uint32_t u; int64_t s; float f; int b; kz_str st; double d;
        acc += (unsigned)kz_gguf_get_u32(g, kv->key, &u) + (unsigned)kz_gguf_get_i64(g, kv->key, &s);
        acc += (unsigned)kz_gguf_get_f32(g, kv->key, &f) + (unsigned)kz_gguf_get_bool(g, kv->key, &b);
        if (kz_gguf_get_str(g, kv->key, &st) == 0) for (uint64_t j = 0; j < st.len; j++) acc += (uint8_t)st.ptr[j];
        CHECK(kz_gguf_get_kv(g, kv->key) == kv);
        for (uint64_t j = 0; j < kv->size; j++) acc += kv->data[j];
        uint64_t n = kv->n < 300 ? kv->n : 300;
        for (uint64_t j = 0; j <= n; j++) { acc += (unsigned)kz_gguf_arr_i64(kv, j, &s); acc += (unsigned)kz_gguf_arr_f64(kv, j, &d); }
        if (kv->strs)
            for (uint64_t j = 0; j < (kv->type == KZ_GGUF_STR ? 1 : kv->n); j++)
                for (uint64_t k = 0; k < kv->strs[j].len; k++) acc += (uint8_t)kv->strs[j].ptr[k];
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        CHECK(kz_gguf_find_tensor(g, t->name) == t);
        CHECK(kz_row_bytes(t->type, t->ne[0]) * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3] == t->nbytes);
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->nbytes; j++) acc += p[j];
    }
    return acc;
}

static void test_truncation(const char *path) {
    size_t n;
    uint8_t *full = read_all(path, &n);
    CHECK(full != NULL);
    if (!full) return;
    char err[512];
    kz_gguf *g = kz_gguf_open_mem(full, n, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) { free(full); return; }
    uint64_t end = end_of_data(g);
    kz_gguf_close(g);
    CHECK(end <= n && end > 0);
    int bad_ok = 0, bad_msg = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *copy;
        err[0] = 0;
        g = open_copy(full, len, &copy, err, sizeof err);
        if (len < end) {
            if (g) bad_ok++;
            if (!err[0]) bad_msg++;
        } else {
            CHECKF(g != NULL, "truncated to %zu (only padding cut): %s", len, err);
        }
        kz_gguf_close(g);
        free(copy);
    }
    CHECKF(bad_ok == 0, "%d truncated lengths were accepted", bad_ok);
    CHECKF(bad_msg == 0, "%d truncated lengths gave no message", bad_msg);
    printf("truncation: %zu lengths tried (data ends at %llu of %zu)\n", n, (ull)end, n);
    free(full);
}

static void test_mutation(const char *label, const uint8_t *full, size_t n, int iters, unsigned long long *rng) {
    char err[512];
    kz_gguf *g = kz_gguf_open_mem(full, n, err, sizeof err);
    uint64_t meta = g ? g->data_offset : n;
    kz_gguf_close(g);
    static const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 31, 32, 33, 63, 64, 255, 256, 0x7fffffff,
                                           0x80000000u, 0xffffffffu, 1ull << 32, 1ull << 40, 1ull << 62, 1ull << 63,
                                           UINT64_MAX, UINT64_MAX - 7};
    int ok = 0, bad = 0, nomsg = 0;
    unsigned acc = 0;
    uint8_t *buf = malloc(n);
    for (int it = 0; it < iters; it++) {
        memcpy(buf, full, n);
        size_t len = n;
        int nm = 1 + (int)(kt_rng(rng) % 4);
        for (int m = 0; m < nm; m++) {
            /* mostly hit the header/metadata part: that is where the parser lives */
            size_t pos = (kt_rng(rng) % 10 < 9) ? (size_t)(kt_rng(rng) % meta) : (size_t)(kt_rng(rng) % n);
            switch (kt_rng(rng) % 5) {
            case 0: buf[pos] ^= (uint8_t)(1u << (kt_rng(rng) % 8)); break;
            case 1: buf[pos] = (uint8_t)kt_rng(rng); break;
            case 2: { /* an interesting u64 or u32 at pos */
                uint64_t v = interesting[kt_rng(rng) % (sizeof interesting / sizeof interesting[0])];
                int w = kt_rng(rng) & 1 ? 8 : 4;
                for (int k = 0; k < w && pos + (size_t)k < n; k++) buf[pos + k] = (uint8_t)(v >> 8 * k);
                break;
            }
            case 3: buf[pos] = (uint8_t)(buf[pos] + (kt_rng(rng) & 1 ? 1 : 255)); break;
            case 4: if (kt_rng(rng) % 4 == 0) len = pos; break;
            }
        }
        uint8_t *copy;
        err[0] = 0;
        g = open_copy(buf, len, &copy, err, sizeof err);
        if (g) { ok++; acc += walk(g); }
        else { bad++; if (!err[0]) nomsg++; }
        kz_gguf_close(g);
        free(copy);
    }
    printf("mutation (%s, %zu bytes): %d iterations, %d still valid, %d rejected (checksum %u)\n", label, n, iters, ok, bad, acc);
    CHECKF(ok > 0 && bad > 0, "%s: mutation never/always succeeded", label);
    CHECKF(nomsg == 0, "%d rejections without a message", nomsg);
    free(buf);
}

/* a small file with nested arrays, bool/string arrays and three tensors, for the mutator */
static void nested_file(bb *b, unsigned long long *rng) {
    bb_hdr(b, 3, 3, 4);
    bb_kv_str(b, "general.architecture", "qwen3");
    bb_str(b, "nest"); bb_u32(b, KZ_GGUF_ARR); bb_u32(b, KZ_GGUF_ARR); bb_u64(b, 3);
    bb_u32(b, KZ_GGUF_BOOL); bb_u64(b, 2); bb_u8(b, 1); bb_u8(b, 0);
    bb_u32(b, KZ_GGUF_STR); bb_u64(b, 2); bb_str(b, "ab"); bb_str(b, "");
    bb_u32(b, KZ_GGUF_ARR); bb_u64(b, 1); bb_u32(b, KZ_GGUF_I16); bb_u64(b, 2); bb_u32(b, 0xfffe0003u);
    bb_str(b, "toks"); bb_u32(b, KZ_GGUF_ARR); bb_u32(b, KZ_GGUF_STR); bb_u64(b, 3); bb_str(b, "x"); bb_str(b, "yy"); bb_str(b, "zzz");
    bb_kv_u32(b, "general.alignment", 16);
    bb_ti(b, "q", 2, (uint64_t[]){32, 2}, KZ_T_Q4_0, 0);
    bb_ti(b, "f", 1, (uint64_t[]){3}, KZ_T_F16, 48);
    bb_ti(b, "k", 1, (uint64_t[]){256}, KZ_T_Q6_K, 64);
    bb_pad(b, 16);
    bb_data(b, 64 + 210, rng);
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

static void test_types(void) {
    CHECK(kz_type_get(KZ_T_Q4_K) && kz_type_get(KZ_T_Q4_K)->blck == 256 && kz_type_get(KZ_T_Q4_K)->bytes == 144);
    CHECK(kz_type_get(KZ_T_Q8_0)->bytes == 34 && kz_type_get(KZ_T_Q6_K)->bytes == 210);
    CHECK(kz_type_get(KZ_T_Q2_0) && kz_type_get(KZ_T_Q2_0)->blck == 64 && kz_type_get(KZ_T_Q2_0)->bytes == 18);
    const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 99, UINT32_MAX};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) CHECKF(kz_type_get(removed[i]) == NULL, "type %u", removed[i]);
    int valid = 0;
    for (uint32_t id = 0; id < KZ_T_COUNT; id++) {
        const kz_type_info *t = kz_type_get(id);
        if (!t) continue;
        valid++;
        CHECKF(kz_type_from_name(t->name) == (int)id, "%s", t->name);
        CHECK(t->blck > 0 && t->bytes > 0);
    }
    CHECK(valid == 43 - 8);
    CHECK(kz_type_from_name("q4_k") == KZ_T_Q4_K && kz_type_from_name("bf16") == KZ_T_BF16);
    CHECK(kz_type_from_name("q4") == -1 && kz_type_from_name("") == -1 && kz_type_from_name("q4_k_m") == -1 && kz_type_from_name(NULL) == -1);
    CHECK(kz_row_bytes(KZ_T_Q4_K, 512) == 288 && kz_row_bytes(KZ_T_Q4_K, 100) == 0 && kz_row_bytes(KZ_T_F16, 3) == 6);
    CHECK(kz_row_bytes(KZ_T_Q8_0, -32) == 0 && kz_row_bytes(4, 32) == 0 && kz_row_bytes(KZ_T_F64, INT64_MAX) == 0);
    CHECK(strcmp(kz_gguf_type_name(KZ_GGUF_F64), "f64") == 0 && strcmp(kz_gguf_type_name(77), "?") == 0);
}

int main(void) {
    unsigned long long rng = 0x9E3779B97F4A7C15ull;
    const char *td = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/kz_test_gguf_XXXXXX", td && td[0] ? td : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    char rt[300];
    test_types();
    test_roundtrip(&rng, rt, sizeof rt);
    test_writer_errors();
    test_hostile(&rng);
    test_truncation(rt);
    /* KZ_GGUF_FUZZ_ITERS / KZ_GGUF_FUZZ_SEED allow longer runs by hand; CI uses the defaults */
    int iters = env_int("KZ_GGUF_FUZZ_ITERS", 10000);
    unsigned long long frng = (unsigned long long)env_int("KZ_GGUF_FUZZ_SEED", 12345) * 0x9E3779B97F4A7C15ull | 1;
    size_t n;
    uint8_t *full = read_all(rt, &n);
    CHECK(full != NULL);
    if (full) test_mutation("round-trip file", full, n, iters, &frng);
    free(full);
    bb nb = {0};
    nested_file(&nb, &frng);
    {
        char err[256];
        kz_gguf *g = kz_gguf_open_mem(nb.p, nb.n, err, sizeof err);
        CHECKF(g != NULL, "nested base file: %s", err);
        kz_gguf_close(g);
    }
    test_mutation("nested-array file", nb.p, nb.n, iters, &frng);
    free(nb.p);
    const char *extra = getenv("KZ_GGUF_FUZZ_FILE"); /* e.g. a real model, by hand */
    if (extra && (full = read_all(extra, &n))) {
        test_mutation(extra, full, n, env_int("KZ_GGUF_FUZZ_FILE_ITERS", 200), &frng);
        free(full);
    }
    unlink(rt);
    rmdir(g_dir);
    KT_END();
}
