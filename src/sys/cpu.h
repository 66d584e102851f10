/* CPU feature detection and the choice of kernel ISA level, made once per process.
 *
 * Levels are ordered within an architecture (x86-64: scalar < avx2 < avx512; arm64: scalar <
 * neon < dotprod < i8mm). The active level is the best one this build and CPU can run, unless
 * the environment variable KZ_ISA names a lower one (scalar|avx2|avx512|neon|dotprod|i8mm|auto).
 * The choice, or the refusal of a level the CPU or build cannot run (the best level is then
 * used instead), is reported once through the app's log callback (kz_log_set).
 *
 * State: the detected features and the chosen level are computed on first use under
 * pthread_once and never change afterwards (immutable after init, so they are not shared
 * mutable state: every thread and every model of the process sees the same kernels). Tests
 * that need another level either call the per-level kernel tables directly
 * (kz_qtraits_get_isa) or run a child process with KZ_ISA set. */
#ifndef KZ_CPU_H
#define KZ_CPU_H
#include <stddef.h>

typedef enum {
    KZ_ISA_SCALAR = 0,
    KZ_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    KZ_ISA_AVX512 = 2,  /* + AVX-512 F/BW/VL + VNNI (256-bit VNNI dots) */
    KZ_ISA_NEON = 3,    /* AArch64 Advanced SIMD (baseline) */
    KZ_ISA_DOTPROD = 4, /* + SDOT (FEAT_DotProd) */
    KZ_ISA_I8MM = 5,    /* + SMMLA (FEAT_I8MM), with dotprod */
    KZ_ISA_COUNT = 6
} kz_isa;

typedef struct {
    /* x86 (all 0 elsewhere); AVX bits only when the OS saves the registers (XCR0) */
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avxvnni, avx512bf16;
    int amd; /* vendor AuthenticAMD / HygonGenuine (a tuning choice, never a correctness one) */
    /* arm64 (all 0 elsewhere) */
    int neon, asimddp, i8mm, fp16, bf16;
} kz_cpu_features;

/* features of this CPU (detected once) */
const kz_cpu_features *kz_cpu_features_get(void);
/* 1 if this build has kernels for isa and this CPU can run them (scalar: always) */
int kz_isa_available(kz_isa isa);
/* best available level */
kz_isa kz_isa_best(void);
/* the level every dispatched kernel uses: best, or KZ_ISA if set and available (once) */
kz_isa kz_isa_active(void);
/* 1 for the x86 levels that include AVX2 (+FMA +F16C): avx2 and avx512 */
static inline int kz_isa_has_avx2(kz_isa isa) { return isa == KZ_ISA_AVX2 || isa == KZ_ISA_AVX512; }
/* "scalar", "avx2", ...; "?" for an invalid value */
const char *kz_isa_name(kz_isa isa);
/* parse a level name (case-insensitive); 0 on success, -1 if unknown */
int kz_isa_from_name(const char *s, kz_isa *out);
/* one line such as "x86-64: avx2 fma f16c avx512f ...; kernels: avx512" (snprintf style) */
int kz_cpu_describe(char *buf, size_t len);
#endif
