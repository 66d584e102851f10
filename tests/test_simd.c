/* SIMD kernels vs the scalar reference, for every ISA level this CPU and build can run:
 *  - activation conversion (f32 -> Q8_0 / F16 / BF16): identical bytes, incl. ties, NaN, inf,
 *    subnormals, blocks whose scale overflows;
 *  - Q8_0 / Q4_0 dots and GEMM tiles: bit-identical to scalar (also for raw random weight
 *    bytes, -128 included); F32 / F16 / BF16: within 1e-6 of sum |w_i a_i| of scalar, and every
 *    gemm element bit-identical to the same level's vec_dot;
 *  - odd row counts (1, 3, 17, 63), token counts around the 4-token tile, lengths that are not
 *    multiples of the vector width / float chunk, strided output with untouched padding;
 *  - KZ_ISA handling (child processes, since the level is chosen once per process);
 *  - greedy tokens identical across levels on tiny qwen35 / qwen3 models (child processes with
 *    KZ_ISA set), logits bit-identical where every matmul is integer (qwen3 Q8_0 / Q4_0).
 * KZ_TEST_SMALL=1 shrinks the model part (for slow emulators); sizes stay odd. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kazeia.h"
#include "sys/cpu.h"
#include "sys/fp16.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "matmul/quant.h"
#include "model/types.h"

static const uint32_t TYPES[] = { KZ_T_F32, KZ_T_F16, KZ_T_BF16, KZ_T_Q8_0, KZ_T_Q4_0 };
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])
static const char *tname(uint32_t t) {
    switch (t) {
    case KZ_T_F32: return "F32";
    case KZ_T_F16: return "F16";
    case KZ_T_BF16: return "BF16";
    case KZ_T_Q8_0: return "Q8_0";
    case KZ_T_Q4_0: return "Q4_0";
    }
    return "?";
}
static int is_q(uint32_t t) { return t == KZ_T_Q8_0 || t == KZ_T_Q4_0; }

/* random finite fp16 scale of moderate size (products of scales stay normal floats) */
static uint16_t rand_scale(unsigned long long *s) {
    float v = kt_randf(s) * powf(2.0f, (float)(kt_rng(s) % 12) - 8.0f);
    return kz_f32_to_fp16(v == 0 ? 0.25f : v);
}

/* activation type without touching the dispatched tables: the parent process must not fix
 * its level before the KZ_ISA child processes are forked */
static uint32_t act_type(uint32_t t) { return kz_qtraits_get_isa(KZ_ISA_SCALAR, t)->act_type; }

static int n_levels;
static kz_isa levels[KZ_ISA_COUNT]; /* available levels other than scalar */

/* ---------------- activation conversion ---------------- */

static void special_fill(float *x, int64_t n, unsigned long long *s, int kind) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)kt_rng(s);
        switch (kind) {
        case 0: x[i] = kt_randf(s) * 100.0f; break;                 /* plain */
        case 1: x[i] = kz_bits_f32(u); break;                        /* any bit pattern (NaN, inf, subnormal) */
        case 2: x[i] = (float)((int)(kt_rng(s) % 255) - 127) + 0.5f; /* ties with d ~ 1 */
            if (i % 32 == 0) x[i] = 127.0f;
            break;
        case 3: x[i] = kz_bits_f32(u & 0x807fffffu); break;          /* subnormals: scale underflows */
        case 4: x[i] = kz_bits_f32((u & 0x80ffffffu) | 0x7e000000u); break; /* huge */
        default: { /* fp16/bf16 rounding boundaries: low bits near the halfway points */
            static const uint32_t lo[] = { 0, 1, 0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001, 0xffff };
            x[i] = kz_bits_f32((u & 0xffff0000u) | lo[kt_rng(s) % 9]);
            if ((kt_rng(s) & 7) == 0) x[i] = kz_bits_f32((u & 0x807fe000u) | 0x1000u | ((kt_rng(s) % 40 + 100) << 23));
        }
        }
    }
}

