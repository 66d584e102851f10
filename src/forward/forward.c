/* Per-sequence state (KV cache, GDN conv/recurrent state, scratch, worker pool) and the
 * forward pass. Prefill runs chunks of up to n_batch tokens through each layer together
 * (matmuls over the chunk); the GDN core runs chunkwise (kz_gdn_chunked) for >= 2 tokens and
 * token-by-token (exact recurrent form) for decode.
 *
 * Abort (kz_seq_set_abort): a prefill chunk checks the flag at every layer and before the MLP,
 * so a cancel lands within a fraction of one layer, not after up to n_batch tokens. The chunk
 * is then dropped whole: KV rows past n_past are simply not counted, and the GDN layers it
 * already ran get their conv + recurrent state back from a copy taken just before each one
 * ran (one extra copy of the GDN state, allocated at the first abortable prefill). */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "nn/attention.h"
#include "nn/gdn.h"
#include "model/model.h"
#include "nn/ops.h"
#include "model/types.h"

/* attention work items wanted per layer before positions get split (>= typical thread counts) */
#define KZ_ATTN_MIN_ITEMS 16
/* batches of at least this many tokens use the tiled attention (kz_attn_tile); the choice
 * depends on sizes only, so results never depend on the thread count */
#define KZ_ATTN_TILE_MIN 16

struct kz_seq {
    const kz_model *m;
    int n_ctx, n_batch, n_past, nth;
    kz_kv_type kv_type;
    kz_pool *pool;
    kz_kv_layer *kv;        /* [n_attn_layers] */
    void *kv_mem;
    float *conv_state;      /* [n_gdn][conv_dim][d_conv-1] raw inputs, oldest first */
    float *ssm_state;       /* [n_gdn][H_v][dv][dk] */
    size_t conv_per_layer, ssm_per_layer;
    /* scratch for one chunk of n_batch tokens */
    float *x, *hn, *t1, *t2, *t3, *t4, *t5, *out, *rope, *attn_scr;
    float *attn_ml, *attn_acc;      /* attention partials: [max_items][2*n_rep], [max_items][n_rep*hd] */
    atomic_int *attn_cnt;           /* [max_items] splits done per (token, kv head) */
    size_t attn_max_items;
    size_t cap1, cap2, cap3, cap4;  /* per-token capacity (floats) of t1..t4 */
    size_t ld1, ld2, ld3, ld4;      /* current row strides of t1..t4: set per layer kind, equal to
                                     * the row width because kz_matmul reads X with stride n_in */
    size_t attn_scr_per_thread;
    void *mm_work;
    int64_t logits_argmax; /* kz_seq_logits_argmax */
    unsigned char *rope_use_pos;
    float *scratch;
    float *gdn_scr;         /* chunkwise GDN scratch, gdn_scr_per_thread floats per thread */
    size_t gdn_scr_per_thread;
    float *tile_scr;        /* tiled attention scratch, tile_scr_per_thread floats per thread */
    size_t tile_scr_per_thread;
    const atomic_int *abort_flag; /* non-NULL: prefill chunks stop when it becomes non-zero */
    const atomic_int *chunk_abort; /* abort_flag while an abortable chunk runs, else NULL */
    float *state_bak;       /* GDN conv + ssm state before the current chunk, same layout */
    int prof_on;
    double prof_t;          /* clock at the end of the last profiled part */
    kz_profile prof;
};

/* ---------------- profiling ---------------- */

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
/* the time since the previous mark goes to part */
static inline void prof(kz_seq *s, int part) {
    if (!s->prof_on) return;
    const double t = prof_now();
    s->prof.ms[part] += t - s->prof_t;
    s->prof_t = t;
}

void kz_seq_profile_enable(kz_seq *s, int on) {
    if (!s) return;
    s->prof_on = on != 0;
    memset(&s->prof, 0, sizeof s->prof);
}
const kz_profile *kz_seq_profile(const kz_seq *s) { return s ? &s->prof : NULL; }

const char *kz_prof_name(int part) {
    static const char *names[KZ_PROF_COUNT] = {"embed", "norm+residual", "attn matmuls", "attention",
                                               "gdn matmuls", "gdn conv+qk", "gdn core+norm",
                                               "ffn matmuls", "ffn swiglu", "lm head"};
    return part >= 0 && part < KZ_PROF_COUNT ? names[part] : "?";
}

void kz_profile_print(const kz_profile *p, FILE *f) {
    double tot = 0;
    for (int i = 0; i < KZ_PROF_COUNT; i++) tot += p->ms[i];
    fprintf(f, "profile: %ld tokens in %ld forward calls, %.1f ms\n", p->tokens, p->calls, tot);
    fprintf(f, "  %-14s %10s %7s %10s\n", "part", "ms", "%", "us/token");
    for (int i = 0; i < KZ_PROF_COUNT; i++)
        fprintf(f, "  %-14s %10.2f %6.1f%% %10.2f\n", kz_prof_name(i), p->ms[i], tot > 0 ? 100.0 * p->ms[i] / tot : 0.0,
                p->tokens ? 1e3 * p->ms[i] / (double)p->tokens : 0.0);
}

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* a*b (+ c) in size_t with overflow detection; returns 0 on overflow */
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

/* The recurrent state (48 MiB on the 4B) is read and written whole every token: on 2 MiB pages
 * where the kernel offers them (madvise mode), so its stream neither misses the TLB every 4 KiB
 * nor restarts the hardware prefetcher there. Xeon host of 2026-12-04, the 4B's 24 layers of
 * decode GDN core alone between 2 GiB reads (2 threads): 2.07-2.14 ms a token against 2.30-2.53
 * on 4 KiB pages. Zeroed; released with free(). */
static void *alloc_state(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advisory: ignore failure */
#endif
    memset(p, 0, bytes);
    return p;
}

/* kz_matmul's work bytes for nw matrices applied to B rows together */
static size_t mm_work(const kz_wmat *const *w, int nw, int B) {
    kz_mm a = {.nw = nw, .n_tok = B};
    for (int i = 0; i < nw; i++) a.w[i] = w[i];
    return kz_matmul_work_bytes(&a);
}

