/* Quant kernels: quant->dequant error bounds, vec_dot vs a double-precision dot of the
 * dequantized operands, matmul vs per-row vec_dot (bit-identical across thread counts),
 * fp16/bf16 conversions, and the Q4_0 FMA rounding trap. Random data, odd sizes. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sys/cpu.h"
#include "sys/fp16.h"
#include "kt.h"
#include "nn/ops.h"
#include "matmul/matmul.h"
#include "matmul/kernels.h"
#include "sys/threadpool.h"
#include "model/types.h"

/* one matrix through kz_matmul */
static void matmul1(kz_pool *pool, const kz_wmat *w, const float *x, int n_tok, float *y, int64_t ldy, void *work) {
    kz_matmul(pool, &(kz_mm){.w = {w}, .nw = 1, .x = x, .n_tok = n_tok, .y = {y}, .ldy = {ldy}, .work = work});
}
static size_t matmul1_work(const kz_wmat *w, int n_tok) {
    return kz_matmul_work_bytes(&(kz_mm){.w = {w}, .nw = 1, .n_tok = n_tok});
}

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
static int blck(uint32_t t) { return (t == KZ_T_Q8_0 || t == KZ_T_Q4_0) ? 32 : 1; }
static size_t rowb(uint32_t t, int64_t n) {
    switch (t) {
    case KZ_T_F32: return (size_t)n * 4;
    case KZ_T_F16: case KZ_T_BF16: return (size_t)n * 2;
    case KZ_T_Q8_0: return (size_t)(n / 32) * 34;
    case KZ_T_Q4_0: return (size_t)(n / 32) * 18;
    }
    return 0;
}

static float h2f(const uint8_t *p) { return kz_fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* ---- fp16 / bf16 conversions against an independent double-precision model ---- */
static double fp16_value(uint16_t h) { /* from the IEEE definition */
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_fp16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kz_fp16_to_f32((uint16_t)h);
        double v = fp16_value((uint16_t)h);
        if (isnan(v)) { if (!isnan(f)) bad++; continue; }
        if ((double)f != v || !signbit(f) != !signbit(v)) bad++;
        /* round trip of every non-NaN half is exact */
        if (kz_f32_to_fp16(f) != h) bad++;
    }
    CHECKF(bad == 0, "fp16 decode/roundtrip mismatches: %d", bad);

    /* narrowing: for every pair of adjacent finite halves, probe the midpoint and its float
     * neighbours; expect RNE (ties to even mantissa), overflow to inf past 65520 */
    bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = fp16_value((uint16_t)h), hi = h + 1 < 0x7c00 ? fp16_value((uint16_t)(h + 1)) : 65536.0;
        float mid = (float)((lo + hi) / 2); /* exact in float */
        float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        uint16_t hh = (uint16_t)(h + 1 < 0x7c00 ? h + 1 : 0x7c00);
        uint16_t even = (h & 1) ? hh : (uint16_t)h;
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t sb = sgn ? 0x8000 : 0;
            float m = sgn ? -mid : mid, b = sgn ? -below : below, a = sgn ? -above : above;
            if (kz_f32_to_fp16(m) != (uint16_t)(sb | even)) bad++;
            if (kz_f32_to_fp16(b) != (uint16_t)(sb | h)) bad++;
            if (kz_f32_to_fp16(a) != (uint16_t)(sb | hh)) bad++;
        }
    }
    CHECKF(bad == 0, "fp16 RNE boundary mismatches: %d", bad);
    CHECK(kz_f32_to_fp16(INFINITY) == 0x7c00);
    CHECK(kz_f32_to_fp16(-INFINITY) == 0xfc00);
    CHECK(kz_f32_to_fp16(1e10f) == 0x7c00);
    CHECK((kz_f32_to_fp16(NAN) & 0x7fff) == 0x7e00);
    CHECK(kz_f32_to_fp16(1e-30f) == 0 && kz_f32_to_fp16(-1e-30f) == 0x8000);

    /* bf16: RNE on the upper 16 bits, probe ties both ways */
    bad = 0;
    unsigned long long s = 99;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)kt_rng(&s);
        if ((u & 0x7f800000u) == 0x7f800000u) continue;
        uint16_t b = kz_f32_to_bf16(kz_bits_f32(u));
        uint32_t lo16 = u & 0xffff, up = u >> 16;
        uint32_t want = lo16 > 0x8000 || (lo16 == 0x8000 && (up & 1)) ? up + 1 : up;
        if (b != (uint16_t)want) bad++;
        uint32_t tie = (u & 0xffff0000u) | 0x8000u;
        if ((tie & 0x7f800000u) != 0x7f800000u) {
            uint32_t w2 = (up & 1) ? up + 1 : up;
            if (kz_f32_to_bf16(kz_bits_f32(tie)) != (uint16_t)w2) bad++;
        }
        if (kz_bf16_to_f32(b) != kz_bits_f32(want << 16)) bad++;
    }
    CHECKF(bad == 0, "bf16 mismatches: %d", bad);
    CHECK((kz_f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0);
}

