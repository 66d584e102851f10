/* Sequence state: allocation (KV cache, GDN states, the scratch arena planned once), reset,
 * the views state.c saves, and the cancel of a prefill chunk (copy + rollback of GDN states). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "forward/internal.h"
#include "forward/mm.h"
#include "model/types.h"
#include "nn/gdn.h"
#include "nn/ops.h"
#include "sys/err.h"
#include "sys/mem.h"

/* a*b*c in size_t with overflow detection; returns 0 on overflow */
static int mul3(size_t *r, size_t a, size_t b, size_t c) {
    if (a && b > SIZE_MAX / a) return 0;
    size_t ab = a * b;
    if (ab && c > SIZE_MAX / ab) return 0;
    *r = ab * c;
    return 1;
}
static int add_to(size_t *acc, size_t v) {
    if (v > SIZE_MAX - *acc) return 0;
    *acc += v;
    return 1;
}
static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

static size_t phys_mem_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || psz <= 0) return SIZE_MAX;
    if ((size_t)pages > SIZE_MAX / (size_t)psz) return SIZE_MAX;
    return (size_t)pages * (size_t)psz;
}

/* The recurrent state is read and written whole every token: on huge pages (kz_alloc_huge) its
 * stream neither misses the TLB every 4 KiB nor restarts the hardware prefetcher there. Zeroed. */
