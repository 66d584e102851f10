/* Sampler tests: every filter checked against an independent full-sort / softmax reference. */
#include <math.h>
#include <stdint.h>
#include "kt.h"
#include "api/sample.h"

static kz_sampler_params base_params(void) {
    kz_sampler_params p = {0};
    p.temperature = 1.0f; p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f;
    p.repeat_penalty = 1.0f; p.repeat_last_n = 64; p.seed = 1234;
    return p;
}

static int ref_argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[b]) b = i;
    return b;
}

/* reference ordering for full sorts: logit desc, id asc */
static const float *g_ref_l;
static int cmp_ref(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (g_ref_l[x] != g_ref_l[y]) return g_ref_l[x] > g_ref_l[y] ? -1 : 1;
    return x - y;
}
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int contains(const int32_t *ids, int n, int id) {
    for (int i = 0; i < n; i++) if (ids[i] == id) return 1;
    return 0;
}

/* chi-square of observed counts vs expected probabilities */
static double chi2(const long *cnt, const double *prob, int n, long total) {
    double c = 0;
    for (int i = 0; i < n; i++) {
        double e = prob[i] * (double)total;
        if (e > 0) c += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
        else if (cnt[i] > 0) c += 1e9;
    }
    return c;
}

static void softmax_t(const float *l, int n, double t, double *out) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) { out[i] = exp(((double)l[i] - mx) / t); s += out[i]; }
    for (int i = 0; i < n; i++) out[i] /= s;
}

static void test_greedy(void) {
    unsigned long long r = 77;
    int V = 997;
    float *l = malloc(V * sizeof *l);
    kz_sampler_params p = base_params();
    p.temperature = 0.0f;
    kz_sampler *s = kz_sampler_new(V, &p);
    CHECK(s != NULL);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < V; i++) l[i] = 5.0f * kt_randf(&r);
        CHECK(kz_sampler_sample(s, l, NULL, 0) == ref_argmax(l, V));
    }
    /* negative temperature is greedy too; ties go to the lower id */
    p.temperature = -1.0f;
    kz_sampler_set_params(s, &p);
    for (int i = 0; i < V; i++) l[i] = -1.0f;
    l[500] = 3.0f; l[200] = 3.0f;
    CHECK(kz_sampler_sample(s, l, NULL, 0) == 200);
    /* NaN never wins */
    l[100] = NAN;
    CHECK(kz_sampler_sample(s, l, NULL, 0) == 200);
    /* the caller's argmax (the LM head's, kz_mm.argmax) is taken as given without penalties,
     * -1 or out of range means none */
    CHECK(kz_sampler_sample_hint(s, l, NULL, 0, 200) == 200);
    CHECK(kz_sampler_sample_hint(s, l, NULL, 0, -1) == 200);
    CHECK(kz_sampler_sample_hint(s, l, NULL, 0, V) == 200);
    /* with a penalty the logits it was found on are not the ones sampled: it is not used */
    p.repeat_penalty = 4.0f;
    kz_sampler_set_params(s, &p);
    const int32_t hist[] = { 200 };
    CHECK(kz_sampler_sample_hint(s, l, hist, 1, 200) == 500);
    kz_sampler_free(s);

    /* top-k = 1 with temperature > 0 is greedy whatever the seed */
    p = base_params();
    p.top_k = 1; p.temperature = 1.5f;
    for (int seed = 0; seed < 10; seed++) {
        p.seed = (uint64_t)seed;
        s = kz_sampler_new(V, &p);
        for (int i = 0; i < V; i++) l[i] = 2.0f * kt_randf(&r);
        for (int k = 0; k < 5; k++) CHECK(kz_sampler_sample(s, l, NULL, 0) == ref_argmax(l, V));
        kz_sampler_free(s);
    }
    free(l);
}