static void test_act_quant(void) {
    static const int64_t NQ[] = { 32, 32 * 3, 32 * 33, 32 * 129 };
    static const int64_t NF[] = { 1, 7, 8, 9, 31, 229, 1029 };
    unsigned long long s = 2024;
    for (int li = 0; li < n_levels; li++) {
        int bad_q = 0, bad_f = 0, bad_b = 0, cases = 0;
        const kz_qtraits *sq = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_Q8_0), *vq = kz_qtraits_get_isa(levels[li], KZ_T_Q8_0);
        const kz_qtraits *sf = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_F16), *vf = kz_qtraits_get_isa(levels[li], KZ_T_F16);
        const kz_qtraits *sb = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_BF16), *vb = kz_qtraits_get_isa(levels[li], KZ_T_BF16);
        CHECK(sq && vq && sf && vf && sb && vb);
        if (!(sq && vq && sf && vf && sb && vb)) continue;
        for (int kind = 0; kind < 6; kind++)
            for (int rep = 0; rep < 6; rep++) {
                for (size_t ni = 0; ni < sizeof NQ / sizeof NQ[0]; ni++) {
                    int64_t n = NQ[ni];
                    float *x = malloc(sizeof(float) * n);
                    uint8_t *a = malloc(kz_row_bytes(KZ_T_Q8_0, n)), *b = malloc(kz_row_bytes(KZ_T_Q8_0, n));
                    special_fill(x, n, &s, kind);
                    if (rep == 1) memset(x, 0, 32 * sizeof(float));
                    memset(a, 0xAA, kz_row_bytes(KZ_T_Q8_0, n));
                    memset(b, 0x55, kz_row_bytes(KZ_T_Q8_0, n));
                    size_t ra = sq->quant(x, a, n), rb = vq->quant(x, b, n);
                    if (ra != rb || memcmp(a, b, ra)) bad_q++;
                    cases++;
                    free(x); free(a); free(b);
                }
                for (size_t ni = 0; ni < sizeof NF / sizeof NF[0]; ni++) {
                    int64_t n = NF[ni];
                    float *x = malloc(sizeof(float) * n);
                    uint8_t *a = malloc(2 * n), *b = malloc(2 * n);
                    special_fill(x, n, &s, kind);
                    memset(a, 0xAA, 2 * n);
                    memset(b, 0x55, 2 * n);
                    if (sf->quant(x, a, n) != vf->quant(x, b, n) || memcmp(a, b, 2 * n)) bad_f++;
                    memset(b, 0x55, 2 * n);
                    if (sb->quant(x, a, n) != vb->quant(x, b, n) || memcmp(a, b, 2 * n)) bad_b++;
                    free(x); free(a); free(b);
                }
            }
        CHECKF(bad_q == 0 && bad_f == 0 && bad_b == 0, "%s act conversion differs from scalar: Q8_0 %d F16 %d BF16 %d rows",
               kz_isa_name(levels[li]), bad_q, bad_f, bad_b);
        printf("  %-7s act conversion Q8_0/F16/BF16 identical to scalar (%d Q8_0 rows, specials incl.)\n",
               kz_isa_name(levels[li]), cases);
    }
}

/* ---------------- dots and gemm ---------------- */

/* weight rows and activation rows of type t (activation type of t), from random floats or,
 * for the integer types, raw random bytes with finite scales (-128 weights included) */
static void make_rows(uint32_t t, int64_t n, int rows, int raw, uint8_t *dst, unsigned long long *s) {
    const kz_qtraits *sc = kz_qtraits_get_isa(KZ_ISA_SCALAR, t);
    size_t rb = kz_row_bytes(t, n);
    float *x = malloc(sizeof(float) * n);
    for (int r = 0; r < rows; r++) {
        uint8_t *d = dst + (size_t)r * rb;
        kt_fill_row(x, n, s);
        if (r % 5 == 1) for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]); /* same sign: little cancellation */
        sc->quant(x, d, n);
        if (raw && is_q(t)) {
            size_t bs = t == KZ_T_Q8_0 ? 34 : 18;
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t *blk = d + b * bs;
                uint16_t h = rand_scale(s);
                memcpy(blk, &h, 2);
                for (size_t j = 2; j < bs; j++) blk[j] = (uint8_t)kt_rng(s);
                if (t == KZ_T_Q8_0 && b == 0) blk[2] = 0x80; /* -128: a file may hold it */
            }
        }
    }
    free(x);
}

