/* x86-64 kernels of the float types and the 32-element block types (Q8_0, Q4_0 with its
 * q4_0_16x4 layout, Q4_1, Q5_0, Q5_1, IQ4_NL): AVX2+FMA+F16C, and AVX-512 VNNI integer dots.
 * Contracts (kernels.h): activation quantizers give the reference bytes; integer dots are
 * bit-identical to the scalar reference; float dots sum 8-lane float partials over chunks of
 * 128 elements, flush each chunk into double and round once at the end (each pair the same
 * sequence whatever the tile, so gemm == dot bit for bit). */
#include "matmul/kernels.h"

#if defined(__x86_64__)
#include "matmul/x86/simd.h"

/* ---------------- AVX-512 VNNI Q4_0 GEMM (prefill) ----------------
 * Register tile 16 weight rows x 8 tokens, lane = weight row: for each block the 16 rows'
 * nibble dwords are gathered once into 4 zmm (dword j of row r = nibbles of elements 4j..4j+3
 * low, 16+4j.. high), then each token's 4 activation bytes are broadcast into VPDPBUSD, so
 * the 32-element dot of a (row, token) pair builds up in one int32 lane with no horizontal sum.
 * Unsigned nibbles u: sum((u - 8) * a) = sum(u * a) - 8 * sum(a), the correction precomputed per
 * (token, block): exact integers. Float part per lane as the reference: acc += (float)sumi *
 * (d_w * d_a), blocks in order, so every element equals dot_q4_0 bit for bit. Blocks are done in
 * chunks (stack scratch); partial sums are kept in y between chunks (bit-exact round trip). */
#define LANE_CH 128 /* blocks per chunk: 36 KiB of gathered weights + the corrections */
#define LANE_TG 64  /* tokens per correction group */
#ifndef LANE_PF
/* GEMV software prefetch, two distances ahead of the block being read: LANE_PF bytes into L1 (T0)
 * and LANE_PF2 into L2 (T1): one core keeps too few lines in flight with the near prefetch alone
 * (the hardware streamer stops at every 4 KiB page). Distances: docs/PERFORMANCE.md. */
#define LANE_PF 2048
#define LANE_PF2 12288
#endif
/* The L1 distance when two groups go side by side (lane_gemv_16x4_body): each stream then moves at
 * half the rate, so the same lead in time is twice the bytes. Both leads wrap into the next
 * pair's groups, else the second stream of every pair starts cold. */
#ifndef LANE_PF_PAIR
#define LANE_PF_PAIR 4096
#endif

T_AVX512 KZ_INL void lane_tile(int nbc, const uint8_t *pk, const uint8_t *const ap[8], const int32_t *const cp[8],
                             const float *const dp[8], __m512 acc[8]) {
    const __m512i m = _mm512_set1_epi8(15);
    for (int b = 0; b < nbc; b++) {
        const uint8_t *p = pk + (size_t)b * 288;
        __m512i wl[4], wh[4];
        KZ_UNROLL(4)
        for (int j = 0; j < 4; j++) {
            const __m512i q = _mm512_loadu_si512((const void *)(p + 64 * j));
            wl[j] = _mm512_and_si512(q, m);
            wh[j] = _mm512_and_si512(_mm512_srli_epi32(q, 4), m);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 256)));
        KZ_UNROLL(8)
        for (int t = 0; t < 8; t++) {
            const uint8_t *ab = ap[t] + (size_t)b * 34;
            __m512i s = _mm512_set1_epi32(cp[t][b]), s1 = _mm512_setzero_si512();
            s = _mm512_dpbusd_epi32(s, wl[0], _mm512_set1_epi32(x86_ld32(ab + 2)));
            s1 = _mm512_dpbusd_epi32(s1, wl[1], _mm512_set1_epi32(x86_ld32(ab + 6)));
            s = _mm512_dpbusd_epi32(s, wl[2], _mm512_set1_epi32(x86_ld32(ab + 10)));
            s1 = _mm512_dpbusd_epi32(s1, wl[3], _mm512_set1_epi32(x86_ld32(ab + 14)));
            s = _mm512_dpbusd_epi32(s, wh[0], _mm512_set1_epi32(x86_ld32(ab + 18)));
            s1 = _mm512_dpbusd_epi32(s1, wh[1], _mm512_set1_epi32(x86_ld32(ab + 22)));
            s = _mm512_dpbusd_epi32(s, wh[2], _mm512_set1_epi32(x86_ld32(ab + 26)));
            s1 = _mm512_dpbusd_epi32(s1, wh[3], _mm512_set1_epi32(x86_ld32(ab + 30)));
            s = _mm512_add_epi32(s, s1);
            /* d_a precomputed as a float beside the corrections: a broadcast load, not a convert */
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(dp[t][b]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc));
        }
    }
}