static void *alloc_state(size_t bytes) {
    void *p = kz_alloc_huge(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

/* ---------------- the scratch arena ---------------- */

/* Hands out consecutive buffers of whole 64-byte lines; with base NULL it only counts. */
typedef struct {
    float *base;
    size_t off; /* floats */
    int ok;     /* 0 once a size overflowed */
} arena;

static float *take(arena *a, size_t rows, size_t width) {
    size_t n = 0;
    if (!mul3(&n, rows, width, 1) || !add_to(&n, 15)) a->ok = 0;
    n &= ~(size_t)15; /* whole 64-byte lines: every buffer starts on one */
    float *p = a->base ? a->base + a->off : NULL;
    if (!add_to(&a->off, n)) a->ok = 0;
    return a->ok ? p : NULL;
}

/* Every scratch buffer of a chunk of n_batch tokens, named once with its size. Run with
 * a->base NULL to size the arena, then with the allocation to place the views. */
static void plan_scratch(kz_seq *s, arena *a) {
    const kz_hparams *hp = &s->m->hp;
    const size_t B = (size_t)s->n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    const size_t nth = (size_t)s->nth;
    s->x = take(a, B, E);
    s->hn = take(a, B, E);
    s->out = take(a, B, E);
    s->rope = take(a, B, (size_t)hp->n_rot);
    if (s->m->mtp) {
        s->hfin = take(a, B, E);
        s->mtp_cat = take(a, B, 2 * E);
        s->mtp_h = take(a, 1, E);
        s->mtp_pend_max = (int)(B < KZ_MTP_PEND_MAX ? B : KZ_MTP_PEND_MAX);
        s->mtp_pend_h = take(a, (size_t)s->mtp_pend_max, E);
        s->mtp_pend_tok = (int32_t *)take(a, (size_t)s->mtp_pend_max, 1); /* int32 in float-sized cells */
    }
    const size_t layers_from = a->off; /* the layer views overlap from here */
    size_t end = layers_from;

    if (hp->n_attn_layers || s->m->mtp) { /* a model without attention layers must not pay n_ctx-sized scratch */
        kz_attn_bufs *at = &s->attn;
        const size_t n_rep = (size_t)(hp->n_head / hp->n_head_kv), Hkv = (size_t)hp->n_head_kv;
        at->ld_q = (hp->arch == KZ_ARCH_QWEN35 ? 2u : 1u) * (size_t)hp->n_head * hd;
        at->ld_kv = Hkv * hd;
        at->ld_out = (size_t)hp->n_head * hd;
        at->q = take(a, B, at->ld_q);
        at->k = take(a, B, at->ld_kv);
        at->v = take(a, B, at->ld_kv);
        at->out = take(a, B, at->ld_out);
        /* prefill: one item per (token, kv head); decode: position splits, < 2 x KZ_ATTN_MIN_ITEMS;
         * a verify batch: a decode step's items per token, in one dispatch */
        at->max_items = maxz(maxz(B * Hkv, 2 * KZ_ATTN_MIN_ITEMS + Hkv),
                             (size_t)KZ_SPEC_NMAX * (2 * KZ_ATTN_MIN_ITEMS + Hkv));
        at->ml = take(a, at->max_items, 2 * n_rep);
        at->acc = take(a, at->max_items, n_rep * hd);
        const kz_kv_layer whole = {hp->n_head, hp->n_head_kv, hp->head_dim, s->n_ctx, (int)s->kv_type, NULL, NULL, NULL};
        at->part_scr_floats = kz_attn_scratch_floats(&whole, s->n_ctx);
        at->part_scr = take(a, nth, at->part_scr_floats);
        if (B >= KZ_ATTN_TILE_MIN) {
            const kz_kv_layer tile = {hp->n_head, hp->n_head_kv, hp->head_dim, 1, (int)s->kv_type, NULL, NULL, NULL};
            at->tile_scr_floats = kz_attn_tile_scratch_floats(&tile, KZ_ATTN_BQ);
            at->tile_scr = take(a, nth, at->tile_scr_floats);
        }
        end = maxz(end, a->off);
    }
    if (hp->n_gdn_layers) {
        kz_gdn_bufs *g = &s->gdn;
        const kz_gdn_shape sh = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim};
        a->off = layers_from;
        g->ld_qkv = (size_t)hp->ssm_conv_dim;
        g->ld_z = (size_t)hp->ssm_d_inner;
        g->ld_gate = (size_t)hp->ssm_n_v_heads;
        g->qkv = take(a, B, g->ld_qkv);
        g->conv = take(a, B, g->ld_qkv);
        g->z = take(a, B, g->ld_z);
        g->beta = take(a, B, g->ld_gate);
        g->alpha = take(a, B, g->ld_gate);
        g->core = take(a, B, g->ld_z);
        g->chunk_scr_floats = kz_gdn_chunk_scratch_floats(&sh);
        g->chunk_scr = take(a, nth, g->chunk_scr_floats);
        end = maxz(end, a->off);
    }
    a->off = layers_from;
    s->ffn.ld = (size_t)hp->n_ff;
    s->ffn.gate = take(a, B, s->ffn.ld);
    s->ffn.up = take(a, B, s->ffn.ld);
    a->off = maxz(end, a->off);
}

/* ---------------- lifetime ---------------- */

kz_seq *kz_seq_new(const kz_model *m, int n_ctx, int n_batch, int n_threads, kz_kv_type kv,
                   char *err, size_t errlen) {
    if (!m) { kz_seterr(err, errlen, "no model"); return NULL; }
    const kz_hparams *hp = &m->hp;
    if (kv != KZ_KV_F32 && kv != KZ_KV_F16 && kv != KZ_KV_Q8_0) {
        kz_seterr(err, errlen, "unknown KV cache type %d (use f32, f16 or q8_0)", (int)kv);
        return NULL;
    }
    if (kv == KZ_KV_Q8_0 && hp->n_attn_layers && hp->head_dim % 32) {
        kz_seterr(err, errlen, "KV cache type q8_0 needs a head_dim multiple of 32 (this model: %d); use f16",
                  hp->head_dim);
        return NULL;
    }
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_batch <= 0) n_batch = 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (n_threads <= 0) n_threads = m->n_threads > 0 ? m->n_threads : 1;

    kz_seq *s = calloc(1, sizeof *s);
    if (!s) { kz_seterr(err, errlen, "out of memory"); return NULL; }
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->logits_argmax = -1;
    s->kv_type = kv;
    s->pool = kz_pool_new(n_threads);
    if (!s->pool) { kz_seterr(err, errlen, "cannot create a pool of %d threads", n_threads); goto fail; }
    s->nth = kz_pool_size(s->pool);

    /* ---- sizes (all overflow-checked) ---- */
    const size_t row_bytes = kz_kv_type_row_bytes(kv, hp->head_dim);
    const int n_kv_layers = hp->n_attn_layers + (m->mtp ? 1 : 0); /* the MTP block's after the trunk's */
    s->conv_per_layer = (size_t)hp->ssm_conv_dim * (size_t)(hp->ssm_d_conv > 0 ? hp->ssm_d_conv - 1 : 0);
    s->ssm_per_layer = (size_t)hp->ssm_n_v_heads * (size_t)hp->ssm_head_v_dim * (size_t)hp->ssm_d_state;
    const size_t state_floats = (s->conv_per_layer + s->ssm_per_layer) * (size_t)hp->n_gdn_layers;
    arena plan = {NULL, 0, 1};
    plan_scratch(s, &plan);
    /* a one-token matmul also keeps per-block terms after its row (matmul.c), which a batch of
     * n_batch rows need not cover when the rows are short: the larger of the two */
    const size_t mmw = mm_work_bytes_upto(m, n_batch);
    size_t kv_layer_bytes = 0, kv_bytes = 0, scr_bytes = 0, tmp = 0, total = 0;
    int ok = plan.ok && mul3(&kv_layer_bytes, (size_t)hp->n_head_kv * row_bytes, (size_t)n_ctx, 1) &&
             mul3(&kv_bytes, kv_layer_bytes, 2, (size_t)n_kv_layers) &&
             mul3(&scr_bytes, plan.off, sizeof(float), 1) && add_to(&total, kv_bytes) &&
             mul3(&tmp, state_floats, sizeof(float), 1) && add_to(&total, tmp) && add_to(&total, scr_bytes) &&
             add_to(&total, mmw);
    if (!ok) {
        kz_seterr(err, errlen, "n_ctx %d / n_batch %d too large: state size overflows", n_ctx, n_batch);
        goto fail;
    }
    size_t phys = phys_mem_bytes();
    if (total > phys) {
        kz_seterr(err, errlen, "n_ctx %d needs %.2f GiB of sequence state (KV %.2f GiB), more than the %.2f GiB of RAM; "
                  "use a smaller n_ctx or --kv f16",
                  n_ctx, total / 1073741824.0, kv_bytes / 1073741824.0, phys / 1073741824.0);
        goto fail;
    }

    /* ---- allocate ---- */
    if (n_kv_layers) {
        s->kv = calloc((size_t)n_kv_layers, sizeof *s->kv);
        s->kv_mem = malloc(kv_bytes);
        if (!s->kv || !s->kv_mem) goto oom;
        for (int i = 0; i < n_kv_layers; i++) {
            kz_kv_layer *l = &s->kv[i];
            l->n_head = hp->n_head;
            l->n_head_kv = hp->n_head_kv;
            l->head_dim = hp->head_dim;
            l->n_ctx = n_ctx;
            l->type = (int)kv;
            l->h2f = kz_qtraits_get(KZ_T_F16)->dequant;
            l->k = (char *)s->kv_mem + (size_t)(2 * i) * kv_layer_bytes;
            l->v = (char *)s->kv_mem + (size_t)(2 * i + 1) * kv_layer_bytes;
        }
    }
    if (state_floats) {
        s->conv_state = alloc_state(state_floats * sizeof(float));
        if (!s->conv_state) goto oom;
        s->ssm_state = s->conv_state + s->conv_per_layer * (size_t)hp->n_gdn_layers;
    }
    if (posix_memalign((void **)&s->arena, 64, scr_bytes ? scr_bytes : 64)) s->arena = NULL;
    s->mm_work = malloc(mmw ? mmw : 1);
    s->rope_use_pos = malloc((size_t)(hp->n_rot / 2 + 1));
    if (s->attn.max_items && !(s->attn.cnt = malloc(s->attn.max_items * sizeof *s->attn.cnt))) goto oom;
    if (!s->arena || !s->mm_work || !s->rope_use_pos) goto oom;
    arena place = {s->arena, 0, 1};
    plan_scratch(s, &place);
    kz_imrope_mask(s->rope_use_pos, hp->n_rot, hp->rope_sections);
    s->mtp_on = m->mtp != NULL; /* the draft head's cache fills from the first token (verify.c) */
    return s;
oom:
    kz_seterr(err, errlen, "out of memory allocating sequence state for n_ctx %d (%.2f GiB)", n_ctx,
              total / 1073741824.0);
fail:
    kz_seq_free(s);
    return NULL;
}

