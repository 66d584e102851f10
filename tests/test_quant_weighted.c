/* kz_quant_row_w (the weighted quantizers) on random rows: without importance it is the reference
 * quantizer (kz_quant_row) row by row; with importance it lowers the importance-weighted error
 * against the unweighted quantizer on rows whose columns differ in importance, its output
 * dequantizes close to the input, it is deterministic, rows are independent (quantising rows one
 * by one gives the same bytes), and bad sizes are refused. Bytes vs llama.cpp: tests/py. */
#include <stdint.h>

#include "kt.h"
#include "matmul/quant.h"
#include "model/types.h"

static const uint32_t TYPES[] = {KZ_T_Q4_0, KZ_T_Q4_1, KZ_T_Q5_0, KZ_T_Q5_1, KZ_T_Q8_0, KZ_T_IQ4_NL,
                                 KZ_T_IQ4_XS, KZ_T_Q2_K, KZ_T_Q3_K, KZ_T_Q4_K, KZ_T_Q5_K, KZ_T_Q6_K};

static double werr(uint32_t t, const uint8_t *q, const float *x, const float *imp, int64_t npr, int64_t nrow) {
    float *d = malloc(sizeof(float) * (size_t)npr);
    const size_t rb = kz_row_bytes(t, npr);
    double e = 0;
    for (int64_t r = 0; r < nrow; r++) {
        kz_dequant_row(t, q + rb * (size_t)r, d, npr);
        for (int64_t j = 0; j < npr; j++) {
            const double df = (double)d[j] - x[r * npr + j];
            e += (imp ? imp[j] : 1.0) * df * df;
        }
    }
    free(d);
    return e;
}

int main(void) {
    unsigned long long s = 0x9e3779b97f4a7c15ull;
    const int64_t npr = 512, nrow = 7;
    float *x = malloc(sizeof(float) * (size_t)(npr * nrow)), *imp = malloc(sizeof(float) * (size_t)npr);
    for (int64_t r = 0; r < nrow; r++) kt_fill_row(x + r * npr, npr, &s);
    /* importance spanning four decades, so that a weighted fit has something to trade */
    for (int64_t j = 0; j < npr; j++) imp[j] = powf(10.0f, 2.0f * kt_randf(&s)) + 1e-3f;
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        const uint32_t t = TYPES[k];
        const char *nm = kz_type_get(t)->name;
        const size_t rb = kz_row_bytes(t, npr), n = rb * (size_t)nrow;
        uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
        /* no importance: the reference quantizer */
        CHECKF(kz_quant_row_w(t, x, a, npr, nrow, NULL) == n, "%s", nm);
        for (int64_t r = 0; r < nrow; r++) kz_quant_row(t, x + r * npr, b + rb * (size_t)r, npr);
        CHECKF(memcmp(a, b, n) == 0, "%s: unweighted path differs from kz_quant_row", nm);
        /* with importance: deterministic, rows independent */
        CHECKF(kz_quant_row_w(t, x, b, npr, nrow, imp) == n, "%s", nm);
        for (int64_t r = 0; r < nrow; r++) kz_quant_row_w(t, x + r * npr, c + rb * (size_t)r, npr, 1, imp);
        CHECKF(memcmp(b, c, n) == 0, "%s: row-by-row result differs", nm);
        const double ew = werr(t, b, x, imp, npr, nrow), eu = werr(t, a, x, imp, npr, nrow);
        const double e2 = werr(t, b, x, NULL, npr, nrow);
        double x2 = 0;
        for (int64_t i = 0; i < npr * nrow; i++) x2 += (double)x[i] * x[i];
        if (t == KZ_T_Q8_0) CHECKF(memcmp(a, b, n) == 0, "Q8_0 ignores the importance");
        else CHECKF(ew < eu, "%s: weighted error %.4g not below unweighted %.4g", nm, ew, eu);
        CHECKF(e2 < 0.2 * x2, "%s: relative error %.3g", nm, e2 / x2);
        free(a);
        free(b);
        free(c);
    }
    /* bad sizes: not a whole number of blocks, unsupported type */
    uint8_t buf[4096];
    CHECK(kz_quant_row_w(KZ_T_Q4_K, x, buf, 300, 1, imp) == 0);
    CHECK(kz_quant_row_w(KZ_T_Q4_0, x, buf, 33, 1, imp) == 0);
    CHECK(kz_quant_row_w(KZ_T_IQ2_XXS, x, buf, 256, 1, imp) == 0);
    CHECK(kz_quant_row_w(KZ_T_Q4_0, x, buf, 64, 0, imp) == 0);
    free(x);
    free(imp);
    KT_END();
}