static size_t mm_work_max(const kz_model *m, int B) {
    const kz_wmat *out = &m->output;
    size_t w = mm_work(&out, 1, B);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const kz_layer *l = &m->layers[il];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j]->data) w = maxz(w, mm_work(&ws[j], 1, B));
        /* the groups applied to one input together (mm3/mm4 below): one quantised X per act type */
        const kz_wmat *g_attn[] = {&l->wq, &l->wk, &l->wv}, *g_gdn[] = {&l->wqkv, &l->wgate, &l->wbeta, &l->walpha},
                      *g_ffn[] = {&l->ffn_gate, &l->ffn_up};
        if (l->wq.data) w = maxz(w, mm_work(g_attn, 3, B));
        if (l->wqkv.data) w = maxz(w, mm_work(g_gdn, 4, B));
        if (l->ffn_gate.data) w = maxz(w, mm_work(g_ffn, 2, B));
    }
    return w;
}

kz_seq *kz_seq_new(const kz_model *m, int n_ctx, int n_batch, int n_threads, kz_kv_type kv,
                   char *err, size_t errlen) {
    if (!m) { seterr(err, errlen, "no model"); return NULL; }
    const kz_hparams *hp = &m->hp;
    if (kv != KZ_KV_F32 && kv != KZ_KV_F16 && kv != KZ_KV_Q8_0) {
        seterr(err, errlen, "unknown KV cache type %d (use f32, f16 or q8_0)", (int)kv);
        return NULL;
    }
    if (kv == KZ_KV_Q8_0 && hp->n_attn_layers && hp->head_dim % 32) {
        seterr(err, errlen, "KV cache type q8_0 needs a head_dim multiple of 32 (this model: %d); use f16",
               hp->head_dim);
        return NULL;
    }
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_batch <= 0) n_batch = 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (n_threads <= 0) n_threads = m->n_threads > 0 ? m->n_threads : 1;

    kz_seq *s = calloc(1, sizeof *s);
    if (!s) { seterr(err, errlen, "out of memory"); return NULL; }
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->logits_argmax = -1;
    s->kv_type = kv;

    /* ---- sizes (all overflow-checked) ---- */
    const size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    const size_t q_out = (hp->arch == KZ_ARCH_QWEN35 ? 2u : 1u) * (size_t)hp->n_head * hd;
    const size_t kvd = (size_t)hp->n_head_kv * hd, ao = (size_t)hp->n_head * hd;
    const size_t C = (size_t)hp->ssm_conv_dim, vd = (size_t)hp->ssm_d_inner, Hv = (size_t)hp->ssm_n_v_heads;
    const size_t F = (size_t)hp->n_ff;
    const size_t row_bytes = kz_kv_type_row_bytes(kv, hp->head_dim);
    size_t kv_layer_bytes = 0, kv_bytes = 0, total = 0;
    int ok = mul3(&kv_layer_bytes, (size_t)hp->n_head_kv * row_bytes, (size_t)n_ctx, 1) &&
             mul3(&kv_bytes, kv_layer_bytes, 2, (size_t)hp->n_attn_layers);
    s->conv_per_layer = C * (size_t)(hp->ssm_d_conv > 0 ? hp->ssm_d_conv - 1 : 0);
    s->ssm_per_layer = Hv * (size_t)hp->ssm_head_v_dim * (size_t)hp->ssm_d_state;
    size_t state_floats = (s->conv_per_layer + s->ssm_per_layer) * (size_t)hp->n_gdn_layers;
    s->cap1 = maxz(maxz(q_out, C), F);
    s->cap2 = maxz(maxz(kvd, vd), F);
    s->cap3 = maxz(kvd, C);
    s->cap4 = maxz(ao, vd);
    s->pool = kz_pool_new(n_threads);
    if (!s->pool) { seterr(err, errlen, "cannot create a pool of %d threads", n_threads); goto fail; }
    s->nth = kz_pool_size(s->pool);
    const size_t n_rep = (size_t)(hp->n_head / hp->n_head_kv);
    /* prefill: one item per (token, kv head); decode: position splits, < 2 x KZ_ATTN_MIN_ITEMS items.
     * A model without attention layers needs none of it (and must not pay n_ctx-sized scratch). */
    const int has_attn = hp->n_attn_layers > 0;
    if (has_attn) {
        const kz_kv_layer probe = {hp->n_head, hp->n_head_kv, hp->head_dim, n_ctx, (int)kv, NULL, NULL, NULL};
        s->attn_scr_per_thread = kz_attn_scratch_floats(&probe, n_ctx);
    }
    s->attn_max_items = has_attn ? maxz(B * (size_t)hp->n_head_kv, 2 * KZ_ATTN_MIN_ITEMS + (size_t)hp->n_head_kv) : 0;
    size_t n_scr = 0, tmp = 0;
    /* x, hn, out: B*E; t1..t4; t5: B*2*Hv; rope: B*n_rot; attention scratch per thread */
    ok = ok && mul3(&tmp, B, E, 3) && add_to(&n_scr, tmp) && mul3(&tmp, B, s->cap1, 1) && add_to(&n_scr, tmp) &&
         mul3(&tmp, B, s->cap2, 1) && add_to(&n_scr, tmp) && mul3(&tmp, B, s->cap3, 1) && add_to(&n_scr, tmp) &&
         mul3(&tmp, B, s->cap4, 1) && add_to(&n_scr, tmp) && mul3(&tmp, B, Hv, 2) && add_to(&n_scr, tmp) &&
         mul3(&tmp, B, (size_t)hp->n_rot, 1) && add_to(&n_scr, tmp) &&
         mul3(&tmp, s->attn_scr_per_thread, (size_t)s->nth, 1) && add_to(&n_scr, tmp) &&
         mul3(&tmp, s->attn_max_items, n_rep, hd + 2) && add_to(&n_scr, tmp) &&
         mul3(&tmp, n_scr, sizeof(float), 1);
    /* a one-token matmul also keeps per-block terms after its row (matmul.c), which a batch of
     * n_batch rows need not cover when the rows are short: the larger of the two */
    size_t scr_bytes = tmp, mmw = ok ? maxz(mm_work_max(m, n_batch), mm_work_max(m, 1)) : 0, gdn_bytes = 0;
    if (hp->n_gdn_layers) {
        const kz_gdn_shape sh = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim};
        s->gdn_scr_per_thread = kz_gdn_chunk_scratch_floats(&sh);
        ok = ok && mul3(&gdn_bytes, s->gdn_scr_per_thread, (size_t)s->nth, sizeof(float));
    }
    size_t tile_bytes = 0;
    if (hp->n_attn_layers && n_batch >= KZ_ATTN_TILE_MIN) {
        const kz_kv_layer probe = {hp->n_head, hp->n_head_kv, hp->head_dim, 1, (int)kv, NULL, NULL, NULL};
        s->tile_scr_per_thread = kz_attn_tile_scratch_floats(&probe, KZ_ATTN_BQ);
        ok = ok && mul3(&tile_bytes, s->tile_scr_per_thread, (size_t)s->nth, sizeof(float));
    }
    ok = ok && add_to(&total, kv_bytes) && mul3(&tmp, state_floats, sizeof(float), 1) && add_to(&total, tmp) &&
         add_to(&total, scr_bytes) && add_to(&total, mmw) && add_to(&total, gdn_bytes) && add_to(&total, tile_bytes);
    if (!ok) {
        seterr(err, errlen, "n_ctx %d / n_batch %d too large: state size overflows", n_ctx, n_batch);
        goto fail;
    }
    size_t phys = phys_mem_bytes();
    if (total > phys) {
        seterr(err, errlen, "n_ctx %d needs %.2f GiB of sequence state (KV %.2f GiB), more than the %.2f GiB of RAM; "
               "use a smaller n_ctx or --kv f16",
               n_ctx, total / 1073741824.0, kv_bytes / 1073741824.0, phys / 1073741824.0);
        goto fail;
    }

    /* ---- allocate ---- */
    if (hp->n_attn_layers) {
        s->kv = calloc((size_t)hp->n_attn_layers, sizeof *s->kv);
        s->kv_mem = malloc(kv_bytes);
        if (!s->kv || !s->kv_mem) goto oom;
        for (int i = 0; i < hp->n_attn_layers; i++) {
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
    s->scratch = malloc(scr_bytes);
    if (gdn_bytes && !(s->gdn_scr = malloc(gdn_bytes))) goto oom;
    if (tile_bytes && !(s->tile_scr = malloc(tile_bytes))) goto oom;
    s->mm_work = malloc(mmw ? mmw : 1);
    s->rope_use_pos = malloc((size_t)(hp->n_rot / 2 + 1));
    if (s->attn_max_items && !(s->attn_cnt = malloc(s->attn_max_items * sizeof *s->attn_cnt))) goto oom;
    if (!s->scratch || !s->mm_work || !s->rope_use_pos) goto oom;
    float *p = s->scratch;
    s->x = p; p += B * E;
    s->hn = p; p += B * E;
    s->out = p; p += B * E;
    s->t1 = p; p += B * s->cap1;
    s->t2 = p; p += B * s->cap2;
    s->t3 = p; p += B * s->cap3;
    s->t4 = p; p += B * s->cap4;
    s->t5 = p; p += B * Hv * 2;
    s->rope = p; p += B * (size_t)hp->n_rot;
    s->attn_scr = p; p += s->attn_scr_per_thread * (size_t)s->nth;
    s->attn_ml = p; p += s->attn_max_items * n_rep * 2;
    s->attn_acc = p;
    kz_imrope_mask(s->rope_use_pos, hp->n_rot, hp->rope_sections);
    return s;
oom:
    seterr(err, errlen, "out of memory allocating sequence state for n_ctx %d (%.2f GiB)", n_ctx,
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
    free(s->scratch);
    free(s->gdn_scr);
    free(s->tile_scr);
    free(s->mm_work);
    free(s->rope_use_pos);
    free(s->attn_cnt);
    free(s);
}

void kz_seq_reset(kz_seq *s) {
    if (!s) return;
    const kz_hparams *hp = &s->m->hp;
    if (s->conv_state)
        memset(s->conv_state, 0, (s->conv_per_layer + s->ssm_per_layer) * (size_t)hp->n_gdn_layers * sizeof(float));
    s->n_past = 0;
    s->logits_argmax = -1;
}

int kz_seq_n_past(const kz_seq *s) { return s ? s->n_past : 0; }

void kz_seq_view_get(kz_seq *s, kz_seq_view *v) {
    const kz_hparams *hp = &s->m->hp;
    v->n_past = s->n_past;
    v->n_ctx = s->n_ctx;
    v->kv_type = s->kv_type;
    v->n_kv_layers = hp->n_attn_layers;
    v->kv = s->kv;
    v->conv = s->conv_state;
    v->ssm = s->ssm_state;
    v->n_conv = s->conv_per_layer * (size_t)hp->n_gdn_layers;
    v->n_ssm = s->ssm_per_layer * (size_t)hp->n_gdn_layers;
}

int kz_seq_set_n_past(kz_seq *s, int n_past) {
    if (!s || n_past < 0 || n_past > s->n_ctx) return -1;
    s->n_past = n_past;
    s->logits_argmax = -1; /* state restored or rewound: the last logits are not ours */
    return 0;
}
int kz_seq_n_ctx(const kz_seq *s) { return s ? s->n_ctx : 0; }

/* ---------------- parallel tasks ---------------- */

static int chunk_aborted(const kz_seq *s);
static void run_task(kz_seq *s, kz_task_fn fn, void *arg) {
    if (chunk_aborted(s)) return;
    kz_pool_run(s->pool, fn, arg);
}

typedef struct {
    float *src;
    const float *add; /* non-NULL: src += add first (the residual add fused into the norm) */
    float *dst;
    const float *w;
    int n, rows;
    float eps;
} norm_task;

static void norm_fn(void *arg, int ith, int nth) {
    const norm_task *a = arg;
    long lo, hi;
    kz_split(a->rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        float *x = a->src + (size_t)r * a->n, *y = a->dst + (size_t)r * a->n;
        if (a->add) kz_add_rmsnorm(x, a->add + (size_t)r * a->n, y, a->w, a->n, a->eps);
        else kz_rmsnorm(y, x, a->w, a->n, a->eps);
    }
}

/* dst = rmsnorm(src (+= add when add is not NULL)) for rows of n floats, rows on the pool */
static void run_norm(kz_seq *s, float *src, const float *add, float *dst, const float *w, int n, int rows) {
    norm_task a = {src, add, dst, w, n, rows, s->m->hp.rms_eps};
    if (rows == 1) norm_fn(&a, 0, 1);
    else run_task(s, norm_fn, &a);
}

/* A one-row norm handed to the dispatch of the matmul group that reads its output (kz_mm_pre:
 * the caller runs it there while the other threads prefetch their first weights, instead of
 * alone before the dispatch while they wait; with no other threads it simply runs first) */
typedef struct {
    kz_seq *s;
    norm_task t;
    kz_mm_pre pre;
} norm_pre;
static void norm_pre_fn(void *arg) {
    norm_pre *p = arg;
    norm_fn(&p->t, 0, 1);
    prof(p->s, KZ_PROF_NORM);
}
/* run_norm for rows > 1 or a cancelled chunk (returns NULL), else the norm as np->pre */
static const kz_mm_pre *norm_or_pre(kz_seq *s, norm_pre *np, float *src, const float *add, float *dst,
                                    const float *w, int n, int rows) {
    if (rows != 1 || chunk_aborted(s)) {
        run_norm(s, src, add, dst, w, n, rows);
        prof(s, KZ_PROF_NORM);
        return NULL;
    }
    *np = (norm_pre){s, {src, add, dst, w, n, rows, s->m->hp.rms_eps}, {norm_pre_fn, np}};
    return &np->pre;
}

typedef struct {
    float *a;
    const float *b;
    size_t lda, ldb;
    int n, rows;
} swiglu_task;

static void swiglu_fn(void *arg, int ith, int nth) {
    const swiglu_task *t = arg;
    long lo, hi;
    kz_split((long)t->rows * t->n, ith, nth, &lo, &hi);
    /* split the flat index range so a single token's row also uses all threads */
    while (lo < hi) {
        long r = lo / t->n, c = lo % t->n;
        long e = hi - lo < t->n - c ? hi - lo : t->n - c;
        kz_swiglu(t->a + (size_t)r * t->lda + c, t->b + (size_t)r * t->ldb + c, (int)e);
        lo += e;
    }
}

/* SwiGLU rows of fewer elements stay on the calling thread (a dispatch would cost about as
 * much). Not tuned: the 4B's 9216-wide decode row was measured (0.24-0.30 ms a token on the
 * pool against 0.35-0.38 on one thread); the 0.8B's 3584 stays below it. */
#ifndef KZ_SWIGLU_PAR_MIN
#define KZ_SWIGLU_PAR_MIN 4096
#endif

/* attention: per-token q/k norm + rope + KV store */
typedef struct {
    kz_seq *s;
    const kz_layer *ly;
    kz_kv_layer *kv;
    int n, p0, gated;
    size_t ldq;
} attn_prep_task;

/* token t's item i: q head i (i < n_head), else kv head i - n_head (k norm + rope, then its K
 * and V rows into the cache) */
static void attn_prep_item(const attn_prep_task *a, long t, int i) {
    const kz_hparams *hp = &a->s->m->hp;
    const int hd = hp->head_dim, qh = a->gated ? 2 * hd : hd;
    const float *cs = a->s->rope + (size_t)t * hp->n_rot;
    if (i < hp->n_head) {
        float *qh_ = a->s->t1 + (size_t)t * a->ldq + (size_t)i * qh;
        kz_rmsnorm(qh_, qh_, a->ly->q_norm, hd, hp->rms_eps);
        kz_rope_neox(qh_, hp->n_rot, cs);
        return;
    }
    const int g = i - hp->n_head;
    float *kg = a->s->t2 + (size_t)t * a->s->ld2 + (size_t)g * hd;
    kz_rmsnorm(kg, kg, a->ly->k_norm, hd, hp->rms_eps);
    kz_rope_neox(kg, hp->n_rot, cs);
    kz_kv_store_head(a->kv, a->p0 + (int)t, g, kg, a->s->t3 + (size_t)t * a->s->ld3 + (size_t)g * hd);
}

static void attn_prep_fn(void *arg, int ith, int nth) {
    const attn_prep_task *a = arg;
    const kz_hparams *hp = &a->s->m->hp;
    long lo, hi;
    kz_split(a->n, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        for (int i = 0; i < hp->n_head + hp->n_head_kv; i++) attn_prep_item(a, t, i);
}

typedef struct {
    kz_seq *s;
    const kz_kv_layer *kv;
    int n, p0, gated, n_split;
    size_t ldq;
    kz_dyn next;     /* next work item */
    atomic_int *cnt; /* splits done per (token, kv head) */
    const attn_prep_task *prep; /* one token: the heads' prep items first, in the same dispatch */
    kz_dyn prep_next;
    kz_phase prep_done;
} attn_task;

/* merge the splits of (token, kv head) it, then the sigmoid output gate (qwen35) */
static void attn_merge_one(const attn_task *a, long it) {
    const kz_hparams *hp = &a->s->m->hp;
    const int hd = hp->head_dim, Hkv = hp->n_head_kv, n_rep = hp->n_head / Hkv;
    const int qh = a->gated ? 2 * hd : hd, ns = a->n_split;
    const int t = (int)(it / Hkv), g = (int)(it % Hkv);
    float *o = a->s->t4 + (size_t)t * a->s->ld4 + (size_t)g * n_rep * hd;
    kz_attn_merge(n_rep, hd, ns, a->s->attn_ml + (size_t)it * ns * 2 * n_rep,
                  a->s->attn_acc + (size_t)it * ns * n_rep * hd, o, (size_t)hd);
    if (a->gated)
        for (int r = 0; r < n_rep; r++) {
            const float *gate = a->s->t1 + (size_t)t * a->ldq + (size_t)(g * n_rep + r) * qh + hd;
            kz_mul_sigmoid(o + (size_t)r * hd, gate, hd);
        }
}

/* item = (token t, kv head g, position split sp): partial softmax of the group's q heads, taken
 * from a shared counter; whoever completes the last split of a (token, kv head) merges it, so
 * the merge needs no second dispatch */
static void attn_fn(void *arg, int ith, int nth) {
    (void)nth;
    attn_task *a = arg;
    const kz_hparams *hp = &a->s->m->hp;
    const int hd = hp->head_dim, Hkv = hp->n_head_kv, n_rep = hp->n_head / Hkv;
    const int qh = a->gated ? 2 * hd : hd, ns = a->n_split;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scr = a->s->attn_scr + (size_t)ith * a->s->attn_scr_per_thread;
    if (a->prep) { /* one token: its q heads and kv heads, then (all done) the attention items */
        const long n_prep = hp->n_head + Hkv;
        for (long i; (i = kz_dyn_take(&a->prep_next, 1)) < n_prep;) {
            attn_prep_item(a->prep, 0, (int)i);
            kz_phase_add(&a->prep_done, 1);
        }
        kz_phase_wait(&a->prep_done, n_prep);
    }
    const long n_items = (long)a->n * Hkv * ns;
    for (long it; (it = kz_dyn_take(&a->next, 1)) < n_items;) {
        const int t = (int)(it / ((long)Hkv * ns)), rem = (int)(it % ((long)Hkv * ns));
        const int g = rem / ns, sp = rem % ns;
        const int total = a->p0 + t + 1, len = (total + ns - 1) / ns;
        const int lo = sp * len, hi = lo + len < total ? lo + len : total;
        const float *q = a->s->t1 + (size_t)t * a->ldq + (size_t)g * n_rep * qh;
        kz_attn_partial(a->kv, g, lo, hi, q, (size_t)qh, scale, a->s->attn_ml + (size_t)it * 2 * n_rep,
                        a->s->attn_acc + (size_t)it * n_rep * hd, scr);
        /* acq_rel: the last one sees the other splits' partials */
        if (ns == 1 || atomic_fetch_add_explicit(&a->cnt[it / ns], 1, memory_order_acq_rel) == ns - 1)
            attn_merge_one(a, it / ns);
    }
}

/* prefill: item = (query block of KZ_ATTN_BQ tokens, kv head g), tiled attention + output gate */
static void attn_tile_fn(void *arg, int ith, int nth) {
    (void)nth;
    attn_task *a = arg;
    const kz_hparams *hp = &a->s->m->hp;
    const int hd = hp->head_dim, Hkv = hp->n_head_kv, n_rep = hp->n_head / Hkv;
    const int qh = a->gated ? 2 * hd : hd, nblk = (a->n + KZ_ATTN_BQ - 1) / KZ_ATTN_BQ;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scr = a->s->tile_scr + (size_t)ith * a->s->tile_scr_per_thread;
    const long n_items = (long)nblk * Hkv;
    /* shared counter, last blocks (the most positions) first */
    for (long k; (k = kz_dyn_take(&a->next, 1)) < n_items;) {
        const long it = n_items - 1 - k;
        const int b = (int)(it / Hkv), g = (int)(it % Hkv), t0 = b * KZ_ATTN_BQ;
        const int nt = a->n - t0 < KZ_ATTN_BQ ? a->n - t0 : KZ_ATTN_BQ;
        const float *q = a->s->t1 + (size_t)t0 * a->ldq + (size_t)g * n_rep * qh;
        float *o = a->s->t4 + (size_t)t0 * a->s->ld4 + (size_t)g * n_rep * hd;
        kz_attn_tile(a->kv, g, a->p0 + t0, nt, q, a->ldq, (size_t)qh, scale, o, a->s->ld4, scr);
        if (a->gated)
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < n_rep; r++) {
                    const float *gate = q + (size_t)t * a->ldq + (size_t)r * qh + hd;
                    float *oh = o + (size_t)t * a->s->ld4 + (size_t)r * hd;
                    kz_mul_sigmoid(oh, gate, hd);
                }
    }
}

/* GDN tasks */
typedef struct {
    kz_seq *s;
    const kz_layer *ly;
    float *conv_state, *ssm_state;
    int n;
    int n_runs; /* work items (conv units, value heads) in one run per thread */
    kz_run run[KZ_RUNS_MAX];
    kz_run run2[KZ_RUNS_MAX]; /* one dispatch (gdn_step_fn): the value heads' runs */
    long in_units;            /* conv units: q and k heads, then v heads */
    kz_phase in_done;         /* one dispatch: conv units + the gates finished */
} gdn_task;

/* conv + SiLU, then the q/k head L2 norms, of conv units [lo, hi): whole heads of the conv
 * channels [q heads | k heads | v heads], so a thread normalises the q/k heads it just convolved
 * (elementwise per head: the same bits as separate passes) */
static void gdn_in_units(const gdn_task *a, long lo, long hi) {
    const kz_hparams *hp = &a->s->m->hp;
    const int hk = hp->ssm_n_k_heads, dk = hp->ssm_d_state, dv = hp->ssm_head_v_dim;
    const long qk = 2L * hk;
    const long c0 = lo <= qk ? lo * dk : qk * dk + (lo - qk) * dv;
    const long c1 = hi <= qk ? hi * dk : qk * dk + (hi - qk) * dv;
    kz_gdn_conv((int)c0, (int)c1, a->n, hp->ssm_d_conv, a->s->t1, a->s->ld1, a->s->t3, a->s->ld3, a->ly->conv1d,
                a->conv_state);
    const float qs = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < a->n; t++) {
        float *row = a->s->t3 + (size_t)t * a->s->ld3;
        for (long u = lo; u < hi && u < qk; u++) {
            float *h = row + (size_t)u * dk;
            kz_l2norm(h, dk, hp->rms_eps);
            if (u < hk) kz_scale(h, dk, qs); /* q heads */
        }
    }
}

/* items [0, n) in one run per thread (threadpool.h), set before the dispatch publishes them */
static void gdn_runs_set(gdn_task *a, long n, int nth) {
    a->n_runs = nth < KZ_RUNS_MAX ? nth : KZ_RUNS_MAX;
    kz_runs_split(a->run, a->n_runs, n);
}

/* conv units (q heads, k heads: dk channels each; v heads: dv) in runs of adjacent channels per
 * thread, a quarter of what is left at a time; thread 0 also computes the gates. With done, each
 * finished unit (and the gates, as one more) is counted there. */
static void gdn_in_part(gdn_task *a, int ith, kz_phase *done) {
    const int Hv = a->s->m->hp.ssm_n_v_heads;
    int k = 0;
    int64_t c0, c1;
    while (kz_runs_next(a->run, a->n_runs, ith, 4, &k, &c0, &c1)) {
        gdn_in_units(a, (long)c0, (long)c1);
        if (done) kz_phase_add(done, (long)(c1 - c0));
    }
    if (ith == 0) {
        for (int t = 0; t < a->n; t++) {
            float *b = a->s->t5 + (size_t)t * 2 * Hv, *al = b + Hv;
            kz_gdn_gates(Hv, b, al, a->ly->dt_bias, a->ly->ssm_a, b, al); /* in place: b->beta, a->g */
        }
        if (done) kz_phase_add(done, 1);
    }
}
static void gdn_in_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_in_part(arg, ith, NULL);
}

