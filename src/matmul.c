/* Y = X W^T for a GGUF weight matrix: activations are converted once into the weight's
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
#include <stdint.h>

#include "quant.h"
#include "types.h"

/* activation rows are converted in chunks of this many elements (a multiple of every block
 * size used here), which lets several threads share the conversion of one long row */
#define CONV_CHUNK 256
/* below this many activation elements the caller converts alone (a pool dispatch costs more) */
#define CONV_PAR_MIN 16384
/* threads split the rows in units of this many (the widest kernel tile) */
#define MM_ROW_UNIT 8
/* prefill blocking: rows x tokens per kernel call */
#define MM_RB 64
#define MM_TB 64

size_t kz_matmul_work_bytes(const kz_wmat *w, int n_tok) {
    if (!w || n_tok <= 0 || w->type == KZ_T_F32) return 0; /* F32 uses X directly */
    return (size_t)n_tok * kz_act_row_bytes(w->type, w->n_in);
}

typedef struct {
    const kz_qtraits *wt, *at;
    const kz_wmat *w;
    const float *x;
    int n_tok;
    const uint8_t *act; /* n_tok rows of act_rb bytes */
    size_t act_rb;
    float *y;
    int64_t ldy;
    int64_t n_chunk; /* conversion chunks per row */
    const atomic_int *abort; /* prefill: stop between tiles once non-zero (output dropped) */
    kz_gemm_p16_fn p16;      /* kernel for w->p16 rows, NULL: w has none or this level cannot use them */
} mm_task;

static void conv_chunks(const mm_task *t, int64_t lo, int64_t hi) {
    const int64_t n_in = t->w->n_in;
    for (int64_t c = lo; c < hi; c++) {
        int64_t tok = c / t->n_chunk, k = c % t->n_chunk;
        int64_t e0 = k * CONV_CHUNK, len = n_in - e0 < CONV_CHUNK ? n_in - e0 : CONV_CHUNK;
        /* e0 is a whole number of blocks, so its byte offset is well defined */
        size_t off = (size_t)(e0 / t->at->blck) * t->at->bytes;
        t->at->quant(t->x + tok * n_in + e0, (uint8_t *)t->act + (size_t)tok * t->act_rb + off, len);
    }
}

static void conv_task(void *arg, int ith, int nth) {
    const mm_task *t = arg;
    long lo, hi;
    kz_split((long)(t->n_chunk * t->n_tok), ith, nth, &lo, &hi);
    conv_chunks(t, lo, hi);
}

/* One kernel call on rows [r0, r0 + nr) x tokens [t0, t0 + nt): the packed kernel for rows
 * below w->n_p16 (whole 16-row groups), the row kernel on w->data otherwise. */
static void dot_block(const mm_task *t, int packed, int64_t r0, int64_t nr, int t0, int nt) {
    const kz_wmat *w = t->w;
    const uint8_t *a = t->act + (size_t)t0 * t->act_rb;
    float *y = t->y + (int64_t)t0 * t->ldy + r0;
    if (packed)
        t->p16(w->n_in, (const uint8_t *)w->p16 + (size_t)(r0 / 16) * kz_pack16_group_bytes(w->n_in), nr, a,
               t->act_rb, nt, y, t->ldy);
    else
        t->wt->gemm(w->n_in, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, a, t->act_rb,
                    nt, y, t->ldy);
}

/* rows [r_lo, r_hi): decode in one call; prefill in MM_RB x MM_TB blocks, abort checked between */
static void dot_rows(const mm_task *t, int packed, int64_t r_lo, int64_t r_hi) {
    if (t->n_tok == 1) {
        dot_block(t, packed, r_lo, r_hi - r_lo, 0, 1);
        return;
    }
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += MM_RB) {
        if (t->abort && atomic_load_explicit(t->abort, memory_order_relaxed)) return;
        const int64_t nr = r_hi - r0 < MM_RB ? r_hi - r0 : MM_RB;
        for (int t0 = 0; t0 < t->n_tok; t0 += MM_TB)
            dot_block(t, packed, r0, nr, t0, t->n_tok - t0 < MM_TB ? t->n_tok - t0 : MM_TB);
    }
}

static void dot_task(void *arg, int ith, int nth) {
    const mm_task *t = arg;
    const kz_wmat *w = t->w;
    long lo, hi;
    /* packed rows go in 16-row groups, so a split unit never straddles a group */
    const int64_t unit = t->p16 ? 16 : MM_ROW_UNIT;
    kz_split((long)((w->n_out + unit - 1) / unit), ith, nth, &lo, &hi);
    int64_t r_lo = (int64_t)lo * unit;
    const int64_t r_hi = (int64_t)hi * unit < w->n_out ? (int64_t)hi * unit : w->n_out;
    if (r_lo >= r_hi) return;
    if (t->p16 && r_lo < w->n_p16) {
        const int64_t e = r_hi < w->n_p16 ? r_hi : w->n_p16;
        dot_rows(t, 1, r_lo, e);
        r_lo = e;
    }
    if (r_lo < r_hi) dot_rows(t, 0, r_lo, r_hi);
}

void kz_matmul(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy,
               void *work) {
    kz_matmul_abortable(pool, w, x, n_tok, y, ldy, work, NULL);
}

void kz_matmul_abortable(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y,
                         int64_t ldy, void *work, const atomic_int *abort) {
    if (!w || n_tok <= 0) return;
    const kz_qtraits *wt = kz_qtraits_get(w->type);
    if (!wt || w->n_in % wt->blck || w->row_bytes < (size_t)(w->n_in / wt->blck) * wt->bytes) {
        /* loaders reject such weights (kz_type_compute_ok); make misuse visible, not silent */
        for (int tok = 0; tok < n_tok; tok++)
            for (int64_t o = 0; o < w->n_out; o++) y[(int64_t)tok * ldy + o] = NAN;
        return;
    }
    mm_task t = { .wt = wt, .at = kz_qtraits_get(wt->act_type), .w = w, .x = x, .n_tok = n_tok, .abort = abort,
                  .y = y, .ldy = ldy, .p16 = w->p16 && w->n_p16 > 0 ? kz_gemm_p16_get() : NULL };
    if (w->type == KZ_T_F32) {
        t.act = (const uint8_t *)x;
        t.act_rb = (size_t)w->n_in * sizeof(float);
    } else {
        t.act = work;
        t.act_rb = kz_act_row_bytes(w->type, w->n_in);
        t.n_chunk = (w->n_in + CONV_CHUNK - 1) / CONV_CHUNK;
        if (kz_pool_size(pool) > 1 && (int64_t)n_tok * w->n_in >= CONV_PAR_MIN)
            kz_pool_run(pool, conv_task, &t);
        else
            conv_chunks(&t, 0, t.n_chunk * n_tok);
    }
    kz_pool_run(pool, dot_task, &t);
}
