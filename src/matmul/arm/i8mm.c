/* AArch64 SMMLA (FEAT_I8MM) gemms of every block type that has one, and the q4_0_16x4 prefill;
 * one-token rows and leftovers go to the SDOT kernels of dotprod.c. The Makefile builds this
 * unit with -march=armv8.2-a+dotprod+i8mm; traits.c hands its kernels out only where cpu.c
 * found i8mm and asimddp. Contracts: kernels.h. */

#include "matmul/kernels.h"

#if defined(__aarch64__)
#include "matmul/arm/simd.h"
#include "matmul/arm/kquant_codes.h"

#if !defined(__ARM_FEATURE_MATMUL_INT8)
#error "i8mm.c needs -march=armv8.2-a+dotprod+i8mm (see the Makefile)"
#endif

/* ======== Q8_0 / Q4_0 ======== */
/* AArch64 SMMLA (FEAT_I8MM) GEMM for Q4_0 x Q8_0 rows: 4 weight rows x 4 tokens per register
 * tile, as four 2x2 SMMLA sub-tiles (each vmmlaq_s32 is a 2x8 by 8x2 int8 product, 32 MACs).
 * Decode (1 token) and token leftovers go to the SDOT kernels. Q8_0 has its own prefill below
 * (q8i_prefill: activation records, 4 rows x 16 tokens).
 *
 * Exactness: each 2x2 result lane is the exact integer block dot of one (row, token) pair;
 * the float part is the scalar reference's, lane by lane (no FMA), so results are bit-identical
 * to the scalar reference and to the dotprod kernels. Lanes of a sub-tile: (r0,t0), (r0,t1),
 * (r1,t0), (r1,t1). */
#include "matmul/arm/b32_tmpl.h"

/* a block pair as SMMLA operands: m[j] = (row0 k 8j..8j+7 | row1 k 8j..8j+7), j = 0..3 */
typedef struct {
    int8x16_t m[4];
} mm_pair;

KZ_INL mm_pair mm_zip(arm_blk x0, arm_blk x1) {
    mm_pair p;
    const int64x2_t l0 = vreinterpretq_s64_s8(x0.lo), l1 = vreinterpretq_s64_s8(x1.lo);
    const int64x2_t h0 = vreinterpretq_s64_s8(x0.hi), h1 = vreinterpretq_s64_s8(x1.hi);
    p.m[0] = vreinterpretq_s8_s64(vzip1q_s64(l0, l1));
    p.m[1] = vreinterpretq_s8_s64(vzip2q_s64(l0, l1));
    p.m[2] = vreinterpretq_s8_s64(vzip1q_s64(h0, h1));
    p.m[3] = vreinterpretq_s8_s64(vzip2q_s64(h0, h1));
    return p;
}

KZ_INL int32x4_t mm_dot(mm_pair w, mm_pair a) {
    int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), w.m[0], a.m[0]);
    s = vmmlaq_s32(s, w.m[1], a.m[1]);
    s = vmmlaq_s32(s, w.m[2], a.m[2]);
    return vmmlaq_s32(s, w.m[3], a.m[3]);
}

/* acc[2 * rp + tp]: rows 2rp, 2rp+1 x tokens 2tp, 2tp+1 */
KZ_INL void tile4x4_i8mm(const int q4, int64_t nb, const uint8_t *const w[4], const uint8_t *const a[4],
                         float32x4_t acc[4]) {
    const size_t wbs = q4 ? 18 : 34;
    float32x4_t c[4];
    for (int i = 0; i < 4; i++) c[i] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wbs, oa = (size_t)b * 34;
        const mm_pair w01 = mm_zip(arm_wload(q4, w[0] + o), arm_wload(q4, w[1] + o));
        const mm_pair w23 = mm_zip(arm_wload(q4, w[2] + o), arm_wload(q4, w[3] + o));
        const mm_pair a01 = mm_zip(arm_aload(a[0] + oa), arm_aload(a[1] + oa));
        const mm_pair a23 = mm_zip(arm_aload(a[2] + oa), arm_aload(a[3] + oa));
        const float32x4_t dw = arm_d4(w[0] + o, w[1] + o, w[2] + o, w[3] + o);
        const float32x4_t da = arm_d4(a[0] + oa, a[1] + oa, a[2] + oa, a[3] + oa);
        /* scale lanes (r, t) in sub-tile order: dw = [r0 r0 r1 r1], da = [t0 t1 t0 t1] */
        const float32x4_t dw01 = vzip1q_f32(dw, dw), dw23 = vzip2q_f32(dw, dw);
        const float32x4_t da01 = vcombine_f32(vget_low_f32(da), vget_low_f32(da));
        const float32x4_t da23 = vcombine_f32(vget_high_f32(da), vget_high_f32(da));
        const int32x4_t s0 = mm_dot(w01, a01), s1 = mm_dot(w01, a23), s2 = mm_dot(w23, a01), s3 = mm_dot(w23, a23);
        c[0] = vaddq_f32(c[0], vmulq_f32(vcvtq_f32_s32(s0), vmulq_f32(dw01, da01)));
        c[1] = vaddq_f32(c[1], vmulq_f32(vcvtq_f32_s32(s1), vmulq_f32(dw01, da23)));
        c[2] = vaddq_f32(c[2], vmulq_f32(vcvtq_f32_s32(s2), vmulq_f32(dw23, da01)));
        c[3] = vaddq_f32(c[3], vmulq_f32(vcvtq_f32_s32(s3), vmulq_f32(dw23, da23)));
    }
    for (int i = 0; i < 4; i++) acc[i] = c[i];
}

KZ_INL void gemm_i8mm(const int q4, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                      int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / 32, nt4 = nt - nt % 4;
    for (int64_t r0 = 0; r0 < nr && nt4 > 0; r0 += 4) {
        const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;
        const uint8_t *wp[4];
        for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        for (int64_t t0 = 0; t0 < nt4; t0 += 4) {
            const uint8_t *ap[4];
            for (int t = 0; t < 4; t++) ap[t] = a + (size_t)(t0 + t) * as;
            float32x4_t acc[4];
            tile4x4_i8mm(q4, nb, wp, ap, acc);
            float out[16];
            for (int i = 0; i < 4; i++) vst1q_f32(out + 4 * i, acc[i]);
            for (int rp = 0; rp < 2; rp++)
                for (int tp = 0; tp < 2; tp++)
                    for (int i = 0; i < 4; i++) {
                        const int r = 2 * rp + (i >> 1), t = 2 * tp + (i & 1);
                        if (r < nv) y[(t0 + t) * ldy + r0 + r] = out[4 * (2 * rp + tp) + i];
                    }
        }
    }
    if (nt4 < nt) {
        if (q4) kz_dotprod_gemm_q4_0(n, w, ws, nr, a + (size_t)nt4 * as, as, nt - nt4, y + nt4 * ldy, ldy);
        else kz_dotprod_gemm_q8_0(n, w, ws, nr, a + (size_t)nt4 * as, as, nt - nt4, y + nt4 * ldy, ldy);
    }
}

void kz_i8mm_gemm_q4_0(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                       float *y, int64_t ldy) {
    gemm_i8mm(1, n, w, ws, nr, a, as, nt, y, ldy);
}

/* Q8_0 x Q8_0, 2+ tokens: register tile 4 rows x 16 tokens (2 row pairs x 8 token pairs of 2x2
 * SMMLA results, 16 accumulators), rows read in place. Each block's 4 weight rows are loaded
 * (with their fp16 scales: one post-indexed lane load and one 32-byte LD1 per row) and zipped
 * into SMMLA operands once per tile, for all 8 token pairs. Activations are rearranged once per
 * call and chunk of blocks into per-(block, token pair) records holding the four SMMLA operands
 * and the scales, so a token pair costs 2 loads, 8 SMMLA and the float step per block (18
 * instructions). Leftover pairs (and thin batches of 2-4 tokens) take tiles of 4, 2, 1 pairs;
 * decode (1 token) goes to the SDOT GEMV.
 * Exactness as above: exact int32 block dots, then the reference's acc = acc + (float)sumi *
 * (d_w * d_a) per lane, blocks in order, no FMA; partial sums go through y between block chunks
 * (exact), so every output equals the scalar vec_dot bit for bit. */
#define Q8I_TP 8  /* token pairs per tile (16 tokens) */
#define Q8I_CH 64 /* blocks per chunk: 64 x 8 records of 112 bytes (56 KiB) on the stack */

/* one token pair x one block: x[16 c ..] = tokens (t, t+1) x elements 8c..8c+7; zero = the
 * accumulators' start (loaded with x by one LD1: cheaper than zeroing two registers), written
 * once per call; da = the tokens' scales as (t, t+1, t, t+1), the lane order of an SMMLA result */
typedef struct {
    int32_t zero[2][4];
    int8_t x[64];
    float da[4];
} q8i_rec;

/* records of token pairs [0, ntp) of the tokens at a (stride as; the last pair repeats token
 * nt - 1 where nt is odd), blocks [b0, b0 + nbc), at rec[b * Q8I_TP + tp]; zero is not touched */
static void q8i_prep(const uint8_t *a, size_t as, int nt, int ntp, int64_t b0, int nbc, q8i_rec *rec) {
    for (int tp = 0; tp < ntp; tp++) {
        const uint8_t *a0 = a + (size_t)(2 * tp) * as + (size_t)b0 * 34;
        const uint8_t *a1 = a + (size_t)(2 * tp + 1 < nt ? 2 * tp + 1 : nt - 1) * as + (size_t)b0 * 34;
        q8i_rec *r = rec + tp;
        for (int b = 0; b < nbc; b++, a0 += 34, a1 += 34, r += Q8I_TP) {
            const int64x2_t l0 = vreinterpretq_s64_u8(vld1q_u8(a0 + 2)), h0 = vreinterpretq_s64_u8(vld1q_u8(a0 + 18));
            const int64x2_t l1 = vreinterpretq_s64_u8(vld1q_u8(a1 + 2)), h1 = vreinterpretq_s64_u8(vld1q_u8(a1 + 18));
            vst1q_s8(r->x, vreinterpretq_s8_s64(vzip1q_s64(l0, l1)));
            vst1q_s8(r->x + 16, vreinterpretq_s8_s64(vzip2q_s64(l0, l1)));
            vst1q_s8(r->x + 32, vreinterpretq_s8_s64(vzip1q_s64(h0, h1)));
            vst1q_s8(r->x + 48, vreinterpretq_s8_s64(vzip2q_s64(h0, h1)));
            /* fp16 -> f32 is exact, as the reference's conversion */
            const uint32_t h2 = (uint32_t)ld16(a0) | (uint32_t)ld16(a1) << 16;
            vst1q_f32(r->da, vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(h2))));
        }
    }
}

/* The tiles, in GCC inline asm (the intrinsics cost more: GCC 12 adds an ADD per load, register
 * copies, spills): 4 rows (w[r]: row r at the chunk's first block) x N token pairs (records
 * rec[b * Q8I_TP + tp]) over nbc blocks; yp[2 tp] + r0, yp[2 tp + 1] + r0: the pair's outputs of
 * row 0 (partial sums read first when resume); the second token of the last pair is written
 * only when wr_last (else it is padding: yp repeats the first).
 * Per block: 8 loads (per row a lane load of d and an LD1 of the 32 int8, both post-indexed, so
 * the row pointers walk the blocks), 8 ZIP to operands, FCVTL and 2 ZIP for the scales; per
 * token pair 2 loads, 8 SMMLA, 8 float instructions. Registers: v16..v31 the accumulators (v16
 * + 2 tp: rows 0,1, v17 + 2 tp: rows 2,3 of pair tp), v6..v9 / v10..v13 the row pairs' operands
 * of elements 0..7, 8..15, 16..23, 24..31, v14 / v15 the row pairs' scales (r0 r0 r1 r1 / r2 r2
 * r3 r3), v0..v5 scratch (v4: the 4 fp16 d). */