/* the delta rule for value head j, then the gated RMSNorm of its outputs */
static void gdn_core_head(const gdn_task *a, int ith, int j) {
    const kz_hparams *hp = &a->s->m->hp;
    const kz_gdn_shape sh = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_d_state, hp->ssm_head_v_dim};
    const float *y = a->s->t3;
    const size_t kd = (size_t)hp->ssm_key_dim, Hv = (size_t)sh.n_v_heads;
    /* t5 holds per token [beta (Hv) | g (Hv)] */
    if (a->n >= 2)
        kz_gdn_chunked(&sh, a->n, y, y + kd, y + 2 * kd, a->s->ld3, a->s->t5 + Hv, a->s->t5, 2 * Hv, a->ssm_state,
                       a->s->t4, a->s->ld4, j, j + 1, a->s->gdn_scr + (size_t)ith * a->s->gdn_scr_per_thread);
    else
        kz_gdn_recurrent(&sh, a->n, y, y + kd, y + 2 * kd, a->s->ld3, a->s->t5 + Hv, a->s->t5, 2 * Hv, a->ssm_state,
                         a->s->t4, a->s->ld4, j, j + 1);
    const int dv = sh.dv;
    for (int t = 0; t < a->n; t++) {
        float *o = a->s->t4 + (size_t)t * a->s->ld4 + (size_t)j * dv;
        const float *z = a->s->t2 + (size_t)t * a->s->ld2 + (size_t)j * dv;
        kz_rmsnorm_gated(o, z, a->ly->ssm_norm, dv, hp->rms_eps);
    }
}

