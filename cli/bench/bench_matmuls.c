/* kazeia bench --matmuls R: the matrix products of one decode step alone, against the read
 * bandwidth measured right before and right after them.
 *
 * Why: a decode step's time is its matrix products (streaming the weights) plus everything else
 * (attention over the cache, the GDN delta rule with its recurrent state, conv, norms). The
 * full-decode figure of `kazeia bench` mixes the two; this one isolates the first, so the
 * kernels and their dispatch can be judged against the roofline on their own. And this
 * machine's read bandwidth moves by 2x within seconds: each round's products are compared with
 * the mean of the two samples that enclose them (a few tens of ms apart), not with one figure
 * taken minutes earlier.
 *
 * A round: one sample, then every layer's products in decode order with the same calls as
 * forward.c (kz_matmul: the same groups, kernels, work split and thread pool size; one
 * token; the input is a fixed random vector, the outputs are discarded), then the LM head, then
 * the next sample. Reported per part and overall: the round's GB/s (weight bytes / time) as a %
 * of its two samples' mean; median and quartiles over rounds, and the medians over the rounds
 * whose samples lie in the upper and in the lower half of all samples (the two regimes of a
 * shared host). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/bench/bench_matmuls.h"
#include "cli/bench/bench_stats.h"
#include "cli/bench/membw.h"
#include "model/model.h"
#include "matmul/matmul.h"
#include "sys/threadpool.h"

enum { P_GDN_IN, P_GDN_OUT, P_ATTN_IN, P_ATTN_OUT, P_FFN_GU, P_FFN_DOWN, P_HEAD, P_COUNT };
static const char *const part_name[P_COUNT] = {
    "gdn in (qkv, z, b, a)", "gdn out", "attn in (q, k, v)", "attn out", "ffn gate + up", "ffn down", "lm head"};

typedef struct {
    kz_pool *pool;
    const float *x;
    float *const *y;
    void *work;
    double t[P_COUNT], bytes[P_COUNT];
} mm_run;

/* one dispatch of a decode step: the matrices forward.c passes to one kz_matmul call */
typedef struct {
    int part, n;
    const kz_wmat *w[KZ_MM_MAX];
} mm_group;

static void add_group(mm_group *g, int *ng, int part, const kz_wmat *a, const kz_wmat *b, const kz_wmat *c,
                      const kz_wmat *d) {
    const kz_wmat *in[4] = {a, b, c, d};
    mm_group *o = &g[*ng];
    o->part = part, o->n = 0;
    for (int i = 0; i < 4; i++)
        if (in[i] && in[i]->data) o->w[o->n++] = in[i]; /* absent matrices: the loader refused any it needs */
    if (o->n) (*ng)++;
}

/* layer il's dispatches in forward.c's order (il == n_layer: the LM head); returns their count */
static int layer_groups(const kz_model *m, int il, mm_group g[4]) {
    int ng = 0;
    if (il == m->hp.n_layer) {
        add_group(g, &ng, P_HEAD, &m->output, NULL, NULL, NULL);
        return ng;
    }
    const kz_layer *ly = &m->layers[il];
    if (ly->is_gdn) {
        add_group(g, &ng, P_GDN_IN, &ly->wqkv, &ly->wgate, &ly->wbeta, &ly->walpha);
        add_group(g, &ng, P_GDN_OUT, &ly->wssm_out, NULL, NULL, NULL);
    } else {
        add_group(g, &ng, P_ATTN_IN, &ly->wq, &ly->wk, &ly->wv, NULL);
        add_group(g, &ng, P_ATTN_OUT, &ly->wo, NULL, NULL, NULL);
    }
    add_group(g, &ng, P_FFN_GU, &ly->ffn_gate, &ly->ffn_up, NULL, NULL);
    add_group(g, &ng, P_FFN_DOWN, &ly->ffn_down, NULL, NULL, NULL);
    return ng;
}

/* one decode step's products */
static void step(const kz_model *m, mm_run *r) {
    for (int il = 0; il <= m->hp.n_layer; il++) {
        mm_group g[4];
        const int ng = layer_groups(m, il, g);
        for (int j = 0; j < ng; j++) {
            kz_mm a = {.nw = g[j].n, .x = r->x, .n_tok = 1, .work = r->work};
            for (int i = 0; i < g[j].n; i++) {
                a.w[i] = g[j].w[i];
                a.y[i] = r->y[i];
                r->bytes[g[j].part] += (double)g[j].w[i]->row_bytes * (double)g[j].w[i]->n_out;
            }
            const double t0 = kz_bench_now();
            kz_matmul(r->pool, &a);
            r->t[g[j].part] += kz_bench_now() - t0;
        }
    }
}

