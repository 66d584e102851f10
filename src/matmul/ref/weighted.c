/* Weighted quantizers: what llama.cpp's quantize_<type>(src, dst, nrow, n_per_row, quant_weights)
 * writes when given an importance vector (one per column, from an imatrix), float ops in the
 * order of ggml-quants.c (no FMA), so the bytes match. Without importance (imatrix NULL) each type
 * takes llama.cpp's unweighted path, which is our reference quantizer (kz_quant_row).
 *   Q4_0 / Q5_0:  per 32-block make_qx with weights qw * sqrt(sigma2 + x^2), sigma2 = mean(x^2)
 *                 over the row; Q4_1 / Q5_1: make_qkx3 (min/scale) with the same weights
 *   Q2_K:         make_qkx3 per 16 (sigma2 = mean x^2 of the super-block), scales by make_qp
 *   Q3_K:         make_qx per 16, the 16 scales by make_qx (sigma2 = 2 mean x^2)
 *   Q4_K / Q5_K:  make_qkx3 per 32, scales and mins by make_qp (sigma2 = 2 mean x^2)
 *   Q6_K:         make_qx per 16 with the raw importance
 *   IQ4_NL/IQ4_XS: the codebook search with qw * sqrt(sigma2 + x^2), sigma2 = 2 mean x^2 of the
 *                 block (NL: 32) or super-block (XS: 256)
 *   Q8_0, F16, BF16, F32: importance unused. */
#include <math.h>
#include <string.h>

#include "matmul/block.h"
#include "matmul/kernels.h"
#include "matmul/quant.h"
#include "matmul/ref/ref.h"
#include "model/types.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QK 32
#define QKK 256

/* asymmetric weighted fit (make_qkx3_quants with weights, use_mad false): x ~ scale * L - the_min,
 * L in [0, nmax]; the grid iscale = (rmin + rdelta * is + nmax) / (max - min), is = 0..nstep */
static float qkx3(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, uint8_t *Laux,
                  float rmin, float rdelta, int nstep) {
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0;
    if (!(mx > mn)) {
        memset(L, 0, (size_t)n);
        *the_min = -mn;
        return 0.0f;
    }
    float iscale = (float)nmax / (mx - mn), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
        float diff = scale * (float)L[i] + mn - x[i];
        diff = diff * diff;
        best += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sl2 - sl * sl;
        if (D > 0) {
            float ts = (sum_w * sxl - sum_x * sl) / D, tm = (sl2 * sum_x - sl * sxl) / D;
            if (tm > 0) {
                tm = 0;
                ts = sxl / sl2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = ts * (float)Laux[i] + tm - x[i];
                diff = diff * diff;
                err += w[i] * diff;
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = ts;
                mn = tm;
            }
        }
    }
    *the_min = -mn;
    return scale;
}

/* non-negative values to L in [0, nmax] with weights (make_qp_quants): best of 9 iscales by
 * weighted mse, then 5 coordinate passes. L keeps the reference's uint8 wrap of a negative level. */