/* ---- quantize -> dequantize error bounds ---- */
static void test_roundtrip(void) {
    static const int64_t NS[] = { 32, 32 * 7, 32 * 33, 229 };
    static const int ROWS[] = { 1, 3, 17, 63 };
    unsigned long long s = 12345;
    for (int ti = 0; ti < NTYPES; ti++) {
        uint32_t t = TYPES[ti];
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            int64_t n = NS[ni];
            if (n % blck(t)) {
                float dummy[32];
                uint8_t q[64];
                CHECK(kz_quant_row(t, dummy, q, 229) == 0);
                CHECK(kz_dequant_row(t, q, dummy, 229) == -1);
                continue;
            }
            for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++) {
                int rows = ROWS[ri];
                float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
                uint8_t *q = malloc(rowb(t, n));
                int bad = 0;
                double worst = 0; /* worst error relative to the bound */
                for (int r = 0; r < rows; r++) {
                    kt_fill_row(x, n, &s);
                    if (r == 1) memset(x, 0, 32 * sizeof(float)); /* an all-zero block */
                    size_t nb = kz_quant_row(t, x, q, n);
                    if (nb != rowb(t, n)) { bad++; continue; }
                    if (kz_dequant_row(t, q, y, n) != 0) { bad++; continue; }
                    for (int64_t i = 0; i < n; i++) {
                        double e = fabs((double)y[i] - x[i]), bound;
                        double ax = fabs(x[i]);
                        if (t == KZ_T_F32) bound = 0;
                        else if (t == KZ_T_F16) bound = fmax(ax * ldexp(1, -11), ldexp(1, -25));
                        else if (t == KZ_T_BF16) bound = ax * ldexp(1, -8);
                        else {
                            const float *xb = x + (i / 32) * 32;
                            const uint8_t *b = q + (i / 32) * (t == KZ_T_Q8_0 ? 34 : 18);
                            double dh = h2f(b);
                            float amax = 0, mx = 0;
                            for (int j = 0; j < 32; j++)
                                if (amax < fabsf(xb[j])) { amax = fabsf(xb[j]); mx = xb[j]; }
                            if (t == KZ_T_Q8_0) {
                                double d = amax / 127.0f;
                                /* rounding to the grid (d/2) plus the fp16 error of d (<= 127 steps) */
                                bound = 0.5 * d * (1 + 1e-5) + 127 * fabs(dh - d);
                            } else {
                                double d = mx / -8.0f;
                                double r = x[i] / d; /* in [-8, 8] */
                                /* round-half-up to [-8, 7]: the side opposite to the max saturates at +7 */
                                bound = (r > 7.5 ? (r - 7) : 0.5 * (1 + 1e-5)) * fabs(d) + 8 * fabs(dh - d);
                            }
                            bound += 1e-30;
                        }
                        if (e > bound) bad++;
                        if (bound > 0 && e / bound > worst) worst = e / bound;
                    }
                    if (r == 1 && blck(t) == 32)
                        for (int j = 0; j < 32; j++) if (y[j] != 0.0f) bad++;
                }
                CHECKF(bad == 0, "%s n=%lld rows=%d: %d elements over the error bound", tname(t),
                       (long long)n, rows, bad);
                if (ri == 3) printf("  roundtrip %-4s n=%-4lld worst err/bound = %.3f\n", tname(t), (long long)n, worst);
                free(x); free(y); free(q);
            }
        }
    }
    /* unsupported types are refused (IQ2_XXS: no kernels planned; K-quants have their own
     * tests in test_quant_k.c), and K-quant rows must be whole 256-element blocks */
    float f[256] = { 1 };
    uint8_t q[256];
    CHECK(kz_quant_row(KZ_T_IQ2_XXS, f, q, 256) == 0);
    CHECK(kz_dequant_row(KZ_T_IQ2_XXS, q, f, 256) == -1);
    CHECK(kz_quant_row(KZ_T_Q4_K, f, q, 32) == 0);
    CHECK(!kz_type_compute_ok(KZ_T_IQ2_XXS) && kz_type_compute_ok(KZ_T_Q4_0) && kz_type_compute_ok(KZ_T_BF16));
}

/* ---- known small cases (exact) ---- */
static void test_known(void) {
    /* Q8_0 of [-127..] integers: d = 1 exactly, qs = x */
    float x[32], y[32];
    uint8_t q[34];
    for (int j = 0; j < 32; j++) x[j] = (float)(j * 8 - 127);
    x[31] = 127.0f;
    CHECK(kz_quant_row(KZ_T_Q8_0, x, q, 32) == 34);
    CHECK(q[0] == 0x00 && q[1] == 0x3c); /* fp16(1.0) = 0x3c00 */
    CHECK((int8_t)q[2] == -127 && (int8_t)q[3] == -119 && (int8_t)q[33] == 127);
    /* roundf half away from zero: 0.5 -> 1, -2.5 -> -3 (with d = 1) */
    x[0] = 0.5f; x[1] = -2.5f;
    kz_quant_row(KZ_T_Q8_0, x, q, 32);
    CHECK((int8_t)q[2] == 1 && (int8_t)q[3] == -3);

    /* Q4_0: max = -8 -> d = 1; value v maps to nibble trunc(v + 8.5), i.e. v + 8 for integers */
    uint8_t q4[18];
    for (int j = 0; j < 32; j++) x[j] = (float)((j % 16) - 8);
    x[5] = -8.0f;
    x[20] = 7.9f; /* 7.9 + 8.5 = 16.4 -> 15 (saturates) */
    CHECK(kz_quant_row(KZ_T_Q4_0, x, q4, 32) == 18);
    CHECK(q4[0] == 0x00 && q4[1] == 0x3c);
    CHECK((q4[2 + 0] & 15) == 0 && (q4[2 + 0] >> 4) == 0); /* x[0] = -8, x[16] = -8 */
    CHECK((q4[2 + 4] >> 4) == 15);                          /* x[20] = 7.9 */
    CHECK((q4[2 + 3] & 15) == 3);                           /* x[3] = -5: -5 + 8.5 -> 3 */
    kz_dequant_row(KZ_T_Q4_0, q4, y, 32);
    CHECK(y[3] == -5.0f && y[20] == 7.0f && y[0] == -8.0f);
    /* positive max: d = max/-8 is negative, the max element maps to nibble 0 */
    for (int j = 0; j < 32; j++) x[j] = 0.25f * (float)(j - 10);
    kz_quant_row(KZ_T_Q4_0, x, q4, 32);
    CHECK(h2f(q4) == -0.65625f); /* max = x[31] = 5.25 -> d = -0.65625 (exact in fp16) */
    CHECK((q4[2 + 15] >> 4) == 0);
    kz_dequant_row(KZ_T_Q4_0, q4, y, 32);
    CHECK(y[31] == 5.25f);
}

/* The Q4_0 reference rounding depends on FMA contraction of x*id + 8.5f. Build an input where
 * fl(x*id) + 8.5 lands exactly on an integer while the exact x*id + 8.5 is just below it: the
 * two-rounding form (default, = gguf-py) and the fused form must then differ by one level.
 * Fails if this file's quantizer got contracted by the compiler. */
static void test_q4_fma(void) {
    float x[32];
    unsigned long long s = 777;
    int found = 0;
    for (int attempt = 0; attempt < 200000 && !found; attempt++) {
        for (int j = 0; j < 32; j++) x[j] = kt_randf(&s) * 0.9f;
        x[7] = -1.0f - 0.5f * (kt_randf(&s) + 1.0f); /* the max: d = x[7] / -8 */
        float d = x[7] / -8.0f, id = 1.0f / d;
        int k = (int)(kt_rng(&s) % 14) - 7;   /* target fl(x*id) = k - 0.5 */
        float x0 = (float)((k - 0.5) / id);
        for (int u = -8; u <= 8 && !found; u++) {
            float xc = x0;
            for (int v = 0; v < (u < 0 ? -u : u); v++) xc = nextafterf(xc, u < 0 ? -INFINITY : INFINITY);
            if (fabsf(xc) >= fabsf(x[7])) continue;
            float p = xc * id;
            if (p + 8.5f != (float)(k + 8)) continue;
            if (fmaf(xc, id, 8.5f) >= (float)(k + 8)) continue;
            x[12] = xc;
            found = 1;
        }
    }
    CHECKF(found, "could not construct the FMA boundary case");
    uint8_t a[18], b[18], c[18];
    kz_quant_q4_0_ref(x, a, 32, 0);
    kz_quant_q4_0_ref(x, b, 32, 1);
    kz_quant_row(KZ_T_Q4_0, x, c, 32);
    CHECK(memcmp(a, c, 18) == 0); /* kz_quant_row is the two-rounding form */
    int na = a[2 + 12] & 15, nb = b[2 + 12] & 15, ndiff = 0;
    for (int j = 0; j < 18; j++) ndiff += a[j] != b[j];
    CHECKF(na == nb + 1 && ndiff == 1, "unfused %d fused %d (bytes differing %d)", na, nb, ndiff);
}

