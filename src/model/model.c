/* Model loading: hparams from GGUF metadata, every tensor validated (presence, exact shape,
 * usable type), small 1-D tensors made available as f32. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "sys/fp16.h"
#include "matmul/matmul.h"
#include "model/model.h"
#include "sys/threadpool.h"
#include "model/types.h"
#include "text/unicode.h"

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

kz_model_params kz_model_default_params(void) {
    kz_model_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.repack_weights = 1; /* a no-op where no packed kernel exists */
    return p;
}

/* ---------------- hparams ---------------- */

typedef struct {
    const kz_gguf *g;
    const char *arch;
    char *err;
    size_t errlen;
} ld_ctx;

static void arch_key(const ld_ctx *c, const char *suffix, char *key, size_t n) {
    snprintf(key, n, "%s.%s", c->arch, suffix);
}

/* required (def < 0) or optional (default def) integer key in [lo, hi] */
static int get_int(ld_ctx *c, const char *suffix, int *out, long def, long lo, long hi) {
    char key[128];
    arch_key(c, suffix, key, sizeof key);
    int64_t v;
    int r = kz_gguf_get_i64(c->g, key, &v);
    if (r == -1) {
        if (def >= 0) { *out = (int)def; return 0; }
        seterr(c->err, c->errlen, "missing metadata key '%s'", key);
        return -1;
    }
    if (r != 0) {
        seterr(c->err, c->errlen, "metadata key '%s' has the wrong type (expected an integer)", key);
        return -1;
    }
    if (v < lo || v > hi) {
        seterr(c->err, c->errlen, "metadata key '%s' = %lld is out of range [%ld, %ld]", key,
               (long long)v, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int get_float(ld_ctx *c, const char *suffix, float *out, int required, float def, float lo,
                     float hi) {
    char key[128];
    arch_key(c, suffix, key, sizeof key);
    float v;
    int r = kz_gguf_get_f32(c->g, key, &v);
    if (r == -1) {
        if (!required) { *out = def; return 0; }
        seterr(c->err, c->errlen, "missing metadata key '%s'", key);
        return -1;
    }
    if (r != 0) {
        seterr(c->err, c->errlen, "metadata key '%s' has the wrong type (expected a float)", key);
        return -1;
    }
    if (!(v >= lo && v <= hi)) { /* also rejects NaN */
        seterr(c->err, c->errlen, "metadata key '%s' = %g is out of range [%g, %g]", key, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* per-layer recurrent flags from '<arch>.attention.recurrent_layers' (bool/int scalar or array);
 * returns 1 if the key was present and filled rec[], 0 if absent, -1 on error */
static int get_recurrent_layers(ld_ctx *c, int n_layer, unsigned char *rec) {
    char key[128];
    arch_key(c, "attention.recurrent_layers", key, sizeof key);
    const kz_gguf_kv *kv = kz_gguf_get_kv(c->g, key);
    if (!kv) return 0;
    if (kv->type == KZ_GGUF_ARR) {
        if (kv->n < (uint64_t)n_layer) {
            seterr(c->err, c->errlen, "metadata key '%s' has %llu entries, need at least %d (one per layer)",
                   key, (unsigned long long)kv->n, n_layer);
            return -1;
        }
        for (int i = 0; i < n_layer; i++) {
            int64_t v;
            if (kv->arr_type == KZ_GGUF_BOOL) {
                if (kv->size < (uint64_t)n_layer) goto bad;
                v = kv->data[i] != 0;
            } else if (kz_gguf_arr_i64(kv, (uint64_t)i, &v) != 0) {
                goto bad;
            }
            rec[i] = v != 0;
        }
        return 1;
    }
    int b;
    if (kz_gguf_get_bool(c->g, key, &b) == 0) {
        for (int i = 0; i < n_layer; i++) rec[i] = b != 0;
        return 1;
    }
bad:
    seterr(c->err, c->errlen, "metadata key '%s' must be a bool or an array of bools/integers", key);
    return -1;
}

static int read_hparams(ld_ctx *c, kz_hparams *hp, unsigned char **rec_out) {
    const int BIG = 1 << 20;
    int nextn = 0;
    memset(hp, 0, sizeof *hp);
    if (get_int(c, "block_count", &hp->n_layer_all, -1, 1, 4096)) return -1;
    if (get_int(c, "nextn_predict_layers", &nextn, 0, 0, 4096)) return -1;
    if (nextn >= hp->n_layer_all) {
        seterr(c->err, c->errlen, "%s.nextn_predict_layers = %d leaves no main layers (block_count %d)",
               c->arch, nextn, hp->n_layer_all);
        return -1;
    }
    hp->n_layer = hp->n_layer_all - nextn;
    if (get_int(c, "context_length", &hp->n_ctx_train, -1, 1, INT32_MAX)) return -1;
    if (get_int(c, "embedding_length", &hp->n_embd, -1, 1, BIG)) return -1;
    if (get_int(c, "feed_forward_length", &hp->n_ff, -1, 1, BIG)) return -1;
    if (get_int(c, "attention.head_count", &hp->n_head, -1, 1, 4096)) return -1;
    if (get_int(c, "attention.head_count_kv", &hp->n_head_kv, hp->n_head, 1, 4096)) return -1;
    if (hp->n_head % hp->n_head_kv) {
        seterr(c->err, c->errlen, "%s.attention.head_count %d is not a multiple of head_count_kv %d",
               c->arch, hp->n_head, hp->n_head_kv);
        return -1;
    }
    /* llama.cpp default: n_embd / n_head */
    long def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1;
    if (get_int(c, "attention.key_length", &hp->head_dim, def_hd, 2, 1 << 16)) return -1;
    int vlen;
    if (get_int(c, "attention.value_length", &vlen, hp->head_dim, 1, 1 << 16)) return -1;
    if (vlen != hp->head_dim) {
        seterr(c->err, c->errlen, "%s.attention.value_length %d != key_length %d (unsupported)",
               c->arch, vlen, hp->head_dim);
        return -1;
    }
    if (get_int(c, "rope.dimension_count", &hp->n_rot, hp->head_dim, 0, hp->head_dim)) return -1;
    if (hp->n_rot % 2) {
        seterr(c->err, c->errlen, "%s.rope.dimension_count %d must be even", c->arch, hp->n_rot);
        return -1;
    }
    if (get_float(c, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1, 0, 0.0f, 1.0f)) return -1;
    if (get_float(c, "rope.freq_base", &hp->rope_base, 0, 10000.0f, 1.0f, 1e30f)) return -1;

    unsigned char *rec = calloc((size_t)hp->n_layer, 1);
    if (!rec) { seterr(c->err, c->errlen, "out of memory"); return -1; }
    *rec_out = rec;
    if (!strcmp(c->arch, "qwen35")) {
        hp->arch = KZ_ARCH_QWEN35;
        if (get_int(c, "ssm.conv_kernel", &hp->ssm_d_conv, -1, 1, 64)) return -1;
        if (get_int(c, "ssm.state_size", &hp->ssm_d_state, -1, 1, 1 << 14)) return -1;
        if (get_int(c, "ssm.group_count", &hp->ssm_n_k_heads, -1, 1, 4096)) return -1;
        if (get_int(c, "ssm.time_step_rank", &hp->ssm_n_v_heads, -1, 1, 4096)) return -1;
        if (get_int(c, "ssm.inner_size", &hp->ssm_d_inner, -1, 1, BIG)) return -1;
        if (hp->ssm_d_inner % hp->ssm_n_v_heads) {
            seterr(c->err, c->errlen, "%s.ssm.inner_size %d is not a multiple of ssm.time_step_rank %d",
                   c->arch, hp->ssm_d_inner, hp->ssm_n_v_heads);
            return -1;
        }
        if (hp->ssm_n_v_heads % hp->ssm_n_k_heads) {
            seterr(c->err, c->errlen, "%s.ssm.time_step_rank %d is not a multiple of ssm.group_count %d",
                   c->arch, hp->ssm_n_v_heads, hp->ssm_n_k_heads);
            return -1;
        }
        hp->ssm_head_v_dim = hp->ssm_d_inner / hp->ssm_n_v_heads;
        if ((long)hp->ssm_n_k_heads * hp->ssm_d_state > BIG) {
            seterr(c->err, c->errlen, "%s.ssm key dim %d x %d is too large", c->arch,
                   hp->ssm_n_k_heads, hp->ssm_d_state);
            return -1;
        }
        hp->ssm_key_dim = hp->ssm_n_k_heads * hp->ssm_d_state;
        hp->ssm_conv_dim = 2 * hp->ssm_key_dim + hp->ssm_d_inner;
        /* IMROPE sections (text positions make it plain NEOX except an unused 4th section) */
        char key[128];
        arch_key(c, "rope.dimension_sections", key, sizeof key);
        const kz_gguf_kv *kv = kz_gguf_get_kv(c->g, key);
        if (kv) {
            if (kv->type != KZ_GGUF_ARR || kv->n < 1) {
                seterr(c->err, c->errlen, "metadata key '%s' must be an integer array", key);
                return -1;
            }
            for (uint64_t i = 0; i < 4 && i < kv->n; i++) {
                int64_t v;
                if (kz_gguf_arr_i64(kv, i, &v) != 0 || v < 0 || v > 1 << 16) {
                    seterr(c->err, c->errlen, "metadata key '%s' has a bad entry %llu", key,
                           (unsigned long long)i);
                    return -1;
                }
                hp->rope_sections[i] = (int)v;
            }
        }
        int r = get_recurrent_layers(c, hp->n_layer, rec);
        if (r < 0) return -1;
        if (r == 0) {
            if (get_int(c, "full_attention_interval", &hp->full_attn_interval, 4, 1, 1 << 20)) return -1;
            for (int i = 0; i < hp->n_layer; i++) rec[i] = (i + 1) % hp->full_attn_interval != 0;
        }
    } else {
        hp->arch = KZ_ARCH_QWEN3;
    }
    for (int i = 0; i < hp->n_layer; i++) {
        if (rec[i]) hp->n_gdn_layers++;
        else hp->n_attn_layers++;
    }
    return 0;
}

/* ---------------- tensors ---------------- */

typedef struct {
    const kz_tensor_info *ti;
    const float **dst;
} pending_vec;

typedef struct {
    ld_ctx *c;
    pending_vec *pend;
    int n_pend, cap_pend;
} tload;

static void fmt_shape(char *buf, size_t n, int nd, const int64_t *ne) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static const char *type_name(uint32_t t) {
    const kz_type_info *ti = kz_type_get(t);
    return ti && ti->name ? ti->name : NULL;
}

/* find and check exact shape (ne beyond the given dims must be 1) */
static const kz_tensor_info *get_tensor(tload *L, const char *name, int nd, int64_t ne0, int64_t ne1) {
    const kz_tensor_info *ti = kz_gguf_find_tensor(L->c->g, name);
    if (!ti) {
        seterr(L->c->err, L->c->errlen, "missing tensor '%s'", name);
        return NULL;
    }
    int64_t want[4] = {ne0, nd > 1 ? ne1 : 1, 1, 1};
    int ok = 1;
    for (int d = 0; d < 4; d++) {
        int64_t have = d < (int)ti->n_dims ? ti->ne[d] : 1;
        if (have != want[d]) ok = 0;
    }
    if (!ok) {
        char hs[96], ws[96];
        fmt_shape(hs, sizeof hs, (int)(ti->n_dims > 4 ? 4 : ti->n_dims), ti->ne);
        fmt_shape(ws, sizeof ws, nd, want);
        seterr(L->c->err, L->c->errlen, "tensor %s has shape %s, expected %s", name, hs, ws);
        return NULL;
    }
    return ti;
}

static int load_mat(tload *L, const char *name, int64_t n_in, int64_t n_out, kz_wmat *w) {
    const kz_tensor_info *ti = get_tensor(L, name, 2, n_in, n_out);
    if (!ti) return -1;
    const char *tn = type_name(ti->type);
    if (!kz_type_compute_ok(ti->type)) {
        if (tn)
            seterr(L->c->err, L->c->errlen,
                   "tensor %s has type %s, which this engine cannot compute with yet", name, tn);
        else
            seterr(L->c->err, L->c->errlen, "tensor %s has unknown type id %u", name, ti->type);
        return -1;
    }
    size_t rb = kz_row_bytes(ti->type, n_in);
    if (!rb) {
        const kz_type_info *inf = kz_type_get(ti->type);
        seterr(L->c->err, L->c->errlen, "tensor %s: row length %lld is not a multiple of the %s block size %u",
               name, (long long)n_in, tn ? tn : "?", inf ? inf->blck : 0);
        return -1;
    }
    if ((uint64_t)n_out > UINT64_MAX / rb || ti->nbytes < (uint64_t)rb * (uint64_t)n_out || !ti->data) {
        seterr(L->c->err, L->c->errlen, "tensor %s: data size %llu too small for its shape", name,
               (unsigned long long)ti->nbytes);
        return -1;
    }
    w->type = ti->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    w->data = ti->data;
    return 0;
}

/* small f32 tensor: zero-copy if stored as aligned F32, else converted later into f32_pool */
static int load_vec(tload *L, const char *name, int nd, int64_t ne0, int64_t ne1, const float **dst) {
    const kz_tensor_info *ti = get_tensor(L, name, nd, ne0, ne1);
    if (!ti) return -1;
    uint64_t n = (uint64_t)ne0 * (uint64_t)(nd > 1 ? ne1 : 1);
    uint64_t esz = ti->type == KZ_T_F32 ? 4 : 2;
    if (ti->type != KZ_T_F32 && ti->type != KZ_T_F16 && ti->type != KZ_T_BF16) {
        const char *tn = type_name(ti->type);
        if (tn) seterr(L->c->err, L->c->errlen, "tensor %s has type %s; expected F32, F16 or BF16", name, tn);
        else seterr(L->c->err, L->c->errlen, "tensor %s has unknown type id %u; expected F32, F16 or BF16",
                    name, ti->type);
        return -1;
    }
    if (ti->nbytes < n * esz || !ti->data) {
        seterr(L->c->err, L->c->errlen, "tensor %s: data size %llu too small for its shape", name,
               (unsigned long long)ti->nbytes);
        return -1;
    }
    if (ti->type == KZ_T_F32 && ((uintptr_t)ti->data % sizeof(float)) == 0) {
        *dst = (const float *)ti->data;
        return 0;
    }
    if (L->n_pend == L->cap_pend) {
        int nc = L->cap_pend ? 2 * L->cap_pend : 64;
        pending_vec *p = realloc(L->pend, (size_t)nc * sizeof *p);
        if (!p) { seterr(L->c->err, L->c->errlen, "out of memory"); return -1; }
        L->pend = p;
        L->cap_pend = nc;
    }
    L->pend[L->n_pend].ti = ti;
    L->pend[L->n_pend].dst = dst;
    L->n_pend++;
    return 0;
}

static int convert_pending(kz_model *m, tload *L) {
    size_t total = 0;
    for (int i = 0; i < L->n_pend; i++) {
        const kz_tensor_info *ti = L->pend[i].ti;
        total += (size_t)(ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3]);
    }
    if (!total) return 0;
    m->f32_pool = malloc(total * sizeof(float));
    if (!m->f32_pool) { seterr(L->c->err, L->c->errlen, "out of memory"); return -1; }
    float *p = m->f32_pool;
    for (int i = 0; i < L->n_pend; i++) {
        const kz_tensor_info *ti = L->pend[i].ti;
        size_t n = (size_t)(ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3]);
        const uint8_t *src = ti->data;
        for (size_t j = 0; j < n; j++) {
            uint16_t h;
            if (ti->type == KZ_T_F32) { memcpy(&p[j], src + 4 * j, 4); continue; }
            memcpy(&h, src + 2 * j, 2);
            p[j] = ti->type == KZ_T_F16 ? kz_fp16_to_f32(h) : kz_bf16_to_f32(h);
        }
        *L->pend[i].dst = p;
        p += n;
    }
    return 0;
}

static int load_layer(tload *L, const kz_hparams *hp, int il, kz_layer *ly) {
    char nm[96];
#define TN(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix), nm)
    const int64_t d = hp->n_embd, hd = hp->head_dim;
    if (load_vec(L, TN("attn_norm.weight"), 1, d, 1, &ly->attn_norm)) return -1;
    if (load_vec(L, TN(hp->arch == KZ_ARCH_QWEN3 ? "ffn_norm.weight" : "post_attention_norm.weight"), 1,
                 d, 1, &ly->post_norm))
        return -1;
    if (!ly->is_gdn) {
        const int64_t q_out = (hp->arch == KZ_ARCH_QWEN35 ? 2 : 1) * (int64_t)hp->n_head * hd;
        const int64_t kv_out = (int64_t)hp->n_head_kv * hd;
        if (load_mat(L, TN("attn_q.weight"), d, q_out, &ly->wq)) return -1;
        if (load_mat(L, TN("attn_k.weight"), d, kv_out, &ly->wk)) return -1;
        if (load_mat(L, TN("attn_v.weight"), d, kv_out, &ly->wv)) return -1;
        if (load_mat(L, TN("attn_output.weight"), (int64_t)hp->n_head * hd, d, &ly->wo)) return -1;
        if (load_vec(L, TN("attn_q_norm.weight"), 1, hd, 1, &ly->q_norm)) return -1;
        if (load_vec(L, TN("attn_k_norm.weight"), 1, hd, 1, &ly->k_norm)) return -1;
    } else {
        const int64_t hv = hp->ssm_n_v_heads, vd = hp->ssm_d_inner;
        if (load_mat(L, TN("attn_qkv.weight"), d, hp->ssm_conv_dim, &ly->wqkv)) return -1;
        if (load_mat(L, TN("attn_gate.weight"), d, vd, &ly->wgate)) return -1;
        if (load_mat(L, TN("ssm_beta.weight"), d, hv, &ly->wbeta)) return -1;
        if (load_mat(L, TN("ssm_alpha.weight"), d, hv, &ly->walpha)) return -1;
        if (load_mat(L, TN("ssm_out.weight"), vd, d, &ly->wssm_out)) return -1;
        if (load_vec(L, TN("ssm_conv1d.weight"), 2, hp->ssm_d_conv, hp->ssm_conv_dim, &ly->conv1d)) return -1;
        if (load_vec(L, TN("ssm_dt.bias"), 1, hv, 1, &ly->dt_bias)) return -1;
        if (load_vec(L, TN("ssm_a"), 1, hv, 1, &ly->ssm_a)) return -1;
        if (load_vec(L, TN("ssm_norm.weight"), 1, hp->ssm_head_v_dim, 1, &ly->ssm_norm)) return -1;
    }
    if (load_mat(L, TN("ffn_gate.weight"), d, hp->n_ff, &ly->ffn_gate)) return -1;
    if (load_mat(L, TN("ffn_up.weight"), d, hp->n_ff, &ly->ffn_up)) return -1;
    if (load_mat(L, TN("ffn_down.weight"), hp->n_ff, d, &ly->ffn_down)) return -1;
#undef TN
    return 0;
}

/* Validates an opened file and builds the model; takes ownership of g (closed on failure).
 * path only names the file in error messages. */
/* The matrices repack_weights packs: every Q4_0 one with at least one 16-row group (the
 * output head counts once: packing m->output leaves tok_embd's embedding lookups on the file). */
static int pack_list(kz_model *m, kz_wmat **out, int cap) {
    int n = 0;
    if (m->output.type == KZ_T_Q4_0 && n < cap) out[n++] = &m->output;
    for (int i = 0; i < m->hp.n_layer; i++) {
        kz_layer *l = &m->layers[i];
        kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                         &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j]->data && ws[j]->type == KZ_T_Q4_0 && ws[j]->n_out >= 16 && n < cap) out[n++] = ws[j];
    }
    return n;
}

typedef struct {
    const kz_wmat *w;
    uint8_t *dst;
} pack_task;

/* the 16-row groups of one matrix split over the threads (loads read the file once: parallel
 * packing halves the repack share of the load time on 2 cores) */
static void pack_fn(void *arg, int ith, int nth) {
    const pack_task *t = arg;
    long lo, hi;
    kz_split((long)(t->w->n_out / 16), ith, nth, &lo, &hi);
    if (hi > lo)
        kz_repack_q4_0_16x4((const uint8_t *)t->w->data + (size_t)lo * 16 * t->w->row_bytes, t->w->row_bytes,
                            (int64_t)(hi - lo) * 16, t->w->n_in, t->dst + (size_t)lo * kz_q4_0_16x4_group_bytes(t->w->n_in));
}

/* 0 on success or when this CPU has no packed kernel (nothing done); -1 out of memory */
static int pack_weights(kz_model *m, int n_threads) {
    if (!kz_q4_0_16x4_supported()) return 0;
    /* weights in caller-owned memory cannot be released after the copy: packing them would
     * double the resident weights, so they stay as they are (zero-copy) */
    if (!m->gguf || !m->gguf->owns_map) return 0;
    const int cap = 1 + 12 * m->hp.n_layer;
    kz_wmat **list = malloc((size_t)cap * sizeof *list);
    if (!list) return -1;
    const int n = pack_list(m, list, cap);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)(list[i]->n_out / 16) * kz_q4_0_16x4_group_bytes(list[i]->n_in);
    m->p16_bytes = total;
    if (total == 0) { free(list); return 0; }
    void *buf = NULL;
    /* 2 MiB aligned + transparent huge pages where the kernel offers them (madvise mode):
     * ~500x fewer page faults while packing and fewer TLB misses while decode streams it */
    if (posix_memalign(&buf, (size_t)2 << 20, total)) { free(list); return -1; }
#ifdef MADV_HUGEPAGE
    madvise(buf, total, MADV_HUGEPAGE); /* advisory: ignore failure */
#endif
    m->p16_buf = buf;
    kz_pool *pool = kz_pool_new(n_threads); /* NULL (out of memory): packed on this thread */
    const long pg = sysconf(_SC_PAGESIZE);
    const int release = pg > 0;
    uint8_t *d = buf;
    for (int i = 0; i < n; i++) {
        kz_wmat *w = list[i];
        const int64_t nr = w->n_out - w->n_out % 16;
        const size_t bytes = (size_t)(nr / 16) * kz_q4_0_16x4_group_bytes(w->n_in);
        pack_task pt = {w, d};
        if (pool) kz_pool_run(pool, pack_fn, &pt);
        else pack_fn(&pt, 0, 1);
        w->q4_0_16x4 = d;
        w->n_q4_0_16x4 = nr;
        d += bytes;
        if (release) {
            /* drop the file pages just copied (whole pages only), matrix by matrix so the
             * resident peak stays ~1x; a later read of them, e.g. an embedding row of a tied
             * head, faults them back in from the file */
            uintptr_t a = ((uintptr_t)w->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
            uintptr_t e = ((uintptr_t)w->data + (uintptr_t)nr * w->row_bytes) & ~((uintptr_t)pg - 1);
            if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
        }
    }
    kz_pool_free(pool);
    free(list);
    return 0;
}

static kz_model *load_gguf(kz_gguf *g, const char *path, const kz_model_params *params, char *err,
                           size_t errlen) {
    char e2[512];
    kz_model *m = calloc(1, sizeof *m);
    if (!m) { kz_gguf_close(g); seterr(err, errlen, "out of memory"); return NULL; }
    m->gguf = g;
    unsigned char *rec = NULL;
    tload L = {0};

    kz_str a;
    if (kz_gguf_get_str(g, "general.architecture", &a) != 0) {
        seterr(err, errlen, "%s: missing metadata key 'general.architecture'", path);
        goto fail;
    }
    if (!((a.len == 6 && !memcmp(a.ptr, "qwen35", 6)) || (a.len == 5 && !memcmp(a.ptr, "qwen3", 5)))) {
        char q[72];
        seterr(err, errlen, "%s: unsupported architecture '%s' (supported: qwen35, qwen3)", path,
               kz_utf8_printable(a.ptr, a.len, q, sizeof q));
        goto fail;
    }
    memcpy(m->arch_name, a.ptr, a.len);
    m->arch_name[a.len] = 0;

    ld_ctx c = {g, m->arch_name, e2, sizeof e2};
    L.c = &c;
    if (read_hparams(&c, &m->hp, &rec)) { seterr(err, errlen, "%s: %s", path, e2); goto fail; }
    kz_hparams *hp = &m->hp;

    /* token_embd defines n_vocab */
    const kz_tensor_info *te = kz_gguf_find_tensor(g, "token_embd.weight");
    if (!te) { seterr(err, errlen, "%s: missing tensor 'token_embd.weight'", path); goto fail; }
    if (te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        char hs[96], ws[96];
        int64_t want[2] = {hp->n_embd, te->n_dims >= 2 ? te->ne[1] : 0};
        fmt_shape(hs, sizeof hs, (int)(te->n_dims > 4 ? 4 : te->n_dims), te->ne);
        fmt_shape(ws, sizeof ws, 2, want);
        seterr(err, errlen, "%s: tensor token_embd.weight has shape %s, expected %s (n_embd, n_vocab)",
               path, hs, ws);
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];
    if (load_mat(&L, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd)) goto fail_e2;
    if (kz_gguf_find_tensor(g, "output.weight")) {
        if (load_mat(&L, "output.weight", hp->n_embd, hp->n_vocab, &m->output)) goto fail_e2;
    } else {
        m->output = m->tok_embd; /* tied */
    }
    if (load_vec(&L, "output_norm.weight", 1, hp->n_embd, 1, &m->output_norm)) goto fail_e2;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) { seterr(err, errlen, "out of memory"); goto fail; }
    int ia = 0, ig = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        kz_layer *ly = &m->layers[il];
        ly->is_gdn = rec[il];
        ly->state_idx = ly->is_gdn ? ig++ : ia++;
        if (load_layer(&L, hp, il, ly)) goto fail_e2;
    }
    if (convert_pending(m, &L)) goto fail_e2;

    if (params && params->repack_weights &&
        pack_weights(m, params->n_threads > 0 ? params->n_threads : kz_num_cpus())) {
        seterr(err, errlen, "%s: out of memory for the repacked weights (%.1f MiB); load without repacking", path,
               (double)m->p16_bytes / 1048576.0);
        goto fail;
    }

    m->tok = kz_tokenizer_from_gguf(g, e2, sizeof e2);
    if (!m->tok) { seterr(err, errlen, "%s: tokenizer: %s", path, e2); goto fail; }
    m->n_threads = params && params->n_threads > 0 ? params->n_threads : kz_num_cpus();
    if (m->n_threads < 1) m->n_threads = 1;
    free(rec);
    free(L.pend);
    return m;

fail_e2:
    seterr(err, errlen, "%s: %s", path, e2);
fail:
    free(rec);
    free(L.pend);
    kz_model_free(m);
    return NULL;
}

