/* Thin GEMMs (a speculative verify's 2-4 token batches): every token's row of a multi-token
 * product must equal, bit for bit, the one-token product of that token (the decode GEMV), so
 * speculative greedy decoding gives plain decoding's logits exactly. Checked on random data of
 * odd sizes, for n_tok = 1..5, against:
 *  - the level's own gemm called with one token, its vec_dot, and (integer types) the scalar
 *    reference dot, for every weight type and every ISA level this CPU runs;
 *  - the q4_0_16x4 packed kernels (x86: both AVX-512 entries and the one-token GEMV with its
 *    precomputed block terms; ARM: dotprod's) against the scalar dot;
 *  - kz_matmul (the routing: packed rows plus a plain tail, several matrices on one X, 1 and 2
 *    threads) against kz_matmul of each token alone.
 * KZ_TEST_SMALL=1 (qemu) drops the longest rows; sizes stay odd. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"
#include "matmul/kernels.h"
#include "matmul/matmul.h"
#include "matmul/quant.h"
#include "model/types.h"
#include "sys/cpu.h"
#include "sys/fp16.h"
#include "sys/threadpool.h"

static const uint32_t TYPES[] = {KZ_T_F32,  KZ_T_F16,  KZ_T_BF16, KZ_T_Q8_0, KZ_T_Q4_0, KZ_T_Q4_1,
                                 KZ_T_Q5_0, KZ_T_Q5_1, KZ_T_IQ4_NL, KZ_T_Q4_K, KZ_T_Q5_K, KZ_T_Q6_K,
                                 KZ_T_Q2_K, KZ_T_Q3_K, KZ_T_IQ4_XS};
#define NTYPES (int)(sizeof TYPES / sizeof TYPES[0])
#define NT_MAX 5

static int small;

static int is_float(uint32_t t) { return t == KZ_T_F32 || t == KZ_T_F16 || t == KZ_T_BF16; }

/* rows of random floats (per-row magnitudes, outliers) quantised by the scalar reference */
static void make_rows(uint32_t t, int64_t n, int rows, size_t stride, uint8_t *dst, unsigned long long *s) {
    const kz_qtraits *sc = kz_qtraits_get_isa(KZ_ISA_SCALAR, t);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < rows; r++) {
        kt_fill_row(x, n, s);
        sc->quant(x, dst + (size_t)r * stride, n);
    }
    free(x);
}