#define Q8I_S(x) #x
/* accumulators A (rows 0,1) and B (rows 2,3) of the pair whose output pointers are at yp + OFF */
#define Q8I_RESUME(OFF, A, B)                                                                      \
    "ldp %[t0], %[t1], [%[yp], #" Q8I_S(OFF) "]\n\t"                                               \
    "ldr q0, [%[t0], %[yo]]\n\t"                                                                   \
    "ldr q1, [%[t1], %[yo]]\n\t"                                                                   \
    "zip1 " #A ".4s, v0.4s, v1.4s\n\t"                                                             \
    "zip2 " #B ".4s, v0.4s, v1.4s\n\t"
#define Q8I_ZERO(A, B) "movi " #A ".4s, #0\n\tmovi " #B ".4s, #0\n\t"
/* one token pair's record: v0 / v1 = its zeros (the int32 accumulators), v2..v4 = x, v5 = da */
#define Q8I_PAIR(A, B)                                                                             \
    "ld1 {v0.16b, v1.16b, v2.16b}, [%[rec]], #48\n\t"                                              \
    "smmla v0.4s, v6.16b, v2.16b\n\t"                                                              \
    "smmla v1.4s, v10.16b, v2.16b\n\t"                                                             \
    "ld1 {v2.16b, v3.16b, v4.16b, v5.16b}, [%[rec]], #64\n\t"                                      \
    "smmla v0.4s, v7.16b, v2.16b\n\t"                                                              \
    "smmla v1.4s, v11.16b, v2.16b\n\t"                                                             \
    "smmla v0.4s, v8.16b, v3.16b\n\t"                                                              \
    "smmla v1.4s, v12.16b, v3.16b\n\t"                                                             \
    "smmla v0.4s, v9.16b, v4.16b\n\t"                                                              \
    "smmla v1.4s, v13.16b, v4.16b\n\t"                                                             \
    "scvtf v0.4s, v0.4s\n\t"                                                                       \
    "scvtf v1.4s, v1.4s\n\t"                                                                       \
    "fmul v2.4s, v14.4s, v5.4s\n\t"                                                                \
    "fmul v3.4s, v15.4s, v5.4s\n\t"                                                                \
    "fmul v0.4s, v0.4s, v2.4s\n\t"                                                                 \
    "fmul v1.4s, v1.4s, v3.4s\n\t"                                                                 \
    "fadd " #A ".4s, " #A ".4s, v0.4s\n\t"                                                         \
    "fadd " #B ".4s, " #B ".4s, v1.4s\n\t"
/* the pair's rows 0..3 of its first token stored (q0), of its second in q1 */
#define Q8I_STORE(OFF, A, B)                                                                       \
    "ldp %[t0], %[t1], [%[yp], #" Q8I_S(OFF) "]\n\t"                                               \
    "uzp1 v0.4s, " #A ".4s, " #B ".4s\n\t"                                                         \
    "uzp2 v1.4s, " #A ".4s, " #B ".4s\n\t"                                                         \
    "str q0, [%[t0], %[yo]]\n\t"
#define Q8I_STORE2(OFF, A, B) Q8I_STORE(OFF, A, B) "str q1, [%[t1], %[yo]]\n\t"
/* rows WA, WB of a block: d into lanes LA, LB of v4, elements (0..15 | 16..31) into v0, v1 /
 * v2, v3, zipped by dwords into the row pair's operands O0..O3 */
#define Q8I_ROWS(WA, WB, LA, LB, O0, O1, O2, O3)                                                   \
    "ld1 {v4.h}[" #LA "], [%[" #WA "]], #2\n\t"                                                    \
    "ld1 {v0.16b, v1.16b}, [%[" #WA "]], #32\n\t"                                                  \
    "ld1 {v4.h}[" #LB "], [%[" #WB "]], #2\n\t"                                                    \
    "ld1 {v2.16b, v3.16b}, [%[" #WB "]], #32\n\t"                                                  \
    "zip1 " #O0 ".2d, v0.2d, v2.2d\n\t"                                                            \
    "zip2 " #O1 ".2d, v0.2d, v2.2d\n\t"                                                            \
    "zip1 " #O2 ".2d, v1.2d, v3.2d\n\t"                                                            \
    "zip2 " #O3 ".2d, v1.2d, v3.2d\n\t"
#define Q8I_WEIGHTS                                                                                \
    Q8I_ROWS(w0, w1, 0, 1, v6, v7, v8, v9)                                                         \
    Q8I_ROWS(w2, w3, 2, 3, v10, v11, v12, v13)                                                     \
    "fcvtl v4.4s, v4.4h\n\t"                                                                       \
    "zip1 v14.4s, v4.4s, v4.4s\n\t"                                                                \
    "zip2 v15.4s, v4.4s, v4.4s\n\t"
/* per pair count N: resume, zero, one block's pairs (then the records of the pairs not in the
 * tile skipped), the stores but the last pair's second token */
#define Q8I_RES1 Q8I_RESUME(0, v16, v17)
#define Q8I_RES2 Q8I_RES1 Q8I_RESUME(16, v18, v19)
#define Q8I_RES4 Q8I_RES2 Q8I_RESUME(32, v20, v21) Q8I_RESUME(48, v22, v23)
#define Q8I_RES8 Q8I_RES4 Q8I_RESUME(64, v24, v25) Q8I_RESUME(80, v26, v27) Q8I_RESUME(96, v28, v29) Q8I_RESUME(112, v30, v31)
#define Q8I_ZER1 Q8I_ZERO(v16, v17)
#define Q8I_ZER2 Q8I_ZER1 Q8I_ZERO(v18, v19)
#define Q8I_ZER4 Q8I_ZER2 Q8I_ZERO(v20, v21) Q8I_ZERO(v22, v23)
#define Q8I_ZER8 Q8I_ZER4 Q8I_ZERO(v24, v25) Q8I_ZERO(v26, v27) Q8I_ZERO(v28, v29) Q8I_ZERO(v30, v31)
#define Q8I_PAI1 Q8I_PAIR(v16, v17) "add %[rec], %[rec], #784\n\t"
#define Q8I_PAI2 Q8I_PAIR(v16, v17) Q8I_PAIR(v18, v19) "add %[rec], %[rec], #672\n\t"
#define Q8I_PAI4 Q8I_PAIR(v16, v17) Q8I_PAIR(v18, v19) Q8I_PAIR(v20, v21) Q8I_PAIR(v22, v23) "add %[rec], %[rec], #448\n\t"
#define Q8I_PAI8                                                                                   \
    Q8I_PAIR(v16, v17) Q8I_PAIR(v18, v19) Q8I_PAIR(v20, v21) Q8I_PAIR(v22, v23)                    \
    Q8I_PAIR(v24, v25) Q8I_PAIR(v26, v27) Q8I_PAIR(v28, v29) Q8I_PAIR(v30, v31)
#define Q8I_STO1 Q8I_STORE(0, v16, v17)
#define Q8I_STO2 Q8I_STORE2(0, v16, v17) Q8I_STORE(16, v18, v19)
#define Q8I_STO4 Q8I_STORE2(0, v16, v17) Q8I_STORE2(16, v18, v19) Q8I_STORE2(32, v20, v21) Q8I_STORE(48, v22, v23)
#define Q8I_STO8                                                                                   \
    Q8I_STORE2(0, v16, v17) Q8I_STORE2(16, v18, v19) Q8I_STORE2(32, v20, v21) Q8I_STORE2(48, v22, v23) \
    Q8I_STORE2(64, v24, v25) Q8I_STORE2(80, v26, v27) Q8I_STORE2(96, v28, v29) Q8I_STORE(112, v30, v31)
_Static_assert(sizeof(q8i_rec) == 112 && Q8I_TP == 8, "the record skips of Q8I_PAI1..4 and the asm offsets");

#define Q8I_TILE(N)                                                                                         \
    static __attribute__((noinline)) void q8i_tile##N(int nbc, const uint8_t *const w[4], const q8i_rec *rec, \
                                                       float *const *yp, int64_t r0, int wr_last, int resume) { \
        const int64_t yo = r0 * (int64_t)sizeof(float);                                                     \
        const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];                                       \
        uint64_t t0, t1;                                                                                    \
        __asm__ volatile("cbz %w[resume], 1f\n\t" Q8I_RES##N "b 2f\n"                                       \
                         "1:\n\t" Q8I_ZER##N "2:\n\t"                                                       \
                         "cmp %w[nbc], #0\n\t"                                                              \
                         "b.le 4f\n"                                                                        \
                         "tbz %w[nbc], #0, 3f\n\t" /* an odd count enters at the second copy */             \
                         "add %w[nbc], %w[nbc], #1\n\t"                                                     \
                         "b 6f\n"                                                                           \
                         "3:\n\t" Q8I_WEIGHTS Q8I_PAI##N "6:\n\t" Q8I_WEIGHTS Q8I_PAI##N                    \
                         "subs %w[nbc], %w[nbc], #2\n\t"                                                    \
                         "b.ne 3b\n"                                                                        \
                         "4:\n\t" Q8I_STO##N "cbz %w[wr], 5f\n\t"                                           \
                         "str q1, [%[t1], %[yo]]\n"                                                         \
                         "5:\n\t"                                                                           \
                         : [w0] "+r"(w0), [w1] "+r"(w1), [w2] "+r"(w2), [w3] "+r"(w3), [rec] "+r"(rec),     \
                           [nbc] "+r"(nbc), [t0] "=&r"(t0), [t1] "=&r"(t1)                                  \
                         : [yp] "r"(yp), [yo] "r"(yo), [resume] "r"(resume), [wr] "r"(wr_last)              \
                         : "cc", "memory", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", \
                           "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", \
                           "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31");                  \
    }
Q8I_TILE(8)
Q8I_TILE(4)
Q8I_TILE(2)
Q8I_TILE(1)

/* n_tok >= 2: per group of up to 16 tokens and chunk of Q8I_CH blocks, the records, then every
 * 4-row quad x (8, 4, 2, 1)-pair tiles; a last quad of 1..3 rows repeats its last row and writes
 * to part (its partial sums stay there between chunks), copied out after the last chunk */
static void q8i_prefill(int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as, int64_t nt,
                        float *y, int64_t ldy) {
    const int64_t nb = n / 32, nq = (nr + 3) / 4;
    const int nv = (int)(nr - 4 * (nq - 1)); /* rows of the last quad */
    q8i_rec rec[Q8I_CH * Q8I_TP];
    const int nrec = (nb < Q8I_CH ? (int)nb : Q8I_CH) * Q8I_TP;
    for (int i = 0; i < nrec; i++) {
        vst1q_s32(rec[i].zero[0], vdupq_n_s32(0));
        vst1q_s32(rec[i].zero[1], vdupq_n_s32(0));
    }
    for (int64_t tg = 0; tg < nt; tg += 2 * Q8I_TP) {
        const int ntg = nt - tg < 2 * Q8I_TP ? (int)(nt - tg) : 2 * Q8I_TP, ntp = (ntg + 1) / 2;
        float part[2 * Q8I_TP][4];
        float *yp[2 * Q8I_TP], *yq[2 * Q8I_TP];
        for (int t = 0; t < 2 * ntp; t++) {
            const int tt = t < ntg ? t : ntg - 1;
            yp[t] = y + (tg + tt) * ldy;
            yq[t] = part[tt];
        }
        for (int64_t b0 = 0; b0 < nb; b0 += Q8I_CH) {
            const int nbc = nb - b0 < Q8I_CH ? (int)(nb - b0) : Q8I_CH;
            q8i_prep(a + (size_t)tg * as, as, ntg, ntp, b0, nbc, rec);
            for (int64_t q = 0; q < nq; q++) {
                const int full = q < nq - 1 || nv == 4;
                const uint8_t *wq[4];
                for (int r = 0; r < 4; r++)
                    wq[r] = w + (size_t)(4 * q + (full || r < nv ? r : nv - 1)) * ws + (size_t)b0 * 34;
                float *const *yt = full ? yp : yq;
                const int64_t ro = full ? 4 * q : 0;
                for (int tp0 = 0; tp0 < ntp;) {
                    const int k = ntp - tp0 >= 8 ? 8 : ntp - tp0 >= 4 ? 4 : ntp - tp0 >= 2 ? 2 : 1;
                    const int wr_last = 2 * (tp0 + k) <= ntg; /* the tile's last pair has a real second token */
                    if (k == 8) q8i_tile8(nbc, wq, rec + tp0, yt + 2 * tp0, ro, wr_last, b0 > 0);
                    else if (k == 4) q8i_tile4(nbc, wq, rec + tp0, yt + 2 * tp0, ro, wr_last, b0 > 0);
                    else if (k == 2) q8i_tile2(nbc, wq, rec + tp0, yt + 2 * tp0, ro, wr_last, b0 > 0);
                    else q8i_tile1(nbc, wq, rec + tp0, yt + 2 * tp0, ro, wr_last, b0 > 0);
                    tp0 += k;
                }
            }
        }
        if (nv < 4)
            for (int t = 0; t < ntg; t++)
                for (int r = 0; r < nv; r++) y[(tg + t) * ldy + 4 * (nq - 1) + r] = part[t][r];
    }
}

void kz_i8mm_gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt,
                       float *y, int64_t ldy) {
    if (nt >= 2 && nr > 0 && n >= 32) q8i_prefill(n, w, ws, nr, a, as, nt, y, ldy);
    else kz_dotprod_gemm_q8_0(n, w, ws, nr, a, as, nt, y, ldy); /* decode: the 8-row SDOT GEMV */
}