kz_model *kz_model_load(const char *path, const kz_model_params *params, char *err, size_t errlen) {
    char e2[512];
    if (!path) { seterr(err, errlen, "no model path given"); return NULL; }
    kz_gguf *g = kz_gguf_open(path, e2, sizeof e2);
    if (!g) {
        if (strstr(e2, path)) seterr(err, errlen, "%s", e2); /* reader already names the file */
        else seterr(err, errlen, "%s: %s", path, e2);
        return NULL;
    }
    return load_gguf(g, path, params, err, errlen);
}

kz_model *kz_model_load_mem(const void *buf, size_t size, const char *name,
                            const kz_model_params *params, char *err, size_t errlen) {
    char e2[512];
    if (!name) name = "<memory>";
    kz_gguf *g = kz_gguf_open_mem(buf, size, e2, sizeof e2);
    if (!g) { seterr(err, errlen, "%s: %s", name, e2); return NULL; }
    return load_gguf(g, name, params, err, errlen);
}

void kz_model_free(kz_model *m) {
    if (!m) return;
    if (m->tok) kz_tokenizer_free(m->tok);
    free(m->layers);
    free(m->f32_pool);
    free(m->p16_buf);
    if (m->gguf) kz_gguf_close(m->gguf);
    free(m);
}

int kz_model_n_vocab(const kz_model *m) { return m ? m->hp.n_vocab : 0; }
int kz_model_n_ctx_train(const kz_model *m) { return m ? m->hp.n_ctx_train : 0; }
const char *kz_model_arch(const kz_model *m) { return m ? m->arch_name : ""; }