/* 1. every level's gemm: token rows of an nt-token call == the one-token call == vec_dot */
static void test_levels(void) {
    static const int NR[] = {1, 7, 37};
    unsigned long long s = 4242;
    for (int isa = 0; isa < KZ_ISA_COUNT; isa++) {
        if (!kz_isa_available((kz_isa)isa)) continue;
        for (int ti = 0; ti < NTYPES; ti++) {
            const uint32_t t = TYPES[ti];
            const kz_qtraits *V = kz_qtraits_get_isa(isa, t), *S = kz_qtraits_get_isa(KZ_ISA_SCALAR, t);
            CHECK(V && S && V->gemm && V->vec_dot);
            if (!V || !S || !V->gemm) continue;
            const uint32_t at = V->act_type;
            const int64_t blk = V->blck;
            /* odd block counts; the float types also lengths off the vector width */
            const int64_t NS[3] = {is_float(t) ? 13 : blk * 3, is_float(t) ? 229 : blk * (blk == 256 ? 5 : 37),
                                   is_float(t) ? 1029 : blk * (blk == 256 ? 11 : 261)};
            int bad = 0, cases = 0;
            for (int ni = 0; ni < (small ? 2 : 3); ni++)
                for (int ri = 0; ri < 3; ri++) {
                    const int64_t n = NS[ni];
                    const int nr = NR[ri];
                    const size_t wb = kz_row_bytes(t, n) + 3, ab = kz_row_bytes(at, n) + 5; /* odd strides */
                    uint8_t *w = malloc(wb * (size_t)nr), *a = malloc(ab * NT_MAX);
                    make_rows(t, n, nr, wb, w, &s);
                    make_rows(at, n, NT_MAX, ab, a, &s);
                    const int64_t ldy = nr + 2;
                    float *y = malloc(sizeof(float) * (size_t)ldy * NT_MAX), *y1 = malloc(sizeof(float) * (size_t)nr);
                    for (int nt = 1; nt <= NT_MAX; nt++) {
                        for (int64_t i = 0; i < ldy * nt; i++) y[i] = -777.0f;
                        V->gemm(n, w, wb, nr, a, ab, nt, y, ldy);
                        for (int k = 0; k < nt; k++) {
                            V->gemm(n, w, wb, nr, a + (size_t)k * ab, ab, 1, y1, nr);
                            for (int r = 0; r < nr; r++) {
                                const uint8_t *wr = w + (size_t)r * wb, *ar = a + (size_t)k * ab;
                                const float got = y[k * ldy + r], dot = V->vec_dot(wr, ar, n);
                                int ok = !memcmp(&got, &y1[r], 4) && !memcmp(&got, &dot, 4);
                                if (!is_float(t)) {
                                    const float ref = S->vec_dot(wr, ar, n);
                                    ok = ok && !memcmp(&got, &ref, 4);
                                }
                                bad += !ok;
                            }
                            for (int64_t r = nr; r < ldy; r++) bad += y[k * ldy + r] != -777.0f;
                        }
                        cases++;
                    }
                    free(w), free(a), free(y), free(y1);
                }
            CHECKF(bad == 0, "%s %s: %d token rows differ from the one-token gemm / vec_dot / scalar",
                   kz_isa_name((kz_isa)isa), kz_type_get(t)->name, bad);
            printf("  %-7s %-6s: n_tok 1..%d rows == one-token gemm == vec_dot%s over %d cases\n",
                   kz_isa_name((kz_isa)isa), kz_type_get(t)->name, NT_MAX, is_float(t) ? "" : " == scalar", cases);
        }
    }
}

/* Q4_0 rows with finite scales of both signs and random nibbles */
static void make_q4_0(int64_t nb, int nr, uint8_t *w, unsigned long long *s) {
    for (size_t i = 0; i < (size_t)nb * 18 * nr; i++) w[i] = (uint8_t)kt_rng(s);
    for (int64_t b = 0; b < nb * nr; b++) {
        const uint16_t h = kz_f32_to_fp16(kt_randf(s) * 2.0f);
        memcpy(w + b * 18, &h, 2);
    }
}

