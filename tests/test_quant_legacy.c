/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL: every available ISA level against the scalar reference.
 *  - vec_dot of each level bit-identical to scalar (quantized weights, and raw random blocks
 *    with random non-degenerate fp16 scales), lengths 32*k for k not a multiple of any tile;
 *  - gemm of each level: every element bit-identical to scalar vec_dot, odd row / token counts,
 *    strided output with untouched padding;
 *  - dequant(quant(x)) within per-type error bounds (printed);
 *  - kz_matmul (active level, 0/1/2 threads) against a double reference on the dequantized
 *    weights and the exact inputs, within the activation-quantization bound.
 * KZ_TEST_SMALL=1 shrinks sizes (for qemu). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sys/cpu.h"
#include "sys/fp16.h"
#include "kt.h"
#include "matmul/matmul.h"
#include "sys/threadpool.h"
#include "model/types.h"

/* one matrix through kz_matmul */
static void matmul1(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy, void *work) {
    kz_matmul(pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n_tok, .y = {y}, .ldy = {ldy}, .work = work});
}
static size_t matmul1_work(const kz_wmat *w, int n_tok) {
    return kz_matmul_work_bytes(&(kz_mm){.w = {w}, .nw = 1, .n_tok = n_tok});
}

static const uint32_t TYPES[] = { KZ_T_Q4_1, KZ_T_Q5_0, KZ_T_Q5_1, KZ_T_IQ4_NL };
static const char *TNAME[] = { "Q4_1", "Q5_0", "Q5_1", "IQ4_NL" };
#define NT 4
static int small;

static uint16_t rand_scale(unsigned long long *s) {
    float v = kt_randf(s) * powf(2.0f, (float)(kt_rng(s) % 12) - 8.0f);
    return kz_f32_to_fp16(v == 0 ? 0.25f : v);
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static const kz_qtraits *scal(uint32_t t) { return kz_qtraits_get_isa(KZ_ISA_SCALAR, t); }
static int has_min(uint32_t t) { return t == KZ_T_Q4_1 || t == KZ_T_Q5_1; }

/* raw random weight row: random bytes, fp16 d (and m) random finite non-zero */
static void raw_wrow(uint32_t t, uint8_t *w, int64_t n, unsigned long long *s) {
    const kz_qtraits *q = scal(t);
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *p = w + b * q->bytes;
        for (uint32_t i = 0; i < q->bytes; i++) p[i] = (uint8_t)kt_rng(s);
        put16(p, rand_scale(s));
        if (has_min(t)) put16(p + 2, rand_scale(s));
    }
}
/* raw random activation row (Q8_0 or Q8_1): random int8 without -128 (the quantizers never
 * write it), random scales */
static void raw_arow(uint32_t at, uint8_t *a, int64_t n, unsigned long long *s) {
    const int ab = at == KZ_T_Q8_1 ? 36 : 34, off = at == KZ_T_Q8_1 ? 4 : 2;
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *p = a + b * ab;
        put16(p, rand_scale(s));
        if (at == KZ_T_Q8_1) put16(p + 2, rand_scale(s));
        for (int i = 0; i < 32; i++) {
            int8_t v = (int8_t)kt_rng(s);
            p[off + i] = (uint8_t)(v == -128 ? 127 : v);
        }
    }
}

