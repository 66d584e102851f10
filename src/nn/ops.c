#include "nn/ops.h"
#include "sys/cpu.h"
#include "nn/vec8.h"

/* The row ops every decode token runs (norms, SiLU/SwiGLU, gates): one body, built twice on
 * x86-64 - baseline (SSE2, 4 lanes) and AVX2 (8 lanes in one ymm) - and chosen from the active
 * ISA level. Element-wise IEEE ops and the fixed 8-lane reductions below give the same bits in
 * both builds (no contraction into FMA in ISO C mode). */
#if defined(__x86_64__) && defined(__GNUC__)
#define KZ_ROW_OP(name, params, args)                                                          \
    static inline __attribute__((always_inline)) void name##_body params;                      \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; }      \
    void name params {                                                                         \
        if (kz_isa_has_avx2(kz_isa_active())) name##_avx2 args;                              \
        else name##_body args;                                                                 \
    }                                                                                          \
    static inline __attribute__((always_inline)) void name##_body params
#else
#define KZ_ROW_OP(name, params, args)                                  \
    static inline __attribute__((always_inline)) void name##_body params; \
    void name params { name##_body args; }                             \
    static inline __attribute__((always_inline)) void name##_body params
#endif

/* Row loops work in blocks of 8 with a fixed inner trip count (through a local array where the
 * output may alias an input): GCC -O2's very cheap vectoriser takes only loops it needs neither
 * an epilogue nor an overlap check for. The scalar tails compute the same expression, so an
 * element's value does not depend on the row length or on where a row was split. */

/* sum of x[i]^2 in double: 8 partial sums in a fixed order (vectorises; same result for any
 * thread count, since a row is always summed by one caller) */
static inline __attribute__((always_inline)) double sumsq(const float *x, int n) {
    double acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * x[i + l];
    double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

/* y = x * r (* w); y may alias x */
static inline __attribute__((always_inline)) void scale_w(float *y, const float *x, const float *w, float r, int n) {
    int i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8) {
            float t[8];
            for (int l = 0; l < 8; l++) t[l] = x[i + l] * r * w[i + l];
            for (int l = 0; l < 8; l++) y[i + l] = t[l];
        }
        for (; i < n; i++) y[i] = x[i] * r * w[i];
    } else {
        for (; i + 8 <= n; i += 8) {
            float t[8];
            for (int l = 0; l < 8; l++) t[l] = x[i + l] * r;
            for (int l = 0; l < 8; l++) y[i + l] = t[l];
        }
        for (; i < n; i++) y[i] = x[i] * r;
    }
}

KZ_ROW_OP(kz_rmsnorm, (float *y, const float *x, const float *w, int n, float eps), (y, x, w, n, eps)) {
    /* double sum: rows up to ~10^4 wide, keeps the mean exact to f32 precision */
    const double ss = sumsq(x, n);
    const float r = (float)(1.0 / sqrt(ss / n + eps));
    scale_w(y, x, w, r, n);
}

KZ_ROW_OP(kz_add_rmsnorm, (float *restrict x, const float *restrict d, float *restrict y, const float *w, int n, float eps),
          (x, d, y, w, n, eps)) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) x[i + l] += d[i + l];
    for (; i < n; i++) x[i] += d[i];
    kz_rmsnorm_body(y, x, w, n, eps);
}

KZ_ROW_OP(kz_l2norm, (float *x, int n, float eps), (x, n, eps)) {
    double nrm = sqrt(sumsq(x, n));
    if (nrm < eps) nrm = eps;
    const float r = (float)(1.0 / nrm);
    scale_w(x, x, NULL, r, n);
}

void kz_scale(float *x, int n, float s) {
    scale_w(x, x, NULL, s, n);
}

void kz_add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float t[8];
        for (int l = 0; l < 8; l++) t[l] = y[i + l] + x[i + l];
        for (int l = 0; l < 8; l++) y[i + l] = t[l];
    }
    for (; i < n; i++) y[i] += x[i];
}

void kz_exp_row(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f xv = ld8(x + i), v = kz_exp8(&xv);
        st8(y + i, &v);
    }
    for (; i < n; i++) y[i] = kz_exp(x[i]);
}

KZ_ROW_OP(kz_silu_row, (float *y, const float *x, int n), (y, x, n)) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f xv = ld8(x + i), v = kz_silu8(&xv);
        st8(y + i, &v);
    }
    for (; i < n; i++) y[i] = kz_silu(x[i]);
}

KZ_ROW_OP(kz_swiglu, (float *a, const float *b, int n), (a, b, n)) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f av = ld8(a + i), v = kz_silu8(&av) * ld8(b + i);
        st8(a + i, &v);
    }
    for (; i < n; i++) a[i] = kz_silu(a[i]) * b[i];
}

KZ_ROW_OP(kz_mul_sigmoid, (float *o, const float *g, int n), (o, g, n)) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f mg = -ld8(g + i), v = ld8(o + i) * (1.0f / (1.0f + kz_exp8(&mg)));
        st8(o + i, &v);
    }
    for (; i < n; i++) o[i] *= kz_sigmoid(g[i]);
}