/* activation rows: converted by the scalar reference (all levels read the same bytes) */
static void make_act(uint32_t wt, int64_t n, int rows, int raw, uint8_t *dst, unsigned long long *s) {
    uint32_t at = act_type(wt);
    size_t rb = kz_row_bytes(at, n);
    make_rows(at, n, rows, 0, dst, s);
    if (raw && at == KZ_T_Q8_0)
        for (int r = 0; r < rows; r++)
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t *blk = dst + (size_t)r * rb + b * 34;
                uint16_t h = rand_scale(s);
                memcpy(blk, &h, 2);
                for (int j = 2; j < 34; j++) blk[j] = (uint8_t)(int8_t)((int)(kt_rng(s) % 255) - 127);
            }
}

static double mag_of(uint32_t t, const uint8_t *w, const uint8_t *a, int64_t n) {
    uint32_t at = act_type(t);
    float *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
    kz_qtraits_get_isa(KZ_ISA_SCALAR, t)->dequant(w, wd, n);
    kz_qtraits_get_isa(KZ_ISA_SCALAR, at)->dequant(a, ad, n);
    double m = 0;
    for (int64_t i = 0; i < n; i++) m += fabs((double)wd[i] * ad[i]);
    free(wd); free(ad);
    return m;
}

static void test_gemm(void) {
    static const int64_t NQ[] = { 32, 32 * 7, 32 * 33, 32 * 261 }; /* 261 blocks: > 2 kernel block chunks */
    static const int64_t NF[] = { 1, 7, 13, 229, 1029 };
    static const int NR[] = { 1, 3, 17, 63 };
    static const int NT[] = { 1, 2, 3, 4, 5, 7, 9, 13, 15, 16, 70 }; /* 15: an odd 16-token group; 70: > one 64-token group */
    unsigned long long s = 777;
    for (int li = 0; li < n_levels; li++) {
        const kz_isa L = levels[li];
        for (int ti = 0; ti < NTYPES; ti++) {
            const uint32_t t = TYPES[ti], at = act_type(t);
            const kz_qtraits *S = kz_qtraits_get_isa(KZ_ISA_SCALAR, t), *V = kz_qtraits_get_isa(L, t);
            CHECK(S && V && V->gemm && V->vec_dot);
            if (!(S && V)) continue;
            const int64_t *NS = is_q(t) ? NQ : NF;
            const int nn = is_q(t) ? 4 : 5;
            int bad_ref = 0, bad_self = 0, bad_pad = 0, cases = 0;
            double worst = 0;
            for (int ni = 0; ni < nn; ni++)
                for (int raw = 0; raw < (is_q(t) ? 2 : 1); raw++)
                    for (size_t ri = 0; ri < sizeof NR / sizeof NR[0]; ri++)
                        for (size_t ki = 0; ki < sizeof NT / sizeof NT[0]; ki++) {
                            const int64_t n = NS[ni];
                            const int nr = NR[ri], nt = NT[ki];
                            if (nr == 63 && n > 1000 && nt > 5) continue; /* keep the run short */
                            if (n > 2000 && nr < 17 && nt > 9) continue;
                            const size_t wb = kz_row_bytes(t, n) + 3, ab = kz_row_bytes(at, n) + 5; /* odd strides */
                            uint8_t *w = malloc(wb * nr), *a = malloc(ab * nt);
                            uint8_t *wt = malloc(kz_row_bytes(t, n) * nr), *atmp = malloc(kz_row_bytes(at, n) * nt);
                            make_rows(t, n, nr, raw, wt, &s);
                            make_act(t, n, nt, raw, atmp, &s);
                            for (int r = 0; r < nr; r++) memcpy(w + r * wb, wt + r * kz_row_bytes(t, n), kz_row_bytes(t, n));
                            for (int k = 0; k < nt; k++) memcpy(a + k * ab, atmp + k * kz_row_bytes(at, n), kz_row_bytes(at, n));
                            const int64_t ldy = nr + 2;
                            float *y = malloc(sizeof(float) * ldy * nt);
                            for (int64_t i = 0; i < ldy * nt; i++) y[i] = -777.0f;
                            V->gemm(n, w, wb, nr, a, ab, nt, y, ldy);
                            for (int k = 0; k < nt; k++) {
                                for (int r = 0; r < nr; r++) {
                                    const uint8_t *wr = w + r * wb, *ar = a + k * ab;
                                    float got = y[k * ldy + r], self = V->vec_dot(wr, ar, n), ref = S->vec_dot(wr, ar, n);
                                    if (memcmp(&got, &self, 4)) bad_self++;
                                    if (is_q(t)) {
                                        if (memcmp(&got, &ref, 4)) bad_ref++;
                                    } else {
                                        double m = mag_of(t, wr, ar, n);
                                        double e = fabs((double)got - ref), bound = 1e-6 * m + 1e-30;
                                        if (!(e <= bound)) bad_ref++;
                                        if (m > 0 && e / m > worst) worst = e / m;
                                    }
                                }
                                for (int64_t r = nr; r < ldy; r++) if (y[k * ldy + r] != -777.0f) bad_pad++;
                            }
                            cases++;
                            free(w); free(a); free(wt); free(atmp); free(y);
                        }
            CHECKF(bad_ref == 0 && bad_self == 0 && bad_pad == 0,
                   "%s %s: %d elements differ from scalar, %d gemm != own vec_dot, %d pad writes", kz_isa_name(L),
                   tname(t), bad_ref, bad_self, bad_pad);
            if (is_q(t))
                printf("  %-7s %-4s gemm/dot bit-identical to scalar over %d shapes\n", kz_isa_name(L), tname(t), cases);
            else
                printf("  %-7s %-4s gemm == own dot; vs scalar worst |err|/sum|w*a| = %.2e over %d shapes\n",
                       kz_isa_name(L), tname(t), worst, cases);
        }
    }
}