/* ---- vec_dot vs double dot of dequantized operands ---- */
static void test_vec_dot(void) {
    static const int64_t NS[] = { 32, 32 * 7, 32 * 33, 229 };
    unsigned long long s = 4242;
    for (int ti = 0; ti < NTYPES; ti++) {
        uint32_t t = TYPES[ti], at = kz_act_type(t);
        CHECK(at == (blck(t) == 32 ? (uint32_t)KZ_T_Q8_0 : t));
        double worst = 0;
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            int64_t n = NS[ni];
            if (n % blck(t)) { CHECK(kz_act_row_bytes(t, n) == 0); continue; }
            CHECK(kz_act_row_bytes(t, n) == rowb(at, n));
            float *w = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
            float *wd = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
            uint8_t *wq = malloc(rowb(t, n)), *xq = malloc(rowb(at, n)), *xq2 = malloc(rowb(at, n));
            int bad = 0;
            for (int rep = 0; rep < 40; rep++) {
                kt_fill_row(w, n, &s);
                kt_fill_row(x, n, &s);
                if (rep & 1) for (int64_t i = 0; i < n; i++) x[i] = fabsf(x[i]); /* same-sign: little cancellation */
                kz_quant_row(t, w, wq, n);
                kz_act_quant(t, x, xq, n);
                kz_quant_row(at, x, xq2, n);
                if (memcmp(xq, xq2, rowb(at, n))) bad++; /* activation = reference quantizer of act type */
                kz_dequant_row(t, wq, wd, n);
                kz_dequant_row(at, xq, xd, n);
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)wd[i] * xd[i];
                    mag += fabs((double)wd[i] * xd[i]);
                }
                float got = kz_vec_dot(t, wq, xq, n);
                /* float accumulation: k roundings of relative size u over sum |terms| */
                double k = blck(t) == 32 ? (double)(n / 32) + 2 : (double)n + 1;
                double u = ldexp(1, -24), bound = k * u / (1 - k * u) * mag + 1e-38;
                double e = fabs((double)got - ref);
                if (!(e <= bound)) bad++;
                if (e / bound > worst) worst = e / bound;
            }
            CHECKF(bad == 0, "vec_dot %s n=%lld: %d of 40 over the bound", tname(t), (long long)n, bad);
            free(w); free(x); free(wd); free(xd); free(wq); free(xq); free(xq2);
        }
        printf("  vec_dot %-4s worst err/bound = %.4f\n", tname(t), worst);
    }
    /* an exact case: integer data, Q8_0 with d = 1 on both sides */
    float a[64], b[64];
    uint8_t qa[68], qb[68];
    long long want = 0;
    for (int i = 0; i < 64; i++) {
        a[i] = (float)((i * 37) % 255 - 127);
        b[i] = (float)((i * 91) % 255 - 127);
    }
    a[0] = 127; b[0] = -127; a[32] = -127; b[32] = 127; /* amax 127 per block: d = 1 */
    for (int i = 0; i < 64; i++) want += (long long)a[i] * (long long)b[i];
    kz_quant_row(KZ_T_Q8_0, a, qa, 64);
    kz_act_quant(KZ_T_Q8_0, b, qb, 64);
    CHECKF(kz_vec_dot(KZ_T_Q8_0, qa, qb, 64) == (float)want, "%g vs %lld", kz_vec_dot(KZ_T_Q8_0, qa, qb, 64), want);
    CHECK(isnan(kz_vec_dot(KZ_T_IQ2_XXS, qa, qb, 256)));
}

/* ---- matmul: per-row vec_dot reference, bit-identical across thread counts ---- */
/* reference for kz_matmul: each token row converted to the activation type, dotted with each
 * weight row by kz_vec_dot (act: scratch of one converted row) */
static void ref_matmul(uint32_t t, const uint8_t *wq, size_t rb, int n_out, const float *x, int64_t n_in,
                       int n_tok, uint8_t *act, float *ref) {
    for (int tk = 0; tk < n_tok; tk++) {
        kz_act_quant(t, x + tk * n_in, act, n_in);
        for (int o = 0; o < n_out; o++) ref[tk * n_out + o] = kz_vec_dot(t, wq + o * rb, act, n_in);
    }
}

/* kz_matmul into y (row stride ldy > n_out, filled with a sentinel first): counts the outputs
 * not bit-identical to ref and the writes into the padding */
static void matmul_vs_ref(kz_pool *pool, const kz_wmat *W, const float *x, int n_tok, const float *ref, float *y,
                          int64_t ldy, void *work, int *bad, int *pad) {
    const int n_out = (int)W->n_out;
    for (int64_t i = 0; i < ldy * n_tok; i++) y[i] = -12345.0f;
    matmul1(pool, W, x, n_tok, y, ldy, work);
    *bad = *pad = 0;
    for (int tk = 0; tk < n_tok; tk++) {
        for (int o = 0; o < n_out; o++)
            if (memcmp(&y[tk * ldy + o], &ref[tk * n_out + o], 4)) (*bad)++;
        for (int64_t o = n_out; o < ldy; o++) if (y[tk * ldy + o] != -12345.0f) (*pad)++;
    }
}

