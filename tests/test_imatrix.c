/* Importance matrices: accumulation against a direct double sum, the GGUF file as llama.cpp lays
 * it out (keys, sorted tensor names, shapes, F32 values) read back by the plain GGUF reader, the
 * round trip through kz_imatrix_read, and the files the reader must refuse (each with a message,
 * no temporary left behind by a failed write). */
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

#include "kt.h"
#include "model/gguf.h"
#include "model/imatrix.h"
#include "model/types.h"

static char g_dir[256];

static int n_files_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static float tensor_f32(const kz_tensor_info *t, int64_t i) {
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

/* three weights of odd widths, added in several calls of odd row counts */
static void test_roundtrip(unsigned long long *rng) {
    static const char *names[3] = {"blk.1.ffn_down.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight"};
    static const int64_t width[3] = {37, 19, 19};
    static const int64_t calls[3][3] = {{17, 1, 5}, {3, 16, 2}, {1, 1, 31}};
    double ref[3][64] = {{0}};
    int64_t nrows[3] = {0};
    char err[512], path[300];
    kz_imatrix *im = kz_imatrix_new();
    CHECK(im != NULL);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++) {
            int64_t n = calls[k][c], w = width[k];
            float *x = malloc((size_t)(n * w) * sizeof *x);
            for (int64_t r = 0; r < n; r++) kt_fill_row(x + r * w, w, rng);
            for (int64_t i = 0; i < n * w; i++) ref[k][i % w] += (double)x[i] * x[i];
            nrows[k] += n;
            CHECK(kz_imatrix_add(im, names[k], w, x, n, err, sizeof err) == 0);
            free(x);
        }
    CHECK(kz_imatrix_count(im) == 3);
    float tmp[64];
    CHECKF(kz_imatrix_add(im, names[0], 36, tmp, 1, err, sizeof err) == -1 && strstr(err, "36"), "%s", err);
    CHECK(kz_imatrix_weights(im, names[0], 36, tmp) == -1);
    CHECK(kz_imatrix_weights(im, "output.weight", 37, tmp) == -1);

    snprintf(path, sizeof path, "%s/im.gguf", g_dir);
    CHECKF(kz_imatrix_write(im, path, "wiki.test.raw", 5, 512, err, sizeof err) == 0, "%s", err);
    CHECK(n_files_in(g_dir) == 1); /* no temporary left over */

    /* the layout, seen through the plain GGUF reader */
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (g) {
        kz_str s;
        uint32_t u;
        CHECK(kz_gguf_get_str(g, "general.type", &s) == 0 && s.len == 7 && !memcmp(s.ptr, "imatrix", 7));
        CHECK(kz_gguf_get_u32(g, "imatrix.chunk_count", &u) == 0 && u == 5);
        CHECK(kz_gguf_get_u32(g, "imatrix.chunk_size", &u) == 0 && u == 512);
        const kz_gguf_kv *kv = kz_gguf_get_kv(g, "imatrix.datasets");
        CHECK(kv && kv->type == KZ_GGUF_ARR && kv->arr_type == KZ_GGUF_STR && kv->n == 1 && kv->strs &&
              kv->strs[0].len == 13 && !memcmp(kv->strs[0].ptr, "wiki.test.raw", 13));
        CHECK(kz_gguf_find_key(g, "imatrix.chunk_count") >= 0);
        CHECK(g->n_tensors == 6);
        /* sorted by weight name, sums before counts */
        static const char *order[6] = {"blk.0.attn_k.weight.in_sum2", "blk.0.attn_k.weight.counts",
                                       "blk.0.attn_q.weight.in_sum2", "blk.0.attn_q.weight.counts",
                                       "blk.1.ffn_down.weight.in_sum2", "blk.1.ffn_down.weight.counts"};
        for (int i = 0; i < 6 && i < (int)g->n_tensors; i++) CHECKF(!strcmp(g->tensors[i].name, order[i]), "%s", g->tensors[i].name);
        for (int k = 0; k < 3; k++) {
            char nm[128];
            snprintf(nm, sizeof nm, "%s.in_sum2", names[k]);
            const kz_tensor_info *ts = kz_gguf_find_tensor(g, nm);
            snprintf(nm, sizeof nm, "%s.counts", names[k]);
            const kz_tensor_info *tc = kz_gguf_find_tensor(g, nm);
            CHECK(ts && tc);
            if (!ts || !tc) continue;
            CHECK(ts->type == KZ_T_F32 && ts->n_dims == 2 && ts->ne[0] == width[k] && ts->ne[1] == 1);
            CHECK(tc->type == KZ_T_F32 && tc->n_dims == 2 && tc->ne[0] == 1 && tc->ne[1] == 1);
            CHECK(tensor_f32(tc, 0) == (float)nrows[k]);
            int bad = 0;
            for (int64_t j = 0; j < width[k]; j++) bad += tensor_f32(ts, j) != (float)ref[k][j];
            CHECKF(bad == 0, "%s: %d sums differ from the double reference", names[k], bad);
        }
        kz_gguf_close(g);
    }

    /* read back: sums, counts, the normalised weights and the metadata */
    kz_imatrix *r = kz_imatrix_read(path, err, sizeof err);
    CHECKF(r != NULL, "%s", err);
    if (r) {
        CHECK(kz_imatrix_count(r) == 3);
        CHECK(kz_imatrix_chunk_count(r) == 5 && kz_imatrix_chunk_size(r) == 512);
        CHECK(kz_imatrix_dataset(r) && !strcmp(kz_imatrix_dataset(r), "wiki.test.raw"));
        for (int k = 0; k < 3; k++) {
            int64_t npr, nmat;
            const double *s2;
            const int64_t *cnt;
            CHECK(kz_imatrix_entry(r, names[k], &npr, &nmat, &s2, &cnt) == 0 && npr == width[k] && nmat == 1 &&
                  cnt[0] == nrows[k]);
            CHECK(kz_imatrix_weights(r, names[k], width[k], tmp) == 0);
            int bad = 0;
            for (int64_t j = 0; j < width[k]; j++) {
                double want = (double)(float)ref[k][j] / (double)nrows[k];
                bad += fabs(tmp[j] - want) > 1e-6 * want;
            }
            CHECKF(bad == 0, "%s: %d weights differ", names[k], bad);
        }
        /* written again with its own datasets kept */
        char p2[300];
        snprintf(p2, sizeof p2, "%s/im2.gguf", g_dir);
        CHECKF(kz_imatrix_write(r, p2, NULL, 5, 512, err, sizeof err) == 0, "%s", err);
        kz_imatrix *r2 = kz_imatrix_read(p2, err, sizeof err);
        CHECK(r2 && kz_imatrix_dataset(r2) && !strcmp(kz_imatrix_dataset(r2), "wiki.test.raw"));
        kz_imatrix_free(r2);
        unlink(p2);
        kz_imatrix_free(r);
    }

    /* a failed write names the path and leaves nothing behind */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/im.gguf", g_dir);
    CHECKF(kz_imatrix_write(im, bad, "x", 1, 1, err, sizeof err) == -1 && strstr(err, "no/such/dir"), "%s", err);
    kz_imatrix *empty = kz_imatrix_new();
    CHECK(kz_imatrix_write(empty, bad, "x", 1, 1, err, sizeof err) == -1 && strstr(err, "nothing"));
    kz_imatrix_free(empty);
    CHECK(n_files_in(g_dir) == 1);
    unlink(path);
    kz_imatrix_free(im);
}

