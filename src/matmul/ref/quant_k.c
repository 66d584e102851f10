/* K-quant weight types Q4_K, Q5_K, Q6_K (256-element super-blocks, activations Q8_K):
 * scalar reference dequantize (as gguf-py), reference quantizers (llama.cpp's
 * quantize_row_q{4,5,6}_K_ref without imatrix: make_qkx2_quants / make_qx_quants searches,
 * sequential float order, no FMA), and the integer dot with Q8_K.
 * The dot's exact operation order is the contract in quant_k_isa.h. */
#include <math.h>
#include <string.h>

#include "sys/cpu.h"
#include "sys/fp16.h"
#include "matmul/quant.h"
#include "matmul/ref/ref.h"
#include "matmul/quant_k_isa.h"
#include "model/types.h"

/* the searches accumulate a*b + c in float: the reference rounds twice, so no contraction */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static inline float h2f(const uint8_t *p) { return kz_fp16_to_f32(kzk_rd16(p)); }
static inline void f2h(uint8_t *p, float v) {
    const uint16_t h = kz_f32_to_fp16(v);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* round half to even via 1.5*2^23 (ggml's nearest_int); defined (if meaningless) for NaN and
 * huge values, which the callers clamp */
static inline int nearest_int(float v) {
    const float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------- dequantize ---------------- */

void kz_ref_dequant_q4_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, b += KZK_Q4_BYTES, dst += KZK_QK) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], m[8];
        kzk_scales_mins(b + 4, sc, m);
        const uint8_t *qs = b + 16;
        for (int e = 0; e < KZK_QK; e++) {
            const int j = e / 32;
            const uint8_t byte = qs[32 * (e / 64) + e % 32];
            const int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
            dst[e] = d * (float)sc[j] * (float)q - dmin * (float)m[j];
        }
    }
}

void kz_ref_dequant_q5_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, b += KZK_Q5_BYTES, dst += KZK_QK) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], m[8];
        kzk_scales_mins(b + 4, sc, m);
        const uint8_t *qh = b + 16, *qs = b + 48;
        for (int e = 0; e < KZK_QK; e++) {
            const int j = e / 32;
            const uint8_t byte = qs[32 * (e / 64) + e % 32];
            const int lo = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
            const int q = lo | (((qh[e % 32] >> (e / 32)) & 1) << 4);
            dst[e] = d * (float)sc[j] * (float)q - dmin * (float)m[j];
        }
    }
}

void kz_ref_dequant_q6_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, b += KZK_Q6_BYTES, dst += KZK_QK) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = h2f(b + 208);
        for (int e = 0; e < KZK_QK; e++) {
            const int c = e / 128, r = e % 128, g = r / 32, l = r % 32;
            const int lo = (ql[64 * c + l + 32 * (g & 1)] >> (4 * (g >> 1))) & 15;
            const int hi = (qh[32 * c + l] >> (2 * g)) & 3;
            dst[e] = d * (float)sc[e / 16] * (float)((lo | (hi << 4)) - 32);
        }
    }
}

/* ---------------- reference quantizers ---------------- */

/* asymmetric weighted fit of n values to L in [0, nmax] with x ~ scale * L - the_min; grid
 * search over iscale = (rmin + rdelta * is + nmax) / (max - min), least squares per candidate */
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, float rmin,
                  float rdelta, int nstep) {
    float mn = x[0], mx = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0) mn = 0;
    if (mx == mn) {
        memset(L, 0, (size_t)n);
        *the_min = -mn;
        return 0.0f;
    }
    float iscale = (float)nmax / (mx - mn);
    float scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
        const float diff = scale * (float)L[i] + mn - x[i];
        best += w[i] * (diff * diff);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float wl = w[i] * (float)l;
            sl += wl;
            sl2 += wl * (float)l;
            sxl += wl * x[i];
        }
        const float D = sum_w * sl2 - sl * sl;
        if (D > 0) {
            float s1 = (sum_w * sxl - sum_x * sl) / D;
            float m1 = (sl2 * sum_x - sl * sxl) / D;
            if (m1 > 0) {
                m1 = 0;
                s1 = sxl / sl2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float diff = s1 * (float)Laux[i] + m1 - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = s1;
                mn = m1;
            }
        }
    }
    *the_min = -mn;
    return scale;
}