/* ---- dequant(quant(x)) error bounds, and quant of every level equals scalar ---- */
static void test_roundtrip(void) {
    unsigned long long s = 4242;
    const int64_t n = 32 * 257;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *q = malloc((size_t)n), *q2 = malloc((size_t)n);
    for (int ti = 0; ti < NT; ti++) {
        const uint32_t t = TYPES[ti];
        const kz_qtraits *tr = scal(t);
        double worst = 0, se = 0, sx = 0;
        int bad = 0;
        for (int rep = 0; rep < 4; rep++) {
            kt_fill_row(x, n, &s);
            CHECK(tr->quant(x, q, n) == (size_t)(n / 32) * tr->bytes);
            tr->dequant(q, y, n);
            for (int64_t b = 0; b < n / 32; b++) {
                const float *xb = x + b * 32;
                float mn = xb[0], mx = xb[0], amax = 0;
                for (int j = 0; j < 32; j++) {
                    mn = fminf(mn, xb[j]);
                    mx = fmaxf(mx, xb[j]);
                    amax = fmaxf(amax, fabsf(xb[j]));
                }
                const double R = (double)mx - mn, h = 1.0 / 1024; /* fp16 relative rounding, 2x margin */
                double bound;
                switch (t) {
                case KZ_T_Q4_1: bound = 0.5 * R / 15 * (1 + 1e-5) + h * (fabs(mn) + R); break;
                case KZ_T_Q5_1: bound = 0.5 * R / 31 * (1 + 1e-5) + h * (fabs(mn) + R); break;
                /* the side opposite to the extreme saturates at +15 d: error up to d */
                case KZ_T_Q5_0: bound = amax / 16.0 * (1 + 1e-5) + h * amax; break;
                default: bound = 0.2 * amax; break; /* IQ4_NL: widest codebook gap 24 of 127 */
                }
                for (int j = 0; j < 32; j++) {
                    const double e = fabs((double)y[b * 32 + j] - xb[j]);
                    if (e > bound) bad++;
                    if (amax > 0 && e / amax > worst) worst = e / amax;
                    se += e * e / ((double)amax * amax);
                    sx += (double)xb[j] * xb[j] / ((double)amax * amax);
                }
            }
            /* every level's quantizer gives the scalar bytes */
            for (int isa = 1; isa < KZ_ISA_COUNT; isa++) {
                const kz_qtraits *l = kz_qtraits_get_isa(isa, t);
                if (!l) continue;
                l->quant(x, q2, n);
                CHECKF(!memcmp(q, q2, (size_t)(n / 32) * tr->bytes), "%s quant level %s", TNAME[ti], kz_isa_name((kz_isa)isa));
            }
        }
        const double rel_rms = sqrt(se / sx);
        CHECKF(bad == 0, "%s: %d elements beyond the error bound", TNAME[ti], bad);
        /* an rms error near 0 would mean a broken test; far above the expected level a broken quantizer */
        CHECKF(rel_rms > 1e-3 && rel_rms < (t == KZ_T_Q5_0 || t == KZ_T_Q5_1 ? 0.05 : 0.12), "%s rel rms %g", TNAME[ti], rel_rms);
        printf("roundtrip %-6s: max |err|/amax %.4f, rms err / rms x %.4f\n", TNAME[ti], worst, rel_rms);
    }
    /* a constant block is exact for the min types; an all-zero block dequantizes to zeros */
    for (int j = 0; j < 64; j++) x[j] = j < 32 ? 0.0f : 3.0f;
    for (int ti = 0; ti < NT; ti++) {
        scal(TYPES[ti])->quant(x, q, 64);
        scal(TYPES[ti])->dequant(q, y, 64);
        int ok = 1;
        for (int j = 0; j < 32; j++) ok &= y[j] == 0.0f;
        if (has_min(TYPES[ti]))
            for (int j = 32; j < 64; j++) ok &= y[j] == 3.0f;
        CHECKF(ok, "%s zero/constant block", TNAME[ti]);
    }
    free(x);
    free(y);
    free(q);
    free(q2);
}