/* nt >= 8 expected (smaller batches are cheaper with the GEMV tiles) */
/* pkd: NULL = regroup rows of w on the fly; else the rows already packed (kz_repack_q4_0_16x4, nr a
 * multiple of 16) and w is not read */
T_AVX512 static void lane_gemm_q4_0(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                                  int64_t nt, float *y, int64_t ldy, const uint8_t *pkd) {
    const int64_t nb = n / 32;
    uint8_t pkbuf[LANE_CH * 288] __attribute__((aligned(64)));
    int32_t corr[LANE_TG * LANE_CH];
    float dact[LANE_TG * LANE_CH];
    for (int64_t tg = 0; tg < nt; tg += LANE_TG) {
        const int ntg = nt - tg < LANE_TG ? (int)(nt - tg) : LANE_TG;
        for (int64_t b0 = 0; b0 < nb; b0 += LANE_CH) {
            const int nbc = nb - b0 < LANE_CH ? (int)(nb - b0) : LANE_CH;
            for (int t = 0; t < ntg; t++) {
                const uint8_t *at = a + (size_t)(tg + t) * as + (size_t)b0 * 34;
                for (int b = 0; b < nbc; b++) {
                    corr[t * LANE_CH + b] = x86_q8_0_corr(at + (size_t)b * 34);
                    dact[t * LANE_CH + b] = _cvtsh_ss(ld16(at + (size_t)b * 34));
                }
            }
            for (int64_t r0 = 0; r0 < nr; r0 += 16) {
                const int nv = nr - r0 < 16 ? (int)(nr - r0) : 16;
                const uint8_t *pk = pkd ? pkd + ((size_t)(r0 / 16) * (size_t)nb + (size_t)b0) * 288 : pkbuf;
                if (!pkd) {
                    int32_t off[16];
                    for (int r = 0; r < 16; r++) off[r] = (int32_t)((size_t)(r < nv ? r : nv - 1) * ws);
                    const __m512i idx = _mm512_loadu_si512((const void *)off);
                    const uint8_t *base = w + (size_t)r0 * ws + (size_t)b0 * 18;
                    for (int b = 0; b < nbc; b++) {
                        const uint8_t *src = base + (size_t)b * 18;
                        uint8_t *dst = pkbuf + (size_t)b * 288;
                        KZ_UNROLL(4)
                        for (int j = 0; j < 4; j++)
                            _mm512_storeu_si512((void *)(dst + 64 * j), _mm512_i32gather_epi32(idx, (const void *)(src + 2 + 4 * j), 1));
                        _mm256_storeu_si256((__m256i *)(dst + 256),
                                            _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(idx, (const void *)src, 1)));
                    }
                }
                const __mmask16 km = (__mmask16)((1u << nv) - 1u);
                for (int t0 = 0; t0 < ntg; t0 += 8) {
                    const int tv = ntg - t0 < 8 ? ntg - t0 : 8;
                    const uint8_t *ap[8];
                    const int32_t *cp[8];
                    const float *dp[8];
                    float *yp[8];
                    __m512 acc[8];
                    for (int t = 0; t < 8; t++) {
                        const int tt = t0 + (t < tv ? t : tv - 1);
                        ap[t] = a + (size_t)(tg + tt) * as + (size_t)b0 * 34;
                        cp[t] = corr + tt * LANE_CH;
                        dp[t] = dact + tt * LANE_CH;
                        yp[t] = y + (tg + tt) * ldy + r0;
                        acc[t] = b0 ? _mm512_maskz_loadu_ps(km, yp[t]) : _mm512_setzero_ps();
                    }
                    lane_tile(nbc, pk, ap, cp, dp, acc);
                    for (int t = 0; t < tv; t++) _mm512_mask_storeu_ps(yp[t], km, acc[t]);
                }
            }
        }
    }
}

/* blocks per row the GEMV takes in one sweep (corrections on the stack: 4 KiB); longer rows go
 * in chunks of that many blocks, all groups per chunk */
#define LANE_GEMV_NB 1024

