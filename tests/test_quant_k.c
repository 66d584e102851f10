/* Q4_K / Q5_K / Q6_K (weights) x Q8_K (activations), every ISA level this CPU and build run:
 *  - vec_dot of every level bit-identical to the scalar reference, on quantized rows and on raw
 *    random weight bytes (all scale / min / code patterns), lengths 256 * {1,3,5,7,...};
 *  - gemm of every level: each element bit-identical to the scalar vec_dot, odd row counts,
 *    token counts around the tiles, strided output with untouched padding;
 *  - scalar dot vs a double dot of the dequantized operands (independent of the integer path);
 *  - dequant(quant(x)) relative RMSE bounds per type, and quant never worse than a plain
 *    round-to-nearest with the block's own scales would hint (sanity: error grows with fewer bits);
 *  - kz_matmul (threads 1/2/3) vs a double reference from dequantized weights and activations.
 * KZ_TEST_SMALL=1 shrinks sizes for emulators. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sys/cpu.h"
#include "sys/fp16.h"
#include "kt.h"
#include "matmul/matmul.h"
#include "matmul/ref/act.h"
#include "matmul/ref/ref.h"
#include "sys/threadpool.h"
#include "model/types.h"

/* one matrix through kz_matmul */
static void matmul1(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy, void *work) {
    kz_matmul(pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n_tok, .y = {y}, .ldy = {ldy}, .work = work});
}
static size_t matmul1_work(const kz_wmat *w, int n_tok) {
    return kz_matmul_work_bytes(&(kz_mm){.w = {w}, .nw = 1, .n_tok = n_tok});
}

static const uint32_t TYPES[] = { KZ_T_Q4_K, KZ_T_Q5_K, KZ_T_Q6_K };
static const char *tname(uint32_t t) { return t == KZ_T_Q4_K ? "Q4_K" : t == KZ_T_Q5_K ? "Q5_K" : "Q6_K"; }
static int small_mode;

static const kz_qtraits *sc_tr(uint32_t t) { return kz_qtraits_get_isa(KZ_ISA_SCALAR, t); }
static size_t rowb(uint32_t t, int64_t n) { return (size_t)(n / 256) * sc_tr(t)->bytes; }

static uint16_t rand_scale(unsigned long long *s) {
    float v = fabsf(kt_randf(s)) * powf(2.0f, (float)(kt_rng(s) % 10) - 10.0f);
    return kz_f32_to_fp16(v == 0 ? 0.01f : v);
}

/* random weight rows: mode 0 quantized floats, mode 1 raw random bytes with sane fp16 scales */
static void make_rows(uint32_t t, int64_t n, int nr, uint8_t *w, unsigned long long *s, int mode) {
    const size_t rb = rowb(t, n), bb = sc_tr(t)->bytes;
    float *x = malloc(sizeof(float) * n);
    for (int r = 0; r < nr; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (mode == 0) {
            kt_fill_row(x, n, s);
            CHECK(sc_tr(t)->quant(x, row, n) == rb);
        } else {
            for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)kt_rng(s);
            for (int64_t b = 0; b < n / 256; b++) {
                uint8_t *blk = row + b * bb;
                uint16_t d = rand_scale(s), m = rand_scale(s);
                if (t == KZ_T_Q6_K) {
                    memcpy(blk + 208, &d, 2);
                } else {
                    memcpy(blk, &d, 2);
                    memcpy(blk + 2, &m, 2);
                }
            }
        }
    }
    free(x);
}