/* ======== Q4_1 / Q5_0 / Q5_1 / IQ4_NL ======== */
/* AArch64 SMMLA (FEAT_I8MM) gemm for Q4_1 / Q5_0 / Q5_1 / IQ4_NL: register tiles of 4 weight
 * rows x up to 8 tokens. Per block each weight row is decoded once (arm/b32_legacy_tmpl.h) and
 * each token's activations loaded once for the whole tile; an SMMLA sub-tile (2 rows x 2
 * tokens, lanes r0t0 r0t1 r1t0 r1t1) holds four exact int32 block dots, and the scalar
 * reference's float step runs on those four lanes at once with lane-built scales (no FMA):
 *   c = c + (float)sumi * (d_w * d_a)    [Q4_1 / Q5_1: c = c + ((float)sumi * (d_w * d_a) + m_w * s_a)]
 * so every element equals the scalar vec_dot bit for bit. Leftover rows / tokens of a tile are
 * copies of the last real one (computed, not stored); one token goes to the 8-row SDOT GEMV. */
#define LA(name) legacy_##name##_i8mm
#define LA_SDOT 1
#define LA_NO_EXPORT 1
#include "matmul/arm/b32_legacy_tmpl.h"

/* a block pair as SMMLA operands: m[j] = (x k 8j..8j+7 | y k 8j..8j+7) */
typedef struct {
    int8x16_t m[4];
} lg_mm;

KZ_INL lg_mm lg_zip(int8x16_t xlo, int8x16_t xhi, int8x16_t ylo, int8x16_t yhi) {
    const int64x2_t xl = vreinterpretq_s64_s8(xlo), xh = vreinterpretq_s64_s8(xhi);
    const int64x2_t yl = vreinterpretq_s64_s8(ylo), yh = vreinterpretq_s64_s8(yhi);
    lg_mm p;
    p.m[0] = vreinterpretq_s8_s64(vzip1q_s64(xl, yl));
    p.m[1] = vreinterpretq_s8_s64(vzip2q_s64(xl, yl));
    p.m[2] = vreinterpretq_s8_s64(vzip1q_s64(xh, yh));
    p.m[3] = vreinterpretq_s8_s64(vzip2q_s64(xh, yh));
    return p;
}

KZ_INL int32x4_t lg_mmla(lg_mm w, lg_mm a) {
    int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), w.m[0], a.m[0]);
    s = vmmlaq_s32(s, w.m[1], a.m[1]);
    s = vmmlaq_s32(s, w.m[2], a.m[2]);
    return vmmlaq_s32(s, w.m[3], a.m[3]);
}

/* [v_i v_i v_i+1 v_i+1], i = 0 or 2: the row scale lanes of a sub-tile */
KZ_INL float32x4_t lg_rows2(float32x4_t v, int hi) { return hi ? vzip2q_f32(v, v) : vzip1q_f32(v, v); }

/* fp16 lanes of u32 (d, m) / (d, s) pairs: the low halves (d) or the high halves, as floats */
KZ_INL float32x4_t lg_lo16(uint32x4_t v) { return vcvt_f32_f16(vreinterpret_f16_u16(vmovn_u32(v))); }
KZ_INL float32x4_t lg_hi16(uint32x4_t v) { return vcvt_f32_f16(vreinterpret_f16_u16(vshrn_n_u32(v, 16))); }

/* The activations of up to 8 tokens x LG_CH blocks, made once per kernel call and token group
 * and read by every 4-row tile: x[b][p] = tokens 2p, 2p+1 of block b as SMMLA operands (two
 * LDP), their d (and Q8_1 s) as floats in sub-tile lanes (t, t+1, t, t+1). 24 KiB of stack. */
#define LG_CH 64
typedef struct {
    int8_t x[LG_CH][4][64];
    float da[LG_CH][4][4], sa[LG_CH][4][4];
} lg_acts;

/* tokens [0, tv) of a (2 tp >= tv; an odd last token is paired with itself), blocks b0.. */
static void lg_prep(const int ty, const uint8_t *a, size_t as, int tv, int tp, int64_t b0, int nbc, lg_acts *A) {
    for (int p = 0; p < tp; p++) {
        const uint8_t *a0 = a + (size_t)(2 * p) * as + (size_t)b0 * LT_AB(ty);
        const uint8_t *a1 = a + (size_t)(2 * p + 1 < tv ? 2 * p + 1 : tv - 1) * as + (size_t)b0 * LT_AB(ty);
        for (int b = 0; b < nbc; b++, a0 += LT_AB(ty), a1 += LT_AB(ty)) {
            const int8_t *q0 = (const int8_t *)(a0 + LT_AQ(ty)), *q1 = (const int8_t *)(a1 + LT_AQ(ty));
            const lg_mm m = lg_zip(vld1q_s8(q0), vld1q_s8(q0 + 16), vld1q_s8(q1), vld1q_s8(q1 + 16));
            for (int c = 0; c < 4; c++) vst1q_s8(A->x[b][p] + 16 * c, m.m[c]);
            /* (d0, s0, d1, s1) by exact FCVTL (for Q8_0 the "s" halves are code bytes, unused) */
            uint32_t h[2];
            memcpy(&h[0], a0, 4);
            memcpy(&h[1], a1, 4);
            const float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u32(vld1_u32(h)));
            const float32x4_t d = vuzp1q_f32(f, f), s = vuzp2q_f32(f, f);
            vst1q_f32(A->da[b][p], d);
            if (LT_MIN(ty)) vst1q_f32(A->sa[b][p], s);
        }
    }
}

/* 4 rows (w[r], read in place from the chunk's first block) x 2*TP tokens of A; c[2 * p + h]:
 * rows 2h, 2h+1 x tokens 2p, 2p+1, carried in and out (partial sums between chunks). Row
 * pointers step through the blocks by post-incremented lane loads of their scales; the codes
 * are then read behind them. */
KZ_INL void lg_tile(const int ty, const int TP, int64_t nb, const uint8_t *const w[4], const lg_acts *A,
                    float32x4_t c[8]) {
    const uint8_t *wp[4];
    KZ_UNROLL(4)
    for (int r = 0; r < 4; r++) wp[r] = w[r];
    float32x4_t acc[8]; /* in registers */
    KZ_UNROLL(8)
    for (int i = 0; i < 2 * TP; i++) acc[i] = c[i];
    const int8_t *xb = A->x[0][0];
    const float *db = A->da[0][0], *sb = A->sa[0][0];
    for (int64_t b = 0; b < nb; b++, xb += sizeof A->x[0], db += 16, sb += 16) {
        uint16x8_t hw;
        uint32x4_t mw4;
        KZ_UNROLL(4)
        for (int r = 0; r < 4; r++) {
            if (LT_MIN(ty) && r == 0) LA_LD0_S(mw4, wp[r], LT_WB(ty));
            else if (LT_MIN(ty)) LA_LD_S(mw4, wp[r], r, LT_WB(ty));
            else if (r == 0) LA_LD0_H(hw, wp[r], LT_WB(ty));
            else LA_LD_H(hw, wp[r], r, LT_WB(ty));
        }
        const LA(wblk) d0 = LA(decode)(ty, wp[0] - LT_WB(ty)), d1 = LA(decode)(ty, wp[1] - LT_WB(ty));
        const LA(wblk) d2 = LA(decode)(ty, wp[2] - LT_WB(ty)), d3 = LA(decode)(ty, wp[3] - LT_WB(ty));
        const lg_mm w01 = lg_zip(d0.lo, d0.hi, d1.lo, d1.hi), w23 = lg_zip(d2.lo, d2.hi, d3.lo, d3.hi);
        const float32x4_t dw = LT_MIN(ty) ? lg_lo16(mw4) : vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(hw)));
        const float32x4_t mw = LT_MIN(ty) ? lg_hi16(mw4) : dw;
        KZ_UNROLL(4)
        for (int p = 0; p < TP; p++) {
            lg_mm x;
            KZ_UNROLL(4)
            for (int k = 0; k < 4; k++) x.m[k] = vld1q_s8(xb + 64 * p + 16 * k);
            const float32x4_t dt = vld1q_f32(db + 4 * p);
            KZ_UNROLL(2)
            for (int h = 0; h < 2; h++) {
                const float32x4_t f = vmulq_f32(vcvtq_f32_s32(lg_mmla(h ? w23 : w01, x)), vmulq_f32(lg_rows2(dw, h), dt));
                acc[2 * p + h] = LT_MIN(ty) ? vaddq_f32(acc[2 * p + h], vaddq_f32(f, vmulq_f32(lg_rows2(mw, h), vld1q_f32(sb + 4 * p))))
                                            : vaddq_f32(acc[2 * p + h], f);
            }
        }
    }
    KZ_UNROLL(8)
    for (int i = 0; i < 2 * TP; i++) c[i] = acc[i];
}