/* the activation dwords of one block, each in every lane: x[j] = qs dword j (j < 4: elements
 * 4j.., the low nibbles' partners; j >= 4: elements 16 + 4(j-4).., the high nibbles'); two
 * loads and in-register shuffles instead of eight broadcast loads (fewer load-queue slots per
 * cache line of weights) */
typedef struct { __m512i x[8]; } lane_act8;
T_AVX512 KZ_INL void lane_act_dwords(const uint8_t *ab, lane_act8 *v) {
    const __m512i al = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(ab + 2)));
    const __m512i ah = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(ab + 18)));
    v->x[0] = _mm512_shuffle_epi32(al, _MM_PERM_AAAA);
    v->x[1] = _mm512_shuffle_epi32(al, _MM_PERM_BBBB);
    v->x[2] = _mm512_shuffle_epi32(al, _MM_PERM_CCCC);
    v->x[3] = _mm512_shuffle_epi32(al, _MM_PERM_DDDD);
    v->x[4] = _mm512_shuffle_epi32(ah, _MM_PERM_AAAA);
    v->x[5] = _mm512_shuffle_epi32(ah, _MM_PERM_BBBB);
    v->x[6] = _mm512_shuffle_epi32(ah, _MM_PERM_CCCC);
    v->x[7] = _mm512_shuffle_epi32(ah, _MM_PERM_DDDD);
}

/* one packed block of one 16-row group: the exact integer dot, lane = row, then the
 * reference's float step acc += (float)sumi * (d_w * d_a). The high nibbles are dotted in
 * place (byte & 0xF0 = 16 * nibble) into their own sum, shifted down once (exact: a multiple
 * of 16), instead of shifting every weight register. */
T_AVX512 KZ_INL __m512 lane_gemv_blk_at(__m512 acc, const uint8_t *p, const lane_act8 *v, __m512i corr, __m512 da,
                                      const char *pf_l1, const char *pf_l2) {
    const __m512i ml = _mm512_set1_epi8(0x0f), mh = _mm512_set1_epi8((char)0xf0);
    if (pf_l1) {
        /* 5 lines per 288-byte block at each distance: every line at least once */
        _mm_prefetch(pf_l1, _MM_HINT_T0);
        _mm_prefetch(pf_l1 + 64, _MM_HINT_T0);
        _mm_prefetch(pf_l1 + 128, _MM_HINT_T0);
        _mm_prefetch(pf_l1 + 192, _MM_HINT_T0);
        _mm_prefetch(pf_l1 + 256, _MM_HINT_T0);
        _mm_prefetch(pf_l2, _MM_HINT_T1);
        _mm_prefetch(pf_l2 + 64, _MM_HINT_T1);
        _mm_prefetch(pf_l2 + 128, _MM_HINT_T1);
        _mm_prefetch(pf_l2 + 192, _MM_HINT_T1);
        _mm_prefetch(pf_l2 + 256, _MM_HINT_T1);
    }
    const __m512i q0 = _mm512_loadu_si512((const void *)p), q1 = _mm512_loadu_si512((const void *)(p + 64));
    const __m512i q2 = _mm512_loadu_si512((const void *)(p + 128)), q3 = _mm512_loadu_si512((const void *)(p + 192));
    __m512i lo = corr, hi = _mm512_setzero_si512();
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q0, ml), v->x[0]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q0, mh), v->x[4]);
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q1, ml), v->x[1]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q1, mh), v->x[5]);
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q2, ml), v->x[2]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q2, mh), v->x[6]);
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q3, ml), v->x[3]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q3, mh), v->x[7]);
    const __m512i sumi = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 256)));
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, da)));
}
T_AVX512 KZ_INL __m512 lane_gemv_blk(__m512 acc, const uint8_t *p, const lane_act8 *v, __m512i corr, __m512 da,
                                   const int pf) {
    const char *c = (const char *)p;
    return lane_gemv_blk_at(acc, p, v, corr, da, LANE_PF && pf ? c + LANE_PF : NULL, c + LANE_PF2);
}

/* GEMV over packed rows (decode): lane = weight row, a block of a 16-row group is 4 contiguous
 * zmm loads + the 16 scales, so no horizontal sum is needed; each thread streams its rows, each
 * group's blocks in one sweep for rows up to LANE_GEMV_NB blocks. With the software prefetch (the
 * Intel path) two adjacent groups go side by side, sharing the activation's loads and shuffles:
 * two streams per thread read faster than one or four (docs/PERFORMANCE.md). Without the
 * prefetch (AMD) one group at a time. Per lane the same exact integer block dot and float chain
 * as the reference. */
