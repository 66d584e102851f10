/* Y = X W^T for a GGUF weight matrix: activations are quantised once into the weight's
 * activation type, then the output rows are split over the pool's threads (in multiples of 8
 * rows, so SIMD tiles stay full). Decode (1 token): each thread runs the type's gemm kernel over
 * its rows once, streaming every weight byte once. Prefill: blocks of MM_RB rows x MM_TB
 * tokens, so a row block stays in cache while the token blocks stream by; inside a block the
 * kernel works in register tiles (e.g. 4 rows x 4 tokens) that decode each weight block once
 * per tile. Every output element equals the type's vec_dot of the same rows bit for bit
 * whatever the tiling (see kz_qtraits), so results are identical across thread counts and
 * batch sizes. */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sys/cpu.h"
#include "nn/ops.h"
#include "matmul/matmul.h"
#include "model/types.h"

/* activation rows are quantised in chunks of this many elements (a multiple of every block
 * size used here), which lets several threads share the quantisation of one long row */
#define ACT_CHUNK 256
/* below this many activation elements the caller quantises alone (a pool dispatch costs more) */
#define ACT_PAR_MIN 16384
/* threads split the rows in units of this many (the widest kernel tile) */
#define MM_ROW_UNIT 8
/* prefill blocking: rows x tokens per kernel call */
#define MM_RB 64
#define MM_TB 64
_Static_assert(MM_TB % 16 == 0, "a prefill call starts at a 16-token record group");
/* row block of the lane-per-row Q4_0 kernels (AVX-512 VNNI, row or packed layout): they derive
 * per-(token, block) activation sums once per call and reuse them over every 16-row group of
 * the call, so taller calls amortise that (256 x n_in Q4_0 rows still fit L2) */
#define MM_RB_LANE 256
/* up to this many tokens X is quantised and kz_mm.pre run inside the dispatch, as for one
 * token, instead of by the caller before it */
#define MM_THIN KZ_MM_THIN

/* after a decode step's or thin batch's Q8_0 activation rows: their per-block terms for the
 * packed GEMV / thin gemm (kz_gemv_q4_0_16x4), 64-byte aligned */
static size_t aux_bytes(const kz_wmat *w, int n_tok) {
    return n_tok <= MM_THIN && kz_act_type(w->type) == KZ_T_Q8_0
               ? 64 + (size_t)n_tok * (size_t)(w->n_in / 32) * sizeof(int32_t)
               : 0;
}

/* bytes of the records a level's packed prefill reads (kz_gemm_q4_0_16x4_rec: made once per
 * matmul, in 16-token groups), 0 where it reads none: one token, thin batches (X is quantised
 * in the dispatch), no packed rows */
static size_t rec_bytes(const kz_wmat *w, int n_tok, const kz_gemm_q4_0_16x4_rec *rg) {
    if (!w || n_tok <= MM_THIN || !rg->gemm || w->type != KZ_T_Q4_0 || !w->q4_0_16x4 || w->n_q4_0_16x4 <= 0) return 0;
    return 64 + (size_t)((n_tok + 15) / 16) * (size_t)(w->n_in / 32) * 8 * rg->rec_bytes;
}

/* bytes of one matrix's quantised X (F32 weights read X directly) */
static size_t act_bytes(const kz_wmat *w, int n_tok) {
    if (!w || n_tok <= 0 || w->type == KZ_T_F32) return 0;
    return (size_t)n_tok * kz_act_row_bytes(w->type, w->n_in) + aux_bytes(w, n_tok);
}

