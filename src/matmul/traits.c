/* The kernel table, the single dispatch point: k_traits[isa][type]. The scalar level is the
 * reference of every type; each SIMD level is the level it extends with only the fields it
 * replaces written after it (a later designated initializer overrides an earlier one, C11
 * 6.7.9p19), so "what AVX-512 changes" is one short list. kz_qtraits_get() uses the level cpu.c
 * chose once per process. */
#include "matmul/quant.h"

#include <stddef.h>

#include "matmul/kernels.h"
#include "matmul/ref/ref.h"
#include "model/types.h"
#include "sys/cpu.h"

/* overriding earlier initializers is the point of the level lists below */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Winitializer-overrides"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Woverride-init"
#endif

#define REF(T, t, A, BLCK, BYTES)                                                                 \
    [KZ_T_##T] = {.type = KZ_T_##T, .act_type = KZ_T_##A, .blck = BLCK, .bytes = BYTES,           \
                  .dequant = kz_ref_dequant_##t, .quant = kz_ref_quant_##t, .vec_dot = kz_ref_dot_##t, \
                  .gemm = kz_ref_gemm_##t}
/* activation-only types: weights are never stored in them (no dot, no gemm) */
#define REF_ACT(T, t, BLCK, BYTES)                                                                \
    [KZ_T_##T] = {.type = KZ_T_##T, .act_type = KZ_T_##T, .blck = BLCK, .bytes = BYTES,           \
                  .dequant = kz_ref_dequant_##t, .quant = kz_ref_quant_##t}

/*         type    kernels act     elems bytes per block */
#define LEVEL_SCALAR                                                                              \
    REF(F32, f32, F32, 1, 4), REF(F16, f16, F16, 1, 2), REF(BF16, bf16, BF16, 1, 2),              \
    REF(Q8_0, q8_0, Q8_0, 32, 34), REF(Q4_0, q4_0, Q8_0, 32, 18),                                 \
    REF(Q4_1, q4_1, Q8_1, 32, 20), REF(Q5_0, q5_0, Q8_0, 32, 22), REF(Q5_1, q5_1, Q8_1, 32, 24),  \
    REF(IQ4_NL, iq4_nl, Q8_0, 32, 18),                                                            \
    REF(Q4_K, q4_K, Q8_K, 256, 144), REF(Q5_K, q5_K, Q8_K, 256, 176), REF(Q6_K, q6_K, Q8_K, 256, 210), \
    REF(Q2_K, q2_K, Q8_K, 256, 84), REF(Q3_K, q3_K, Q8_K, 256, 110), REF(IQ4_XS, iq4_xs, Q8_K, 256, 136), \
    REF_ACT(Q8_1, q8_1, 32, 36), REF_ACT(Q8_K, q8_K, 256, 292)

/* a level's dot and gemm of type T, or its gemm alone (the dot stays the one it extends) */
#define DOT_GEMM(isa, T, t) [KZ_T_##T].vec_dot = kz_##isa##_dot_##t, [KZ_T_##T].gemm = kz_##isa##_gemm_##t
#define GEMM(isa, T, t) [KZ_T_##T].gemm = kz_##isa##_gemm_##t

/* Dequantize (but F16's: the KV cache rows attention reads), the weight quantizers and the
 * activation quantizers of Q8_1 / Q8_K stay scalar: not on a hot path. */
#if defined(__x86_64__)
#define LEVEL_AVX2                                                                                \
    LEVEL_SCALAR, DOT_GEMM(avx2, F32, f32), DOT_GEMM(avx2, F16, f16), DOT_GEMM(avx2, BF16, bf16), \
    [KZ_T_F16].dequant = kz_avx2_dequant_f16, [KZ_T_F16].quant = kz_avx2_quant_f16,               \
    [KZ_T_BF16].quant = kz_avx2_quant_bf16, [KZ_T_Q8_0].quant = kz_avx2_quant_q8_0,               \
    DOT_GEMM(avx2, Q8_0, q8_0), DOT_GEMM(avx2, Q4_0, q4_0),                                       \
    DOT_GEMM(avx2, Q4_1, q4_1), DOT_GEMM(avx2, Q5_0, q5_0), DOT_GEMM(avx2, Q5_1, q5_1),           \
    DOT_GEMM(avx2, IQ4_NL, iq4_nl),                                                               \
    DOT_GEMM(avx2, Q4_K, q4_K), DOT_GEMM(avx2, Q5_K, q5_K), DOT_GEMM(avx2, Q6_K, q6_K),           \
    DOT_GEMM(avx2, Q2_K, q2_K), DOT_GEMM(avx2, Q3_K, q3_K), DOT_GEMM(avx2, IQ4_XS, iq4_xs)
/* AVX-512 VNNI: the integer dots (floats, Q2_K/Q3_K/IQ4_XS and the other quantizers: AVX2's) */
#define LEVEL_AVX512                                                                              \
    LEVEL_AVX2, [KZ_T_Q8_0].quant = kz_avx512_quant_q8_0,                                         \
    DOT_GEMM(avx512, Q8_0, q8_0), DOT_GEMM(avx512, Q4_0, q4_0),                                   \
    DOT_GEMM(avx512, Q4_1, q4_1), DOT_GEMM(avx512, Q5_0, q5_0), DOT_GEMM(avx512, Q5_1, q5_1),     \
    DOT_GEMM(avx512, IQ4_NL, iq4_nl),                                                             \
    DOT_GEMM(avx512, Q4_K, q4_K), DOT_GEMM(avx512, Q5_K, q5_K), DOT_GEMM(avx512, Q6_K, q6_K)
#endif

#if defined(__aarch64__)
#define LEVEL_NEON                                                                                \
    LEVEL_SCALAR, DOT_GEMM(neon, F32, f32), DOT_GEMM(neon, F16, f16), DOT_GEMM(neon, BF16, bf16), \
    [KZ_T_F16].dequant = kz_neon_dequant_f16, [KZ_T_F16].quant = kz_neon_quant_f16,               \
    [KZ_T_BF16].quant = kz_neon_quant_bf16, [KZ_T_Q8_0].quant = kz_neon_quant_q8_0,               \
    DOT_GEMM(neon, Q8_0, q8_0), DOT_GEMM(neon, Q4_0, q4_0),                                       \
    DOT_GEMM(neon, Q4_1, q4_1), DOT_GEMM(neon, Q5_0, q5_0), DOT_GEMM(neon, Q5_1, q5_1),           \
    DOT_GEMM(neon, IQ4_NL, iq4_nl),                                                               \
    DOT_GEMM(neon, Q4_K, q4_K), DOT_GEMM(neon, Q5_K, q5_K), DOT_GEMM(neon, Q6_K, q6_K),           \
    DOT_GEMM(neon, Q2_K, q2_K), DOT_GEMM(neon, Q3_K, q3_K), DOT_GEMM(neon, IQ4_XS, iq4_xs)
/* SDOT: the integer dots */
#define LEVEL_DOTPROD                                                                             \
    LEVEL_NEON, DOT_GEMM(dotprod, Q8_0, q8_0), DOT_GEMM(dotprod, Q4_0, q4_0),                     \
    DOT_GEMM(dotprod, Q4_1, q4_1), DOT_GEMM(dotprod, Q5_0, q5_0), DOT_GEMM(dotprod, Q5_1, q5_1),  \
    DOT_GEMM(dotprod, IQ4_NL, iq4_nl),                                                            \
    DOT_GEMM(dotprod, Q4_K, q4_K), DOT_GEMM(dotprod, Q5_K, q5_K), DOT_GEMM(dotprod, Q6_K, q6_K),  \
    DOT_GEMM(dotprod, Q2_K, q2_K), DOT_GEMM(dotprod, Q3_K, q3_K), DOT_GEMM(dotprod, IQ4_XS, iq4_xs), \
    GEMM(dotprod_thin, Q4_K, q4_K), GEMM(dotprod_thin, Q5_K, q5_K), GEMM(dotprod_thin, Q6_K, q6_K)
/* SMMLA 2x2 tiles for the gemms (one-token rows and leftovers go to the dotprod dots inside) */
#define LEVEL_I8MM                                                                                \
    LEVEL_DOTPROD, GEMM(i8mm, Q8_0, q8_0), GEMM(i8mm, Q4_0, q4_0),                                \
    GEMM(i8mm, Q4_1, q4_1), GEMM(i8mm, Q5_0, q5_0), GEMM(i8mm, Q5_1, q5_1), GEMM(i8mm, IQ4_NL, iq4_nl), \
    GEMM(i8mm, Q4_K, q4_K), GEMM(i8mm, Q5_K, q5_K), GEMM(i8mm, Q6_K, q6_K)
#endif

static const kz_qtraits k_traits[KZ_ISA_COUNT][KZ_T_COUNT] = {
    [KZ_ISA_SCALAR] = {LEVEL_SCALAR},
#if defined(__x86_64__)
    [KZ_ISA_AVX2] = {LEVEL_AVX2},
    [KZ_ISA_AVX512] = {LEVEL_AVX512},
#endif
#if defined(__aarch64__)
    [KZ_ISA_NEON] = {LEVEL_NEON},
    [KZ_ISA_DOTPROD] = {LEVEL_DOTPROD},
    [KZ_ISA_I8MM] = {LEVEL_I8MM},
#endif
};

const kz_qtraits *kz_qtraits_get_isa(int isa, uint32_t type) {
    if (isa < 0 || isa >= KZ_ISA_COUNT || type >= KZ_T_COUNT || !kz_isa_available((kz_isa)isa)) return NULL;
    const kz_qtraits *t = &k_traits[isa][type];
    return t->blck ? t : NULL;
}

const kz_qtraits *kz_qtraits_get(uint32_t type) { return kz_qtraits_get_isa((int)kz_isa_active(), type); }

kz_gemm_q4_0_16x4_fn kz_gemm_q4_0_16x4_get_isa(int isa) {
#if defined(__x86_64__)
    /* The decode GEMV's software prefetch (x86/b32.c, LANE_PF) is a speed choice only (same
     * bits): Intel cores need it to keep enough lines in flight, AMD cores ran slower with it
     * (docs/PERFORMANCE.md), so it is off on AMD. */
    if (isa == KZ_ISA_AVX512 && kz_isa_available(KZ_ISA_AVX512))
        return kz_cpu_features_get()->amd ? kz_avx512_gemm_q4_0_16x4_nopf : kz_avx512_gemm_q4_0_16x4;
    if (isa == KZ_ISA_AVX2 && kz_isa_available(KZ_ISA_AVX2)) return kz_avx2_gemm_q4_0_16x4;
#endif
#if defined(__aarch64__)
    if (isa == KZ_ISA_DOTPROD && kz_isa_available(KZ_ISA_DOTPROD)) return kz_dotprod_gemm_q4_0_16x4;
    if (isa == KZ_ISA_I8MM && kz_isa_available(KZ_ISA_I8MM)) return kz_i8mm_gemm_q4_0_16x4;
#endif
    (void)isa;
    return NULL;
}

kz_gemm_q4_0_16x4_fn kz_gemm_q4_0_16x4_get(void) { return kz_gemm_q4_0_16x4_get_isa((int)kz_isa_active()); }

int kz_q4_0_16x4_supported(void) { return kz_gemm_q4_0_16x4_get() != NULL; }

kz_gemm_q4_0_16x4_rec kz_gemm_q4_0_16x4_rec_get_isa(int isa) {
    kz_gemm_q4_0_16x4_rec g = {0, NULL, NULL};
#if defined(__aarch64__)
    if (isa == KZ_ISA_I8MM && kz_isa_available(KZ_ISA_I8MM))
        g = (kz_gemm_q4_0_16x4_rec){kz_i8mm_q4_0_16x4_rec_size(), kz_i8mm_q4_0_16x4_rec, kz_i8mm_gemm_q4_0_16x4_rec};
#endif
    (void)isa;
    return g;
}

kz_gemv_q4_0_16x4 kz_gemv_q4_0_16x4_get_isa(int isa) {
    kz_gemv_q4_0_16x4 g = {NULL, NULL, NULL, 16};
#if defined(__x86_64__)
    if (isa == KZ_ISA_AVX512 && kz_isa_available(KZ_ISA_AVX512)) { /* the prefetch choice as above */
        const int amd = kz_cpu_features_get()->amd;
        g.prep = kz_avx2_q8_0_corr; /* the same exact integers */
        g.gemv = amd ? kz_avx512_gemv_q4_0_16x4_nopf : kz_avx512_gemv_q4_0_16x4;
        g.thin = kz_avx512_thin_q4_0_16x4;
        g.unit_rows = amd ? 16 : 32; /* the prefetching GEMV pairs its groups (x86/b32.c) */
    } else if (isa == KZ_ISA_AVX2 && kz_isa_available(KZ_ISA_AVX2)) {
        g = (kz_gemv_q4_0_16x4){kz_avx2_q8_0_corr, kz_avx2_gemv_q4_0_16x4, kz_avx2_thin_q4_0_16x4, 16};
    }
#endif
    (void)isa;
    return g;
}

