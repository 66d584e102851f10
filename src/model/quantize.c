/* kz_quantize: GGUF -> GGUF quantisation with llama-quantize's per-tensor choices.
 * Facts from llama.cpp (src/llama-quant.cpp, llama-cpp-python 0.3.36): which tensors are
 * quantised (tensor_allows_quantization), the type each gets (llama_tensor_get_type /
 * llama_tensor_get_type_impl, with its attn_v / ffn_down counters), the fallback when a row is
 * not a whole number of blocks (tensor_type_fallback), the tensor order (llama_model_loader's
 * weights_map: layer number, then name), and the metadata written (general.file_type = the
 * llama_ftype, general.quantization_version = 2). The rows themselves: kz_quant_row_w.
 * Memory: one slab of rows (f32 + output) at a time; the source pages read are dropped after
 * each slab, so the resident set stays near the slab whatever the model size. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "kazeia.h"
#include "matmul/quant.h"
#include "model/gguf.h"
#include "model/imatrix.h"
#include "model/types.h"
#include "sys/err.h"
#include "sys/log.h"
#include "sys/threadpool.h"

#define SLAB_FLOATS (16u << 20) /* f32 elements converted per slab (64 MiB) */
#define CHUNK_ELEMS (32 * 512)  /* elements a thread takes at a time (llama.cpp's min chunk) */

/* llama_ftype values (llama.h) */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16,
    FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32
};

typedef struct {
    const char *name;
    int ftype;
    uint32_t type; /* the default tensor type (llama_ftype_get_default_type) */
} recipe;

static const recipe RECIPES[] = {
    {"Q4_0", FT_Q4_0, KZ_T_Q4_0},       {"Q4_1", FT_Q4_1, KZ_T_Q4_1},       {"Q5_0", FT_Q5_0, KZ_T_Q5_0},
    {"Q5_1", FT_Q5_1, KZ_T_Q5_1},       {"Q8_0", FT_Q8_0, KZ_T_Q8_0},       {"IQ4_NL", FT_IQ4_NL, KZ_T_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, KZ_T_IQ4_XS}, {"Q2_K", FT_Q2_K, KZ_T_Q2_K},       {"Q3_K", FT_Q3_K_M, KZ_T_Q3_K},
    {"Q3_K_S", FT_Q3_K_S, KZ_T_Q3_K},   {"Q3_K_M", FT_Q3_K_M, KZ_T_Q3_K},   {"Q3_K_L", FT_Q3_K_L, KZ_T_Q3_K},
    {"Q4_K", FT_Q4_K_M, KZ_T_Q4_K},     {"Q4_K_S", FT_Q4_K_S, KZ_T_Q4_K},   {"Q4_K_M", FT_Q4_K_M, KZ_T_Q4_K},
    {"Q5_K", FT_Q5_K_M, KZ_T_Q5_K},     {"Q5_K_S", FT_Q5_K_S, KZ_T_Q5_K},   {"Q5_K_M", FT_Q5_K_M, KZ_T_Q5_K},
    {"Q6_K", FT_Q6_K, KZ_T_Q6_K},       {"F16", FT_F16, KZ_T_F16},          {"BF16", FT_BF16, KZ_T_BF16},
    {"F32", FT_F32, KZ_T_F32},
};
#define N_RECIPES (sizeof RECIPES / sizeof RECIPES[0])

/* the types a tensor can be written in (the targets of kz_quant_row_w) */
static int writable(uint32_t t) {
    switch (t) {
    case KZ_T_F32: case KZ_T_F16: case KZ_T_BF16: case KZ_T_Q8_0: case KZ_T_Q4_0: case KZ_T_Q4_1: case KZ_T_Q5_0:
    case KZ_T_Q5_1: case KZ_T_IQ4_NL: case KZ_T_IQ4_XS: case KZ_T_Q2_K: case KZ_T_Q3_K: case KZ_T_Q4_K:
    case KZ_T_Q5_K: case KZ_T_Q6_K: return 1;
    default: return 0;
    }
}
static int is_quantized(uint32_t t) { return t != KZ_T_F32 && t != KZ_T_F16 && t != KZ_T_BF16; }
static const char *tname(uint32_t t) {
    const kz_type_info *ti = kz_type_get(t);
    return ti ? ti->name : "?";
}

