#include <math.h>
#include <stdint.h>
#include <string.h>
#include "attention.h"
#include "fp16.h"
#include "ops.h"

static size_t row_off(const kz_kv_layer *kv, int g, int pos) {
    return ((size_t)g * kv->n_ctx + pos) * kv->head_dim;
}

void kz_kv_store(kz_kv_layer *kv, int pos, const float *k, const float *v) {
    const int hd = kv->head_dim;
    for (int g = 0; g < kv->n_head_kv; g++) {
        const size_t o = row_off(kv, g, pos);
        const float *kg = k + (size_t)g * hd, *vg = v + (size_t)g * hd;
        if (kv->f16) {
            uint16_t *kd = (uint16_t *)kv->k + o, *vd = (uint16_t *)kv->v + o;
            for (int i = 0; i < hd; i++) { kd[i] = kz_f32_to_fp16(kg[i]); vd[i] = kz_f32_to_fp16(vg[i]); }
        } else {
            memcpy((float *)kv->k + o, kg, (size_t)hd * sizeof(float));
            memcpy((float *)kv->v + o, vg, (size_t)hd * sizeof(float));
        }
    }
}

/* half -> float with bit masks instead of branches, so the row conversion vectorises; exact for
 * every half (checked against kz_fp16_to_f32 over all 65536 values in test_ops) */
static inline uint32_t sel32(uint32_t c, uint32_t a, uint32_t b) {
    const uint32_t m = 0u - c; /* c in {0,1} -> all zeros / all ones */
    return (a & m) | (b & ~m);
}
typedef union { uint32_t u; float f; } f32u;

static inline float h2f(uint32_t h) {
    const uint32_t a = h & 0x7fffu, s = (h & 0x8000u) << 16;
    f32u nrm = {.u = (a << 13) + (112u << 23)}; /* rebias exponent 15 -> 127 */
    f32u sub = {.u = (a << 13) + (113u << 23)}; /* subnormal: 2^-14 (1 + m/1024) - 2^-14, exact */
    sub.f -= 6.103515625e-05f;
    const uint32_t inf = (a << 13) | 0x7f800000u; /* inf / NaN keep the payload */
    f32u r = {.u = sel32(a < 0x400u, sub.u, sel32(a >= 0x7c00u, inf, nrm.u)) | s};
    return r.f;
}

/* fixed blocks of 8: -O2's cheap vectoriser only takes loops with a known trip count */
void kz_h2f_row(float *restrict dst, const uint16_t *restrict src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) dst[i + l] = h2f(src[i + l]);
    for (; i < n; i++) dst[i] = h2f(src[i]);
}

/* 8 partial sums: vectorises without -ffast-math */
static inline float dot8(const float *restrict a, const float *restrict b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a x, 8 at a time through locals: vectorises even where the compiler cannot prove that
 * x and y do not overlap once inlined */
static inline void axpy(float *y, float a, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float t[8];
        for (int l = 0; l < 8; l++) t[l] = y[i + l] + a * x[i + l];
        for (int l = 0; l < 8; l++) y[i + l] = t[l];
    }
    for (; i < n; i++) y[i] += a * x[i];
}

size_t kz_attn_scratch_floats(const kz_kv_layer *kv, int n_pos) {
    const size_t n_rep = (size_t)(kv->n_head / kv->n_head_kv);
    return n_rep * (size_t)n_pos + (size_t)kv->head_dim;
}

void kz_attn_partial(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch) {
    const int hd = kv->head_dim, n_rep = kv->n_head / kv->n_head_kv, n = p1 - p0;
    memset(acc, 0, (size_t)n_rep * hd * sizeof(float));
    if (n <= 0) {
        for (int r = 0; r < n_rep; r++) { ml[2 * r] = -INFINITY; ml[2 * r + 1] = 0.0f; }
        return;
    }
    float *sc = scratch, *tmp = scratch + (size_t)n_rep * n; /* sc[r*n + t] */
    const size_t base = row_off(kv, g, p0);
    for (int t = 0; t < n; t++) {
        const float *kr;
        if (kv->f16) { kz_h2f_row(tmp, (const uint16_t *)kv->k + base + (size_t)t * hd, hd); kr = tmp; }
        else kr = (const float *)kv->k + base + (size_t)t * hd;
        for (int r = 0; r < n_rep; r++) sc[(size_t)r * n + t] = dot8(q + (size_t)r * ldq, kr, hd) * scale;
    }
    for (int r = 0; r < n_rep; r++) {
        float *s = sc + (size_t)r * n, mx = s[0];
        for (int t = 1; t < n; t++) if (s[t] > mx) mx = s[t];
        double sum = 0.0;
        for (int t = 0; t < n; t++) { s[t] = expf(s[t] - mx); sum += s[t]; }
        ml[2 * r] = mx;
        ml[2 * r + 1] = (float)sum;
    }
    for (int t = 0; t < n; t++) {
        const float *vr;
        if (kv->f16) { kz_h2f_row(tmp, (const uint16_t *)kv->v + base + (size_t)t * hd, hd); vr = tmp; }
        else vr = (const float *)kv->v + base + (size_t)t * hd;
        for (int r = 0; r < n_rep; r++) axpy(acc + (size_t)r * hd, sc[(size_t)r * n + t], vr, hd);
    }
}

void kz_attn_merge(int n_rep, int hd, int n_part, const float *ml, const float *acc, float *out, size_t ldo) {
    for (int r = 0; r < n_rep; r++) {
        float mx = -INFINITY;
        for (int i = 0; i < n_part; i++) {
            const float m = ml[(size_t)i * 2 * n_rep + 2 * r];
            if (m > mx) mx = m;
        }
        float *o = out + (size_t)r * ldo;
        memset(o, 0, (size_t)hd * sizeof(float));
        double l = 0.0;
        for (int i = 0; i < n_part; i++) {
            const float *p = ml + (size_t)i * 2 * n_rep + 2 * r;
            if (p[1] == 0.0f) continue; /* empty partial */
            const float w = expf(p[0] - mx);
            l += (double)w * p[1];
            axpy(o, w, acc + ((size_t)i * n_rep + r) * hd, hd);
        }
        kz_scale(o, hd, (float)(1.0 / l));
    }
}

void kz_attn_head(const kz_kv_layer *kv, int h, int pos, const float *q, float scale, float *out,
                  float *scratch) {
    const int hd = kv->head_dim, n = pos + 1;
    const int g = h / (kv->n_head / kv->n_head_kv);
    float *sc = scratch, *tmp = scratch + n;
    const size_t base = row_off(kv, g, 0);
    for (int t = 0; t < n; t++) {
        const float *kr;
        if (kv->f16) { kz_h2f_row(tmp, (const uint16_t *)kv->k + base + (size_t)t * hd, hd); kr = tmp; }
        else kr = (const float *)kv->k + base + (size_t)t * hd;
        sc[t] = kz_dot(q, kr, hd) * scale;
    }
    kz_softmax(sc, n);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *vr;
        if (kv->f16) { kz_h2f_row(tmp, (const uint16_t *)kv->v + base + (size_t)t * hd, hd); vr = tmp; }
        else vr = (const float *)kv->v + base + (size_t)t * hd;
        axpy(out, sc[t], vr, hd);
    }
}
