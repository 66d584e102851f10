/* GGUF v2/v3 reader: the file is mapped read-only and every field is validated before it is
 * used, so a hostile or truncated file yields a one-line error instead of an out-of-bounds
 * read. All reads go through byte-wise little-endian loads (no alignment assumptions). */
#include "model/gguf.h"
#include "model/types.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sys/err.h"

typedef unsigned long long ull;
typedef long long sll;

/* ---------- small helpers ---------- */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* byte size of a scalar value type; 0 for STR/ARR/unknown */
static uint64_t vsize(uint32_t t) {
    static const uint8_t sz[KZ_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < KZ_GGUF_NTYPES ? sz[t] : 0;
}
static int is_int_type(uint32_t t) {
    return t <= KZ_GGUF_I32 || t == KZ_GGUF_BOOL || t == KZ_GGUF_U64 || t == KZ_GGUF_I64;
}

const char *kz_gguf_type_name(uint32_t t) {
    static const char *const n[KZ_GGUF_NTYPES] = {"u8",  "i8",  "u16", "i16", "u32", "i32", "f32",
                                                  "bool", "str", "arr", "u64", "i64", "f64"};
    return t < KZ_GGUF_NTYPES ? n[t] : "?";
}

/* Names from the file may hold control characters; keep error messages on one line. */
static const char *safe(const char *s, char *buf, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 4 < n; i++) buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (s[i]) { buf[i++] = '.'; buf[i++] = '.'; buf[i++] = '.'; }
    buf[i] = 0;
    return buf;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Open-addressing index: slot holds idx+1, 0 = empty. cap is a power of two >= 2n. */
static uint32_t *index_new(uint64_t n, uint64_t *cap) {
    uint64_t c = 8;
    while (c < 2 * n) c <<= 1;
    *cap = c;
    return calloc(c, sizeof(uint32_t));
}
/* Returns 1 if inserted, 0 if the name already exists. names(i) gives entry i's name. */
static int index_insert(uint32_t *ix, uint64_t cap, const char *name, uint32_t idx,
                        const char *(*names)(const void *, uint32_t), const void *ctx) {
    uint64_t m = cap - 1, h = hash_str(name) & m;
    while (ix[h]) {
        if (!strcmp(names(ctx, ix[h] - 1), name)) return 0;
        h = (h + 1) & m;
    }
    ix[h] = idx + 1;
    return 1;
}
static int64_t index_find(const uint32_t *ix, uint64_t cap, const char *name,
                          const char *(*names)(const void *, uint32_t), const void *ctx) {
    if (!ix || !cap || !name) return -1;
    uint64_t m = cap - 1, h = hash_str(name) & m;
    while (ix[h]) {
        if (!strcmp(names(ctx, ix[h] - 1), name)) return ix[h] - 1;
        h = (h + 1) & m;
    }
    return -1;
}
static const char *kv_name(const void *g, uint32_t i) { return ((const kz_gguf *)g)->kv[i].key; }
static const char *t_name(const void *g, uint32_t i) { return ((const kz_gguf *)g)->tensors[i].name; }

/* ---------- parsing ---------- */

typedef struct {
    const uint8_t *b;
    uint64_t size, off; /* invariant: off <= size */
    char *err;
    size_t errlen;
} rd;

static uint64_t rem(const rd *r) { return r->size - r->off; }
static const char *noun(const char *what) { return strcmp(what, "kv") ? "name" : "key"; }

/* Reads a gguf_string header and validates it; *s points into the buffer. what/idx name the
 * record for the error message. */
static int rd_str(rd *r, kz_str *s, const char *what, const char *name, ull idx) {
    char nb[96];
    if (rem(r) < 8) {
        if (name) kz_seterr(r->err, r->errlen, "%s '%s': truncated string length (file ends at byte %llu)", what, safe(name, nb, sizeof nb), (ull)r->size);
        else kz_seterr(r->err, r->errlen, "%s #%llu: truncated %s length (file ends at byte %llu)", what, idx, noun(what), (ull)r->size);
        return -1;
    }
    uint64_t len = ld64(r->b + r->off);
    r->off += 8;
    if (len > rem(r)) {
        if (name) kz_seterr(r->err, r->errlen, "%s '%s': string length %llu exceeds the %llu bytes left in the file", what, safe(name, nb, sizeof nb), (ull)len, (ull)rem(r));
        else kz_seterr(r->err, r->errlen, "%s #%llu: %s length %llu exceeds the %llu bytes left in the file", what, idx, noun(what), (ull)len, (ull)rem(r));
        return -1;
    }
    s->ptr = (const char *)r->b + r->off;
    s->len = len;
    r->off += len;
    return 0;
}

/* Validates a name (key or tensor name) and returns an owned NUL-terminated copy. */
static char *dup_name(rd *r, kz_str s, const char *what, ull idx, uint64_t maxlen) {
    if (s.len == 0) { kz_seterr(r->err, r->errlen, "%s #%llu: empty %s", what, idx, noun(what)); return NULL; }
    if (s.len > maxlen) {
        kz_seterr(r->err, r->errlen, "%s #%llu: %s length %llu exceeds the limit of %llu bytes", what, idx, noun(what), (ull)s.len, (ull)maxlen);
        return NULL;
    }
    if (memchr(s.ptr, 0, s.len)) { kz_seterr(r->err, r->errlen, "%s #%llu: %s contains a NUL byte", what, idx, noun(what)); return NULL; }
    char *c = malloc(s.len + 1);
    if (!c) { kz_seterr(r->err, r->errlen, "out of memory reading %s #%llu", what, idx); return NULL; }
    memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}

/* Validates n array elements of type et starting at r->off and advances past them.
 * strs (may be NULL) receives the strings of a flat string array. */
static int rd_array_body(rd *r, const char *key, uint32_t et, uint64_t n, int depth, kz_str *strs) {
    char nb[96];
    if (et >= KZ_GGUF_NTYPES) {
        kz_seterr(r->err, r->errlen, "kv '%s': unknown array element type %u", safe(key, nb, sizeof nb), et);
        return -1;
    }
    uint64_t esz = vsize(et);
    if (esz) {
        if (n > rem(r) / esz) {
            kz_seterr(r->err, r->errlen, "kv '%s': array of %llu %s elements does not fit in the %llu bytes left in the file", safe(key, nb, sizeof nb),
                      (ull)n, kz_gguf_type_name(et), (ull)rem(r));
            return -1;
        }
        if (et == KZ_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (r->b[r->off + i] > 1) {
                    kz_seterr(r->err, r->errlen, "kv '%s': bool array element %llu has value %u (must be 0 or 1)", safe(key, nb, sizeof nb), (ull)i, r->b[r->off + i]);
                    return -1;
                }
        r->off += n * esz;
        return 0;
    }
    if (et == KZ_GGUF_STR) {
        if (n > rem(r) / 8) {
            kz_seterr(r->err, r->errlen, "kv '%s': array of %llu strings cannot fit in the %llu bytes left in the file", safe(key, nb, sizeof nb), (ull)n, (ull)rem(r));
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (rem(r) < 8) {
                kz_seterr(r->err, r->errlen, "kv '%s': string array truncated at element %llu", safe(key, nb, sizeof nb), (ull)i);
                return -1;
            }
            uint64_t len = ld64(r->b + r->off);
            r->off += 8;
            if (len > rem(r)) {
                kz_seterr(r->err, r->errlen, "kv '%s': string element %llu has length %llu but only %llu bytes are left in the file", safe(key, nb, sizeof nb), (ull)i, (ull)len, (ull)rem(r));
                return -1;
            }
            if (strs) { strs[i].ptr = (const char *)r->b + r->off; strs[i].len = len; }
            r->off += len;
        }
        return 0;
    }
    /* nested array: each element is {u32 type, u64 count, body} */
    if (depth >= KZ_GGUF_MAX_DEPTH) {
        kz_seterr(r->err, r->errlen, "kv '%s': arrays nested deeper than %d levels", safe(key, nb, sizeof nb), KZ_GGUF_MAX_DEPTH);
        return -1;
    }
    if (n > rem(r) / 12) {
        kz_seterr(r->err, r->errlen, "kv '%s': array of %llu arrays cannot fit in the %llu bytes left in the file", safe(key, nb, sizeof nb), (ull)n, (ull)rem(r));
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (rem(r) < 12) {
            kz_seterr(r->err, r->errlen, "kv '%s': nested array truncated at element %llu", safe(key, nb, sizeof nb), (ull)i);
            return -1;
        }
        uint32_t et2 = ld32(r->b + r->off);
        uint64_t n2 = ld64(r->b + r->off + 4);
        r->off += 12;
        if (rd_array_body(r, key, et2, n2, depth + 1, NULL)) return -1;
    }
    return 0;
}

static int rd_kv(rd *r, kz_gguf *g, uint64_t i) {
    kz_gguf_kv *kv = &g->kv[i];
    char nb[96];
    kz_str ks;
    if (rd_str(r, &ks, "kv", NULL, (ull)i)) return -1;
    /* keys are short identifiers; the file size already bounds ks.len */
    if (!(kv->key = dup_name(r, ks, "kv", (ull)i, UINT64_MAX))) return -1;
    const char *key = kv->key;
    if (!index_insert(g->kindex, g->kindex_cap, key, (uint32_t)i, kv_name, g)) {
        kz_seterr(r->err, r->errlen, "duplicate metadata key '%s' (kv #%llu)", safe(key, nb, sizeof nb), (ull)i);
        return -1;
    }
    if (rem(r) < 4) { kz_seterr(r->err, r->errlen, "kv '%s': truncated before its value type", safe(key, nb, sizeof nb)); return -1; }
    kv->type = ld32(r->b + r->off);
    r->off += 4;
    kv->n = 1;
    if (kv->type >= KZ_GGUF_NTYPES) {
        kz_seterr(r->err, r->errlen, "kv '%s': unknown value type %u", safe(key, nb, sizeof nb), kv->type);
        return -1;
    }
    uint64_t esz = vsize(kv->type);
    if (esz) {
        if (rem(r) < esz) { kz_seterr(r->err, r->errlen, "kv '%s': %s value truncated", safe(key, nb, sizeof nb), kz_gguf_type_name(kv->type)); return -1; }
        kv->data = r->b + r->off;
        kv->size = esz;
        if (kv->type == KZ_GGUF_BOOL && kv->data[0] > 1) {
            kz_seterr(r->err, r->errlen, "kv '%s': bool value %u (must be 0 or 1)", safe(key, nb, sizeof nb), kv->data[0]);
            return -1;
        }
        r->off += esz;
        return 0;
    }
    if (kv->type == KZ_GGUF_STR) {
        kv->data = r->b + r->off;
        if (!(kv->strs = malloc(sizeof(kz_str)))) { kz_seterr(r->err, r->errlen, "out of memory"); return -1; }
        if (rd_str(r, kv->strs, "kv", key, (ull)i)) return -1;
        kv->size = 8 + kv->strs->len;
        return 0;
    }
    /* array */
    if (rem(r) < 12) { kz_seterr(r->err, r->errlen, "kv '%s': truncated array header", safe(key, nb, sizeof nb)); return -1; }
    kv->arr_type = ld32(r->b + r->off);
    kv->n = ld64(r->b + r->off + 4);
    r->off += 12;
    kv->data = r->b + r->off;
    uint64_t start = r->off;
    if (kv->arr_type == KZ_GGUF_STR) {
        /* bound n by the file before allocating: each string needs >= 8 bytes */
        if (kv->n > rem(r) / 8) {
            kz_seterr(r->err, r->errlen, "kv '%s': array of %llu strings cannot fit in the %llu bytes left in the file", safe(key, nb, sizeof nb), (ull)kv->n, (ull)rem(r));
            return -1;
        }
        if (!(kv->strs = malloc((kv->n ? kv->n : 1) * sizeof(kz_str)))) {
            kz_seterr(r->err, r->errlen, "kv '%s': out of memory for %llu strings", safe(key, nb, sizeof nb), (ull)kv->n);
            return -1;
        }
    }
    if (rd_array_body(r, key, kv->arr_type, kv->n, 1, kv->strs)) return -1;
    kv->size = r->off - start;
    return 0;
}

static int rd_tensor_info(rd *r, kz_gguf *g, uint64_t i) {
    kz_tensor_info *t = &g->tensors[i];
    char nb[96];
    kz_str ns;
    if (rd_str(r, &ns, "tensor", NULL, (ull)i)) return -1;
    if (!(t->name = dup_name(r, ns, "tensor", (ull)i, KZ_GGUF_MAX_NAME))) return -1;
    const char *nm = safe(t->name, nb, sizeof nb);
    if (!index_insert(g->tindex, g->tindex_cap, t->name, (uint32_t)i, t_name, g)) {
        kz_seterr(r->err, r->errlen, "duplicate tensor name '%s' (tensor #%llu)", nm, (ull)i);
        return -1;
    }
    if (rem(r) < 4) { kz_seterr(r->err, r->errlen, "tensor '%s': info truncated before n_dims", nm); return -1; }
    t->n_dims = ld32(r->b + r->off);
    r->off += 4;
    if (t->n_dims < 1 || t->n_dims > 4) {
        kz_seterr(r->err, r->errlen, "tensor '%s': n_dims = %u (must be 1..4)", nm, t->n_dims);
        return -1;
    }
    if (rem(r) < 8ull * t->n_dims + 12) { kz_seterr(r->err, r->errlen, "tensor '%s': info truncated", nm); return -1; }
    uint64_t nel = 1;
    for (uint32_t d = 0; d < 4; d++) {
        if (d >= t->n_dims) { t->ne[d] = 1; continue; }
        uint64_t v = ld64(r->b + r->off);
        r->off += 8;
        if (v == 0) { kz_seterr(r->err, r->errlen, "tensor '%s': ne[%u] is 0 (empty tensors are not supported)", nm, d); return -1; }
        if (v > INT64_MAX) { kz_seterr(r->err, r->errlen, "tensor '%s': ne[%u] = %llu is negative as int64", nm, d, (ull)v); return -1; }
        if (nel > (uint64_t)INT64_MAX / v) {
            kz_seterr(r->err, r->errlen, "tensor '%s': element count overflows int64 (ne[%u] = %llu)", nm, d, (ull)v);
            return -1;
        }
        nel *= v;
        t->ne[d] = (int64_t)v;
    }
    t->type = ld32(r->b + r->off);
    r->off += 4;
    const kz_type_info *ti = kz_type_get(t->type);
    if (!ti) { kz_seterr(r->err, r->errlen, "tensor '%s': unknown or removed ggml type %u", nm, t->type); return -1; }
    if (t->ne[0] % ti->blck) {
        kz_seterr(r->err, r->errlen, "tensor '%s': ne[0] = %lld is not a multiple of the %s block size %u", nm, (sll)t->ne[0], ti->name, ti->blck);
        return -1;
    }
    uint64_t blocks = (uint64_t)t->ne[0] / ti->blck;
    if (blocks > UINT64_MAX / ti->bytes) goto ovf;
    uint64_t bytes = blocks * ti->bytes;
    for (uint32_t d = 1; d < 4; d++) {
        if (bytes > UINT64_MAX / (uint64_t)t->ne[d]) goto ovf;
        bytes *= (uint64_t)t->ne[d];
    }
    t->nbytes = bytes;
    t->offset = ld64(r->b + r->off);
    r->off += 8;
    return 0;
ovf:
    kz_seterr(r->err, r->errlen, "tensor '%s': byte size overflows 64 bits", nm);
    return -1;
}

typedef struct { uint64_t off, end; uint32_t idx; } span;
static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int check_layout(rd *r, kz_gguf *g) {
    char nb[96], nb2[96];
    uint64_t a = g->alignment;
    g->data_offset = r->off + (a - r->off % a) % a;
    if (!g->n_tensors) {
        /* no data section; keep data_offset inside the buffer for callers that look at it */
        if (g->data_offset > g->size) g->data_offset = g->size;
        return 0;
    }
    if (g->data_offset > g->size) {
        kz_seterr(r->err, r->errlen, "truncated file: tensor data would start at byte %llu but the file has %llu bytes", (ull)g->data_offset, (ull)g->size);
        return -1;
    }
    uint64_t dsize = g->size - g->data_offset;
    span *sp = malloc(g->n_tensors * sizeof(span));
    if (!sp) { kz_seterr(r->err, r->errlen, "out of memory"); return -1; }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kz_tensor_info *t = &g->tensors[i];
        if (t->offset % a) {
            kz_seterr(r->err, r->errlen, "tensor '%s': offset %llu is not a multiple of the alignment %llu", safe(t->name, nb, sizeof nb), (ull)t->offset, (ull)a);
            free(sp);
            return -1;
        }
        if (t->offset > dsize || t->nbytes > dsize - t->offset) {
            kz_seterr(r->err, r->errlen, "tensor '%s': data [%llu, +%llu) extends past the end of the file (data section holds %llu bytes; truncated file?)",
                   safe(t->name, nb, sizeof nb), (ull)t->offset, (ull)t->nbytes, (ull)dsize);
            free(sp);
            return -1;
        }
        t->data = (const uint8_t *)g->map + g->data_offset + t->offset;
        sp[i].off = t->offset;
        sp[i].end = t->offset + t->nbytes;
        sp[i].idx = (uint32_t)i;
    }
    qsort(sp, g->n_tensors, sizeof(span), span_cmp);
    for (uint64_t i = 1; i < g->n_tensors; i++)
        if (sp[i].off < sp[i - 1].end) {
            kz_seterr(r->err, r->errlen, "tensors '%s' and '%s' overlap (data at offsets %llu+%llu and %llu)",
                      safe(g->tensors[sp[i - 1].idx].name, nb, sizeof nb), safe(g->tensors[sp[i].idx].name, nb2, sizeof nb2),
                      (ull)sp[i - 1].off, (ull)(sp[i - 1].end - sp[i - 1].off), (ull)sp[i].off);
            free(sp);
            return -1;
        }
    free(sp);
    return 0;
}

static int parse(kz_gguf *g, char *err, size_t errlen) {
    rd r = {g->map, g->size, 0, err, errlen};
    const uint8_t *b = g->map;
    if (g->size < 4) { kz_seterr(err, errlen, "file is %llu bytes, too small to be a GGUF file", (ull)g->size); return -1; }
    if (memcmp(b, "GGUF", 4)) {
        kz_seterr(err, errlen, "not a GGUF file (magic bytes %02x %02x %02x %02x, expected 47 47 55 46 \"GGUF\")", b[0], b[1], b[2], b[3]);
        return -1;
    }
    if (g->size < 24) { kz_seterr(err, errlen, "truncated GGUF header (%llu bytes, need 24)", (ull)g->size); return -1; }
    uint32_t v = ld32(b + 4);
    if (v == 0) { kz_seterr(err, errlen, "invalid GGUF version 0"); return -1; }
    if ((v & 0xFFFF) == 0) {
        kz_seterr(err, errlen, "GGUF version field 0x%08x looks byte-swapped: big-endian GGUF files are not supported", v);
        return -1;
    }
    if (v == 1) { kz_seterr(err, errlen, "GGUF version 1 is not supported (re-convert the model with a current converter)"); return -1; }
    if (v > 3) { kz_seterr(err, errlen, "GGUF version %u is not supported (this reader handles 2 and 3)", v); return -1; }
    g->version = v;
    uint64_t nt = ld64(b + 8), nkv = ld64(b + 16);
    r.off = 24;
    /* smallest possible records: kv = 8+1 key, 4 type, 1 value; tensor = 8+1 name, 4 n_dims,
     * 8 ne, 4 type, 8 offset. Rejecting counts the file cannot hold bounds every allocation. */
    const uint64_t min_kv = 14, min_ti = 33;
    if (nkv > KZ_GGUF_MAX_COUNT || nkv > rem(&r) / min_kv) {
        kz_seterr(err, errlen, "impossible metadata count n_kv = %llu (file of %llu bytes holds at most %llu; limit %u)", (ull)nkv, (ull)g->size, (ull)(rem(&r) / min_kv), KZ_GGUF_MAX_COUNT);
        return -1;
    }
    if (nt > KZ_GGUF_MAX_COUNT || nt > (rem(&r) - nkv * min_kv) / min_ti) {
        kz_seterr(err, errlen, "impossible tensor count n_tensors = %llu (file of %llu bytes with %llu kvs holds at most %llu; limit %u)", (ull)nt, (ull)g->size,
                  (ull)nkv, (ull)((rem(&r) - nkv * min_kv) / min_ti), KZ_GGUF_MAX_COUNT);
        return -1;
    }
    g->kv = calloc(nkv ? nkv : 1, sizeof(kz_gguf_kv));
    g->tensors = calloc(nt ? nt : 1, sizeof(kz_tensor_info));
    g->kindex = index_new(nkv, &g->kindex_cap);
    g->tindex = index_new(nt, &g->tindex_cap);
    if (!g->kv || !g->tensors || !g->kindex || !g->tindex) { kz_seterr(err, errlen, "out of memory"); return -1; }
    for (uint64_t i = 0; i < nkv; i++) {
        g->n_kv = i + 1; /* so close() frees what was allocated so far */
        if (rd_kv(&r, g, i)) return -1;
    }
    g->alignment = 32;
    const kz_gguf_kv *al = kz_gguf_get_kv(g, "general.alignment");
    if (al) {
        if (al->type != KZ_GGUF_U32) {
            kz_seterr(err, errlen, "general.alignment must be of type u32, got %s", kz_gguf_type_name(al->type));
            return -1;
        }
        uint32_t a = ld32(al->data);
        if (a == 0 || (a & (a - 1))) { kz_seterr(err, errlen, "general.alignment = %u is not a non-zero power of two", a); return -1; }
        g->alignment = a;
    }
    for (uint64_t i = 0; i < nt; i++) {
        g->n_tensors = i + 1;
        if (rd_tensor_info(&r, g, i)) return -1;
    }
    return check_layout(&r, g);
}

static kz_gguf *open_buf(void *map, size_t size, int owns, char *err, size_t errlen) {
    kz_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (owns) munmap(map, size);
        kz_seterr(err, errlen, "out of memory");
        return NULL;
    }
    g->map = map;
    g->size = size;
    g->owns_map = owns;
    if (parse(g, err, errlen)) {
        if (err && errlen && !err[0]) kz_seterr(err, errlen, "invalid GGUF file");
        kz_gguf_close(g);
        return NULL;
    }
    return g;
}

