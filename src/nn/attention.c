#include <math.h>
#include <stdint.h>
#include <string.h>
#include "kazeia.h"
#include "nn/attention.h"
#include "nn/attention_isa.h"
#include "sys/cpu.h"
#include "sys/fp16.h"
#include "nn/ops.h"
#include "matmul/quant.h"
#include "nn/sgemm.h"
#include "model/types.h"
#include "nn/vec8.h"

static size_t row_off(const kz_kv_layer *kv, int g, int pos) {
    return ((size_t)g * kv->n_ctx + pos) * kv->head_dim;
}

size_t kz_kv_type_row_bytes(int type, int head_dim) {
    if (head_dim <= 0) return 0;
    switch (type) {
    case KZ_KV_F32: return (size_t)head_dim * 4;
    case KZ_KV_F16: return (size_t)head_dim * 2;
    case KZ_KV_Q8_0: return kz_row_bytes(KZ_T_Q8_0, head_dim);
    }
    return 0;
}

size_t kz_kv_row_bytes(const kz_kv_layer *kv) { return kz_kv_type_row_bytes(kv->type, kv->head_dim); }

void *kz_kv_row(const kz_kv_layer *kv, int which, int g, int pos) {
    return (char *)(which ? kv->v : kv->k) + ((size_t)g * kv->n_ctx + pos) * kz_kv_row_bytes(kv);
}

void kz_kv_store_head(kz_kv_layer *kv, int pos, int g, const float *kg, const float *vg) {
    const int hd = kv->head_dim;
    const size_t o = row_off(kv, g, pos);
    if (kv->type == KZ_KV_F16) {
        /* the active level's f32 -> F16 row conversion (F16C / FCVTN): the reference's bytes */
        const kz_qtraits *f16 = kz_qtraits_get(KZ_T_F16); /* every level has F16 */
        f16->quant(kg, (uint16_t *)kv->k + o, hd);
        f16->quant(vg, (uint16_t *)kv->v + o, hd);
    } else if (kv->type == KZ_KV_Q8_0) {
        /* the reference quantizer (same bytes as llama.cpp's q8_0 cache rows) */
        kz_quant_row(KZ_T_Q8_0, kg, kz_kv_row(kv, 0, g, pos), hd);
        kz_quant_row(KZ_T_Q8_0, vg, kz_kv_row(kv, 1, g, pos), hd);
    } else {
        memcpy((float *)kv->k + o, kg, (size_t)hd * sizeof(float));
        memcpy((float *)kv->v + o, vg, (size_t)hd * sizeof(float));
    }
}