/* Value heads in runs (threadpool.h): a thread works through adjacent heads, whose states are
 * adjacent (64 KiB each on the 4B), so its state stream stays one ascending stream that the
 * prefetch ahead of the current row carries into the next head; with heads handed out one at a
 * time from a counter the two threads' heads interleaved and every head started cold. Xeon
 * host of 2026-12-04, the 4B's 24 layers of decode GDN core alone, 2 threads, state on 2 MiB
 * pages: 2.12-2.31 ms a token with contiguous halves against 2.38 interleaved. */
static void gdn_core_part(const gdn_task *a, kz_run *run, int ith) {
    int k = 0;
    int64_t c0, c1;
    while (kz_runs_next(run, a->n_runs, ith, UINT32_MAX, &k, &c0, &c1)) gdn_core_head(a, ith, (int)c0);
}
static void gdn_core_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_task *a = arg;
    gdn_core_part(a, a->run, ith);
}

/* one token: conv units + gates, then (once all are done: the heads read every q/k head and
 * the gates) the value heads, in one dispatch instead of two (a decode step pays a pool wake-up
 * and an end-of-dispatch wait per dispatch) */
static void gdn_step_fn(void *arg, int ith, int nth) {
    (void)nth;
    gdn_task *a = arg;
    gdn_in_part(a, ith, &a->in_done);
    kz_phase_wait(&a->in_done, a->in_units + 1);
    if (ith == 0) prof(a->s, KZ_PROF_GDN_CONV); /* the caller's clock (prof is caller-only) */
    gdn_core_part(a, a->run2, ith);
}