typedef struct {
    const kz_qtraits *wt, *at;
    const kz_wmat *w;
    const float *x;
    const float *x2; /* non-NULL: the rows quantised are kz_swiglu(x, x2) (kz_mm.swiglu) */
    int n_tok;
    const uint8_t *act; /* n_tok rows of act_rb bytes */
    size_t act_rb;
    float *y;
    int64_t ldy;
    int64_t n_chunk; /* quantisation chunks per row */
    const atomic_int *abort; /* prefill: stop between tiles once non-zero (output dropped) */
    kz_gemm_q4_0_16x4_fn gemm16; /* kernel for w->q4_0_16x4 rows, NULL: w has none or this level cannot use them */
    kz_gemv_q4_0_16x4 gv;          /* <= MM_THIN tokens: the level's GEMV / thin gemm taking aux (NULL: gemm16
                                    * computes the terms) */
    int32_t *aux;            /* <= MM_THIN tokens: the activation rows' per-block terms for gv, or NULL */
    int32_t *aux_room;       /* quantising matrix, <= MM_THIN tokens: where its rows' terms go */
    int aux_need;            /* quantising matrix: a packed matrix reads its terms */
    int64_t rb;              /* prefill row block */
    kz_gemm_q4_0_16x4_rec rg; /* the level's record-reading packed prefill (gemm NULL: none) */
    const uint8_t *rec;      /* the records of X this matrix's packed rows read, or NULL */
    uint8_t *rec_room;       /* quantising matrix: where X's records go (NULL: none made) */
} mm_task;

static void quant_act_chunks(const mm_task *t, int64_t lo, int64_t hi) {
    const int64_t n_in = t->w->n_in;
    for (int64_t c = lo; c < hi; c++) {
        int64_t tok = c / t->n_chunk, k = c % t->n_chunk;
        int64_t e0 = k * ACT_CHUNK, len = n_in - e0 < ACT_CHUNK ? n_in - e0 : ACT_CHUNK;
        /* e0 is a whole number of blocks, so its byte offset is well defined */
        size_t off = (size_t)(e0 / t->at->blck) * t->at->bytes;
        const float *src = t->x + tok * n_in + e0;
        float sw[ACT_CHUNK];
        if (t->x2) { /* elementwise: the same bits as kz_swiglu over the whole row */
            memcpy(sw, src, (size_t)len * sizeof *sw);
            kz_swiglu(sw, t->x2 + tok * n_in + e0, (int)len);
            src = sw;
        }
        t->at->quant(src, (uint8_t *)t->act + (size_t)tok * t->act_rb + off, len);
    }
}

/* quantisation units of a quantising matrix: chunks of each row; where records are made, chunks
 * of each token pair (both rows' chunk, then the pair's records of its blocks) */
static int64_t act_units(const mm_task *t) {
    return t->n_chunk * (t->rec_room ? (t->n_tok + 1) / 2 : t->n_tok);
}

static void quant_act_units(const mm_task *t, int64_t lo, int64_t hi) {
    if (!t->rec_room) {
        quant_act_chunks(t, lo, hi);
        return;
    }
    const int64_t nb = t->w->n_in / 32;
    for (int64_t c = lo; c < hi; c++) {
        const int64_t p = c / t->n_chunk, k = c % t->n_chunk, tok = 2 * p;
        const int nt = tok + 1 < t->n_tok ? 2 : 1;
        quant_act_chunks(t, tok * t->n_chunk + k, tok * t->n_chunk + k + 1);
        if (nt == 2) quant_act_chunks(t, (tok + 1) * t->n_chunk + k, (tok + 1) * t->n_chunk + k + 1);
        const int64_t b0 = k * (ACT_CHUNK / 32), b1 = (k + 1) * (ACT_CHUNK / 32) < nb ? (k + 1) * (ACT_CHUNK / 32) : nb;
        uint8_t *r = t->rec_room + ((size_t)(p / 8) * (size_t)nb * 8 + (size_t)(p % 8)) * t->rg.rec_bytes;
        t->rg.prep(t->act + (size_t)tok * t->act_rb, t->act_rb, nt, b0, (int)(b1 - b0), r);
    }
}

static void quant_act_task(void *arg, int ith, int nth) {
    const mm_task *t = arg;
    long lo, hi;
    kz_split((long)act_units(t), ith, nth, &lo, &hi);
    quant_act_units(t, lo, hi);
}

/* where row r0 (a multiple of 16 below n_q4_0_16x4) starts in w's packed copy */
static const uint8_t *q16x4_rows(const kz_wmat *w, int64_t r0) {
    return (const uint8_t *)w->q4_0_16x4 + (size_t)(r0 / 16) * kz_q4_0_16x4_group_bytes(w->n_in);
}

