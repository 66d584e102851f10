#include <math.h>
#include <stdint.h>
#include <string.h>
#include "sys/cpu.h"
#include "nn/gdn.h"
#include "nn/ops.h"
#include "nn/vec8.h"

/* The conv in blocks of channels: the block's taps transposed to [K][cb] and its state to rows
 * [K-1][cb], so that for every token the K input rows are contiguous runs of the block and the
 * sum over taps vectorises across channels (8 at a time). Tokens inner: the block's rows of the
 * last K tokens stay in L1, and a block is CONV_W / K channels (4 KiB of a row for K = 4) so the
 * hardware prefetcher follows each row run. Per channel the sum is w[K-1] x_t + w[0] x_{t-K+1}
 * + ... in that order whatever the token's position, so prefill and decode agree bit for bit. */
#define CONV_W 4096 /* floats of each stack buffer */
#define CONV_KMAX 16

/* more than CONV_KMAX taps: channel at a time, same sum order */
static void conv_plain(int c0, int c1, int T, int K, const float *x, size_t ldx, float *y, size_t ldy,
                       const float *w, const float *state) {
    const int ks = K - 1;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * ldx;
        float *yt = y + (size_t)t * ldy;
        for (int c = c0; c < c1; c++) {
            const float *wc = w + (size_t)c * K;
            const float *st = state + (size_t)c * ks;
            float acc = wc[ks] * xt[c];
            for (int i = 0; i < ks; i++) {
                const int src = t - ks + i; /* token index of tap i; < 0 -> state */
                const float xv = src < 0 ? st[ks + src] : x[(size_t)src * ldx + c];
                acc += wc[i] * xv;
            }
            yt[c] = kz_silu(acc);
        }
    }
}

static void conv_blocked(int c0, int c1, int T, int K, const float *x, size_t ldx, float *y, size_t ldy,
                         const float *w, const float *state) {
    const int ks = K - 1, CB = CONV_W / K & ~7;
    float wT[CONV_W], hist[CONV_W]; /* [K][CB], [K-1][CB] */
    for (int cb = c0; cb < c1; cb += CB) {
        const int nc = c1 - cb < CB ? c1 - cb : CB;
        for (int c = 0; c < nc; c++) {
            for (int i = 0; i < K; i++) wT[i * CB + c] = w[(size_t)(cb + c) * K + i];
            for (int i = 0; i < ks; i++) hist[i * CB + c] = state[(size_t)(cb + c) * ks + i];
        }
        for (int t = 0; t < T; t++) {
            const float *tap[CONV_KMAX];
            for (int i = 0; i < ks; i++) {
                const int src = t - ks + i;
                tap[i] = src < 0 ? hist + (ks + src) * CB : x + (size_t)src * ldx + cb;
            }
            const float *xt = x + (size_t)t * ldx + cb, *wl = wT + ks * CB;
            float *yt = y + (size_t)t * ldy + cb;
            int c = 0;
            for (; c + 8 <= nc; c += 8) {
                float a[8];
                for (int l = 0; l < 8; l++) a[l] = wl[c + l] * xt[c + l];
                for (int i = 0; i < ks; i++) {
                    const float *wi = wT + i * CB + c, *xi = tap[i] + c;
                    for (int l = 0; l < 8; l++) a[l] += wi[l] * xi[l];
                }
                for (int l = 0; l < 8; l++) yt[c + l] = kz_silu(a[l]);
            }
            for (; c < nc; c++) {
                float acc = wl[c] * xt[c];
                for (int i = 0; i < ks; i++) acc += wT[i * CB + c] * tap[i][c];
                yt[c] = kz_silu(acc);
            }
        }
    }
}

/* decode, K = 4, channels c .. c+7: the taps and state of 8 channels are 32 and 24 consecutive
 * floats ([C][4] and [C][3]); they are dealt into one vector per tap by shuffles, so the sum runs
 * across channels, in the scalar loop's order per channel (w3 x + w0 s0 + w1 s1 + w2 s2). The new
 * state is the old one moved by one float with x put in every third place. */
