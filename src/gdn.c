#include <math.h>
#include <string.h>
#include "cpu.h"
#include "gdn.h"
#include "ops.h"
#include "vec8.h"

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


/* row = decay*row + d*k, returns dot(row, q) */
KZ_AINL float update_dot8(float *restrict row, const float *restrict k, const float *restrict q, float decay,
                                float d, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            const float r = row[i + l] * decay + d * k[i + l];
            row[i + l] = r;
            acc[l] += r * q[i + l];
        }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) {
        const float r = row[i] * decay + d * k[i];
        row[i] = r;
        s += r * q[i];
    }
    return s;
}

/* software prefetch of the state KZ_GDN_PF rows ahead (4 KiB at dk = 128; 0 = off): the
 * hardware streamer stops at every 4 KiB page, and one thread's state stream from DRAM then
 * stalls at each page start. Xeon host of 2026-12-04, 4B decode profile (2 threads): GDN core
 * 2.6-3.5 ms per token against 4.0-4.9 without; 2 KiB ahead 2.8-3.3, 8 KiB 3.3-4.0. */
#ifndef KZ_GDN_PF
#define KZ_GDN_PF 8
#endif

/* One head's dv rows (dk % 8 == 0), per row exactly kz_dot8 then update_dot8 (same lane
 * operations and reductions), software-pipelined: row r's update + read-out runs in the same
 * loop as row r + 1's dot, so two add chains are in flight instead of one. Row at a time, each
 * 8-lane add waited for the previous one (16 in a chain per pass): the decode step's GDN core
 * sat on add latency. Rows of several heads interleaved were measured slower on cold state:
 * the state is streamed once per token, and the hardware prefetcher wants one ascending
 * stream, which this keeps (row r is in L1, row r + 1 is the next 512 bytes). */
KZ_AINL void gdn_head_pipe(float *M, int dk, int dv, const float *kt, const float *qt, const float *vt, float *ot,
                           float decay, float bt) {
    v8f a = {0};
    for (int i = 0; i < dk; i += 8) a += ld8(M + i) * ld8(kt + i);
    for (int r = 0; r < dv; r++) {
        float *row = M + (size_t)r * dk;
        const float kv = decay * hsum8(&a);
        const float d = bt * (vt[r] - kv);
        /* the next row's dot; on the last row a throw-away dot of this row (in L1) */
        const float *nx = r + 1 < dv ? row + dk : row;
        v8f b = {0};
        a = (v8f){0};
        for (int i = 0; i < dk; i += 8) {
#if KZ_GDN_PF
            /* one per 64-byte line; past the last row it touches the next head (never faults) */
            if (i % 16 == 0) __builtin_prefetch(row + (size_t)KZ_GDN_PF * dk + i, 0, 3);
#endif
            const v8f k8 = ld8(kt + i);
            const v8f x = ld8(row + i) * decay + d * k8;
            st8(row + i, &x);
            b += x * ld8(qt + i);
            a += ld8(nx + i) * k8;
        }
        ot[r] = hsum8(&b);
    }
}

KZ_AINL void gdn_recurrent_body(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1) {
    const int dk = sh->dk, dv = sh->dv, hk = sh->n_k_heads;
    for (int j = h0; j < h1; j++) {
        float *M = state + (size_t)j * dv * dk;
        const int ik = j % hk; /* tiled pairing of GGUF value heads with key heads */
        for (int t = 0; t < T; t++) {
            const float *qt = q + (size_t)t * ld_in + (size_t)ik * dk;
            const float *kt = k + (size_t)t * ld_in + (size_t)ik * dk;
            const float *vt = v + (size_t)t * ld_in + (size_t)j * dv;
            float *ot = out + (size_t)t * ld_out + (size_t)j * dv;
            const float decay = kz_exp(g[(size_t)t * ld_gb + j]);
            const float bt = beta[(size_t)t * ld_gb + j];
            if (dk % 8 == 0) {
                gdn_head_pipe(M, dk, dv, kt, qt, vt, ot, decay, bt);
                continue;
            }
            for (int r = 0; r < dv; r++) {
                /* row r of M is column r of S: (decay S)^T k = decay (S^T k), then the
                 * decayed rank-1 update and the read-out S^T q in one pass */
                float *row = M + (size_t)r * dk;
                const float kv = decay * kz_dot8(row, kt, dk);
                const float d = bt * (vt[r] - kv);
                ot[r] = update_dot8(row, kt, qt, decay, d, dk);
            }
        }
    }
}

/* The decode step from one body, twice: at the build's flags (SSE2 / NEON) and, on x86-64, with
 * AVX2 so each 8-lane loop is one ymm (half the instructions for the 48 MiB of state a 4B token
 * reads and writes). No FMA in either (ISO C mode contracts nothing, and "avx2" alone has none):
 * every lane does the same multiplies and adds in the same order, so both give the same bits;
 * chosen from the active ISA level (cpu.c), like sgemm. */
static void gdn_recurrent_plain(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1) {
    gdn_recurrent_body(sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void gdn_recurrent_avx2(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1) {
    gdn_recurrent_body(sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
}
#endif

void kz_gdn_recurrent(const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                      size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                      float *out, size_t ld_out, int h0, int h1) {
    kz_gdn_recurrent_isa((int)kz_isa_active(), sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
}

void kz_gdn_recurrent_isa(int isa, const kz_gdn_shape *sh, int T, const float *q, const float *k, const float *v,
                          size_t ld_in, const float *g, const float *beta, size_t ld_gb, float *state,
                          float *out, size_t ld_out, int h0, int h1) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kz_isa_has_avx2((kz_isa)isa) && kz_isa_available(KZ_ISA_AVX2)) {
        gdn_recurrent_avx2(sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
        return;
    }
#endif
    (void)isa;
    gdn_recurrent_plain(sh, T, q, k, v, ld_in, g, beta, ld_gb, state, out, ld_out, h0, h1);
}