/* One kernel call on rows [r0, r0 + nr) x tokens [t0, t0 + nt): the packed kernel for rows
 * below w->n_q4_0_16x4 (whole 16-row groups), the row kernel on w->data otherwise. */
static void dot_block(const mm_task *t, int packed, int64_t r0, int64_t nr, int t0, int nt) {
    const kz_wmat *w = t->w;
    const uint8_t *a = t->act + (size_t)t0 * t->act_rb;
    float *y = t->y + (int64_t)t0 * t->ldy + r0;
    if (packed && t->aux && nt == 1)
        t->gv.gemv(w->n_in, q16x4_rows(w, r0), nr, a, t->aux + (size_t)t0 * (size_t)(w->n_in / 32), y);
    else if (packed && t->aux)
        t->gv.thin(w->n_in, q16x4_rows(w, r0), nr, a, t->act_rb, nt, t->aux + (size_t)t0 * (size_t)(w->n_in / 32), y,
                   t->ldy);
    else if (packed && t->rec) /* t0 is a multiple of MM_TB, so of the records' 16-token groups */
        t->rg.gemm(w->n_in, q16x4_rows(w, r0), nr,
                   t->rec + (size_t)(t0 / 16) * (size_t)(w->n_in / 32) * 8 * t->rg.rec_bytes, nt, y, t->ldy);
    else if (packed)
        t->gemm16(w->n_in, q16x4_rows(w, r0), nr, a, t->act_rb, nt, y, t->ldy);
    else
        t->wt->gemm(w->n_in, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, a, t->act_rb,
                    nt, y, t->ldy);
}

/* rows [r_lo, r_hi): decode and thin batches in one call (the kernel streams the rows once for
 * all tokens); prefill in MM_RB x MM_TB blocks, abort checked between */
static void dot_rows(const mm_task *t, int packed, int64_t r_lo, int64_t r_hi) {
    if (t->n_tok <= MM_THIN) {
        dot_block(t, packed, r_lo, r_hi - r_lo, 0, t->n_tok);
        return;
    }
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += t->rb) {
        if (t->abort && atomic_load_explicit(t->abort, memory_order_relaxed)) return;
        const int64_t nr = r_hi - r0 < t->rb ? r_hi - r0 : t->rb;
        for (int t0 = 0; t0 < t->n_tok; t0 += MM_TB)
            dot_block(t, packed, r0, nr, t0, t->n_tok - t0 < MM_TB ? t->n_tok - t0 : MM_TB);
    }
}

/* rows [r_lo, r_hi) of one matrix: packed rows (below n_q4_0_16x4) with the packed kernel */
static void dot_range(const mm_task *t, int64_t r_lo, int64_t r_hi) {
    if (r_lo >= r_hi) return;
    if (t->gemm16 && r_lo < t->w->n_q4_0_16x4) {
        const int64_t e = r_hi < t->w->n_q4_0_16x4 ? r_hi : t->w->n_q4_0_16x4;
        dot_rows(t, 1, r_lo, e);
        r_lo = e;
    }
    if (r_lo < r_hi) dot_rows(t, 0, r_lo, r_hi);
}

/* Several matrices reading the same X, done in one quantisation + one dispatch (decode pays a
 * pool barrier per dispatch; prefill quantises X once instead of once per matrix).
 *
 * Work sharing: the rows are cut into chunks (decode and thin batches: ~128 KiB of weights;
 * prefill: one row block) and every thread owns a contiguous run of chunks of about equal weight bytes (an F32
 * row streams 7x the bytes of a Q4_0 row), which it takes front to back, a quarter of what is
 * left at a time: one unbroken stream per thread, as the hardware prefetcher likes, in few
 * kernel calls (each call derives per-block activation terms once). A thread that runs out
 * steals chunks one at a time from the back of another thread's run, so a thread that started late (woken from sleep, preempted, a
 * slower core of a big.LITTLE phone) does less instead of holding all others at the end of the
 * dispatch. A row's result does not depend on the thread that computes it. */
#define MM_CHUNK_BYTES (128 << 10)

