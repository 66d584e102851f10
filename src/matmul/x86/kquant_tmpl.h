/* Q4_K / Q5_K / Q6_K x Q8_K kernels for x86-64, included by x86/kquant.c once per variant:
 *   KX(name)   suffixes a name with the variant; KX_TGT its target attribute;
 *   KX_VNNI    1: VPDPWSSD fuses the scale multiply-add (AVX512-VNNI, 256-bit); 0: VPMADDWD + VPADDD
 *   KX_EXPORT  prefix of the exported functions.
 * Integer sums per super-block are exact (u8 x s8 pair sums <= 2 * 63 * 128 fit int16, scaled
 * partials fit int32), then the float chain of kernels.h per (row, token) pair, so every
 * result equals the scalar reference bit for bit whatever the tile. */

KX_TGT KZ_INL int32_t KX(hsum4)(__m128i h) {
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* acc += p16 (int16 pairs) * s16 (int16 pairs) summed into int32 lanes */
KX_TGT KZ_INL __m256i KX(madd_acc)(__m256i acc, __m256i p16, __m256i s16) {
#if KX_VNNI
    return _mm256_dpwssd_epi32(acc, p16, s16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16));
#endif
}

/* the 8 scales and 8 mins of a Q4_K/Q5_K block as two 8-byte lanes of one vector */
KX_TGT KZ_INL void KX(unpack_sm)(const uint8_t *p, __m128i *sc16, __m128i *m16) {
    uint32_t u[3];
    memcpy(u, p, 12);
    const uint32_t s_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    *sc16 = _mm_cvtepu8_epi16(_mm_setr_epi32((int)s_lo, (int)s_hi, 0, 0));
    *m16 = _mm_cvtepu8_epi16(_mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0));
}

/* the codes of sub-blocks 2c (lo) and 2c + 1 (hi) of a Q4_K / Q5_K super-block, 0..15 / 0..31;
 * hv: the Q5_K high bits still to use (bit 2c of qh byte l -> bit 4 of element l of sub-block
 * 2c, bit 2c+1 -> sub-block 2c+1), shifted on by 2 */
KX_TGT KZ_INL void KX(q45_codes)(const int q5, const uint8_t *qs, int c, __m256i *hv, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (q5) {
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(*hv, 4), b4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_slli_epi16(*hv, 3), b4));
        *hv = _mm256_srli_epi16(*hv, 2);
    }
}

/* integer parts of one Q4_K (q5 = 0) or Q5_K (q5 = 1) super-block: sumi, summ */
KX_TGT KZ_INL void KX(sb_q45)(const int q5, const uint8_t *x, const uint8_t *a, int32_t *sumi, int32_t *summ) {
    __m128i sc16, m16;
    KX(unpack_sm)(x + 4, &sc16, &m16);
    const __m256i sc = _mm256_broadcastsi128_si256(sc16);
    const uint8_t *qs = x + (q5 ? 48 : 16);
    const int8_t *q8 = (const int8_t *)(a + 4);
    __m256i hv = q5 ? _mm256_loadu_si256((const __m256i *)(x + 16)) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    KZ_UNROLL(4)
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        KX(q45_codes)(q5, qs, c, &hv, &lo, &hi);
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * c));
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32));
        /* broadcast int16 scale 2c / 2c+1 to all lanes */
        const __m256i s0 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c))));
        const __m256i s1 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
        acc = KX(madd_acc)(acc, _mm256_maddubs_epi16(lo, a0), s0);
        acc = KX(madd_acc)(acc, _mm256_maddubs_epi16(hi, a1), s1);
    }
    *sumi = x86_hsum_epi32(acc);
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(a + 260)),
                                      _mm_loadu_si128((const __m128i *)(a + 276))); /* pair sums <= 4064 */
    *summ = KX(hsum4)(_mm_madd_epi16(m16, bs));
}

/* the 4 x 32 unsigned 6-bit codes (0..63) of half c (128 elements) of a Q6_K super-block */
KX_TGT KZ_INL void KX(q6_codes)(const uint8_t *x, int c, __m256i u[4]) {
    const uint8_t *ql = x, *qh = x + 128;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(ql + 64 * c));
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 64 * c + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)(qh + 32 * c));
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m3));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m3));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m3));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), m3));
}

/* the int16 scales of 32 Q6_K codes: scale group k for the low 16, k + 1 for the high 16 */
KX_TGT KZ_INL __m256i KX(q6_scale_pair)(__m128i s8, int k) {
    const __m128i sel = _mm_setr_epi8((char)k, (char)k, (char)k, (char)k, (char)k, (char)k, (char)k, (char)k,
                                      (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1),
                                      (char)(k + 1), (char)(k + 1), (char)(k + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, sel));
}