/* ---------------- KZ_ISA handling (child processes) ---------------- */

/* runs fn in a child with KZ_ISA=env (NULL: unset); returns the child's exit status or -1.
 * errbuf != NULL: the child's stderr is captured there (NUL-terminated) */
static int in_child_err(const char *env, int (*fn)(void *), void *arg, char *errbuf, size_t errlen) {
    int fd[2] = { -1, -1 };
    if (errbuf && pipe(fd)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (errbuf) {
            close(fd[0]);
            dup2(fd[1], 2);
        }
        if (env) setenv("KZ_ISA", env, 1);
        else unsetenv("KZ_ISA");
        int rc = fn(arg);
        fflush(stderr);
        _exit(rc);
    }
    if (errbuf) {
        close(fd[1]);
        size_t got = 0;
        ssize_t r;
        while (got + 1 < errlen && (r = read(fd[0], errbuf + got, errlen - 1 - got)) > 0) got += (size_t)r;
        errbuf[got] = 0;
        close(fd[0]);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}
static int in_child(const char *env, int (*fn)(void *), void *arg) { return in_child_err(env, fn, arg, NULL, 0); }

/* the app's log sink for the child: warnings to stderr, where in_child_err captures them */
static void warn_to_stderr(kz_log_level level, const char *msg, void *user) {
    (void)user;
    if (level >= KZ_LOG_WARN) fprintf(stderr, "%s\n", msg);
}
/* arg != NULL: install that sink first (without one the library prints nothing) */
static int child_active(void *arg) {
    if (arg) kz_log_set(warn_to_stderr, NULL);
    return (int)kz_isa_active();
}

static void test_env(void) {
    const kz_isa best = kz_isa_best();
    CHECK(kz_isa_available(KZ_ISA_SCALAR) && kz_isa_available(best));
    CHECK(in_child(NULL, child_active, NULL) == (int)best);
    CHECK(in_child("", child_active, NULL) == (int)best);
    CHECK(in_child("auto", child_active, NULL) == (int)best);
    CHECK(in_child("scalar", child_active, NULL) == KZ_ISA_SCALAR);
    CHECK(in_child("SCALAR", child_active, NULL) == KZ_ISA_SCALAR);
    char msg[512];
    /* refused with a one-line warning naming the value and the level used instead, through the
     * log callback: nothing on stderr without one */
    CHECK(in_child_err("bogus", child_active, (void *)1, msg, sizeof msg) == (int)best);
    CHECKF(strstr(msg, "KZ_ISA=bogus") && strstr(msg, kz_isa_name(best)), "message: %s", msg);
    CHECK(in_child_err("bogus", child_active, NULL, msg, sizeof msg) == (int)best);
    CHECKF(msg[0] == 0, "printed without a log callback: %s", msg);
    for (int i = 0; i < KZ_ISA_COUNT; i++) {
        kz_isa v;
        CHECK(kz_isa_from_name(kz_isa_name((kz_isa)i), &v) == 0 && v == (kz_isa)i);
        int want = kz_isa_available((kz_isa)i) ? i : (int)best;
        CHECKF(in_child_err(kz_isa_name((kz_isa)i), child_active, (void *)1, msg, sizeof msg) == want, "KZ_ISA=%s",
               kz_isa_name((kz_isa)i));
        /* an available level is taken silently, an unavailable one is refused out loud */
        CHECKF(want == i ? msg[0] == 0 : strstr(msg, "cannot run") != NULL, "KZ_ISA=%s: stderr '%s'",
               kz_isa_name((kz_isa)i), msg);
        /* tables exist exactly for the available levels */
        CHECK(!kz_qtraits_get_isa(i, KZ_T_Q4_0) == !kz_isa_available((kz_isa)i));
    }
    CHECK(kz_qtraits_get_isa(KZ_ISA_COUNT, KZ_T_Q4_0) == NULL && kz_qtraits_get_isa(-1, KZ_T_Q4_0) == NULL);
    CHECK(kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_IQ2_XXS) == NULL);
}

