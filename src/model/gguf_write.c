/* Streaming GGUF v3 writer: metadata and tensor infos are collected in memory (small), begin()
 * writes everything up to the data section, then tensor data is streamed in declaration order,
 * so a multi-GB model never has to be held in RAM. Errors are sticky and remove the partial file. */
#include "model/gguf.h"
#include "model/types.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef unsigned long long ull;

typedef struct {
    char *name;
    uint32_t n_dims, type;
    int64_t ne[4];
    uint64_t nbytes, offset;
} wtensor;

struct kz_gguf_writer {
    uint32_t alignment;
    int align_explicit; /* alignment given to writer_new (a conflicting kv is an error) */
    int has_align_kv;
    uint8_t *kvbuf; /* serialized kv records */
    size_t kvlen, kvcap;
    char **keys;
    uint64_t n_kv, keycap;
    wtensor *t;
    uint64_t nt, tcap;
    int state; /* 0 collecting, 1 writing data, 2 finished */
    int failed;
    FILE *f;
    char *path;
    int remove_on_fail; /* only a regular file we created is removed (never /dev/...) */
    uint64_t cur, cur_written, pos;
    char err[512];
};

static int fail(kz_gguf_writer *w, const char *fmt, ...) {
    if (!w->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
        w->failed = 1;
    }
    if (w->f) { /* never leave a half-written model behind */
        fclose(w->f);
        w->f = NULL;
        if (w->remove_on_fail) unlink(w->path);
    }
    return -1;
}