static void test_matmul(void) {
    static const int64_t NIN[] = { 32 * 7, 32 * 33 };
    static const int NOUT[] = { 1, 3, 17, 63 };
    static const int NTOK[] = { 1, 2, 5, 64 };
    kz_pool *pools[3] = { kz_pool_new(1), kz_pool_new(2), kz_pool_new(3) };
    CHECK(pools[0] && pools[1] && pools[2]);
    unsigned long long s = 31337;
    int n_cases = 0;
    for (int ti = 0; ti < NTYPES; ti++) {
        uint32_t t = TYPES[ti];
        for (size_t ii = 0; ii < 2; ii++)
            for (size_t oi = 0; oi < 4; oi++) {
                int64_t n_in = NIN[ii];
                int n_out = NOUT[oi];
                size_t rb = rowb(t, n_in);
                uint8_t *wq = malloc(rb * n_out);
                float *wf = malloc(sizeof(float) * n_in);
                for (int o = 0; o < n_out; o++) {
                    kt_fill_row(wf, n_in, &s);
                    kz_quant_row(t, wf, wq + o * rb, n_in);
                }
                kz_wmat W = { .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = wq };
                for (size_t ki = 0; ki < 4; ki++) {
                    int n_tok = NTOK[ki];
                    int64_t ldy = n_out + 3; /* strided output; padding must stay untouched */
                    float *x = malloc(sizeof(float) * n_in * n_tok);
                    for (int tk = 0; tk < n_tok; tk++) kt_fill_row(x + tk * n_in, n_in, &s);
                    /* reference: convert each token row, dot each weight row */
                    size_t arb = kz_act_row_bytes(t, n_in);
                    uint8_t *act = malloc(arb);
                    float *ref = malloc(sizeof(float) * n_tok * n_out);
                    ref_matmul(t, wq, rb, n_out, x, n_in, n_tok, act, ref);
                    size_t wb = matmul1_work(&W, n_tok);
                    /* up to KZ_MM_THIN tokens with Q8_0 activations: + the packed GEMV's / thin gemm's
                     * per-block terms of each row (64-byte aligned) */
                    const size_t aux = n_tok <= KZ_MM_THIN && kz_act_type(t) == KZ_T_Q8_0
                                           ? 64 + (size_t)n_tok * (size_t)(n_in / 32) * 4
                                           : 0;
                    CHECK(wb == (t == KZ_T_F32 ? 0 : arb * n_tok + aux));
                    float *y = malloc(sizeof(float) * ldy * n_tok);
                    void *work = malloc(wb ? wb : 1);
                    for (int pi = -1; pi < 3; pi++) {
                        int bad, pad;
                        matmul_vs_ref(pi < 0 ? NULL : pools[pi], &W, x, n_tok, ref, y, ldy, work, &bad, &pad);
                        CHECKF(bad == 0 && pad == 0, "matmul %s %lldx%d n_tok=%d threads=%d: %d differ, %d pad writes",
                               tname(t), (long long)n_in, n_out, n_tok, pi < 0 ? 0 : pi + 1, bad, pad);
                        n_cases++;
                    }
                    /* a sanity check that the result is a matmul at all: one element vs double */
                    {
                        float *wd = malloc(sizeof(float) * n_in);
                        kz_dequant_row(t, wq + (n_out - 1) * rb, wd, n_in);
                        double r = 0, mag = 0;
                        for (int64_t i = 0; i < n_in; i++) {
                            r += (double)wd[i] * x[(n_tok - 1) * n_in + i];
                            mag += fabs((double)wd[i] * x[(n_tok - 1) * n_in + i]);
                        }
                        /* activation rounding: Q8_0 ~ 1/254 relative per element, fp16 2^-11, bf16 2^-8 */
                        double tol = (blck(t) == 32 ? 0.01 : t == KZ_T_BF16 ? 0.005 : 1e-3) * mag;
                        CHECKF(fabs(y[(n_tok - 1) * ldy + n_out - 1] - r) <= tol, "matmul %s vs double: %g vs %g",
                               tname(t), y[(n_tok - 1) * ldy + n_out - 1], r);
                        free(wd);
                    }
                    free(x); free(act); free(ref); free(y); free(work);
                }
                free(wq); free(wf);
            }
    }
    printf("  matmul: %d (type, shape, n_tok, threads) cases bit-identical to per-row vec_dot\n", n_cases);
    /* misuse is visible: unsupported type, row length not a whole number of blocks, short rows */
    {
        uint8_t wq[4 * 18] = { 0 };
        float x[64] = { 1 }, y[4];
        kz_wmat bad[3] = { { KZ_T_IQ2_XXS, 256, 1, 66, wq, NULL, 0, NULL }, { KZ_T_Q4_0, 48, 1, 27, wq, NULL, 0, NULL }, { KZ_T_Q4_0, 64, 2, 18, wq, NULL, 0, NULL } };
        for (int i = 0; i < 3; i++) {
            y[0] = y[1] = 0;
            matmul1(pools[1], &bad[i], x, 1, y, 2, wq);
            CHECKF(isnan(y[0]), "bad wmat %d not flagged", i);
        }
    }
    for (int i = 0; i < 3; i++) kz_pool_free(pools[i]);
}

/* 16-row packed Q4_0 (kz_model_params.repack_weights): the layout holds every byte of the
 * original blocks where quant.h says, and kz_matmul over packed rows (plus unpacked tail rows)
 * equals per-row vec_dot bit for bit for any thread count and token count */
static void test_matmul_q4_0_16x4(void) {
    /* 130 blocks: more than one prefill kernel chunk; 1030: more than one GEMV sweep (1024) */
    static const int64_t NIN[] = { 32 * 7, 32 * 33, 32 * 130, 32 * 1030 };
    static const int NOUT[] = { 16, 35, 160 };
    static const int NTOK[] = { 1, 3, 8, 13, 70 };
    kz_pool *pools[2] = { kz_pool_new(2), kz_pool_new(3) };
    CHECK(pools[0] && pools[1]);
    const int have = kz_gemm_q4_0_16x4_get() != NULL;
    unsigned long long s = 4242;
    int n_cases = 0;
    for (size_t ii = 0; ii < 4; ii++)
        for (size_t oi = 0; oi < 3; oi++) {
            const int64_t n_in = NIN[ii], nb = n_in / 32;
            const int n_out = NOUT[oi], n_q4_0_16x4 = n_out - n_out % 16;
            if (ii == 3 && oi == 2) continue; /* the long rows: a few shapes keep the scalar reference quick */
            const size_t rb = rowb(KZ_T_Q4_0, n_in);
            uint8_t *wq = malloc(rb * n_out), *pk = malloc((size_t)(n_q4_0_16x4 / 16) * nb * 288);
            float *wf = malloc(sizeof(float) * n_in);
            for (int o = 0; o < n_out; o++) {
                kt_fill_row(wf, n_in, &s);
                kz_quant_row(KZ_T_Q4_0, wf, wq + o * rb, n_in);
            }
            kz_repack_q4_0_16x4(wq, rb, n_q4_0_16x4, n_in, pk);
            int lay = 0;
            for (int o = 0; o < n_q4_0_16x4; o++)
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *src = wq + o * rb + b * 18, *g = pk + ((size_t)(o / 16) * nb + b) * 288;
                    if (memcmp(g + 256 + 2 * (o % 16), src, 2)) lay++;
                    for (int j = 0; j < 4; j++) if (memcmp(g + 64 * j + 4 * (o % 16), src + 2 + 4 * j, 4)) lay++;
                }
            CHECKF(lay == 0, "repack %lldx%d: %d misplaced pieces", (long long)n_in, n_out, lay);
            kz_wmat W = { .type = KZ_T_Q4_0, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = wq,
                          .q4_0_16x4 = pk, .n_q4_0_16x4 = n_q4_0_16x4 };
            for (size_t ki = 0; ki < (ii == 3 ? 2u : 5u) && have; ki++) {
                const int n_tok = NTOK[ki];
                const int64_t ldy = n_out + 5;
                float *x = malloc(sizeof(float) * n_in * n_tok), *ref = malloc(sizeof(float) * n_tok * n_out);
                float *y = malloc(sizeof(float) * ldy * n_tok);
                for (int tk = 0; tk < n_tok; tk++) kt_fill_row(x + tk * n_in, n_in, &s);
                const size_t arb = kz_act_row_bytes(KZ_T_Q4_0, n_in);
                uint8_t *act = malloc(arb);
                ref_matmul(KZ_T_Q4_0, wq, rb, n_out, x, n_in, n_tok, act, ref);
                void *work = malloc(matmul1_work(&W, n_tok));
                for (int pi = -1; pi < 2; pi++) {
                    int bad, pad;
                    matmul_vs_ref(pi < 0 ? NULL : pools[pi], &W, x, n_tok, ref, y, ldy, work, &bad, &pad);
                    CHECKF(bad == 0 && pad == 0, "packed matmul %lldx%d n_tok=%d threads=%d: %d differ, %d pad writes",
                           (long long)n_in, n_out, n_tok, pi < 0 ? 1 : pi + 2, bad, pad);
                    n_cases++;
                }
                free(x); free(ref); free(y); free(act); free(work);
            }
            free(wq); free(pk); free(wf);
        }
    if (have) printf("  packed Q4_0 matmul: %d (shape, n_tok, threads) cases bit-identical to per-row vec_dot\n", n_cases);
    else printf("  packed Q4_0 matmul: layout checked; no packed kernel at this ISA level\n");
    for (int i = 0; i < 2; i++) kz_pool_free(pools[i]);
}

