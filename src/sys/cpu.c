/* CPU feature detection (cpuid/xgetbv on x86-64, getauxval on Linux arm64) and the choice of
 * the kernel ISA level, each computed once per process under pthread_once (see cpu.h for why
 * these two immutable-after-init values are acceptable process state). */
#include "sys/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include "sys/log.h"
#include <stdlib.h>
#include <strings.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static kz_cpu_features g_feat;         /* written once by detect_once */
static kz_isa g_active = KZ_ISA_SCALAR; /* written once by choose_once */
static pthread_once_t g_feat_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_active_once = PTHREAD_ONCE_INIT;

static const char *const k_names[KZ_ISA_COUNT] = { "scalar", "avx2", "avx512", "neon", "dotprod", "i8mm" };

#if defined(__x86_64__)
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void detect_once(void) {
    kz_cpu_features f = { 0 };
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* vendor string in ebx, edx, ecx */
        f.amd = (b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u) ||  /* AuthenticAMD */
                (b == 0x6f677948u && d == 0x6e65476eu && c == 0x656e6975u);    /* HygonGenuine */
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        /* the OS must save YMM (XCR0 bits 1-2) and, for AVX-512, opmask/ZMM (bits 5-7) */
        const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
        const int ymm = avx && (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
        unsigned max_leaf = __get_cpuid_max(0, NULL);
        unsigned b7 = 0, c7 = 0, a71 = 0;
        if (max_leaf >= 7) {
            __cpuid_count(7, 0, a, b7, c7, d);
            unsigned b71, c71, d71;
            __cpuid_count(7, 1, a71, b71, c71, d71);
            (void)b71; (void)c71; (void)d71;
        }
        if (ymm) {
            f.fma = (c >> 12) & 1;
            f.f16c = (c >> 29) & 1;
            f.avx2 = (b7 >> 5) & 1;
            f.avxvnni = (a71 >> 4) & 1;
        }
        if (zmm) {
            f.avx512f = (b7 >> 16) & 1;
            f.avx512bw = (b7 >> 30) & 1;
            f.avx512vl = (b7 >> 31) & 1;
            f.avx512vnni = (c7 >> 11) & 1;
            f.avx512bf16 = (a71 >> 5) & 1;
        }
    }
#elif defined(__aarch64__)
    f.neon = 1; /* Advanced SIMD is mandatory in AArch64 */
#if defined(__linux__)
    /* bit numbers of the Linux arm64 hwcap ABI (asm/hwcap.h), spelled out for old headers */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f.fp16 = (hw >> 9) & 1 && (hw >> 10) & 1; /* FPHP + ASIMDHP */
    f.asimddp = (hw >> 20) & 1;
    f.i8mm = (hw2 >> 13) & 1;
    f.bf16 = (hw2 >> 14) & 1;
#endif
#endif
    g_feat = f;
}

const kz_cpu_features *kz_cpu_features_get(void) {
    pthread_once(&g_feat_once, detect_once);
    return &g_feat;
}

int kz_isa_available(kz_isa isa) {
    const kz_cpu_features *f = kz_cpu_features_get();
    switch (isa) {
    case KZ_ISA_SCALAR: return 1;
#if defined(__x86_64__)
    case KZ_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
    case KZ_ISA_AVX512:
        return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
#elif defined(__aarch64__)
    case KZ_ISA_NEON: return f->neon;
    case KZ_ISA_DOTPROD: return f->neon && f->asimddp;
    case KZ_ISA_I8MM: return f->neon && f->asimddp && f->i8mm;
#endif
    default: (void)f; return 0;
    }
}

kz_isa kz_isa_best(void) {
    for (int i = KZ_ISA_COUNT - 1; i > 0; i--)
        if (kz_isa_available((kz_isa)i)) return (kz_isa)i;
    return KZ_ISA_SCALAR;
}

/* KZ_ISA is read here, once; what it did goes to the app's log callback (never to stderr) */
static void choose_once(void) {
    kz_isa best = kz_isa_best(), want = best;
    const char *env = getenv("KZ_ISA");
    if (env && *env && strcasecmp(env, "auto") != 0) {
        if (kz_isa_from_name(env, &want) != 0) {
            kz_logf(KZ_LOG_WARN, "KZ_ISA=%s is not one of auto|scalar|avx2|avx512|neon|dotprod|i8mm; using %s",
                    env, k_names[best]);
            want = best;
        } else if (!kz_isa_available(want)) {
            kz_logf(KZ_LOG_WARN, "KZ_ISA=%s: this CPU or build cannot run %s kernels; using %s", env,
                    k_names[want], k_names[best]);
            want = best;
        } else {
            kz_logf(KZ_LOG_INFO, "KZ_ISA=%s: using %s kernels (best here: %s)", env, k_names[want],
                    k_names[best]);
        }
    } else {
        kz_logf(KZ_LOG_INFO, "using %s kernels (the best this CPU and build run)", k_names[best]);
    }
    g_active = want;
}

kz_isa kz_isa_active(void) {
    pthread_once(&g_active_once, choose_once);
    return g_active;
}

const char *kz_isa_name(kz_isa isa) {
    return (unsigned)isa < KZ_ISA_COUNT ? k_names[isa] : "?";
}

int kz_isa_from_name(const char *s, kz_isa *out) {
    if (!s) return -1;
    for (int i = 0; i < KZ_ISA_COUNT; i++)
        if (strcasecmp(s, k_names[i]) == 0) {
            *out = (kz_isa)i;
            return 0;
        }
    return -1;
}

int kz_cpu_describe(char *buf, size_t len) {
    const kz_cpu_features *f = kz_cpu_features_get();
    const struct { int on; const char *name; } fl[] = {
        { f->avx2, "avx2" }, { f->fma, "fma" }, { f->f16c, "f16c" }, { f->avx512f, "avx512f" },
        { f->avx512bw, "avx512bw" }, { f->avx512vl, "avx512vl" }, { f->avx512vnni, "avx512vnni" },
        { f->avxvnni, "avxvnni" }, { f->avx512bf16, "avx512bf16" }, { f->neon, "neon" },
        { f->asimddp, "dotprod" }, { f->i8mm, "i8mm" }, { f->fp16, "fp16" }, { f->bf16, "bf16" },
    };
#if defined(__x86_64__)
    const char *arch = "x86-64";
#elif defined(__aarch64__)
    const char *arch = "arm64";
#else
    const char *arch = "generic";
#endif
    size_t o = 0;
    int w = snprintf(buf, len, "%s:", arch);
    if (w < 0) return w;
    o = (size_t)w;
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        if (!fl[i].on) continue;
        w = snprintf(o < len ? buf + o : NULL, o < len ? len - o : 0, " %s", fl[i].name);
        if (w < 0) return w;
        o += (size_t)w;
    }
    w = snprintf(o < len ? buf + o : NULL, o < len ? len - o : 0, "; kernels: %s",
                 k_names[kz_isa_active()]);
    if (w < 0) return w;
    return (int)(o + (size_t)w);
}