void kz_kv_store(kz_kv_layer *kv, int pos, const float *k, const float *v) {
    const size_t hd = (size_t)kv->head_dim;
    for (int g = 0; g < kv->n_head_kv; g++) kz_kv_store_head(kv, pos, g, k + (size_t)g * hd, v + (size_t)g * hd);
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

/* float view of cached row (g, pos) of K or V: f32 rows in place, others converted into tmp */
static inline const float *row_f32(const kz_kv_layer *kv, int which, int g, int pos, float *tmp) {
    const void *base = which ? kv->v : kv->k;
    const size_t o = row_off(kv, g, pos);
    switch (kv->type) {
    case KZ_KV_F16:
        if (kv->h2f) kv->h2f((const uint16_t *)base + o, tmp, kv->head_dim);
        else kz_h2f_row(tmp, (const uint16_t *)base + o, kv->head_dim);
        return tmp;
    case KZ_KV_Q8_0: kz_dequant_row(KZ_T_Q8_0, kz_kv_row(kv, which, g, pos), tmp, kv->head_dim); return tmp;
    default: return (const float *)base + o;
    }
}

void kz_kv_row_get(const kz_kv_layer *kv, int which, int g, int pos, float *dst) {
    const float *r = row_f32(kv, which, g, pos, dst);
    if (r != dst) memcpy(dst, r, (size_t)kv->head_dim * sizeof(float));
}


/* y += a x, 8 at a time through locals: vectorises even where the compiler cannot prove that
 * x and y do not overlap once inlined */
KZ_AINL void axpy(float *y, float a, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float t[8];
        for (int l = 0; l < 8; l++) t[l] = y[i + l] + a * x[i + l];
        for (int l = 0; l < 8; l++) y[i + l] = t[l];
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* V rows converted to f32 per block of the decode partial (16 x 256 floats stay in L1) */
#define KZ_ATTN_VB 16

size_t kz_attn_scratch_floats(const kz_kv_layer *kv, int n_pos) {
    const size_t n_rep = (size_t)(kv->n_head / kv->n_head_kv);
    return n_rep * (size_t)n_pos + (size_t)KZ_ATTN_VB * (size_t)kv->head_dim;
}

/* The decode partial's arithmetic, on every ISA level: scores are 8 lane sums, each lane
 * s = fma(q_i, k_i, s) over i = l, l + 8, ... in order, reduced by kz_dot8's tree
 * ((a0+a4)+(a1+a5))+((a2+a6)+(a3+a7)), times scale; the PV sums are acc = fma(p_t, v_t, acc) over
 * positions in order. A fused multiply-add rounds once, so an FMA instruction (x86 FMA3, AArch64
 * FMLA) and C's fmaf give the same bits: every level agrees, at half the floating-point
 * instructions of a multiply then an add. Without hardware FMA (x86-64 below AVX2) fmaf is
 * libm's exact software routine: slow, but only the scalar reference runs there. */
/* *acc = fma(*a, *b, *acc) lane by lane (pointers: a vector argument by value draws GCC's
 * psabi note) */
KZ_AINL void fma8(v8f *acc, const v8f *a, const v8f *b) {
    for (int l = 0; l < 8; l++) (*acc)[l] = __builtin_fmaf((*a)[l], (*b)[l], (*acc)[l]);
}

/* the score sum of q and k (n values) before the scale */
KZ_AINL float dot8_fma(const float *q, const float *k, int n) {
    v8f a = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f x = ld8(q + i), y = ld8(k + i);
        fma8(&a, &x, &y);
    }
    float s = hsum8(&a);
    for (; i < n; i++) s = __builtin_fmaf(q[i], k[i], s);
    return s;
}

/* out[r * ldo] = dot8_fma(q + r * ldq, k, n) * scale for r < 4: the four query heads of a group
 * share one pass over the key row */
KZ_AINL void dot8x4(const float *q, size_t ldq, const float *k, int n, float scale, float *out, size_t ldo) {
    const float *qq[4] = {q, q + ldq, q + 2 * ldq, q + 3 * ldq};
    v8f a0 = {0}, a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const v8f kv = ld8(k + i), q0 = ld8(qq[0] + i), q1 = ld8(qq[1] + i), q2 = ld8(qq[2] + i),
                  q3 = ld8(qq[3] + i);
        fma8(&a0, &q0, &kv);
        fma8(&a1, &q1, &kv);
        fma8(&a2, &q2, &kv);
        fma8(&a3, &q3, &kv);
    }
    const v8f a[4] = {a0, a1, a2, a3};
    for (int r = 0; r < 4; r++) {
        float s = hsum8(&a[r]);
        for (int j = i; j < n; j++) s = __builtin_fmaf(qq[r][j], k[j], s);
        out[(size_t)r * ldo] = s * scale;
    }
}

/* y = fma(a, x, y) elementwise */
KZ_AINL void axpy_fma(float *y, float a, const float *x, int n) {
    const v8f av = {a, a, a, a, a, a, a, a};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f t = ld8(y + i);
        const v8f xv = ld8(x + i);
        fma8(&t, &av, &xv);
        st8(y + i, &t);
    }
    for (; i < n; i++) y[i] = __builtin_fmaf(a, x[i], y[i]);
}

/* acc_r[c] = fma(w_r[j], v_j[c], acc_r[c]) for 4 heads r, j = 0..nb-1 in order: 16 columns of
 * the 4 heads stay in registers while the block's rows stream by, instead of a load + store of
 * acc per head and row */
KZ_AINL void axpy_block4(float *acc, int hd, const float *w, size_t ldw, const float *const *v, int nb) {
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
        float *y0 = acc + c, *y1 = y0 + hd, *y2 = y1 + hd, *y3 = y2 + hd;
        v8f x0 = ld8(y0), x1 = ld8(y1), x2 = ld8(y2), x3 = ld8(y3);
        v8f z0 = ld8(y0 + 8), z1 = ld8(y1 + 8), z2 = ld8(y2 + 8), z3 = ld8(y3 + 8);
        for (int j = 0; j < nb; j++) {
            const v8f va = ld8(v[j] + c), vb = ld8(v[j] + c + 8);
            const float w0 = w[j], w1 = w[ldw + j], w2 = w[2 * ldw + j], w3 = w[3 * ldw + j];
            const v8f b0 = {w0, w0, w0, w0, w0, w0, w0, w0}, b1 = {w1, w1, w1, w1, w1, w1, w1, w1};
            const v8f b2 = {w2, w2, w2, w2, w2, w2, w2, w2}, b3 = {w3, w3, w3, w3, w3, w3, w3, w3};
            fma8(&x0, &b0, &va);
            fma8(&z0, &b0, &vb);
            fma8(&x1, &b1, &va);
            fma8(&z1, &b1, &vb);
            fma8(&x2, &b2, &va);
            fma8(&z2, &b2, &vb);
            fma8(&x3, &b3, &va);
            fma8(&z3, &b3, &vb);
        }
        st8(y0, &x0), st8(y1, &x1), st8(y2, &x2), st8(y3, &x3);
        st8(y0 + 8, &z0), st8(y1 + 8, &z1), st8(y2 + 8, &z2), st8(y3 + 8, &z3);
    }
    for (; c < hd; c++)
        for (int r = 0; r < 4; r++) {
            float x = acc[(size_t)r * hd + c];
            for (int j = 0; j < nb; j++) x = __builtin_fmaf(w[(size_t)r * ldw + j], v[j][c], x);
            acc[(size_t)r * hd + c] = x;
        }
}