static float qp(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float mx = 0;
    for (int i = 0; i < n; i++) mx = mx > x[i] ? mx : x[i];
    if (mx < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)nmax / mx;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float isc = (0.1f * (float)is + (float)nmax) / mx, sc = 1 / isc;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(isc * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - sc * (float)l;
            mse += w[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = isc;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int nl = nearest_int(x[i] * sl2 / slx);
                nl = nl < nmax ? nl : nmax;
                if (nl != L[i]) {
                    slx += w[i] * x[i] * (float)nl;
                    sl2 += w[i] * (float)nl * (float)nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

static float sum_sq(const float *x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; j++) s += x[j] * x[j];
    return s;
}

/* importance of one block: qw * sqrt(sigma2 + x^2) */
static void imp_weights(const float *x, const float *qw, float sigma2, int n, float *w) {
    for (int j = 0; j < n; j++) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

/* ---- 32-element types, one row (sigma2 over the whole row) ---- */

static void row_b32(uint32_t type, const float *x, uint8_t *y, int64_t n, const float *qw) {
    const float sigma2 = sum_sq(x, n) / (float)n;
    float w[QK];
    int q[QK];
    for (int64_t ib = 0; ib < n / QK; ib++) {
        const float *xb = x + QK * ib;
        imp_weights(xb, qw + QK * ib, sigma2, QK, w);
        if (type == KZ_T_Q4_0 || type == KZ_T_Q5_0) {
            const int nmax = type == KZ_T_Q4_0 ? 8 : 16;
            int8_t L[QK];
            const float d = kz_ref_make_qx(QK, nmax, xb, L, w);
            for (int j = 0; j < QK; j++) q[j] = L[j];
            if (type == KZ_T_Q4_0) {
                f2h(y, d);
                kz_ref_pack32(q, y + 2, NULL);
                y += 18;
            } else {
                f2h(y, d);
                kz_ref_pack32(q, y + 6, y + 2);
                y += 22;
            }
        } else { /* Q4_1 / Q5_1 */
            const int nmax = type == KZ_T_Q4_1 ? 15 : 31;
            uint8_t L[QK], Laux[QK];
            float mn;
            const float d = qkx3(QK, nmax, xb, w, L, &mn, Laux, -0.9f, 0.05f, 36);
            for (int j = 0; j < QK; j++) q[j] = L[j];
            f2h(y, d);
            f2h(y + 2, -mn);
            if (type == KZ_T_Q4_1) {
                kz_ref_pack32(q, y + 4, NULL);
                y += 20;
            } else {
                kz_ref_pack32(q, y + 8, y + 4);
                y += 24;
            }
        }
    }
}

static void iq4_nl_row(const float *x, uint8_t *y, int64_t n, const float *qw) {
    float w[QK];
    for (int64_t ib = 0; ib < n / QK; ib++, y += 18) {
        const float *xb = x + QK * ib;
        float sigma2 = sum_sq(xb, QK);
        sigma2 *= 2.0f / QK;
        imp_weights(xb, qw + QK * ib, sigma2, QK, w);
        kz_ref_iq4_nl_block(xb, kz_ref_iq4_scale(xb, w), y);
    }
}

/* ---- K-quant super-blocks ---- */

static void q2_K_block(const float *x, const float *qw, uint8_t *y) {
    uint8_t L[QKK], Laux[16], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], w[16];
    const float sigma2 = sum_sq(x, QKK) / QKK;
    for (int j = 0; j < 16; j++) {
        imp_weights(x + 16 * j, qw + 16 * j, sigma2, 16, w);
        sw[j] = 0;
        for (int l = 0; l < 16; l++) sw[j] += w[l];
        scales[j] = qkx3(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
    }
    const float dm = qp(16, 15, scales, Ls, sw), mm = qp(16, 15, mins, Lm, sw);
    f2h(y + 80, dm);
    f2h(y + 82, mm);
    for (int j = 0; j < 16; j++) y[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    kz_ref_q2_K_finish(x, L, y);
}

static void q3_K_block(const float *x, const float *qw, uint8_t *y) {
    int8_t L[QKK], Ls[16];
    float scales[16], sw[16], w[16];
    const float sigma2 = 2 * sum_sq(x, QKK) / QKK;
    for (int j = 0; j < 16; j++) {
        imp_weights(x + 16 * j, qw + 16 * j, sigma2, 16, w);
        float s = 0;
        for (int l = 0; l < 16; l++) s += w[l];
        sw[j] = s;
        scales[j] = kz_ref_make_qx(16, 4, x + 16 * j, L + 16 * j, w);
    }
    uint8_t *sc = y + 96;
    memset(sc, 0, 12);
    const float d_block = kz_ref_make_qx(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; j++) {
        int l = Ls[j];
        if (j < 8) sc[j] = (uint8_t)(l & 0xF);
        else sc[j - 8] |= (uint8_t)((l & 0xF) << 4);
        l >>= 4;
        sc[8 + j % 4] |= (uint8_t)(l << (2 * (j / 4)));
    }
    f2h(y + 108, d_block);
    kz_ref_q3_K_finish(x, L, y);
}

/* Q4_K (nbits 4) / Q5_K (nbits 5) */
static void q45_K_block(const float *x, const float *qw, uint8_t *b, int nbits) {
    const int nmax = (1 << nbits) - 1;
    uint8_t L[QKK], Laux[32], Ls[8], Lm[8];
    float w[32], sw[8], mins[8], scales[8];
    const float sigma2 = 2 * sum_sq(x, QKK) / QKK;
    for (int j = 0; j < 8; j++) {
        imp_weights(x + 32 * j, qw + 32 * j, sigma2, 32, w);
        float s = 0;
        for (int l = 0; l < 32; l++) s += w[l];
        sw[j] = s;
        scales[j] = qkx3(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
    }
    const float d_block = qp(8, 63, scales, Ls, sw), m_block = qp(8, 63, mins, Lm, sw);
    if (nbits == 5) /* the Q5_K code clamps, the Q4_K code does not */
        for (int j = 0; j < 8; j++) {
            Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
            Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
        }
    kz_ref_q45_K_finish(x, Ls, Lm, d_block, m_block, nbits, L, b);
}

size_t kz_quant_row_w(uint32_t type, const float *src, void *dst, int64_t n_per_row, int64_t nrows, const float *imatrix) {
    const kz_type_info *ti = kz_type_get(type);
    const size_t rb = kz_row_bytes(type, n_per_row);
    if (!ti || rb == 0 || nrows < 0) return 0;
    uint8_t *y = dst;
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, y += rb) {
        if (!imatrix || type == KZ_T_Q8_0 || type == KZ_T_F32 || type == KZ_T_F16 || type == KZ_T_BF16) {
            if (kz_quant_row(type, src, y, n_per_row) != rb) return 0;
            continue;
        }
        switch (type) {
        case KZ_T_Q4_0: case KZ_T_Q4_1: case KZ_T_Q5_0: case KZ_T_Q5_1:
            row_b32(type, src, y, n_per_row, imatrix);
            break;
        case KZ_T_IQ4_NL: iq4_nl_row(src, y, n_per_row, imatrix); break;
        default:
            for (int64_t b = 0; b < n_per_row / QKK; b++) {
                const float *x = src + QKK * b, *qw = imatrix + QKK * b;
                uint8_t *yb = y + (size_t)b * ti->bytes;
                switch (type) {
                case KZ_T_Q2_K: q2_K_block(x, qw, yb); break;
                case KZ_T_Q3_K: q3_K_block(x, qw, yb); break;
                case KZ_T_Q4_K: q45_K_block(x, qw, yb, 4); break;
                case KZ_T_Q5_K: q45_K_block(x, qw, yb, 5); break;
                case KZ_T_Q6_K: kz_ref_q6_K_block(x, qw, yb); break;
                case KZ_T_IQ4_XS: kz_ref_iq4_xs_block(x, qw, yb); break;
                default: return 0;
                }
            }
        }
    }
    return rb * (size_t)nrows;
}
