/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL integer kernels for x86-64, included by x86/b32.c once
 * per variant (LX(name) suffix, LX_TGT target attribute, LX_VNNI: 1 = VPDPBUSD, 0 = VPMADDUBSW +
 * VPMADDWD, LX_EXPORT export prefix).
 *
 * A weight block is first decoded into its 32 int8 factors in element order (Q4_1/Q5_1: the
 * codes 0..31; Q5_0: code - 16; IQ4_NL: kv[code] through a PSHUFB lookup), then dotted with the
 * activation's int8 as u8 x s8 pairs (|w| x sign(a, w); |products| <= 127 * 127, a pair sum
 * fits int16). The block sum is exact, and the float part is the scalar reference's, lane by
 * lane with no FMA:  acc += (float)sumi * (d_w * d_a)  [+ m_w * s_a inside the addend]. Every
 * lane is one (row, token) pair, so the result does not depend on the tile. */

/* geometry of type ty (0 Q4_1, 1 Q5_0, 2 Q5_1, 3 IQ4_NL) */
#define LT_WB(ty) ((ty) == 0 ? 20 : (ty) == 1 ? 22 : (ty) == 2 ? 24 : 18)
#define LT_QS(ty) ((ty) == 0 ? 4 : (ty) == 1 ? 6 : (ty) == 2 ? 8 : 2)
#define LT_QH(ty) ((ty) == 1 ? 2 : 4)
#define LT_MIN(ty) ((ty) == 0 || (ty) == 2) /* has m; activation is Q8_1 */
#define LT_AB(ty) (LT_MIN(ty) ? 36 : 34)
#define LT_AQ(ty) (LT_MIN(ty) ? 4 : 2)

/* 32 int8 factors of one weight block, element order */
LX_TGT KZ_INL __m256i LX(decode)(const int ty, const uint8_t *b) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + LT_QS(ty))));
    __m256i u = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
    if (ty == 3) {
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kz_iq4nl_values));
        return _mm256_shuffle_epi8(lut, u);
    }
    if (ty == 1 || ty == 2) {
        uint32_t h;
        memcpy(&h, b + LT_QH(ty), 4);
        /* byte i gets byte i / 8 of qh, keeps bit i % 8, becomes 0x10 where that bit is set */
        const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        const __m256i hb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel);
        const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        u = _mm256_or_si256(u, _mm256_and_si256(on, _mm256_set1_epi8(0x10)));
        if (ty == 1) u = _mm256_sub_epi8(u, _mm256_set1_epi8(16));
    }
    return u;
}

/* 8 int32 partial sums of w . a (w from decode, a the activation's 32 int8) */
LX_TGT KZ_INL __m256i LX(pdot)(const int ty, __m256i w, __m256i a) {
    /* unsigned factors (Q4_1/Q5_1) go in as they are; signed ones as |w| x sign(a, w) */
    const __m256i u = LT_MIN(ty) ? w : _mm256_sign_epi8(w, w);
    const __m256i s = LT_MIN(ty) ? a : _mm256_sign_epi8(a, w);
#if LX_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

static inline short LX(h16)(const uint8_t *p) { return (short)ld16(p); }

/* GEMV tile: 8 weight rows x 1 activation row; lane r = row r */
LX_TGT KZ_INL __m256 LX(tile8x1)(const int ty, int64_t nb, const uint8_t *const w[8], const uint8_t *a) {
    const size_t wb = LT_WB(ty), ab = LT_AB(ty);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wb;
        const uint8_t *ap = a + (size_t)b * ab;
        const __m256i av = _mm256_loadu_si256((const __m256i *)(ap + LT_AQ(ty)));
        __m256i p[8];
        KZ_UNROLL(8)
        for (int r = 0; r < 8; r++) p[r] = LX(pdot)(ty, LX(decode)(ty, w[r] + o), av);
        const __m256i si = x86_hsum8(p);
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(LX(h16)(w[0] + o), LX(h16)(w[1] + o), LX(h16)(w[2] + o),
                                                         LX(h16)(w[3] + o), LX(h16)(w[4] + o), LX(h16)(w[5] + o),
                                                         LX(h16)(w[6] + o), LX(h16)(w[7] + o)));
        const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(ld16(ap))));
        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(si), sc);
        if (LT_MIN(ty)) {
            const __m256 mw = _mm256_cvtph_ps(
                _mm_setr_epi16(LX(h16)(w[0] + o + 2), LX(h16)(w[1] + o + 2), LX(h16)(w[2] + o + 2),
                               LX(h16)(w[3] + o + 2), LX(h16)(w[4] + o + 2), LX(h16)(w[5] + o + 2),
                               LX(h16)(w[6] + o + 2), LX(h16)(w[7] + o + 2)));
            t = _mm256_add_ps(t, _mm256_mul_ps(mw, _mm256_set1_ps(_cvtsh_ss(ld16(ap + 2)))));
        }
        acc = _mm256_add_ps(acc, t);
    }
    return acc;
}