static inline __attribute__((always_inline)) void conv8_k4(const float *x, float *y, const float *w, float *st) {
    const v8f w0 = ld8(w), w1 = ld8(w + 8), w2 = ld8(w + 16), w3 = ld8(w + 24);
    const v8f s0 = ld8(st), s1 = ld8(st + 8), s2 = ld8(st + 16), xv = ld8(x);
#define KZ_TAP(i)                                                                              \
    __builtin_shufflevector(__builtin_shufflevector(w0, w1, i, i + 4, i + 8, i + 12, 0, 0, 0, 0), \
                            __builtin_shufflevector(w2, w3, i, i + 4, i + 8, i + 12, 0, 0, 0, 0), 0, 1, 2, 3, 8, 9, 10, 11)
    const v8f t0 = KZ_TAP(0), t1 = KZ_TAP(1), t2 = KZ_TAP(2), t3 = KZ_TAP(3);
#undef KZ_TAP
    /* state j of channel l is st[3l + j] */
    const v8f a0 = __builtin_shufflevector(__builtin_shufflevector(s0, s1, 0, 3, 6, 9, 12, 15, 0, 0), s2, 0, 1, 2, 3, 4, 5, 10, 13);
    const v8f a1 = __builtin_shufflevector(__builtin_shufflevector(s0, s1, 1, 4, 7, 10, 13, 0, 0, 0), s2, 0, 1, 2, 3, 4, 8, 11, 14);
    const v8f a2 = __builtin_shufflevector(__builtin_shufflevector(s0, s1, 2, 5, 8, 11, 14, 0, 0, 0), s2, 0, 1, 2, 3, 4, 9, 12, 15);
    v8f acc = t3 * xv;
    acc += t0 * a0;
    acc += t1 * a1;
    acc += t2 * a2;
    st8(y, &acc);
    const v8f o0 = __builtin_shufflevector(__builtin_shufflevector(s0, s1, 1, 2, 3, 4, 5, 6, 7, 8), xv, 0, 1, 8, 3, 4, 9, 6, 7);
    const v8f o1 = __builtin_shufflevector(__builtin_shufflevector(s1, s2, 1, 2, 3, 4, 5, 6, 7, 8), xv, 10, 1, 2, 11, 4, 5, 12, 7);
    const v8f o2 = __builtin_shufflevector(__builtin_shufflevector(s2, s2, 1, 2, 3, 4, 5, 6, 7, 0), xv, 0, 13, 2, 3, 14, 5, 6, 15);
    st8(st, &o0);
    st8(st + 8, &o1);
    st8(st + 16, &o2);
}

/* decode (one token): the taps read in place, then SiLU over the row (kz_silu_row, the same
 * kz_silu per element). The transposed copies of conv_blocked cost more than the conv itself for
 * a single token. Same sum order: w[K-1] x + w[0] s[0] + ... + w[K-2] s[K-2]. Built twice on
 * x86-64 (baseline and AVX2), same bits. */
static inline __attribute__((always_inline)) void conv_one_body(int c0, int c1, int K, const float *x, float *y,
                                                                const float *w, float *state) {
    const int ks = K - 1;
    int c = c0;
    if (K == 4)
        for (; c + 8 <= c1; c += 8) conv8_k4(x + c, y + c, w + (size_t)c * 4, state + (size_t)c * 3);
    for (; c < c1; c++) {
        float *st = state + (size_t)c * ks;
        float acc = w[(size_t)c * K + ks] * x[c];
        for (int i = 0; i < ks; i++) acc += w[(size_t)c * K + i] * st[i];
        y[c] = acc;
        /* the state moves on by one input in place (a memmove call per channel cost more than
         * the conv) */
        for (int i = 0; i + 1 < ks; i++) st[i] = st[i + 1];
        if (ks > 0) st[ks - 1] = x[c];
    }
}
static void conv_one_plain(int c0, int c1, int K, const float *x, float *y, const float *w, float *state) {
    conv_one_body(c0, c1, K, x, y, w, state);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void conv_one_avx2(int c0, int c1, int K, const float *x, float *y,
                                                          const float *w, float *state) {
    conv_one_body(c0, c1, K, x, y, w, state);
}
#endif
static void conv_one(int c0, int c1, int K, const float *x, float *y, const float *w, float *state) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kz_isa_has_avx2(kz_isa_active())) conv_one_avx2(c0, c1, K, x, y, w, state);
    else
#endif
        conv_one_plain(c0, c1, K, x, y, w, state);
    kz_silu_row(y + c0, y + c0, c1 - c0);
}