static void count_type(int *cnt, const kz_wmat *w) {
    if (w->data && w->type < KZ_T_COUNT) cnt[w->type]++;
}

int kz_model_describe(const kz_model *m, char *buf, size_t len) {
    if (!m) return snprintf(buf, len, "(no model)");
    const kz_hparams *hp = &m->hp;
    int cnt[KZ_T_COUNT] = {0};
    count_type(cnt, &m->tok_embd);
    if (m->output.data != m->tok_embd.data) count_type(cnt, &m->output);
    for (int i = 0; i < hp->n_layer; i++) {
        const kz_layer *l = &m->layers[i];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++) count_type(cnt, ws[j]);
    }
    char types[256];
    size_t o = 0;
    types[0] = 0;
    for (int t = 0; t < KZ_T_COUNT && o < sizeof types; t++)
        if (cnt[t]) {
            const char *tn = type_name((uint32_t)t);
            o += (size_t)snprintf(types + o, sizeof types - o, "%s%s x%d", o ? ", " : "", tn ? tn : "?", cnt[t]);
        }
    int n;
    if (hp->arch == KZ_ARCH_QWEN35)
        n = snprintf(buf, len,
                     "qwen35: %d layers (%d gated-deltanet + %d gated-attention%s), n_embd %d, n_ff %d, "
                     "vocab %d, attn heads %d/%d x %d (rope %d dims, base %g), GDN heads %d k / %d v x %d/%d, "
                     "conv %d, ctx_train %d, lm head %s, matrices: %s",
                     hp->n_layer, hp->n_gdn_layers, hp->n_attn_layers,
                     hp->n_layer_all > hp->n_layer ? ", MTP block ignored" : "", hp->n_embd, hp->n_ff,
                     hp->n_vocab, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot, hp->rope_base,
                     hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim,
                     hp->ssm_d_conv, hp->n_ctx_train, m->output.data == m->tok_embd.data ? "tied" : "separate",
                     types);
    else
        n = snprintf(buf, len,
                     "qwen3: %d layers, n_embd %d, n_ff %d, vocab %d, heads %d/%d x %d (rope %d dims, base %g), "
                     "ctx_train %d, lm head %s, matrices: %s",
                     hp->n_layer, hp->n_embd, hp->n_ff, hp->n_vocab, hp->n_head, hp->n_head_kv, hp->head_dim,
                     hp->n_rot, hp->rope_base, hp->n_ctx_train,
                     m->output.data == m->tok_embd.data ? "tied" : "separate", types);
    return n;
}