T_AVX512 KZ_INL void lane_gemv_16x4_body(int64_t nb, const uint8_t *pk, int64_t nr, const uint8_t *a, float *y,
                                     const int32_t *corr_in, const int pf) {
    int32_t corr_buf[LANE_GEMV_NB];
    const int64_t ng = nr / 16, gs = nb * 288; /* bytes of a group */
    for (int64_t b0 = 0; b0 < nb; b0 += LANE_GEMV_NB) {
        const int nbc = nb - b0 < LANE_GEMV_NB ? (int)(nb - b0) : LANE_GEMV_NB;
        const int32_t *corr = corr_in ? corr_in + b0 : corr_buf;
        if (!corr_in)
            for (int b = 0; b < nbc; b++) corr_buf[b] = x86_q8_0_corr(a + (size_t)(b0 + b) * 34);
        int64_t g = 0;
        if (pf && LANE_PF)
            for (; g + 2 <= ng; g += 2) {
                const uint8_t *p = pk + (size_t)(g * gs + b0 * 288);
                __m512 acc0 = b0 ? _mm512_loadu_ps(y + 16 * g) : _mm512_setzero_ps();
                __m512 acc1 = b0 ? _mm512_loadu_ps(y + 16 * g + 16) : _mm512_setzero_ps();
                /* A lead that runs past the end of its group goes on in the same stream's group of
                 * the next pair, two groups further on: + gs from the plain address (which already
                 * moved one group); o1 / o2 are the leads' offsets in their groups. */
                int64_t o1 = b0 * 288 + LANE_PF_PAIR, o2 = b0 * 288 + LANE_PF2, w1 = 0, w2 = 0;
                for (; o1 >= gs; o1 -= gs) w1 += gs;
                for (; o2 >= gs; o2 -= gs) w2 += gs;
                for (int b = 0; b < nbc; b++, p += 288) {
                    const uint8_t *ab = a + (size_t)(b0 + b) * 34;
                    lane_act8 v;
                    lane_act_dwords(ab, &v);
                    const __m512i c = _mm512_set1_epi32(corr[b]);
                    const __m512 da = _mm512_set1_ps(_cvtsh_ss(ld16(ab)));
                    const char *l1 = (const char *)p + LANE_PF_PAIR + w1, *l2 = (const char *)p + LANE_PF2 + w2;
                    acc0 = lane_gemv_blk_at(acc0, p, &v, c, da, l1, l2);
                    acc1 = lane_gemv_blk_at(acc1, p + gs, &v, c, da, l1 + gs, l2 + gs);
                    if ((o1 += 288) >= gs) o1 -= gs, w1 += gs;
                    if ((o2 += 288) >= gs) o2 -= gs, w2 += gs;
                }
                _mm512_storeu_ps(y + 16 * g, acc0);
                _mm512_storeu_ps(y + 16 * g + 16, acc1);
            }
        for (; g < ng; g++) {
            const uint8_t *p = pk + (size_t)(g * gs + b0 * 288);
            __m512 acc = b0 ? _mm512_loadu_ps(y + 16 * g) : _mm512_setzero_ps();
            for (int b = 0; b < nbc; b++, p += 288) {
                const uint8_t *ab = a + (size_t)(b0 + b) * 34;
                lane_act8 v;
                lane_act_dwords(ab, &v);
                acc = lane_gemv_blk(acc, p, &v, _mm512_set1_epi32(corr[b]), _mm512_set1_ps(_cvtsh_ss(ld16(ab))), pf);
            }
            _mm512_storeu_ps(y + 16 * g, acc);
        }
    }
}

T_AVX512 void kz_avx512_gemv_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, const int32_t *corr,
                                      float *y) {
    lane_gemv_16x4_body(n / 32, pk, nr, a, y, corr, 1);
}
T_AVX512 void kz_avx512_gemv_q4_0_16x4_nopf(int64_t n, const void *pk, int64_t nr, const void *a,
                                           const int32_t *corr, float *y) {
    lane_gemv_16x4_body(n / 32, pk, nr, a, y, corr, 0);
}

/* Thin GEMM over packed rows (a speculative verify: 2-4 tokens): each block of a 16-row group
 * is loaded and masked once and dotted with every token's activation (dwords broadcast from
 * memory), so the weights stream once for all T tokens as in the GEMV. Per lane and token the
 * same exact integer block dot and float step acc += (float)sumi * (d_w * d_a) as the GEMV:
 * each token's row equals its one-token result bit for bit. T a constant after inlining. */