KZ_AINL void attn_partial_body(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch) {
    const int hd = kv->head_dim, n_rep = kv->n_head / kv->n_head_kv, n = p1 - p0;
    memset(acc, 0, (size_t)n_rep * hd * sizeof(float));
    if (n <= 0) {
        for (int r = 0; r < n_rep; r++) { ml[2 * r] = -INFINITY; ml[2 * r + 1] = 0.0f; }
        return;
    }
    float *sc = scratch, *tmp = scratch + (size_t)n_rep * n; /* sc[r*n + t]; tmp: KZ_ATTN_VB rows */
    const int r4 = n_rep & ~3;
    for (int t = 0; t < n; t++) {
        const float *kr = row_f32(kv, 0, g, p0 + t, tmp);
        for (int r = 0; r < r4; r += 4) dot8x4(q + (size_t)r * ldq, ldq, kr, hd, scale, sc + (size_t)r * n + t, (size_t)n);
        for (int r = r4; r < n_rep; r++) sc[(size_t)r * n + t] = dot8_fma(q + (size_t)r * ldq, kr, hd) * scale;
    }
    kz_attn_softmax_partial(sc, n_rep, n, ml);
    for (int t0 = 0; t0 < n; t0 += KZ_ATTN_VB) {
        const int nb = n - t0 < KZ_ATTN_VB ? n - t0 : KZ_ATTN_VB;
        const float *vr[KZ_ATTN_VB];
        for (int j = 0; j < nb; j++) vr[j] = row_f32(kv, 1, g, p0 + t0 + j, tmp + (size_t)j * hd);
        for (int r = 0; r < r4; r += 4) axpy_block4(acc + (size_t)r * hd, hd, sc + (size_t)r * n + t0, (size_t)n, vr, nb);
        for (int r = r4; r < n_rep; r++)
            for (int j = 0; j < nb; j++) axpy_fma(acc + (size_t)r * hd, sc[(size_t)r * n + t0 + j], vr[j], hd);
    }
}

/* one body, twice: build flags, and AVX2 + FMA on x86-64 (8-lane loops in one ymm, the fmaf
 * lanes one VFMADD; the AVX2 level implies FMA, cpu.c): same bits, chosen from the active ISA
 * level */
static void attn_partial_plain(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch) { attn_partial_body(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) static void attn_partial_avx2(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch) { attn_partial_body(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch); }
#endif

void kz_attn_partial(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                     float *ml, float *acc, float *scratch) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kz_isa_active() == KZ_ISA_AVX512 && kz_attn_partial_avx512(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch))
        return;
    if (kz_isa_has_avx2(kz_isa_active())) {
        attn_partial_avx2(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch);
        return;
    }
#elif defined(__aarch64__)
    if (kz_isa_active() >= KZ_ISA_NEON && kz_attn_partial_neon(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch)) return;
#endif
    attn_partial_plain(kv, g, p0, p1, q, ldq, scale, ml, acc, scratch);
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
            const float w = kz_exp(p[0] - mx);
            l += (double)w * p[1];
            axpy(o, w, acc + ((size_t)i * n_rep + r) * hd, hd);
        }
        kz_scale(o, hd, (float)(1.0 / l));
    }
}

size_t kz_attn_tile_scratch_floats(const kz_kv_layer *kv, int nt) {
    const size_t hd = (size_t)kv->head_dim, nq = (size_t)nt * (size_t)(kv->n_head / kv->n_head_kv);
    /* Q, acc: nq x hd; K^T: hd x BK; V (also the K rows before their transpose): BK x hd;
     * scores: nq x BK; max, sum, rescale: nq */
    return 2 * nq * hd + 2 * hd * KZ_ATTN_BK + nq * KZ_ATTN_BK + 3 * nq;
}