/* ---- every level's vec_dot and gemm vs scalar, bit for bit ---- */
static void test_levels(void) {
    /* blocks per row; the first four (KZ_TEST_SMALL) include one past the i8mm prefill's
     * 64-block activation chunk (partial sums carried through y), 131 two */
    static const int KS[] = { 1, 3, 5, 67, 7, 33, 131 };
    /* around the one-token 12/8/4-row groups (29 = 12 + 12 + 4 + 1) and the prefill register
     * tiles (4 rows x 2..8 tokens): full tiles, and every kind of leftover row / token */
    static const int ROWS[] = { 1, 3, 4, 7, 8, 9, 12, 13, 17, 20, 29 };
    static const int TOKS[] = { 1, 2, 3, 4, 5, 8, 9, 13, 16, 17 };
    enum { NR = 29, NTK = 17, NROWS = sizeof ROWS / sizeof ROWS[0], NTOKS = sizeof TOKS / sizeof TOKS[0] };
    const int nks = small ? 4 : 7;
    unsigned long long s = 777;
    int levels_seen = 0;
    for (int isa = 1; isa < KZ_ISA_COUNT; isa++) {
        if (!kz_qtraits_get_isa(isa, KZ_T_Q4_1)) continue;
        levels_seen++;
        for (int ti = 0; ti < NT; ti++) {
            const uint32_t t = TYPES[ti];
            const kz_qtraits *sc = scal(t), *lv = kz_qtraits_get_isa(isa, t);
            CHECK(lv && lv->vec_dot && lv->gemm && lv->act_type == sc->act_type && lv->bytes == sc->bytes);
            if (!lv) continue;
            const kz_qtraits *act = scal(sc->act_type);
            int dot_bad = 0, gemm_bad = 0, pad_bad = 0, nonzero = 0, cases = 0;
            for (int ki = 0; ki < nks; ki++) {
                const int64_t n = 32 * KS[ki];
                const size_t wrb = (size_t)(n / 32) * sc->bytes, arb = (size_t)(n / 32) * act->bytes;
                const int nr = NR, ntk = NTK;
                uint8_t *w = malloc(wrb * nr), *a = malloc(arb * ntk);
                float *xf = malloc(sizeof(float) * n);
                for (int mode = 0; mode < 2; mode++) {
                    /* mode 0: quantized from random floats; mode 1: raw random blocks */
                    for (int r = 0; r < nr; r++) {
                        if (mode == 0) {
                            kt_fill_row(xf, n, &s);
                            sc->quant(xf, w + r * wrb, n);
                        } else {
                            raw_wrow(t, w + r * wrb, n, &s);
                        }
                    }
                    for (int k = 0; k < ntk; k++) {
                        if (mode == 0) {
                            kt_fill_row(xf, n, &s);
                            act->quant(xf, a + k * arb, n);
                        } else {
                            raw_arow(sc->act_type, a + k * arb, n, &s);
                        }
                    }
                    float ref[NR * NTK];
                    for (int r = 0; r < nr; r++)
                        for (int k = 0; k < ntk; k++) {
                            ref[k * nr + r] = sc->vec_dot(w + r * wrb, a + k * arb, n);
                            const float v = lv->vec_dot(w + r * wrb, a + k * arb, n);
                            if (memcmp(&v, &ref[k * nr + r], 4)) dot_bad++;
                            if (ref[k * nr + r] != 0.0f) nonzero++;
                        }
                    for (int ri = 0; ri < NROWS; ri++)
                        for (int tki = 0; tki < NTOKS; tki++) {
                            const int rr = ROWS[ri], tt = TOKS[tki];
                            const int64_t ldy = rr + 2;
                            float y[(NR + 2) * NTK];
                            for (int i = 0; i < (NR + 2) * NTK; i++) y[i] = -777.0f;
                            lv->gemm(n, w, wrb, rr, a, arb, tt, y, ldy);
                            for (int k = 0; k < tt; k++) {
                                for (int r = 0; r < rr; r++)
                                    if (memcmp(&y[k * ldy + r], &ref[k * nr + r], 4)) gemm_bad++;
                                for (int64_t r = rr; r < ldy; r++) pad_bad += y[k * ldy + r] != -777.0f;
                            }
                            cases++;
                        }
                }
                free(w);
                free(a);
                free(xf);
            }
            CHECKF(dot_bad == 0 && gemm_bad == 0 && pad_bad == 0, "%s level %s: dot %d, gemm %d differ, %d pad writes",
                   TNAME[ti], kz_isa_name((kz_isa)isa), dot_bad, gemm_bad, pad_bad);
            CHECKF(nonzero > 0, "%s: all dots zero", TNAME[ti]);
            printf("level %-7s %-6s: vec_dot + %d gemm shapes bit-identical to scalar: %s\n", kz_isa_name((kz_isa)isa),
                   TNAME[ti], cases, dot_bad + gemm_bad ? "NO" : "yes");
        }
    }
    printf("%d SIMD level(s) tested\n", levels_seen);
#if defined(__x86_64__) || defined(__aarch64__)
    CHECK(levels_seen > 0 || kz_isa_best() == KZ_ISA_SCALAR);
#endif
}

/* the scalar dot against a double dot of the dequantized rows (checks the formulas, including
 * the Q8_1 s term), within float summation error */
static void test_dot_formula(void) {
    unsigned long long s = 99;
    const int64_t n = 32 * 37;
    float *x = malloc(sizeof(float) * n), *wd = malloc(sizeof(float) * n), *ad = malloc(sizeof(float) * n);
    uint8_t *w = malloc((size_t)n * 2), *a = malloc((size_t)n * 2);
    for (int ti = 0; ti < NT; ti++) {
        const kz_qtraits *sc = scal(TYPES[ti]), *act = scal(sc->act_type);
        double worst = 0;
        for (int rep = 0; rep < 20; rep++) {
            kt_fill_row(x, n, &s);
            sc->quant(x, w, n);
            kt_fill_row(x, n, &s);
            act->quant(x, a, n);
            sc->dequant(w, wd, n);
            act->dequant(a, ad, n);
            double ref = 0, mag = 0, sbound = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
            }
            if (has_min(TYPES[ti])) /* s = fp16(d * sum a): up to 2^-11 relative per block */
                for (int64_t b = 0; b < n / 32; b++) {
                    double sa = 0;
                    for (int j = 0; j < 32; j++) sa += ad[b * 32 + j];
                    const float m = kz_fp16_to_f32((uint16_t)(w[b * sc->bytes + 2] | (w[b * sc->bytes + 3] << 8)));
                    sbound += fabs(m) * (fabs(sa) * (1.0 / 2048) + 1e-7 * 32 * 127);
                }
            const double got = sc->vec_dot(w, a, n), bound = 1e-5 * mag + sbound;
            CHECKF(fabs(got - ref) <= bound, "%s dot %g vs double %g (bound %g)", TNAME[ti], got, ref, bound);
            if (mag > 0 && fabs(got - ref) / mag > worst) worst = fabs(got - ref) / mag;
        }
        printf("dot formula %-6s: max |dot - double| / sum|w a| = %.2e\n", TNAME[ti], worst);
    }
    free(x);
    free(wd);
    free(ad);
    free(w);
    free(a);
}

