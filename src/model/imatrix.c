/* Importance matrices: accumulation, and the GGUF layout of llama.cpp's llama-imatrix
 * (tools/imatrix/imatrix.cpp save_imatrix, common/imatrix-loader.cpp): general.type "imatrix",
 * imatrix.datasets (string array), imatrix.chunk_count and imatrix.chunk_size (u32); per weight W
 * "W.in_sum2" F32 [n_per_row, n_mat] and "W.counts" F32 [1, n_mat], entries sorted by name. */
#include "model/imatrix.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/types.h"
#include "sys/err.h"

typedef struct {
    char *name;
    int64_t n_per_row, n_mat;
    double *sum2;    /* [n_mat][n_per_row]; double so long runs do not lose small columns */
    int64_t *counts; /* [n_mat] rows summed */
} entry;

struct kz_imatrix {
    entry *e;
    int n, cap;
    int *index; /* open addressing over names, -1 empty; size icap (power of two) */
    int icap;
    char **datasets; /* read from a file (kept when that matrix is written again) */
    int n_datasets;
    uint32_t chunk_count, chunk_size;
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

static int find(const kz_imatrix *im, const char *name) {
    if (!im->icap) return -1;
    for (uint64_t i = hash_name(name) & (uint64_t)(im->icap - 1);; i = (i + 1) & (uint64_t)(im->icap - 1)) {
        int k = im->index[i];
        if (k < 0) return -1;
        if (!strcmp(im->e[k].name, name)) return k;
    }
}

static int reindex(kz_imatrix *im, int icap) {
    int *ix = malloc((size_t)icap * sizeof *ix);
    if (!ix) return -1;
    for (int i = 0; i < icap; i++) ix[i] = -1;
    for (int k = 0; k < im->n; k++) {
        uint64_t i = hash_name(im->e[k].name) & (uint64_t)(icap - 1);
        while (ix[i] >= 0) i = (i + 1) & (uint64_t)(icap - 1);
        ix[i] = k;
    }
    free(im->index);
    im->index = ix;
    im->icap = icap;
    return 0;
}

/* new zeroed entry; index of it, or -1 on out of memory */
static int add_entry(kz_imatrix *im, const char *name, int64_t n_per_row, int64_t n_mat) {
    if (im->n == im->cap) {
        int cap = im->cap ? 2 * im->cap : 64;
        entry *e = realloc(im->e, (size_t)cap * sizeof *e);
        if (!e) return -1;
        im->e = e;
        im->cap = cap;
    }
    if (2 * (im->n + 1) > im->icap && reindex(im, im->icap ? 2 * im->icap : 128)) return -1;
    entry *e = &im->e[im->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->sum2 = calloc((size_t)(n_per_row * n_mat), sizeof *e->sum2);
    e->counts = calloc((size_t)n_mat, sizeof *e->counts);
    if (!e->name || !e->sum2 || !e->counts) {
        free(e->name); free(e->sum2); free(e->counts);
        return -1;
    }
    e->n_per_row = n_per_row;
    e->n_mat = n_mat;
    im->n++;
    uint64_t i = hash_name(name) & (uint64_t)(im->icap - 1);
    while (im->index[i] >= 0) i = (i + 1) & (uint64_t)(im->icap - 1);
    im->index[i] = im->n - 1;
    return im->n - 1;
}

kz_imatrix *kz_imatrix_new(void) { return calloc(1, sizeof(kz_imatrix)); }

void kz_imatrix_free(kz_imatrix *im) {
    if (!im) return;
    for (int k = 0; k < im->n; k++) {
        free(im->e[k].name);
        free(im->e[k].sum2);
        free(im->e[k].counts);
    }
    for (int i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->datasets);
    free(im->e);
    free(im->index);
    free(im);
}

int kz_imatrix_add(kz_imatrix *im, const char *name, int64_t n_per_row, const float *x, int64_t n_rows, char *err,
                   size_t errlen) {
    if (!im || !name || n_per_row <= 0 || n_rows < 0 || (n_rows && !x)) {
        kz_seterr(err, errlen, "imatrix: bad arguments for '%s'", name ? name : "(null)");
        return -1;
    }
    int k = find(im, name);
    if (k < 0 && (k = add_entry(im, name, n_per_row, 1)) < 0) {
        kz_seterr(err, errlen, "imatrix: out of memory adding '%s' (%lld columns)", name, (long long)n_per_row);
        return -1;
    }
    entry *e = &im->e[k];
    if (e->n_per_row != n_per_row) {
        kz_seterr(err, errlen, "imatrix: '%s' gets rows of %lld columns, earlier %lld", name, (long long)n_per_row,
                  (long long)e->n_per_row);
        return -1;
    }
    /* a 2-D weight accumulates into matrix 0 (as llama.cpp flattens dense activations) */
    double *acc = e->sum2;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n_per_row;
        for (int64_t j = 0; j < n_per_row; j++) acc[j] += (double)xr[j] * xr[j];
    }
    e->counts[0] += n_rows;
    return 0;
}

int kz_imatrix_count(const kz_imatrix *im) { return im ? im->n : 0; }

const char *kz_imatrix_name(const kz_imatrix *im, int i) { return im && i >= 0 && i < im->n ? im->e[i].name : NULL; }

int kz_imatrix_weights(const kz_imatrix *im, const char *name, int64_t n_per_row, float *out) {
    if (!im || !name || !out) return -1;
    int k = find(im, name);
    if (k < 0 || im->e[k].n_per_row != n_per_row) return -1;
    const entry *e = &im->e[k];
    /* a matrix no row reached weighs every column 1, as llama-quantize does */
    for (int64_t j = 0; j < n_per_row; j++) out[j] = e->counts[0] > 0 ? (float)(e->sum2[j] / (double)e->counts[0]) : 1.0f;
    return 0;
}

int kz_imatrix_entry(const kz_imatrix *im, const char *name, int64_t *n_per_row, int64_t *n_mat, const double **sum2,
                     const int64_t **counts) {
    int k = im && name ? find(im, name) : -1;
    if (k < 0) return -1;
    if (n_per_row) *n_per_row = im->e[k].n_per_row;
    if (n_mat) *n_mat = im->e[k].n_mat;
    if (sum2) *sum2 = im->e[k].sum2;
    if (counts) *counts = im->e[k].counts;
    return 0;
}

int kz_imatrix_chunk_count(const kz_imatrix *im) { return im ? (int)im->chunk_count : 0; }
int kz_imatrix_chunk_size(const kz_imatrix *im) { return im ? (int)im->chunk_size : 0; }
const char *kz_imatrix_dataset(const kz_imatrix *im) { return im && im->n_datasets ? im->datasets[0] : NULL; }

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const entry *const *)a)->name, (*(const entry *const *)b)->name);
}