/* ---------------- layers ---------------- */

/* Once an abortable chunk sees the flag, every remaining op is skipped (its outputs are
 * dropped with the chunk), so the wait for a cancel is at most the op running at that moment. */
static int chunk_aborted(const kz_seq *s) {
    return s->chunk_abort && atomic_load(s->chunk_abort);
}

static void mm(kz_seq *s, const kz_wmat *w, const float *x, int n, float *y, size_t ldy) {
    if (chunk_aborted(s)) return;
    kz_matmul(s->pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n, .y = {y}, .ldy = {(int64_t)ldy},
                                .abort = s->chunk_abort, .work = s->mm_work});
}

/* nw matrices on the same input: X converted once, one pool dispatch for all their rows; pre
 * (one token, else NULL): the norm that makes X, run inside that dispatch (kz_mm_pre) */
static void mm_group(kz_seq *s, const kz_wmat *const *w, int nw, const float *x, int n, float *const *y,
                     const size_t *ldy, const kz_mm_pre *pre) {
    if (!pre && chunk_aborted(s)) return;
    kz_mm a = {.nw = nw, .x = x, .n_tok = pre ? 1 : n, .pre = pre, .abort = pre ? NULL : s->chunk_abort,
               .work = s->mm_work}; /* with pre: one token, rows of n_out */
    for (int i = 0; i < nw; i++) {
        a.w[i] = w[i];
        a.y[i] = y[i];
        a.ldy[i] = pre ? 0 : (int64_t)ldy[i];
    }
    kz_matmul(s->pool, &a);
}