void kz_gdn_conv(int c0, int c1, int T, int K, const float *x, size_t ldx, float *y, size_t ldy,
                 const float *w, float *state) {
    const int ks = K - 1;
    if (T == 1) {
        conv_one(c0, c1, K, x, y, w, state); /* state updated there */
        return;
    }
    if (K <= CONV_KMAX) conv_blocked(c0, c1, T, K, x, ldx, y, ldy, w, state);
    else conv_plain(c0, c1, T, K, x, ldx, y, ldy, w, state);
    /* new state = last K-1 raw inputs of [state, x_0..x_{T-1}] */
    for (int c = c0; c < c1; c++) {
        float *st = state + (size_t)c * ks;
        if (T >= ks) {
            for (int i = 0; i < ks; i++) st[i] = x[(size_t)(T - ks + i) * ldx + c];
        } else {
            memmove(st, st + T, (size_t)(ks - T) * sizeof(float));
            for (int i = 0; i < T; i++) st[ks - T + i] = x[(size_t)i * ldx + c];
        }
    }
}

void kz_gdn_qk_norm(float *row, int n_k_heads, int dk, float eps) {
    const float qs = 1.0f / sqrtf((float)dk);
    for (int h = 0; h < n_k_heads; h++) {
        float *q = row + (size_t)h * dk;
        kz_l2norm(q, dk, eps);
        kz_scale(q, dk, qs);
        kz_l2norm(row + (size_t)(n_k_heads + h) * dk, dk, eps);
    }
}

void kz_gdn_gates(int n, const float *b, const float *a, const float *dt_bias, const float *ssm_a,
                  float *beta, float *g) {
    for (int j = 0; j < n; j++) {
        const float bj = b[j], aj = a[j];
        beta[j] = kz_sigmoid(bj);
        g[j] = ssm_a[j] * kz_softplus(aj + dt_bias[j]);
    }
}


/* ---------------- the decode step (recurrent form) ----------------
 * Per value head j and token, for each row r of M (column r of S, dk floats):
 *     kv = decay * dot(row, k);  d = beta * (v[r] - kv)
 *     row[i] = fma(row[i], decay, d * k[i]);  out[r] = dot(row, q)   (the updated row)
 * where dot is 16 lane sums of fused multiply-adds (lane i % 16, i in order) reduced by
 * hsum16, then the tail (dk % 16 elements) fused into the sum in order. Every ISA level
 * computes exactly this (one rounding per fma, as fmaf), so they agree bit for bit; 16 lanes
 * are one AVX-512, two AVX2 or four NEON registers. The state is read and written once per
 * token, row by row. */

/* the 16 lane sums reduced: h[l] = a[l] + a[l + 8], then kz_dot8's tree over h (hsum8) */
static inline float hsum16(const float *a) {
    const v8f h = ld8(a) + ld8(a + 8);
    return hsum8(&h);
}

static float dot16(const float *a, const float *b, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
    float s = hsum16(acc);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* row = fma(row, decay, d * k), returns dot16(row, q) of the new row */
static float update_dot16(float *restrict row, const float *restrict k, const float *restrict q, float decay,
                          float d, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            const float x = fmaf(row[i + l], decay, d * k[i + l]);
            row[i + l] = x;
            acc[l] = fmaf(x, q[i + l], acc[l]);
        }
    float s = hsum16(acc);
    for (; i < n; i++) {
        const float x = fmaf(row[i], decay, d * k[i]);
        row[i] = x;
        s = fmaf(x, q[i], s);
    }
    return s;
}

/* one head, the reference: row at a time */
static void head_plain(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt, float *ot,
                       float decay, float bt) {
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        const float kv = decay * dot16(row, kt, dk);
        const float d = bt * (vt[r] - kv);
        ot[r] = update_dot16(row, kt, qt, decay, d, dk);
    }
}

/* software prefetch of the state KZ_GDN_PF rows ahead (4 KiB at dk = 128; 0 = off): the
 * hardware streamer stops at every 4 KiB page, where one thread's state stream from DRAM
 * would stall (distance tuned: docs/PERFORMANCE.md) */
#ifndef KZ_GDN_PF
#define KZ_GDN_PF 8
#endif
/* and a second prefetch, into L2, KZ_GDN_PF_L2 rows ahead (16 KiB at dk = 128; 0 = off): the L1
 * lead alone keeps too few lines in flight for a stream that is read and written back (the
 * fill buffers hold the L1 prefetches until their lines arrive; tuned: docs/PERFORMANCE.md) */
