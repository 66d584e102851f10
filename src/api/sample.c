/* Sampler: penalties -> (greedy | top-k -> top-p -> min-p -> temperature draw). See sample.h. */
#include "api/sample.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "nn/ops.h"

typedef struct { float logit; int32_t id; } kz_cand;

struct kz_sampler {
    kz_sampler_params p;
    int n_vocab;
    uint64_t rng[4];    /* xoshiro256** state */
    float *work;        /* n_vocab penalised logits */
    int *counts;        /* n_vocab zeros between calls (penalty scratch) */
    kz_cand *cand;      /* n_vocab candidates */
    kz_cand *tmp;       /* n_vocab scratch for selection */
    int n_cand;         /* survivors of the last sample (temperature > 0) */
};

/* ---- RNG: splitmix64 seeding + xoshiro256** (fast, 256-bit state, fixed algorithm so the
 * stream for a seed is the same on every platform) ---- */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl64(s[3], 45);
    return r;
}

void kz_sampler_reseed(kz_sampler *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

double kz_sampler_uniform(kz_sampler *s) {
    return (double)(xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0);
}

kz_sampler *kz_sampler_new(int n_vocab, const kz_sampler_params *p) {
    if (n_vocab < 1 || !p) return NULL;
    kz_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_vocab = n_vocab;
    s->p = *p;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    if (!s->work || !s->counts || !s->cand || !s->tmp) { kz_sampler_free(s); return NULL; }
    kz_sampler_reseed(s, p->seed);
    return s;
}

void kz_sampler_free(kz_sampler *s) {
    if (!s) return;
    free(s->work); free(s->counts); free(s->cand); free(s->tmp);
    free(s);
}

void kz_sampler_set_params(kz_sampler *s, const kz_sampler_params *p) { s->p = *p; }

static int penalties_active(const kz_sampler_params *p) {
    return (p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f) || p->presence_penalty != 0.0f ||
           p->frequency_penalty != 0.0f;
}

void kz_sample_apply_penalties(const kz_sampler_params *p, float *logits, int n_vocab,
                               const int32_t *hist, int n_hist, int *counts) {
    if (!hist || n_hist <= 0) return;
    if (!penalties_active(p)) return;
    int rep = p->repeat_penalty != 1.0f && p->repeat_penalty > 0.0f;
    int start = 0;
    if (p->repeat_last_n > 0 && n_hist > p->repeat_last_n) start = n_hist - p->repeat_last_n;
    for (int i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t >= 0 && t < n_vocab) counts[t]++;
    }
    /* second pass: each distinct token is penalised once, then its count is cleared */
    for (int i = start; i < n_hist; i++) {
        int32_t t = hist[i];
        if (t < 0 || t >= n_vocab || counts[t] == 0) continue;
        float l = logits[t];
        if (rep) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)counts[t] * p->frequency_penalty + p->presence_penalty;
        logits[t] = l;
        counts[t] = 0;
    }
}