static uint64_t vsize(uint32_t t) {
    static const uint8_t sz[KZ_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < KZ_GGUF_NTYPES ? sz[t] : 0;
}

kz_gguf_writer *kz_gguf_writer_new(uint32_t alignment) {
    kz_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : 32;
    w->align_explicit = alignment != 0;
    if (alignment & (alignment - 1)) fail(w, "writer alignment %u is not a power of two", alignment);
    return w;
}

void kz_gguf_writer_free(kz_gguf_writer *w) {
    if (!w) return;
    if (w->f) { fclose(w->f); if (w->remove_on_fail) unlink(w->path); }
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (uint64_t i = 0; i < w->nt; i++) free(w->t[i].name);
    free(w->keys);
    free(w->t);
    free(w->kvbuf);
    free(w->path);
    free(w);
}

const char *kz_gguf_writer_error(const kz_gguf_writer *w) { return w ? w->err : "no writer"; }

/* ---------- kv serialization ---------- */

static int reserve(kz_gguf_writer *w, uint64_t extra) {
    if (extra > SIZE_MAX - w->kvlen) return fail(w, "metadata too large");
    size_t need = w->kvlen + (size_t)extra;
    if (need <= w->kvcap) return 0;
    size_t cap = w->kvcap ? w->kvcap : 4096;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = realloc(w->kvbuf, cap);
    if (!p) return fail(w, "out of memory for %llu bytes of metadata", (ull)need);
    w->kvbuf = p;
    w->kvcap = cap;
    return 0;
}
/* callers reserve() first */
static void put(kz_gguf_writer *w, const void *p, size_t n) {
    if (n) memcpy(w->kvbuf + w->kvlen, p, n);
    w->kvlen += n;
}
static void st32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static void st64(uint8_t *b, uint64_t v) { for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static void put32(kz_gguf_writer *w, uint32_t v) { uint8_t b[4]; st32(b, v); put(w, b, 4); }
static void put64(kz_gguf_writer *w, uint64_t v) { uint8_t b[8]; st64(b, v); put(w, b, 8); }
/* one native scalar of type t at src -> little-endian bytes at dst */
static void to_le(uint32_t t, const void *src, uint8_t *dst) {
    switch (vsize(t)) {
    case 1: memcpy(dst, src, 1); break;
    case 2: { uint16_t v; memcpy(&v, src, 2); dst[0] = (uint8_t)v; dst[1] = (uint8_t)(v >> 8); break; }
    case 4: { uint32_t v; memcpy(&v, src, 4); st32(dst, v); break; }
    case 8: { uint64_t v; memcpy(&v, src, 8); st64(dst, v); break; }
    }
}

/* Checks that a kv may be added now; on success reserves room for key + type + payload and
 * appends key and type. */
static int kv_start(kz_gguf_writer *w, const char *key, uint32_t type, uint64_t payload) {
    if (w->failed) return -1;
    if (w->state != 0) return fail(w, "kv '%s' added after kz_gguf_writer_begin()", key ? key : "(null)");
    if (!key || !key[0]) return fail(w, "empty metadata key");
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return fail(w, "duplicate metadata key '%s'", key);
    if (!strcmp(key, "general.alignment") && type != KZ_GGUF_U32)
        return fail(w, "general.alignment must be of type u32, got %s", kz_gguf_type_name(type));
    size_t klen = strlen(key);
    if (payload > UINT64_MAX - klen - 12) return fail(w, "kv '%s': value too large", key);
    if (w->n_kv == w->keycap) {
        uint64_t cap = w->keycap ? w->keycap * 2 : 32;
        char **k = realloc(w->keys, cap * sizeof(char *));
        if (!k) return fail(w, "out of memory");
        w->keys = k;
        w->keycap = cap;
    }
    char *kc = strdup(key);
    if (!kc) return fail(w, "out of memory");
    if (reserve(w, 8 + klen + 4 + payload)) { free(kc); return -1; }
    w->keys[w->n_kv++] = kc;
    put64(w, klen);
    put(w, key, klen);
    put32(w, type);
    return 0;
}

/* general.alignment may set the writer alignment (see gguf.h) */
static int check_alignment_kv(kz_gguf_writer *w, const char *key, uint32_t v) {
    if (strcmp(key, "general.alignment")) return 0;
    if (w->failed) return -1;
    if (v == 0 || (v & (v - 1))) return fail(w, "general.alignment = %u is not a non-zero power of two", v);
    if (w->align_explicit && v != w->alignment)
        return fail(w, "general.alignment = %u conflicts with the writer alignment %u", v, w->alignment);
    w->alignment = v;
    w->has_align_kv = 1;
    return 0;
}

int kz_gguf_w_scalar(kz_gguf_writer *w, const char *key, uint32_t vtype, const void *value) {
    if (!w) return -1;
    if (w->failed) return -1;
    uint64_t sz = vsize(vtype);
    if (!sz) return fail(w, "kv '%s': type %u is not a scalar type", key ? key : "(null)", vtype);
    if (!value) return fail(w, "kv '%s': no value given", key ? key : "(null)");
    uint8_t b[8];
    to_le(vtype, value, b);
    if (vtype == KZ_GGUF_BOOL && b[0] > 1) return fail(w, "kv '%s': bool value %u (must be 0 or 1)", key ? key : "(null)", b[0]);
    if (key && vtype == KZ_GGUF_U32 && check_alignment_kv(w, key, (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24))
        return -1;
    if (kv_start(w, key, vtype, sz)) return -1;
    put(w, b, sz);
    return 0;
}

int kz_gguf_w_u32(kz_gguf_writer *w, const char *key, uint32_t v) { return kz_gguf_w_scalar(w, key, KZ_GGUF_U32, &v); }
int kz_gguf_w_i32(kz_gguf_writer *w, const char *key, int32_t v) { return kz_gguf_w_scalar(w, key, KZ_GGUF_I32, &v); }
int kz_gguf_w_u64(kz_gguf_writer *w, const char *key, uint64_t v) { return kz_gguf_w_scalar(w, key, KZ_GGUF_U64, &v); }
int kz_gguf_w_f32(kz_gguf_writer *w, const char *key, float v) { return kz_gguf_w_scalar(w, key, KZ_GGUF_F32, &v); }
int kz_gguf_w_bool(kz_gguf_writer *w, const char *key, int v) {
    uint8_t b = (uint8_t)(v != 0);
    return kz_gguf_w_scalar(w, key, KZ_GGUF_BOOL, &b);
}

int kz_gguf_w_str(kz_gguf_writer *w, const char *key, const char *s) {
    if (!w || w->failed) return -1;
    if (!s) return fail(w, "kv '%s': NULL string", key ? key : "(null)");
    size_t n = strlen(s);
    if (kv_start(w, key, KZ_GGUF_STR, 8 + (uint64_t)n)) return -1;
    put64(w, n);
    put(w, s, n);
    return 0;
}

int kz_gguf_w_arr(kz_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    if (!w || w->failed) return -1;
    const char *k = key ? key : "(null)";
    uint64_t esz = vsize(elem_type);
    if (!esz) return fail(w, "kv '%s': array element type %u is not a scalar type (use kz_gguf_w_arr_str for strings)", k, elem_type);
    if (n && !data) return fail(w, "kv '%s': NULL array data", k);
    if (n > (UINT64_MAX - 64) / esz) return fail(w, "kv '%s': array too large", k);
    const uint8_t *d = data;
    if (elem_type == KZ_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (d[i] > 1) return fail(w, "kv '%s': bool array element %llu is %u (must be 0 or 1)", k, (ull)i, d[i]);
    if (kv_start(w, key, KZ_GGUF_ARR, 12 + n * esz)) return -1;
    put32(w, elem_type);
    put64(w, n);
    for (uint64_t i = 0; i < n; i++) to_le(elem_type, d + i * esz, w->kvbuf + w->kvlen + i * esz);
    w->kvlen += n * esz;
    return 0;
}

int kz_gguf_w_arr_str(kz_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens, uint64_t n) {
    if (!w || w->failed) return -1;
    const char *k = key ? key : "(null)";
    if (n && !strs) return fail(w, "kv '%s': NULL string array", k);
    uint64_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i] && (!lens || lens[i])) return fail(w, "kv '%s': string %llu is NULL", k, (ull)i);
        uint64_t len = lens ? lens[i] : strlen(strs[i]);
        if (len > UINT64_MAX / 2 - total - 8) return fail(w, "kv '%s': string array too large", k);
        total += 8 + len;
    }
    if (kv_start(w, key, KZ_GGUF_ARR, total)) return -1;
    put32(w, KZ_GGUF_STR);
    put64(w, n);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = lens ? lens[i] : strlen(strs[i]);
        put64(w, len);
        put(w, strs[i], (size_t)len);
    }
    return 0;
}