/* ---------------- greedy decode across levels ---------------- */

#define N_PROMPT 7
#define N_GEN 6
typedef struct {
    const char *path;
    int32_t toks[N_GEN];
    uint32_t logit_hash;
    int isa; /* the level the child ran (kz_isa_active) */
    int n_logits;
    float logits[1024]; /* logits of the last step (first 1024), for a closeness check */
    char err[200];
} greedy_out;

static int child_greedy(void *arg) {
    greedy_out *o = arg; /* written into a pipe by the caller's wrapper */
    char err[256];
    o->isa = (int)kz_isa_active();
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(o->path, &mp, err, sizeof err);
    if (!m) { snprintf(o->err, sizeof o->err, "load: %.180s", err); return 1; }
    kz_context_params cp = kz_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) { snprintf(o->err, sizeof o->err, "context: %.180s", err); kz_model_free(m); return 1; }
    const int V = kz_model_n_vocab(m);
    float *lg = malloc(sizeof(float) * V);
    int32_t prompt[N_PROMPT] = { 3, 71, 200, 15, 99, 42, 250 };
    int rc = kz_eval(c, prompt, N_PROMPT, lg, 0);
    uint32_t h = 2166136261u;
    for (int g = 0; g < N_GEN && rc == 0; g++) {
        int best = 0;
        for (int i = 1; i < V; i++) if (lg[i] > lg[best]) best = i;
        o->toks[g] = best;
        for (int i = 0; i < V; i++) {
            uint32_t u;
            memcpy(&u, &lg[i], 4);
            h = (h ^ u) * 16777619u;
        }
        if (g == N_GEN - 1) {
            o->n_logits = V < 1024 ? V : 1024;
            memcpy(o->logits, lg, sizeof(float) * (size_t)o->n_logits);
        }
        else rc = kz_eval(c, &best, 1, lg, 0);
    }
    if (rc) snprintf(o->err, sizeof o->err, "eval: %s", kz_context_error(c));
    o->logit_hash = h;
    free(lg);
    kz_context_free(c);
    kz_model_free(m);
    return rc ? 1 : 0;
}