/* integer part of one Q6_K super-block: sum_g sc_g * sum (u - 32) * a = sum_g sc_g * sum u * a -
 * 32 * sum_g sc_g * bsum_g, with u = 0..63 the unsigned codes */
KX_TGT KZ_INL int32_t KX(sb_q6)(const uint8_t *x, const uint8_t *a) {
    const int8_t *q8 = (const int8_t *)(a + 4);
    const __m128i s8 = _mm_loadu_si128((const __m128i *)(x + 192));
    __m256i acc = _mm256_setzero_si256();
    KZ_UNROLL(2)
    for (int c = 0; c < 2; c++) {
        __m256i u[4];
        KX(q6_codes)(x, c, u);
        KZ_UNROLL(4)
        for (int g = 0; g < 4; g++) {
            const __m256i sp = KX(q6_scale_pair)(s8, 8 * c + 2 * g);
            const __m256i av = _mm256_loadu_si256((const __m256i *)(q8 + 128 * c + 32 * g));
            acc = KX(madd_acc)(acc, _mm256_maddubs_epi16(u[g], av), sp);
        }
    }
    const __m256i bias = _mm256_madd_epi16(_mm256_cvtepi8_epi16(s8), _mm256_loadu_si256((const __m256i *)(a + 260)));
    return x86_hsum_epi32(acc) - 32 * x86_hsum_epi32(bias);
}

KX_TGT KZ_INL float KX(dot_q45)(const int q5, int64_t nb, const uint8_t *x, const uint8_t *a) {
    const size_t wbs = q5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += wbs, a += KZK_A_BYTES) {
        int32_t sumi, summ;
        KX(sb_q45)(q5, x, a, &sumi, &summ);
        s = kzk_fin_q45(s, kzk_act_d(a), _cvtsh_ss(kzk_rd16(x)), _cvtsh_ss(kzk_rd16(x + 2)), sumi, summ);
    }
    return s;
}

KX_TGT KZ_INL float KX(dot_q6)(int64_t nb, const uint8_t *x, const uint8_t *a) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, x += KZK_Q6_BYTES, a += KZK_A_BYTES)
        s = kzk_fin_q6(s, kzk_act_d(a), _cvtsh_ss(kzk_rd16(x + 208)), KX(sb_q6)(x, a));
    return s;
}

/* GEMM tile: one weight row x K <= 4 tokens per super-block (K a constant after inlining); the
 * weight codes and scale broadcasts are unpacked once and reused, each token has its own int32
 * accumulator (same exact sums) */
KX_TGT KZ_INL void KX(sb_q45_x4)(const int K, const int q5, const uint8_t *x, const uint8_t *const a[4],
                                 int32_t sumi[4], int32_t summ[4]) {
    __m128i sc16, m16;
    KX(unpack_sm)(x + 4, &sc16, &m16);
    const __m256i sc = _mm256_broadcastsi128_si256(sc16);
    const uint8_t *qs = x + (q5 ? 48 : 16);
    __m256i hv = q5 ? _mm256_loadu_si256((const __m256i *)(x + 16)) : _mm256_setzero_si256();
    __m256i acc[4];
    for (int k = 0; k < K; k++) acc[k] = _mm256_setzero_si256();
    KZ_UNROLL(4)
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        KX(q45_codes)(q5, qs, c, &hv, &lo, &hi);
        const __m256i s0 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c))));
        const __m256i s1 = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * c + 1))));
        KZ_UNROLL(4)
        for (int k = 0; k < K; k++) {
            const int8_t *q8 = (const int8_t *)(a[k] + 4) + 64 * c;
            acc[k] = KX(madd_acc)(acc[k], _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)q8)), s0);
            acc[k] = KX(madd_acc)(acc[k], _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 32))), s1);
        }
    }
    for (int k = 0; k < K; k++) {
        sumi[k] = x86_hsum_epi32(acc[k]);
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(a[k] + 260)),
                                          _mm_loadu_si128((const __m128i *)(a[k] + 276)));
        summ[k] = KX(hsum4)(_mm_madd_epi16(m16, bs));
    }
}

KX_TGT KZ_INL void KX(sb_q6_x4)(const int K, const uint8_t *x, const uint8_t *const a[4], int32_t sumi[4]) {
    const __m128i s8 = _mm_loadu_si128((const __m128i *)(x + 192));
    __m256i acc[4];
    for (int k = 0; k < K; k++) acc[k] = _mm256_setzero_si256();
    KZ_UNROLL(2)
    for (int c = 0; c < 2; c++) {
        __m256i u[4];
        KX(q6_codes)(x, c, u);
        KZ_UNROLL(4)
        for (int g = 0; g < 4; g++) {
            const __m256i sp = KX(q6_scale_pair)(s8, 8 * c + 2 * g);
            KZ_UNROLL(4)
            for (int k = 0; k < K; k++) {
                const __m256i av = _mm256_loadu_si256((const __m256i *)(a[k] + 4 + 128 * c + 32 * g));
                acc[k] = KX(madd_acc)(acc[k], _mm256_maddubs_epi16(u[g], av), sp);
            }
        }
    }
    const __m256i s16 = _mm256_cvtepi8_epi16(s8);
    for (int k = 0; k < K; k++) {
        const __m256i bias = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)(a[k] + 260)));
        sumi[k] = x86_hsum_epi32(acc[k]) - 32 * x86_hsum_epi32(bias);
    }
}

