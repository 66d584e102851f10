/* Model loading: hparams from GGUF metadata, every tensor validated (presence, exact shape,
 * usable type), small 1-D tensors made available as f32. The architecture's own keys and
 * tensor names are in its rules (qwen35.c, qwen3.c); the checked reads in loader.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "sys/fp16.h"
#include "sys/topology.h"
#include "matmul/matmul.h"
#include "model/loader.h"
#include "model/model.h"
#include "sys/threadpool.h"
#include "model/types.h"
#include "text/unicode.h"
#include "sys/err.h"
#include "sys/mem.h"

kz_model_params kz_model_default_params(void) {
    kz_model_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.repack_weights = 1; /* a no-op where no packed kernel exists */
    return p;
}

/* ---------------- hparams ---------------- */

/* the keys every architecture has, then the architecture's own */
static int read_hparams(kz_ld *c, const kz_arch_rules *rules, kz_hparams *hp, unsigned char **rec_out) {
    const int BIG = 1 << 20;
    int nextn = 0;
    memset(hp, 0, sizeof *hp);
    if (kz_ld_int(c, "block_count", &hp->n_layer_all, -1, 1, 4096)) return -1;
    if (kz_ld_int(c, "nextn_predict_layers", &nextn, 0, 0, 4096)) return -1;
    if (nextn >= hp->n_layer_all) {
        kz_seterr(c->err, c->errlen, "%s.nextn_predict_layers = %d leaves no main layers (block_count %d)",
                  c->arch, nextn, hp->n_layer_all);
        return -1;
    }
    hp->n_layer = hp->n_layer_all - nextn;
    if (kz_ld_int(c, "context_length", &hp->n_ctx_train, -1, 1, INT32_MAX)) return -1;
    if (kz_ld_int(c, "embedding_length", &hp->n_embd, -1, 1, BIG)) return -1;
    if (kz_ld_int(c, "feed_forward_length", &hp->n_ff, -1, 1, BIG)) return -1;
    if (kz_ld_int(c, "attention.head_count", &hp->n_head, -1, 1, 4096)) return -1;
    if (kz_ld_int(c, "attention.head_count_kv", &hp->n_head_kv, hp->n_head, 1, 4096)) return -1;
    if (hp->n_head % hp->n_head_kv) {
        kz_seterr(c->err, c->errlen, "%s.attention.head_count %d is not a multiple of head_count_kv %d",
                  c->arch, hp->n_head, hp->n_head_kv);
        return -1;
    }
    /* llama.cpp default: n_embd / n_head */
    long def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1;
    if (kz_ld_int(c, "attention.key_length", &hp->head_dim, def_hd, 2, 1 << 16)) return -1;
    int vlen;
    if (kz_ld_int(c, "attention.value_length", &vlen, hp->head_dim, 1, 1 << 16)) return -1;
    if (vlen != hp->head_dim) {
        kz_seterr(c->err, c->errlen, "%s.attention.value_length %d != key_length %d (unsupported)",
                  c->arch, vlen, hp->head_dim);
        return -1;
    }
    if (kz_ld_int(c, "rope.dimension_count", &hp->n_rot, hp->head_dim, 0, hp->head_dim)) return -1;
    if (hp->n_rot % 2) {
        kz_seterr(c->err, c->errlen, "%s.rope.dimension_count %d must be even", c->arch, hp->n_rot);
        return -1;
    }
    if (kz_ld_float(c, "attention.layer_norm_rms_epsilon", &hp->rms_eps, 1, 0, 0.0f, 1.0f)) return -1;
    if (kz_ld_float(c, "rope.freq_base", &hp->rope_base, 0, 10000.0f, 1.0f, 1e30f)) return -1;

    unsigned char *rec = calloc((size_t)hp->n_layer, 1);
    if (!rec) { kz_seterr(c->err, c->errlen, "out of memory"); return -1; }
    *rec_out = rec;
    hp->arch = rules->arch;
    if (rules->hparams(c, hp, rec)) return -1;
    for (int i = 0; i < hp->n_layer; i++) {
        if (rec[i]) hp->n_gdn_layers++;
        else hp->n_attn_layers++;
    }
    return 0;
}

static const kz_arch_rules *const k_archs[] = {&kz_arch_qwen35, &kz_arch_qwen3};

static const kz_arch_rules *find_arch(const kz_str *a) {
    for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
        if (strlen(k_archs[i]->name) == a->len && !memcmp(k_archs[i]->name, a->ptr, a->len)) return k_archs[i];
    return NULL;
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
    if (m->mtp) { /* its own matrices (embed / head are the trunk's unless the file has its own) */
        kz_mtp *t = m->mtp;
        kz_wmat *ws[] = {&t->eh_proj, &t->ly.ffn_gate, &t->ly.ffn_up, &t->ly.ffn_down, &t->ly.wq, &t->ly.wk,
                         &t->ly.wv, &t->ly.wo, t->head.data != m->output.data ? &t->head : NULL};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j] && ws[j]->data && ws[j]->type == KZ_T_Q4_0 && ws[j]->n_out >= 16 && n < cap) out[n++] = ws[j];
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

