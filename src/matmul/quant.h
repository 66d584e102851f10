/* Weight types used for compute: scalar reference dequantize / quantize / dot.
 * Matmul scheme (as llama.cpp, so results match real GGUF semantics): activations are
 * converted to the weight type's "activation type" (F32->F32, F16->F16, BF16->BF16,
 * Q8_0/Q4_0 -> Q8_0 blocks), then each row dot is computed in that domain. */
#ifndef KZ_QUANT_H
#define KZ_QUANT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "sys/threadpool.h"

/* 1 if the type can be used as a matmul weight / dequantized */
int kz_type_compute_ok(uint32_t type);
/* dequantize n elements (n multiple of block size); returns 0, -1 if unsupported */
int kz_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
/* quantize n floats into type (F32/F16/BF16/Q8_0/Q4_0 reference quantizers as llama-quantize);
 * returns bytes written or 0 if unsupported */
size_t kz_quant_row(uint32_t type, const float *src, void *dst, int64_t n);

/* activation type for a weight type, and bytes needed for one converted activation row */
uint32_t kz_act_type(uint32_t wtype);
size_t kz_act_row_bytes(uint32_t wtype, int64_t n);
/* convert one f32 activation row into the activation format of wtype */
void kz_act_convert(uint32_t wtype, const float *x, void *dst, int64_t n);
/* dot of one weight row (type wtype) with one converted activation row */
float kz_vec_dot(uint32_t wtype, const void *wrow, const void *act, int64_t n);

/* A weight matrix as stored in GGUF: n_out rows of n_in elements (ne[0]=n_in). */
typedef struct {
    uint32_t type;
    int64_t n_in, n_out;
    size_t row_bytes;
    const void *data;
    /* optional copy of rows [0, n_p16) in the 16-row interleaved layout of kz_pack16_q4_0
     * (model option repack_weights); rows from n_p16 on are read from data. NULL: none. */
    const void *p16;
    int64_t n_p16;
} kz_wmat;

/* Y[t][o] = sum_i W[o][i] * X[t][i] for t < n_tok. X: n_tok x n_in f32 (row stride n_in),
 * Y: n_tok x n_out f32 (row stride ldy, >= n_out). work: >= kz_matmul_work_bytes().
 * Threads split the output rows. */
size_t kz_matmul_work_bytes(const kz_wmat *w, int n_tok);
void kz_matmul(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy,
               void *work);
/* same; when abort is non-NULL and becomes non-zero, threads stop between row blocks and Y is
 * left partly written (the caller drops it: a cancelled prefill chunk) */
void kz_matmul_abortable(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y,
                         int64_t ldy, void *work, const atomic_int *abort);
/* nw <= KZ_MM_MAX matrices with the same n_in applied to the same X (q/k/v, gate/up, ...): X
 * converted once per activation type, all rows in one pool dispatch; matrix i writes y[i]
 * (stride ldy[i]). Each output equals kz_matmul's bit for bit. work: >=
 * kz_matmul_multi_work_bytes() (one converted X per distinct activation type). */
#define KZ_MM_MAX 4
size_t kz_matmul_multi_work_bytes(const kz_wmat *const *w, int nw, int n_tok);
void kz_matmul_multi(kz_pool *pool, const kz_wmat *const *w, int nw, const float *x, int n_tok, float *const *y,
                     const int64_t *ldy, void *work, const atomic_int *abort);
/* A step that makes X, run by the calling thread at the start of a one-token dispatch (a decode
 * step's RMSNorm, which ran alone before the dispatch while the other threads waited): they
 * prefetch the first weights of their rows meanwhile, then all convert X as usual. Where the
 * dispatch converts no X (one thread, F32 weights) fn just runs first. */
typedef struct {
    void (*fn)(void *arg);
    void *arg;
} kz_mm_pre;
/* kz_matmul_multi of one token (row strides n_out) after pre (NULL: none) */
void kz_matmul_multi_pre(kz_pool *pool, const kz_wmat *const *w, int nw, const float *x, float *const *y,
                         void *work, const kz_mm_pre *pre);