int kz_gguf_w_copy_kv(kz_gguf_writer *w, const kz_gguf *src, const kz_gguf_kv *kv) {
    if (!w || w->failed) return -1;
    if (!kv || !kv->key || !kv->data || kv->type >= KZ_GGUF_NTYPES) return fail(w, "copy_kv: invalid kv");
    if (src) { /* the raw value bytes are copied, so they must lie inside src's mapping */
        const uint8_t *b = src->map;
        if (kv->data < b || kv->size > src->size || (uint64_t)(kv->data - b) > src->size - kv->size)
            return fail(w, "copy_kv: kv '%s' does not belong to the given file", kv->key);
    }
    if (kv->type == KZ_GGUF_U32 && kv->size == 4 &&
        check_alignment_kv(w, kv->key, (uint32_t)kv->data[0] | (uint32_t)kv->data[1] << 8 | (uint32_t)kv->data[2] << 16 | (uint32_t)kv->data[3] << 24))
        return -1;
    int arr = kv->type == KZ_GGUF_ARR;
    if (kv_start(w, kv->key, kv->type, (arr ? 12 : 0) + kv->size)) return -1;
    if (arr) { put32(w, kv->arr_type); put64(w, kv->n); }
    put(w, kv->data, (size_t)kv->size); /* value encoding is position independent */
    return 0;
}

/* ---------- tensors ---------- */