typedef struct {
    mm_task t[KZ_MM_MAX];
    int n;
    int64_t unit[KZ_MM_MAX];     /* rows per split unit */
    int64_t cu[KZ_MM_MAX];       /* units per chunk */
    int64_t ccum[KZ_MM_MAX + 1]; /* cumulative chunk counts */
    int n_runs;
    int act_in_dispatch;         /* <= MM_THIN tokens: X quantised at the start of the dispatch (else before) */
    int64_t act_total;          /* quantisation chunks of all quantising matrices */
    int argmax;                  /* kz_mm.argmax: threads track the first maximum of the rows they write */
    _Atomic uint64_t best;       /* the largest argmax_key of any thread, 0: no element above -inf yet */
    kz_phase act_done;               /* quantisation chunks finished */
    const kz_mm_pre *pre;        /* run by thread 0 at the start of a dispatch that quantises X in it */
    atomic_int pre_done;
    /* from here on set only as far as used (n_runs), not zeroed per call */
    kz_run run[KZ_RUNS_MAX];
    kz_run act_run[KZ_RUNS_MAX];
} mm_multi;

/* Order key of element i holding v (above -inf, not NaN): larger value first, then lower index,
 * so the largest key over all elements is kz_argmax's answer. Both zeros count as one value, as
 * for kz_argmax's comparisons. */
static uint64_t argmax_key(float v, int64_t i) {
    if (v == 0.0f) v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint64_t)(UINT32_MAX - (uint32_t)i);
}

/* packed rows go in 16-row groups, so a split unit never straddles a group; in the units the
 * one-token GEMV asks for (kz_gemv_q4_0_16x4: two groups where it streams them side by side, so a call
 * holds whole pairs; the last unit of an odd group count is one group). */
static int64_t unit_rows(const mm_task *t) {
    if (!t->gemm16) return MM_ROW_UNIT;
    return t->gv.gemv && t->n_tok == 1 ? t->gv.unit_rows : 16;
}

/* a run's owner takes a quarter of what is left of it (at least one chunk) from the front, so it
 * makes few, long kernel calls while the run is long and single chunks near its end */
#define MM_OWNER_DIV 4

/* chunks [c0, c1): one kernel range per matrix they cover; with mt->argmax, *best takes the
 * key of the rows' first maximum while they are still in this core's cache */
static void do_chunks(const mm_multi *mt, int64_t c0, int64_t c1, uint64_t *best) {
    for (int i = 0; i < mt->n && c0 < c1; i++) {
        if (c0 >= mt->ccum[i + 1]) continue;
        const int64_t e = c1 < mt->ccum[i + 1] ? c1 : mt->ccum[i + 1];
        const mm_task *t = &mt->t[i];
        const int64_t rows = mt->cu[i] * mt->unit[i], r_lo = (c0 - mt->ccum[i]) * rows;
        const int64_t r_hi = (e - mt->ccum[i]) * rows, r_end = r_hi < t->w->n_out ? r_hi : t->w->n_out;
        dot_range(t, r_lo, r_end);
        if (mt->argmax && r_end > r_lo) {
            const int64_t j = r_lo + kz_argmax(t->y + r_lo, (int)(r_end - r_lo));
            if (t->y[j] > -INFINITY && argmax_key(t->y[j], j) > *best) *best = argmax_key(t->y[j], j);
        }
        c0 = e;
    }
}

/* quantisation chunks [lo, hi) of the quantising matrices taken in order, then their rows'
 * GEMV terms (per block, so a row is prepared in pieces) */