int kz_imatrix_write(const kz_imatrix *im, const char *path, const char *dataset, int chunk_count, int chunk_size,
                     char *err, size_t errlen) {
    if (!im || !path || !path[0]) { kz_seterr(err, errlen, "imatrix: no output path"); return -1; }
    if (im->n == 0) { kz_seterr(err, errlen, "imatrix: nothing collected, '%s' not written", path); return -1; }
    if (chunk_count < 0 || chunk_size < 0) { kz_seterr(err, errlen, "imatrix: negative chunk count or size"); return -1; }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    const entry **sorted = malloc((size_t)im->n * sizeof *sorted);
    float *buf = NULL;
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    int rc = -1, fd = -1;
    if (!tmp || !sorted || !w) { kz_seterr(err, errlen, "imatrix: out of memory writing '%s'", path); goto done; }
    /* a unique temporary beside the target so that rename() stays on one file system */
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0) { kz_seterr(err, errlen, "imatrix: cannot create a temporary beside '%s'", path); goto done; }
    close(fd);
    fd = -1;
    for (int k = 0; k < im->n; k++) sorted[k] = &im->e[k];
    qsort(sorted, (size_t)im->n, sizeof *sorted, cmp_entry_name);

    const char *ds1[1] = {dataset};
    const char *const *ds = dataset ? ds1 : (const char *const *)im->datasets;
    uint64_t nds = dataset ? 1 : (uint64_t)im->n_datasets;
    kz_gguf_w_str(w, "general.type", "imatrix");
    kz_gguf_w_arr_str(w, "imatrix.datasets", ds, NULL, nds);
    kz_gguf_w_u32(w, "imatrix.chunk_count", (uint32_t)chunk_count);
    kz_gguf_w_u32(w, "imatrix.chunk_size", (uint32_t)chunk_size);
    int64_t maxrow = 1;
    char name[KZ_GGUF_MAX_NAME + 1];
    for (int k = 0; k < im->n; k++) {
        const entry *e = sorted[k];
        if (strlen(e->name) + 8 > KZ_GGUF_MAX_NAME) {
            kz_seterr(err, errlen, "imatrix: weight name '%s' too long for a GGUF tensor name", e->name);
            goto done;
        }
        int64_t ne_s[2] = {e->n_per_row, e->n_mat}, ne_c[2] = {1, e->n_mat};
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        kz_gguf_w_tensor_info(w, name, 2, ne_s, KZ_T_F32);
        snprintf(name, sizeof name, "%s.counts", e->name);
        kz_gguf_w_tensor_info(w, name, 2, ne_c, KZ_T_F32);
        if (e->n_per_row * e->n_mat > maxrow) maxrow = e->n_per_row * e->n_mat;
        if (e->n_mat > maxrow) maxrow = e->n_mat;
    }
    if (!(buf = malloc((size_t)maxrow * sizeof *buf))) { kz_seterr(err, errlen, "imatrix: out of memory"); goto done; }
    if (kz_gguf_writer_begin(w, tmp)) goto werr;
    for (int k = 0; k < im->n; k++) {
        const entry *e = sorted[k];
        int64_t n = e->n_per_row * e->n_mat;
        for (int64_t j = 0; j < n; j++) buf[j] = (float)e->sum2[j];
        if (kz_gguf_writer_write_tensor(w, buf, (size_t)n * sizeof *buf)) goto werr;
        for (int64_t j = 0; j < e->n_mat; j++) buf[j] = (float)e->counts[j];
        if (kz_gguf_writer_write_tensor(w, buf, (size_t)e->n_mat * sizeof *buf)) goto werr;
    }
    if (kz_gguf_writer_finish(w)) goto werr;
    /* durable before it replaces the target */
    if ((fd = open(tmp, O_RDONLY)) < 0 || fsync(fd)) {
        kz_seterr(err, errlen, "imatrix: cannot sync '%s'", tmp);
        goto done;
    }
    if (rename(tmp, path)) { kz_seterr(err, errlen, "imatrix: cannot rename '%s' to '%s'", tmp, path); goto done; }
    rc = 0;
    goto done;