void kz_seq_free(kz_seq *s) {
    if (!s) return;
    if (s->pool) kz_pool_free(s->pool);
    free(s->kv);
    free(s->kv_mem);
    free(s->conv_state);
    free(s->state_bak);
    free(s->arena);
    free(s->mm_work);
    free(s->rope_use_pos);
    free(s->attn.cnt);
    free(s->rec_state);
    free(s->rec_qkv);
    free(s);
}

static size_t gdn_state_floats(const kz_seq *s) {
    return (s->conv_per_layer + s->ssm_per_layer) * (size_t)s->m->hp.n_gdn_layers;
}

void kz_seq_reset(kz_seq *s) {
    if (!s) return;
    if (s->conv_state) memset(s->conv_state, 0, gdn_state_floats(s) * sizeof(float));
    s->n_past = 0;
    s->mtp_n = 0;
    s->mtp_pend = 0;
    s->rec_valid = 0;
    s->logits_argmax = -1;
}

int kz_seq_n_past(const kz_seq *s) { return s ? s->n_past : 0; }
int kz_seq_n_ctx(const kz_seq *s) { return s ? s->n_ctx : 0; }
int64_t kz_seq_logits_argmax(const kz_seq *s) { return s ? s->logits_argmax : -1; }

void kz_seq_view_get(kz_seq *s, kz_seq_view *v) {
    const kz_hparams *hp = &s->m->hp;
    kz_mtp_flush(s); /* the view shows the MTP KV whole */
    v->n_past = s->n_past;
    v->n_ctx = s->n_ctx;
    v->kv_type = s->kv_type;
    v->n_kv_layers = hp->n_attn_layers;
    v->kv = s->kv;
    v->conv = s->conv_state;
    v->ssm = s->ssm_state;
    v->n_conv = s->conv_per_layer * (size_t)hp->n_gdn_layers;
    v->n_ssm = s->ssm_per_layer * (size_t)hp->n_gdn_layers;
    v->mtp_kv = s->m->mtp && s->mtp_on ? &s->kv[hp->n_attn_layers] : NULL;
    v->mtp_h = v->mtp_kv ? s->mtp_h : NULL;
    v->mtp_ready = kz_seq_mtp_ready(s);
}