static void layer_attn(kz_seq *s, const kz_layer *ly, int n, int p0, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    kz_kv_layer *kv = &s->kv[ly->state_idx];
    const int gated = hp->arch == KZ_ARCH_QWEN35;
    s->ld1 = (size_t)ly->wq.n_out;
    s->ld2 = s->ld3 = (size_t)ly->wk.n_out;
    s->ld4 = (size_t)ly->wo.n_in;
    {
        const kz_wmat *w[] = {&ly->wq, &ly->wk, &ly->wv};
        float *y[] = {s->t1, s->t2, s->t3};
        const size_t ld[] = {s->ld1, s->ld2, s->ld3};
        mm_group(s, w, 3, s->hn, n, y, ld, pre);
    }
    prof(s, KZ_PROF_ATTN_PROJ);
    attn_prep_task pt = {s, ly, kv, n, p0, gated, s->ld1};
    if (n > 1) run_task(s, attn_prep_fn, &pt); /* one token: in the attention's dispatch, below */
    if (n >= KZ_ATTN_TILE_MIN && s->tile_scr) {
        attn_task at = {s, kv, n, p0, gated, 1, s->ld1, {0}, NULL, NULL, {0}, {0}};
        run_task(s, attn_tile_fn, &at);
        prof(s, KZ_PROF_ATTN);
        mm(s, &ly->wo, s->t4, n, s->out, (size_t)hp->n_embd);
        prof(s, KZ_PROF_ATTN_PROJ);
        return;
    }
    /* decode (few items): split the positions too, so all threads get work. The split depends
     * only on the sizes, not on the thread count, so results are the same for any -t. */
    const long items = (long)n * hp->n_head_kv;
    int n_split = 1;
    if (items < KZ_ATTN_MIN_ITEMS) {
        n_split = (int)((KZ_ATTN_MIN_ITEMS + items - 1) / items);
        const int by_len = (p0 + n + 255) / 256; /* >= 256 positions per split */
        if (n_split > by_len) n_split = by_len;
        if (n_split < 1) n_split = 1;
    }
    attn_task at = {s, kv, n, p0, gated, n_split, s->ld1, {0}, s->attn_cnt, n == 1 ? &pt : NULL, {0}, {0}};
    for (long i = 0; i < items; i++) atomic_init(&s->attn_cnt[i], 0);
    run_task(s, attn_fn, &at); /* partials + merges + output gate */
    prof(s, KZ_PROF_ATTN);
    mm(s, &ly->wo, s->t4, n, s->out, (size_t)hp->n_embd);
    prof(s, KZ_PROF_ATTN_PROJ);
}