/* without GCC's first scheduling pass: it hoists every load and SMMLA and spills accumulators */
#if defined(__clang__)
#define LG_NOSCHED
#else
#define LG_NOSCHED __attribute__((optimize("no-schedule-insns")))
#endif
#define LG_TILE_DEF(ty, TP)                                                                                      \
    static __attribute__((noinline)) LG_NOSCHED void lg_tile_##ty##_##TP(int64_t nb, const uint8_t *const w[4],  \
                                                                         const lg_acts *A, float32x4_t c[8]) {   \
        lg_tile(ty, TP, nb, w, A, c);                                                                            \
    }
#define LG_TILES(ty) LG_TILE_DEF(ty, 1) LG_TILE_DEF(ty, 2) LG_TILE_DEF(ty, 3) LG_TILE_DEF(ty, 4)
LG_TILES(0)
LG_TILES(1)
LG_TILES(2)
LG_TILES(3)
#undef LG_TILES
#undef LG_TILE_DEF
#undef LG_NOSCHED

typedef void (*lg_tile_fn)(int64_t, const uint8_t *const[4], const lg_acts *, float32x4_t[8]);
static const lg_tile_fn lg_tiles[4][4] = {
    { lg_tile_0_1, lg_tile_0_2, lg_tile_0_3, lg_tile_0_4 },
    { lg_tile_1_1, lg_tile_1_2, lg_tile_1_3, lg_tile_1_4 },
    { lg_tile_2_1, lg_tile_2_2, lg_tile_2_3, lg_tile_2_4 },
    { lg_tile_3_1, lg_tile_3_2, lg_tile_3_3, lg_tile_3_4 },
};

/* the tile's rows 0..nv-1 of token t (y points at token 0, row 0) <-> lanes */
KZ_INL float32x4_t lg_yload(const float *y, int nv) {
    if (nv == 4) return vld1q_f32(y);
    float v[4] = { 0 };
    for (int r = 0; r < nv; r++) v[r] = y[r];
    return vld1q_f32(v);
}
KZ_INL void lg_ystore(float *y, int nv, float32x4_t v) {
    if (nv == 4) {
        vst1q_f32(y, v);
        return;
    }
    float o[4];
    vst1q_f32(o, v);
    for (int r = 0; r < nv; r++) y[r] = o[r];
}

static void gemm_lg(const int ty, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                    int64_t nt, float *y, int64_t ldy) {
    if (nt == 1) { /* decode: the 12/8/4-row SDOT GEMV */
        LA(gemm)(ty, n, w, ws, nr, a, as, nt, y, ldy);
        return;
    }
    const int64_t nb = n / 32;
    lg_acts A;
    for (int64_t t0 = 0; t0 < nt; t0 += 8) {
        const int tv = nt - t0 < 8 ? (int)(nt - t0) : 8, tp = (tv + 1) / 2;
        const lg_tile_fn tile = lg_tiles[ty][tp - 1];
        float *yg = y + t0 * ldy;
        for (int64_t b0 = 0; b0 < nb; b0 += LG_CH) {
            const int nbc = nb - b0 < LG_CH ? (int)(nb - b0) : LG_CH;
            lg_prep(ty, a + (size_t)t0 * as, as, tv, tp, b0, nbc, &A);
            for (int64_t r0 = 0; r0 < nr; r0 += 4) {
                const int nv = nr - r0 < 4 ? (int)(nr - r0) : 4;
                const uint8_t *wp[4];
                for (int r = 0; r < 4; r++) wp[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws + (size_t)b0 * LT_WB(ty);
                /* c[2p], c[2p + 1]: rows (0, 1), (2, 3) x tokens (2p, 2p + 1); token 2p + 1 is
                 * token 2p again past tv */
                float32x4_t c[8];
                for (int p = 0; p < tp; p++) {
                    if (b0 == 0) {
                        c[2 * p] = c[2 * p + 1] = vdupq_n_f32(0.0f);
                        continue;
                    }
                    const float32x4_t u = lg_yload(yg + (2 * p) * ldy + r0, nv);
                    const float32x4_t v = 2 * p + 1 < tv ? lg_yload(yg + (2 * p + 1) * ldy + r0, nv) : u;
                    c[2 * p] = vzip1q_f32(u, v);
                    c[2 * p + 1] = vzip2q_f32(u, v);
                }
                tile(nbc, wp, &A, c);
                for (int p = 0; p < tp; p++) {
                    lg_ystore(yg + (2 * p) * ldy + r0, nv, vuzp1q_f32(c[2 * p], c[2 * p + 1]));
                    if (2 * p + 1 < tv) lg_ystore(yg + (2 * p + 1) * ldy + r0, nv, vuzp2q_f32(c[2 * p], c[2 * p + 1]));
                }
            }
        }
    }
}

#define I8_DEF(t, ty)                                                                                         \
    void kz_i8mm_gemm_##t(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, \
                          float *y, int64_t ldy) {                                                           \
        gemm_lg(ty, n, w, ws, nr, a, as, nt, y, ldy);                                                         \
    }
I8_DEF(q4_1, 0)
I8_DEF(q5_0, 1)
I8_DEF(q5_1, 2)
I8_DEF(iq4_nl, 3)

/* ======== Q4_K / Q5_K / Q6_K ======== */
/* AArch64 SMMLA (FEAT_I8MM) GEMM for Q4_K / Q5_K / Q6_K x Q8_K. Below 4 rows: 2 weight rows x 2
 * tokens per tile (from 4 rows on: kq_prefill further down, which decodes each row once per
 * token group); per super-block both rows are decoded to int8 codes (element order; Q6_K as q - 32),
 * each SMMLA adds the 2x2 dots of 8 elements, sub-block (Q4_K/Q5_K: 32, Q6_K: 16) results are
 * scaled in int32 with the rows' scales, then the float chain of kernels.h per pair. Integer
 * sums are exact, so every element equals the scalar reference (and the dotprod vec_dot, used
 * for the GEMV and leftovers) bit for bit. */
/* int8 codes of one super-block in element order: Q4_K/Q5_K unsigned 0..31, Q6_K q - 32 */
static inline void decode_q45(const int q5, const uint8_t *x, int8_t *q) {
    const uint8x16_t h0 = q5 ? vld1q_u8(x + 16) : vdupq_n_u8(0), h1 = q5 ? vld1q_u8(x + 32) : vdupq_n_u8(0);
    for (int c = 0; c < 4; c++) {
        uint8x16_t u[4];
        kz_arm_q45_codes(q5, x + (q5 ? 48 : 16), h0, h1, c, u);
        for (int i = 0; i < 4; i++) vst1q_s8(q + 64 * c + 16 * i, vreinterpretq_s8_u8(u[i]));
    }
}

static inline void decode_q6(const uint8_t *x, int8_t *q) {
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int c = 0; c < 2; c++)
        for (int hl = 0; hl < 2; hl++) {
            uint8x16_t u[4];
            kz_arm_q6_codes(x, c, hl, u);
            for (int g = 0; g < 4; g++) vst1q_s8(q + 128 * c + 32 * g + 16 * hl, vsubq_s8(vreinterpretq_s8_u8(u[g]), k32));
        }
}

/* 2x2 int32 dots {r0.t0, r0.t1, r1.t0, r1.t1} of len (multiple of 16) int8 elements */
static inline int32x4_t mm2x2(const int8_t *w0, const int8_t *w1, const int8_t *a0, const int8_t *a1, int len) {
    int32x4_t acc = vdupq_n_s32(0);
    for (int i = 0; i < len; i += 16) {
        const int64x2_t x0 = vreinterpretq_s64_s8(vld1q_s8(w0 + i)), x1 = vreinterpretq_s64_s8(vld1q_s8(w1 + i));
        const int64x2_t y0 = vreinterpretq_s64_s8(vld1q_s8(a0 + i)), y1 = vreinterpretq_s64_s8(vld1q_s8(a1 + i));
        acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip1q_s64(x0, x1)), vreinterpretq_s8_s64(vzip1q_s64(y0, y1)));
        acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip2q_s64(x0, x1)), vreinterpretq_s8_s64(vzip2q_s64(y0, y1)));
    }
    return acc;
}

/* one 2x2 tile over nb super-blocks; out[t * 2 + r] */
static void tile2x2(const int t, int64_t nb, const uint8_t *const w[2], const uint8_t *const a[2], float out[4]) {
    const size_t wbs = t == 6 ? KZK_Q6_BYTES : t == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f }; /* pair p = r * 2 + tok, the SMMLA lane order */
    int8_t q[2][KZK_QK];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *x[2] = { w[0] + (size_t)b * wbs, w[1] + (size_t)b * wbs };
        const uint8_t *ab[2] = { a[0] + (size_t)b * KZK_A_BYTES, a[1] + (size_t)b * KZK_A_BYTES };
        const int8_t *a8[2] = { (const int8_t *)(ab[0] + 4), (const int8_t *)(ab[1] + 4) };
        int32x4_t vi = vdupq_n_s32(0);
        if (t == 6) {
            decode_q6(x[0], q[0]);
            decode_q6(x[1], q[1]);
            const int8_t *sc0 = (const int8_t *)(x[0] + 192), *sc1 = (const int8_t *)(x[1] + 192);
            for (int g = 0; g < 16; g++) {
                const int32x4_t p = mm2x2(q[0] + 16 * g, q[1] + 16 * g, a8[0] + 16 * g, a8[1] + 16 * g, 16);
                const int32_t sv[4] = { sc0[g], sc0[g], sc1[g], sc1[g] };
                vi = vmlaq_s32(vi, p, vld1q_s32(sv));
            }
            int32_t si[4];
            vst1q_s32(si, vi);
            for (int r = 0; r < 2; r++) {
                const float d = kz_fp16_to_f32(kzk_rd16(x[r] + 208));
                for (int k = 0; k < 2; k++) s[r * 2 + k] = kzk_fin_q6(s[r * 2 + k], kzk_act_d(ab[k]), d, si[r * 2 + k]);
            }
        } else {
            uint8_t sc[2][8], m[2][8];
            for (int r = 0; r < 2; r++) {
                decode_q45(t == 5, x[r], q[r]);
                kzk_scales_mins(x[r] + 4, sc[r], m[r]);
            }
            for (int j = 0; j < 8; j++) {
                const int32x4_t p = mm2x2(q[0] + 32 * j, q[1] + 32 * j, a8[0] + 32 * j, a8[1] + 32 * j, 32);
                const int32_t sv[4] = { sc[0][j], sc[0][j], sc[1][j], sc[1][j] };
                vi = vmlaq_s32(vi, p, vld1q_s32(sv));
            }
            int32_t si[4];
            vst1q_s32(si, vi);
            int16_t bs[2][16];
            memcpy(bs[0], ab[0] + 260, 32);
            memcpy(bs[1], ab[1] + 260, 32);
            for (int r = 0; r < 2; r++) {
                const float d = kz_fp16_to_f32(kzk_rd16(x[r])), dmin = kz_fp16_to_f32(kzk_rd16(x[r] + 2));
                for (int k = 0; k < 2; k++) {
                    int32_t summ = 0;
                    for (int j = 0; j < 8; j++) summ += m[r][j] * (bs[k][2 * j] + bs[k][2 * j + 1]);
                    s[r * 2 + k] = kzk_fin_q45(s[r * 2 + k], kzk_act_d(ab[k]), d, dmin, si[r * 2 + k], summ);
                }
            }
        }
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 2; k++) out[k * 2 + r] = s[r * 2 + k];
}