/* ---- kz_matmul vs a double reference on dequantized weights and exact inputs ---- */
static void test_matmul(void) {
    kz_pool *pool = kz_pool_new(2);
    CHECK(pool != NULL);
    unsigned long long s = 2024;
    const int64_t NIN[] = { 32 * 5, 32 * 33 };
    const int NOUT[] = { 3, 17 }, NTOK[] = { 1, 5 };
    for (int ti = 0; ti < NT; ti++) {
        const uint32_t t = TYPES[ti];
        double worst = 0;
        for (int ii = 0; ii < 2; ii++)
            for (int oi = 0; oi < 2; oi++)
                for (int ki = 0; ki < 2; ki++) {
                    const int64_t nin = NIN[ii];
                    const int nout = NOUT[oi], ntok = NTOK[ki];
                    const size_t rb = (size_t)(nin / 32) * scal(t)->bytes;
                    uint8_t *wq = malloc(rb * nout);
                    float *wd = malloc(sizeof(float) * nin * nout), *x = malloc(sizeof(float) * nin * ntok);
                    for (int o = 0; o < nout; o++) {
                        kt_fill_row(x, nin, &s);
                        CHECK(kz_quant_row(t, x, wq + o * rb, nin) == rb);
                        CHECK(kz_dequant_row(t, wq + o * rb, wd + o * nin, nin) == 0);
                    }
                    for (int k = 0; k < ntok; k++) kt_fill_row(x + k * nin, nin, &s);
                    kz_wmat W = { .type = t, .n_in = nin, .n_out = nout, .row_bytes = rb, .data = wq };
                    void *work = malloc(matmul1_work(&W, ntok) + 1);
                    float *y = malloc(sizeof(float) * nout * ntok), *y2 = malloc(sizeof(float) * nout * ntok);
                    matmul1(NULL, &W, x, ntok, y, nout, work);
                    matmul1(pool, &W, x, ntok, y2, nout, work);
                    CHECKF(!memcmp(y, y2, sizeof(float) * nout * ntok), "%s matmul threads differ", TNAME[ti]);
                    for (int k = 0; k < ntok; k++)
                        for (int o = 0; o < nout; o++) {
                            const float *xr = x + k * nin, *wr = wd + o * nin;
                            double ref = 0, mag = 0, bound = 0;
                            for (int64_t b = 0; b < nin / 32; b++) {
                                double amax = 0, sw = 0, sx = 0;
                                for (int j = 0; j < 32; j++) {
                                    const int64_t i = b * 32 + j;
                                    ref += (double)wr[i] * xr[i];
                                    mag += fabs((double)wr[i] * xr[i]);
                                    amax = fmax(amax, fabs(xr[i]));
                                    sw += fabs(wr[i]);
                                    sx += fabs(xr[i]);
                                }
                                /* activation rounding (half a step, with the fp16 d), plus the fp16 s */
                                bound += sw * amax / 127.0 * 0.5 * 1.002 + 3e-3 * sx * sw / 32;
                            }
                            bound += 1e-5 * mag;
                            const double e = fabs(y[k * nout + o] - ref);
                            CHECKF(e <= bound, "%s matmul %lldx%d tok %d row %d: %g vs %g (bound %g)", TNAME[ti],
                                   (long long)nin, nout, k, o, y[k * nout + o], ref, bound);
                            if (mag > 0 && e / mag > worst) worst = e / mag;
                        }
                    free(wq);
                    free(wd);
                    free(x);
                    free(work);
                    free(y);
                    free(y2);
                }
        printf("matmul %-6s (level %s): max |y - double| / sum|w x| = %.2e\n", TNAME[ti], kz_isa_name(kz_isa_active()), worst);
    }
    kz_pool_free(pool);
}

int main(void) {
    const char *e = getenv("KZ_TEST_SMALL");
    small = e && *e == '1';
    for (int ti = 0; ti < NT; ti++) {
        CHECKF(kz_type_compute_ok(TYPES[ti]), "%s not a compute type", TNAME[ti]);
        const kz_qtraits *q = scal(TYPES[ti]);
        CHECK(q && q->blck == 32 && q->dequant && q->quant && q->vec_dot && q->gemm);
        if (!q) return 1;
    }
    test_roundtrip();
    test_dot_formula();
    test_levels();
    test_matmul();
    KT_END();
}