werr:
    kz_seterr(err, errlen, "imatrix: %s", kz_gguf_writer_error(w));
done:
    if (fd >= 0) close(fd);
    kz_gguf_writer_free(w);
    if (rc && tmp && tmp[0]) unlink(tmp);
    free(buf);
    free(sorted);
    free(tmp);
    return rc;
}

kz_imatrix *kz_imatrix_read(const char *path, char *err, size_t errlen) {
    char gerr[256];
    kz_gguf *g = kz_gguf_open(path, gerr, sizeof gerr);
    if (!g) { kz_seterr(err, errlen, "imatrix: %s", gerr); return NULL; }
    kz_imatrix *im = kz_imatrix_new();
    if (!im) { kz_seterr(err, errlen, "imatrix: out of memory"); kz_gguf_close(g); return NULL; }
    kz_str ty;
    if (kz_gguf_get_str(g, "general.type", &ty) == 0 && !(ty.len == 7 && !memcmp(ty.ptr, "imatrix", 7))) {
        kz_seterr(err, errlen, "imatrix: '%s' has general.type '%.*s', not an importance matrix", path, (int)ty.len, ty.ptr);
        goto fail;
    }
    /* llama-quantize refuses a GGUF imatrix without these three keys; so do we */
    const kz_gguf_kv *dk = kz_gguf_get_kv(g, "imatrix.datasets");
    if (!dk || dk->type != KZ_GGUF_ARR || dk->arr_type != KZ_GGUF_STR || (dk->n && !dk->strs) ||
        kz_gguf_get_u32(g, "imatrix.chunk_count", &im->chunk_count) ||
        kz_gguf_get_u32(g, "imatrix.chunk_size", &im->chunk_size)) {
        kz_seterr(err, errlen, "imatrix: '%s' lacks imatrix.datasets (string array), imatrix.chunk_count or "
                  "imatrix.chunk_size (u32): not an imatrix GGUF as llama-imatrix writes it", path);
        goto fail;
    }
    if (dk->n && !(im->datasets = calloc(dk->n, sizeof *im->datasets))) goto oom;
    for (uint64_t i = 0; i < dk->n; i++) {
        if (!(im->datasets[i] = strndup(dk->strs[i].ptr, dk->strs[i].len))) goto oom;
        im->n_datasets++;
    }
    int n_pairs = 0;
    for (uint64_t t = 0; t < g->n_tensors; t++) {
        const kz_tensor_info *ti = &g->tensors[t];
        size_t len = strlen(ti->name);
        if (len > 8 && !strcmp(ti->name + len - 8, ".in_sum2")) {
            char base[KZ_GGUF_MAX_NAME + 1], cname[KZ_GGUF_MAX_NAME + 16];
            snprintf(base, sizeof base, "%.*s", (int)(len - 8), ti->name);
            snprintf(cname, sizeof cname, "%s.counts", base);
            const kz_tensor_info *ci = kz_gguf_find_tensor(g, cname);
            if (!ci) { kz_seterr(err, errlen, "imatrix: '%s' has '%s' but no '%s'", path, ti->name, cname); goto fail; }
            if (ti->type != KZ_T_F32 || ci->type != KZ_T_F32) {
                kz_seterr(err, errlen, "imatrix: '%s': '%s' and '%s' must be F32", path, ti->name, cname);
                goto fail;
            }
            int64_t n_per_row = ti->ne[0], n_mat = ti->ne[1] * ti->ne[2] * ti->ne[3];
            int64_t nc = ci->ne[0] * ci->ne[1] * ci->ne[2] * ci->ne[3];
            if (n_per_row <= 0 || n_mat <= 0 || nc != n_mat) {
                kz_seterr(err, errlen, "imatrix: '%s': '%s' has %lld matrices but '%s' %lld counts", path, ti->name,
                          (long long)n_mat, cname, (long long)nc);
                goto fail;
            }
            if (find(im, base) >= 0) { kz_seterr(err, errlen, "imatrix: '%s': '%s' twice", path, ti->name); goto fail; }
            int k = add_entry(im, base, n_per_row, n_mat);
            if (k < 0) goto oom;
            const float *s = ti->data, *c = ci->data;
            for (int64_t j = 0; j < n_per_row * n_mat; j++) {
                float v;
                memcpy(&v, s + j, sizeof v);
                if (!isfinite(v)) {
                    kz_seterr(err, errlen, "imatrix: '%s': '%s' holds a non-finite value at %lld", path, ti->name, (long long)j);
                    goto fail;
                }
                im->e[k].sum2[j] = v;
            }
            for (int64_t j = 0; j < n_mat; j++) {
                float v;
                memcpy(&v, c + j, sizeof v);
                if (!(v >= 0.0f && v < 9.0e18f)) {
                    kz_seterr(err, errlen, "imatrix: '%s': '%s' holds a bad count %g", path, cname, (double)v);
                    goto fail;
                }
                im->e[k].counts[j] = llroundf(v);
            }
            n_pairs++;
        } else if (len > 7 && !strcmp(ti->name + len - 7, ".counts")) {
            char sname[KZ_GGUF_MAX_NAME + 16];
            snprintf(sname, sizeof sname, "%.*s.in_sum2", (int)(len - 7), ti->name);
            if (!kz_gguf_find_tensor(g, sname)) {
                kz_seterr(err, errlen, "imatrix: '%s' has '%s' but no '%s'", path, ti->name, sname);
                goto fail;
            }
        }
    }
    if (n_pairs == 0) { kz_seterr(err, errlen, "imatrix: '%s' holds no in_sum2/counts tensors", path); goto fail; }
    kz_gguf_close(g);
    return im;
oom:
    kz_seterr(err, errlen, "imatrix: out of memory reading '%s'", path);
fail:
    kz_gguf_close(g);
    kz_imatrix_free(im);
    return NULL;
}