typedef float (*dot_fn)(const void *, const void *, int64_t);

static void gemm(const int t, dot_fn dot, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                 size_t as, int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK;
    const int64_t nr2 = nt >= 2 ? nr - nr % 2 : 0, nt2 = nt - nt % 2;
    for (int64_t r = 0; r < nr2; r += 2) {
        const uint8_t *wp[2] = { w + (size_t)r * ws, w + (size_t)(r + 1) * ws };
        for (int64_t k = 0; k < nt2; k += 2) {
            const uint8_t *ap[2] = { a + (size_t)k * as, a + (size_t)(k + 1) * as };
            float out[4];
            tile2x2(t, nb, wp, ap, out);
            y[k * ldy + r] = out[0];
            y[k * ldy + r + 1] = out[1];
            y[(k + 1) * ldy + r] = out[2];
            y[(k + 1) * ldy + r + 1] = out[3];
        }
    }
    /* leftovers: the odd last token for the tiled rows, every token for the other rows */
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = r < nr2 ? nt2 : 0; k < nt; k++) y[k * ldy + r] = dot(w + (size_t)r * ws, a + (size_t)k * as, n);
}

/* ---- the K-quant prefill: 4 rows x up to 64 tokens per decode ----
 * Per group of up to KQ_TG tokens and chunk of KQ_CH super-blocks, the activations are
 * rearranged once into per-(super-block, token pair) records (SMMLA operands: 2 tokens x 8
 * consecutive int8 per 16 bytes, the pair's scales, the Q4_K/Q5_K bsum pairs); then every
 * 4-row quad decodes each super-block once into row-pair operands and runs all token pairs
 * on them, 4 at a time. Sub-block scales: the SMMLA chains run on through a super-block
 * (P_j = sum of sub-blocks 0..j) and V = sum_j P_j (sc_j - sc_{j+1}) (sc past the end = 0),
 * which is sum_j sc_j S_j exactly: no accumulator reset per sub-block (int32 wraps modulo
 * 2^32 in between; the final value fits). The float chain per (row, token) is kernels.h's,
 * lane by lane, super-blocks in order (partial sums through y between chunks): every
 * output equals the scalar vec_dot bit for bit. */
#define KQ_TG 64 /* tokens per group */
#define KQ_TP (KQ_TG / 2)
#define KQ_CH 2 /* super-blocks per chunk: 2 x 16 KiB of operands + 2 x 32 x 48 bytes on the stack */

/* the operands of a chunk: x[b][c][tp] = tokens (2 tp, 2 tp + 1) x elements 8c..8c+7 of
 * super-block b (the 4 token pairs of a tile side by side: two LDP per chunk) */
typedef int8_t kq_x[KZK_QK / 8][KQ_TP][16];
/* per (super-block, token pair): the scales as (t, t+1, t, t+1), the Q4_K/Q5_K bsum pairs */
typedef struct {
    float da[4];
    int16_t bp[2][8]; /* per token: bsums[2j] + bsums[2j + 1] (sub-block j) */
} kq_info;

/* one quad's super-block: w[c] = row pairs (0,1), (2,3) x elements 8c..8c+7 (one LDP), the
 * scale differences as (r, r, r', r') int32, d / dmin as (r, r, r', r'), the mins per row */
typedef struct {
    int8_t w[KZK_QK / 8][2][16];
    int32_t ds[2][16][4];
    float d[2][4], dmin[2][4];
    int16_t m[4][8];
} kq_quad;

static void kq_prep(const uint8_t *a, size_t as, int nt, int ntp, int64_t b0, int nbc, kq_x *xs, kq_info *inf) {
    for (int tp = 0; tp < ntp; tp++) {
        const uint8_t *a0 = a + (size_t)(2 * tp) * as + (size_t)b0 * KZK_A_BYTES;
        const uint8_t *a1 = a + (size_t)(2 * tp + 1 < nt ? 2 * tp + 1 : nt - 1) * as + (size_t)b0 * KZK_A_BYTES;
        for (int b = 0; b < nbc; b++, a0 += KZK_A_BYTES, a1 += KZK_A_BYTES) {
            for (int i = 0; i < KZK_QK; i += 16) {
                const int64x2_t l0 = vreinterpretq_s64_u8(vld1q_u8(a0 + 4 + i));
                const int64x2_t l1 = vreinterpretq_s64_u8(vld1q_u8(a1 + 4 + i));
                vst1q_s8(xs[b][i / 8][tp], vreinterpretq_s8_s64(vzip1q_s64(l0, l1)));
                vst1q_s8(xs[b][i / 8 + 1][tp], vreinterpretq_s8_s64(vzip2q_s64(l0, l1)));
            }
            kq_info *r = inf + b * KQ_TP + tp;
            const float d0 = kzk_act_d(a0), d1 = kzk_act_d(a1);
            r->da[0] = r->da[2] = d0;
            r->da[1] = r->da[3] = d1;
            for (int k = 0; k < 2; k++) {
                const uint8_t *bs = (k ? a1 : a0) + 260;
                const int16x8_t s0 = vreinterpretq_s16_u8(vld1q_u8(bs)), s1 = vreinterpretq_s16_u8(vld1q_u8(bs + 16));
                vst1q_s16(r->bp[k], vpaddq_s16(s0, s1)); /* |pair| <= 2 * 32 * 128: no wrap */
            }
        }
    }
}

/* ds[j] = (a_j, a_j, b_j, b_j) for j = 0..7 from the int16 scale differences of rows a, b */
KZ_INL void kq_ds8(int16x8_t da, int16x8_t db, int32_t (*ds)[4]) {
    const int32x4_t a[2] = { vmovl_s16(vget_low_s16(da)), vmovl_high_s16(da) };
    const int32x4_t b[2] = { vmovl_s16(vget_low_s16(db)), vmovl_high_s16(db) };
    for (int h = 0; h < 2; h++) {
        const int64x2_t aa0 = vreinterpretq_s64_s32(vzip1q_s32(a[h], a[h])), aa1 = vreinterpretq_s64_s32(vzip2q_s32(a[h], a[h]));
        const int64x2_t bb0 = vreinterpretq_s64_s32(vzip1q_s32(b[h], b[h])), bb1 = vreinterpretq_s64_s32(vzip2q_s32(b[h], b[h]));
        vst1q_s32(ds[4 * h + 0], vreinterpretq_s32_s64(vzip1q_s64(aa0, bb0)));
        vst1q_s32(ds[4 * h + 1], vreinterpretq_s32_s64(vzip2q_s64(aa0, bb0)));
        vst1q_s32(ds[4 * h + 2], vreinterpretq_s32_s64(vzip1q_s64(aa1, bb1)));
        vst1q_s32(ds[4 * h + 3], vreinterpretq_s32_s64(vzip2q_s64(aa1, bb1)));
    }
}

/* rows x[0..3] (one super-block each) into q */
KZ_INL void kq_decode(const int t, const uint8_t *const x[4], kq_quad *q) {
    const int16x8_t z = vdupq_n_s16(0);
    KZ_UNROLL(2)
    for (int rp = 0; rp < 2; rp++) {
        const uint8_t *xa = x[2 * rp], *xb = x[2 * rp + 1];
        if (t == 6) {
            const int8x16_t k32 = vdupq_n_s8(32);
            KZ_UNROLL(2)
            for (int c = 0; c < 2; c++)
                KZ_UNROLL(2)
                for (int hl = 0; hl < 2; hl++) {
                    uint8x16_t ua[4], ub[4];
                    kz_arm_q6_codes(xa, c, hl, ua);
                    kz_arm_q6_codes(xb, c, hl, ub);
                    KZ_UNROLL(4)
                    for (int g = 0; g < 4; g++) {
                        const int e = (128 * c + 32 * g + 16 * hl) / 8; /* first chunk */
                        const int64x2_t va = vreinterpretq_s64_s8(vsubq_s8(vreinterpretq_s8_u8(ua[g]), k32));
                        const int64x2_t vb = vreinterpretq_s64_s8(vsubq_s8(vreinterpretq_s8_u8(ub[g]), k32));
                        vst1q_s8(q->w[e][rp], vreinterpretq_s8_s64(vzip1q_s64(va, vb)));
                        vst1q_s8(q->w[e + 1][rp], vreinterpretq_s8_s64(vzip2q_s64(va, vb)));
                    }
                }
            /* scale differences sc_j - sc_{j+1}, sc_16 = 0 */
            const int8x16_t sa = vld1q_s8((const int8_t *)(xa + 192)), sb = vld1q_s8((const int8_t *)(xb + 192));
            const int16x8_t a0 = vmovl_s8(vget_low_s8(sa)), a1 = vmovl_high_s8(sa);
            const int16x8_t b0 = vmovl_s8(vget_low_s8(sb)), b1 = vmovl_high_s8(sb);
            kq_ds8(vsubq_s16(a0, vextq_s16(a0, a1, 1)), vsubq_s16(b0, vextq_s16(b0, b1, 1)), q->ds[rp]);
            kq_ds8(vsubq_s16(a1, vextq_s16(a1, z, 1)), vsubq_s16(b1, vextq_s16(b1, z, 1)), q->ds[rp] + 8);
            q->d[rp][0] = q->d[rp][1] = kz_fp16_to_f32(kzk_rd16(xa + 208));
            q->d[rp][2] = q->d[rp][3] = kz_fp16_to_f32(kzk_rd16(xb + 208));
        } else {
            const int q5 = t == 5;
            const uint8x16_t ha0 = q5 ? vld1q_u8(xa + 16) : vdupq_n_u8(0), ha1 = q5 ? vld1q_u8(xa + 32) : vdupq_n_u8(0);
            const uint8x16_t hb0 = q5 ? vld1q_u8(xb + 16) : vdupq_n_u8(0), hb1 = q5 ? vld1q_u8(xb + 32) : vdupq_n_u8(0);
            KZ_UNROLL(4)
            for (int c = 0; c < 4; c++) {
                uint8x16_t ua[4], ub[4];
                kz_arm_q45_codes(q5, xa + (q5 ? 48 : 16), ha0, ha1, c, ua);
                kz_arm_q45_codes(q5, xb + (q5 ? 48 : 16), hb0, hb1, c, ub);
                KZ_UNROLL(4)
                for (int i = 0; i < 4; i++) {
                    const int e = (64 * c + 16 * i) / 8;
                    const int64x2_t va = vreinterpretq_s64_u8(ua[i]), vb = vreinterpretq_s64_u8(ub[i]);
                    vst1q_s8(q->w[e][rp], vreinterpretq_s8_s64(vzip1q_s64(va, vb)));
                    vst1q_s8(q->w[e + 1][rp], vreinterpretq_s8_s64(vzip2q_s64(va, vb)));
                }
            }
            uint8_t sc[2][8], mn[2][8];
            kzk_scales_mins(xa + 4, sc[0], mn[0]);
            kzk_scales_mins(xb + 4, sc[1], mn[1]);
            const int16x8_t a = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc[0]))), b = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc[1])));
            kq_ds8(vsubq_s16(a, vextq_s16(a, z, 1)), vsubq_s16(b, vextq_s16(b, z, 1)), q->ds[rp]);
            vst1q_s16(q->m[2 * rp], vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn[0]))));
            vst1q_s16(q->m[2 * rp + 1], vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn[1]))));
            q->d[rp][0] = q->d[rp][1] = kz_fp16_to_f32(kzk_rd16(xa));
            q->d[rp][2] = q->d[rp][3] = kz_fp16_to_f32(kzk_rd16(xb));
            q->dmin[rp][0] = q->dmin[rp][1] = kz_fp16_to_f32(kzk_rd16(xa + 2));
            q->dmin[rp][2] = q->dmin[rp][3] = kz_fp16_to_f32(kzk_rd16(xb + 2));
        }
    }
}