/* Every level's packed kernel called directly (not through kz_matmul, which cuts prefill into
 * <= 64-token calls): raw random nibbles and activation int8 (-128 included), shapes crossing
 * the kernels' block chunks and token groups, y stride with padding that must stay untouched
 * and NaN-prefilled outputs (a kernel must not read y before writing it); each output vs the
 * scalar reference vec_dot of that row and token, bit for bit. */
static void test_q4_0_16x4_kernels(void) {
    /* 1029 blocks: rows longer than the x86 GEMV's 1024-block sweep (partial sums through y);
     * 16 / 48 / 64 rows: one group, a pair + one, two pairs (the x86 GEMV pairs groups) */
    static const int64_t NB[] = { 5, 65, 129, 1029 };
    static const int NR[] = { 16, 48, 64 };
    static const int NT[] = { 1, 2, 5, 13, 64, 67 };
    const kz_qtraits *sc = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_Q4_0);
    CHECK(sc && sc->vec_dot);
    if (!sc) return;
    unsigned long long s = 99;
    /* each level's dispatched kernel; on x86 also both AVX-512 entries (with and without the
     * GEMV prefetch: the dispatch picks one by vendor, so one host would run only one) */
    kz_gemm_q4_0_16x4_fn fns[KZ_ISA_COUNT + 2];
    int lvl[KZ_ISA_COUNT + 2], n_fn = 0;
    for (int isa = 0; isa < KZ_ISA_COUNT; isa++) {
#if defined(__x86_64__)
        if (isa == KZ_ISA_AVX512) continue; /* both of its entries are added below */
#endif
        if (kz_gemm_q4_0_16x4_get_isa(isa)) { fns[n_fn] = kz_gemm_q4_0_16x4_get_isa(isa); lvl[n_fn++] = isa; }
    }
#if defined(__x86_64__)
    /* the dispatch returns one of these two (by vendor) */
    CHECK(!kz_isa_available(KZ_ISA_AVX512) || kz_gemm_q4_0_16x4_get_isa(KZ_ISA_AVX512) == kz_avx512_gemm_q4_0_16x4 ||
          kz_gemm_q4_0_16x4_get_isa(KZ_ISA_AVX512) == kz_avx512_gemm_q4_0_16x4_nopf);
    if (kz_isa_available(KZ_ISA_AVX512)) {
        fns[n_fn] = kz_avx512_gemm_q4_0_16x4; lvl[n_fn++] = KZ_ISA_AVX512;
        fns[n_fn] = kz_avx512_gemm_q4_0_16x4_nopf; lvl[n_fn++] = KZ_ISA_AVX512;
    }
#endif
    for (int fi = 0; fi < n_fn; fi++) {
        const kz_gemm_q4_0_16x4_fn fn = fns[fi];
        const int isa = lvl[fi];
        int n_cases = 0;
        for (size_t bi = 0; bi < 4; bi++)
            for (size_t ri = 0; ri < 3; ri++) {
                /* the long rows only where the sweep limit is (x86), to keep the emulated ARM run short */
                if (NB[bi] > 1024 && isa != KZ_ISA_AVX512) continue;
                const int64_t nb = NB[bi], n = nb * 32;
                const int nr = NR[ri];
                const size_t rb = (size_t)nb * 18, ab = (size_t)nb * 34 + 6; /* activation rows padded */
                uint8_t *w = malloc(rb * nr), *pk = malloc((size_t)(nr / 16) * kz_q4_0_16x4_group_bytes(n));
                uint8_t *a = malloc(ab * 67);
                for (size_t i = 0; i < rb * nr; i++) w[i] = (uint8_t)kt_rng(&s);
                for (size_t i = 0; i < ab * 67; i++) a[i] = (uint8_t)kt_rng(&s);
                /* finite scales of both signs, varied exponents */
                for (int r = 0; r < nr; r++)
                    for (int64_t b = 0; b < nb; b++) {
                        const uint16_t h = kz_f32_to_fp16(kt_randf(&s) * 2.0f);
                        memcpy(w + r * rb + b * 18, &h, 2);
                    }
                for (int t = 0; t < 67; t++)
                    for (int64_t b = 0; b < nb; b++) {
                        const uint16_t h = kz_f32_to_fp16(kt_randf(&s) * 0.05f);
                        memcpy(a + t * ab + b * 34, &h, 2);
                    }
                kz_repack_q4_0_16x4(w, rb, nr, n, pk);
                for (size_t ti = 0; ti < sizeof NT / sizeof NT[0]; ti++) {
                    const int nt = NT[ti];
                    const int64_t ldy = nr + 3;
                    float *y = malloc(sizeof(float) * ldy * nt);
                    for (int64_t i = 0; i < ldy * nt; i++) y[i] = NAN;
                    for (int t = 0; t < nt; t++)
                        for (int64_t r = nr; r < ldy; r++) y[t * ldy + r] = -777.0f;
                    fn(n, pk, nr, a, ab, nt, y, ldy);
                    int bad = 0, pad = 0;
                    for (int t = 0; t < nt; t++) {
                        for (int r = 0; r < nr; r++) {
                            const float want = sc->vec_dot(w + r * rb, a + t * ab, n);
                            if (memcmp(&want, &y[t * ldy + r], 4)) bad++;
                        }
                        for (int64_t r = nr; r < ldy; r++) pad += y[t * ldy + r] != -777.0f;
                    }
                    CHECKF(bad == 0 && pad == 0, "q4_0_16x4 kernel level %d n=%lld rows=%d n_tok=%d: %d differ, %d pad writes",
                           isa, (long long)n, nr, nt, bad, pad);
                    n_cases++;
                    free(y);
                }
#if defined(__x86_64__)
                /* the one-token GEMV with the row's per-block terms precomputed (both prefetch
                 * choices), on the first activation row and on one further in */
                if (isa == KZ_ISA_AVX512 && fi == n_fn - 1)
                    for (int t = 0; t < 67; t += 66) {
                        const kz_gemv_q4_0_16x4 gv = kz_gemv_q4_0_16x4_get_isa(isa);
                        int32_t *aux = malloc(sizeof(int32_t) * (size_t)nb);
                        float *y = malloc(sizeof(float) * (size_t)(nr + 1));
                        CHECK(gv.prep && gv.gemv);
                        if (!gv.prep) { free(aux); free(y); break; }
                        gv.prep(a + t * ab, n, aux);
                        void (*const gf[2])(int64_t, const void *, int64_t, const void *, const int32_t *, float *) = {
                            kz_avx512_gemv_q4_0_16x4, kz_avx512_gemv_q4_0_16x4_nopf};
                        for (int k = 0; k < 2; k++) {
                            for (int r = 0; r <= nr; r++) y[r] = -777.0f;
                            gf[k](n, pk, nr, a + t * ab, aux, y);
                            int bad = 0;
                            for (int r = 0; r < nr; r++) {
                                const float want = sc->vec_dot(w + r * rb, a + t * ab, n);
                                bad += memcmp(&want, &y[r], 4) != 0;
                            }
                            CHECKF(bad == 0 && y[nr] == -777.0f, "q4_0_16x4 GEMV with precomputed terms (%s) n=%lld rows=%d: %d differ",
                                   k ? "no prefetch" : "prefetch", (long long)n, nr, bad);
                            n_cases++;
                        }
                        free(aux); free(y);
                    }
#endif
                free(w); free(pk); free(a);
            }
        printf("  packed Q4_0 kernel of level %d: %d (shape, n_tok) cases bit-identical to the scalar vec_dot\n", isa,
               n_cases);
    }
}