static void test_seed_determinism(void) {
    unsigned long long r = 99;
    int V = 1531, N = 200;
    float *l = malloc(V * sizeof *l);
    for (int i = 0; i < V; i++) l[i] = 0.5f * kt_randf(&r); /* flat-ish: many tokens likely */
    kz_sampler_params p = base_params();
    p.temperature = 1.0f; p.top_k = 100; p.top_p = 0.95f; p.min_p = 0.01f;
    int32_t a[200], b[200], c[200];
    p.seed = 42;
    kz_sampler *s1 = kz_sampler_new(V, &p), *s2 = kz_sampler_new(V, &p);
    p.seed = 43;
    kz_sampler *s3 = kz_sampler_new(V, &p);
    for (int i = 0; i < N; i++) {
        a[i] = kz_sampler_sample(s1, l, NULL, 0);
        b[i] = kz_sampler_sample(s2, l, NULL, 0);
        c[i] = kz_sampler_sample(s3, l, NULL, 0);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    int diff = 0;
    for (int i = 0; i < N; i++) diff += a[i] != c[i];
    CHECKF(diff > N / 2, "seeds 42 and 43 agree on %d of %d draws", N - diff, N);
    /* reseeding restarts the stream */
    kz_sampler_reseed(s1, 42);
    for (int i = 0; i < N; i++) b[i] = kz_sampler_sample(s1, l, NULL, 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    kz_sampler_free(s1); kz_sampler_free(s2); kz_sampler_free(s3);
    free(l);
}

static void test_distribution(void) {
    /* small vocab, temperature 0.7: histogram of draws vs softmax(l/T) */
    const int V = 7;
    float l[7] = {0.3f, -1.2f, 1.7f, 0.9f, -0.4f, 1.1f, -2.5f};
    double prob[7], prob_t1[7];
    softmax_t(l, V, 0.7, prob);
    softmax_t(l, V, 1.0, prob_t1);
    kz_sampler_params p = base_params();
    p.temperature = 0.7f; p.seed = 2024;
    kz_sampler *s = kz_sampler_new(V, &p);
    long cnt[7] = {0}, N = 200000;
    for (long i = 0; i < N; i++) cnt[kz_sampler_sample(s, l, NULL, 0)]++;
    double c = chi2(cnt, prob, V, N), c1 = chi2(cnt, prob_t1, V, N);
    /* 6 dof: P(chi2 > 27.9) = 1e-4; the wrong temperature must be rejected by the same test */
    CHECKF(c < 27.9, "chi2 vs softmax(l/0.7) = %.2f", c);
    CHECKF(c1 > 100.0, "chi2 vs softmax(l/1.0) = %.2f (test has no power)", c1);

    /* top-k = 3: only the 3 best, renormalised */
    p.top_k = 3; p.temperature = 1.0f;
    kz_sampler_set_params(s, &p);
    double pk[7] = {0}, z = 0;
    int top3[3] = {2, 5, 3};
    for (int i = 0; i < 3; i++) z += exp(l[top3[i]]);
    for (int i = 0; i < 3; i++) pk[top3[i]] = exp(l[top3[i]]) / z;
    memset(cnt, 0, sizeof cnt);
    for (long i = 0; i < N; i++) cnt[kz_sampler_sample(s, l, NULL, 0)]++;
    c = chi2(cnt, pk, V, N);
    CHECKF(c < 27.9, "top-k=3 chi2 = %.2f", c);
    kz_sampler_free(s);
}

static void fill_logprobs(float *l, const double *pr, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)log(pr[i]);
}

static void test_top_p_min_p_small(void) {
    /* probabilities (temperature 1): ids shuffled so order != id */
    const int V = 6;
    double pr[6] = {0.06, 0.5, 0.04, 0.3, 0.02, 0.08};
    float l[6];
    fill_logprobs(l, pr, V);
    int32_t ids[8];
    kz_sampler_params p = base_params();
    p.temperature = 1.0f;
    kz_sampler *s = kz_sampler_new(V, &p);

    p.top_p = 0.75f; kz_sampler_set_params(s, &p);
    kz_sampler_sample(s, l, NULL, 0);
    int n = kz_sampler_last_candidates(s, ids, 8);
    CHECKF(n == 2 && contains(ids, n, 1) && contains(ids, n, 3), "top-p 0.75 kept %d", n);

    p.top_p = 0.85f; kz_sampler_set_params(s, &p);
    kz_sampler_sample(s, l, NULL, 0);
    n = kz_sampler_last_candidates(s, ids, 8);
    CHECKF(n == 3 && contains(ids, n, 5), "top-p 0.85 kept %d", n);

    p.top_p = 0.0f; kz_sampler_set_params(s, &p); /* degenerate: keep the best only */
    CHECK(kz_sampler_sample(s, l, NULL, 0) == 1);
    CHECK(kz_sampler_last_candidates(s, ids, 8) == 1);

    /* min-p 0.15: keep p >= 0.075 -> {1,3,5} */
    p.top_p = 1.0f; p.min_p = 0.15f; kz_sampler_set_params(s, &p);
    kz_sampler_sample(s, l, NULL, 0);
    n = kz_sampler_last_candidates(s, ids, 8);
    CHECKF(n == 3 && contains(ids, n, 1) && contains(ids, n, 3) && contains(ids, n, 5),
           "min-p 0.15 kept %d", n);
    p.min_p = 0.5f; kz_sampler_set_params(s, &p); /* p >= 0.25 -> {1,3} */
    for (int i = 0; i < 200; i++) {
        int t = kz_sampler_sample(s, l, NULL, 0);
        CHECK(t == 1 || t == 3);
    }
    n = kz_sampler_last_candidates(s, ids, 8);
    CHECK(n == 2);
    p.min_p = 2.0f; kz_sampler_set_params(s, &p); /* keeps at least the best */
    CHECK(kz_sampler_sample(s, l, NULL, 0) == 1);

    /* no filter: every id reachable */
    p = base_params(); p.temperature = 1.0f;
    kz_sampler_set_params(s, &p);
    kz_sampler_sample(s, l, NULL, 0);
    CHECK(kz_sampler_last_candidates(s, ids, 8) == V);
    kz_sampler_free(s);
}

/* large vocab: top-k and top-p sets equal a full-sort reference */
static void test_large_vocab(void) {
    unsigned long long r = 5;
    int V = 248320;
    float *l = malloc(V * sizeof *l);
    int *ord = malloc(V * sizeof *ord);
    int32_t *ids = malloc(V * sizeof *ids);
    for (int i = 0; i < V; i++) l[i] = 4.0f * kt_randf(&r);
    l[1234] = l[4321] = 3.9999f; /* a tie */
    for (int i = 0; i < V; i++) ord[i] = i;
    g_ref_l = l;
    qsort(ord, V, sizeof *ord, cmp_ref);

    kz_sampler_params p = base_params();
    p.top_k = 40;
    kz_sampler *s = kz_sampler_new(V, &p);
    int t = kz_sampler_sample(s, l, NULL, 0);
    int n = kz_sampler_last_candidates(s, ids, V);
    CHECK(n == 40);
    int ok = n == 40;
    for (int i = 0; i < 40 && ok; i++) ok = ids[i] == ord[i]; /* sorted best-first */
    CHECK(ok);
    CHECK(contains(ids, n, t));

    /* top-p 0.9 without top-k: nucleus = smallest sorted prefix with mass >= 0.9 */
    double mx = l[ord[0]], z = 0, acc = 0;
    for (int i = 0; i < V; i++) z += exp(l[i] - mx);
    int want = 0;
    while (want < V) { acc += exp(l[ord[want]] - mx); want++; if (acc >= 0.9 * z) break; }
    p = base_params(); p.top_p = 0.9f;
    kz_sampler_set_params(s, &p);
    t = kz_sampler_sample(s, l, NULL, 0);
    n = kz_sampler_last_candidates(s, ids, V);
    CHECKF(n == want, "top-p 0.9 kept %d, reference %d", n, want);
    if (n == want) {
        qsort(ids, n, sizeof *ids, cmp_int);
        int *ref = malloc(want * sizeof *ref);
        memcpy(ref, ord, want * sizeof *ref);
        qsort(ref, want, sizeof *ref, cmp_int);
        int same = 1;
        for (int i = 0; i < n; i++) same &= ids[i] == ref[i];
        CHECK(same);
        free(ref);
    }
    CHECK(t >= 0 && t < V);

    /* greedy on large vocab */
    p.temperature = 0.0f; kz_sampler_set_params(s, &p);
    CHECK(kz_sampler_sample(s, l, NULL, 0) == ord[0]);
    kz_sampler_free(s);
    free(l); free(ord); free(ids);
}

static void test_penalties(void) {
    unsigned long long r = 3;
    const int V = 11;
    float l[11], o[11];
    for (int i = 0; i < V; i++) l[i] = 3.0f * kt_randf(&r);
    l[3] = 2.5f; l[5] = -1.5f; l[7] = 0.75f;
    int counts[11] = {0};
    kz_sampler_params p = base_params();
    p.repeat_penalty = 1.3f; p.frequency_penalty = 0.25f; p.presence_penalty = 0.5f;
    p.repeat_last_n = 0; /* whole history */
    int32_t hist[] = {3, 5, 3, -7, 99, 7};
    memcpy(o, l, sizeof l);
    kz_sample_apply_penalties(&p, o, V, hist, 6, counts);
    CHECK(o[3] == 2.5f / 1.3f - (2 * 0.25f + 0.5f));
    CHECK(o[5] == -1.5f * 1.3f - (1 * 0.25f + 0.5f));
    CHECK(o[7] == 0.75f / 1.3f - (0.25f + 0.5f));
    int untouched = 1;
    for (int i = 0; i < V; i++) if (i != 3 && i != 5 && i != 7) untouched &= o[i] == l[i];
    CHECK(untouched);
    int zero = 1;
    for (int i = 0; i < V; i++) zero &= counts[i] == 0;
    CHECK(zero);

    /* window of the last 2 tokens: {99 (ignored), 7} */
    p.repeat_last_n = 2;
    memcpy(o, l, sizeof l);
    kz_sample_apply_penalties(&p, o, V, hist, 6, counts);
    CHECK(o[3] == l[3] && o[5] == l[5]);
    CHECK(o[7] == 0.75f / 1.3f - 0.75f);

    /* only the repeat penalty */
    p = base_params(); p.repeat_penalty = 2.0f; p.repeat_last_n = 0;
    memcpy(o, l, sizeof l);
    kz_sample_apply_penalties(&p, o, V, hist, 6, counts);
    CHECK(o[3] == 1.25f && o[5] == -3.0f && o[7] == 0.375f);

    /* through the sampler: the penalised argmax loses under greedy */
    float g[11];
    for (int i = 0; i < V; i++) g[i] = (float)i * 0.1f;
    g[4] = 5.0f; g[9] = 4.0f;
    p = base_params(); p.temperature = 0.0f; p.presence_penalty = 2.0f;
    kz_sampler *s = kz_sampler_new(V, &p);
    int32_t h4[] = {4};
    CHECK(kz_sampler_sample(s, g, NULL, 0) == 4);
    CHECK(kz_sampler_sample(s, g, h4, 1) == 9);
    CHECK(g[4] == 5.0f); /* caller's logits untouched */
    kz_sampler_free(s);
}

int main(void) {
    test_greedy();
    test_seed_determinism();
    test_distribution();
    test_top_p_min_p_small();
    test_large_vocab();
    test_penalties();
    KT_END();
}