/* The matrices repack_weights packs on this CPU (malloc'd, *n of them). NULL with *n = 0 when
 * it packs none: no packed kernel, or weights in caller-owned memory, which cannot be released
 * after the copy (packing them would double the resident weights: they stay zero-copy). NULL
 * with *n = -1: out of memory. */
static kz_wmat **pack_targets(kz_model *m, int *n) {
    *n = 0;
    if (!kz_q4_0_16x4_supported() || !m->gguf || !m->gguf->owns_map) return NULL;
    const int cap = 1 + 12 * m->hp.n_layer + 9;
    kz_wmat **list = malloc((size_t)cap * sizeof *list);
    if (!list) { *n = -1; return NULL; }
    *n = pack_list(m, list, cap);
    return list;
}

void kz_model_plan_packed(kz_model *m) {
    int n;
    kz_wmat **list = m->repack_buf ? NULL : pack_targets(m, &n);
    if (!list) return;
    for (int i = 0; i < n; i++) { /* a stand-in, never read: the model does not run after this */
        list[i]->q4_0_16x4 = list[i]->data;
        list[i]->n_q4_0_16x4 = list[i]->n_out - list[i]->n_out % 16;
    }
    free(list);
}

/* 0 on success or when this CPU has no packed kernel (nothing done); -1 out of memory */
static int pack_weights(kz_model *m, int n_threads) {
    int n;
    kz_wmat **list = pack_targets(m, &n);
    if (!list) return n < 0 ? -1 : 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)(list[i]->n_out / 16) * kz_q4_0_16x4_group_bytes(list[i]->n_in);
    m->repack_bytes = total;
    if (total == 0) { free(list); return 0; }
    /* huge pages: ~500x fewer page faults while packing, fewer TLB misses while decode streams it */
    void *buf = kz_alloc_huge(total);
    if (!buf) { free(list); return -1; }
    m->repack_buf = buf;
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
    if (!m) { kz_gguf_close(g); kz_seterr(err, errlen, "out of memory"); return NULL; }
    m->gguf = g;
    unsigned char *rec = NULL;
    kz_tload L = {0};

    kz_str a;
    if (kz_gguf_get_str(g, "general.architecture", &a) != 0) {
        kz_seterr(err, errlen, "%s: missing metadata key 'general.architecture'", path);
        goto fail;
    }
    const kz_arch_rules *rules = find_arch(&a);
    if (!rules) {
        char q[72];
        kz_seterr(err, errlen, "%s: unsupported architecture '%s' (supported: qwen35, qwen3)", path,
                  kz_utf8_printable(a.ptr, a.len, q, sizeof q));
        goto fail;
    }
    memcpy(m->arch_name, a.ptr, a.len);
    m->arch_name[a.len] = 0;

    kz_ld c = {g, m->arch_name, e2, sizeof e2};
    L.c = &c;
    if (read_hparams(&c, rules, &m->hp, &rec)) { kz_seterr(err, errlen, "%s: %s", path, e2); goto fail; }
    kz_hparams *hp = &m->hp;

    /* token_embd defines n_vocab */
    const kz_tensor_info *te = kz_gguf_find_tensor(g, "token_embd.weight");
    if (!te) { kz_seterr(err, errlen, "%s: missing tensor 'token_embd.weight'", path); goto fail; }
    if (te->n_dims != 2 || te->ne[0] != hp->n_embd || te->ne[1] < 1 || te->ne[1] > INT32_MAX) {
        char hs[96], ws[96];
        int64_t want[2] = {hp->n_embd, te->n_dims >= 2 ? te->ne[1] : 0};
        kz_ld_fmt_shape(hs, sizeof hs, (int)(te->n_dims > 4 ? 4 : te->n_dims), te->ne);
        kz_ld_fmt_shape(ws, sizeof ws, 2, want);
        kz_seterr(err, errlen, "%s: tensor token_embd.weight has shape %s, expected %s (n_embd, n_vocab)",
                  path, hs, ws);
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];
    if (kz_ld_mat(&L, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd)) goto fail_e2;
    if (kz_gguf_find_tensor(g, "output.weight")) {
        if (kz_ld_mat(&L, "output.weight", hp->n_embd, hp->n_vocab, &m->output)) goto fail_e2;
    } else {
        m->output = m->tok_embd; /* tied */
    }
    if (kz_ld_vec(&L, "output_norm.weight", 1, hp->n_embd, 1, &m->output_norm)) goto fail_e2;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) { kz_seterr(err, errlen, "out of memory"); goto fail; }
    int ia = 0, ig = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        kz_layer *ly = &m->layers[il];
        ly->is_gdn = rec[il];
        ly->state_idx = ly->is_gdn ? ig++ : ia++;
        if (rules->layer(&L, hp, il, ly)) goto fail_e2;
    }
    if (hp->arch == KZ_ARCH_QWEN35 && hp->n_layer_all > hp->n_layer) {
        kz_mtp *mtp = calloc(1, sizeof *mtp);
        if (!mtp) { kz_seterr(err, errlen, "out of memory"); goto fail; }
        m->mtp = mtp; /* freed with the model */
        int r = kz_ld_qwen35_mtp(&L, m, hp->n_layer, mtp);
        if (r < 0) goto fail_e2;
        if (r == 0) { free(mtp); m->mtp = NULL; }
    }
    if (kz_ld_convert_pending(m, &L)) goto fail_e2;

    if (params && params->repack_weights &&
        pack_weights(m, params->n_threads > 0 ? params->n_threads : kz_default_threads())) {
        kz_seterr(err, errlen, "%s: out of memory for the repacked weights (%.1f MiB); load without repacking", path,
                  (double)m->repack_bytes / 1048576.0);
        goto fail;
    }
    if (m->mtp) { /* the trunk's head / embedding as packed above */
        if (m->mtp->head.data == m->output.data) m->mtp->head = m->output;
        if (m->mtp->embed.data == m->tok_embd.data) m->mtp->embed = m->tok_embd;
    }

    m->tok = kz_tokenizer_from_gguf(g, e2, sizeof e2);
    if (!m->tok) { kz_seterr(err, errlen, "%s: tokenizer: %s", path, e2); goto fail; }
    m->n_threads = params && params->n_threads > 0 ? params->n_threads : kz_default_threads();
    if (m->n_threads < 1) m->n_threads = 1;
    free(rec);
    free(L.pend);
    return m;