/* kz_matmul of one token (y: n_out floats, the same bits) that also returns kz_argmax(y, n_out):
 * the first maximum, NaN never wins, 0 when no element is above -inf. Each thread finds it over
 * the rows it has just written, while they are in its cache (a greedy decode step's LM head:
 * the caller's scan of the 1 MB logits row, half of it in the other cores' caches, cost 0.2 ms
 * a token on the Xeon host of 2026-12-05). */
int64_t kz_matmul_argmax(kz_pool *pool, const kz_wmat *w, const float *x, float *y, void *work,
                         const kz_mm_pre *pre); /* pre: as kz_matmul_multi_pre's */
/* kz_matmul of one token on X = kz_swiglu(g, u) (n_in floats each), the same bits as kz_swiglu
 * in place then kz_matmul: the SwiGLU is applied as the threads convert X at the start of the
 * dispatch (a decode step's FFN down projection), not in a dispatch of its own. g may be
 * overwritten with X. */
void kz_matmul_swiglu(kz_pool *pool, const kz_wmat *w, float *g, const float *u, float *y, void *work);

/* ---- kernel table (internal; the one place where per-ISA variants get selected) ----
 * One entry per compute type: block geometry, dequantize, quantize (the reference one, or a
 * SIMD one that gives the same bytes), the dot of a weight row with an activation row of type
 * act_type, and a tiled GEMM over several weight rows x several activation rows:
 *     y[t * ldy + r] = vec_dot(w + r * w_stride, act + t * a_stride, n)   r < n_rows, t < n_tok
 * Every gemm element equals vec_dot of the same ISA bit for bit, whatever the tiling, so
 * matmul results do not depend on thread count or batch size. Across ISA levels, the integer
 * types (Q8_0, Q4_0) are bit-identical to the scalar reference; the float types (F32, F16,
 * BF16) differ by summation order only (double-accumulated chunks, ~1e-7 relative).
 * kz_qtraits_get() returns the active level's entry (see cpu.h); NULL if unsupported. */
typedef void (*kz_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t n_rows,
                           const void *act, size_t a_stride, int64_t n_tok, float *y, int64_t ldy);
typedef struct {
    uint32_t type, act_type;
    uint32_t blck, bytes;   /* elements / bytes per block */
    void (*dequant)(const void *src, float *dst, int64_t n);
    size_t (*quant)(const float *src, void *dst, int64_t n);
    float (*vec_dot)(const void *wrow, const void *act, int64_t n);
    kz_gemm_fn gemm;
} kz_qtraits;

/* 16-row interleaved Q4_0 layout, for kernels whose SIMD lane is a weight row (no horizontal
 * sums): rows in groups of 16, each group block by block, a block being 288 bytes = 4 x 64
 * bytes (dword j of row r at 64 j + 4 r: qs bytes 4j..4j+3, i.e. elements 4j.. low nibbles and
 * 16+4j.. high) then the 16 rows' fp16 scales. Same size as the 16 x 18 byte original blocks.
 * Packs n_rows (a multiple of 16) rows of n elements read with stride ws into dst. */
void kz_pack16_q4_0(const void *w, size_t ws, int64_t n_rows, int64_t n, void *dst);
/* bytes of one packed 16-row group of rows of n elements (16 x 18 bytes per block) */
static inline size_t kz_pack16_group_bytes(int64_t n) { return (size_t)(n / 32) * 288; }
/* The gemm over rows packed by kz_pack16_q4_0 (n_rows a multiple of 16), equal bit for bit to
 * the Q4_0 gemm of the same level on the unpacked rows; NULL where the active level (or the
 * given one, for tests) has no such kernel: then packing does not pay and is not done. */