KZ_ROW_OP(kz_rmsnorm_gated, (float *o, const float *z, const float *w, int n, float eps), (o, z, w, n, eps)) {
    const float r = (float)(1.0 / sqrt(sumsq(o, n) / n + eps));
    /* o = (o * r * w) * silu(z) in one pass */
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f zv = ld8(z + i), v = ld8(o + i) * r * ld8(w + i) * kz_silu8(&zv);
        st8(o + i, &v);
    }
    for (; i < n; i++) o[i] = o[i] * r * w[i] * kz_silu(z[i]);
}

void kz_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    const float r = (float)(1.0 / kz_exp_sum(x, mx, n));
    kz_scale(x, n, r);
}

/* Lane-wise maxima over blocks of 8 with the block where each lane's maximum first appeared,
 * then the lowest position among the lanes holding the overall maximum: the same index as the
 * plain scan "x[i] > best" (first maximum, NaN never wins), without its loop-carried compare
 * and branch per element (a greedy decode step scans the whole vocabulary, 248k logits). */
static inline __attribute__((always_inline)) int argmax_body(const float *x, int n) {
    const float ninf = -INFINITY;
    /* 4 independent (maximum, block) sets: the compare-select chain of one set would bound the
     * loop by its latency */
    v8f m[4];
    v8i at[4];
    for (int s = 0; s < 4; s++) {
        m[s] = (v8f){ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf};
        at[s] = (v8i){0, 0, 0, 0, 0, 0, 0, 0};
    }
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const v8i iv = {i, i, i, i, i, i, i, i};
        for (int s = 0; s < 4; s++) {
            const v8f v = ld8(x + i + 8 * s);
            const v8i gt = v > m[s]; /* all ones where greater; false for NaN */
            m[s] = (v8f)(((v8i)v & gt) | ((v8i)m[s] & ~gt));
            at[s] = (iv & gt) | (at[s] & ~gt);
        }
    }
    float best = ninf;
    int bi = 0;
    for (int s = 0; s < 4; s++) /* set s, lane l: its maximum is at at[s][l] + 8 s + l */
        for (int l = 0; l < 8; l++) {
            const int pos = at[s][l] + 8 * s + l;
            if (m[s][l] > best || (m[s][l] == best && best > ninf && pos < bi)) best = m[s][l], bi = pos;
        }
    for (; i < n; i++) /* the tail lies after every block: only a larger value moves the index */
        if (x[i] > best) best = x[i], bi = i;
    return bi;
}
static int argmax_plain(const float *x, int n) { return argmax_body(x, n); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static int argmax_avx2(const float *x, int n) { return argmax_body(x, n); }
#endif
int kz_argmax(const float *x, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kz_isa_has_avx2(kz_isa_active())) return argmax_avx2(x, n);
#endif
    return argmax_plain(x, n);
}

float kz_dot(const float *a, const float *b, int n) {
    /* 4 partial sums: lets the compiler vectorise without -ffast-math */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void kz_rope_table(float *cs, int n_rot, int pos, float base, const unsigned char *use_pos) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (use_pos && !use_pos[i]) ? 0.0 : (double)pos * pow((double)base, -2.0 * i / n_rot);
        cs[2 * i] = (float)cos(th);
        cs[2 * i + 1] = (float)sin(th);
    }
}

void kz_rope_neox(float *x, int n_rot, const float *cs) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
    }
}

void kz_imrope_mask(unsigned char *use_pos, int n_rot, const int sec[4]) {
    const int half = n_rot / 2;
    const int sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
    for (int i = 0; i < half; i++) {
        if (sect_dims <= 0) { use_pos[i] = 1; continue; }
        /* IMROPE interleaves t,h,w per pair; text positions are (p,p,p,0), so only the
         * 4th ("e") slot rotates by position 0 */
        const int s = i % sect_dims;
        int t = (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]) ||
                (s % 3 == 0 && s < 3 * sec[0]);
        use_pos[i] = (unsigned char)t;
    }
}

/* dst[c * ldd + r] = src[r * lds + c]: full 8 x 8 tiles through a local tile (fixed trip counts,
 * which the compiler unrolls into whole-row loads and stores), then the edge strips */
void kz_transpose(float *restrict dst, size_t ldd, const float *restrict src, size_t lds, int rows, int cols) {
    const int r8 = rows & ~7, c8 = cols & ~7;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8) {
            float t[8][8];
            for (int r = 0; r < 8; r++)
                for (int c = 0; c < 8; c++) t[c][r] = src[(size_t)(r0 + r) * lds + c0 + c];
            for (int c = 0; c < 8; c++)
                for (int r = 0; r < 8; r++) dst[(size_t)(c0 + c) * ldd + r0 + r] = t[c][r];
        }
    for (int c = 0; c < cols; c++) /* last rows % 8 rows (all columns), last cols % 8 columns */
        for (int r = c < c8 ? r8 : 0; r < rows; r++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}
