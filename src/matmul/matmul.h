/* The matmul over GGUF weights: Y = X W^T, one entry point (kz_matmul) whose options say what
 * comes with it (several matrices on one X, a SwiGLU folded into the activation quantisation, a
 * step run inside the dispatch, an argmax, a cancel flag). Every output element equals the
 * weight type's vec_dot bit for bit, whatever the threads, tiling or options. */
#ifndef KZ_MATMUL_H
#define KZ_MATMUL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "matmul/quant.h"
#include "sys/threadpool.h"

/* A weight matrix as stored in GGUF: n_out rows of n_in elements (ne[0] = n_in). */
typedef struct {
    uint32_t type;
    int64_t n_in, n_out;
    size_t row_bytes;
    const void *data;
    /* optional copy of rows [0, n_q4_0_16x4) in the q4_0_16x4 layout (kz_repack_q4_0_16x4; model
     * option repack_weights); rows from n_q4_0_16x4 on are read from data. NULL: none. */
    const void *q4_0_16x4;
    int64_t n_q4_0_16x4;
    const char *name; /* its GGUF tensor name (owned by the model's file), for observers; may be NULL */
} kz_wmat;

/* A step that makes X, run by the calling thread at the start of a dispatch of up to 4 tokens (a
 * decode step's or a speculative verify's RMSNorm): the other threads prefetch their first
 * weights meanwhile instead of waiting for it outside the dispatch. Where the dispatch quantises
 * no X, fn just runs first. */
typedef struct {
    void (*fn)(void *arg);
    void *arg;
} kz_mm_pre;

#define KZ_MM_MAX 4
/* up to this many tokens (a decode step, a speculative verify's thin batch) X is quantised in the
 * dispatch and its rows stream once for all tokens, as for one */
#define KZ_MM_THIN 4
/* One matmul call: nw <= KZ_MM_MAX matrices with the same n_in applied to the same X (q/k/v,
 * gate/up, ...), X quantised once per activation type and all rows in one pool dispatch. Matrix
 * i writes n_tok rows of n_out floats to y[i] at stride ldy[i] (0: n_out). Unset fields are off. */
typedef struct {
    const kz_wmat *w[KZ_MM_MAX];
    int nw;
    const float *x; /* n_tok rows of n_in floats (row stride n_in) */
    int n_tok;
    float *y[KZ_MM_MAX];
    int64_t ldy[KZ_MM_MAX];
    /* gate non-NULL: X = kz_swiglu(gate, up) (x unused), applied as X is quantised instead of in
     * a dispatch of its own; gate may be overwritten with X */
    struct {
        float *gate;
        const float *up;
    } swiglu;
    const kz_mm_pre *pre;     /* n_tok <= 4 only: run at the start of the dispatch */
    int64_t *argmax;          /* one token, one matrix: kz_argmax(y[0], n_out), found by each thread
                               * over the rows it has just written (first maximum, NaN never wins,
                               * 0 when no element is above -inf) */
    const atomic_int *abort;  /* non-zero: threads stop between row blocks, Y partly written */
    void *work;               /* >= kz_matmul_work_bytes(mm) */
} kz_mm;

/* bytes of mm->work: one quantised X per distinct activation type (reads w, nw, n_tok) */
size_t kz_matmul_work_bytes(const kz_mm *mm);
void kz_matmul(kz_pool *pool, const kz_mm *mm);

/* The q4_0_16x4 layout, for kernels whose SIMD lane is a weight row (no horizontal sums): Q4_0
 * rows in groups of 16, each group block by block, a block being 288 bytes = 4 x 64 bytes (dword
 * j of row r at 64 j + 4 r: qs bytes 4j..4j+3, i.e. elements 4j.. low nibbles and 16+4j.. high)
 * then the 16 rows' fp16 scales. Same size as the 16 x 18 byte original blocks.
 * Repacks n_rows (a multiple of 16) rows of n elements read with stride ws into dst. */
void kz_repack_q4_0_16x4(const void *w, size_t ws, int64_t n_rows, int64_t n, void *dst);
/* bytes of one 16-row group of rows of n elements */
static inline size_t kz_q4_0_16x4_group_bytes(int64_t n) { return (size_t)(n / 32) * 288; }
/* 1 if the active ISA level has a q4_0_16x4 kernel (else repacking does not pay and is not done) */
int kz_q4_0_16x4_supported(void);
#endif