/* a matrix of n_out random rows (kt_fill_row, then kz_quant_row to type t; wf: n_in floats of
 * scratch) in *W; returns its data, the caller's to free */
static uint8_t *random_wmat(kz_wmat *W, uint32_t t, int64_t n_in, int64_t n_out, float *wf, unsigned long long *s) {
    const size_t rb = kz_row_bytes(t, n_in);
    uint8_t *data = malloc(rb * (size_t)n_out);
    for (int64_t o = 0; o < n_out; o++) {
        kt_fill_row(wf, n_in, s);
        kz_quant_row(t, wf, data + (size_t)o * rb, n_in);
    }
    *W = (kz_wmat){ .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = data };
    return data;
}

/* Q4_0 matrix W, where a packed kernel exists: all its rows but a tail of n_out % 16 copied
 * into the 16-row layout (W->q4_0_16x4, W->n_q4_0_16x4); returns that copy (free it), else NULL */
static uint8_t *pack_all_but_tail(kz_wmat *W) {
    if (W->type != KZ_T_Q4_0 || !kz_gemm_q4_0_16x4_get()) return NULL;
    W->n_q4_0_16x4 = W->n_out - W->n_out % 16;
    uint8_t *pk = malloc((size_t)(W->n_q4_0_16x4 / 16) * kz_q4_0_16x4_group_bytes(W->n_in));
    kz_repack_q4_0_16x4(W->data, W->row_bytes, W->n_q4_0_16x4, W->n_in, pk);
    W->q4_0_16x4 = pk;
    return pk;
}

/* kz_matmul with several matrices: a group of matrices of mixed types on one X (shared activation conversion,
 * one dispatch, rows split by bytes) gives every output bit for bit as kz_matmul of each alone,
 * padding untouched, for 1..3 threads, decode and prefill sizes, packed and plain rows */
static void test_matmul_multi(void) {
    static const uint32_t GT[][4] = { { KZ_T_Q4_0, KZ_T_Q4_0, KZ_T_F32, KZ_T_F32 },
                                      { KZ_T_Q4_0, KZ_T_Q8_0, KZ_T_Q4_K, 0 },
                                      { KZ_T_IQ4_NL, KZ_T_F16, KZ_T_Q4_0, 0 } };
    static const int GN[] = { 4, 3, 3 };
    static const int NOUT[] = { 35, 17, 3, 64 };
    static const int NTOK[] = { 1, 9, 70 };
    const int64_t n_in = 768; /* 24 blocks of 32, 3 of 256 */
    kz_pool *pools[2] = { kz_pool_new(2), kz_pool_new(3) };
    CHECK(pools[0] && pools[1]);
    unsigned long long s = 777;
    int n_cases = 0;
    for (int g = 0; g < 3; g++) {
        kz_wmat W[4];
        const kz_wmat *wp[4] = { NULL };
        uint8_t *data[4], *pk[4] = { NULL };
        float *wf = malloc(sizeof(float) * n_in);
        for (int i = 0; i < GN[g]; i++) {
            data[i] = random_wmat(&W[i], GT[g][i], n_in, NOUT[(i + g) % 4], wf, &s);
            if (i == 0) pk[i] = pack_all_but_tail(&W[i]); /* the first matrix, where it is Q4_0 */
            wp[i] = &W[i];
        }
        for (size_t ki = 0; ki < 3; ki++) {
            const int n_tok = NTOK[ki];
            float *x = malloc(sizeof(float) * n_in * n_tok);
            for (int tk = 0; tk < n_tok; tk++) kt_fill_row(x + tk * n_in, n_in, &s);
            float *ref[4], *y[4];
            int64_t ld[4];
            size_t wmax = 0;
            for (int i = 0; i < GN[g]; i++) if (matmul1_work(&W[i], n_tok) > wmax) wmax = matmul1_work(&W[i], n_tok);
            void *work1 = malloc(wmax ? wmax : 1), *work = malloc(kz_matmul_work_bytes(&(kz_mm){.w = {wp[0], wp[1], wp[2], wp[3]}, .nw = GN[g], .n_tok = n_tok}) + 1);
            for (int i = 0; i < GN[g]; i++) {
                ld[i] = W[i].n_out + 2 + i;
                ref[i] = malloc(sizeof(float) * ld[i] * n_tok);
                y[i] = malloc(sizeof(float) * ld[i] * n_tok);
                for (int64_t e = 0; e < ld[i] * n_tok; e++) ref[i][e] = -12345.0f;
                matmul1(pools[0], &W[i], x, n_tok, ref[i], ld[i], work1);
            }
            for (int pi = -1; pi < 2; pi++) {
                for (int i = 0; i < GN[g]; i++)
                    for (int64_t e = 0; e < ld[i] * n_tok; e++) y[i][e] = -12345.0f;
                kz_mm mm = {.nw = GN[g], .x = x, .n_tok = n_tok, .work = work};
                for (int i = 0; i < GN[g]; i++) mm.w[i] = wp[i], mm.y[i] = y[i], mm.ldy[i] = ld[i];
                kz_matmul(pi < 0 ? NULL : pools[pi], &mm);
                int bad = 0;
                for (int i = 0; i < GN[g]; i++) bad += memcmp(y[i], ref[i], sizeof(float) * ld[i] * n_tok) != 0;
                CHECKF(bad == 0, "matmul_multi group %d n_tok=%d threads=%d: %d of %d outputs differ from kz_matmul", g,
                       n_tok, pi < 0 ? 1 : pi + 2, bad, GN[g]);
                n_cases++;
            }
            for (int i = 0; i < GN[g]; i++) { free(ref[i]); free(y[i]); }
            free(x); free(work1); free(work);
        }
        for (int i = 0; i < GN[g]; i++) { free(data[i]); free(pk[i]); }
        free(wf);
    }
    printf("  matmul_multi: %d (group, n_tok, threads) cases equal to one kz_matmul per matrix\n", n_cases);
    for (int i = 0; i < 2; i++) kz_pool_free(pools[i]);
}