int kz_gguf_w_tensor_info(kz_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type) {
    if (!w || w->failed) return -1;
    if (w->state != 0) return fail(w, "tensor '%s' added after kz_gguf_writer_begin()", name ? name : "(null)");
    if (!name || !name[0]) return fail(w, "empty tensor name");
    if (strlen(name) > KZ_GGUF_MAX_NAME) return fail(w, "tensor name '%.40s...' is longer than %d bytes", name, KZ_GGUF_MAX_NAME);
    if (n_dims < 1 || n_dims > 4) return fail(w, "tensor '%s': n_dims = %u (must be 1..4)", name, n_dims);
    if (!ne) return fail(w, "tensor '%s': NULL shape", name);
    const kz_type_info *ti = kz_type_get(type);
    if (!ti) return fail(w, "tensor '%s': unknown or removed ggml type %u", name, type);
    for (uint64_t i = 0; i < w->nt; i++)
        if (!strcmp(w->t[i].name, name)) return fail(w, "duplicate tensor name '%s'", name);
    wtensor t = {0};
    uint64_t nel = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1) return fail(w, "tensor '%s': ne[%u] = %lld (must be >= 1)", name, d, (long long)t.ne[d]);
        if (nel > (uint64_t)INT64_MAX / (uint64_t)t.ne[d]) return fail(w, "tensor '%s': element count overflows int64", name);
        nel *= (uint64_t)t.ne[d];
    }
    if (t.ne[0] % ti->blck)
        return fail(w, "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %u", name, (long long)t.ne[0], ti->name, ti->blck);
    uint64_t bytes = (uint64_t)t.ne[0] / ti->blck;
    if (bytes > UINT64_MAX / ti->bytes) return fail(w, "tensor '%s': byte size overflows", name);
    bytes *= ti->bytes;
    for (uint32_t d = 1; d < 4; d++) {
        if (bytes > (UINT64_MAX >> 1) / (uint64_t)t.ne[d]) return fail(w, "tensor '%s': byte size overflows", name);
        bytes *= (uint64_t)t.ne[d];
    }
    if (w->nt == w->tcap) {
        uint64_t cap = w->tcap ? w->tcap * 2 : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return fail(w, "out of memory");
        w->t = nt;
        w->tcap = cap;
    }
    if (!(t.name = strdup(name))) return fail(w, "out of memory");
    t.n_dims = n_dims;
    t.type = type;
    t.nbytes = bytes;
    w->t[w->nt++] = t;
    return 0;
}

/* ---------- file output ---------- */

static int wbytes(kz_gguf_writer *w, const void *p, size_t n) {
    if (!w->f) return -1;
    if (n && fwrite(p, 1, n, w->f) != n)
        return fail(w, "write to '%s' failed at byte %llu: %s", w->path, (ull)w->pos, errno ? strerror(errno) : "I/O error");
    w->pos += n;
    return 0;
}
static int wpad(kz_gguf_writer *w) {
    static const uint8_t zeros[256];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        if (wbytes(w, zeros, n)) return -1;
        pad -= n;
    }
    return 0;
}

int kz_gguf_writer_begin(kz_gguf_writer *w, const char *path) {
    if (!w || w->failed) return -1;
    if (w->state != 0) return fail(w, "kz_gguf_writer_begin() called twice");
    if (!path || !path[0]) return fail(w, "no output path");
    if (!w->has_align_kv && w->alignment != 32 && kz_gguf_w_u32(w, "general.alignment", w->alignment)) return -1;
    uint64_t a = w->alignment, off = 0;
    for (uint64_t i = 0; i < w->nt; i++) {
        w->t[i].offset = off;
        uint64_t padded = w->t[i].nbytes + (a - w->t[i].nbytes % a) % a;
        if (padded < w->t[i].nbytes || off > UINT64_MAX - padded) return fail(w, "total tensor data exceeds 2^64 bytes");
        off += padded;
    }
    if (!(w->path = strdup(path))) return fail(w, "out of memory");
    errno = 0;
    if (!(w->f = fopen(path, "wb"))) return fail(w, "cannot create '%s': %s", path, strerror(errno));
    struct stat st;
    w->remove_on_fail = !fstat(fileno(w->f), &st) && S_ISREG(st.st_mode);
    w->state = 1;
    uint8_t h[24];
    memcpy(h, "GGUF", 4);
    st32(h + 4, 3);
    st64(h + 8, w->nt);
    st64(h + 16, w->n_kv);
    if (wbytes(w, h, sizeof h) || wbytes(w, w->kvbuf, w->kvlen)) return -1;
    for (uint64_t i = 0; i < w->nt; i++) {
        const wtensor *t = &w->t[i];
        uint8_t b[8 + KZ_GGUF_MAX_NAME + 4 + 32 + 4 + 8];
        size_t n = 0, len = strlen(t->name);
        st64(b, len); n = 8;
        memcpy(b + n, t->name, len); n += len;
        st32(b + n, t->n_dims); n += 4;
        for (uint32_t d = 0; d < t->n_dims; d++) { st64(b + n, (uint64_t)t->ne[d]); n += 8; }
        st32(b + n, t->type); n += 4;
        st64(b + n, t->offset); n += 8;
        if (wbytes(w, b, n)) return -1;
    }
    if (w->nt && wpad(w)) return -1;
    w->cur = 0;
    w->cur_written = 0;
    return 0;
}