static void quant_act_range(const mm_multi *mt, int64_t lo, int64_t hi) {
    for (int i = 0; i < mt->n && lo < hi; i++) {
        const mm_task *t = &mt->t[i];
        const int64_t nc = t->n_chunk * t->n_tok; /* chunks of all its rows */
        if (!nc) continue;
        if (lo >= nc) {
            lo -= nc, hi -= nc;
            continue;
        }
        const int64_t e = hi < nc ? hi : nc;
        quant_act_chunks(t, lo, e);
        if (t->aux_need)
            for (int64_t c = lo; c < e; c++) { /* chunk k of row tok */
                const int64_t tok = c / t->n_chunk, e0 = c % t->n_chunk * ACT_CHUNK;
                const int64_t e1 = e0 + ACT_CHUNK < t->w->n_in ? e0 + ACT_CHUNK : t->w->n_in;
                t->gv.prep(t->act + (size_t)tok * t->act_rb + (size_t)(e0 / t->at->blck) * t->at->bytes, e1 - e0,
                           t->aux_room + (size_t)tok * (size_t)(t->w->n_in / 32) + e0 / 32);
            }
        lo = 0, hi -= nc;
    }
}

/* Weight bytes a thread prefetches (into L2) from the start of its run while thread 0 runs the
 * dispatch's pre step (a decode step's RMSNorm, ~4 us: the thread would wait idle) */
#define MM_PRE_PF_BYTES (64 << 10)

static void pre_prefetch(mm_multi *mt, int ith) {
    const char *p = NULL, *end = NULL;
    if (ith < mt->n_runs) {
        const int64_t c = (int64_t)(uint32_t)atomic_load_explicit(&mt->run[ith].fb, memory_order_relaxed);
        for (int i = 0; i < mt->n && !p; i++) {
            if (c < mt->ccum[i] || c >= mt->ccum[i + 1]) continue;
            const mm_task *t = &mt->t[i];
            const int64_t r = (c - mt->ccum[i]) * mt->cu[i] * mt->unit[i];
            if (t->gemm16 && r < t->w->n_q4_0_16x4) {
                p = (const char *)q16x4_rows(t->w, r);
                end = (const char *)q16x4_rows(t->w, t->w->n_q4_0_16x4);
            } else {
                p = (const char *)t->w->data + (size_t)r * t->w->row_bytes;
                end = (const char *)t->w->data + (size_t)t->w->n_out * t->w->row_bytes;
            }
        }
        if (p && end - p > MM_PRE_PF_BYTES) end = p + MM_PRE_PF_BYTES;
    }
    kz_spin w = {0, 0};
    while (!atomic_load_explicit(&mt->pre_done, memory_order_acquire)) {
        if (p && p < end) { /* 1 KiB between looks at the flag */
            for (int k = 0; k < 1024 && p + k < end; k += 64) __builtin_prefetch(p + k, 0, 2);
            p += 1024;
        } else {
            kz_spin_wait(&w);
        }
    }
}

static void dot_task(void *arg, int ith, int nth) {
    (void)nth;
    mm_multi *mt = arg;
    if (mt->pre) { /* thread 0 makes X; the others prefetch their first weights meanwhile */
        if (ith == 0) {
            mt->pre->fn(mt->pre->arg);
            atomic_store_explicit(&mt->pre_done, 1, memory_order_release);
        } else {
            pre_prefetch(mt, ith);
        }
    }
    if (mt->act_in_dispatch) {
        int kc = 0;
        int64_t c0, c1;
        while (kz_runs_next(mt->act_run, mt->n_runs, ith, 1, &kc, &c0, &c1)) {
            quant_act_range(mt, c0, c1);
            kz_phase_add(&mt->act_done, (long)(c1 - c0));
        }
        kz_phase_wait(&mt->act_done, (long)mt->act_total);
    }
    int k = 0;
    int64_t c0, c1;
    uint64_t best = 0;
    while (kz_runs_next(mt->run, mt->n_runs, ith, MM_OWNER_DIV, &k, &c0, &c1)) do_chunks(mt, c0, c1, &best);
    if (best) {
        uint64_t cur = atomic_load_explicit(&mt->best, memory_order_relaxed);
        while (cur < best && !atomic_compare_exchange_weak_explicit(&mt->best, &cur, best, memory_order_relaxed,
                                                                    memory_order_relaxed)) {}
    }
}