#ifndef KZ_GDN_PF_L2
#define KZ_GDN_PF_L2 32
#endif

/* The SIMD heads (dk % 16 == 0) are software-pipelined: row r's update + read-out runs in the
 * same loop as row r + 1's dot (of its old values), so two sum chains are in flight; on the
 * last row the second dot is a throw-away of the row itself (in L1). One ascending stream per
 * head, which the hardware prefetcher and the prefetch ahead of the current row follow. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define T_GDN512 __attribute__((target("avx512f,avx2,fma")))
#define T_GDN256 __attribute__((target("avx2,fma")))

/* kz_dot8's tree over the 8 lanes of h: vec8.h's hsum8 in three vector adds (GCC builds hsum8
 * on a cast __m256 as seven scalar adds and eight shuffles, twice per state row here) */
T_GDN256 static inline float hsum8_256(__m256 h) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)); /* h[l] + h[l+4] */
    const __m128 u = _mm_add_ps(t, _mm_movehdup_ps(t));                                   /* t0+t1, t2+t3 */
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)));
}

/* the state prefetches of the 64-byte line at column i, KZ_GDN_PF and KZ_GDN_PF_L2 rows ahead
 * of row; past the last row they touch the next head (a prefetch never faults) */
static inline __attribute__((always_inline)) void state_prefetch(const float *row, int dk, int i) {
    (void)row, (void)dk, (void)i;
#if KZ_GDN_PF
    _mm_prefetch((const char *)(row + (size_t)KZ_GDN_PF * dk + i), _MM_HINT_T0);
#endif
#if KZ_GDN_PF_L2
    _mm_prefetch((const char *)(row + (size_t)KZ_GDN_PF_L2 * dk + i), _MM_HINT_T1);
#endif
}

T_GDN512 static inline float hsum16_512(__m512 a) {
    const __m256 lo = _mm512_castps512_ps256(a), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return hsum8_256(_mm256_add_ps(lo, hi));
}

T_GDN512 static void head_avx512(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt,
                                 float *ot, float decay, float bt) {
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < dk; i += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(M + i), _mm512_loadu_ps(kt + i), a);
    const __m512 dec = _mm512_set1_ps(decay);
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        const float kv = decay * hsum16_512(a);
        const __m512 d = _mm512_set1_ps(bt * (vt[r] - kv));
        const float *nx = r + 1 < dv ? row + dk : row;
        __m512 b = _mm512_setzero_ps();
        a = _mm512_setzero_ps();
        for (int i = 0; i < dk; i += 16) {
            state_prefetch(row, dk, i);
            const __m512 k = _mm512_loadu_ps(kt + i);
            const __m512 x = _mm512_fmadd_ps(_mm512_loadu_ps(row + i), dec, _mm512_mul_ps(d, k));
            _mm512_storeu_ps(row + i, x);
            b = _mm512_fmadd_ps(x, _mm512_loadu_ps(qt + i), b);
            a = _mm512_fmadd_ps(_mm512_loadu_ps(nx + i), k, a);
        }
        ot[r] = hsum16_512(b);
    }
}

/* the 16 lanes as two registers: lo = lanes 0-7, hi = lanes 8-15 */
T_GDN256 static void head_avx2(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt,
                               float *ot, float decay, float bt) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int i = 0; i < dk; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(M + i), _mm256_loadu_ps(kt + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(M + i + 8), _mm256_loadu_ps(kt + i + 8), a1);
    }
    const __m256 dec = _mm256_set1_ps(decay);
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        const float kv = decay * hsum8_256(_mm256_add_ps(a0, a1));
        const __m256 d = _mm256_set1_ps(bt * (vt[r] - kv));
        const float *nx = r + 1 < dv ? row + dk : row;
        __m256 b0 = _mm256_setzero_ps(), b1 = b0;
        a0 = a1 = _mm256_setzero_ps();
        for (int i = 0; i < dk; i += 16) {
            state_prefetch(row, dk, i);
            const __m256 k0 = _mm256_loadu_ps(kt + i), k1 = _mm256_loadu_ps(kt + i + 8);
            const __m256 x0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), dec, _mm256_mul_ps(d, k0));
            const __m256 x1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + i + 8), dec, _mm256_mul_ps(d, k1));
            _mm256_storeu_ps(row + i, x0);
            _mm256_storeu_ps(row + i + 8, x1);
            b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(qt + i), b0);
            b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(qt + i + 8), b1);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(nx + i), k0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(nx + i + 8), k1, a1);
        }
        ot[r] = hsum8_256(_mm256_add_ps(b0, b1));
    }
}
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
/* the 16 lanes as four registers q0..q3 (lanes 0-3, ..., 12-15): h = [q0 + q2 | q1 + q3] */
static inline float hsum16_neon(float32x4_t q0, float32x4_t q1, float32x4_t q2, float32x4_t q3) {
    const float32x4_t t = vaddq_f32(vaddq_f32(q0, q2), vaddq_f32(q1, q3)); /* h[l] + h[l+4] */
    const float32x2_t u = vpadd_f32(vget_low_f32(t), vget_high_f32(t));   /* t0+t1, t2+t3 */
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}

