/* The checked reads every architecture's load rules use: hparams keys (type and range) and
 * tensors (presence, exact shape, a type the engine computes with). */
#include "model/loader.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "matmul/quant.h"
#include "model/types.h"
#include "sys/err.h"
#include "sys/fp16.h"

/* ---------------- hparams ---------------- */

void kz_ld_key(const kz_ld *c, const char *suffix, char *key, size_t n) {
    snprintf(key, n, "%s.%s", c->arch, suffix);
}

/* required (def < 0) or optional (default def) integer key in [lo, hi] */
int kz_ld_int(kz_ld *c, const char *suffix, int *out, long def, long lo, long hi) {
    char key[128];
    kz_ld_key(c, suffix, key, sizeof key);
    int64_t v;
    int r = kz_gguf_get_i64(c->g, key, &v);
    if (r == -1) {
        if (def >= 0) { *out = (int)def; return 0; }
        kz_seterr(c->err, c->errlen, "missing metadata key '%s'", key);
        return -1;
    }
    if (r != 0) {
        kz_seterr(c->err, c->errlen, "metadata key '%s' has the wrong type (expected an integer)", key);
        return -1;
    }
    if (v < lo || v > hi) {
        kz_seterr(c->err, c->errlen, "metadata key '%s' = %lld is out of range [%ld, %ld]", key,
                  (long long)v, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int kz_ld_float(kz_ld *c, const char *suffix, float *out, int required, float def, float lo,
                     float hi) {
    char key[128];
    kz_ld_key(c, suffix, key, sizeof key);
    float v;
    int r = kz_gguf_get_f32(c->g, key, &v);
    if (r == -1) {
        if (!required) { *out = def; return 0; }
        kz_seterr(c->err, c->errlen, "missing metadata key '%s'", key);
        return -1;
    }
    if (r != 0) {
        kz_seterr(c->err, c->errlen, "metadata key '%s' has the wrong type (expected a float)", key);
        return -1;
    }
    if (!(v >= lo && v <= hi)) { /* also rejects NaN */
        kz_seterr(c->err, c->errlen, "metadata key '%s' = %g is out of range [%g, %g]", key, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* per-layer recurrent flags from '<arch>.attention.recurrent_layers' (bool/int scalar or array);
 * returns 1 if the key was present and filled rec[], 0 if absent, -1 on error */
int kz_ld_recurrent_layers(kz_ld *c, int n_layer, unsigned char *rec) {
    char key[128];
    kz_ld_key(c, "attention.recurrent_layers", key, sizeof key);
    const kz_gguf_kv *kv = kz_gguf_get_kv(c->g, key);
    if (!kv) return 0;
    if (kv->type == KZ_GGUF_ARR) {
        if (kv->n < (uint64_t)n_layer) {
            kz_seterr(c->err, c->errlen, "metadata key '%s' has %llu entries, need at least %d (one per layer)",
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
    kz_seterr(c->err, c->errlen, "metadata key '%s' must be a bool or an array of bools/integers", key);
    return -1;
}

/* ---------------- tensors ---------------- */

void kz_ld_fmt_shape(char *buf, size_t n, int nd, const int64_t *ne) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

const char *kz_ld_type_name(uint32_t t) {
    const kz_type_info *ti = kz_type_get(t);
    return ti && ti->name ? ti->name : NULL;
}

/* find and check exact shape (ne beyond the given dims must be 1) */
static const kz_tensor_info *get_tensor(kz_tload *L, const char *name, int nd, int64_t ne0, int64_t ne1) {
    const kz_tensor_info *ti = kz_gguf_find_tensor(L->c->g, name);
    if (!ti) {
        kz_seterr(L->c->err, L->c->errlen, "missing tensor '%s'", name);
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
        kz_ld_fmt_shape(hs, sizeof hs, (int)(ti->n_dims > 4 ? 4 : ti->n_dims), ti->ne);
        kz_ld_fmt_shape(ws, sizeof ws, nd, want);
        kz_seterr(L->c->err, L->c->errlen, "tensor %s has shape %s, expected %s", name, hs, ws);
        return NULL;
    }
    return ti;
}

int kz_ld_mat(kz_tload *L, const char *name, int64_t n_in, int64_t n_out, kz_wmat *w) {
    const kz_tensor_info *ti = get_tensor(L, name, 2, n_in, n_out);
    if (!ti) return -1;
    const char *tn = kz_ld_type_name(ti->type);
    if (!kz_type_compute_ok(ti->type)) {
        if (tn)
            kz_seterr(L->c->err, L->c->errlen,
                      "tensor %s has type %s, which this engine cannot compute with yet", name, tn);
        else
            kz_seterr(L->c->err, L->c->errlen, "tensor %s has unknown type id %u", name, ti->type);
        return -1;
    }
    size_t rb = kz_row_bytes(ti->type, n_in);
    if (!rb) {
        const kz_type_info *inf = kz_type_get(ti->type);
        kz_seterr(L->c->err, L->c->errlen, "tensor %s: row length %lld is not a multiple of the %s block size %u",
                  name, (long long)n_in, tn ? tn : "?", inf ? inf->blck : 0);
        return -1;
    }
    if ((uint64_t)n_out > UINT64_MAX / rb || ti->nbytes < (uint64_t)rb * (uint64_t)n_out || !ti->data) {
        kz_seterr(L->c->err, L->c->errlen, "tensor %s: data size %llu too small for its shape", name,
                  (unsigned long long)ti->nbytes);
        return -1;
    }
    w->type = ti->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    w->data = ti->data;
    w->name = ti->name;
    return 0;
}

/* small f32 tensor: zero-copy if stored as aligned F32, else converted later into f32_pool */
int kz_ld_vec(kz_tload *L, const char *name, int nd, int64_t ne0, int64_t ne1, const float **dst) {
    const kz_tensor_info *ti = get_tensor(L, name, nd, ne0, ne1);
    if (!ti) return -1;
    uint64_t n = (uint64_t)ne0 * (uint64_t)(nd > 1 ? ne1 : 1);
    uint64_t esz = ti->type == KZ_T_F32 ? 4 : 2;
    if (ti->type != KZ_T_F32 && ti->type != KZ_T_F16 && ti->type != KZ_T_BF16) {
        const char *tn = kz_ld_type_name(ti->type);
        if (tn) kz_seterr(L->c->err, L->c->errlen, "tensor %s has type %s; expected F32, F16 or BF16", name, tn);
        else kz_seterr(L->c->err, L->c->errlen, "tensor %s has unknown type id %u; expected F32, F16 or BF16",
                       name, ti->type);
        return -1;
    }
    if (ti->nbytes < n * esz || !ti->data) {
        kz_seterr(L->c->err, L->c->errlen, "tensor %s: data size %llu too small for its shape", name,
                  (unsigned long long)ti->nbytes);
        return -1;
    }
    if (ti->type == KZ_T_F32 && ((uintptr_t)ti->data % sizeof(float)) == 0) {
        *dst = (const float *)ti->data;
        return 0;
    }
    if (L->n_pend == L->cap_pend) {
        int nc = L->cap_pend ? 2 * L->cap_pend : 64;
        kz_pending_vec *p = realloc(L->pend, (size_t)nc * sizeof *p);
        if (!p) { kz_seterr(L->c->err, L->c->errlen, "out of memory"); return -1; }
        L->pend = p;
        L->cap_pend = nc;
    }
    L->pend[L->n_pend].ti = ti;
    L->pend[L->n_pend].dst = dst;
    L->n_pend++;
    return 0;
}

int kz_ld_convert_pending(kz_model *m, kz_tload *L) {
    size_t total = 0;
    for (int i = 0; i < L->n_pend; i++) {
        const kz_tensor_info *ti = L->pend[i].ti;
        total += (size_t)(ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3]);
    }
    if (!total) return 0;
    m->f32_pool = malloc(total * sizeof(float));
    if (!m->f32_pool) { kz_seterr(L->c->err, L->c->errlen, "out of memory"); return -1; }
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

const char *kz_ld_blk(char *nm, size_t n, int il, const char *suffix) {
    snprintf(nm, n, "blk.%d.%s", il, suffix);
    return nm;
}

int kz_ld_attention(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly, int q_gate) {
    char nm[96];
#define TN(suffix) kz_ld_blk(nm, sizeof nm, il, suffix)
    const int64_t d = hp->n_embd, hd = hp->head_dim;
    const int64_t q_out = (q_gate ? 2 : 1) * (int64_t)hp->n_head * hd;
    const int64_t kv_out = (int64_t)hp->n_head_kv * hd;
    if (kz_ld_mat(L, TN("attn_q.weight"), d, q_out, &ly->wq)) return -1;
    if (kz_ld_mat(L, TN("attn_k.weight"), d, kv_out, &ly->wk)) return -1;
    if (kz_ld_mat(L, TN("attn_v.weight"), d, kv_out, &ly->wv)) return -1;
    if (kz_ld_mat(L, TN("attn_output.weight"), (int64_t)hp->n_head * hd, d, &ly->wo)) return -1;
    if (kz_ld_vec(L, TN("attn_q_norm.weight"), 1, hd, 1, &ly->q_norm)) return -1;
    if (kz_ld_vec(L, TN("attn_k_norm.weight"), 1, hd, 1, &ly->k_norm)) return -1;
    return 0;
}

int kz_ld_ffn(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly) {
    char nm[96];
    const int64_t d = hp->n_embd;
    if (kz_ld_mat(L, TN("ffn_gate.weight"), d, hp->n_ff, &ly->ffn_gate)) return -1;
    if (kz_ld_mat(L, TN("ffn_up.weight"), d, hp->n_ff, &ly->ffn_up)) return -1;
    if (kz_ld_mat(L, TN("ffn_down.weight"), hp->n_ff, d, &ly->ffn_down)) return -1;
    return 0;
#undef TN
}