/* weight bytes of chunks [0, c) */
static int64_t chunk_bytes_before(const mm_multi *mt, int64_t c) {
    int64_t b = 0;
    for (int i = 0; i < mt->n && c > mt->ccum[i]; i++) {
        const int64_t n_out = mt->t[i].w->n_out, rows = mt->cu[i] * mt->unit[i];
        const int64_t k = c < mt->ccum[i + 1] ? c - mt->ccum[i] : mt->ccum[i + 1] - mt->ccum[i];
        const int64_t r = k * rows < n_out ? k * rows : n_out;
        b += r * (int64_t)mt->t[i].w->row_bytes;
    }
    return b;
}

/* runs of about equal weight bytes: run j ends at the first chunk boundary past j+1 shares */
static void make_runs(mm_multi *mt, int nth) {
    const int64_t total = mt->ccum[mt->n], bytes = chunk_bytes_before(mt, total);
    mt->n_runs = nth < KZ_RUNS_MAX ? nth : KZ_RUNS_MAX;
    int64_t c = 0;
    for (int j = 0; j < mt->n_runs; j++) {
        const int64_t c0 = c;
        /* bytes * (j + 1) fits int64: bytes < 2^40 and j < 64 */
        const int64_t target = bytes * (j + 1) / mt->n_runs;
        if (j == mt->n_runs - 1) {
            c = total;
        } else { /* the last c in [c0, total] with bytes before it <= target (a binary search) */
            int64_t lo = c0, hi = total;
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo + 1) / 2;
                if (chunk_bytes_before(mt, mid) <= target) lo = mid;
                else hi = mid - 1;
            }
            c = lo;
        }
        kz_run_set(&mt->run[j], (uint32_t)c0, (uint32_t)c);
    }
}

static void quant_act_multi_task(void *arg, int ith, int nth) {
    const mm_multi *mt = arg;
    for (int i = 0; i < mt->n; i++)
        if (mt->t[i].n_chunk) quant_act_task((void *)&mt->t[i], ith, nth);
}

/* b can read the X that a's quantisation made (F32 weights read X itself: nothing to share) */
static int shares_act(const kz_wmat *a, const kz_wmat *b) {
    return a->type != KZ_T_F32 && b->type != KZ_T_F32 && kz_act_type(a->type) == kz_act_type(b->type) &&
           a->n_in == b->n_in;
}

size_t kz_matmul_work_bytes(const kz_mm *mm) {
    const kz_gemm_q4_0_16x4_rec rg = kz_gemm_q4_0_16x4_rec_get_isa((int)kz_isa_active());
    size_t sum = 0;
    for (int i = 0; i < mm->nw && i < KZ_MM_MAX; i++) {
        int seen = 0, rec_seen = 0;
        for (int j = 0; j < i; j++)
            if (shares_act(mm->w[j], mm->w[i])) seen = 1, rec_seen |= rec_bytes(mm->w[j], mm->n_tok, &rg) > 0;
        if (!seen) sum += act_bytes(mm->w[i], mm->n_tok);
        if (!rec_seen) sum += rec_bytes(mm->w[i], mm->n_tok, &rg); /* once per shared X */
    }
    return sum;
}