/* sum_j m[j] * bp[j] of rows (ra, rb) x the pair's tokens, as (ra t, ra t', rb t, rb t') */
KZ_INL int32x4_t kq_summ(const int16_t *ma, const int16_t *mb, const kq_info *r) {
    const int16x8_t a = vld1q_s16(ma), b = vld1q_s16(mb), p0 = vld1q_s16(r->bp[0]), p1 = vld1q_s16(r->bp[1]);
    const int32x4_t a0 = vmlal_high_s16(vmull_s16(vget_low_s16(a), vget_low_s16(p0)), a, p0);
    const int32x4_t a1 = vmlal_high_s16(vmull_s16(vget_low_s16(a), vget_low_s16(p1)), a, p1);
    const int32x4_t b0 = vmlal_high_s16(vmull_s16(vget_low_s16(b), vget_low_s16(p0)), b, p0);
    const int32x4_t b1 = vmlal_high_s16(vmull_s16(vget_low_s16(b), vget_low_s16(p1)), b, p1);
    return vpaddq_s32(vpaddq_s32(a0, a1), vpaddq_s32(b0, b1));
}

/* TPN token pairs (operands x[c][0..TPN), infos inf[0..TPN)) x the quad q: the super-block's
 * float step into acc[rp][tp] */
KZ_INL void kq_tile(const int t, const int TPN, const kq_quad *q, const int8_t (*x)[KQ_TP][16], const kq_info *inf,
                    float32x4_t (*acc)[KQ_TP]) {
    const int nsb = t == 6 ? 16 : 8, cps = t == 6 ? 2 : 4; /* sub-blocks, 8-element chunks per sub-block */
    int32x4_t P[2][4], V[2][4];
    KZ_UNROLL(4)
    for (int tp = 0; tp < TPN; tp++) P[0][tp] = P[1][tp] = V[0][tp] = V[1][tp] = vdupq_n_s32(0);
    for (int j = 0; j < nsb; j++) {
        KZ_UNROLL(4)
        for (int ci = 0; ci < cps; ci++) {
            const int c = j * cps + ci;
            const int8x16_t wa = vld1q_s8(q->w[c][0]), wb = vld1q_s8(q->w[c][1]);
            KZ_UNROLL(4)
            for (int tp = 0; tp < TPN; tp++) {
                const int8x16_t xv = vld1q_s8(x[c][tp]);
                P[0][tp] = vmmlaq_s32(P[0][tp], wa, xv);
                P[1][tp] = vmmlaq_s32(P[1][tp], wb, xv);
            }
        }
        const int32x4_t da = vld1q_s32(q->ds[0][j]), db = vld1q_s32(q->ds[1][j]);
        KZ_UNROLL(4)
        for (int tp = 0; tp < TPN; tp++) {
            V[0][tp] = vmlaq_s32(V[0][tp], P[0][tp], da);
            V[1][tp] = vmlaq_s32(V[1][tp], P[1][tp], db);
        }
    }
    KZ_UNROLL(4)
    for (int tp = 0; tp < TPN; tp++) {
        const float32x4_t dat = vld1q_f32(inf[tp].da);
        for (int rp = 0; rp < 2; rp++) {
            const float32x4_t dd = vmulq_f32(dat, vld1q_f32(q->d[rp]));
            float32x4_t s = vaddq_f32(acc[rp][tp], vmulq_f32(dd, vcvtq_f32_s32(V[rp][tp])));
            if (t != 6) {
                const float32x4_t dm = vmulq_f32(dat, vld1q_f32(q->dmin[rp]));
                s = vsubq_f32(s, vmulq_f32(dm, vcvtq_f32_s32(kq_summ(q->m[2 * rp], q->m[2 * rp + 1], &inf[tp]))));
            }
            acc[rp][tp] = s;
        }
    }
}

typedef void (*kq_tile_fn)(const kq_quad *q, const int8_t (*x)[KQ_TP][16], const kq_info *inf, float32x4_t (*acc)[KQ_TP]);
#define KQ_TILE(T, N)                                                                                      \
    static __attribute__((noinline)) void kq_tile##T##_##N(const kq_quad *q, const int8_t (*x)[KQ_TP][16], \
                                                           const kq_info *inf, float32x4_t (*acc)[KQ_TP]) { \
        kq_tile(T, N, q, x, inf, acc);                                                                     \
    }
KQ_TILE(4, 4)
KQ_TILE(4, 1)
KQ_TILE(5, 4)
KQ_TILE(5, 1)
KQ_TILE(6, 4)
KQ_TILE(6, 1)

/* rows [0, nr - nr % 4) x all nt >= 2 tokens */
KZ_INL void kq_prefill(const int t, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a, size_t as,
                       int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / KZK_QK, nr4 = nr - nr % 4;
    const size_t wbs = t == 6 ? KZK_Q6_BYTES : t == 5 ? KZK_Q5_BYTES : KZK_Q4_BYTES;
    const kq_tile_fn t4 = t == 4 ? kq_tile4_4 : t == 5 ? kq_tile5_4 : kq_tile6_4;
    const kq_tile_fn t1 = t == 4 ? kq_tile4_1 : t == 5 ? kq_tile5_1 : kq_tile6_1;
    kq_x xs[KQ_CH];
    kq_info inf[KQ_CH * KQ_TP];
    kq_quad q;
    float32x4_t acc[2][KQ_TP];
    for (int64_t tg = 0; tg < nt; tg += KQ_TG) {
        const int ntg = nt - tg < KQ_TG ? (int)(nt - tg) : KQ_TG, ntp = (ntg + 1) / 2;
        const uint8_t *ag = a + (size_t)tg * as;
        for (int64_t b0 = 0; b0 < nb; b0 += KQ_CH) {
            const int nbc = nb - b0 < KQ_CH ? (int)(nb - b0) : KQ_CH;
            kq_prep(ag, as, ntg, ntp, b0, nbc, xs, inf);
            for (int64_t r0 = 0; r0 < nr4; r0 += 4) {
                for (int tp = 0; tp < ntp; tp++) {
                    const int64_t t0 = tg + 2 * tp, t1 = 2 * tp + 1 < ntg ? t0 + 1 : t0;
                    if (b0 > 0) { /* rows 0..3 of tokens t0, t1 -> row pairs (0,1), (2,3) */
                        const float32x4_t u = vld1q_f32(y + t0 * ldy + r0), v = vld1q_f32(y + t1 * ldy + r0);
                        acc[0][tp] = vzip1q_f32(u, v);
                        acc[1][tp] = vzip2q_f32(u, v);
                    } else {
                        acc[0][tp] = acc[1][tp] = vdupq_n_f32(0.0f);
                    }
                }
                for (int b = 0; b < nbc; b++) {
                    const uint8_t *x[4];
                    for (int r = 0; r < 4; r++) x[r] = w + (size_t)(r0 + r) * ws + (size_t)(b0 + b) * wbs;
                    kq_decode(t, x, &q);
                    int tp = 0;
                    for (; tp + 4 <= ntp; tp += 4)
                        t4(&q, (const int8_t(*)[KQ_TP][16])&xs[b][0][tp], inf + b * KQ_TP + tp,
                           (float32x4_t(*)[KQ_TP])&acc[0][tp]);
                    for (; tp < ntp; tp++)
                        t1(&q, (const int8_t(*)[KQ_TP][16])&xs[b][0][tp], inf + b * KQ_TP + tp,
                           (float32x4_t(*)[KQ_TP])&acc[0][tp]);
                }
                for (int tp = 0; tp < ntp; tp++) {
                    const int64_t t0 = tg + 2 * tp;
                    vst1q_f32(y + t0 * ldy + r0, vuzp1q_f32(acc[0][tp], acc[1][tp]));
                    if (2 * tp + 1 < ntg) vst1q_f32(y + (t0 + 1) * ldy + r0, vuzp2q_f32(acc[0][tp], acc[1][tp]));
                }
            }
        }
    }
}

/* n_tok >= 2: the quads, then the leftover rows by the dot; one token: the dotprod 4-row GEMV */
KZ_INL void kq_gemm(const int t, dot_fn dot, int64_t n, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *a,
                    size_t as, int64_t nt, float *y, int64_t ldy) {
    if (nt == 1) { /* decode: dotprod's 4-row GEMV */
        (t == 6 ? kz_dotprod_gemm_q6_K : t == 5 ? kz_dotprod_gemm_q5_K : kz_dotprod_gemm_q4_K)(n, w, ws, nr, a, as, nt, y, ldy);
        return;
    }
    if (nt < 2 || nr < 4) {
        gemm(t, dot, n, w, ws, nr, a, as, nt, y, ldy);
        return;
    }
    kq_prefill(t, n, w, ws, nr, a, as, nt, y, ldy);
    for (int64_t r = nr - nr % 4; r < nr; r++)
        for (int64_t k = 0; k < nt; k++) y[k * ldy + r] = dot(w + (size_t)r * ws, a + (size_t)k * as, n);
}

void kz_i8mm_gemm_q4_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    kq_gemm(4, kz_dotprod_dot_q4_K, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_i8mm_gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    kq_gemm(5, kz_dotprod_dot_q5_K, n, w, ws, nr, a, as, nt, y, ldy);
}
void kz_i8mm_gemm_q6_K(int64_t n, const void *w, size_t ws, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                       int64_t ldy) {
    kq_gemm(6, kz_dotprod_dot_q6_K, n, w, ws, nr, a, as, nt, y, ldy);
}

/* GCC's pre-RA scheduler hoists all 16 nibble decodes of a block ahead of the dots and then
 * spills the accumulators every block (GCC 12, objdump of the tile loops); without it the
 * loops stay in registers. Out-of-order cores reorder on their own. From here to the end of
 * the file only: the q4_0_16x4 kernels. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-schedule-insns")
#endif

/* ======== Q4_0 in the q4_0_16x4 layout ======== */
/* AArch64 SMMLA (FEAT_I8MM) prefill over the 16-row packed Q4_0 layout (kz_repack_q4_0_16x4), the
 * packed kernel of the i8mm level; decode (1 token) is the SDOT GEMV (arm/dotprod.c).
 *
 * Register tile: 4 rows x 16 tokens, 2 row pairs x 8 token pairs of 2x2 SMMLA results (lanes
 * (r0,t0) (r0,t1) (r1,t0) (r1,t1)). Each block's weights are loaded and unpacked once per tile
 * and used by all 8 token pairs (64 SMMLA per block): vzip1q_u32 / vzip2q_u32 of dwords j, j+1
 * of a quad give rows (0,1) / (2,3) x 8 consecutive bytes, split into unsigned nibbles u.
 * Activations are rearranged once per matmul (or per call) into per-(block, token pair) records
 * that hold the four SMMLA operands (2 tokens x 8 consecutive int8), the pair's -8 * sum(a) (the
 * integer accumulators' start) and scales: two loads per token pair and block in the 16-token
 * tile (q16i_tile8, inline asm), no shuffle in the loop.
 * Exactness: the int32 block sums are exact (sum u * a - 8 sum a = the reference's sumi) and the
 * float part is the reference's acc = acc + (float)sumi * (d_w * d_a), blocks in order, no FMA,
 * lane by lane; partial sums go through y between block chunks (exact). So every output equals
 * the scalar vec_dot bit for bit. */