static void head_neon(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt, float *ot,
                      float decay, float bt) {
    float32x4_t a[4];
    for (int l = 0; l < 4; l++) a[l] = vdupq_n_f32(0.0f);
    for (int i = 0; i < dk; i += 16)
        for (int l = 0; l < 4; l++) a[l] = vfmaq_f32(a[l], vld1q_f32(M + i + 4 * l), vld1q_f32(kt + i + 4 * l));
    const float32x4_t dec = vdupq_n_f32(decay);
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        const float kv = decay * hsum16_neon(a[0], a[1], a[2], a[3]);
        const float32x4_t d = vdupq_n_f32(bt * (vt[r] - kv));
        const float *nx = r + 1 < dv ? row + dk : row;
        float32x4_t b[4];
        for (int l = 0; l < 4; l++) b[l] = a[l] = vdupq_n_f32(0.0f);
        for (int i = 0; i < dk; i += 16) {
#if KZ_GDN_PF
            __builtin_prefetch(row + (size_t)KZ_GDN_PF * dk + i, 0, 3);
#endif
            for (int l = 0; l < 4; l++) {
                const float32x4_t k = vld1q_f32(kt + i + 4 * l);
                /* vfmaq_f32(c, a, b) = c + a * b, rounded once */
                const float32x4_t x = vfmaq_f32(vmulq_f32(d, k), vld1q_f32(row + i + 4 * l), dec);
                vst1q_f32(row + i + 4 * l, x);
                b[l] = vfmaq_f32(b[l], x, vld1q_f32(qt + i + 4 * l));
                a[l] = vfmaq_f32(a[l], vld1q_f32(nx + i + 4 * l), k);
            }
        }
        ot[r] = hsum16_neon(b[0], b[1], b[2], b[3]);
    }
}
#endif

/* ---------------- a few tokens, row by row (kz_gdn_recurrent_rows) ----------------
 * One state row r of a head depends only on itself and the tokens' k, q, v[r], decay, beta, so
 * it can take all T tokens while it sits in L1 (its update fused with the next token's dot),
 * and the state is streamed once for the T tokens. The same operations per row and token as
 * the heads above: the same bits. */
typedef struct {
    const float *k[KZ_GDN_ROWS_T], *q[KZ_GDN_ROWS_T], *v[KZ_GDN_ROWS_T];
    float *o[KZ_GDN_ROWS_T];
    float dec[KZ_GDN_ROWS_T], bt[KZ_GDN_ROWS_T];
    int T;
} rows_in;