/* kz_matmul with argmax: the same outputs as kz_matmul, and kz_argmax's index (first maximum, NaN
 * never wins, 0 when nothing is above -inf) found by the threads over the rows they wrote, for
 * 1..4 threads, on rows spread over many chunks (owner pieces and steals): random rows, the
 * maximum's row copied to an earlier and a later row (a three-way tie: the first must win),
 * NaN rows before and at the old maximum, two +inf rows, and all rows -inf. */
static void test_matmul_argmax(void) {
    static const uint32_t T[] = { KZ_T_Q4_0, KZ_T_F32, KZ_T_Q8_0 };
    static const int NOUT[] = { 5003, 997, 2101 };
    const int64_t n_in = 768;
    kz_pool *pools[3] = { kz_pool_new(2), kz_pool_new(3), kz_pool_new(4) };
    CHECK(pools[0] && pools[1] && pools[2]);
    unsigned long long s = 4242;
    int n_cases = 0;
    float *x = malloc(sizeof(float) * n_in), *wf = malloc(sizeof(float) * n_in);
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t t = T[ti];
        const int n_out = NOUT[ti];
        const size_t rb = kz_row_bytes(t, n_in);
        uint8_t *data = malloc(rb * n_out), *pk = NULL;
        float *ref = malloc(sizeof(float) * n_out), *y = malloc(sizeof(float) * n_out);
        void *work = malloc(matmul1_work(&(kz_wmat){ .type = t, .n_in = n_in }, 1) + 1);
        for (int sc = 0; sc < 5; sc++) {
            if (sc == 4 && t != KZ_T_F32) continue; /* -inf rows: F32 weights */
            kt_fill_row(x, n_in, &s);
            if (sc == 4) for (int64_t i = 0; i < n_in; i++) x[i] = fabsf(x[i]) + 1.0f;
            for (int o = 0; o < n_out; o++) {
                kt_fill_row(wf, n_in, &s);
                if (sc == 4) for (int64_t i = 0; i < n_in; i++) wf[i] = -INFINITY;
                kz_quant_row(t, wf, data + (size_t)o * rb, n_in);
            }
            kz_wmat W = { .type = t, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .data = data };
            matmul1(NULL, &W, x, 1, ref, n_out, work);
            const int m0 = kz_argmax(ref, n_out);
            if (sc == 1) { /* the maximum's row also early and late: outputs tie, the first wins */
                memcpy(data + (size_t)(m0 / 3) * rb, data + (size_t)m0 * rb, rb);
                memcpy(data + (size_t)(m0 + (n_out - m0) / 2) * rb, data + (size_t)m0 * rb, rb);
            } else if (sc == 2) { /* NaN rows: early ones and the old maximum */
                for (int o = 0; o <= m0; o += 1 + m0 / 7) {
                    if (t == KZ_T_F32) { const float nan = NAN; memcpy(data + (size_t)o * rb, &nan, 4); }
                    else { const uint16_t h = 0x7e00; memcpy(data + (size_t)o * rb, &h, 2); }
                }
                if (t == KZ_T_F32) { const float nan = NAN; memcpy(data + (size_t)m0 * rb, &nan, 4); }
                else { const uint16_t h = 0x7e00; memcpy(data + (size_t)m0 * rb, &h, 2); }
            } else if (sc == 3) { /* two rows of +inf (F32: an infinite weight; else an infinite scale) */
                for (int k = 0; k < 2; k++) {
                    const int o = k ? n_out - 2 : n_out / 2 + 1;
                    if (t == KZ_T_F32) {
                        for (int64_t i = 0; i < n_in; i++) wf[i] = x[i] > 0 ? INFINITY : -INFINITY;
                        memcpy(data + (size_t)o * rb, wf, rb);
                    } else {
                        kz_quant_row(t, x, data + (size_t)o * rb, n_in); /* q . x > 0 */
                        const uint16_t h = 0x7c00;
                        for (int64_t b = 0; b < n_in / 32; b++) memcpy(data + (size_t)o * rb + (size_t)b * kz_row_bytes(t, 32), &h, 2);
                    }
                }
            }
            free(pk);
            pk = pack_all_but_tail(&W);
            matmul1(NULL, &W, x, 1, ref, n_out, work);
            const int want = kz_argmax(ref, n_out);
            if (sc == 1) CHECKF(want == m0 / 3, "argmax setup: tie expected at %d, got %d", m0 / 3, want);
            if (sc == 4) CHECKF(ref[0] == -INFINITY && want == 0, "argmax setup: -inf rows (%g, %d)", ref[0], want);
            for (int pi = -1; pi < 3; pi++) {
                for (int o = 0; o < n_out; o++) y[o] = -12345.0f;
                int64_t got = -1;
                kz_matmul(pi < 0 ? NULL : pools[pi],
                          &(kz_mm){.w = {&W}, .nw = 1, .x = x, .n_tok = 1, .y = {y}, .argmax = &got, .work = work});
                CHECKF(memcmp(y, ref, sizeof(float) * n_out) == 0, "matmul_argmax type %u case %d threads %d: outputs differ from kz_matmul", t, sc, pi + 2);
                CHECKF(got == want, "matmul_argmax type %u case %d threads %d: index %lld, kz_argmax %d", t, sc, pi + 2, (long long)got, want);
                n_cases++;
            }
        }
        free(data); free(pk); free(ref); free(y); free(work);
    }
    free(x); free(wf);
    printf("  matmul_argmax: %d (type, case, threads) cases equal to kz_matmul + kz_argmax\n", n_cases);
    for (int i = 0; i < 3; i++) kz_pool_free(pools[i]);
}

/* kz_matmul with swiglu: the same outputs as kz_swiglu in place then kz_matmul, bit for bit, for
 * 1..4 threads; activation types Q8_0 (Q4_0 packed + tail, Q8_0 rows), Q8_K (Q4_K), F16 and
 * F32 (no conversion: SwiGLU first), rows whose length is not a multiple of the conversion
 * chunk (800 = 3 x 256 + 32; F32 801, a scalar tail) */