/* Q4_K (nbits 4) / Q5_K (nbits 5): 8 sub-blocks of 32 fitted by qkx2, 6-bit scales/mins */
static void quant_q45_block(const float *x, uint8_t *b, int nbits) {
    const int nmax = (1 << nbits) - 1;
    uint8_t L[KZK_QK];
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = nbits == 4 ? qkx2(32, nmax, xj, w, L + 32 * j, &mins[j], -1.0f, 0.1f, 20)
                               : qkx2(32, nmax, xj, w, L + 32 * j, &mins[j], -0.5f, 0.1f, 15);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_s = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_m = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sp = b + 4;
    memset(sp, 0, 12);
    for (int j = 0; j < 8; j++) {
        /* the reference stores nearest_int into a uint8_t before the min: keep that truncation */
        uint8_t ls = (uint8_t)nearest_int(inv_s * scales[j]), lm = (uint8_t)nearest_int(inv_m * mins[j]);
        if (ls > 63) ls = 63;
        if (lm > 63) lm = 63;
        if (j < 4) {
            sp[j] = ls;
            sp[j + 4] = lm;
        } else {
            sp[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            sp[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sp[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    f2h(b, max_scale / 63.0f);
    f2h(b + 2, max_min / 63.0f);
    uint8_t sc[8], m[8];
    kzk_scales_mins(sp, sc, m);
    const float d = h2f(b), dmin = h2f(b + 2);
    for (int j = 0; j < 8; j++) {
        const float dd = d * (float)sc[j];
        if (dd == 0.0f) continue; /* keep the search's levels */
        const float dm = dmin * (float)m[j];
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clampi(nearest_int((x[32 * j + i] + dm) / dd), 0, nmax);
    }
    if (nbits == 4) {
        uint8_t *qs = b + 16;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    } else {
        uint8_t *qh = b + 16, *qs = b + 48;
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                qh[l] |= (uint8_t)(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
                qs[32 * c + l] = (uint8_t)((l1 & 15) | ((l2 & 15) << 4));
            }
    }
}

size_t kz_ref_quant_q4_K(const float *src, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / KZK_QK; ib++) quant_q45_block(src + ib * KZK_QK, (uint8_t *)dst + ib * KZK_Q4_BYTES, 4);
    return (size_t)(n / KZK_QK) * KZK_Q4_BYTES;
}
size_t kz_ref_quant_q5_K(const float *src, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / KZK_QK; ib++) quant_q45_block(src + ib * KZK_QK, (uint8_t *)dst + ib * KZK_Q5_BYTES, 5);
    return (size_t)(n / KZK_QK) * KZK_Q5_BYTES;
}

#define GROUP_EPS 1e-15f

/* symmetric fit of n values to L in [0, 2*nmax) (signed level + nmax), weights x^2 (rmse_type 1):
 * 18 extra candidate iscales -(nmax + 0.1 * is) / max, keep the best sum(wxl)^2 / sum(wl^2) */
static float qx(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            mx = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / mx;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / mx;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_q6_block(const float *x, uint8_t *b) {
    int8_t L[KZK_QK];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int g = 0; g < 16; g++) {
        scales[g] = qx(16, 32, x + 16 * g, L + 16 * g);
        const float a = fabsf(scales[g]);
        if (a > max_abs) {
            max_abs = a;
            max_scale = scales[g];
        }
    }
    if (max_abs < GROUP_EPS) {
        memset(b, 0, KZK_Q6_BYTES);
        return;
    }
    const float iscale = -128.0f / max_scale;
    f2h(b + 208, 1 / iscale);
    int8_t *sc = (int8_t *)(b + 192);
    for (int g = 0; g < 16; g++) {
        const int v = nearest_int(iscale * scales[g]);
        sc[g] = (int8_t)(v < 127 ? v : 127);
    }
    const float d = h2f(b + 208);
    for (int g = 0; g < 16; g++) {
        const float dd = d * (float)sc[g];
        if (dd == 0.0f) continue;
        for (int i = 0; i < 16; i++) L[16 * g + i] = (int8_t)(clampi(nearest_int(x[16 * g + i] / dd), -32, 31) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 32; l++) {
            const int8_t *Lc = L + 128 * c;
            const int q1 = Lc[l], q2 = Lc[l + 32], q3 = Lc[l + 64], q4 = Lc[l + 96];
            ql[64 * c + l] = (uint8_t)((q1 & 15) | ((q3 & 15) << 4));
            ql[64 * c + 32 + l] = (uint8_t)((q2 & 15) | ((q4 & 15) << 4));
            qh[32 * c + l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
}

size_t kz_ref_quant_q6_K(const float *src, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / KZK_QK; ib++) quant_q6_block(src + ib * KZK_QK, (uint8_t *)dst + ib * KZK_Q6_BYTES);
    return (size_t)(n / KZK_QK) * KZK_Q6_BYTES;
}

/* ---------------- dot with Q8_K (the reference order of quant_k_isa.h) ---------------- */

static inline int16_t act_bsum(const uint8_t *a, int s) {
    int16_t v;
    memcpy(&v, a + 260 + 2 * s, 2);
    return v;
}

float kz_ref_dot_q4_K(const void *w, const void *act, int64_t n) {
    const uint8_t *x = w, *a = act;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, x += KZK_Q4_BYTES, a += KZK_A_BYTES) {
        uint8_t sc[8], m[8];
        kzk_scales_mins(x + 4, sc, m);
        const uint8_t *qs = x + 16;
        const int8_t *q8 = (const int8_t *)(a + 4);
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (qs[32 * c + l] & 15) * q8[64 * c + l];
                s1 += (qs[32 * c + l] >> 4) * q8[64 * c + 32 + l];
            }
            sumi += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++) summ += m[j] * (act_bsum(a, 2 * j) + act_bsum(a, 2 * j + 1));
        s = kzk_fin_q45(s, kzk_act_d(a), h2f(x), h2f(x + 2), sumi, summ);
    }
    return s;
}

float kz_ref_dot_q5_K(const void *w, const void *act, int64_t n) {
    const uint8_t *x = w, *a = act;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, x += KZK_Q5_BYTES, a += KZK_A_BYTES) {
        uint8_t sc[8], m[8];
        kzk_scales_mins(x + 4, sc, m);
        const uint8_t *qh = x + 16, *qs = x + 48;
        const int8_t *q8 = (const int8_t *)(a + 4);
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                const int q0 = (qs[32 * c + l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
                const int q1 = (qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                s0 += q0 * q8[64 * c + l];
                s1 += q1 * q8[64 * c + 32 + l];
            }
            sumi += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++) summ += m[j] * (act_bsum(a, 2 * j) + act_bsum(a, 2 * j + 1));
        s = kzk_fin_q45(s, kzk_act_d(a), h2f(x), h2f(x + 2), sumi, summ);
    }
    return s;
}

float kz_ref_dot_q6_K(const void *w, const void *act, int64_t n) {
    const uint8_t *x = w, *a = act;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, x += KZK_Q6_BYTES, a += KZK_A_BYTES) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        const int8_t *q8 = (const int8_t *)(a + 4);
        int32_t sumi = 0;
        for (int g = 0; g < 16; g++) {
            int32_t sg = 0;
            for (int i = 0; i < 16; i++) {
                const int e = 16 * g + i, c = e / 128, r = e % 128, gg = r / 32, l = r % 32;
                const int lo = (ql[64 * c + l + 32 * (gg & 1)] >> (4 * (gg >> 1))) & 15;
                const int hi = (qh[32 * c + l] >> (2 * gg)) & 3;
                sg += ((lo | (hi << 4)) - 32) * q8[e];
            }
            sumi += sc[g] * sg;
        }
        s = kzk_fin_q6(s, kzk_act_d(a), h2f(x + 208), sumi);
    }
    return s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_q4_K, kz_ref_dot_q4_K)
KZ_SCALAR_GEMM(kz_ref_gemm_q5_K, kz_ref_dot_q5_K)
KZ_SCALAR_GEMM(kz_ref_gemm_q6_K, kz_ref_dot_q6_K)
