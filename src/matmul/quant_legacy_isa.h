/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL kernels per ISA level (gathered by traits.c).
 * Contract: every dot and gemm here is bit-identical to the scalar reference of
 * quant_legacy.c (integer sums per block, then that file's float ops in its order). */
#ifndef KZ_QUANT_LEGACY_ISA_H
#define KZ_QUANT_LEGACY_ISA_H
#include <stddef.h>
#include <stdint.h>

#define KZ_LEG_DOT(isa, t) float kz_##isa##_dot_##t(const void *w, const void *a, int64_t n);
#define KZ_LEG_GEMM(isa, t)                                                                       \
    void kz_##isa##_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a,     \
                             size_t as, int64_t nt, float *y, int64_t ldy);
#define KZ_LEG_ALL(isa)                                                                          \
    KZ_LEG_DOT(isa, q4_1) KZ_LEG_DOT(isa, q5_0) KZ_LEG_DOT(isa, q5_1) KZ_LEG_DOT(isa, iq4_nl)     \
    KZ_LEG_GEMM(isa, q4_1) KZ_LEG_GEMM(isa, q5_0) KZ_LEG_GEMM(isa, q5_1) KZ_LEG_GEMM(isa, iq4_nl)

/* IQ4_NL codebook (kvalues_iq4nl), shared by every level */
extern const int8_t kz_iq4nl_values[16];

#if defined(__x86_64__)
KZ_LEG_ALL(avx2) /* quant_legacy_x86.c: AVX2 (maddubs) */
KZ_LEG_ALL(avx512) /* quant_legacy_x86.c: AVX-512 VNNI (256-bit vpdpbusd) */
#endif
#if defined(__aarch64__)
KZ_LEG_ALL(neon) /* quant_legacy_arm.c */
KZ_LEG_ALL(dotprod) /* quant_legacy_arm_dot.c (SDOT) */
/* quant_legacy_arm_i8mm.c: SMMLA 2 rows x 2 tokens gemm (dots are the dotprod ones) */
KZ_LEG_GEMM(i8mm, q4_1) KZ_LEG_GEMM(i8mm, q5_0) KZ_LEG_GEMM(i8mm, q5_1) KZ_LEG_GEMM(i8mm, iq4_nl)
#endif
#endif