/* one row x K <= 4 tokens: per token the float chain of dot_q45 / dot_q6, super-blocks in order */
KX_TGT KZ_INL void KX(tile1x4)(const int K, const int t, int64_t nb, const uint8_t *x, const uint8_t *const a[4],
                               float out[4]) {
    const size_t wbs = t == 6 ? KZK_Q6_BYTES : t == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int64_t b = 0; b < nb; b++, x += wbs) {
        const uint8_t *ab[4] = {a[0], a[0], a[0], a[0]};
        for (int k = 0; k < K; k++) ab[k] = a[k] + (size_t)b * KZK_A_BYTES;
        int32_t sumi[4], summ[4];
        if (t == 6) {
            KX(sb_q6_x4)(K, x, ab, sumi);
            const float d = _cvtsh_ss(kzk_rd16(x + 208));
            for (int k = 0; k < K; k++) s[k] = kzk_fin_q6(s[k], kzk_act_d(ab[k]), d, sumi[k]);
        } else {
            KX(sb_q45_x4)(K, t == 5, x, ab, sumi, summ);
            const float d = _cvtsh_ss(kzk_rd16(x)), dmin = _cvtsh_ss(kzk_rd16(x + 2));
            for (int k = 0; k < K; k++) s[k] = kzk_fin_q45(s[k], kzk_act_d(ab[k]), d, dmin, sumi[k], summ[k]);
        }
    }
    for (int k = 0; k < K; k++) out[k] = s[k];
}

/* GEMM: per weight row, tokens in tiles of 4; a last 2 or 3 tokens (a speculative verify's thin
 * batch) in one tile of that many, so the row's codes are unpacked once for them; a single
 * token (GEMV) and a last single one: the plain dot */
KX_TGT KZ_INL void KX(gemm)(const int t, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                            size_t as, int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        int64_t k0 = 0;
        for (; k0 + 4 <= nt; k0 += 4) {
            const uint8_t *ap[4];
            for (int k = 0; k < 4; k++) ap[k] = a + (size_t)(k0 + k) * as;
            float out[4];
            KX(tile1x4)(4, t, nb, wr, ap, out);
            for (int k = 0; k < 4; k++) y[(k0 + k) * ldy + r] = out[k];
        }
        if (nt - k0 >= 2) {
            const int K = (int)(nt - k0);
            const uint8_t *ap[4];
            for (int k = 0; k < 4; k++) ap[k] = a + (size_t)(k0 + (k < K ? k : K - 1)) * as;
            float out[4];
            if (K == 3) KX(tile1x4)(3, t, nb, wr, ap, out);
            else KX(tile1x4)(2, t, nb, wr, ap, out);
            for (int k = 0; k < K; k++) y[(k0 + k) * ldy + r] = out[k];
            k0 += K;
        }
        for (; k0 < nt; k0++) {
            const uint8_t *ak = a + (size_t)k0 * as;
            y[k0 * ldy + r] = t == 6 ? KX(dot_q6)(nb, wr, ak) : KX(dot_q45)(t == 5, nb, wr, ak);
        }
    }
}

KX_TGT float KX_EXPORT(dot_q4_K)(const void *w, const void *a, int64_t n) { return KX(dot_q45)(0, n / KZK_QK, w, a); }
KX_TGT float KX_EXPORT(dot_q5_K)(const void *w, const void *a, int64_t n) { return KX(dot_q45)(1, n / KZK_QK, w, a); }
KX_TGT float KX_EXPORT(dot_q6_K)(const void *w, const void *a, int64_t n) { return KX(dot_q6)(n / KZK_QK, w, a); }
KX_TGT void KX_EXPORT(gemm_q4_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                                 int64_t nt, float *y, int64_t ldy) {
    KX(gemm)(4, n, w, ws, nr, a, as, nt, y, ldy);
}
KX_TGT void KX_EXPORT(gemm_q5_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                                 int64_t nt, float *y, int64_t ldy) {
    KX(gemm)(5, n, w, ws, nr, a, as, nt, y, ldy);
}
KX_TGT void KX_EXPORT(gemm_q6_K)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                                 int64_t nt, float *y, int64_t ldy) {
    KX(gemm)(6, n, w, ws, nr, a, as, nt, y, ldy);
}