/* 2. the packed kernels: thin calls against the scalar dot (and the one-token GEMV) */
static void test_packed(void) {
    static const int64_t NB[] = {3, 37, 1029}; /* 1029: past the x86 GEMV's 1024-block sweep */
    static const int NR[] = {16, 48, 80};
    const kz_qtraits *sc = kz_qtraits_get_isa(KZ_ISA_SCALAR, KZ_T_Q4_0);
    kz_gemm_q4_0_16x4_fn fns[KZ_ISA_COUNT + 2];
    int n_fn = 0;
    for (int isa = 0; isa < KZ_ISA_COUNT; isa++)
        if (kz_gemm_q4_0_16x4_get_isa(isa)) fns[n_fn++] = kz_gemm_q4_0_16x4_get_isa(isa);
#if defined(__x86_64__)
    if (kz_isa_available(KZ_ISA_AVX512)) { /* both prefetch choices (the dispatch picks one by vendor) */
        fns[n_fn++] = kz_avx512_gemm_q4_0_16x4;
        fns[n_fn++] = kz_avx512_gemm_q4_0_16x4_nopf;
    }
#endif
    unsigned long long s = 515;
    int cases = 0, bad = 0, thin_cases = 0;
    for (int fi = 0; fi < n_fn; fi++)
        for (int bi = 0; bi < (small ? 2 : 3); bi++)
            for (int ri = 0; ri < 3; ri++) {
                const int64_t nb = NB[bi], n = nb * 32;
                const int nr = NR[ri];
                const size_t rb = (size_t)nb * 18, ab = (size_t)nb * 34 + 6;
                uint8_t *w = malloc(rb * nr), *pk = malloc((size_t)(nr / 16) * kz_q4_0_16x4_group_bytes(n));
                uint8_t *a = malloc(ab * NT_MAX);
                make_q4_0(nb, nr, w, &s);
                make_rows(KZ_T_Q8_0, n, NT_MAX, ab, a, &s);
                kz_repack_q4_0_16x4(w, rb, nr, n, pk);
                const int64_t ldy = nr + 3;
                float *y = malloc(sizeof(float) * (size_t)ldy * NT_MAX);
                for (int nt = 1; nt <= NT_MAX; nt++) {
                    for (int64_t i = 0; i < ldy * nt; i++) y[i] = -777.0f;
                    fns[fi](n, pk, nr, a, ab, nt, y, ldy);
                    for (int k = 0; k < nt; k++) {
                        for (int r = 0; r < nr; r++) {
                            const float want = sc->vec_dot(w + r * rb, a + k * ab, n);
                            bad += memcmp(&want, &y[k * ldy + r], 4) != 0;
                        }
                        for (int64_t r = nr; r < ldy; r++) bad += y[k * ldy + r] != -777.0f;
                    }
                    cases++;
                }
                /* the decode GEMV (precomputed terms) gives the same rows as the thin calls */
                const kz_gemv_q4_0_16x4 gv = kz_gemv_q4_0_16x4_get_isa((int)kz_isa_active());
                if (gv.gemv) {
                    int32_t *aux = malloc(sizeof(int32_t) * (size_t)nb);
                    float *y1 = malloc(sizeof(float) * (size_t)nr);
                    fns[fi](n, pk, nr, a, ab, 4, y, ldy);
                    for (int k = 0; k < 4; k++) {
                        gv.prep(a + k * ab, n, aux);
                        gv.gemv(n, pk, nr, a + k * ab, aux, y1);
                        bad += memcmp(y1, y + k * ldy, sizeof(float) * (size_t)nr) != 0;
                    }
                    free(aux), free(y1);
                }
                /* the thin gemm with every token's terms precomputed: the same rows */
                if (gv.thin) {
                    int32_t *aux = malloc(sizeof(int32_t) * (size_t)nb * NT_MAX);
                    float *y2 = malloc(sizeof(float) * (size_t)ldy * NT_MAX);
                    for (int k = 0; k < NT_MAX; k++) gv.prep(a + k * ab, n, aux + (size_t)k * (size_t)nb);
                    for (int nt = 2; nt <= 4 && nt <= NT_MAX; nt++) {
                        fns[fi](n, pk, nr, a, ab, nt, y, ldy);
                        for (int64_t i = 0; i < ldy * nt; i++) y2[i] = -777.0f;
                        gv.thin(n, pk, nr, a, ab, nt, aux, y2, ldy);
                        for (int k = 0; k < nt; k++) {
                            bad += memcmp(y2 + k * ldy, y + k * ldy, sizeof(float) * (size_t)nr) != 0;
                            for (int64_t r = nr; r < ldy; r++) bad += y2[k * ldy + r] != -777.0f;
                        }
                        thin_cases++;
                    }
                    free(aux), free(y2);
                }
                free(w), free(pk), free(a), free(y);
            }
    CHECKF(bad == 0, "packed q4_0_16x4: %d rows differ from the scalar dot / the one-token GEMV", bad);
    printf("  packed q4_0_16x4: %d kernels, n_tok 1..%d == scalar dot (and the decode GEMV) over %d cases, "
           "%d thin calls with precomputed terms\n", n_fn, NT_MAX, cases, thin_cases);
}