T_AVX512 KZ_INL void lane_thin_16x4_body(const int T, int64_t nb, const uint8_t *pk, int64_t nr, const uint8_t *a,
                                         size_t as, const int32_t *aux, float *y, int64_t ldy, const int pf) {
    int32_t corr[LANE_GEMV_NB][X86_THIN_MAX];
    float da[LANE_GEMV_NB][X86_THIN_MAX];
    const __m512i ml = _mm512_set1_epi8(0x0f);
    const int64_t ng = nr / 16, gs = nb * 288;
    for (int64_t b0 = 0; b0 < nb; b0 += LANE_GEMV_NB) {
        const int nbc = nb - b0 < LANE_GEMV_NB ? (int)(nb - b0) : LANE_GEMV_NB;
        x86_thin_terms(T, nb, b0, nbc, a, as, aux, corr, da);
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *p = pk + (size_t)(g * gs + b0 * 288);
            __m512 acc[X86_THIN_MAX];
            KZ_UNROLL(4)
            for (int t = 0; t < T; t++) acc[t] = b0 ? _mm512_loadu_ps(y + t * ldy + 16 * g) : _mm512_setzero_ps();
            for (int b = 0; b < nbc; b++, p += 288) {
                if (pf && LANE_PF) { /* the GEMV's two distances, one stream */
                    const char *c = (const char *)p;
                    for (int k = 0; k < 5; k++) _mm_prefetch(c + LANE_PF + 64 * k, _MM_HINT_T0);
                    for (int k = 0; k < 5; k++) _mm_prefetch(c + LANE_PF2 + 64 * k, _MM_HINT_T1);
                }
                __m512i wl[4], wh[4];
                KZ_UNROLL(4)
                for (int j = 0; j < 4; j++) {
                    const __m512i q = _mm512_loadu_si512((const void *)(p + 64 * j));
                    wl[j] = _mm512_and_si512(q, ml);
                    wh[j] = _mm512_and_si512(_mm512_srli_epi32(q, 4), ml);
                }
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 256)));
                KZ_UNROLL(4)
                for (int t = 0; t < T; t++) {
                    const uint8_t *ab = a + (size_t)t * as + (size_t)(b0 + b) * 34;
                    __m512i lo = _mm512_set1_epi32(corr[b][t]), hi = _mm512_setzero_si512();
                    KZ_UNROLL(4)
                    for (int j = 0; j < 4; j++) {
                        lo = _mm512_dpbusd_epi32(lo, wl[j], _mm512_set1_epi32(x86_ld32(ab + 2 + 4 * j)));
                        hi = _mm512_dpbusd_epi32(hi, wh[j], _mm512_set1_epi32(x86_ld32(ab + 18 + 4 * j)));
                    }
                    const __m512i sumi = _mm512_add_epi32(lo, hi);
                    const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(da[b][t]));
                    acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), sc));
                }
            }
            KZ_UNROLL(4)
            for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy + 16 * g, acc[t]);
        }
    }
}

/* nt tokens (< 8) in thin passes of up to X86_THIN_MAX (T fixed per call site, so the tokens'
 * accumulators stay in registers); aux: the tokens' block terms (token-major), or NULL */
T_AVX512 KZ_INL void lane_thin_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                    const int32_t *aux, float *y, int64_t ldy, const int pf) {
    const uint8_t *ap = a;
    const int64_t nb = n / 32;
    for (int64_t t0 = 0; t0 < nt;) {
        const int64_t left = nt - t0;
        const int T = left >= 4 ? 4 : (int)left;
        const uint8_t *at = ap + (size_t)t0 * as;
        const int32_t *xt = aux ? aux + (size_t)t0 * (size_t)nb : NULL;
        float *yt = y + t0 * ldy;
        if (T == 4) lane_thin_16x4_body(4, nb, pk, nr, at, as, xt, yt, ldy, pf);
        else if (T == 3) lane_thin_16x4_body(3, nb, pk, nr, at, as, xt, yt, ldy, pf);
        else if (T == 2) lane_thin_16x4_body(2, nb, pk, nr, at, as, xt, yt, ldy, pf);
        else lane_gemv_16x4_body(nb, pk, nr, at, yt, xt, pf);
        t0 += T;
    }
}