static void rows_plain(const float *src, float *M, float *snap, int dk, int dv, const rows_in *in) {
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        if (snap) memcpy(snap + (size_t)r * dk, src + (size_t)r * dk, (size_t)dk * sizeof(float));
        if (src != M) memcpy(row, src + (size_t)r * dk, (size_t)dk * sizeof(float));
        for (int t = 0; t < in->T; t++) {
            const float kv = in->dec[t] * dot16(row, in->k[t], dk);
            in->o[t][r] = update_dot16(row, in->k[t], in->q[t], in->dec[t], in->bt[t] * (in->v[t][r] - kv), dk);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* R rows side by side: each row's chain (a dot, a horizontal sum, the next token's scalar
 * step, ...) is latency-bound, so R independent chains overlap. Per row the same operations in
 * the same order. With the state read from another buffer (a verify: gdn_layer.c), the rows'
 * last token goes out by streaming stores (the next step reads it back from DRAM anyway: it is
 * far larger than the caches), the tokens before it to an L1 scratch: no read of the written
 * lines. The snapshot (read back only by a rollback) by streaming stores where it is 64-byte
 * aligned. */
#define ROWS_SCR_DK 256
T_GDN512 static inline __attribute__((always_inline)) void rows_avx512_r(const int R, const float *src, float *M,
                                                                         float *snap, const int nt, const int so,
                                                                         int dk, const rows_in *in) {
    __m512 a[4], b[4], d[4];
    float scr[4 * ROWS_SCR_DK] __attribute__((aligned(64)));
#pragma GCC unroll 4
    for (int j = 0; j < R; j++) a[j] = _mm512_setzero_ps();
    for (int i = 0; i < dk; i += 16) {
        const __m512 k0 = _mm512_loadu_ps(in->k[0] + i);
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) {
            const float *rs = src + (size_t)j * dk;
            state_prefetch(rs, dk, i);
            const __m512 x = _mm512_loadu_ps(rs + i);
            if (nt) _mm512_stream_ps(snap + (size_t)j * dk + i, x);
            else if (snap) _mm512_storeu_ps(snap + (size_t)j * dk + i, x);
            a[j] = _mm512_fmadd_ps(x, k0, a[j]);
        }
    }
    const float *rd = src;
    for (int t = 0; t < in->T; t++) {
        const __m512 dec = _mm512_set1_ps(in->dec[t]);
        const int last = t + 1 == in->T, stream = so && last;
        float *wr = so && !last ? scr : M; /* rows at wr + j * dk */
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) {
            const float kv = in->dec[t] * hsum16_512(a[j]);
            d[j] = _mm512_set1_ps(in->bt[t] * (in->v[t][j] - kv));
            a[j] = b[j] = _mm512_setzero_ps();
        }
        const float *kt = in->k[t], *qt = in->q[t];
        const float *kn = !last ? in->k[t + 1] : kt; /* last token: a throw-away dot */
        for (int i = 0; i < dk; i += 16) {
            const __m512 k = _mm512_loadu_ps(kt + i), q = _mm512_loadu_ps(qt + i), n = _mm512_loadu_ps(kn + i);
#pragma GCC unroll 4
            for (int j = 0; j < R; j++) {
                const __m512 x = _mm512_fmadd_ps(_mm512_loadu_ps(rd + (size_t)j * dk + i), dec, _mm512_mul_ps(d[j], k));
                if (stream) _mm512_stream_ps(wr + (size_t)j * dk + i, x);
                else _mm512_storeu_ps(wr + (size_t)j * dk + i, x);
                b[j] = _mm512_fmadd_ps(x, q, b[j]);
                a[j] = _mm512_fmadd_ps(x, n, a[j]);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) in->o[t][j] = hsum16_512(b[j]);
        rd = wr;
    }
}

T_GDN512 static void rows_avx512(const float *src, float *M, float *snap, int dk, int dv, const rows_in *in) {
    const int nt = snap && !((uintptr_t)snap & 63) && !(((size_t)dk * sizeof(float)) & 63);
    const int so = src != M && !((uintptr_t)M & 63) && !(((size_t)dk * sizeof(float)) & 63) && dk <= ROWS_SCR_DK;
    rows_in g = *in;
    for (int r = 0; r < dv;) {
        const int R = dv - r >= 4 ? 4 : 1;
        const size_t o = (size_t)r * dk;
        if (R == 4) rows_avx512_r(4, src + o, M + o, snap ? snap + o : NULL, nt, so, dk, &g);
        else rows_avx512_r(1, src + o, M + o, snap ? snap + o : NULL, nt, so, dk, &g);
        for (int t = 0; t < g.T; t++) g.v[t] += R, g.o[t] += R;
        r += R;
    }
    if (nt || so) _mm_sfence(); /* the streamed lines before the dispatch ends */
}