#include "matmul/arm/q4_0_16x4_tmpl.h"

#define Q16I_TP 8  /* token pairs per tile (16 tokens) */
#define Q16I_CH 64 /* blocks per chunk: 64 x 8 records of 112 bytes (56 KiB) on the stack */

/* one token pair x one block: x[16 c ..] = tokens (t, t+1) x elements 8c..8c+7; corr = the
 * tokens' -8 * sum(a), twice (the two row pairs' accumulators start from it: no register copy),
 * da = their scales, both as (t, t+1, t, t+1), the lane order of an SMMLA result. Field order:
 * the asm tile reads corr, corr, x[0..15] with one LD1 and x[16..63], da with another. */
typedef struct {
    int32_t corr[2][4];
    int8_t x[64];
    float da[4];
} q16i_rec;

/* records of token pairs [0, ntp) of the tokens at a (stride as; the last pair repeats token
 * nt - 1 where nt is odd), blocks [b0, b0 + nbc), at rec[b * Q16I_TP + tp] */
static void q16i_prep(const uint8_t *a, size_t as, int nt, int ntp, int64_t b0, int nbc, q16i_rec *rec) {
    const int32x4_t m8 = vdupq_n_s32(-8);
    for (int tp = 0; tp < ntp; tp++) {
        const uint8_t *a0 = a + (size_t)(2 * tp) * as + (size_t)b0 * 34;
        const uint8_t *a1 = a + (size_t)(2 * tp + 1 < nt ? 2 * tp + 1 : nt - 1) * as + (size_t)b0 * 34;
        q16i_rec *r = rec + tp;
        for (int b = 0; b < nbc; b++, a0 += 34, a1 += 34, r += Q16I_TP) {
            const int64x2_t l0 = vreinterpretq_s64_u8(vld1q_u8(a0 + 2)), h0 = vreinterpretq_s64_u8(vld1q_u8(a0 + 18));
            const int64x2_t l1 = vreinterpretq_s64_u8(vld1q_u8(a1 + 2)), h1 = vreinterpretq_s64_u8(vld1q_u8(a1 + 18));
            const int8x16_t v0 = vreinterpretq_s8_s64(vzip1q_s64(l0, l1)), v1 = vreinterpretq_s8_s64(vzip2q_s64(l0, l1));
            const int8x16_t v2 = vreinterpretq_s8_s64(vzip1q_s64(h0, h1)), v3 = vreinterpretq_s8_s64(vzip2q_s64(h0, h1));
            vst1q_s8(r->x, v0); /* separate stores (STP): no register moves for an ST1 list */
            vst1q_s8(r->x + 16, v1);
            vst1q_s8(r->x + 32, v2);
            vst1q_s8(r->x + 48, v3);
            /* -8 * sum(a) of both tokens as (t, t+1, t, t+1): int16 sums of the zipped operands
             * (8 lanes per token, |.| <= 512), int32 pairs, one pairwise add */
            int16x8_t p = vpaddlq_s8(v0);
            p = vpadalq_s8(p, v1);
            p = vpadalq_s8(p, v2);
            p = vpadalq_s8(p, v3); /* t t t t t+1 t+1 t+1 t+1 ... by 64-bit halves */
            const int32x4_t q = vpaddlq_s16(p);            /* t, t, t+1, t+1 */
            const int32x4_t c = vmulq_s32(vpaddq_s32(q, q), m8); /* t, t+1, t, t+1 */
            vst1q_s32(r->corr[0], c);
            vst1q_s32(r->corr[1], c);
            /* the scales (fp16 -> f32 is exact, as the reference's conversion) as (t, t+1, t, t+1) */
            const uint32_t h2 = (uint32_t)ld16(a0) | (uint32_t)ld16(a1) << 16;
            vst1q_f32(r->da, vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(h2))));
        }
    }
}

#define Q16I_LO(z) vreinterpretq_s8_u8(vandq_u8(z, m))
#define Q16I_HI(z) vreinterpretq_s8_u8(vshrq_n_u8(z, 4))

/* 4 rows (p: the quad's first dword in a block, its 4 fp16 scales at p + doff) x TPN token
 * pairs (records rec[b * Q16I_TP + tp]) over nbc blocks; yp[2 tp] + r0, yp[2 tp + 1] + r0: the
 * pair's outputs of the quad's first row (partial sums read first when resume); the second token
 * of the last pair is written only when wr_last (else it is padding: yp repeats the first) */
KZ_INL void q16i_tile(const int TPN, int nbc, const uint8_t *p, ptrdiff_t doff, const q16i_rec *rec,
                      float *const *yp, int64_t r0, int wr_last, int resume) {
    float32x4_t acc[2][Q16I_TP];
    KZ_UNROLL(8)
    for (int tp = 0; tp < TPN; tp++) {
        if (resume) { /* rows 0..3 of tokens 2tp, 2tp+1 -> row pairs (0,1), (2,3) of the pair */
            const float32x4_t u = vld1q_f32(yp[2 * tp] + r0), v = vld1q_f32(yp[2 * tp + 1] + r0);
            acc[0][tp] = vzip1q_f32(u, v);
            acc[1][tp] = vzip2q_f32(u, v);
        } else {
            acc[0][tp] = vdupq_n_f32(0.0f);
            acc[1][tp] = vdupq_n_f32(0.0f);
        }
    }
    const uint8x16_t m = vdupq_n_u8(15);
    for (int b = 0; b < nbc; b++, p += Q16X4_BB, rec += Q16I_TP) {
        const uint32x4_t d0 = vreinterpretq_u32_u8(vld1q_u8(p)), d1 = vreinterpretq_u32_u8(vld1q_u8(p + 64));
        const uint32x4_t d2 = vreinterpretq_u32_u8(vld1q_u8(p + 128)), d3 = vreinterpretq_u32_u8(vld1q_u8(p + 192));
        /* rows (0,1) / (2,3) x bytes 0..7 (z0a / z0b) and 8..15 (z1a / z1b) */
        const uint8x16_t z0a = vreinterpretq_u8_u32(vzip1q_u32(d0, d1)), z0b = vreinterpretq_u8_u32(vzip2q_u32(d0, d1));
        const uint8x16_t z1a = vreinterpretq_u8_u32(vzip1q_u32(d2, d3)), z1b = vreinterpretq_u8_u32(vzip2q_u32(d2, d3));
        /* operands of elements 0..7, 8..15, 16..23, 24..31 per row pair */
        const int8x16_t wa0 = Q16I_LO(z0a), wa1 = Q16I_LO(z1a), wa2 = Q16I_HI(z0a), wa3 = Q16I_HI(z1a);
        const int8x16_t wb0 = Q16I_LO(z0b), wb1 = Q16I_LO(z1b), wb2 = Q16I_HI(z0b), wb3 = Q16I_HI(z1b);
        const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + doff)));
        const float32x4_t dwa = vzip1q_f32(dw, dw), dwb = vzip2q_f32(dw, dw); /* r0 r0 r1 r1 / r2 r2 r3 r3 */
        KZ_UNROLL(8)
        for (int tp = 0; tp < TPN; tp++) {
            const int8x16_t x0 = vld1q_s8(rec[tp].x), x1 = vld1q_s8(rec[tp].x + 16);
            const int8x16_t x2 = vld1q_s8(rec[tp].x + 32), x3 = vld1q_s8(rec[tp].x + 48);
            int32x4_t sa = vld1q_s32(rec[tp].corr[0]);
            int32x4_t sb = vld1q_s32(rec[tp].corr[1]);
            sa = vmmlaq_s32(sa, wa0, x0);
            sb = vmmlaq_s32(sb, wb0, x0);
            sa = vmmlaq_s32(sa, wa1, x1);
            sb = vmmlaq_s32(sb, wb1, x1);
            sa = vmmlaq_s32(sa, wa2, x2);
            sb = vmmlaq_s32(sb, wb2, x2);
            sa = vmmlaq_s32(sa, wa3, x3);
            sb = vmmlaq_s32(sb, wb3, x3);
            const float32x4_t da = vld1q_f32(rec[tp].da);
            acc[0][tp] = vaddq_f32(acc[0][tp], vmulq_f32(vcvtq_f32_s32(sa), vmulq_f32(dwa, da)));
            acc[1][tp] = vaddq_f32(acc[1][tp], vmulq_f32(vcvtq_f32_s32(sb), vmulq_f32(dwb, da)));
        }
    }
    KZ_UNROLL(8)
    for (int tp = 0; tp < TPN; tp++) {
        vst1q_f32(yp[2 * tp] + r0, vuzp1q_f32(acc[0][tp], acc[1][tp]));
        if (tp < TPN - 1 || wr_last) vst1q_f32(yp[2 * tp + 1] + r0, vuzp2q_f32(acc[0][tp], acc[1][tp]));
    }
}

/* q16i_tile with TPN = 8 (the 16-token groups of every prefill) in GCC inline asm: the same
 * instructions as the intrinsics less what GCC 12 adds around them (an ADD per post-indexed
 * LD1, register copies, a spilled accumulator): per token pair and block 2 loads (LD1 of 3 and
 * of 4 registers, post-indexed), 8 SMMLA and the float step, 18 instructions. Registers:
 * v16..v31 the 16 float accumulators (v16 + 2 tp: rows 0,1, v17 + 2 tp: rows 2,3 of pair tp),
 * v6..v9 / v10..v13 the row pairs' weight operands of elements 0..7, 8..15, 16..23, 24..31,
 * v14 / v15 the row pairs' scales (r0 r0 r1 r1 / r2 r2 r3 r3), v0..v5 scratch. */
#define Q16I_S(x) #x
/* accumulators A (rows 0,1) and B (rows 2,3) of the pair whose output pointers are at yp + OFF */
#define Q16I_RESUME(OFF, A, B)                                                                     \
    "ldp %[t0], %[t1], [%[yp], #" Q16I_S(OFF) "]\n\t"                                              \
    "ldr q0, [%[t0], %[yo]]\n\t"                                                                   \
    "ldr q1, [%[t1], %[yo]]\n\t"                                                                   \
    "zip1 " #A ".4s, v0.4s, v1.4s\n\t"                                                             \
    "zip2 " #B ".4s, v0.4s, v1.4s\n\t"