/* the packed gemm, GEMV with (pf = 1) or without the software prefetch: two exported entries,
 * the dispatch (traits.c) picks one by CPU vendor. Thin batches prefetch on every vendor: with
 * 2-4 tokens a core spends 2-3x longer per block, and the hardware streamer alone then keeps too
 * few lines in flight (AMD Zen 5, 3 tokens x FFN down: 1.8x a GEMV without, 0.98x with). */
T_AVX512 KZ_INL void lane_gemm_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                 float *y, int64_t ldy, const int pf) {
    if (nt >= 8) {
        lane_gemm_q4_0(n, NULL, 0, nr, a, as, nt, y, ldy, pk);
        return;
    }
    lane_thin_16x4(n, pk, nr, a, as, nt, NULL, y, ldy, nt >= 2 ? 1 : pf);
}
T_AVX512 void kz_avx512_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                      float *y, int64_t ldy) {
    lane_gemm_16x4(n, pk, nr, a, as, nt, y, ldy, 1);
}
/* thin batches (2-4 tokens, a speculative verify) with every token's terms precomputed
 * (aux[t * n / 32 + b]) once per dispatch: each of a thread's calls (its run in pieces, then
 * stolen 16-row chunks) recomputed them, ~40 % on top of the products of a 16-row chunk of
 * the 4B's FFN down (counted from the code); prefetching, as lane_gemm_16x4's thin path */
T_AVX512 void kz_avx512_thin_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt,
                                      const int32_t *aux, float *y, int64_t ldy) {
    lane_thin_16x4(n, pk, nr, a, as, nt, aux, y, ldy, 1);
}
T_AVX512 void kz_avx512_gemm_q4_0_16x4_nopf(int64_t n, const void *pk, int64_t nr, const void *a, size_t as,
                                           int64_t nt, float *y, int64_t ldy) {
    lane_gemm_16x4(n, pk, nr, a, as, nt, y, ldy, 0);
}

/* ---------------- integer kernels: two variants of one template ---------------- */

#define QX(name) name##_avx2
#define QX_EXPORT(name) kz_avx2_##name
#define QX_TGT T_AVX2
#define QX_VNNI 0
#include "matmul/x86/b32_tmpl.h"
#undef QX
#undef QX_EXPORT
#undef QX_TGT
#undef QX_VNNI

#define QX(name) name##_avx512
#define QX_EXPORT(name) kz_avx512_##name
#define QX_TGT T_AVX512
#define QX_VNNI 1
#include "matmul/x86/b32_tmpl.h"
#undef QX
#undef QX_EXPORT
#undef QX_TGT
#undef QX_VNNI

/* ---------------- activation conversion ---------------- */

/* f32 -> Q8_0 blocks, the reference's arithmetic: amax ignores NaN, d = amax / 127,
 * id = 1 / d, q = roundf(x * id) (half away from zero) clamped to +-127, NaN -> 0. */
T_AVX2 size_t kz_avx2_quant_q8_0(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    const __m256 sgn = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t ib = 0; ib < n / 32; ib++, b += 34, x += 32) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(x + 8 * j);
            /* maxps returns its second operand when either is NaN: NaN elements never win */
            m = _mm256_max_ps(_mm256_andnot_ps(sgn, v[j]), m);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ps(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = kz_f32_to_fp16(d);
        memcpy(b, &h, 2);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; j++) {
            __m256 t = _mm256_mul_ps(v[j], vid);
            t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));  /* NaN -> 0 */
            t = _mm256_min_ps(_mm256_max_ps(t, lo), hi);            /* clamping first is the same */
            __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 fr = _mm256_sub_ps(t, r);                   /* exact */
            const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sgn, fr), half, _CMP_GE_OQ);
            r = _mm256_add_ps(r, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(t, sgn))));
            q[j] = _mm256_cvttps_epi32(r);
        }
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(b + 2), _mm256_permutevar8x32_epi32(p, perm));
    }
    return (size_t)(n / 32) * 34;
}

/* The same bytes with AVX-512, one block = two zmm: the NaN-ignoring absolute maximum (maxps
 * returns its second operand when either is NaN, so the running maximum starts at 0 and comes
 * second), then round(t) as trunc(t + copysign(0.49999997, t)) - equal to roundf for every
 * |t| <= 128 (checked over all such floats), and t = x / d stays within that - clamped to
 * +-127 in float (an infinite id from a subnormal scale gives +-inf), NaN lanes zeroed by mask.
 * About twice the AVX2 version's speed (9216 floats: 3.0-3.6 us against 5.9-6.3): the decode
 * step converts every matmul input on the calling thread (9216 floats per FFN down projection
 * of the 4B) while the others wait. */