static void make_acts(int64_t n, int nt, uint8_t *a, unsigned long long *s) {
    float *x = malloc(sizeof(float) * n);
    for (int k = 0; k < nt; k++) {
        kt_fill_row(x, n, s);
        kz_ref_quant_q8_K(x, a + (size_t)k * (n / 256) * KZ_Q8_K_BYTES, n);
    }
    free(x);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static void test_levels(void) {
    static const int64_t NB[] = { 1, 3, 5, 7, 11 };
    static const int NR[] = { 1, 3, 6, 7, 17 }; /* 4-row GEMV: tails of 0..3 rows */
    static const int NT[] = { 1, 2, 3, 5 };
    const int nnb = small_mode ? 3 : 5;
    unsigned long long s = 99;
    for (int lv = 0; lv < KZ_ISA_COUNT; lv++) {
        int n_cmp = 0;
        for (int ti = 0; ti < 3; ti++) {
            const uint32_t t = TYPES[ti];
            const kz_qtraits *ref = sc_tr(t), *tr = kz_qtraits_get_isa(lv, t);
            if (!kz_isa_available((kz_isa)lv)) {
                CHECK(tr == NULL);
                continue;
            }
            CHECKF(tr != NULL && tr->vec_dot && tr->gemm, "%s has no %s entry", kz_isa_name((kz_isa)lv), tname(t));
            if (!tr) continue;
            CHECK(tr->type == t && tr->act_type == KZ_T_Q8_K && tr->blck == 256 && tr->bytes == ref->bytes);
            for (int bi = 0; bi < nnb; bi++)
                for (int mode = 0; mode < 2; mode++) {
                    const int64_t n = 256 * NB[bi];
                    const int nr = 17, nt = 5;
                    const size_t rb = rowb(t, n), ab = (size_t)(n / 256) * KZ_Q8_K_BYTES;
                    uint8_t *w = malloc(rb * nr + 1), *a = malloc(ab * nt + 1);
                    /* odd offsets: kernels must not assume alignment */
                    uint8_t *wo = w + 1, *ao = a + 1;
                    make_rows(t, n, nr, wo, &s, mode);
                    make_acts(n, nt, ao, &s);
                    float refd[17 * 5];
                    int bad = 0;
                    for (int k = 0; k < nt; k++)
                        for (int r = 0; r < nr; r++) {
                            refd[k * nr + r] = ref->vec_dot(wo + r * rb, ao + k * ab, n);
                            const float v = tr->vec_dot(wo + r * rb, ao + k * ab, n);
                            if (!same_bits(v, refd[k * nr + r])) bad++;
                            n_cmp++;
                        }
                    CHECKF(bad == 0, "%s %s n=%lld mode %d: %d vec_dot differ from scalar", kz_isa_name((kz_isa)lv),
                           tname(t), (long long)n, mode, bad);
                    for (size_t ri = 0; ri < sizeof NR / sizeof NR[0]; ri++)
                        for (size_t ki = 0; ki < 4; ki++) {
                            const int r_n = NR[ri], k_n = NT[ki];
                            const int64_t ldy = r_n + 2;
                            float y[19 * 5];
                            for (int i = 0; i < 19 * 5; i++) y[i] = -777.0f;
                            tr->gemm(n, wo, rb, r_n, ao, ab, k_n, y, ldy);
                            int gb = 0, pad = 0;
                            for (int k = 0; k < k_n; k++) {
                                for (int r = 0; r < r_n; r++)
                                    if (!same_bits(y[k * ldy + r], refd[k * nr + r])) gb++;
                                for (int r = r_n; r < ldy; r++)
                                    if (y[k * ldy + r] != -777.0f) pad++;
                            }
                            CHECKF(gb == 0 && pad == 0, "%s %s gemm n=%lld %dx%d: %d differ, %d pad writes",
                                   kz_isa_name((kz_isa)lv), tname(t), (long long)n, r_n, k_n, gb, pad);
                        }
                    /* the scalar dot against a double dot of the dequantized operands */
                    if (lv == 0) {
                        float *wf = malloc(sizeof(float) * n), *af = malloc(sizeof(float) * n);
                        const kz_qtraits *q8k = sc_tr(KZ_T_Q8_K);
                        double worst = 0;
                        for (int r = 0; r < 3; r++) {
                            ref->dequant(wo + r * rb, wf, n);
                            q8k->dequant(ao + ab, af, n);
                            double d = 0, sa = 0;
                            for (int64_t i = 0; i < n; i++) {
                                d += (double)wf[i] * af[i];
                                sa += fabs((double)wf[i] * af[i]);
                            }
                            const double e = fabs(d - refd[nr + r]) / (sa > 0 ? sa : 1);
                            if (e > worst) worst = e;
                        }
                        CHECKF(worst < 2e-6, "%s n=%lld mode %d: scalar dot vs double dequant: rel %g", tname(t),
                               (long long)n, mode, worst);
                        free(wf);
                        free(af);
                    }
                    free(w);
                    free(a);
                }
        }
        if (kz_isa_available((kz_isa)lv))
            printf("  %s: %d vec_dot + gemm tiles bit-identical to scalar (Q4_K, Q5_K, Q6_K)\n",
                   kz_isa_name((kz_isa)lv), n_cmp);
    }
}

/* the gemms' large tiles (the SMMLA prefill decodes 4 rows once per group of up to 64 tokens,
 * super-blocks in chunks of 2): rows 4k + 2, several token groups with an odd last one, a
 * super-block count that ends in a partial chunk; every element bit-identical to the scalar
 * vec_dot */
static void test_big_tiles(void) {
    static const int SH[][3] = { { 5, 22, 70 }, { 3, 9, 9 }, { 4, 6, 129 } }; /* super-blocks, rows, tokens */
    const int nsh = small_mode ? 2 : 3;
    unsigned long long s = 99;
    for (int lv = 0; lv < KZ_ISA_COUNT; lv++) {
        if (!kz_isa_available((kz_isa)lv)) continue;
        int n_cmp = 0;
        for (int ti = 0; ti < 3; ti++)
            for (int si = 0; si < nsh; si++) {
                const uint32_t t = TYPES[ti];
                const kz_qtraits *ref = sc_tr(t), *tr = kz_qtraits_get_isa(lv, t);
                const int64_t n = 256 * SH[si][0];
                const int nr = SH[si][1], nt = SH[si][2];
                const int64_t ldy = nr + 1;
                const size_t rb = rowb(t, n), ab = (size_t)(n / 256) * KZ_Q8_K_BYTES;
                uint8_t *w = malloc(rb * (size_t)nr), *a = malloc(ab * (size_t)nt);
                float *y = malloc(sizeof(float) * (size_t)(ldy * nt));
                make_rows(t, n, nr, w, &s, si & 1);
                make_acts(n, nt, a, &s);
                tr->gemm(n, w, rb, nr, a, ab, nt, y, ldy);
                int bad = 0;
                for (int k = 0; k < nt; k++)
                    for (int r = 0; r < nr; r++, n_cmp++)
                        if (!same_bits(y[k * ldy + r], ref->vec_dot(w + r * rb, a + k * ab, n))) bad++;
                CHECKF(bad == 0, "%s %s gemm n=%lld %dx%d: %d differ from scalar", kz_isa_name((kz_isa)lv), tname(t),
                       (long long)n, nr, nt, bad);
                free(w);
                free(a);
                free(y);
            }
        printf("  %s: %d large-tile gemm elements bit-identical to scalar (Q4_K, Q5_K, Q6_K)\n", kz_isa_name((kz_isa)lv),
               n_cmp);
    }
}

/* dequant(quant(x)) relative RMSE, per type, on mixed-magnitude rows */
static void test_roundtrip(void) {
    static const double BOUND[3] = { 0.080, 0.040, 0.028 }; /* Q4_K, Q5_K, Q6_K: see report */
    const int64_t n = 256 * (small_mode ? 9 : 63);
    unsigned long long s = 7;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    uint8_t *q = malloc(rowb(KZ_T_Q5_K, n) + rowb(KZ_T_Q6_K, n));
    double prev = 0;
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t t = TYPES[ti];
        double worst = 0, sum = 0;
        int rows = 0;
        unsigned long long s2 = s;
        for (int rep = 0; rep < 4; rep++, rows++) {
            /* rep 0-1 uniform, rep 2 gaussian-like (sum of 4), rep 3 with a constant offset */
            for (int64_t i = 0; i < n; i++) {
                float v = kt_randf(&s2);
                if (rep == 2) v = (v + kt_randf(&s2) + kt_randf(&s2) + kt_randf(&s2)) * 0.5f;
                if (rep == 3) v = 0.3f + 0.5f * v;
                x[i] = v * (rep == 1 ? 1e-3f : 2.0f);
            }
            CHECK(kz_quant_row(t, x, q, n) == rowb(t, n));
            CHECK(kz_dequant_row(t, q, y, n) == 0);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; i < n; i++) {
                e2 += (double)(y[i] - x[i]) * (y[i] - x[i]);
                x2 += (double)x[i] * x[i];
            }
            const double rel = sqrt(e2 / x2);
            sum += rel;
            if (rel > worst) worst = rel;
        }
        printf("  %s dequant(quant(x)): rel RMSE mean %.4f worst %.4f (bound %.3f)\n", tname(t), sum / rows, worst,
               BOUND[ti]);
        CHECKF(worst < BOUND[ti], "%s rel RMSE %g >= %g", tname(t), worst, BOUND[ti]);
        CHECKF(worst > BOUND[ti] / 20, "%s rel RMSE %g implausibly small", tname(t), worst);
        if (ti) CHECKF(sum / rows < prev, "%s not more accurate than the type with fewer bits", tname(t));
        prev = sum / rows;
    }
    /* a zero row quantizes to zeros and dequantizes to exact zeros; a constant row is exact-ish */
    for (int ti = 0; ti < 3; ti++) {
        memset(x, 0, sizeof(float) * 256);
        kz_quant_row(TYPES[ti], x, q, 256);
        kz_dequant_row(TYPES[ti], q, y, 256);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += y[i] != 0.0f;
        CHECKF(nz == 0, "%s zero block -> %d non-zeros", tname(TYPES[ti]), nz);
    }
    free(x);
    free(y);
    free(q);
}