typedef void (*kz_gemm_p16_fn)(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                               int64_t n_tok, float *y, int64_t ldy);
kz_gemm_p16_fn kz_gemm_p16_get(void);
kz_gemm_p16_fn kz_gemm_p16_get_isa(int isa);
/* The one-token case of a level's p16 gemm split in two, where the kernel needs a per-block
 * term of the activation row (AVX-512: VPDPBUSD multiplies unsigned nibbles, so each block's
 * dot is corrected by -8 x the sum of its quants): prep computes those n / 32 int32 once per
 * activation row (each from its own block, so a row can be prepared in pieces: kz_matmul's
 * threads do it share by share), gemv takes them - the same outputs as the gemm with n_tok = 1,
 * bit for bit.
 * Both NULL where the level's kernel has no such term. */
typedef struct {
    void (*prep)(const void *act, int64_t n, int32_t *aux);
    void (*gemv)(int64_t n, const void *pk, int64_t n_rows, const void *act, const int32_t *aux, float *y);
    int unit_rows; /* rows a call should hold whole multiples of: 32 where gemv streams two 16-row
                    * groups side by side, else 16 (kz_matmul splits the rows in such units) */
} kz_p16_gemv;
kz_p16_gemv kz_p16_gemv_get_isa(int isa);
const kz_qtraits *kz_qtraits_get(uint32_t type);

/* The scalar gemm of every type: one reference dot per element, rows outer (each weight row
 * read once). Defines static void name(...) with the kz_gemm_fn signature. */
#define KZ_SCALAR_GEMM(name, dot)                                                                 \
    static void name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,   \
                     int64_t nt, float *y, int64_t ldy) {                                         \
        for (int64_t r = 0; r < nr; r++)                                                          \
            for (int64_t t = 0; t < nt; t++)                                                      \
                y[t * ldy + r] = dot((const uint8_t *)w + (size_t)r * ws,                         \
                                     (const uint8_t *)a + (size_t)t * as, n);                     \
    }

/* entry of type in a family's table for level isa: levels[isa] (NULL: the level uses the
 * levels[0] scalar table), each table holding n entries; NULL if type is not there */
const kz_qtraits *kz_qtraits_in(const kz_qtraits *const *levels, size_t n, int isa, uint32_t type);
/* the entry of one ISA level (an int holding a kz_isa); NULL if the type is unsupported or the
 * level is not available on this CPU/build (tests compare every level with KZ_ISA_SCALAR) */
const kz_qtraits *kz_qtraits_get_isa(int isa, uint32_t type);

/* Type families outside quant.c, each in its own files with its own per-level tables:
 *   quant_act.c     Q8_1, Q8_K (activation-only: dequant + quant, vec_dot/gemm NULL)
 *   quant_legacy*.c Q4_1, Q5_0, Q5_1, IQ4_NL
 *   quant_k*.c      Q4_K, Q5_K, Q6_K
 *   quant_k2*.c     Q2_K, Q3_K, IQ4_XS
 * Each returns its entry for (isa, type), NULL if the type is not one of its own. quant.c
 * calls them only with a level that kz_isa_available() accepted. */
const kz_qtraits *kz_qtraits_act(int isa, uint32_t type);
const kz_qtraits *kz_qtraits_legacy(int isa, uint32_t type);
const kz_qtraits *kz_qtraits_kquant(int isa, uint32_t type);
const kz_qtraits *kz_qtraits_kquant2(int isa, uint32_t type);

/* Q4_0 reference quantizer with an explicit rounding mode: fused = 0 computes
 * (float)(x*id) + 8.5f with two roundings (what kz_quant_row uses; bit-identical to gguf-py and
 * to llama-quantize built without FMA contraction), fused = 1 uses fmaf(x, id, 8.5f) (what
 * llama-quantize gives when GCC contracts it into an FMA). Returns bytes or 0. */
size_t kz_quant_q4_0_ref(const float *src, void *dst, int64_t n, int fused);
#endif