T_AVX512 size_t kz_avx512_quant_q8_0(const float *x, void *dst, int64_t n) {
    uint8_t *b = dst;
    const __m512 half = _mm512_set1_ps(0.49999997f), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512i sgn = _mm512_set1_epi32((int)0x80000000u), hb = _mm512_castps_si512(half);
    for (int64_t ib = 0; ib < n / 32; ib++, b += 34, x += 32) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const __m512 m = _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
        const float amax = _mm512_reduce_max_ps(m); /* no NaN left in m */
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* d is never NaN */
        memcpy(b, &h, 2);
        const __m512 vid = _mm512_set1_ps(id);
        const __m512 t0 = _mm512_mul_ps(v0, vid), t1 = _mm512_mul_ps(v1, vid);
        /* copysign(0.49999997, t): integer and/or (the float ones need AVX512DQ) */
        const __m512 r0 = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(t0), sgn), hb));
        const __m512 r1 = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(t1), sgn), hb));
        const __m512 c0 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(t0, r0), lo), hi);
        const __m512 c1 = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(t1, r1), lo), hi);
        const __m512i q0 = _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(t0, t0, _CMP_ORD_Q), c0);
        const __m512i q1 = _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(t1, t1, _CMP_ORD_Q), c1);
        _mm_storeu_si128((__m128i *)(b + 2), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b + 18), _mm512_cvtepi32_epi8(q1));
    }
    return (size_t)(n / 32) * 34;
}

/* fp16 -> f32 (F16C; exact, as the reference). VCVTPH2PS quiets a signalling NaN where the
 * reference keeps its payload, so a group of 32 holding a NaN half (|h| > 0x7c00; inf converts
 * the same) goes through the reference. One test per 32 halves. */
T_AVX2 void kz_avx2_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    const __m256i mag = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(0x7c00);
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(s + 2 * i));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(s + 2 * i + 32));
        const __m256i nan = _mm256_or_si256(_mm256_cmpgt_epi16(_mm256_and_si256(a, mag), inf),
                                            _mm256_cmpgt_epi16(_mm256_and_si256(b, mag), inf));
        if (!_mm256_testz_si256(nan, nan)) {
            for (int j = 0; j < 32; j++) dst[i + j] = kz_fp16_to_f32(ld16(s + 2 * (i + j)));
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
        _mm256_storeu_ps(dst + i + 16, _mm256_cvtph_ps(_mm256_castsi256_si128(b)));
        _mm256_storeu_ps(dst + i + 24, _mm256_cvtph_ps(_mm256_extracti128_si256(b, 1)));
    }
    const __m128i mag8 = _mm_set1_epi16(0x7fff), inf8 = _mm_set1_epi16(0x7c00);
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, mag8), inf8))) {
            for (int j = 0; j < 8; j++) dst[i + j] = kz_fp16_to_f32(ld16(s + 2 * (i + j)));
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = kz_fp16_to_f32(ld16(s + 2 * i));
}