#define Q16I_ZERO(A, B) "movi " #A ".4s, #0\n\tmovi " #B ".4s, #0\n\t"
/* one token pair's record: v0 / v1 = the corrections (accumulators), v2..v4 = x, v5 = da */
#define Q16I_PAIR(A, B)                                                                            \
    "ld1 {v0.16b, v1.16b, v2.16b}, [%[rec]], #48\n\t"                                              \
    "smmla v0.4s, v6.16b, v2.16b\n\t"                                                              \
    "smmla v1.4s, v10.16b, v2.16b\n\t"                                                             \
    "ld1 {v2.16b, v3.16b, v4.16b, v5.16b}, [%[rec]], #64\n\t"                                      \
    "smmla v0.4s, v7.16b, v2.16b\n\t"                                                              \
    "smmla v1.4s, v11.16b, v2.16b\n\t"                                                             \
    "smmla v0.4s, v8.16b, v3.16b\n\t"                                                              \
    "smmla v1.4s, v12.16b, v3.16b\n\t"                                                             \
    "smmla v0.4s, v9.16b, v4.16b\n\t"                                                              \
    "smmla v1.4s, v13.16b, v4.16b\n\t"                                                             \
    "scvtf v0.4s, v0.4s\n\t"                                                                       \
    "scvtf v1.4s, v1.4s\n\t"                                                                       \
    "fmul v2.4s, v14.4s, v5.4s\n\t"                                                                \
    "fmul v3.4s, v15.4s, v5.4s\n\t"                                                                \
    "fmul v0.4s, v0.4s, v2.4s\n\t"                                                                 \
    "fmul v1.4s, v1.4s, v3.4s\n\t"                                                                 \
    "fadd " #A ".4s, " #A ".4s, v0.4s\n\t"                                                         \
    "fadd " #B ".4s, " #B ".4s, v1.4s\n\t"
#define Q16I_STORE(OFF, A, B)                                                                      \
    "ldp %[t0], %[t1], [%[yp], #" Q16I_S(OFF) "]\n\t"                                              \
    "uzp1 v0.4s, " #A ".4s, " #B ".4s\n\t"                                                         \
    "uzp2 v1.4s, " #A ".4s, " #B ".4s\n\t"                                                         \
    "str q0, [%[t0], %[yo]]\n\t"

/* one block: its weights (dwords j, j+1 of the quad's rows -> zips: rows 0,1 / 2,3 x bytes 0..7
 * in v8 / v12, bytes 8..15 in v9 / v13; low nibbles = elements 0..15, high nibbles = 16..31; the
 * 4 fp16 scales -> f32, each twice), then the 8 token pairs */
#define Q16I_BLOCK                                                                                 \
    "ldr q1, [%[p], #64]\n\t"                                                                      \
    "ldr q2, [%[p], #128]\n\t"                                                                     \
    "ldr q3, [%[p], #192]\n\t"                                                                     \
    "ldr d4, [%[p], %[doff]]\n\t"                                                                  \
    "ld1 {v0.16b}, [%[p]], %[bb]\n\t"                                                              \
    "zip1 v8.4s, v0.4s, v1.4s\n\t"                                                                 \
    "zip2 v12.4s, v0.4s, v1.4s\n\t"                                                                \
    "zip1 v9.4s, v2.4s, v3.4s\n\t"                                                                 \
    "zip2 v13.4s, v2.4s, v3.4s\n\t"                                                                \
    "movi v5.16b, #15\n\t"                                                                         \
    "and v6.16b, v8.16b, v5.16b\n\t"                                                               \
    "and v7.16b, v9.16b, v5.16b\n\t"                                                               \
    "and v10.16b, v12.16b, v5.16b\n\t"                                                             \
    "and v11.16b, v13.16b, v5.16b\n\t"                                                             \
    "ushr v8.16b, v8.16b, #4\n\t"                                                                  \
    "ushr v9.16b, v9.16b, #4\n\t"                                                                  \
    "ushr v12.16b, v12.16b, #4\n\t"                                                                \
    "ushr v13.16b, v13.16b, #4\n\t"                                                                \
    "fcvtl v4.4s, v4.4h\n\t"                                                                       \
    "zip1 v14.4s, v4.4s, v4.4s\n\t"                                                                \
    "zip2 v15.4s, v4.4s, v4.4s\n\t"                                                                \
    Q16I_PAIR(v16, v17) Q16I_PAIR(v18, v19) Q16I_PAIR(v20, v21) Q16I_PAIR(v22, v23)                \
    Q16I_PAIR(v24, v25) Q16I_PAIR(v26, v27) Q16I_PAIR(v28, v29) Q16I_PAIR(v30, v31)

static __attribute__((noinline)) void q16i_tile8(int nbc, const uint8_t *p, ptrdiff_t doff, const q16i_rec *rec,
                                                 float *const *yp, int64_t r0, int wr_last, int resume) {
    const int64_t yo = r0 * (int64_t)sizeof(float);
    uint64_t t0, t1;
    __asm__ volatile(
        "cbz %w[resume], 1f\n\t"
        Q16I_RESUME(0, v16, v17) Q16I_RESUME(16, v18, v19) Q16I_RESUME(32, v20, v21) Q16I_RESUME(48, v22, v23)
        Q16I_RESUME(64, v24, v25) Q16I_RESUME(80, v26, v27) Q16I_RESUME(96, v28, v29) Q16I_RESUME(112, v30, v31)
        "b 2f\n"
        "1:\n\t"
        Q16I_ZERO(v16, v17) Q16I_ZERO(v18, v19) Q16I_ZERO(v20, v21) Q16I_ZERO(v22, v23)
        Q16I_ZERO(v24, v25) Q16I_ZERO(v26, v27) Q16I_ZERO(v28, v29) Q16I_ZERO(v30, v31)
        "2:\n\t"
        "cmp %w[nbc], #0\n\t"
        "b.le 4f\n"
        "tbz %w[nbc], #0, 3f\n\t" /* an odd count enters at the second copy */
        "add %w[nbc], %w[nbc], #1\n\t"
        "b 6f\n"
        "3:\n\t" Q16I_BLOCK
        "6:\n\t" Q16I_BLOCK
        "subs %w[nbc], %w[nbc], #2\n\t"
        "b.ne 3b\n"
        "4:\n\t"
        Q16I_STORE(0, v16, v17) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(16, v18, v19) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(32, v20, v21) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(48, v22, v23) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(64, v24, v25) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(80, v26, v27) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(96, v28, v29) "str q1, [%[t1], %[yo]]\n\t"
        Q16I_STORE(112, v30, v31)
        "cbz %w[wr], 5f\n\t"
        "str q1, [%[t1], %[yo]]\n"
        "5:\n\t"
        : [p] "+r"(p), [rec] "+r"(rec), [nbc] "+r"(nbc), [t0] "=&r"(t0), [t1] "=&r"(t1)
        : [yp] "r"(yp), [yo] "r"(yo), [doff] "r"(doff), [bb] "r"((int64_t)Q16X4_BB), [resume] "r"(resume), [wr] "r"(wr_last)
        : "cc", "memory", "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13",
          "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28",
          "v29", "v30", "v31");
}

#define Q16I_TILE(N)                                                                                       \
    static __attribute__((noinline)) void q16i_tile##N(int nbc, const uint8_t *p, ptrdiff_t doff,          \
                                                        const q16i_rec *rec, float *const *yp, int64_t r0, \
                                                        int wr_last, int resume) {                         \
        q16i_tile(N, nbc, p, doff, rec, yp, r0, wr_last, resume);                                          \
    }
Q16I_TILE(4)
Q16I_TILE(2)
Q16I_TILE(1)

/* n_tok >= 2: per group of up to 16 tokens and chunk of Q16I_CH blocks, the records (made here
 * from a, or read from recs: kz_i8mm_q4_0_16x4_rec's layout), then every 4-row quad x (8, 4, 2,
 * 1)-pair tiles */
static void q16i_prefill(int64_t n, const uint8_t *pk, int64_t nr, const uint8_t *a, size_t as, const q16i_rec *recs,
                         int64_t nt, float *y, int64_t ldy) {
    const int64_t nb = n / 32;
    q16i_rec rec_own[Q16I_CH * Q16I_TP];
    for (int64_t tg = 0; tg < nt; tg += 2 * Q16I_TP) {
        const int ntg = nt - tg < 2 * Q16I_TP ? (int)(nt - tg) : 2 * Q16I_TP, ntp = (ntg + 1) / 2;
        const uint8_t *ag = a + (size_t)tg * as;
        float *yp[2 * Q16I_TP];
        for (int t = 0; t < 2 * ntp; t++) yp[t] = y + (tg + (t < ntg ? t : ntg - 1)) * ldy;
        for (int64_t b0 = 0; b0 < nb; b0 += Q16I_CH) {
            const int nbc = nb - b0 < Q16I_CH ? (int)(nb - b0) : Q16I_CH;
            const q16i_rec *rec = rec_own;
            if (recs) rec = recs + ((size_t)(tg / (2 * Q16I_TP)) * (size_t)nb + (size_t)b0) * Q16I_TP;
            else q16i_prep(ag, as, ntg, ntp, b0, nbc, rec_own);
            for (int64_t r0 = 0; r0 < nr; r0 += 4) {
                const uint8_t *p = pk + ((size_t)(r0 / 16) * (size_t)nb + (size_t)b0) * Q16X4_BB + 16 * (r0 % 16 / 4);
                const ptrdiff_t doff = 256 + 2 * (r0 % 16) - 16 * (r0 % 16 / 4); /* scales, from p */
                for (int tp0 = 0; tp0 < ntp;) {
                    const int w = ntp - tp0 >= 8 ? 8 : ntp - tp0 >= 4 ? 4 : ntp - tp0 >= 2 ? 2 : 1;
                    const int wr_last = 2 * (tp0 + w) <= ntg; /* the tile's last pair has a real second token */
                    float *const *yt = yp + 2 * tp0;
                    const q16i_rec *rt = rec + tp0;
                    if (w == 8) q16i_tile8(nbc, p, doff, rt, yt, r0, wr_last, b0 > 0);
                    else if (w == 4) q16i_tile4(nbc, p, doff, rt, yt, r0, wr_last, b0 > 0);
                    else if (w == 2) q16i_tile2(nbc, p, doff, rt, yt, r0, wr_last, b0 > 0);
                    else q16i_tile1(nbc, p, doff, rt, yt, r0, wr_last, b0 > 0);
                    tp0 += w;
                }
            }
        }
    }
}

void kz_i8mm_gemm_q4_0_16x4(int64_t n, const void *pk, int64_t nr, const void *a, size_t as, int64_t nt, float *y,
                           int64_t ldy) {
    if (nt >= 2) {
        q16i_prefill(n, pk, nr, a, as, NULL, nt, y, ldy);
        return;
    }
    kz_dotprod_gemm_q4_0_16x4(n, pk, nr, a, as, nt, y, ldy); /* decode: lane = row SDOT GEMV */
}

size_t kz_i8mm_q4_0_16x4_rec_size(void) { return sizeof(q16i_rec); }

void kz_i8mm_q4_0_16x4_rec(const void *a, size_t as, int nt, int64_t b0, int nbc, void *rec) {
    q16i_prep(a, as, nt, 1, b0, nbc, (q16i_rec *)rec + (size_t)b0 * Q16I_TP);
}

void kz_i8mm_gemm_q4_0_16x4_rec(int64_t n, const void *pk, int64_t nr, const void *rec, int64_t nt, float *y,
                               int64_t ldy) {
    q16i_prefill(n, pk, nr, NULL, 0, rec, nt, y, ldy);
}

#else
typedef int kz_matmul_arm_i8mm_unused; /* not AArch64: nothing to build */
#endif