kz_gguf *kz_gguf_open_mem(const void *buf, size_t size, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!buf) { kz_seterr(err, errlen, "no buffer given"); return NULL; }
    /* the handle never writes through map; the cast only fits the shared struct field */
    return open_buf((void *)buf, size, 0, err, errlen);
}

kz_gguf *kz_gguf_open(const char *path, char *err, size_t errlen) {
    char e[512] = "";
    if (err && errlen) err[0] = 0;
    if (!path) { kz_seterr(err, errlen, "no path given"); return NULL; }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { kz_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st)) { kz_seterr(err, errlen, "%s: cannot stat: %s", path, strerror(errno)); close(fd); return NULL; }
    if (!S_ISREG(st.st_mode)) { kz_seterr(err, errlen, "%s: not a regular file", path); close(fd); return NULL; }
    if (st.st_size == 0) { kz_seterr(err, errlen, "%s: empty file (0 bytes), not a GGUF file", path); close(fd); return NULL; }
    if ((uint64_t)st.st_size > SIZE_MAX) { kz_seterr(err, errlen, "%s: file too large to map on this system", path); close(fd); return NULL; }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd);
    if (map == MAP_FAILED) {
        if (merr == ENOMEM) /* the whole file is mapped: it must fit in the address space */
            kz_seterr(err, errlen, "%s: cannot map the %.2f GiB file: not enough address space (mmap: %s); "
                      "this needs a 64-bit build or a higher address-space limit (ulimit -v)",
                      path, (double)size / 1073741824.0, strerror(merr));
        else
            kz_seterr(err, errlen, "%s: mmap failed: %s", path, strerror(merr));
        return NULL;
    }
    kz_gguf *g = open_buf(map, size, 1, e, sizeof e);
    if (!g) kz_seterr(err, errlen, "%s: %s", path, e);
    return g;
}