/* ---- per-tensor type choice (llama-quant.cpp) ---- */

enum { C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_QKV, C_KV_B, C_V, C_K, C_Q, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN };

static int category(const char *n) {
    if (!strcmp(n, "output.weight")) return C_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    static const struct { const char *s; int c; } sub[] = {
        {"attn_qkv.weight", C_QKV}, {"attn_kv_b.weight", C_KV_B}, {"attn_v.weight", C_V},
        {"attn_k.weight", C_K},     {"attn_q.weight", C_Q},       {"attn_output.weight", C_ATTN_OUT},
        {"ffn_up", C_FFN_UP},       {"ffn_gate", C_FFN_GATE},     {"ffn_down", C_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
        if (strstr(n, sub[i].s)) return sub[i].c;
    return C_OTHER;
}
static int is_attn_v(int c) { return c == C_V || c == C_QKV || c == C_KV_B; }

static int n_dims_of(const kz_tensor_info *t) { /* ggml_n_dims: trailing 1s do not count */
    for (int i = 3; i >= 1; i--)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !memcmp(s + a - b, suf, b);
}

/* tensor_allows_quantization: 2-D+ weights, not norms, not the small special ones */
static int allows_quant(const kz_tensor_info *t, int leave_output) {
    const char *n = t->name;
    if (n_dims_of(t) < 2 || !ends_with(n, "weight")) return 0;
    if (strstr(n, "_norm.weight")) return 0;
    if (leave_output && !strcmp(n, "output.weight")) return 0;
    static const char *const never[] = {
        "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
        ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strstr(n, never[i])) return 0;
    if (!strcmp(n, "position_embd.weight") || !strcmp(n, "token_types.weight")) return 0;
    return 1;
}

typedef struct {
    int ftype, has_imatrix, tied, n_gqa;
    int n_attention_wv, i_attention_wv, n_layer_all, i_ffn_down, i_ffn_gate, i_ffn_up, n_fallback;
} qstate;

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* llama_tensor_get_type_impl for the ftypes offered here (no MoE, no Falcon, no 70B) */
static uint32_t mix_type(qstate *qs, uint32_t t, const kz_tensor_info *ti, int cat) {
    const int ft = qs->ftype;
    if (cat == C_OUTPUT || (qs->tied && cat == C_TOKEN_EMBD)) {
        const kz_type_info *bi = kz_type_get(t);
        if (ti->ne[0] % bi->blck) t = KZ_T_Q8_0;
        else if (t != KZ_T_Q8_0) t = KZ_T_Q6_K;
    } else if (cat == C_TOKEN_EMBD) {
        /* the embedding keeps the default type for these ftypes */
    } else if (is_attn_v(cat)) {
        if (ft == FT_Q2_K) t = qs->n_gqa >= 4 ? KZ_T_Q4_K : KZ_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = qs->i_attention_wv < 2 ? KZ_T_Q5_K : KZ_T_Q4_K;
        else if (ft == FT_Q3_K_L) t = KZ_T_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && qs->n_gqa >= 4) t = KZ_T_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(qs->i_attention_wv, qs->n_attention_wv))
            t = KZ_T_Q6_K;
        else if (ft == FT_Q4_K_S && qs->i_attention_wv < 4) t = KZ_T_Q5_K;
        ++qs->i_attention_wv;
    } else if (cat == C_FFN_DOWN) {
        const int il = qs->i_ffn_down, nl = qs->n_layer_all;
        if (ft == FT_Q2_K) t = KZ_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = il < nl / 16 ? KZ_T_Q5_K : KZ_T_Q4_K; /* non-Falcon: always more bits */
        else if (ft == FT_Q3_K_L) t = KZ_T_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (use_more_bits(il, nl)) t = KZ_T_Q6_K;
        } else if (il < nl / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !qs->has_imatrix) t = KZ_T_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(il, nl)) t = KZ_T_Q6_K;
        else if (ft == FT_Q4_K_S && il < nl / 8) t = KZ_T_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && qs->has_imatrix && il < nl / 8)
            t = ft == FT_Q4_0 ? KZ_T_Q4_1 : KZ_T_Q5_1;
        ++qs->i_ffn_down;
    } else if (cat == C_ATTN_OUT) {
        if (ft == FT_Q2_K) t = KZ_T_Q3_K;
        else if (ft == FT_Q3_K_M) t = KZ_T_Q4_K;
        else if (ft == FT_Q3_K_L) t = KZ_T_Q5_K;
    } else if (cat == C_QKV) { /* unreachable: attn_qkv is attn_v-like above (as in llama.cpp) */
    } else if (cat == C_FFN_GATE) {
        ++qs->i_ffn_gate;
    } else if (cat == C_FFN_UP) {
        ++qs->i_ffn_up;
    }
    return t;
}