/* fork + pipe: the child writes its greedy_out back */
static int greedy_in_child(const char *isa, greedy_out *o) {
    int fd[2];
    if (pipe(fd)) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { close(fd[0]); close(fd[1]); return -1; }
    if (pid == 0) {
        close(fd[0]);
        setenv("KZ_ISA", isa, 1);
        int rc = child_greedy(o);
        ssize_t wr = write(fd[1], o, sizeof *o);
        _exit(wr == (ssize_t)sizeof *o ? rc : 2);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < sizeof *o) {
        ssize_t r = read(fd[0], (char *)o + got, sizeof *o - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd[0]);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || got != sizeof *o) return -1;
    return WEXITSTATUS(st);
}

typedef struct {
    kz_mkmodel_cfg cfg;
    const char *path;
    char err[256];
} mk_job;

/* kz_mkmodel_write quantizes through the dispatched kernels, which would fix this process's
 * level: run it in a child too */
static int child_mkmodel(void *arg) {
    mk_job *j = arg;
    return kz_mkmodel_write(&j->cfg, j->path, j->err, sizeof j->err) ? 1 : 0;
}

static void test_greedy(void) {
    const int small = getenv("KZ_TEST_SMALL") && atoi(getenv("KZ_TEST_SMALL")) > 0;
    static const char *const ARCH[] = { "qwen35-tiny", "qwen3-tiny" };
    static const uint32_t WT[] = { KZ_T_Q4_0, KZ_T_Q8_0, KZ_T_F16, KZ_T_BF16 };
    const int n_wt = small ? 3 : 4;
    for (int ai = 0; ai < 2; ai++)
        for (int wi = 0; wi < n_wt; wi++) {
            kz_mkmodel_cfg cfg;
            CHECK(kz_mkmodel_preset(ARCH[ai], &cfg) == 0);
            cfg.wtype = WT[wi];
            cfg.seed = 11 + (uint64_t)wi;
            cfg.n_threads = 1;
            if (small) cfg.n_layer = 4;
            char path[128];
            snprintf(path, sizeof path, "/tmp/kz_test_simd_%d_%d_%d.gguf", (int)getpid(), ai, wi);
            mk_job job = { .cfg = cfg, .path = path };
            if (in_child(NULL, child_mkmodel, &job) != 0) {
                CHECKF(0, "mkmodel %s %s failed", ARCH[ai], tname(WT[wi]));
                unlink(path);
                continue;
            }
            greedy_out ref;
            memset(&ref, 0, sizeof ref);
            ref.path = path;
            int rc = greedy_in_child("scalar", &ref);
            CHECKF(rc == 0, "%s %s scalar: rc %d %s", ARCH[ai], tname(WT[wi]), rc, ref.err);
            /* every logit of a qwen3 integer-weight model goes through integer kernels only */
            const int exact = ai == 1 && is_q(WT[wi]);
            for (int li = 0; li < n_levels && rc == 0; li++) {
                greedy_out o;
                memset(&o, 0, sizeof o);
                o.path = path;
                int r2 = greedy_in_child(kz_isa_name(levels[li]), &o);
                CHECKF(r2 == 0, "%s %s %s: rc %d %s", ARCH[ai], tname(WT[wi]), kz_isa_name(levels[li]), r2, o.err);
                if (r2) continue;
                CHECKF(o.isa == (int)levels[li] && ref.isa == KZ_ISA_SCALAR, "child ran %s, not %s",
                       kz_isa_name((kz_isa)o.isa), kz_isa_name(levels[li]));
                CHECKF(memcmp(o.toks, ref.toks, sizeof o.toks) == 0, "%s %s %s: greedy tokens differ from scalar",
                       ARCH[ai], tname(WT[wi]), kz_isa_name(levels[li]));
                if (exact) CHECKF(o.logit_hash == ref.logit_hash, "%s %s %s: logits not bit-identical", ARCH[ai],
                                  tname(WT[wi]), kz_isa_name(levels[li]));
                /* normwise: max |diff| over max |logit|. Float-weight models round activations
                 * to fp16/bf16 before every matmul, so a last-bit kernel difference can move an
                 * activation by one fp16/bf16 step: allow a few of those */
                double md = 0, mx = 0;
                for (int i = 0; i < ref.n_logits; i++) {
                    double d = fabs((double)o.logits[i] - ref.logits[i]);
                    if (d > md) md = d;
                    if (fabs(ref.logits[i]) > mx) mx = fabs(ref.logits[i]);
                }
                md /= mx > 0 ? mx : 1;
                const double tol = WT[wi] == KZ_T_BF16 ? 0.05 : WT[wi] == KZ_T_F16 ? 0.01 : 1e-4;
                CHECKF(o.n_logits == ref.n_logits && md <= tol, "%s %s %s: logits differ by %g of max |logit|",
                       ARCH[ai], tname(WT[wi]), kz_isa_name(levels[li]), md);
                printf("  greedy %-11s %-4s %-7s tokens = scalar (%d %d %d ...), logits %s (max diff %.1e of max |logit|)\n",
                       ARCH[ai], tname(WT[wi]), kz_isa_name(levels[li]), o.toks[0], o.toks[1], o.toks[2],
                       o.logit_hash == ref.logit_hash ? "bit-identical" : "close", md);
            }
            unlink(path);
        }
}
/* F16 rows -> f32 (the KV cache rows decode attention reads): every level's dequantize equals
 * the scalar reference bit for bit on all 65536 halves (inf, NaN payloads, subnormals), at odd
 * lengths and offsets so the SIMD groups and the tail both see every value */
