/* Q8_0 / Q4_0 x Q8_0 integer kernels for x86-64, included by x86/b32.c once per variant:
 *   QX(name)    suffixes a name with the variant (avx2 / avx512)
 *   QX_TGT      the target attribute of the variant's functions
 *   QX_VNNI     1: u8 x s8 dots with VPDPBUSD (AVX512-VNNI, 256-bit); 0: VPMADDUBSW + VPMADDWD
 *   QX_EXPORT   prefix of the exported functions (kz_avx2_ / kz_avx512_)
 *
 * Exactness: a block's integer dot is exact whatever the instruction sequence (|products| and
 * partial sums fit in int16/int32, see the pair dots), and the float part is the scalar
 * reference's, lane by lane: acc += (float)sumi * (d_w * d_a), blocks in order, no FMA. Each
 * SIMD lane is one (weight row, token) pair, so results do not depend on the tile a pair lands
 * in, and equal the scalar reference bit for bit.
 *
 * Lanes: the GEMV tile is 8 rows x 1 token (lane = row); the GEMM tile is 4 rows x 4 tokens in
 * two vectors (vector j = tokens 2j, 2j+1; lane = (token & 1) * 4 + row). */

/* one weight block prepared for pair dots. Q8_0: w = signed bytes, u = |w| (u8; |-128| = 128 is
 * right as unsigned). Q4_0: u = the raw nibbles 0..15 (element order), w unused. */
typedef struct {
    __m256i w, u;
} QX(wblk);
/* one activation block: a = signed bytes (never -128: the quantizer clamps to +-127);
 * c = the Q4_0 offset correction for 8 * sum(a) (AVX2: int16 pairs, VNNI: -int32 quads) */
typedef struct {
    __m256i a, c;
} QX(ablk);

QX_TGT KZ_INL QX(wblk) QX(wprep)(const int q4, const uint8_t *b) {
    QX(wblk) r;
    if (q4) {
        /* the 16 bytes in both halves, high half shifted by 4: low nibbles = elements 0..15,
         * high nibbles = 16..31 */
        const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2)));
        r.u = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
        r.w = r.u;
    } else {
        r.w = _mm256_loadu_si256((const __m256i *)(b + 2));
        r.u = _mm256_abs_epi8(r.w);
    }
    return r;
}

QX_TGT KZ_INL QX(ablk) QX(aprep)(const int q4, const uint8_t *b) {
    QX(ablk) r;
    r.a = _mm256_loadu_si256((const __m256i *)(b + 2));
    if (q4) {
#if QX_VNNI
        r.c = _mm256_sub_epi32(_mm256_setzero_si256(),
                               _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), r.a));
#else
        r.c = _mm256_maddubs_epi16(_mm256_set1_epi8(8), r.a);
#endif
    } else {
        r.c = _mm256_setzero_si256();
    }
    return r;
}

/* 8 int32 partial sums of the 32-element dot of one weight block with one activation block.
 * Q8_0: |w| * (a with w's sign) = w * a. Q4_0: (u - 8) * a = u * a - 8 * a; the u8 x s8 pair
 * sums are <= 2 * 15 * 127 in magnitude and 8 * (a0 + a1) <= 2032, so int16 is exact. */
QX_TGT KZ_INL __m256i QX(pdot)(const int q4, QX(wblk) w, QX(ablk) a) {
#if QX_VNNI
    if (q4) return _mm256_dpbusd_epi32(a.c, w.u, a.a);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w.u, _mm256_sign_epi8(a.a, w.w));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (q4) return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(w.u, a.a), a.c), ones);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.u, _mm256_sign_epi8(a.a, w.w)), ones);
#endif
}

/* GEMV tile: 8 weight rows x 1 activation row, nb blocks; lane r = row r */
QX_TGT KZ_INL __m256 QX(tile8x1)(const int q4, int64_t nb, const uint8_t *const w[8], const uint8_t *a) {
    const size_t wbs = q4 ? 18 : 34;
    __m256 acc = _mm256_setzero_ps();
    /* the 8 rows' fp16 scales come in with one dword gather (offsets of rows from row 0) */
    const __m256i idx = _mm256_setr_epi32(0, (int)(w[1] - w[0]), (int)(w[2] - w[0]), (int)(w[3] - w[0]),
                                          (int)(w[4] - w[0]), (int)(w[5] - w[0]), (int)(w[6] - w[0]), (int)(w[7] - w[0]));
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs;
        const uint8_t *ab = a + (size_t)b * 34;
        const QX(ablk) av = QX(aprep)(q4, ab);
        __m256i p[8];
        KZ_UNROLL(8)
        for (int r = 0; r < 8; r++) p[r] = QX(pdot)(q4, QX(wprep)(q4, w[r] + o), av);
        const __m256i si = x86_hsum8(p);
        const __m256i g = _mm256_i32gather_epi32((const int *)(const void *)(w[0] + o), idx, 1);
#if QX_VNNI
        const __m128i dh = _mm256_cvtepi32_epi16(g);
#else
        const __m256i gl = _mm256_and_si256(g, _mm256_set1_epi32(0xffff));
        const __m128i dh = _mm_packus_epi32(_mm256_castsi256_si128(gl), _mm256_extracti128_si256(gl, 1));
#endif
        const __m256 sc = _mm256_mul_ps(_mm256_cvtph_ps(dh), _mm256_set1_ps(_cvtsh_ss(ld16(ab))));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(si), sc));
    }
    return acc;
}

