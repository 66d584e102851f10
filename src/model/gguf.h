/* GGUF v2/v3 reader (mmap, zero-copy, fully validated) and streaming writer. */
#ifndef KZ_GGUF_H
#define KZ_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* metadata value types */
enum {
    KZ_GGUF_U8 = 0, KZ_GGUF_I8 = 1, KZ_GGUF_U16 = 2, KZ_GGUF_I16 = 3, KZ_GGUF_U32 = 4,
    KZ_GGUF_I32 = 5, KZ_GGUF_F32 = 6, KZ_GGUF_BOOL = 7, KZ_GGUF_STR = 8, KZ_GGUF_ARR = 9,
    KZ_GGUF_U64 = 10, KZ_GGUF_I64 = 11, KZ_GGUF_F64 = 12, KZ_GGUF_NTYPES = 13
};

typedef struct {
    const char *ptr; /* points into the mapping, NOT NUL-terminated */
    uint64_t len;
} kz_str;

typedef struct {
    char *key;          /* owned, NUL-terminated copy */
    uint32_t type;      /* KZ_GGUF_* */
    uint32_t arr_type;  /* element type when type == KZ_GGUF_ARR */
    uint64_t n;         /* element count for arrays (1 otherwise) */
    const uint8_t *data;/* start of the value (after type / array header) inside the mapping;
                         * for STR this is the u64 length field, size = 8 + len */
    uint64_t size;      /* bytes of the value payload */
    kz_str *strs;       /* for STR and arrays of STR: n validated strings (owned array);
                         * NULL otherwise (also for nested arrays, which getters do not expose) */
} kz_gguf_kv;

typedef struct {
    char *name;          /* owned, NUL-terminated */
    uint32_t n_dims;     /* 1..4 */
    int64_t ne[4];       /* ne[d] = 1 for d >= n_dims; ne[0] contiguous */
    uint32_t type;       /* kz_type */
    uint64_t offset;     /* relative to data section */
    uint64_t nbytes;     /* exact byte size */
    const void *data;    /* pointer into the mapping */
} kz_tensor_info;

typedef struct kz_gguf {
    void *map;           /* whole file (mmap or caller memory) */
    size_t size;
    int owns_map;        /* 1 if we mmapped it */
    uint32_t version;
    uint64_t n_kv;
    kz_gguf_kv *kv;
    uint64_t n_tensors;
    kz_tensor_info *tensors;
    uint64_t alignment;
    uint64_t data_offset;
    /* hash index over tensor names (internal) */
    uint32_t *tindex;
    uint64_t tindex_cap;
    /* hash index over kv keys (internal) */
    uint32_t *kindex;
    uint64_t kindex_cap;
} kz_gguf;

/* Limits the reader enforces (beyond what the file size allows). */
#define KZ_GGUF_MAX_NAME 255          /* tensor name bytes */
#define KZ_GGUF_MAX_COUNT (1u << 20)  /* n_kv and n_tensors each (real models: < 10k) */
#define KZ_GGUF_MAX_DEPTH 8           /* nesting of array-of-array values */

/* Open + validate. On failure returns NULL and writes a one-line message into err. */
kz_gguf *kz_gguf_open(const char *path, char *err, size_t errlen);
/* Same on a caller-owned buffer (used by the fuzzer); buffer must outlive the handle. */
kz_gguf *kz_gguf_open_mem(const void *buf, size_t size, char *err, size_t errlen);
void kz_gguf_close(kz_gguf *g);

/* index of key or -1 */
int64_t kz_gguf_find_key(const kz_gguf *g, const char *key);
const kz_gguf_kv *kz_gguf_get_kv(const kz_gguf *g, const char *key);
/* Typed getters: return 0 on success, -1 if missing, -2 if wrong type / out of range.
 * Integer getters accept any integer (or bool) encoding whose value fits. */