static void test_matmul(void) {
    static const int NOUT[] = { 1, 3, 17, 37 };
    static const int NTOK[] = { 1, 2, 5, 9 };
    const int64_t n_in = 256 * (small_mode ? 3 : 7);
    kz_pool *pools[3] = { kz_pool_new(1), kz_pool_new(2), kz_pool_new(3) };
    CHECK(pools[0] && pools[1] && pools[2]);
    unsigned long long s = 4242;
    double worst = 0;
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t t = TYPES[ti];
        CHECK(kz_type_compute_ok(t));
        CHECK(kz_act_type(t) == KZ_T_Q8_K);
        for (int oi = 0; oi < 4; oi++)
            for (int ki = 0; ki < 4; ki++) {
                const int n_out = NOUT[oi], n_tok = NTOK[ki];
                const size_t rb = rowb(t, n_in);
                uint8_t *wq = malloc(rb * n_out);
                float *wf = malloc(sizeof(float) * n_in * n_out), *x = malloc(sizeof(float) * n_in * n_tok);
                for (int o = 0; o < n_out; o++) {
                    kt_fill_row(wf + o * n_in, n_in, &s);
                    kz_quant_row(t, wf + o * n_in, wq + o * rb, n_in);
                    kz_dequant_row(t, wq + o * rb, wf + o * n_in, n_in);
                }
                for (int k = 0; k < n_tok; k++) kt_fill_row(x + k * n_in, n_in, &s);
                kz_wmat W = { .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = wq };
                const int64_t ldy = n_out + 1;
                float *y = malloc(sizeof(float) * ldy * n_tok), *y0 = malloc(sizeof(float) * ldy * n_tok);
                void *work = malloc(matmul1_work(&W, n_tok) + 1);
                for (int pi = 0; pi < 3; pi++) {
                    for (int64_t i = 0; i < ldy * n_tok; i++) y[i] = -5.0f;
                    matmul1(pools[pi], &W, x, n_tok, y, ldy, work);
                    if (pi == 0) {
                        memcpy(y0, y, sizeof(float) * ldy * n_tok);
                        /* vs double: weights dequantized, activations exact f32; the error
                         * budget is the Q8_K activation rounding (~1/254 of a block's max) */
                        for (int k = 0; k < n_tok; k++)
                            for (int o = 0; o < n_out; o++) {
                                double d = 0, sa = 0;
                                for (int64_t i = 0; i < n_in; i++) {
                                    d += (double)wf[o * n_in + i] * x[k * n_in + i];
                                    sa += fabs((double)wf[o * n_in + i] * x[k * n_in + i]);
                                }
                                const double e = fabs(d - y[k * ldy + o]) / sa;
                                if (e > worst) worst = e;
                            }
                    } else {
                        CHECKF(memcmp(y, y0, sizeof(float) * ldy * n_tok) == 0, "%s matmul depends on threads",
                               tname(t));
                    }
                    /* batch invariance: each token alone gives the same bits */
                    for (int k = 0; k < n_tok; k++) {
                        float y1[40];
                        matmul1(pools[pi], &W, x + k * n_in, 1, y1, n_out, work);
                        CHECKF(memcmp(y1, y + k * ldy, sizeof(float) * n_out) == 0, "%s matmul token %d alone differs",
                               tname(t), k);
                    }
                    int pad = 0;
                    for (int k = 0; k < n_tok; k++) pad += y[k * ldy + n_out] != -5.0f;
                    CHECK(pad == 0);
                }
                free(wq);
                free(wf);
                free(x);
                free(y);
                free(y0);
                free(work);
            }
    }
    printf("  kz_matmul vs double dequant reference: worst |err| / sum|w x| = %.3g\n", worst);
    CHECKF(worst < 0.01 && worst > 1e-6, "matmul vs double: %g", worst);
    for (int i = 0; i < 3; i++) kz_pool_free(pools[i]);
}

int main(void) {
    const char *sm = getenv("KZ_TEST_SMALL");
    small_mode = sm && *sm && strcmp(sm, "0") != 0;
    test_levels();
    test_big_tiles();
    test_roundtrip();
    test_matmul();
    KT_END();
}