static void test_f16_dequant(void) {
    uint16_t *h = malloc(sizeof(uint16_t) * (65536 + 16));
    float *ref = malloc(sizeof(float) * (65536 + 16)), *got = malloc(sizeof(float) * (65536 + 16));
    for (uint32_t i = 0; i < 65536 + 16; i++) h[i] = (uint16_t)(i * 40503u); /* a permutation of 0..65535 */
    const kz_qtraits *sc = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_F16);
    for (int li = 0; li < n_levels; li++) {
        const kz_qtraits *tr = kz_qtraits_get_isa(levels[li], KZ_T_F16);
        static const int64_t OFF[] = { 0, 1, 3 }, LEN[] = { 65536, 65533, 7 };
        for (int k = 0; k < 3; k++) {
            sc->dequant(h + OFF[k], ref, LEN[k]);
            for (int64_t i = 0; i < LEN[k] + 4; i++) got[i] = -7.0f;
            tr->dequant(h + OFF[k], got, LEN[k]);
            int64_t bad = 0;
            for (int64_t i = 0; i < LEN[k]; i++) bad += memcmp(&ref[i], &got[i], 4) != 0;
            CHECKF(bad == 0 && got[LEN[k]] == -7.0f, "%s f16 dequant, %lld values at offset %lld: %lld differ",
                   kz_isa_name(levels[li]), (long long)LEN[k], (long long)OFF[k], (long long)bad);
        }
    }
    printf("  f16 dequant: every half identical to the scalar reference on %d levels\n", n_levels);
    free(h); free(ref); free(got);
}

int main(void) {
    for (int i = 1; i < KZ_ISA_COUNT; i++)
        if (kz_isa_available((kz_isa)i)) levels[n_levels++] = (kz_isa)i;
    printf("  levels to test against scalar:");
    for (int i = 0; i < n_levels; i++) printf(" %s", kz_isa_name(levels[i]));
    printf("%s\n", n_levels ? "" : " (none on this CPU/build)");
    /* the child-process tests first, before anything in this process could fix its level */
    test_env();
    test_greedy();
    test_act_quant();
    test_gemm();
    test_f16_dequant();
    char buf[256]; /* kz_cpu_describe fixes this process's level: only after the children */
    CHECK(kz_cpu_describe(buf, sizeof buf) > 0 && strstr(buf, "kernels:"));
    printf("  cpu: %s\n", buf);
    KT_END();
}