void kz_gguf_close(kz_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) { free(g->kv[i].key); free(g->kv[i].strs); }
    if (g->tensors)
        for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kindex);
    free(g->tindex);
    if (g->owns_map && g->map) munmap(g->map, g->size);
    free(g);
}

/* ---------- lookups and getters ---------- */

int64_t kz_gguf_find_key(const kz_gguf *g, const char *key) {
    if (!g) return -1;
    return index_find(g->kindex, g->kindex_cap, key, kv_name, g);
}

const kz_gguf_kv *kz_gguf_get_kv(const kz_gguf *g, const char *key) {
    int64_t i = kz_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

const kz_tensor_info *kz_gguf_find_tensor(const kz_gguf *g, const char *name) {
    if (!g) return NULL;
    int64_t i = index_find(g->tindex, g->tindex_cap, name, t_name, g);
    return i < 0 ? NULL : &g->tensors[i];
}

/* Integer value of type t at p. neg=1: value is s (< 0); neg=0: value is u. */
typedef struct { int neg; uint64_t u; int64_t s; } ival;
static void load_int(uint32_t t, const uint8_t *p, ival *v) {
    v->neg = 0; v->u = 0; v->s = 0;
    int64_t s = 0;
    switch (t) {
    case KZ_GGUF_U8: case KZ_GGUF_BOOL: v->u = p[0]; return;
    case KZ_GGUF_U16: v->u = ld16(p); return;
    case KZ_GGUF_U32: v->u = ld32(p); return;
    case KZ_GGUF_U64: v->u = ld64(p); return;
    case KZ_GGUF_I8: { int8_t x; memcpy(&x, p, 1); s = x; break; }
    case KZ_GGUF_I16: { uint16_t b = ld16(p); int16_t x; memcpy(&x, &b, 2); s = x; break; }
    case KZ_GGUF_I32: { uint32_t b = ld32(p); int32_t x; memcpy(&x, &b, 4); s = x; break; }
    case KZ_GGUF_I64: { uint64_t b = ld64(p); memcpy(&s, &b, 8); break; }
    default: return;
    }
    if (s < 0) { v->neg = 1; v->s = s; }
    else v->u = (uint64_t)s;
}

static float ldf32(const uint8_t *p) { uint32_t b = ld32(p); float f; memcpy(&f, &b, 4); return f; }
static double ldf64(const uint8_t *p) { uint64_t b = ld64(p); double d; memcpy(&d, &b, 8); return d; }

static const kz_gguf_kv *scalar_kv(const kz_gguf *g, const char *key, int *rc) {
    const kz_gguf_kv *kv = kz_gguf_get_kv(g, key);
    *rc = kv ? 0 : -1;
    return kv;
}

int kz_gguf_get_u32(const kz_gguf *g, const char *key, uint32_t *out) {
    int rc;
    const kz_gguf_kv *kv = scalar_kv(g, key, &rc);
    if (!kv) return rc;
    if (!is_int_type(kv->type)) return -2;
    ival v;
    load_int(kv->type, kv->data, &v);
    if (v.neg || v.u > UINT32_MAX) return -2;
    if (out) *out = (uint32_t)v.u;
    return 0;
}

int kz_gguf_get_i64(const kz_gguf *g, const char *key, int64_t *out) {
    int rc;
    const kz_gguf_kv *kv = scalar_kv(g, key, &rc);
    if (!kv) return rc;
    if (!is_int_type(kv->type)) return -2;
    ival v;
    load_int(kv->type, kv->data, &v);
    if (!v.neg && v.u > INT64_MAX) return -2;
    if (out) *out = v.neg ? v.s : (int64_t)v.u;
    return 0;
}

static int f64_to_f32(double d, float *out) {
    if (isfinite(d) && fabs(d) > FLT_MAX) return -2; /* out of float range: conversion is UB */
    if (out) *out = (float)d;
    return 0;
}

int kz_gguf_get_f32(const kz_gguf *g, const char *key, float *out) {
    int rc;
    const kz_gguf_kv *kv = scalar_kv(g, key, &rc);
    if (!kv) return rc;
    if (kv->type == KZ_GGUF_F32) { if (out) *out = ldf32(kv->data); return 0; }
    if (kv->type == KZ_GGUF_F64) return f64_to_f32(ldf64(kv->data), out);
    return -2;
}

int kz_gguf_get_bool(const kz_gguf *g, const char *key, int *out) {
    int rc;
    const kz_gguf_kv *kv = scalar_kv(g, key, &rc);
    if (!kv) return rc;
    if (kv->type != KZ_GGUF_BOOL) return -2;
    if (out) *out = kv->data[0];
    return 0;
}

int kz_gguf_get_str(const kz_gguf *g, const char *key, kz_str *out) {
    int rc;
    const kz_gguf_kv *kv = scalar_kv(g, key, &rc);
    if (!kv) return rc;
    if (kv->type != KZ_GGUF_STR || !kv->strs) return -2;
    if (out) *out = kv->strs[0];
    return 0;
}

int kz_gguf_arr_i64(const kz_gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != KZ_GGUF_ARR || i >= kv->n || !is_int_type(kv->arr_type)) return -2;
    ival v;
    load_int(kv->arr_type, kv->data + i * vsize(kv->arr_type), &v);
    if (!v.neg && v.u > INT64_MAX) return -2;
    if (out) *out = v.neg ? v.s : (int64_t)v.u;
    return 0;
}

int kz_gguf_arr_f64(const kz_gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != KZ_GGUF_ARR || i >= kv->n) return -2;
    const uint8_t *p = kv->data + i * vsize(kv->arr_type);
    double d;
    if (kv->arr_type == KZ_GGUF_F32) d = ldf32(p);
    else if (kv->arr_type == KZ_GGUF_F64) d = ldf64(p);
    else if (is_int_type(kv->arr_type)) {
        ival v;
        load_int(kv->arr_type, p, &v);
        d = v.neg ? (double)v.s : (double)v.u;
    } else return -2;
    if (out) *out = d;
    return 0;
}