static void layer_gdn(kz_seq *s, const kz_layer *ly, int n, const kz_mm_pre *pre) {
    const kz_hparams *hp = &s->m->hp;
    const size_t Hv = (size_t)hp->ssm_n_v_heads;
    gdn_task gt = {.s = s, .ly = ly, .in_units = 2L * hp->ssm_n_k_heads + (long)Hv,
                   .conv_state = s->conv_state + (size_t)ly->state_idx * s->conv_per_layer,
                   .ssm_state = s->ssm_state + (size_t)ly->state_idx * s->ssm_per_layer, .n = n};
    s->ld1 = s->ld3 = (size_t)hp->ssm_conv_dim;
    s->ld2 = s->ld4 = (size_t)hp->ssm_d_inner;
    {
        const kz_wmat *w[] = {&ly->wqkv, &ly->wgate, &ly->wbeta, &ly->walpha};
        float *y[] = {s->t1, s->t2, s->t5, s->t5 + Hv};
        const size_t ld[] = {s->ld1, s->ld2, 2 * Hv, 2 * Hv};
        mm_group(s, w, 4, s->hn, n, y, ld, pre);
    }
    prof(s, KZ_PROF_GDN_PROJ);
    gdn_runs_set(&gt, gt.in_units, kz_pool_size(s->pool));
    if (n == 1) { /* conv + q/k norms + gates, then delta rule + gated norm, one dispatch */
        kz_runs_split(gt.run2, gt.n_runs, (long)Hv);
        atomic_init(&gt.in_done.done, 0);
        run_task(s, gdn_step_fn, &gt);
    } else {
        run_task(s, gdn_in_fn, &gt); /* conv + q/k norms + gates */
        prof(s, KZ_PROF_GDN_CONV);
        gdn_runs_set(&gt, (long)Hv, kz_pool_size(s->pool));
        run_task(s, gdn_core_fn, &gt); /* delta rule + gated norm */
    }
    prof(s, KZ_PROF_GDN_CORE);
    mm(s, &ly->wssm_out, s->t4, n, s->out, (size_t)hp->n_embd);
    prof(s, KZ_PROF_GDN_PROJ);
}

int64_t kz_seq_logits_argmax(const kz_seq *s) { return s ? s->logits_argmax : -1; }

void kz_seq_set_abort(kz_seq *s, const atomic_int *flag) {
    if (s) s->abort_flag = flag;
}