/* tensor_type_fallback: rows that are not a whole number of the type's blocks */
static uint32_t fallback(qstate *qs, const kz_tensor_info *ti, uint32_t t) {
    const kz_type_info *bi = kz_type_get(t);
    if (ti->ne[0] % bi->blck == 0) return t;
    uint32_t r = t;
    switch (t) {
    case KZ_T_IQ4_XS: r = KZ_T_IQ4_NL; break;
    case KZ_T_Q2_K: case KZ_T_Q3_K: r = KZ_T_Q4_0; break;
    case KZ_T_Q4_K: r = KZ_T_Q5_0; break;
    case KZ_T_Q5_K: r = KZ_T_Q5_1; break;
    case KZ_T_Q6_K: r = KZ_T_Q8_0; break;
    default: break;
    }
    if (ti->ne[0] % kz_type_get(r)->blck) r = KZ_T_F16;
    qs->n_fallback++;
    kz_logf(KZ_LOG_WARN, "%s: row length %lld is not a multiple of %u (required for %s): written as %s", ti->name,
            (long long)ti->ne[0], bi->blck, bi->name, tname(r));
    return r;
}

typedef struct {
    regex_t re;
    uint32_t type;
} override;

static uint32_t choose(qstate *qs, const kz_tensor_info *ti, int cat, uint32_t def, const override *ov, int n_ov,
                       const kz_quantize_params *p) {
    if (!allows_quant(ti, p->leave_output)) return ti->type;
    uint32_t t = def;
    if (is_quantized(def)) {
        int manual = 0;
        for (int i = 0; i < n_ov; i++)
            if (regexec(&ov[i].re, ti->name, 0, NULL, 0) == 0) {
                t = ov[i].type;
                manual = 1;
                break;
            }
        if (!manual && !p->pure) t = mix_type(qs, t, ti, cat);
        t = fallback(qs, ti, t);
    }
    return t;
}

/* ---- tensor order: llama_model_loader's weights_map (layer number, then name) ---- */