/* GEMM tile: 4 weight rows x 4 activation rows; acc[j] lane (t & 1) * 4 + r for token 2j + (t & 1) */
QX_TGT KZ_INL void QX(tile4x4)(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4],
                               __m256 acc[2]) {
    const size_t wbs = q4 ? 18 : 34;
    const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs, oa = (size_t)b * 34;
        QX(wblk) wv[4];
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) wv[r] = QX(wprep)(q4, w[r] + o);
        __m256i p[8];
        QX(ablk) a0 = QX(aprep)(q4, a[0] + oa), a1 = QX(aprep)(q4, a[1] + oa);
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            p[r] = QX(pdot)(q4, wv[r], a0);
            p[4 + r] = QX(pdot)(q4, wv[r], a1);
        }
        const __m256i s0 = x86_hsum8(p);
        a0 = QX(aprep)(q4, a[2] + oa);
        a1 = QX(aprep)(q4, a[3] + oa);
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            p[r] = QX(pdot)(q4, wv[r], a0);
            p[4 + r] = QX(pdot)(q4, wv[r], a1);
        }
        const __m256i s1 = x86_hsum8(p);
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)ld16(w[0] + o), (short)ld16(w[1] + o),
                                                      (short)ld16(w[2] + o), (short)ld16(w[3] + o), 0, 0, 0, 0));
        const __m128 da = _mm_cvtph_ps(_mm_setr_epi16((short)ld16(a[0] + oa), (short)ld16(a[1] + oa),
                                                      (short)ld16(a[2] + oa), (short)ld16(a[3] + oa), 0, 0, 0, 0));
        const __m256 dw8 = _mm256_insertf128_ps(_mm256_castps128_ps256(dw), dw, 1);
        const __m256 da8 = _mm256_insertf128_ps(_mm256_castps128_ps256(da), da, 1);
        const __m256 sc0 = _mm256_mul_ps(dw8, _mm256_permutevar8x32_ps(da8, i01));
        const __m256 sc1 = _mm256_mul_ps(dw8, _mm256_permutevar8x32_ps(da8, i23));
        acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(_mm256_cvtepi32_ps(s0), sc0));
        acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(_mm256_cvtepi32_ps(s1), sc1));
    }
    acc[0] = acc0;
    acc[1] = acc1;
}

/* one row x one activation row: the reference's scalar float chain over blocks */
QX_TGT KZ_INL float QX(dot1)(const int q4, int64_t nb, const uint8_t *w, const uint8_t *a) {
    const size_t wbs = q4 ? 18 : 34;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += wbs, a += 34) {
        const __m256i p = QX(pdot)(q4, QX(wprep)(q4, w), QX(aprep)(q4, a));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        const int32_t sumi = _mm_cvtsi128_si32(h);
        s += (float)sumi * (_cvtsh_ss(ld16(w)) * _cvtsh_ss(ld16(a)));
    }
    return s;
}

X86_TILE_DRIVERS(QX_TGT, QX(tile8x1), QX(tile4x4), QX(tile8x1_st), QX(tile4x4_st), QX(gemv), QX(gemm))

QX_TGT float QX_EXPORT(dot_q8_0)(const void *w, const void *a, int64_t n) { return QX(dot1)(0, n / 32, w, a); }
QX_TGT float QX_EXPORT(dot_q4_0)(const void *w, const void *a, int64_t n) { return QX(dot1)(1, n / 32, w, a); }
QX_TGT void QX_EXPORT(gemm_q8_0)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                                 int64_t nt, float *y, int64_t ldy) {
    QX(gemm)(0, n, w, ws, nr, a, as, nt, y, ldy);
}
QX_TGT void QX_EXPORT(gemm_q4_0)(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as,
                                 int64_t nt, float *y, int64_t ldy) {
#if QX_VNNI
    if (nt >= 8) {
        lane_gemm_q4_0(n, w, ws, nr, a, as, nt, y, ldy, NULL);
        return;
    }
#endif
    QX(gemm)(1, n, w, ws, nr, a, as, nt, y, ldy);
}
