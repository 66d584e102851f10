/* K-quant block types (256-element super-blocks, activations Q8_K): Q2_K, Q3_K, Q4_K, Q5_K,
 * Q6_K and IQ4_XS. Scalar reference dequantize (as gguf-py), the quantizers llama-quantize runs
 * without imatrix (quantize_row_*_K_ref: make_qkx2_quants / make_qx_quants searches; IQ4_XS:
 * quantize_iq4_xs with ntry = 7), float ops in the reference's order, no FMA, and the dots.
 *
 * Layouts (ggml block_q*_K / block_iq4_xs):
 *   Q2_K  (84 B):  u8 scales[16] (lo nibble scale, hi nibble min), u8 qs[64], fp16 d, fp16 dmin
 *   Q3_K  (110 B): u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6-bit, minus 32), fp16 d
 *   Q4_K  (144 B): fp16 d, fp16 dmin, scales[12], qs[128]
 *   Q5_K  (176 B): fp16 d, fp16 dmin, scales[12], qh[32], qs[128]
 *   Q6_K  (210 B): ql[128], qh[64], int8 scales[16], fp16 d
 *   IQ4_XS(136 B): fp16 d, u16 scales_h, u8 scales_l[4], u8 qs[128] (IQ4_NL codebook)
 *
 * Dot with Q8_K, per super-block (integer sums exact in int32, then float; super-blocks summed
 * in order into a float starting at 0; SIMD levels reproduce exactly these float ops):
 *   Q2_K:   isum = sum_s sc[s] * sum_{i in s} q_i a_i ; summ = sum_s m[s] * bsums[s]
 *           acc += (da * d) * (float)isum - (da * dmin) * (float)summ
 *   Q3_K:   isum = sum_s sc[s] * sum_{i in s} q_i a_i   (q in -4..3)
 *           acc += (da * d) * (float)isum
 *   IQ4_XS: isum = sum_ib (ls[ib] - 32) * sum_{i in ib} kv[q_i] a_i
 *           acc += (da * d) * (float)isum
 *   Q4_K / Q5_K / Q6_K: the contract in kernels.h (kzk_fin_*). */
#include <math.h>
#include <string.h>

#include "sys/fp16.h"
#include "matmul/block.h"
#include "matmul/kernels.h"
#include "matmul/ref/ref.h"
#include "matmul/ref/act.h"
#include "model/types.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define QKK 256
#define Q2K_BYTES 84
#define Q3K_BYTES 110
#define IQ4XS_BYTES 136

static inline int16_t act_bsum(const uint8_t *a, int s) { int16_t v; memcpy(&v, a + 260 + 2 * s, 2); return v; }



/* ---- element decoders shared by dequant and dot ---- */

/* 2-bit code of element e: qs[32*(e/128) + e%32] >> 2*((e%128)/32) */
static inline int q2_code(const uint8_t *qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

static void kz_k2_q3_scales(const uint8_t *sc12, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? sc12[j] & 0xF : sc12[j - 8] >> 4;
        int hi = (sc12[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}
static inline int q3_val(const uint8_t *b, int e) {
    int h = (b[e % 32] >> (e / 32)) & 1;
    return q2_code(b + 32, e) - (h ? 0 : 4);
}
static inline int iq4_ls(const uint8_t *b, int ib) {
    int lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
    int hi = (rd16(b + 2) >> (2 * ib)) & 3;
    return (lo | (hi << 4)) - 32;
}
static inline int iq4_code(const uint8_t *b, int e) {
    int ib = e / 32, t = e % 32;
    uint8_t byte = b[8 + 16 * ib + (t % 16)];
    return t < 16 ? byte & 0xF : byte >> 4;
}

/* ---------------- dequantize ---------------- */

void kz_ref_dequant_q2_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += Q2K_BYTES, dst += QKK) {
        const float d = h2f(b + 80), dmin = h2f(b + 82);
        for (int e = 0; e < QKK; e++) {
            const uint8_t sc = b[e / 16];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            dst[e] = dl * (float)q2_code(b + 16, e) - ml;
        }
    }
}

void kz_ref_dequant_q3_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += Q3K_BYTES, dst += QKK) {
        const float d = h2f(b + 108);
        int8_t sc[16];
        kz_k2_q3_scales(b + 96, sc);
        for (int e = 0; e < QKK; e++) dst[e] = (d * (float)sc[e / 16]) * (float)q3_val(b, e);
    }
}

