/* Tiled prefill attention (kz_attn_tile) against a double-precision causal softmax over the
 * same cached rows (read back with kz_kv_row_get), for f32 / f16 / q8_0 caches, GQA groups,
 * query blocks that start anywhere (pos0 > 0, several K/V blocks, partial last block) and
 * scores large enough that the running max has to move. Also: the forward pass with tiled
 * attention (batches >= 16) agrees with token-by-token decode. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "nn/attention.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "forward/seq.h"
#include "model/types.h"

static unsigned long long rs = 0x1234567887654321ull;

static void check_tile(int type, int H, int Hkv, int hd, int pos0, int nt, float qamp) {
    const int n_ctx = pos0 + nt + 3, n_rep = H / Hkv;
    kz_kv_layer kv = {H, Hkv, hd, n_ctx, type, NULL, NULL, NULL};
    const size_t rb = kz_kv_row_bytes(&kv);
    kv.k = malloc((size_t)Hkv * n_ctx * rb);
    kv.v = malloc((size_t)Hkv * n_ctx * rb);
    float *kr = malloc((size_t)Hkv * hd * sizeof(float)), *vr = malloc((size_t)Hkv * hd * sizeof(float));
    for (int p = 0; p < pos0 + nt; p++) {
        for (int i = 0; i < Hkv * hd; i++) { kr[i] = kt_randf(&rs); vr[i] = kt_randf(&rs) * 2.0f; }
        kz_kv_store(&kv, p, kr, vr);
    }
    /* q: token t head h at q + t*ldq + h*qh (qh > hd: gated layout with a gap) */
    const int qh = hd + 5;
    const size_t ldq = (size_t)H * qh + 3, ldo = (size_t)H * hd + 1;
    float *q = malloc((size_t)nt * ldq * sizeof(float)), *out = malloc((size_t)nt * ldo * sizeof(float));
    for (size_t i = 0; i < (size_t)nt * ldq; i++) q[i] = kt_randf(&rs) * qamp;
    for (size_t i = 0; i < (size_t)nt * ldo; i++) out[i] = NAN;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scr = malloc(kz_attn_tile_scratch_floats(&kv, nt) * sizeof(float));
    for (int g = 0; g < Hkv; g++)
        kz_attn_tile(&kv, g, pos0, nt, q + (size_t)g * n_rep * qh, ldq, (size_t)qh, scale,
                     out + (size_t)g * n_rep * hd, ldo, scr);
    /* reference */
    double worst = 0;
    float *row = malloc((size_t)hd * sizeof(float));
    double *sc = malloc((size_t)(pos0 + nt) * sizeof(double)), *o = malloc((size_t)hd * sizeof(double));
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < H; h++) {
            const int g = h / n_rep, n = pos0 + t + 1;
            const float *qq = q + (size_t)t * ldq + (size_t)h * qh;
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < n; p++) {
                kz_kv_row_get(&kv, 0, g, p, row);
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)qq[i] * row[i];
                sc[p] = d * scale;
                if (sc[p] > mx) mx = sc[p];
            }
            memset(o, 0, (size_t)hd * sizeof(double));
            for (int p = 0; p < n; p++) {
                const double w = exp(sc[p] - mx);
                sum += w;
                kz_kv_row_get(&kv, 1, g, p, row);
                for (int i = 0; i < hd; i++) o[i] += w * row[i];
            }
            double e = 0, m = 0;
            const float *got = out + (size_t)t * ldo + (size_t)h * hd;
            for (int i = 0; i < hd; i++) {
                const double r = o[i] / sum;
                e = fmax(e, isnan(got[i]) ? INFINITY : fabs(got[i] - r));
                m = fmax(m, fabs(r));
            }
            worst = fmax(worst, e / m);
        }
    CHECKF(worst < 2e-5, "tile type %d H %d Hkv %d hd %d pos0 %d nt %d amp %g: rel %g", type, H, Hkv, hd, pos0, nt,
           qamp, worst);
    printf("  tile type %d H %2d Hkv %d hd %3d pos0 %3d nt %2d q amp %4.1f: max rel %.2e\n", type, H, Hkv, hd, pos0,
           nt, qamp, worst);
    free(kv.k); free(kv.v); free(kr); free(vr); free(q); free(out); free(scr); free(row); free(sc); free(o);
}

/* forward pass: one 40-token batch (tiled attention) vs 40 single-token steps */
static void check_forward(const char *preset) {
    char path[64], err[256];
    snprintf(path, sizeof path, "/tmp/kz_tile_%d.gguf", (int)getpid());
    kz_mkmodel_cfg c;
    kz_mkmodel_preset(preset, &c);
    c.wtype = KZ_T_F32;
    c.n_threads = 1;
    CHECK(kz_mkmodel_write(&c, path, err, sizeof err) == 0);
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    CHECK(m != NULL);
    if (!m) return;
    const int n = 100, nv = kz_model_n_vocab(m);
    int32_t toks[100];
    for (int i = 0; i < n; i++) toks[i] = (i * 37 + 5) % nv;
    float *a = malloc((size_t)n * nv * sizeof(float)), *b = malloc((size_t)n * nv * sizeof(float));
    kz_seq *s1 = kz_seq_new(m, 128, 40, 2, KZ_KV_F32, err, sizeof err), *s2 = kz_seq_new(m, 128, 1, 2, KZ_KV_F32, err, sizeof err);
    CHECK(s1 && s2);
    CHECK(kz_forward(m, s1, toks, n, a, 1, err, sizeof err) == 0); /* batches of 40, 40, 20 */
    for (int i = 0; i < n; i++) CHECK(kz_forward(m, s2, toks + i, 1, b + (size_t)i * nv, 0, err, sizeof err) == 0);
    double d = 0, r = 0;
    for (size_t i = 0; i < (size_t)n * nv; i++) { d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); r += (double)b[i] * b[i]; }
    CHECKF(sqrt(d / r) < 1e-5, "%s: batched vs token-by-token rel %g", preset, sqrt(d / r));
    printf("  %s: 100 tokens in batches of 40 vs one by one: rel %.2e\n", preset, sqrt(d / r));
    kz_seq_free(s1); kz_seq_free(s2);
    free(a); free(b);
    kz_model_free(m);
    remove(path);
}

int main(void) {
    check_tile(0, 4, 2, 24, 0, 16, 1.0f);   /* first block only, hd not a multiple of 8 */
    check_tile(0, 6, 2, 40, 70, 16, 1.0f);  /* starts inside block 1, 3 heads per group */
    check_tile(0, 8, 1, 32, 129, 13, 8.0f); /* MQA, peaked scores: the max moves between blocks */
    check_tile(0, 2, 2, 64, 200, 16, 30.0f);/* very peaked */
    check_tile(1, 8, 2, 64, 63, 16, 2.0f);  /* f16 cache */
    check_tile(2, 4, 2, 64, 150, 7, 2.0f);  /* q8_0 cache */
    check_tile(2, 16, 4, 256, 64, 16, 1.0f);/* 4B-like head */
    check_forward("qwen35-tiny");
    check_forward("qwen3-tiny");
    KT_END();
}