/* GEMM tile: 4 weight rows x 4 activation rows; acc[j] lane (t & 1) * 4 + r for token 2j + (t & 1) */
LX_TGT KZ_INL void LX(tile4x4)(const int ty, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4],
                               __m256 acc[2]) {
    const size_t wb = LT_WB(ty), ab = LT_AB(ty);
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wb, oa = (size_t)b * ab;
        __m256i wv[4], p[8];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) wv[r] = LX(decode)(ty, w[r] + o);
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(a[0] + oa + LT_AQ(ty)));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(a[1] + oa + LT_AQ(ty)));
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            p[r] = LX(pdot)(ty, wv[r], a0);
            p[4 + r] = LX(pdot)(ty, wv[r], a1);
        }
        const __m256i s0 = x86_hsum8(p);
        a0 = _mm256_loadu_si256((const __m256i *)(a[2] + oa + LT_AQ(ty)));
        a1 = _mm256_loadu_si256((const __m256i *)(a[3] + oa + LT_AQ(ty)));
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            p[r] = LX(pdot)(ty, wv[r], a0);
            p[4 + r] = LX(pdot)(ty, wv[r], a1);
        }
        const __m256i s1 = x86_hsum8(p);
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(LX(h16)(w[0] + o), LX(h16)(w[1] + o), LX(h16)(w[2] + o),
                                                      LX(h16)(w[3] + o), 0, 0, 0, 0));
        const __m128 da = _mm_cvtph_ps(_mm_setr_epi16(LX(h16)(a[0] + oa), LX(h16)(a[1] + oa), LX(h16)(a[2] + oa),
                                                      LX(h16)(a[3] + oa), 0, 0, 0, 0));
        const __m256 dw8 = _mm256_insertf128_ps(_mm256_castps128_ps256(dw), dw, 1);
        const __m256 da8 = _mm256_insertf128_ps(_mm256_castps128_ps256(da), da, 1);
        __m256 t0 = _mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dw8, _mm256_permutevar8x32_ps(da8, i01)));
        __m256 t1 = _mm256_mul_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(dw8, _mm256_permutevar8x32_ps(da8, i23)));
        if (LT_MIN(ty)) {
            const __m128 mw = _mm_cvtph_ps(_mm_setr_epi16(LX(h16)(w[0] + o + 2), LX(h16)(w[1] + o + 2),
                                                          LX(h16)(w[2] + o + 2), LX(h16)(w[3] + o + 2), 0, 0, 0, 0));
            const __m128 sa = _mm_cvtph_ps(_mm_setr_epi16(LX(h16)(a[0] + oa + 2), LX(h16)(a[1] + oa + 2),
                                                          LX(h16)(a[2] + oa + 2), LX(h16)(a[3] + oa + 2), 0, 0, 0, 0));
            const __m256 mw8 = _mm256_insertf128_ps(_mm256_castps128_ps256(mw), mw, 1);
            const __m256 sa8 = _mm256_insertf128_ps(_mm256_castps128_ps256(sa), sa, 1);
            t0 = _mm256_add_ps(t0, _mm256_mul_ps(mw8, _mm256_permutevar8x32_ps(sa8, i01)));
            t1 = _mm256_add_ps(t1, _mm256_mul_ps(mw8, _mm256_permutevar8x32_ps(sa8, i23)));
        }
        acc0 = _mm256_add_ps(acc0, t0);
        acc1 = _mm256_add_ps(acc1, t1);
    }
    acc[0] = acc0;
    acc[1] = acc1;
}

/* one row x one activation row: the reference's scalar float chain */
LX_TGT KZ_INL float LX(dot1)(const int ty, int64_t nb, const uint8_t *w, const uint8_t *a) {
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += LT_WB(ty), a += LT_AB(ty)) {
        const __m256i p = LX(pdot)(ty, LX(decode)(ty, w), _mm256_loadu_si256((const __m256i *)(a + LT_AQ(ty))));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        const int32_t sumi = _mm_cvtsi128_si32(h);
        if (LT_MIN(ty))
            s += (float)sumi * (_cvtsh_ss(ld16(w)) * _cvtsh_ss(ld16(a))) + _cvtsh_ss(ld16(w + 2)) * _cvtsh_ss(ld16(a + 2));
        else
            s += (float)sumi * (_cvtsh_ss(ld16(w)) * _cvtsh_ss(ld16(a)));
    }
    return s;
}

X86_TILE_DRIVERS(LX_TGT, LX(tile8x1), LX(tile4x4), LX(tile8x1_st), LX(tile4x4_st), LX(gemv), LX(gemm))

#define LX_DEF(t, ty)                                                                                   \
    LX_TGT float LX_EXPORT(dot_##t)(const void *w, const void *a, int64_t n) { return LX(dot1)(ty, n / 32, w, a); } \
    LX_TGT void LX_EXPORT(gemm_##t)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,   \
                                    int64_t nt, float *y, int64_t ldy) {                                         \
        LX(gemm)(ty, n, w, ws, nr, a, as, nt, y, ldy);                                                           \
    }
LX_DEF(q4_1, 0)
LX_DEF(q5_0, 1)
LX_DEF(q5_1, 2)
LX_DEF(iq4_nl, 3)
#undef LX_DEF