T_GDN256 static void rows_avx2(const float *src, float *M, float *snap, int dk, int dv, const rows_in *in) {
    const int nt = snap && !((uintptr_t)snap & 31) && !(((size_t)dk * sizeof(float)) & 31);
    for (int r = 0; r < dv; r++) {
        const float *rs = src + (size_t)r * dk;
        float *row = M + (size_t)r * dk, *sn = snap ? snap + (size_t)r * dk : NULL;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int i = 0; i < dk; i += 16) {
            state_prefetch(rs, dk, i);
            const __m256 x0 = _mm256_loadu_ps(rs + i), x1 = _mm256_loadu_ps(rs + i + 8);
            if (nt) {
                _mm256_stream_ps(sn + i, x0);
                _mm256_stream_ps(sn + i + 8, x1);
            } else if (sn) {
                _mm256_storeu_ps(sn + i, x0);
                _mm256_storeu_ps(sn + i + 8, x1);
            }
            a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(in->k[0] + i), a0);
            a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(in->k[0] + i + 8), a1);
        }
        for (int t = 0; t < in->T; t++) {
            const float kv = in->dec[t] * hsum8_256(_mm256_add_ps(a0, a1));
            const __m256 d = _mm256_set1_ps(in->bt[t] * (in->v[t][r] - kv)), dec = _mm256_set1_ps(in->dec[t]);
            const float *rd = t ? row : rs, *kt = in->k[t], *qt = in->q[t];
            const float *kn = t + 1 < in->T ? in->k[t + 1] : kt;
            __m256 b0 = _mm256_setzero_ps(), b1 = b0;
            a0 = a1 = _mm256_setzero_ps();
            for (int i = 0; i < dk; i += 16) {
                const __m256 k0 = _mm256_loadu_ps(kt + i), k1 = _mm256_loadu_ps(kt + i + 8);
                const __m256 x0 = _mm256_fmadd_ps(_mm256_loadu_ps(rd + i), dec, _mm256_mul_ps(d, k0));
                const __m256 x1 = _mm256_fmadd_ps(_mm256_loadu_ps(rd + i + 8), dec, _mm256_mul_ps(d, k1));
                _mm256_storeu_ps(row + i, x0);
                _mm256_storeu_ps(row + i + 8, x1);
                b0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(qt + i), b0);
                b1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(qt + i + 8), b1);
                a0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(kn + i), a0);
                a1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(kn + i + 8), a1);
            }
            in->o[t][r] = hsum8_256(_mm256_add_ps(b0, b1));
        }
    }
    if (nt) _mm_sfence();
}
#endif

#if defined(__aarch64__)
static void rows_neon(const float *src, float *M, float *snap, int dk, int dv, const rows_in *in) {
    for (int r = 0; r < dv; r++) {
        const float *rs = src + (size_t)r * dk;
        float *row = M + (size_t)r * dk, *sn = snap ? snap + (size_t)r * dk : NULL;
        float32x4_t a[4];
        for (int l = 0; l < 4; l++) a[l] = vdupq_n_f32(0.0f);
        for (int i = 0; i < dk; i += 16) {
#if KZ_GDN_PF
            __builtin_prefetch(rs + (size_t)KZ_GDN_PF * dk + i, 0, 3);
#endif
            for (int l = 0; l < 4; l++) {
                const float32x4_t x = vld1q_f32(rs + i + 4 * l);
                if (sn) vst1q_f32(sn + i + 4 * l, x);
                a[l] = vfmaq_f32(a[l], x, vld1q_f32(in->k[0] + i + 4 * l));
            }
        }
        for (int t = 0; t < in->T; t++) {
            const float kv = in->dec[t] * hsum16_neon(a[0], a[1], a[2], a[3]);
            const float32x4_t d = vdupq_n_f32(in->bt[t] * (in->v[t][r] - kv)), dec = vdupq_n_f32(in->dec[t]);
            const float *rd = t ? row : rs, *kt = in->k[t], *qt = in->q[t];
            const float *kn = t + 1 < in->T ? in->k[t + 1] : kt;
            float32x4_t b[4];
            for (int l = 0; l < 4; l++) b[l] = a[l] = vdupq_n_f32(0.0f);
            for (int i = 0; i < dk; i += 16)
                for (int l = 0; l < 4; l++) {
                    const float32x4_t x = vfmaq_f32(vmulq_f32(d, vld1q_f32(kt + i + 4 * l)), vld1q_f32(rd + i + 4 * l), dec);
                    vst1q_f32(row + i + 4 * l, x);
                    b[l] = vfmaq_f32(b[l], x, vld1q_f32(qt + i + 4 * l));
                    a[l] = vfmaq_f32(a[l], x, vld1q_f32(kn + i + 4 * l));
                }
            in->o[t][r] = hsum16_neon(b[0], b[1], b[2], b[3]);
        }
    }
}
#endif