static int need_writing(kz_gguf_writer *w) {
    if (!w || w->failed) return -1;
    if (w->state == 0) return fail(w, "tensor data written before kz_gguf_writer_begin()");
    if (w->state == 2) return fail(w, "tensor data written after kz_gguf_writer_finish()");
    if (w->cur >= w->nt) return fail(w, "more tensor data than the %llu declared tensors", (ull)w->nt);
    return 0;
}

int kz_gguf_writer_write_part(kz_gguf_writer *w, const void *data, size_t n) {
    if (need_writing(w)) return -1;
    const wtensor *t = &w->t[w->cur];
    if (n && !data) return fail(w, "tensor '%s': NULL data", t->name);
    if (n > t->nbytes - w->cur_written)
        return fail(w, "tensor '%s': %llu bytes written, more than its size of %llu bytes", t->name, (ull)(w->cur_written + n), (ull)t->nbytes);
    if (wbytes(w, data, n)) return -1;
    w->cur_written += n;
    return 0;
}

int kz_gguf_writer_end_tensor(kz_gguf_writer *w) {
    if (need_writing(w)) return -1;
    const wtensor *t = &w->t[w->cur];
    if (w->cur_written != t->nbytes)
        return fail(w, "tensor '%s': only %llu of its %llu bytes were written", t->name, (ull)w->cur_written, (ull)t->nbytes);
    if (wpad(w)) return -1;
    w->cur++;
    w->cur_written = 0;
    return 0;
}

int kz_gguf_writer_write_tensor(kz_gguf_writer *w, const void *data, size_t nbytes) {
    if (need_writing(w)) return -1;
    const wtensor *t = &w->t[w->cur];
    if (w->cur_written) return fail(w, "tensor '%s': write_tensor() after write_part()", t->name);
    if (nbytes != t->nbytes)
        return fail(w, "tensor '%s': %llu bytes given, expected %llu (%s, ne = [%lld, %lld, %lld, %lld])", t->name, (ull)nbytes, (ull)t->nbytes,
                    kz_type_get(t->type)->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    if (kz_gguf_writer_write_part(w, data, nbytes)) return -1;
    return kz_gguf_writer_end_tensor(w);
}

int kz_gguf_writer_finish(kz_gguf_writer *w) {
    if (!w || w->failed) return -1;
    if (w->state == 0) return fail(w, "kz_gguf_writer_finish() without kz_gguf_writer_begin()");
    if (w->state == 2) return fail(w, "kz_gguf_writer_finish() called twice");
    if (w->cur != w->nt)
        return fail(w, "only %llu of %llu tensors written (next missing: '%s')", (ull)w->cur, (ull)w->nt, w->t[w->cur].name);
    errno = 0;
    if (fflush(w->f) || ferror(w->f)) return fail(w, "write to '%s' failed: %s", w->path, errno ? strerror(errno) : "I/O error");
    FILE *f = w->f;
    w->f = NULL;
    errno = 0;
    if (fclose(f)) { /* delayed write errors (NFS, disk full) surface here */
        int e = errno;
        if (w->remove_on_fail) unlink(w->path);
        return fail(w, "closing '%s' failed: %s", w->path, e ? strerror(e) : "I/O error");
    }
    w->state = 2;
    return 0;
}
