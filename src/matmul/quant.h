/* Weight types used for compute: scalar reference dequantize / quantize / dot.
 * Matmul scheme (as llama.cpp, so results match real GGUF semantics): activations are
 * quantised to the weight type's "activation type" (F32->F32, F16->F16, BF16->BF16,
 * Q8_0/Q4_0 -> Q8_0 blocks), then each row dot is computed in that domain. */
#ifndef KZ_QUANT_H
#define KZ_QUANT_H
#include <stddef.h>
#include <stdint.h>

/* 1 if the type can be used as a matmul weight / dequantized */
int kz_type_compute_ok(uint32_t type);
/* dequantize n elements (n multiple of block size); returns 0, -1 if unsupported */
int kz_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
/* quantize n floats into type (F32/F16/BF16/Q8_0/Q4_0 reference quantizers as llama-quantize);
 * returns bytes written or 0 if unsupported */
size_t kz_quant_row(uint32_t type, const float *src, void *dst, int64_t n);
/* quantize nrows rows of n_per_row floats as llama.cpp's ggml_quantize_chunk does with the
 * importance vector imatrix[n_per_row] (the weighted quantizers, ref/weighted.c); imatrix NULL is
 * llama.cpp's unweighted path (= kz_quant_row). Types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, IQ4_XS, Q2_K..Q6_K. Returns bytes written, 0 if unsupported. */
size_t kz_quant_row_w(uint32_t type, const float *src, void *dst, int64_t n_per_row, int64_t nrows,
                      const float *imatrix);

/* activation type for a weight type, and bytes of one quantised activation row */
uint32_t kz_act_type(uint32_t wtype);
size_t kz_act_row_bytes(uint32_t wtype, int64_t n);
/* quantise one f32 activation row into the activation format of wtype */
void kz_act_quant(uint32_t wtype, const float *x, void *dst, int64_t n);
/* dot of one weight row (type wtype) with one quantised activation row */
float kz_vec_dot(uint32_t wtype, const void *wrow, const void *act, int64_t n);

/* ---- kernel table (internal; the one place where per-ISA variants get selected) ----
 * One entry per compute type: block geometry, dequantize, quantize (the reference one, or a
 * SIMD one that gives the same bytes), the dot of a weight row with an activation row of type
 * act_type, and a tiled GEMM over several weight rows x several activation rows:
 *     y[t * ldy + r] = vec_dot(w + r * w_stride, act + t * a_stride, n)   r < n_rows, t < n_tok
 * Every gemm element equals vec_dot of the same ISA bit for bit, whatever the tiling, so
 * matmul results do not depend on thread count or batch size. Across ISA levels, the integer
 * types (Q8_0, Q4_0) are bit-identical to the scalar reference; the float types (F32, F16,
 * BF16) differ by summation order only (double-accumulated chunks, ~1e-7 relative).
 * The table (traits.c) is indexed [isa][type]: the scalar reference of every type, then each
 * ISA level's overrides on the level it extends. kz_qtraits_get() returns the active level's
 * entry (see cpu.h); NULL if unsupported. */
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

/* The gemm over rows packed by kz_repack_q4_0_16x4 (n_rows a multiple of 16), equal bit for bit to
 * the Q4_0 gemm of the same level on the unpacked rows; NULL where the active level (or the
 * given one, for tests) has no such kernel: then packing does not pay and is not done. */
typedef void (*kz_gemm_q4_0_16x4_fn)(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride,
                                     int64_t n_tok, float *y, int64_t ldy);
kz_gemm_q4_0_16x4_fn kz_gemm_q4_0_16x4_get(void);
kz_gemm_q4_0_16x4_fn kz_gemm_q4_0_16x4_get_isa(int isa);
/* The one-token case of a level's q4_0_16x4 gemm split in two, where the kernel needs a per-block
 * term of the activation row (AVX-512: VPDPBUSD multiplies unsigned nibbles, so each block's
 * dot is corrected by -8 x the sum of its quants): prep computes those n / 32 int32 once per
 * activation row (each from its own block, so a row can be prepared in pieces: kz_matmul's
 * threads do it share by share), gemv takes them - the same outputs as the gemm with n_tok = 1,
 * bit for bit; thin does the same for 2..4 tokens (the gemm's outputs for that n_tok).
 * All NULL where the level's kernel has no such term. */
typedef struct {
    void (*prep)(const void *act, int64_t n, int32_t *aux);
    void (*gemv)(int64_t n, const void *pk, int64_t n_rows, const void *act, const int32_t *aux, float *y);
    /* 2..4 tokens (a speculative verify's thin batch), token t's terms at aux + t * n / 32 */
    void (*thin)(int64_t n, const void *pk, int64_t n_rows, const void *act, size_t a_stride, int64_t n_tok,
                 const int32_t *aux, float *y, int64_t ldy);
    int unit_rows; /* rows a call should hold whole multiples of: 32 where gemv streams two 16-row
                    * groups side by side, else 16 (kz_matmul splits the rows in such units) */
} kz_gemv_q4_0_16x4;
kz_gemv_q4_0_16x4 kz_gemv_q4_0_16x4_get_isa(int isa);
/* A level's q4_0_16x4 prefill split in two, where its kernel rearranges the activations into
 * per-(token pair, block) records: kz_matmul makes them once per matmul (prep, pair by pair)
 * instead of once per kernel call. Records of 16-token group g, block b, pair p (0..7) of the
 * group sit at rec + ((g * nb + b) * 8 + p) * rec_bytes (nb = n / 32); prep writes the records
 * of one pair (n_tok 1 or 2 tokens at act, rows of a_stride bytes), blocks [b0, b0 + nbc), with
 * rec pointing at that pair's record of block 0; gemm reads those of n_tok tokens from the
 * group at rec on: the same outputs as the level's gemm, bit for bit. All 0 / NULL where the
 * level has no such kernel. */
typedef struct {
    size_t rec_bytes;
    void (*prep)(const void *act, size_t a_stride, int n_tok, int64_t b0, int nbc, void *rec);
    void (*gemm)(int64_t n, const void *pk, int64_t n_rows, const void *rec, int64_t n_tok, float *y, int64_t ldy);
} kz_gemm_q4_0_16x4_rec;
kz_gemm_q4_0_16x4_rec kz_gemm_q4_0_16x4_rec_get_isa(int isa);
const kz_qtraits *kz_qtraits_get(uint32_t type);

/* the entry of one ISA level (an int holding a kz_isa); NULL if the type is unsupported or the
 * level is not available on this CPU/build (tests compare every level with KZ_ISA_SCALAR) */
const kz_qtraits *kz_qtraits_get_isa(int isa, uint32_t type);

/* Q4_0 reference quantizer with an explicit rounding mode: fused = 0 computes
 * (float)(x*id) + 8.5f with two roundings (what kz_quant_row uses; bit-identical to gguf-py and
 * to llama-quantize built without FMA contraction), fused = 1 uses fmaf(x, id, 8.5f) (what
 * llama-quantize gives when GCC contracts it into an FMA). Returns bytes or 0. */
size_t kz_quant_q4_0_ref(const float *src, void *dst, int64_t n, int fused);
#endif