static int layer_of(const char *n) {
    int l = -1;
    if (sscanf(n, "blk.%d.", &l) != 1) l = -1;
    return l;
}
static int cmp_tensor(const void *a, const void *b) {
    const kz_tensor_info *x = *(const kz_tensor_info *const *)a, *y = *(const kz_tensor_info *const *)b;
    const int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* ---- the row work of one slab, shared by the pool ---- */

typedef struct {
    uint32_t src_type, dst_type;
    const uint8_t *src;
    size_t src_rb, dst_rb;
    float *f32;
    uint8_t *out;
    int64_t npr, nrows, rows_per_chunk;
    const float *imp;
    const int *cancel;
    kz_dyn next;
    atomic_int failed;
} slab_task;

static void slab_fn(void *arg, int ith, int nth) {
    (void)ith;
    (void)nth;
    slab_task *t = arg;
    for (;;) {
        const long r0 = kz_dyn_take(&t->next, t->rows_per_chunk);
        if (r0 >= t->nrows || atomic_load(&t->failed)) break;
        if (t->cancel && __atomic_load_n(t->cancel, __ATOMIC_RELAXED)) {
            atomic_store(&t->failed, 2);
            break;
        }
        const int64_t k = r0 + t->rows_per_chunk <= t->nrows ? t->rows_per_chunk : t->nrows - r0;
        float *f = t->f32 + (size_t)r0 * (size_t)t->npr;
        if (t->src_type == KZ_T_F32) f = (float *)(t->src + (size_t)r0 * t->src_rb);
        else if (kz_dequant_row(t->src_type, t->src + (size_t)r0 * t->src_rb, f, k * t->npr)) {
            atomic_store(&t->failed, 1);
            break;
        }
        if (kz_quant_row_w(t->dst_type, f, t->out + (size_t)r0 * t->dst_rb, t->npr, k, t->imp) != t->dst_rb * (size_t)k) {
            atomic_store(&t->failed, 1);
            break;
        }
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* drop the pages of [p, p + n) of the input mapping: read once, not needed again */
static void drop_pages(const void *p, size_t n) {
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || n == 0) return;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1), e = ((uintptr_t)p + n) & ~(uintptr_t)(pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

kz_quantize_params kz_quantize_default_params(void) {
    kz_quantize_params p;
    memset(&p, 0, sizeof p);
    p.type = "Q4_K_M";
    return p;
}

static const recipe *find_recipe(const char *name) {
    for (size_t i = 0; i < N_RECIPES; i++)
        if (!strcasecmp(RECIPES[i].name, name)) return &RECIPES[i];
    return NULL;
}

/* n_head / n_head_kv of layer 0 (llama_hparams::n_gqa(0)); either key may be per-layer arrays */
static int gqa_of(const kz_gguf *g, const char *arch) {
    char k1[128], k2[128];
    snprintf(k1, sizeof k1, "%s.attention.head_count", arch);
    snprintf(k2, sizeof k2, "%s.attention.head_count_kv", arch);
    int64_t h = 0, hk = 0;
    const kz_gguf_kv *a = kz_gguf_get_kv(g, k1), *b = kz_gguf_get_kv(g, k2);
    if (!a) return 0;
    if (a->type == KZ_GGUF_ARR ? kz_gguf_arr_i64(a, 0, &h) : kz_gguf_get_i64(g, k1, &h)) return 0;
    if (!b) hk = h;
    else if (b->type == KZ_GGUF_ARR ? kz_gguf_arr_i64(b, 0, &hk) : kz_gguf_get_i64(g, k2, &hk)) return 0;
    return hk > 0 ? (int)(h / hk) : 0;
}

/* a fresh file beside out (O_EXCL), its path in tmp; 0 or -1 with errno */
static int make_temp(const char *out, char *tmp, size_t n) {
    const char *slash = strrchr(out, '/');
    const int dlen = slash ? (int)(slash - out + 1) : 0;
    for (int i = 0; i < 100; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        if ((size_t)snprintf(tmp, n, "%.*s.%s.%ld-%ld.tmp", dlen, out, slash ? slash + 1 : out, (long)getpid(),
                             (long)(ts.tv_nsec + i) % 1000000) >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        if (errno != EEXIST) return -1;
    }
    return -1;
}

kz_status kz_quantize(const char *in, const char *out, const kz_quantize_params *p, char *err, size_t errlen) {
    kz_status st = KZ_OK;
    kz_gguf *g = NULL;
    kz_imatrix *im = NULL;
    kz_gguf_writer *w = NULL;
    kz_pool *pool = NULL;
    override *ov = NULL;
    int n_ov = 0;
    const kz_tensor_info **tl = NULL;
    uint32_t *dst = NULL;
    float *f32 = NULL, *imp = NULL;
    uint8_t *obuf = NULL;
    size_t f32_cap = 0, obuf_cap = 0;
    char tmp[PATH_MAX + 64];
    tmp[0] = 0;
    const double t0 = now_s();
#define FAIL(code, ...) do { st = (code); kz_seterr(err, errlen, __VA_ARGS__); goto done; } while (0)

    if (!in || !out || !p || !p->type) FAIL(KZ_ERR_INVALID_ARG, "kz_quantize: NULL input, output, params or type");
    const recipe *rc = find_recipe(p->type);
    if (!rc) {
        char list[512] = "";
        for (size_t i = 0; i < N_RECIPES; i++) {
            strncat(list, " ", sizeof list - strlen(list) - 1);
            strncat(list, RECIPES[i].name, sizeof list - strlen(list) - 1);
        }
        FAIL(KZ_ERR_INVALID_ARG, "unknown quantisation type '%s' (known:%s)", p->type, list);
    }
    /* the same file in and out would be truncated while it is read */
    struct stat si, so;
    if (stat(in, &si)) FAIL(KZ_ERR_IO, "cannot open '%s': %s", in, strerror(errno));
    if (!stat(out, &so)) {
        if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
            FAIL(KZ_ERR_INVALID_ARG, "input and output are the same file ('%s'): write the output elsewhere", out);
        if (S_ISDIR(so.st_mode)) FAIL(KZ_ERR_INVALID_ARG, "output '%s' is a directory", out);
    }
    for (const char *const *s = p->tensor_types; s && *s; s++) n_ov++;
    if (n_ov && !(ov = calloc((size_t)n_ov, sizeof *ov))) {
        n_ov = 0;
        FAIL(KZ_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_ov; i++) {
        const char *s = p->tensor_types[i], *eq = strrchr(s, '=');
        if (!eq || eq == s) {
            n_ov = i;
            FAIL(KZ_ERR_INVALID_ARG, "--tensor-type '%s': expected REGEX=TYPE", s);
        }
        const int ty = kz_type_from_name(eq + 1);
        if (ty < 0 || !writable((uint32_t)ty)) {
            n_ov = i;
            FAIL(KZ_ERR_INVALID_ARG, "--tensor-type '%s': type '%s' cannot be written (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL "
                 "IQ4_XS Q2_K Q3_K Q4_K Q5_K Q6_K F16 BF16 F32)", s, eq + 1);
        }
        char *re = strndup(s, (size_t)(eq - s));
        const int rr = re ? regcomp(&ov[i].re, re, REG_EXTENDED | REG_NOSUB) : REG_ESPACE;
        free(re);
        if (rr) {
            n_ov = i;
            FAIL(KZ_ERR_INVALID_ARG, "--tensor-type '%s': invalid regular expression", s);
        }
        ov[i].type = (uint32_t)ty;
    }

    char e2[512];
    if (!(g = kz_gguf_open(in, e2, sizeof e2))) FAIL(KZ_ERR_FORMAT, "%s", e2);
    kz_str arch;
    char archs[64] = "";
    if (!kz_gguf_get_str(g, "general.architecture", &arch) && arch.len < sizeof archs) {
        memcpy(archs, arch.ptr, arch.len);
        archs[arch.len] = 0;
    }
    if (p->imatrix) {
        if (!(im = kz_imatrix_read(p->imatrix, e2, sizeof e2))) FAIL(KZ_ERR_FORMAT, "%s", e2);
    }

    /* tensors in llama.cpp's order, their types */
    const int64_t nt = (int64_t)g->n_tensors;
    tl = calloc((size_t)nt + 1, sizeof *tl);
    dst = calloc((size_t)nt + 1, sizeof *dst);
    if (!tl || !dst) FAIL(KZ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < nt; i++) tl[i] = &g->tensors[i];
    qsort(tl, (size_t)nt, sizeof *tl, cmp_tensor);
    qstate qs;
    memset(&qs, 0, sizeof qs);
    qs.ftype = rc->ftype;
    qs.has_imatrix = im != NULL;
    qs.tied = 1;
    qs.n_gqa = gqa_of(g, archs);
    {
        char k[96];
        uint32_t nl = 0;
        snprintf(k, sizeof k, "%s.block_count", archs);
        if (!kz_gguf_get_u32(g, k, &nl)) qs.n_layer_all = (int)nl;
    }
    for (int64_t i = 0; i < nt; i++) {
        const int c = category(tl[i]->name);
        if (is_attn_v(c)) qs.n_attention_wv++;
        if (c == C_OUTPUT) qs.tied = 0;
    }
    uint64_t total_in = 0;
    int requant = 0;
    for (int64_t i = 0; i < nt; i++) {
        const kz_tensor_info *ti = tl[i];
        dst[i] = choose(&qs, ti, category(ti->name), rc->type, ov, n_ov, p);
        total_in += ti->nbytes;
        if (dst[i] == ti->type) continue;
        if (!kz_type_compute_ok(ti->type) || !kz_type_get(ti->type))
            FAIL(KZ_ERR_UNSUPPORTED, "%s: source type %s cannot be converted (sources: F32, F16, BF16, Q8_0 and the "
                 "types kazeia runs)", ti->name, tname(ti->type));
        if (is_quantized(ti->type) && !requant) {
            requant = 1;
            kz_logf(KZ_LOG_WARN, "requantising: '%s' holds %s tensors (%s first); the result is worse than "
                    "quantising the F16/BF16/F32 original", in, tname(ti->type), ti->name);
        }
    }
    if (qs.n_fallback)
        kz_logf(KZ_LOG_WARN, "%d of %lld tensors needed a fallback type", qs.n_fallback, (long long)nt);

    /* output header: every kv but the ones rewritten, then the tensor infos */
    if (!(w = kz_gguf_writer_new(0))) FAIL(KZ_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (!strcmp(k, "general.file_type") || !strcmp(k, "general.quantization_version") || !strcmp(k, "split.no") ||
            !strcmp(k, "split.count") || !strcmp(k, "split.tensors.count"))
            continue;
        kz_gguf_w_copy_kv(w, g, &g->kv[i]);
    }
    kz_gguf_w_u32(w, "general.quantization_version", 2);
    kz_gguf_w_u32(w, "general.file_type", (uint32_t)rc->ftype);
    for (int64_t i = 0; i < nt; i++) kz_gguf_w_tensor_info(w, tl[i]->name, tl[i]->n_dims, tl[i]->ne, dst[i]);
    if (make_temp(out, tmp, sizeof tmp)) {
        const int e = errno;
        tmp[0] = 0;
        FAIL(KZ_ERR_IO, "cannot create a file beside '%s': %s", out, strerror(e));
    }
    if (kz_gguf_writer_begin(w, tmp)) FAIL(KZ_ERR_IO, "%s", kz_gguf_writer_error(w));

    if (!(pool = kz_pool_new(p->n_threads))) FAIL(KZ_ERR_NOMEM, "cannot start the worker threads");
    kz_quantize_progress pr;
    memset(&pr, 0, sizeof pr);
    pr.n_tensors = (int)nt;
    pr.bytes_total = total_in;
    for (int64_t i = 0; i < nt; i++) {
        const kz_tensor_info *ti = tl[i];
        pr.i_tensor = (int)i + 1;
        pr.name = ti->name;
        pr.type_in = tname(ti->type);
        pr.type_out = tname(dst[i]);
        pr.seconds = now_s() - t0;
        if (p->progress) p->progress(&pr, p->userdata);
        if (p->cancel && __atomic_load_n(p->cancel, __ATOMIC_RELAXED)) FAIL(KZ_ERR_CANCELLED, "cancelled");
        const uint8_t *src = ti->data;
        if (dst[i] == ti->type) { /* copy in slabs */
            for (uint64_t off = 0; off < ti->nbytes;) {
                const size_t n = ti->nbytes - off < (64u << 20) ? (size_t)(ti->nbytes - off) : (64u << 20);
                if (kz_gguf_writer_write_part(w, src + off, n)) FAIL(KZ_ERR_IO, "%s", kz_gguf_writer_error(w));
                drop_pages(src + off, n);
                off += n;
                pr.bytes_done += n;
                pr.bytes_out += n;
            }
        } else {
            const int64_t npr = ti->ne[0], nrows = ti->ne[1] * ti->ne[2] * ti->ne[3];
            const size_t src_rb = kz_row_bytes(ti->type, npr), dst_rb = kz_row_bytes(dst[i], npr);
            if (!src_rb || !dst_rb) FAIL(KZ_ERR_FORMAT, "%s: row length %lld does not fit its type", ti->name, (long long)npr);
            const float *qw = NULL;
            if (im && is_quantized(dst[i])) {
                float *nimp = realloc(imp, sizeof(float) * (size_t)npr);
                if (!nimp) FAIL(KZ_ERR_NOMEM, "out of memory");
                imp = nimp;
                if (ti->ne[2] * ti->ne[3] == 1 && kz_imatrix_weights(im, ti->name, npr, imp) == 0) {
                    for (int64_t j = 0; j < npr; j++)
                        if (!isfinite(imp[j])) FAIL(KZ_ERR_FORMAT, "imatrix '%s': entry %s holds a non-finite value", p->imatrix, ti->name);
                    qw = imp;
                } else {
                    /* an entry of another width is llama-quantize's error too (token_embd excepted) */
                    int64_t w_npr = 0;
                    if (ti->ne[2] * ti->ne[3] == 1 && !kz_imatrix_entry(im, ti->name, &w_npr, NULL, NULL, NULL) &&
                        category(ti->name) != C_TOKEN_EMBD)
                        FAIL(KZ_ERR_FORMAT, "imatrix '%s': entry %s has %lld columns, the tensor %lld: not made for "
                             "this model", p->imatrix, ti->name, (long long)w_npr, (long long)npr);
                    kz_logf(KZ_LOG_WARN, "%s: no importance in '%s' for it: quantised without", ti->name, p->imatrix);
                }
            }
            int64_t slab = (int64_t)(SLAB_FLOATS / (uint64_t)npr);
            if (slab < 1) slab = 1;
            if (slab > nrows) slab = nrows;
            const size_t need_f = ti->type == KZ_T_F32 ? 0 : (size_t)slab * (size_t)npr, need_o = (size_t)slab * dst_rb;
            if (need_f > f32_cap) {
                free(f32);
                if (!(f32 = malloc(sizeof(float) * need_f))) FAIL(KZ_ERR_NOMEM, "out of memory (%zu MB)", need_f >> 18);
                f32_cap = need_f;
            }
            if (need_o > obuf_cap) {
                free(obuf);
                if (!(obuf = malloc(need_o))) FAIL(KZ_ERR_NOMEM, "out of memory (%zu MB)", need_o >> 20);
                obuf_cap = need_o;
            }
            int64_t rpc = (CHUNK_ELEMS + npr - 1) / npr;
            for (int64_t r0 = 0; r0 < nrows; r0 += slab) {
                const int64_t k = r0 + slab <= nrows ? slab : nrows - r0;
                slab_task t = {.src_type = ti->type, .dst_type = dst[i], .src = src + (size_t)r0 * src_rb,
                               .src_rb = src_rb, .dst_rb = dst_rb, .f32 = f32, .out = obuf, .npr = npr, .nrows = k,
                               .rows_per_chunk = rpc, .imp = qw, .cancel = p->cancel};
                atomic_init(&t.next.next, 0);
                atomic_init(&t.failed, 0);
                kz_pool_run(pool, slab_fn, &t);
                const int fl = atomic_load(&t.failed);
                if (fl == 2) FAIL(KZ_ERR_CANCELLED, "cancelled");
                if (fl) FAIL(KZ_ERR_INTERNAL, "%s: converting %s to %s failed", ti->name, tname(ti->type), tname(dst[i]));
                if (kz_gguf_writer_write_part(w, obuf, dst_rb * (size_t)k)) FAIL(KZ_ERR_IO, "%s", kz_gguf_writer_error(w));
                drop_pages(t.src, src_rb * (size_t)k);
                pr.bytes_done += src_rb * (size_t)k;
                pr.bytes_out += dst_rb * (size_t)k;
                pr.seconds = now_s() - t0;
                if (p->progress && r0 + k < nrows) p->progress(&pr, p->userdata);
            }
        }
        if (kz_gguf_writer_end_tensor(w)) FAIL(KZ_ERR_IO, "%s", kz_gguf_writer_error(w));
    }
    if (kz_gguf_writer_finish(w)) FAIL(KZ_ERR_IO, "%s", kz_gguf_writer_error(w));
    { /* on disk before it takes OUT's name */
        const int fd = open(tmp, O_RDONLY);
        if (fd < 0 || fsync(fd)) {
            const int e = errno;
            if (fd >= 0) close(fd);
            FAIL(KZ_ERR_IO, "writing '%s' failed: %s", tmp, strerror(e));
        }
        close(fd);
    }
    if (rename(tmp, out)) FAIL(KZ_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
    tmp[0] = 0;
    pr.finished = 1;
    pr.seconds = now_s() - t0;
    if (p->progress) p->progress(&pr, p->userdata);
done:
#undef FAIL
    kz_gguf_writer_free(w);
    if (tmp[0]) unlink(tmp);
    kz_pool_free(pool);
    for (int i = 0; i < n_ov; i++) regfree(&ov[i].re);
    free(ov);
    free(tl);
    free(dst);
    free(f32);
    free(obuf);
    free(imp);
    kz_imatrix_free(im);
    kz_gguf_close(g);
    return st;
}