void kz_ref_dequant_iq4_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QKK; i++, b += IQ4XS_BYTES, dst += QKK) {
        const float d = h2f(b);
        for (int e = 0; e < QKK; e++) dst[e] = (d * (float)iq4_ls(b, e / 32)) * (float)kz_iq4nl_values[iq4_code(b, e)];
    }
}

/* ---------------- quantize (references) ---------------- */

/* asymmetric weighted fit of n values to L in [0, nmax] with x ~ scale * L - the_min (llama.cpp
 * make_qkx2_quants, float ops in its order): grid search over iscale = (rmin + rdelta * is +
 * nmax) / (max - min), least squares per candidate; error |diff| (use_mad) or diff^2 */
static float qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, uint8_t *Laux,
                  float rmin, float rdelta, int nstep, int use_mad) {
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
    float iscale = (float)nmax / (mx - mn), scale = 1.0f / iscale, best = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
        float diff = scale * (float)L[i] + mn - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (mx - mn);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sl2 += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sl2 - sl * sl;
        if (D > 0) {
            float ts = (sum_w * sxl - sum_x * sl) / D, tm = (sl2 * sum_x - sl * sxl) / D;
            if (tm > 0) {
                tm = 0;
                ts = sxl / sl2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = ts * (float)Laux[i] + tm - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
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

size_t kz_ref_quant_q2_K(const float *src, void *dst, int64_t n) {
    uint8_t *y = dst;
    for (int64_t ib = 0; ib < n / QKK; ib++, y += Q2K_BYTES, src += QKK) {
        const float *x = src;
        uint8_t L[QKK], Laux[16];
        float w[16], mins[16], scales[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = qkx2(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        uint8_t *sc = y;
        if (max_scale > 0) {
            const float is = 15.0f / max_scale;
            for (int j = 0; j < 16; j++) sc[j] = (uint8_t)clampi(nearest_int(is * scales[j]), 0, 15);
            wr16(y + 80, kz_f32_to_fp16(max_scale / 15.0f));
        } else {
            memset(sc, 0, 16);
            wr16(y + 80, kz_f32_to_fp16(0.0f));
        }
        if (max_min > 0) {
            const float is = 15.0f / max_min;
            for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)(clampi(nearest_int(is * mins[j]), 0, 15) << 4);
            wr16(y + 82, kz_f32_to_fp16(max_min / 15.0f));
        } else {
            wr16(y + 82, kz_f32_to_fp16(0.0f));
        }
        kz_ref_q2_K_finish(x, L, y);
    }
    return (size_t)(n / QKK) * Q2K_BYTES;
}

void kz_ref_q2_K_finish(const float *x, uint8_t *L, uint8_t *y) {
    const uint8_t *sc = y;
    const float D = h2f(y + 80), DM = h2f(y + 82);
    for (int j = 0; j < 16; j++) {
        const float d = D * (float)(sc[j] & 0xF);
        if (d == 0.0f) continue;
        const float dm = DM * (float)(sc[j] >> 4);
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)clampi(nearest_int((x[16 * j + i] + dm) / d), 0, 3);
    }
    for (int j = 0; j < QKK; j += 128)
        for (int l = 0; l < 32; l++)
            y[16 + j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* symmetric search with weights x^2 and 5 coordinate passes (llama.cpp make_q3_quants, rmse) */
static float q3_search(int n, int nmax, const float *x, int8_t *L) {
    float mx = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            mx = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -(float)nmax / mx;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

size_t kz_ref_quant_q3_K(const float *src, void *dst, int64_t n) {
    uint8_t *y = dst;
    for (int64_t ib = 0; ib < n / QKK; ib++, y += Q3K_BYTES, src += QKK) {
        const float *x = src;
        int8_t L[QKK];
        float scales[16], max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = q3_search(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        uint8_t *sc = y + 96;
        memset(sc, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) sc[j] = (uint8_t)(l & 0xF);
                else sc[j - 8] |= (uint8_t)((l & 0xF) << 4);
                sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            wr16(y + 108, kz_f32_to_fp16(1.0f / iscale));
        } else {
            wr16(y + 108, kz_f32_to_fp16(0.0f));
        }
        kz_ref_q3_K_finish(x, L, y);
    }
    return (size_t)(n / QKK) * Q3K_BYTES;
}

void kz_ref_q3_K_finish(const float *x, int8_t *L, uint8_t *y) {
    int8_t s16[16];
    kz_k2_q3_scales(y + 96, s16);
    const float D = h2f(y + 108);
    for (int j = 0; j < 16; j++) {
        const float d = D * (float)s16[j];
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    uint8_t *hm = y;
    memset(hm, 0, 32);
    for (int j = 0; j < QKK; j++)
        if (L[j] > 3) {
            hm[j % 32] |= (uint8_t)(1u << (j / 32));
            L[j] = (int8_t)(L[j] - 4);
        }
    for (int j = 0; j < QKK; j += 128)
        for (int l = 0; l < 32; l++)
            y[32 + j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* one IQ4_XS super-block (quantize_iq4_xs, ntry = 7): each 32-block's scale by the search of
 * b32.c with weights x^2, or with an importance qw: qw * sqrt(sigma2 + x^2), sigma2 = 2 mean(x^2) */
void kz_ref_iq4_xs_block(const float *src, const float *qw, uint8_t *y) {
    float scales[8], max_scale = 0, amax_scale = 0, w[32];
    float sigma2 = 0;
    for (int j = 0; j < QKK; j++) sigma2 += src[j] * src[j];
    sigma2 *= 2.0f / QKK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = src + 32 * ib;
        for (int j = 0; j < 32; j++) w[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        const float d = kz_ref_iq4_scale(xb, w);
        scales[ib] = d;
        float a = fabsf(d);
        if (a > amax_scale) {
            amax_scale = a;
            max_scale = d;
        }
    }
    memset(y, 0, IQ4XS_BYTES);
    const float d = -max_scale / 32.0f;
    wr16(y, kz_f32_to_fp16(d));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t sh = 0;
    uint8_t L[32];
    for (int ib = 0; ib < 8; ib++) {
        int l = clampi(nearest_int(id * scales[ib]), -32, 31);
        const float dl = d * (float)l, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
        const float *xb = src + 32 * ib;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)kz_ref_iq4_index(idl * xb[j]);
        l += 32;
        y[4 + ib / 2] |= (uint8_t)((l & 0xF) << (4 * (ib % 2)));
        sh |= (uint16_t)((l >> 4) << (2 * ib));
        for (int j = 0; j < 16; j++) y[8 + 16 * ib + j] = (uint8_t)(L[j] | (L[16 + j] << 4));
    }
    wr16(y + 2, sh);
}

size_t kz_ref_quant_iq4_xs(const float *src, void *dst, int64_t n) {
    uint8_t *y = dst;
    for (int64_t sb = 0; sb < n / QKK; sb++, y += IQ4XS_BYTES, src += QKK) kz_ref_iq4_xs_block(src, NULL, y);
    return (size_t)(n / QKK) * IQ4XS_BYTES;
}

/* ---------------- dot with Q8_K (float ops exactly as in the header comment) ---------------- */

float kz_ref_dot_q2_K(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++, x += Q2K_BYTES, y += KZ_Q8_K_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        int32_t isum = 0, summ = 0;
        for (int s = 0; s < 16; s++) {
            int32_t p = 0;
            for (int e = 16 * s; e < 16 * s + 16; e++) p += q2_code(x + 16, e) * q8[e];
            isum += (x[s] & 0xF) * p;
            summ += (x[s] >> 4) * act_bsum(y, s);
        }
        const float da = act_d(y);
        acc += (da * h2f(x + 80)) * (float)isum - (da * h2f(x + 82)) * (float)summ;
    }
    return acc;
}

float kz_ref_dot_q3_K(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++, x += Q3K_BYTES, y += KZ_Q8_K_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        int8_t sc[16];
        kz_k2_q3_scales(x + 96, sc);
        int32_t isum = 0;
        for (int s = 0; s < 16; s++) {
            int32_t p = 0;
            for (int e = 16 * s; e < 16 * s + 16; e++) p += q3_val(x, e) * q8[e];
            isum += sc[s] * p;
        }
        acc += (act_d(y) * h2f(x + 108)) * (float)isum;
    }
    return acc;
}

float kz_ref_dot_iq4_xs(const void *w, const void *a, int64_t n) {
    const uint8_t *x = w, *y = a;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++, x += IQ4XS_BYTES, y += KZ_Q8_K_BYTES) {
        const int8_t *q8 = (const int8_t *)(y + 4);
        int32_t isum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int32_t p = 0;
            for (int e = 32 * ib; e < 32 * ib + 32; e++) p += kz_iq4nl_values[iq4_code(x, e)] * q8[e];
            isum += iq4_ls(x, ib) * p;
        }
        acc += (act_d(y) * h2f(x)) * (float)isum;
    }
    return acc;
}

KZ_SCALAR_GEMM(kz_ref_gemm_q2_K, kz_ref_dot_q2_K)
KZ_SCALAR_GEMM(kz_ref_gemm_q3_K, kz_ref_dot_q3_K)
KZ_SCALAR_GEMM(kz_ref_gemm_iq4_xs, kz_ref_dot_iq4_xs)

/* ---------------- Q4_K / Q5_K / Q6_K: dequantize ---------------- */

/* code 0..31 of element e of a Q4_K (nbits 4) / Q5_K (nbits 5) super-block: the low nibble from
 * qs, for Q5_K bit e / 32 of qh[e % 32] on top */
static inline int q45_code(const uint8_t *b, int nbits, int e) {
    const uint8_t byte = b[(nbits == 5 ? 48 : 16) + 32 * (e / 64) + e % 32];
    const int lo = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
    return nbits == 5 ? lo | (((b[16 + e % 32] >> (e / 32)) & 1) << 4) : lo;
}

static void dequant_q45(const void *src, float *dst, int64_t n, int nbits) {
    const uint8_t *b = src;
    const size_t bytes = nbits == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, b += bytes, dst += KZK_QK) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], m[8];
        kzk_scales_mins(b + 4, sc, m);
        for (int e = 0; e < KZK_QK; e++)
            dst[e] = d * (float)sc[e / 32] * (float)q45_code(b, nbits, e) - dmin * (float)m[e / 32];
    }
}
void kz_ref_dequant_q4_K(const void *src, float *dst, int64_t n) { dequant_q45(src, dst, n, 4); }
void kz_ref_dequant_q5_K(const void *src, float *dst, int64_t n) { dequant_q45(src, dst, n, 5); }

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

/* ---------------- Q4_K / Q5_K / Q6_K: reference quantizers ---------------- */

/* Q4_K (nbits 4) / Q5_K (nbits 5): 8 sub-blocks of 32 fitted by qkx2, 6-bit scales/mins */
static void quant_q45_block(const float *x, uint8_t *b, int nbits) {
    const int nmax = (1 << nbits) - 1;
    uint8_t L[KZK_QK], Laux[32];
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = nbits == 4 ? qkx2(32, nmax, xj, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, 0)
                               : qkx2(32, nmax, xj, w, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_s = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_m = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        /* the reference stores nearest_int into a uint8_t before the min: keep that truncation */
        ls[j] = (uint8_t)nearest_int(inv_s * scales[j]);
        lm[j] = (uint8_t)nearest_int(inv_m * mins[j]);
        if (ls[j] > 63) ls[j] = 63;
        if (lm[j] > 63) lm[j] = 63;
    }
    kz_ref_q45_K_finish(x, ls, lm, max_scale / 63.0f, max_min / 63.0f, nbits, L, b);
}

/* The end shared by the reference and the weighted Q4_K/Q5_K quantizers: 6-bit scales and mins
 * packed, d and dmin stored, each level recomputed from the stored (rounded) scales, then the
 * nibbles (and Q5_K's fifth bits) packed. */
void kz_ref_q45_K_finish(const float *x, const uint8_t ls[8], const uint8_t lm[8], float d_block, float m_block,
                         int nbits, uint8_t *L, uint8_t *b) {
    const int nmax = (1 << nbits) - 1;
    uint8_t *sp = b + 4;
    memset(sp, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sp[j] = ls[j];
            sp[j + 4] = lm[j];
        } else {
            sp[j + 4] = (uint8_t)((ls[j] & 15) | ((lm[j] & 15) << 4));
            sp[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            sp[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    f2h(b, d_block);
    f2h(b + 2, m_block);
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

/* symmetric fit of n values to L in [0, 2*nmax) (signed level + nmax), weights qw or x^2 (rmse_type 1):
 * 18 extra candidate iscales -(nmax + 0.1 * is) / max, keep the best sum(wxl)^2 / sum(wl^2) */
float kz_ref_make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw) {
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
        const float w = qw ? qw[i] : x[i] * x[i];
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
            const float w = qw ? qw[i] : x[i] * x[i];
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

void kz_ref_q6_K_block(const float *x, const float *qw, uint8_t *b) {
    int8_t L[KZK_QK];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int g = 0; g < 16; g++) {
        scales[g] = kz_ref_make_qx(16, 32, x + 16 * g, L + 16 * g, qw ? qw + 16 * g : NULL);
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
    for (int64_t ib = 0; ib < n / KZK_QK; ib++) kz_ref_q6_K_block(src + ib * KZK_QK, NULL, (uint8_t *)dst + ib * KZK_Q6_BYTES);
    return (size_t)(n / KZK_QK) * KZK_Q6_BYTES;
}

/* ---------------- Q4_K / Q5_K / Q6_K: dot with Q8_K (the reference order of kernels.h) ---------------- */

static float dot_q45(const void *w, const void *act, int64_t n, int nbits) {
    const uint8_t *x = w, *a = act;
    const size_t bytes = nbits == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s = 0.0f;
    for (int64_t ib = 0; ib < n / KZK_QK; ib++, x += bytes, a += KZK_A_BYTES) {
        uint8_t sc[8], m[8];
        kzk_scales_mins(x + 4, sc, m);
        const int8_t *q8 = (const int8_t *)(a + 4);
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int32_t sj = 0;
            for (int e = 32 * j; e < 32 * j + 32; e++) sj += q45_code(x, nbits, e) * q8[e];
            sumi += sc[j] * sj;
        }
        for (int j = 0; j < 8; j++) summ += m[j] * (act_bsum(a, 2 * j) + act_bsum(a, 2 * j + 1));
        s = kzk_fin_q45(s, act_d(a), h2f(x), h2f(x + 2), sumi, summ);
    }
    return s;
}
float kz_ref_dot_q4_K(const void *w, const void *act, int64_t n) { return dot_q45(w, act, n, 4); }
float kz_ref_dot_q5_K(const void *w, const void *act, int64_t n) { return dot_q45(w, act, n, 5); }

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
        s = kzk_fin_q6(s, act_d(a), h2f(x + 208), sumi);
    }
    return s;
}

KZ_SCALAR_GEMM(kz_ref_gemm_q4_K, kz_ref_dot_q4_K)
KZ_SCALAR_GEMM(kz_ref_gemm_q5_K, kz_ref_dot_q5_K)
KZ_SCALAR_GEMM(kz_ref_gemm_q6_K, kz_ref_dot_q6_K)