int kz_seq_mtp_ready(const kz_seq *s) {
    return s && s->m->mtp && s->mtp_on && s->n_past > 0 && s->mtp_n >= 0 && s->mtp_n + s->mtp_pend == s->n_past - 1;
}

int kz_seq_rewind(kz_seq *s, int n_past, const float *mtp_h) {
    if (!s || n_past < 0 || n_past > s->n_past) return -1;
    kz_mtp_flush(s); /* slots below n_past stay valid */
    s->n_past = n_past;
    s->logits_argmax = -1;
    s->rec_valid = 0;
    s->mtp_n = n_past ? -1 : 0;
    if (mtp_h && n_past && s->m->mtp && s->mtp_on) {
        memcpy(s->mtp_h, mtp_h, (size_t)s->m->hp.n_embd * sizeof(float));
        s->mtp_n = n_past - 1;
    }
    return 0;
}

int kz_seq_mtp_restore(kz_seq *s) {
    if (!s || !s->m->mtp || !s->mtp_on) return -1;
    s->mtp_pend = 0;
    s->mtp_n = s->n_past - 1;
    return 0;
}

int kz_seq_set_n_past(kz_seq *s, int n_past) {
    if (!s || n_past < 0 || n_past > s->n_ctx) return -1;
    s->n_past = n_past;
    s->logits_argmax = -1; /* state restored or rewound: the last logits are not ours */
    /* the MTP KV and hidden are unknown until kz_seq_mtp_restore: cleared, and no draft until a
     * forward gives the hidden (mtp_n -1); drafts are only proposals, the output stays exact */
    s->mtp_n = n_past ? -1 : 0;
    s->mtp_pend = 0;
    s->rec_valid = 0;
    if (s->mtp_h) memset(s->mtp_h, 0, (size_t)s->m->hp.n_embd * sizeof(float));
    if (s->mtp_on && n_past) kz_seq_mtp_kv_clear(s, n_past);
    return 0;
}

/* ---------------- appending: invariants and cancel ---------------- */

int kz_seq_check_append(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, char *err, size_t errlen) {
    if (!m || !s || s->m != m) { kz_seterr(err, errlen, "kz_forward: sequence does not belong to this model"); return -1; }
    if (n <= 0 || !tokens) { kz_seterr(err, errlen, "kz_forward: no tokens given (n = %d)", n); return -1; }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) {
            kz_seterr(err, errlen, "token id %d at index %d is out of range [0, %d)", (int)tokens[i], i, m->hp.n_vocab);
            return -1;
        }
    if (n > s->n_ctx - s->n_past) {
        kz_seterr(err, errlen, "context full: %d tokens in the sequence + %d new > n_ctx %d", s->n_past, n, s->n_ctx);
        return -1;
    }
    /* a cancellable prefill needs the copy of the GDN states it may roll back to (allocated once) */
    if (s->abort_flag && n > 1 && !s->state_bak && gdn_state_floats(s)) {
        s->state_bak = malloc(gdn_state_floats(s) * sizeof(float));
        if (!s->state_bak) {
            kz_seterr(err, errlen, "out of memory for the %.1f MiB cancel copy of the recurrent state",
                      gdn_state_floats(s) * sizeof(float) / 1048576.0);
            return -1;
        }
    }
    return 0;
}

void kz_seq_set_abort(kz_seq *s, const atomic_int *flag) {
    if (s) s->abort_flag = flag;
}