static size_t gdn_state_floats(const kz_seq *s) {
    return (s->conv_per_layer + s->ssm_per_layer) * (size_t)s->m->hp.n_gdn_layers;
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

/* one chunk of n <= n_batch tokens at positions p0..; logits rows [lrow0, n) -> lout.
 * Returns 0, or 1 when the abort flag stopped it (state as before the chunk). */
static int forward_chunk(kz_seq *s, const int32_t *tok, int n, int p0, float *lout, int lrow0) {
    const kz_model *m = s->m;
    const kz_hparams *hp = &m->hp;
    const int E = hp->n_embd;
    for (int t = 0; t < n; t++)
        kz_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tok[t] * m->tok_embd.row_bytes,
                       s->x + (size_t)t * E, E);
    if (hp->n_attn_layers)
        for (int t = 0; t < n; t++)
            kz_rope_table(s->rope + (size_t)t * hp->n_rot, hp->n_rot, p0 + t, hp->rope_base,
                          hp->arch == KZ_ARCH_QWEN35 ? s->rope_use_pos : NULL);
    prof(s, KZ_PROF_EMBED);
    /* decode steps are not split: a cancel waits for at most one of them */
    const int abortable = s->abort_flag && n > 1 && (s->state_bak || !gdn_state_floats(s));
    int n_saved = 0; /* GDN layers whose state this chunk changed (they run in state_idx order) */
    s->chunk_abort = abortable ? s->abort_flag : NULL;
#define KZ_ABORT_POINT                                                           \
    if (chunk_aborted(s)) {                                                      \
        for (int k = 0; k < n_saved; k++) gdn_state_copy(s, k, 0);               \
        s->chunk_abort = NULL;                                                   \
        return 1;                                                                \
    }
    /* each residual add (x += out) runs fused into the norm that follows it, on the pool */
    for (int il = 0; il < hp->n_layer; il++) {
        const kz_layer *ly = &m->layers[il];
        KZ_ABORT_POINT
        norm_pre np;
        const kz_mm_pre *pre = norm_or_pre(s, &np, s->x, il > 0 ? s->out : NULL, s->hn, ly->attn_norm, E, n);
        if (ly->is_gdn) {
            if (abortable) {
                gdn_state_copy(s, ly->state_idx, 1);
                n_saved = ly->state_idx + 1;
            }
            layer_gdn(s, ly, n, pre);
        } else {
            layer_attn(s, ly, n, p0, pre);
        }
        KZ_ABORT_POINT
        pre = norm_or_pre(s, &np, s->x, s->out, s->hn, ly->post_norm, E, n);
        s->ld1 = s->ld2 = (size_t)hp->n_ff;
        {
            const kz_wmat *w[] = {&ly->ffn_gate, &ly->ffn_up};
            float *y[] = {s->t1, s->t2};
            const size_t ld[] = {s->ld1, s->ld2};
            mm_group(s, w, 2, s->hn, n, y, ld, pre);
        }
        prof(s, KZ_PROF_FFN);
        if (n == 1 && !chunk_aborted(s)) { /* one token: the SwiGLU comes with the down projection's conversion */
            kz_matmul(s->pool, &(kz_mm){.w = {&ly->ffn_down}, .nw = 1, .n_tok = 1, .swiglu = {s->t1, s->t2},
                                        .y = {s->out}, .work = s->mm_work});
        } else {
            swiglu_task st = {s->t1, s->t2, s->ld1, s->ld2, hp->n_ff, n};
            if ((long)n * hp->n_ff < KZ_SWIGLU_PAR_MIN) swiglu_fn(&st, 0, 1);
            else run_task(s, swiglu_fn, &st);
            prof(s, KZ_PROF_FFN_ACT);
            mm(s, &ly->ffn_down, s->t1, n, s->out, (size_t)E);
        }
        prof(s, KZ_PROF_FFN);
    }
    if (lout && lrow0 < n) {
        /* the last layer's residual add, only for the rows the LM head reads (x dies with the chunk) */
        const int nr = n - lrow0;
        norm_pre np;
        const kz_mm_pre *pre = norm_or_pre(s, &np, s->x + (size_t)lrow0 * E,
                                           hp->n_layer > 0 ? s->out + (size_t)lrow0 * E : NULL, s->hn,
                                           m->output_norm, E, nr);
        if (nr == 1 && !chunk_aborted(s)) /* one row: its argmax comes along (greedy decoding) */
            kz_matmul(s->pool, &(kz_mm){.w = {&m->output}, .nw = 1, .x = s->hn, .n_tok = 1, .y = {lout}, .pre = pre,
                                        .argmax = &s->logits_argmax, .work = s->mm_work});
        else
            mm(s, &m->output, s->hn, nr, lout, (size_t)hp->n_vocab);
        prof(s, KZ_PROF_HEAD);
    }
    KZ_ABORT_POINT /* a cancel during the LM head: its logits were skipped */
    s->chunk_abort = NULL;
    return 0;
#undef KZ_ABORT_POINT
}

int kz_forward(const kz_model *m, kz_seq *s, const int32_t *tokens, int n, float *logits,
               int want_all, char *err, size_t errlen) {
    if (!m || !s || s->m != m) { seterr(err, errlen, "kz_forward: sequence does not belong to this model"); return -1; }
    if (n <= 0 || !tokens) { seterr(err, errlen, "kz_forward: no tokens given (n = %d)", n); return -1; }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) {
            seterr(err, errlen, "token id %d at index %d is out of range [0, %d)", (int)tokens[i], i, m->hp.n_vocab);
            return -1;
        }
    if (n > s->n_ctx - s->n_past) {
        seterr(err, errlen, "context full: %d tokens in the sequence + %d new > n_ctx %d", s->n_past, n, s->n_ctx);
        return -1;
    }
    if (s->abort_flag && n > 1 && !s->state_bak && gdn_state_floats(s)) {
        s->state_bak = malloc(gdn_state_floats(s) * sizeof(float));
        if (!s->state_bak) {
            seterr(err, errlen, "out of memory for the %.1f MiB cancel copy of the recurrent state",
                   gdn_state_floats(s) * sizeof(float) / 1048576.0);
            return -1;
        }
    }
    s->logits_argmax = -1;
    if (s->prof_on) {
        s->prof_t = prof_now();
        s->prof.tokens += n;
        s->prof.calls++;
    }
    for (int i0 = 0; i0 < n; i0 += s->n_batch) {
        const int nb = n - i0 < s->n_batch ? n - i0 : s->n_batch;
        float *lout = NULL;
        int lrow0 = nb;
        if (logits) {
            if (want_all) { lout = logits + (size_t)i0 * m->hp.n_vocab; lrow0 = 0; }
            else if (i0 + nb == n) { lout = logits; lrow0 = nb - 1; }
        }
        if (forward_chunk(s, tokens + i0, nb, s->n_past, lout, lrow0)) {
            seterr(err, errlen, "cancelled after %d of %d tokens", i0, n);
            return KZ_FWD_ABORTED;
        }
        s->n_past += nb;
    }
    return 0;
}