/* a ranks before b: higher logit, then lower id (total order -> deterministic results) */
static inline int cand_before(const kz_cand *a, const kz_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* min-heap on rank (root = worst kept) */
static void heap_sift_down(kz_cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_before(&h[w], &h[l])) w = l;
        if (r < n && cand_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        kz_cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

/* Best k of c[0..n) into out[0..k), sorted best first. O(n log k), no worst case. */
static void select_top(const kz_cand *c, int n, int k, kz_cand *out) {
    if (k > n) k = n;
    memcpy(out, c, (size_t)k * sizeof *out);
    for (int i = k / 2 - 1; i >= 0; i--) heap_sift_down(out, k, i);
    for (int i = k; i < n; i++) {
        if (cand_before(&c[i], &out[0])) { out[0] = c[i]; heap_sift_down(out, k, 0); }
    }
    /* heap sort: repeatedly move the worst to the end -> best first */
    for (int m = k - 1; m > 0; m--) {
        kz_cand t = out[0]; out[0] = out[m]; out[m] = t;
        heap_sift_down(out, m, 0);
    }
}

int32_t kz_sampler_sample(kz_sampler *s, const float *logits, const int32_t *hist, int n_hist) {
    return kz_sampler_sample_hint(s, logits, hist, n_hist, -1);
}

int32_t kz_sampler_sample_hint(kz_sampler *s, const float *logits, const int32_t *hist, int n_hist,
                               int64_t argmax) {
    const kz_sampler_params *p = &s->p;
    int V = s->n_vocab;
    /* penalties need a private copy; without them read the caller's logits directly */
    const float *w = logits;
    if (penalties_active(p) && hist && n_hist > 0) {
        memcpy(s->work, logits, (size_t)V * sizeof *logits);
        kz_sample_apply_penalties(p, s->work, V, hist, n_hist, s->counts);
        w = s->work;
    }

    if (p->temperature <= 0.0f) {
        s->n_cand = 0;
        if (w == logits && argmax >= 0 && argmax < V) return (int32_t)argmax; /* no penalty moved it */
        return kz_argmax(w, V); /* first maximum; NaN never wins */
    }

    kz_cand *c = s->cand;
    int n = V, sorted = 0;
    for (int i = 0; i < V; i++) { /* NaN can never win; +inf is clamped so softmax stays finite */
        float l = w[i];
        c[i].logit = isnan(l) ? -INFINITY : (l > FLT_MAX ? FLT_MAX : l);
        c[i].id = i;
    }

    if (p->top_k > 0 && p->top_k < n) {
        select_top(c, n, p->top_k, s->tmp);
        memcpy(c, s->tmp, (size_t)p->top_k * sizeof *c);
        n = p->top_k; sorted = 1;
    }

    float mx0 = -INFINITY;
    for (int i = 0; i < n; i++) if (c[i].logit > mx0) mx0 = c[i].logit;
    if (p->top_p < 1.0f && n > 1 && mx0 > -INFINITY) {
        float mx = mx0;
        double sum = 0;
        for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - mx);
        double target = (double)(p->top_p > 0.0f ? p->top_p : 0.0f) * sum;
        /* grow a sorted best-first prefix until it holds mass >= p */
        int m = sorted ? n : (n < 64 ? n : 64);
        for (;;) {
            if (!sorted) select_top(c, n, m, s->tmp);
            const kz_cand *pre = sorted ? c : s->tmp;
            double acc = 0;
            int keep = -1;
            for (int i = 0; i < m; i++) {
                acc += exp((double)pre[i].logit - mx);
                if (acc >= target) { keep = i + 1; break; }
            }
            if (keep < 0 && m < n) { m = m > n / 4 ? n : m * 4; continue; }
            if (keep < 0) keep = m; /* rounding: whole set */
            if (!sorted) memcpy(c, s->tmp, (size_t)keep * sizeof *c);
            n = keep; sorted = 1;
            break;
        }
    }

    if (p->min_p > 0.0f && n > 1) {
        int best = 0;
        for (int i = 1; i < n; i++) if (cand_before(&c[i], &c[best])) best = i;
        kz_cand top = c[best];
        float thr = top.logit + logf(p->min_p); /* p_i >= min_p*p_max <=> l_i >= l_max+log(min_p) */
        int j = 0;
        for (int i = 0; i < n; i++) if (c[i].logit >= thr) c[j++] = c[i];
        if (j == 0) c[j++] = top; /* min_p > 1 would drop everything: keep the best */
        n = j;
    }

    s->n_cand = n;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (c[i].logit > mx) mx = c[i].logit;
    if (mx == -INFINITY) return c[0].id; /* all -inf: nothing to weigh */
    double inv_t = 1.0 / (double)p->temperature, sum = 0;
    for (int i = 0; i < n; i++) sum += exp(((double)c[i].logit - mx) * inv_t);
    double u = kz_sampler_uniform(s) * sum, acc = 0;
    int last_pos = 0;
    for (int i = 0; i < n; i++) {
        double e = exp(((double)c[i].logit - mx) * inv_t);
        if (e > 0) last_pos = i;
        acc += e;
        if (acc > u) return c[i].id;
    }
    return c[last_pos].id; /* u * sum rounding past the total */
}

int kz_sampler_last_candidates(const kz_sampler *s, int32_t *ids, int max) {
    for (int i = 0; i < s->n_cand && i < max; i++) ids[i] = s->cand[i].id;
    return s->n_cand;
}