/* the largest n_in / n_out and work buffer over the dispatches step() makes */
static void sizes(const kz_model *m, int64_t *max_in, int64_t *max_out, size_t *work) {
    *max_in = *max_out = 1;
    *work = 1;
    for (int il = 0; il <= m->hp.n_layer; il++) {
        mm_group g[4];
        const int ng = layer_groups(m, il, g);
        for (int j = 0; j < ng; j++) {
            for (int i = 0; i < g[j].n; i++) {
                if (g[j].w[i]->n_in > *max_in) *max_in = g[j].w[i]->n_in;
                if (g[j].w[i]->n_out > *max_out) *max_out = g[j].w[i]->n_out;
            }
            kz_mm a = {.nw = g[j].n, .n_tok = 1};
            for (int i = 0; i < g[j].n; i++) a.w[i] = g[j].w[i];
            const size_t wb = kz_matmul_work_bytes(&a);
            if (wb > *work) *work = wb;
        }
    }
}

int kz_bench_matmuls(const kz_model *m, int threads, int rounds, size_t sample_mib, int json) {
    char err[256];
    int rc = 1;
    int64_t max_in, max_out;
    size_t work_bytes;
    sizes(m, &max_in, &max_out, &work_bytes);
    kz_pool *pool = kz_pool_new(threads);
    kz_membw *bw = kz_membw_open(threads, sample_mib, err, sizeof err);
    float *x = malloc((size_t)max_in * sizeof *x), *yb = malloc((size_t)KZ_MM_MAX * (size_t)max_out * sizeof *yb);
    void *work = malloc(work_bytes);
    double *ratio = calloc((size_t)rounds * (P_COUNT + 1), sizeof *ratio); /* [round][part | all] */
    double *samp = calloc((size_t)rounds, sizeof *samp), *allgbs = calloc((size_t)rounds, sizeof *allgbs);
    double *tmp = calloc((size_t)rounds + 2, sizeof *tmp), *sel = calloc((size_t)rounds, sizeof *sel);
    double part_bytes[P_COUNT] = {0};
    if (!bw) { fprintf(stderr, "kazeia bench: %s\n", err); goto out; }
    const char *loads = kz_membw_method(bw);
    if (!pool || !x || !yb || !work || !ratio || !samp || !allgbs || !tmp || !sel) {
        fprintf(stderr, "kazeia bench: out of memory\n");
        goto out;
    }
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < max_in; i++) { /* not zeros: fixed pseudo-random values in [-1, 1) */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
    }
    float *y[KZ_MM_MAX];
    for (int i = 0; i < KZ_MM_MAX; i++) y[i] = yb + (size_t)i * (size_t)max_out;
    double prev = -1;
    for (int r = -1; r < rounds; r++) { /* round -1: warm-up (page-in, caches, pool start) */
        const double b0 = prev >= 0 ? prev : kz_membw_pass(bw, err, sizeof err);
        if (b0 < 0) { fprintf(stderr, "kazeia bench: %s\n", err); goto out; }
        mm_run run = {pool, x, y, work, {0}, {0}};
        step(m, &run);
        const double b1 = kz_membw_pass(bw, err, sizeof err);
        if (b1 < 0) { fprintf(stderr, "kazeia bench: %s\n", err); goto out; }
        prev = b1;
        if (r < 0) continue;
        const double ref = 0.5 * (b0 + b1);
        double tb = 0, tt = 0;
        for (int p = 0; p < P_COUNT; p++) {
            tb += run.bytes[p], tt += run.t[p];
            part_bytes[p] = run.bytes[p];
            ratio[(size_t)r * (P_COUNT + 1) + p] = run.t[p] > 0 ? 100.0 * run.bytes[p] / run.t[p] / 1e9 / ref : 0;
        }
        allgbs[r] = tt > 0 ? tb / tt / 1e9 : 0;
        ratio[(size_t)r * (P_COUNT + 1) + P_COUNT] = allgbs[r] / ref * 100.0;
        samp[r] = ref;
    }
    /* column c of ratio over all rounds, or over the rounds whose samples are above (hi = 1) or
     * at/below (hi = 0) the median sample */
    const double smed = kz_quantile(samp, rounds, 0.5, tmp);
    double q[P_COUNT + 1][3], half[2][2]; /* quartiles per column; [lo/hi][median %, median GB/s] */
    for (int c = 0; c <= P_COUNT; c++) {
        for (int r = 0; r < rounds; r++) sel[r] = ratio[(size_t)r * (P_COUNT + 1) + c];
        for (int k = 0; k < 3; k++) q[c][k] = kz_quantile(sel, rounds, 0.25 * (k + 1), tmp);
    }
    int nh[2] = {0, 0};
    for (int h = 0; h < 2; h++) {
        int k = 0;
        for (int r = 0; r < rounds; r++)
            if ((samp[r] > smed) == h) sel[k++] = ratio[(size_t)r * (P_COUNT + 1) + P_COUNT];
        nh[h] = k;
        half[h][0] = kz_quantile(sel, k, 0.5, tmp);
        k = 0;
        for (int r = 0; r < rounds; r++)
            if ((samp[r] > smed) == h) sel[k++] = samp[r];
        half[h][1] = kz_quantile(sel, k, 0.5, tmp);
    }
    const double gmed = kz_quantile(allgbs, rounds, 0.5, tmp);
    double total_bytes = 0;
    for (int p = 0; p < P_COUNT; p++) total_bytes += part_bytes[p];
    if (json) {
        printf("{\n  \"threads\": %d,\n  \"rounds\": %d,\n  \"sample_mib\": %zu,\n  \"sample_loads\": \"%s\",\n"
               "  \"bytes_per_step\": %.0f,\n", threads, rounds, sample_mib, loads, total_bytes);
        printf("  \"matmul_gbs_median\": %.4g,\n  \"samples_gbs_median\": %.4g,\n", gmed, smed);
        printf("  \"matmul_bw_pct\": {\"median\": %.4g, \"q1\": %.4g, \"q3\": %.4g},\n", q[P_COUNT][1], q[P_COUNT][0],
               q[P_COUNT][2]);
        printf("  \"matmul_bw_pct_upper_half\": {\"rounds\": %d, \"median\": %.4g, \"samples_gbs\": %.4g},\n", nh[1],
               half[1][0], half[1][1]);
        printf("  \"matmul_bw_pct_lower_half\": {\"rounds\": %d, \"median\": %.4g, \"samples_gbs\": %.4g},\n", nh[0],
               half[0][0], half[0][1]);
        printf("  \"parts\": [");
        for (int p = 0, first = 1; p < P_COUNT; p++) {
            if (part_bytes[p] <= 0) continue;
            printf("%s\n    {\"part\": \"%s\", \"bytes\": %.0f, \"bw_pct_median\": %.4g}", first ? "" : ",", part_name[p],
                   part_bytes[p], q[p][1]);
            first = 0;
        }
        printf("\n  ]\n}\n");
    } else {
        printf("decode matrix products alone: %.2f MiB per step, %d threads, %d rounds, each between two read-bandwidth "
               "samples (%zu MiB, %s loads)\n", total_bytes / 1048576.0, threads, rounds, sample_mib, loads);
        printf("  all: %.2f GB/s median; %.1f%% of the enclosing samples' mean (median over rounds; quartiles %.1f .. "
               "%.1f)\n", gmed, q[P_COUNT][1], q[P_COUNT][0], q[P_COUNT][2]);
        printf("  rounds with samples above the median (%d, samples %.2f GB/s): %.1f%%; at or below (%d, %.2f GB/s): "
               "%.1f%%\n", nh[1], half[1][1], half[1][0], nh[0], half[0][1], half[0][0]);
        printf("  %-24s %10s %12s\n", "part", "MiB/step", "% (median)");
        for (int p = 0; p < P_COUNT; p++)
            if (part_bytes[p] > 0) printf("  %-24s %10.1f %11.1f%%\n", part_name[p], part_bytes[p] / 1048576.0, q[p][1]);
    }
    rc = 0;
out:
    kz_membw_close(bw);
    kz_pool_free(pool);
    free(x);
    free(yb);
    free(work);
    free(ratio);
    free(samp);
    free(allgbs);
    free(tmp);
    free(sel);
    return rc;
}