fail_e2:
    kz_seterr(err, errlen, "%s: %s", path, e2);
fail:
    free(rec);
    free(L.pend);
    kz_model_free(m);
    return NULL;
}

kz_model *kz_model_load(const char *path, const kz_model_params *params, char *err, size_t errlen) {
    char e2[512];
    if (!path) { kz_seterr(err, errlen, "no model path given"); return NULL; }
    kz_gguf *g = kz_gguf_open(path, e2, sizeof e2);
    if (!g) {
        if (strstr(e2, path)) kz_seterr(err, errlen, "%s", e2); /* reader already names the file */
        else kz_seterr(err, errlen, "%s: %s", path, e2);
        return NULL;
    }
    return load_gguf(g, path, params, err, errlen);
}

kz_model *kz_model_load_mem(const void *buf, size_t size, const char *name,
                            const kz_model_params *params, char *err, size_t errlen) {
    char e2[512];
    if (!name) name = "<memory>";
    kz_gguf *g = kz_gguf_open_mem(buf, size, e2, sizeof e2);
    if (!g) { kz_seterr(err, errlen, "%s: %s", name, e2); return NULL; }
    return load_gguf(g, name, params, err, errlen);
}

kz_model *kz_model_load_memory(const void *buf, size_t size, const char *name,
                               const kz_model_params *params, char *err, size_t errlen) {
    return kz_model_load_mem(buf, size, name, params, err, errlen);
}

void kz_model_free(kz_model *m) {
    if (!m) return;
    if (m->tok) kz_tokenizer_free(m->tok);
    free(m->layers);
    free(m->mtp);
    free(m->f32_pool);
    free(m->repack_buf);
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
            const char *tn = kz_ld_type_name((uint32_t)t);
            o += (size_t)snprintf(types + o, sizeof types - o, "%s%s x%d", o ? ", " : "", tn ? tn : "?", cnt[t]);
        }
    int n;
    if (hp->arch == KZ_ARCH_QWEN35)
        n = snprintf(buf, len,
                     "qwen35: %d layers (%d gated-deltanet + %d gated-attention%s), n_embd %d, n_ff %d, "
                     "vocab %d, attn heads %d/%d x %d (rope %d dims, base %g), GDN heads %d k / %d v x %d/%d, "
                     "conv %d, ctx_train %d, lm head %s, matrices: %s",
                     hp->n_layer, hp->n_gdn_layers, hp->n_attn_layers,
                     m->mtp ? ", + MTP block" : hp->n_layer_all > hp->n_layer ? ", MTP block ignored" : "", hp->n_embd, hp->n_ff,
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