void kz_attn_tile(const kz_kv_layer *kv, int g, int pos0, int nt, const float *q, size_t ldq_t, size_t ldq_r,
                  float scale, float *out, size_t ldo_t, float *scratch) {
    const int hd = kv->head_dim, n_rep = kv->n_head / kv->n_head_kv, nq = nt * n_rep, BK = KZ_ATTN_BK;
    float *Q = scratch, *acc = Q + (size_t)nq * hd, *KT = acc + (size_t)nq * hd, *Vb = KT + (size_t)hd * BK;
    float *S = Vb + (size_t)BK * hd, *mx = S + (size_t)nq * BK, *sum = mx + nq, *rs = sum + nq;
    /* query row i = t * n_rep + r, pre-scaled */
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < n_rep; r++) {
            const float *src = q + (size_t)t * ldq_t + (size_t)r * ldq_r;
            kz_scale_to(Q + ((size_t)t * n_rep + r) * hd, src, scale, hd);
        }
    memset(acc, 0, (size_t)nq * hd * sizeof(float));
    for (int i = 0; i < nq; i++) { mx[i] = -INFINITY; sum[i] = 0.0f; }
    const int kend = pos0 + nt; /* the last query sees positions < kend */
    for (int k0 = 0; k0 < kend; k0 += BK) {
        const int nb = kend - k0 < BK ? kend - k0 : BK;
        /* K rows -> K^T block (f32): rows to f32 in the V buffer (free until the V rows come),
         * then transposed in 8 x 8 tiles (a column-at-a-time write touches hd lines per row) */
        for (int j = 0; j < nb; j++) {
            float *kr = Vb + (size_t)j * hd;
            const float *src = row_f32(kv, 0, g, k0 + j, kr);
            if (src != kr) memcpy(kr, src, (size_t)hd * sizeof(float));
        }
        kz_transpose(KT, BK, Vb, (size_t)hd, nb, hd);
        kz_sgemm(nq, nb, hd, Q, (size_t)hd, KT, BK, S, BK, 1.0f, NULL, 0.0f, KZ_TRI_NONE);
        /* causal mask + online softmax: query token t sees k0 + j <= pos0 + t */
        for (int i = 0; i < nq; i++) {
            float *si = S + (size_t)i * BK;
            int nv = pos0 + i / n_rep - k0 + 1;
            if (nv > nb) nv = nb;
            if (nv <= 0) { /* nothing visible in this block (not reached: blocks start at 0) */
                memset(si, 0, (size_t)nb * sizeof(float));
                rs[i] = 1.0f;
                continue;
            }
            const float m = kz_row_max(si, mx[i], nv);
            rs[i] = kz_exp(mx[i] - m); /* exp(-inf) = 0 on the first block */
            const float l = (float)kz_exp_sum(si, m, nv);
            for (int j = nv; j < nb; j++) si[j] = 0.0f;
            sum[i] = sum[i] * rs[i] + l;
            mx[i] = m;
        }
        for (int j = 0; j < nb; j++) { /* V rows (f32) */
            float *vr = Vb + (size_t)j * hd;
            const float *src = row_f32(kv, 1, g, k0 + j, vr);
            if (src != vr) memcpy(vr, src, (size_t)hd * sizeof(float));
        }
        for (int i = 0; i < nq; i++)
            if (rs[i] != 1.0f) kz_scale(acc + (size_t)i * hd, hd, rs[i]);
        kz_sgemm(nq, hd, nb, S, BK, Vb, (size_t)hd, acc, (size_t)hd, 1.0f, NULL, 1.0f, KZ_TRI_NONE);
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < n_rep; r++) {
            const int i = t * n_rep + r;
            kz_scale_to(out + (size_t)t * ldo_t + (size_t)r * hd, acc + (size_t)i * hd, 1.0f / sum[i], hd);
        }
}

void kz_attn_head(const kz_kv_layer *kv, int h, int pos, const float *q, float scale, float *out,
                  float *scratch) {
    const int hd = kv->head_dim, n = pos + 1;
    const int g = h / (kv->n_head / kv->n_head_kv);
    float *sc = scratch, *tmp = scratch + n;
    for (int t = 0; t < n; t++) {
        const float *kr = row_f32(kv, 0, g, t, tmp);
        sc[t] = kz_dot(q, kr, hd) * scale;
    }
    kz_softmax(sc, n);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *vr = row_f32(kv, 1, g, t, tmp);
        axpy(out, sc[t], vr, hd);
    }
}