/* kz_matmul over arrays; argmax (one token, one matrix): returns the index kz_mm.argmax asks for, else 0 */
static int64_t matmul_multi(kz_pool *pool, const kz_wmat *const *w, int nw, const float *x, const float *x2,
                            int n_tok, float *const *y, const int64_t *ldy, void *work, const atomic_int *abort,
                            int argmax, const kz_mm_pre *pre) {
    if (!w || nw <= 0 || nw > KZ_MM_MAX || n_tok <= 0) {
        if (pre) pre->fn(pre->arg);
        return 0;
    }
    mm_multi mt;
    memset(&mt, 0, offsetof(mm_multi, run)); /* the run arrays (8 KiB) are set where used */
    mt.argmax = argmax;
    atomic_init(&mt.best, 0);
    const int nth = kz_pool_size(pool);
    uint8_t *wp = work;
    int n_act = 0;
    const kz_gemm_q4_0_16x4_fn gemm16 = kz_gemm_q4_0_16x4_get();
    const kz_gemv_q4_0_16x4 gv =
        n_tok <= MM_THIN ? kz_gemv_q4_0_16x4_get_isa((int)kz_isa_active()) : (kz_gemv_q4_0_16x4){NULL, NULL, NULL, 16};
    const kz_gemm_q4_0_16x4_rec rg = kz_gemm_q4_0_16x4_rec_get_isa((int)kz_isa_active());
    for (int i = 0; i < nw; i++) {
        const kz_wmat *wi = w[i];
        const kz_qtraits *wt = kz_qtraits_get(wi->type);
        if (!wt || wi->n_in % wt->blck || wi->row_bytes < (size_t)(wi->n_in / wt->blck) * wt->bytes) {
            /* loaders reject such weights (kz_type_compute_ok); make misuse visible, not silent */
            for (int tok = 0; tok < n_tok; tok++)
                for (int64_t o = 0; o < wi->n_out; o++) y[i][(int64_t)tok * ldy[i] + o] = NAN;
            continue;
        }
        mm_task *t = &mt.t[mt.n];
        *t = (mm_task){.wt = wt, .at = kz_qtraits_get(wt->act_type), .w = wi, .x = x, .x2 = x2, .n_tok = n_tok,
                       .abort = abort, .y = y[i], .ldy = ldy[i], .gemm16 = wi->q4_0_16x4 && wi->n_q4_0_16x4 > 0 ? gemm16 : NULL,
                       .rb = MM_RB, .gv = gv, .rg = rg};
#if defined(__x86_64__)
        /* the x86 level with a packed kernel also runs plain Q4_0 rows lane-per-row */
        if (wi->type == KZ_T_Q4_0 && gemm16) t->rb = MM_RB_LANE;
#endif
        if (wi->type == KZ_T_F32) {
            t->act = (const uint8_t *)x;
            t->act_rb = (size_t)wi->n_in * sizeof(float);
        } else {
            t->act_rb = kz_act_row_bytes(wi->type, wi->n_in);
            /* an earlier matrix with the same activation type already quantises X: the first one
             * sharing it (sharing is an equivalence, so that one quantises) */
            int owner = -1;
            for (int j = 0; j < mt.n && owner < 0; j++)
                if (shares_act(mt.t[j].w, wi)) owner = j;
            if (owner >= 0) {
                t->act = mt.t[owner].act;
            } else {
                t->act = wp;
                t->n_chunk = (wi->n_in + ACT_CHUNK - 1) / ACT_CHUNK;
                n_act++;
                if (aux_bytes(wi, n_tok)) /* room for the terms; filled if a packed matrix reads them */
                    t->aux_room = (int32_t *)(((uintptr_t)(wp + (size_t)n_tok * t->act_rb) + 63) & ~(uintptr_t)63);
                wp += act_bytes(wi, n_tok);
            }
            if ((n_tok == 1 ? gv.gemv != NULL : gv.thin != NULL) && t->gemm16) { /* the packed kernel reads the terms of X */
                mm_task *c = owner >= 0 ? &mt.t[owner] : t;
                c->aux_need = 1;
                t->aux = c->aux_room;
            }
            const size_t rbytes = t->gemm16 ? rec_bytes(wi, n_tok, &rg) : 0;
            if (rbytes) { /* the packed prefill reads X's records: made once, by X's quantiser */
                mm_task *c = owner >= 0 ? &mt.t[owner] : t;
                if (!c->rec_room) {
                    c->rec_room = (uint8_t *)(((uintptr_t)wp + 63) & ~(uintptr_t)63);
                    wp += rbytes;
                }
                t->rec = c->rec_room;
            }
        }
        const int64_t unit = unit_rows(t), nu = (wi->n_out + unit - 1) / unit;
        int64_t cu;
        if (n_tok <= MM_THIN) { /* chunks of weight bytes as for decode: a prefill row block (256 rows
                                 * of FFN down: 1.3 MB) would leave one thread a long tail */
            cu = MM_CHUNK_BYTES / (unit * (int64_t)wi->row_bytes);
            if (cu < 1) cu = 1;
        } else {
            cu = (t->rb + unit - 1) / unit;
        }
        /* chunk indices are 32-bit in the runs: only a matrix of > 2^31 chunks (hundreds of
         * TiB) would need larger chunks */
        while ((nu + cu - 1) / cu > (INT64_C(1) << 31) / KZ_MM_MAX) cu *= 2;
        if (cu > nu) cu = nu > 0 ? nu : 1;
        mt.unit[mt.n] = unit;
        mt.cu[mt.n] = cu;
        mt.ccum[mt.n + 1] = mt.ccum[mt.n] + (nu + cu - 1) / cu;
        mt.n++;
    }
    mt.act_in_dispatch = mt.n && n_act && n_tok <= MM_THIN && nth > 1;
    if (!mt.act_in_dispatch && pre) { /* no quantisation in the dispatch: pre first */
        pre->fn(pre->arg);
        pre = NULL;
    }
    if (!mt.n) return 0;
    if (mt.act_in_dispatch) {
        /* <= MM_THIN tokens: the threads quantise X at the start of the dispatch, each its own even
         * share first (after a parallel step split the same way, the part it wrote itself),
         * instead of the caller alone before it while the others wait */
        for (int i = 0; i < mt.n; i++) mt.act_total += mt.t[i].n_chunk * n_tok;
        mt.pre = pre;
        atomic_init(&mt.pre_done, 0);
        kz_runs_split(mt.act_run, nth < KZ_RUNS_MAX ? nth : KZ_RUNS_MAX, (long)mt.act_total);
        atomic_init(&mt.act_done.done, 0);
    } else if (n_act) {
        int64_t elems = 0;
        for (int i = 0; i < mt.n; i++)
            if (mt.t[i].n_chunk) elems += (int64_t)n_tok * mt.t[i].w->n_in;
        if (kz_pool_size(pool) > 1 && elems >= ACT_PAR_MIN)
            kz_pool_run(pool, quant_act_multi_task, &mt);
        else
            for (int i = 0; i < mt.n; i++)
                if (mt.t[i].n_chunk) quant_act_units(&mt.t[i], 0, act_units(&mt.t[i]));
        for (int i = 0; i < mt.n; i++) /* once per row here, not once per kernel call */
            if (mt.t[i].aux_need)
                for (int tok = 0; tok < n_tok; tok++)
                    gv.prep(mt.t[i].act + (size_t)tok * mt.t[i].act_rb, mt.t[i].w->n_in,
                            mt.t[i].aux_room + (size_t)tok * (size_t)(mt.t[i].w->n_in / 32));
    }
    make_runs(&mt, nth);
    kz_pool_run(pool, dot_task, &mt);
    const uint64_t best = atomic_load_explicit(&mt.best, memory_order_relaxed); /* the pool's end is a barrier */
    return best ? (int64_t)(UINT32_MAX - (uint32_t)best) : 0;
}

