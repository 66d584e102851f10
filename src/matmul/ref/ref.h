/* The scalar reference kernels of every block type (the ref/ files, gathered by traits.c): the bytes
 * llama-quantize / gguf-py write and read, and the dots every SIMD level must reproduce. */
#ifndef KZ_MATMUL_REF_H
#define KZ_MATMUL_REF_H
#include <stddef.h>
#include <stdint.h>

/* dequantize, quantize, dot with the type's activation row, and the gemm of those dots */
#define KZ_REF_DECL(t)                                                                            \
    void kz_ref_dequant_##t(const void *src, float *dst, int64_t n);                              \
    size_t kz_ref_quant_##t(const float *src, void *dst, int64_t n);                              \
    float kz_ref_dot_##t(const void *w, const void *a, int64_t n);                                \
    void kz_ref_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, \
                         int64_t nt, float *y, int64_t ldy);
KZ_REF_DECL(f32) KZ_REF_DECL(f16) KZ_REF_DECL(bf16)                                            /* float.c */
KZ_REF_DECL(q8_0) KZ_REF_DECL(q4_0) KZ_REF_DECL(q4_1) KZ_REF_DECL(q5_0) KZ_REF_DECL(q5_1) KZ_REF_DECL(iq4_nl) /* b32.c */
KZ_REF_DECL(q2_K) KZ_REF_DECL(q3_K) KZ_REF_DECL(q4_K) KZ_REF_DECL(q5_K) KZ_REF_DECL(q6_K) KZ_REF_DECL(iq4_xs) /* kquant.c */
/* activation-only types (act.c): no weight dot */
void kz_ref_dequant_q8_1(const void *src, float *dst, int64_t n);
size_t kz_ref_quant_q8_1(const float *src, void *dst, int64_t n);
void kz_ref_dequant_q8_K(const void *src, float *dst, int64_t n);
size_t kz_ref_quant_q8_K(const float *src, void *dst, int64_t n);

/* search and packing steps shared by the reference quantizers and the weighted ones (weighted.c) */
float kz_ref_make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw); /* qw NULL: x^2 */
float kz_ref_iq4_scale(const float *x32, const float *w32);                        /* w32 NULL: x^2 */
int kz_ref_iq4_index(float v);
void kz_ref_iq4_nl_block(const float *x32, float d, uint8_t *b);
void kz_ref_iq4_xs_block(const float *x256, const float *qw, uint8_t *b);          /* qw NULL: ref */
void kz_ref_q6_K_block(const float *x256, const float *qw, uint8_t *b);            /* qw NULL: ref */
void kz_ref_pack32(const int q[32], uint8_t *qs, uint8_t *qh);
/* the tails of Q2_K / Q3_K once the scales are stored in y: requantise x, pack L */
void kz_ref_q2_K_finish(const float *x256, uint8_t *L, uint8_t *y);
void kz_ref_q3_K_finish(const float *x256, int8_t *L, uint8_t *y);
void kz_ref_q45_K_finish(const float *x256, const uint8_t ls[8], const uint8_t lm[8], float d, float dmin, int nbits,
                         uint8_t *L, uint8_t *b);

#endif