/* hand-written GGUFs the reader must refuse (or accept: a weight no row reached) */
static void write_file(const char *path, int with_meta, const char *type, int drop_counts, uint32_t sum_type, float count) {
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    const char *ds = "d";
    if (type) kz_gguf_w_str(w, "general.type", type);
    if (with_meta) {
        kz_gguf_w_arr_str(w, "imatrix.datasets", &ds, NULL, 1);
        kz_gguf_w_u32(w, "imatrix.chunk_count", 1);
        kz_gguf_w_u32(w, "imatrix.chunk_size", 8);
    }
    int64_t ne_s[2] = {4, 1}, ne_c[2] = {1, 1};
    kz_gguf_w_tensor_info(w, "w.in_sum2", 2, ne_s, sum_type);
    if (!drop_counts) kz_gguf_w_tensor_info(w, "w.counts", 2, ne_c, KZ_T_F32);
    kz_gguf_writer_begin(w, path);
    float s[4] = {1, 2, 3, 4};
    uint16_t h[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
    if (sum_type == KZ_T_F32) kz_gguf_writer_write_tensor(w, s, sizeof s);
    else kz_gguf_writer_write_tensor(w, h, sizeof h);
    if (!drop_counts) kz_gguf_writer_write_tensor(w, &count, sizeof count);
    CHECKF(kz_gguf_writer_finish(w) == 0, "%s", kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
}

static void test_refused(void) {
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/h.gguf", g_dir);
    struct { int meta; const char *type; int drop; uint32_t st; float count; const char *want; } c[] = {
        {1, "imatrix", 0, KZ_T_F32, 8, NULL},
        {0, "imatrix", 0, KZ_T_F32, 8, "chunk_count"},
        {1, "model", 0, KZ_T_F32, 8, "model"},
        {1, "imatrix", 1, KZ_T_F32, 8, "w.counts"},
        {1, "imatrix", 0, KZ_T_F16, 8, "F32"},
        {1, "imatrix", 0, KZ_T_F32, -1, "count"},
        {1, "imatrix", 0, KZ_T_F32, 0, NULL},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        write_file(path, c[i].meta, c[i].type, c[i].drop, c[i].st, c[i].count);
        err[0] = 0;
        kz_imatrix *im = kz_imatrix_read(path, err, sizeof err);
        if (c[i].want) CHECKF(!im && strstr(err, c[i].want), "case %zu: %s", i, err);
        else {
            CHECKF(im != NULL, "case %zu: %s", i, err);
            float wt[4];
            CHECK(im && kz_imatrix_weights(im, "w", 4, wt) == 0);
            if (im && c[i].count > 0) CHECK(wt[0] == 1.0f / 8 && wt[3] == 4.0f / 8);
            if (im && c[i].count == 0) CHECK(wt[0] == 1.0f && wt[3] == 1.0f);
        }
        kz_imatrix_free(im);
    }
    CHECK(kz_imatrix_read("/nonexistent/im.gguf", err, sizeof err) == NULL && strstr(err, "/nonexistent/im.gguf"));
    unlink(path);
}

int main(void) {
    unsigned long long rng = 0xC0FFEE123456789ull;
    const char *td = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/kz_test_imatrix_XXXXXX", td && td[0] ? td : "/tmp");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    test_roundtrip(&rng);
    test_refused();
    rmdir(g_dir);
    KT_END();
}