void kz_matmul(kz_pool *pool, const kz_mm *mm) {
    int64_t ldy[KZ_MM_MAX];
    for (int i = 0; i < mm->nw && i < KZ_MM_MAX; i++) ldy[i] = mm->ldy[i] ? mm->ldy[i] : mm->w[i]->n_out;
    const int argmax = mm->argmax && mm->nw == 1 && mm->n_tok == 1;
    const float *x = mm->x, *x2 = NULL;
    if (mm->swiglu.gate && mm->nw > 0) {
        int f32 = 0;
        for (int i = 0; i < mm->nw && i < KZ_MM_MAX; i++) f32 |= mm->w[i]->type == KZ_T_F32;
        x = mm->swiglu.gate;
        if (f32) /* an F32 weight reads X as floats: no quantisation to fold the SwiGLU into */
            for (int t = 0; t < mm->n_tok; t++)
                kz_swiglu(mm->swiglu.gate + (size_t)t * mm->w[0]->n_in, mm->swiglu.up + (size_t)t * mm->w[0]->n_in,
                          (int)mm->w[0]->n_in);
        else
            x2 = mm->swiglu.up;
    }
    const int64_t best = matmul_multi(pool, mm->w, mm->nw, x, x2, mm->n_tok, mm->y, ldy, mm->work, mm->abort,
                                      argmax, mm->pre);
    if (mm->argmax) *mm->argmax = argmax ? best : 0;
}