static void test_matmul_swiglu(void) {
    static const uint32_t T[] = { KZ_T_Q4_0, KZ_T_Q8_0, KZ_T_Q4_K, KZ_T_F16, KZ_T_F32 };
    static const int NIN[] = { 800, 800, 768, 800, 801 };
    kz_pool *pools[3] = { kz_pool_new(2), kz_pool_new(3), kz_pool_new(4) };
    CHECK(pools[0] && pools[1] && pools[2]);
    unsigned long long s = 99;
    int n_cases = 0;
    for (int ti = 0; ti < 5; ti++) {
        const uint32_t t = T[ti];
        const int64_t n_in = NIN[ti], n_out = 1061;
        float *wf = malloc(sizeof(float) * n_in), *g = malloc(sizeof(float) * n_in), *u = malloc(sizeof(float) * n_in);
        float *x = malloc(sizeof(float) * n_in), *ref = malloc(sizeof(float) * n_out), *y = malloc(sizeof(float) * n_out);
        kz_wmat W;
        uint8_t *data = random_wmat(&W, t, n_in, n_out, wf, &s), *pk = pack_all_but_tail(&W);
        void *work = malloc(matmul1_work(&W, 1) + 1);
        kt_fill_row(g, n_in, &s);
        kt_fill_row(u, n_in, &s);
        memcpy(x, g, sizeof(float) * n_in);
        kz_swiglu(x, u, (int)n_in);
        matmul1(NULL, &W, x, 1, ref, n_out, work);
        for (int pi = -1; pi < 3; pi++) {
            float *gc = malloc(sizeof(float) * n_in);
            memcpy(gc, g, sizeof(float) * n_in);
            for (int o = 0; o < n_out; o++) y[o] = -12345.0f;
            kz_matmul(pi < 0 ? NULL : pools[pi],
                      &(kz_mm){.w = {&W}, .nw = 1, .n_tok = 1, .swiglu = {gc, u}, .y = {y}, .work = work});
            CHECKF(memcmp(y, ref, sizeof(float) * n_out) == 0, "matmul_swiglu type %u threads %d: outputs differ from kz_swiglu + kz_matmul", t, pi + 2);
            free(gc);
            n_cases++;
        }
        free(data); free(pk); free(wf); free(g); free(u); free(x); free(ref); free(y); free(work);
    }
    printf("  matmul_swiglu: %d (type, threads) cases equal to kz_swiglu + kz_matmul\n", n_cases);
    for (int i = 0; i < 3; i++) kz_pool_free(pools[i]);
}

/* kz_matmul with pre: the pre step writes X (here: copies it in from another row) and every
 * thread reads it only after (the others prefetch meanwhile): outputs equal kz_matmul on the
 * final X for 1..4 threads, for a group that converts X (Q4_0 packed + F32) and one that does
 * not (F32 only: pre runs first), and argmax with a pre step */
typedef struct {
    float *x;
    const float *src;
    int64_t n;
    int calls;
} pre_copy;
static void pre_copy_fn(void *arg) {
    pre_copy *p = arg;
    /* slow on purpose (~0.1 ms): a thread that read X before the step ends would see NaN */
    volatile double sink = 0;
    for (int k = 0; k < 200000; k++) sink = sink + 1e-9 * k;
    memcpy(p->x, p->src, sizeof(float) * p->n);
    p->calls++;
}
static void test_matmul_pre(void) {
    const int64_t n_in = 800;
    kz_pool *pools[3] = { kz_pool_new(2), kz_pool_new(3), kz_pool_new(4) };
    CHECK(pools[0] && pools[1] && pools[2]);
    unsigned long long s = 31337;
    static const uint32_t GT[2][2] = { { KZ_T_Q4_0, KZ_T_F32 }, { KZ_T_F32, KZ_T_F32 } };
    static const int NOUT[2] = { 2085, 77 };
    int n_cases = 0;
    float *wf = malloc(sizeof(float) * n_in), *src = malloc(sizeof(float) * n_in), *x = malloc(sizeof(float) * n_in);
    kt_fill_row(src, n_in, &s);
    for (int g = 0; g < 2; g++) {
        kz_wmat W[2];
        const kz_wmat *wp[2];
        uint8_t *data[2], *pk = NULL;
        float *ref[2], *y[2];
        for (int i = 0; i < 2; i++) {
            data[i] = random_wmat(&W[i], GT[g][i], n_in, NOUT[(i + g) % 2], wf, &s);
            if (W[i].type == KZ_T_Q4_0) pk = pack_all_but_tail(&W[i]);
            wp[i] = &W[i];
            ref[i] = malloc(sizeof(float) * W[i].n_out);
            y[i] = malloc(sizeof(float) * W[i].n_out);
        }
        void *work = malloc(kz_matmul_work_bytes(&(kz_mm){.w = {wp[0], wp[1]}, .nw = 2, .n_tok = 1}) + 64 + (size_t)n_in);
        for (int i = 0; i < 2; i++) matmul1(NULL, &W[i], src, 1, ref[i], W[i].n_out, work);
        for (int pi = -1; pi < 3; pi++) {
            for (int64_t e = 0; e < n_in; e++) x[e] = NAN; /* read before pre: NaN outputs */
            pre_copy pc = { x, src, n_in, 0 };
            const kz_mm_pre pre = { pre_copy_fn, &pc };
            for (int i = 0; i < 2; i++)
                for (int64_t o = 0; o < W[i].n_out; o++) y[i][o] = -12345.0f;
            kz_matmul(pi < 0 ? NULL : pools[pi],
                      &(kz_mm){.w = {wp[0], wp[1]}, .nw = 2, .x = x, .n_tok = 1, .y = {y[0], y[1]}, .pre = &pre, .work = work});
            int bad = 0;
            for (int i = 0; i < 2; i++) bad += memcmp(y[i], ref[i], sizeof(float) * W[i].n_out) != 0;
            CHECKF(bad == 0 && pc.calls == 1, "matmul_multi_pre group %d threads %d: %d outputs differ, pre ran %d times", g, pi + 2, bad, pc.calls);
            /* the argmax entry with a pre step, on the first matrix */
            for (int64_t e = 0; e < n_in; e++) x[e] = NAN;
            pc.calls = 0;
            int64_t a = -1;
            kz_matmul(pi < 0 ? NULL : pools[pi], &(kz_mm){.w = {&W[0]}, .nw = 1, .x = x, .n_tok = 1, .y = {y[0]}, .pre = &pre,
                                                          .argmax = &a, .work = work});
            CHECKF(pc.calls == 1 && memcmp(y[0], ref[0], sizeof(float) * W[0].n_out) == 0 && a == kz_argmax(ref[0], (int)W[0].n_out),
                   "matmul_argmax with pre, group %d threads %d", g, pi + 2);
            n_cases++;
        }
        for (int i = 0; i < 2; i++) { free(data[i]); free(ref[i]); free(y[i]); }
        free(pk); free(work);
    }
    free(wf); free(src); free(x);
    printf("  matmul_multi_pre: %d (group, threads) cases equal to kz_matmul after the pre step\n", n_cases);
    for (int i = 0; i < 3; i++) kz_pool_free(pools[i]);
}

int main(void) {
    test_fp16();
    test_known();
    test_q4_fma();
    test_roundtrip();
    test_vec_dot();
    test_matmul();
    test_matmul_q4_0_16x4();
    test_q4_0_16x4_kernels();
    test_matmul_multi();
    test_matmul_argmax();
    test_matmul_swiglu();
    test_matmul_pre();
    KT_END();
}