int kz_gguf_get_u32(const kz_gguf *g, const char *key, uint32_t *out);
int kz_gguf_get_i64(const kz_gguf *g, const char *key, int64_t *out);
int kz_gguf_get_f32(const kz_gguf *g, const char *key, float *out); /* accepts F32/F64 */
int kz_gguf_get_bool(const kz_gguf *g, const char *key, int *out);
int kz_gguf_get_str(const kz_gguf *g, const char *key, kz_str *out);
/* element i of an array (bounds-checked); 0 ok, -2 bad. arr_i64: integer/bool arrays (u64
 * elements > INT64_MAX are -2); arr_f64: float arrays, and integer arrays converted. */
int kz_gguf_arr_i64(const kz_gguf_kv *kv, uint64_t i, int64_t *out);
int kz_gguf_arr_f64(const kz_gguf_kv *kv, uint64_t i, double *out);
const char *kz_gguf_type_name(uint32_t vtype);

const kz_tensor_info *kz_gguf_find_tensor(const kz_gguf *g, const char *name);

/* ---- writer (streaming: header first, then tensor data one by one) ----
 * Usage: w = kz_gguf_writer_new(); add kvs; add tensor infos (shape+type only);
 * kz_gguf_writer_begin(w, path) writes header+infos+padding; then for each tensor in the
 * order added, kz_gguf_writer_write_tensor(w, data, nbytes) (or several _write_part calls
 * summing to the tensor's nbytes, then _end_tensor); finally kz_gguf_writer_finish(w). */
typedef struct kz_gguf_writer kz_gguf_writer;
kz_gguf_writer *kz_gguf_writer_new(uint32_t alignment /* 0 = 32 */);
void kz_gguf_writer_free(kz_gguf_writer *w);
int kz_gguf_w_u32(kz_gguf_writer *w, const char *key, uint32_t v);
int kz_gguf_w_i32(kz_gguf_writer *w, const char *key, int32_t v);
int kz_gguf_w_u64(kz_gguf_writer *w, const char *key, uint64_t v);
int kz_gguf_w_f32(kz_gguf_writer *w, const char *key, float v);
int kz_gguf_w_bool(kz_gguf_writer *w, const char *key, int v);
int kz_gguf_w_str(kz_gguf_writer *w, const char *key, const char *s);
/* any scalar type (KZ_GGUF_U8..I64/F64/BOOL, not STR/ARR); *value holds one LE value */
int kz_gguf_w_scalar(kz_gguf_writer *w, const char *key, uint32_t vtype, const void *value);
/* array of scalars: elem_type is KZ_GGUF_*, data holds n packed little-endian values */
int kz_gguf_w_arr(kz_gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
int kz_gguf_w_arr_str(kz_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens, uint64_t n);
/* copy a kv from an opened file (for quantize / rewrite tools) */
int kz_gguf_w_copy_kv(kz_gguf_writer *w, const kz_gguf *src, const kz_gguf_kv *kv);
int kz_gguf_w_tensor_info(kz_gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type);
int kz_gguf_writer_begin(kz_gguf_writer *w, const char *path);
int kz_gguf_writer_write_part(kz_gguf_writer *w, const void *data, size_t n);
int kz_gguf_writer_end_tensor(kz_gguf_writer *w);   /* checks byte count, pads */
int kz_gguf_writer_write_tensor(kz_gguf_writer *w, const void *data, size_t nbytes);
int kz_gguf_writer_finish(kz_gguf_writer *w);       /* flush + close; 0 ok */
/* Errors are sticky: after the first failure every call returns -1 and the message stays.
 * A file whose writing failed (or that is freed before finish) is removed.
 * Alignment: writer_new(0) = 32 unless a general.alignment kv (u32 power of two) sets it;
 * writer_new(N) with a general.alignment kv != N is an error. A non-default alignment without
 * a general.alignment kv gets one added by begin(). */
const char *kz_gguf_writer_error(const kz_gguf_writer *w);

#endif