void kz_seq_set_mm_observer(kz_seq *s, kz_mm_observer fn, void *user) {
    if (!s) return;
    s->observe = fn;
    s->observe_user = user;
}

/* copy (save = 1) or restore (save = 0) GDN layer idx's conv + ssm state */
static void gdn_state_copy(kz_seq *s, int idx, int save) {
    const size_t nl = (size_t)s->m->hp.n_gdn_layers;
    float *live[2] = {s->conv_state + (size_t)idx * s->conv_per_layer, s->ssm_state + (size_t)idx * s->ssm_per_layer};
    float *bak[2] = {s->state_bak + (size_t)idx * s->conv_per_layer,
                     s->state_bak + s->conv_per_layer * nl + (size_t)idx * s->ssm_per_layer};
    const size_t len[2] = {s->conv_per_layer, s->ssm_per_layer};
    for (int k = 0; k < 2; k++) {
        if (save) memcpy(bak[k], live[k], len[k] * sizeof(float));
        else memcpy(live[k], bak[k], len[k] * sizeof(float));
    }
}

void kz_seq_chunk_begin(kz_seq *s, int n) {
    const int abortable = s->abort_flag && n > 1 && (s->state_bak || !gdn_state_floats(s));
    s->chunk_abort = abortable ? s->abort_flag : NULL;
    s->n_gdn_saved = 0;
}

void kz_seq_gdn_save(kz_seq *s, int idx) {
    if (!s->chunk_abort) return;
    gdn_state_copy(s, idx, 1);
    s->n_gdn_saved = idx + 1;
}

int kz_seq_chunk_end(kz_seq *s) {
    const int cancelled = seq_aborted(s);
    if (cancelled)
        for (int k = 0; k < s->n_gdn_saved; k++) gdn_state_copy(s, k, 0);
    s->chunk_abort = NULL;
    return cancelled;
}

/* ---------------- memory budget ---------------- */

int kz_seq_plan_bytes(const kz_model *m, int n_ctx, int n_batch, int n_threads, kz_kv_type kv, kz_seq_bytes *out) {
    memset(out, 0, sizeof *out);
    if (!m || n_ctx <= 0 || n_batch <= 0 || n_threads <= 0) return -1;
    const kz_hparams *hp = &m->hp;
    if (n_batch > n_ctx) n_batch = n_ctx;
    kz_seq s; /* sizes only: plan_scratch reads m, n_ctx, n_batch, nth and kv_type */
    memset(&s, 0, sizeof s);
    s.m = m;
    s.n_ctx = n_ctx;
    s.n_batch = n_batch;
    s.nth = n_threads > 512 ? 512 : n_threads;
    s.kv_type = kv;
    arena plan = {NULL, 0, 1};
    plan_scratch(&s, &plan);
    const size_t row_bytes = kz_kv_type_row_bytes(kv, hp->head_dim);
    const size_t conv = (size_t)hp->ssm_conv_dim * (size_t)(hp->ssm_d_conv > 0 ? hp->ssm_d_conv - 1 : 0);
    const size_t ssm = (size_t)hp->ssm_n_v_heads * (size_t)hp->ssm_head_v_dim * (size_t)hp->ssm_d_state;
    size_t kvl = 0;
    int ok = plan.ok && mul3(&kvl, (size_t)hp->n_head_kv * row_bytes, (size_t)n_ctx, 1) &&
             mul3(&out->kv, kvl, 2, (size_t)hp->n_attn_layers) &&
             mul3(&out->gdn_state, conv + ssm, sizeof(float), (size_t)hp->n_gdn_layers) &&
             mul3(&out->arena, plan.off, sizeof(float), 1);
    out->mm_work = mm_work_bytes_upto(m, n_batch);
    out->attn_cnt = s.attn.max_items * sizeof(atomic_int);
    return ok ? 0 : -1;
}

/* rewrite one byte per page with its own value: a write fault makes the page resident, nothing changes */
static void touch_pages(void *p, size_t bytes) {
    volatile char *c = p;
    for (size_t o = 0; p && o < bytes; o += 4096) c[o] = c[o];
}

void kz_seq_touch(kz_seq *s) {
    kz_seq_bytes b;
    if (!s || kz_seq_plan_bytes(s->m, s->n_ctx, s->n_batch, s->nth, s->kv_type, &b) != 0) return;
    touch_pages(s->kv_mem, b.kv);
    touch_pages(s->arena, b.arena);
    touch_pages(s->mm_work, b.mm_work);
}