typedef void (*rows_fn)(const float *src, float *M, float *snap, int dk, int dv, const rows_in *in);
static rows_fn rows_for(int isa, int dk) {
    (void)isa;
    if (dk % 16) return rows_plain;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == KZ_ISA_AVX512 && kz_isa_available(KZ_ISA_AVX512)) return rows_avx512;
    if (kz_isa_has_avx2((kz_isa)isa) && kz_isa_available(KZ_ISA_AVX2)) return rows_avx2;
#endif
#if defined(__aarch64__)
    if (isa != KZ_ISA_SCALAR) return rows_neon;
#endif
    return rows_plain;
}

void kz_gdn_recurrent_rows(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                           size_t ld_in, const float *g, const float *beta, size_t ld_gb, const float *src,
                           float *state, float *snap, float *out, size_t ld_out, int h0, int h1) {
    kz_gdn_recurrent_rows_isa((int)kz_isa_active(), sh, T, q, k, v, ld_in, g, beta, ld_gb, src, state, snap, out,
                              ld_out, h0, h1);
}

void kz_gdn_recurrent_rows_isa(int isa, const kz_gdn_shape *sh, int T, const float *q, const float *k,
                               const float *v, size_t ld_in, const float *g, const float *beta, size_t ld_gb,
                               const float *src, float *state, float *snap, float *out, size_t ld_out, int h0,
                               int h1) {
    const int dk = sh->dk, dv = sh->dv, hk = sh->n_k_heads;
    const size_t hs = (size_t)dv * dk;
    const rows_fn fn = rows_for(isa, dk);
    for (int j = h0; j < h1; j++) {
        const int ik = j % hk;
        for (int t0 = 0; t0 < T; t0 += KZ_GDN_ROWS_T) { /* groups of tokens: later ones from the state */
            rows_in in;
            in.T = T - t0 < KZ_GDN_ROWS_T ? T - t0 : KZ_GDN_ROWS_T;
            for (int u = 0; u < in.T; u++) {
                const size_t t = (size_t)(t0 + u);
                in.k[u] = k + t * ld_in + (size_t)ik * dk;
                in.q[u] = q + t * ld_in + (size_t)ik * dk;
                in.v[u] = v + t * ld_in + (size_t)j * dv;
                in.o[u] = out + t * ld_out + (size_t)j * dv;
                in.dec[u] = kz_exp(g[t * ld_gb + j]);
                in.bt[u] = beta[t * ld_gb + j];
            }
            fn(t0 ? state + j * hs : src + j * hs, state + j * hs, t0 ? NULL : snap ? snap + j * hs : NULL, dk, dv,
               &in);
        }
    }
}

typedef void (*head_fn)(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt, float *ot,
                        float decay, float bt);

/* the level's head kernel for this dk (SIMD ones need whole 16-lane blocks) */
static head_fn head_for(int isa, int dk) {
    (void)isa;
    if (dk % 16) return head_plain;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == KZ_ISA_AVX512 && kz_isa_available(KZ_ISA_AVX512)) return head_avx512;
    if (kz_isa_has_avx2((kz_isa)isa) && kz_isa_available(KZ_ISA_AVX2)) return head_avx2;
#endif
#if defined(__aarch64__)
    if (isa != KZ_ISA_SCALAR) return head_neon;
#endif
    return head_plain;
}

void kz_gdn_recurrent(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1) {
    kz_gdn_recurrent_isa((int)kz_isa_active(), sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
}

void kz_gdn_recurrent_isa(int isa, const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                          size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                          float *out, size_t ld_out, int h0, int h1) {
    const int dk = sh->dk, dv = sh->dv, hk = sh->n_k_heads;
    const head_fn head = head_for(isa, dk);
    for (int j = h0; j < h1; j++) {
        float *M = state + (size_t)j * dv * dk;
        const int ik = j % hk; /* tiled pairing of GGUF value heads with key heads */
        for (int t = 0; t < T; t++)
            head(M, dk, dv, k + (size_t)t * ld_in + (size_t)ik * dk, q + (size_t)t * ld_in + (size_t)ik * dk,
                 v + (size_t)t * ld_in + (size_t)j * dv, out + (size_t)t * ld_out + (size_t)j * dv,
                 kz_exp(g[(size_t)t * ld_gb + j]), beta[(size_t)t * ld_gb + j]);
    }
}