/* f32 -> fp16, round to nearest even (F16C); NaN becomes the reference's 0x7e00 | sign */
T_AVX2 size_t kz_avx2_quant_f16(const float *x, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = 0; j < 8; j++) {
                const uint16_t h = kz_f32_to_fp16(x[i + j]);
                memcpy(d + 2 * (i + j), &h, 2);
            }
            continue;
        }
        _mm_storeu_si128((__m128i *)(d + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++) {
        const uint16_t h = kz_f32_to_fp16(x[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

/* f32 -> bf16: the reference's integer rounding (RNE on the low 16 bits, NaN -> quiet) */
T_AVX2 size_t kz_avx2_quant_bf16(const float *x, void *dst, int64_t n) {
    uint8_t *d = dst;
    const __m256i c7fff = _mm256_set1_epi32(0x7fff), c1 = _mm256_set1_epi32(1), c64 = _mm256_set1_epi32(64);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        const __m256i hi16 = _mm256_srli_epi32(u, 16);
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, c7fff), _mm256_and_si256(hi16, c1)), 16);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(hi16, c64), nan);
        _mm_storeu_si128((__m128i *)(d + 2 * i),
                         _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
    }
    for (; i < n; i++) {
        const uint16_t h = kz_f32_to_bf16(x[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    return (size_t)n * 2;
}

/* ---------------- float dots (F32 x F32, F16 x F16, BF16 x BF16) ---------------- */

enum { K_F32 = 0, K_F16 = 1, K_BF16 = 2 };
#define FCHUNK 16 /* vectors of 8 per float chunk: 128 elements, then flushed into double */

T_AVX2 KZ_INL __m256 fload8(const int k, const uint8_t *p) {
    if (k == K_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (k == K_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float fel(const int k, const uint8_t *p, int64_t i) {
    if (k == K_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    return k == K_F16 ? kz_fp16_to_f32(ld16(p + 2 * i)) : kz_bf16_to_f32(ld16(p + 2 * i));
}

T_AVX2 KZ_INL __m256d flush8(__m256d dacc, __m256 acc) {
    return _mm256_add_pd(dacc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(acc)),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(acc, 1))));
}

/* R weight rows x T activation rows (R <= 4, T <= 2); out[t * R + r] */
T_AVX2 KZ_INL void ftile(const int k, const int R, const int T, int64_t n, const uint8_t *const *w,
                         const uint8_t *const *a, float *out) {
    const size_t es = k == K_F32 ? 4 : 2;
    const int64_t nv = n / 8;
    __m256d dacc[8];
    for (int p = 0; p < R * T; p++) dacc[p] = _mm256_setzero_pd();
    for (int64_t v0 = 0; v0 < nv; v0 += FCHUNK) {
        const int64_t v1 = nv - v0 < FCHUNK ? nv : v0 + FCHUNK;
        __m256 acc[8];
        for (int p = 0; p < R * T; p++) acc[p] = _mm256_setzero_ps();
        for (int64_t v = v0; v < v1; v++) {
            const size_t o = (size_t)v * 8 * es;
            __m256 xw[4], xa[2];
            KZ_UNROLL(4)
            for (int r = 0; r < R; r++) xw[r] = fload8(k, w[r] + o);
            KZ_UNROLL(2)
            for (int t = 0; t < T; t++) xa[t] = fload8(k, a[t] + o);
            KZ_UNROLL(2)
            for (int t = 0; t < T; t++)
                KZ_UNROLL(4)
                for (int r = 0; r < R; r++) acc[t * R + r] = _mm256_fmadd_ps(xw[r], xa[t], acc[t * R + r]);
        }
        for (int p = 0; p < R * T; p++) dacc[p] = flush8(dacc[p], acc[p]);
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) {
            double d4[4];
            _mm256_storeu_pd(d4, dacc[t * R + r]);
            double s = (d4[0] + d4[1]) + (d4[2] + d4[3]);
            for (int64_t i = nv * 8; i < n; i++) s += (double)fel(k, w[r], i) * fel(k, a[t], i);
            out[t * R + r] = (float)s;
        }
}

KZ_TILE_GEMM_4X2(T_AVX2, fgemm, ftile)

#define FKERNELS(name, k)                                                                          \
    T_AVX2 float kz_avx2_dot_##name(const void *w, const void *a, int64_t n) {                     \
        const uint8_t *wp[1] = { w }, *ap[1] = { a };                                              \
        float out;                                                                                 \
        ftile(k, 1, 1, n, wp, ap, &out);                                                           \
        return out;                                                                                \
    }                                                                                              \
    T_AVX2 void kz_avx2_gemm_##name(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, \
                                    size_t as, int64_t nt, float *y, int64_t ldy) {                \
        fgemm(k, n, w, ws, nr, a, as, nt, y, ldy);                                                 \
    }
FKERNELS(f32, K_F32)
FKERNELS(f16, K_F16)
FKERNELS(bf16, K_BF16)


/* ---------------- Q4_1 / Q5_0 / Q5_1 / IQ4_NL (b32_legacy_tmpl.h, AVX2 and AVX-512 VNNI) ---------------- */
#define LX(name) legacy_##name##_avx2
#define LX_EXPORT(name) kz_avx2_##name
#define LX_TGT T_AVX2
#define LX_VNNI 0
#include "matmul/x86/b32_legacy_tmpl.h"
#undef LX
#undef LX_EXPORT
#undef LX_TGT
#undef LX_VNNI

#define LX(name) legacy_##name##_avx512
#define LX_EXPORT(name) kz_avx512_##name
#define LX_TGT T_AVX512
#define LX_VNNI 1
#include "matmul/x86/b32_legacy_tmpl.h"
#undef LX
#undef LX_EXPORT
#undef LX_TGT
#undef LX_VNNI

#else
typedef int kz_quant_x86_unused; /* not x86-64: nothing to build (ISO C wants a declaration) */
#endif