/* 3. kz_matmul: n_tok rows == each token alone, through the dispatch (packed + plain rows) */
static void test_matmul(void) {
    static const uint32_t MT[] = {KZ_T_Q4_0, KZ_T_Q8_0, KZ_T_Q4_K, KZ_T_Q6_K, KZ_T_F32};
    unsigned long long s = 99;
    int bad = 0, cases = 0;
    for (int nth = 1; nth <= 2; nth++) {
        kz_pool *pool = kz_pool_new(nth);
        CHECK(pool != NULL);
        if (!pool) continue;
        for (size_t mi = 0; mi < sizeof MT / sizeof MT[0]; mi++) {
            const uint32_t t = MT[mi];
            const int64_t n_in = t == KZ_T_Q4_K || t == KZ_T_Q6_K ? 256 * 5 : 32 * 37;
            const int64_t n_out[2] = {16 * 9 + 5, 53}; /* two matrices on one X; the first has a plain tail */
            const size_t rb = kz_row_bytes(t, n_in);
            uint8_t *wd[2], *pk = NULL;
            kz_wmat wm[2];
            for (int i = 0; i < 2; i++) {
                wd[i] = malloc(rb * (size_t)n_out[i]);
                if (t == KZ_T_Q4_0) make_q4_0(n_in / 32, (int)n_out[i], wd[i], &s);
                else make_rows(t, n_in, (int)n_out[i], rb, wd[i], &s);
                wm[i] = (kz_wmat){.type = t, .n_in = n_in, .n_out = n_out[i], .row_bytes = rb, .data = wd[i]};
            }
            if (t == KZ_T_Q4_0 && kz_q4_0_16x4_supported()) {
                const int64_t np = n_out[0] - n_out[0] % 16;
                pk = malloc((size_t)(np / 16) * kz_q4_0_16x4_group_bytes(n_in));
                kz_repack_q4_0_16x4(wd[0], rb, np, n_in, pk);
                wm[0].q4_0_16x4 = pk;
                wm[0].n_q4_0_16x4 = np;
            }
            float *x = malloc(sizeof(float) * (size_t)n_in * NT_MAX);
            for (int k = 0; k < NT_MAX; k++) kt_fill_row(x + k * n_in, n_in, &s);
            float *y[2], *y1[2];
            for (int i = 0; i < 2; i++) {
                y[i] = malloc(sizeof(float) * (size_t)n_out[i] * NT_MAX);
                y1[i] = malloc(sizeof(float) * (size_t)n_out[i]);
            }
            kz_mm q = {.w = {&wm[0], &wm[1]}, .nw = 2, .n_tok = NT_MAX};
            void *work = malloc(kz_matmul_work_bytes(&q) + 64);
            for (int nt = 1; nt <= NT_MAX; nt++) {
                kz_matmul(pool, &(kz_mm){.w = {&wm[0], &wm[1]}, .nw = 2, .x = x, .n_tok = nt, .y = {y[0], y[1]},
                                         .work = work});
                for (int k = 0; k < nt; k++) {
                    kz_matmul(pool, &(kz_mm){.w = {&wm[0], &wm[1]}, .nw = 2, .x = x + k * n_in, .n_tok = 1,
                                             .y = {y1[0], y1[1]}, .work = work});
                    for (int i = 0; i < 2; i++)
                        bad += memcmp(y1[i], y[i] + k * n_out[i], sizeof(float) * (size_t)n_out[i]) != 0;
                }
                cases++;
            }
            free(work), free(x), free(pk);
            for (int i = 0; i < 2; i++) free(wd[i]), free(y[i]), free(y1[i]);
        }
        kz_pool_free(pool);
    }
    CHECKF(bad == 0, "kz_matmul: %d token rows differ from the one-token product", bad);
    printf("  kz_matmul (%s): n_tok 1..%d rows == one-token products over %d cases\n",
           kz_isa_name(kz_isa_active()), NT_MAX, cases);
}

int main(void) {
    small = getenv("KZ_TEST_SMALL") && atoi(getenv("KZ_TEST_SMALL"));
    test_levels();
    test_packed();
    test_matmul();
    KT_END();
}
