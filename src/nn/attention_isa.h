/* ISA-specific builds of the attention kernels (attention.c chooses among them at run time). */
#ifndef KZ_ATTENTION_ISA_H
#define KZ_ATTENTION_ISA_H
#include "nn/attention.h"
#include "nn/ops.h"

/* the softmax step of a decode partial: for each of the n_rep heads' n scores (sc[r*n + t]), the
 * max, the scores turned into e^(s - max) in place, and their sum: ml[2r] = max, ml[2r+1] = sum.
 * Inlined into every ISA build, so each gives the generic body's bits. */
KZ_AINL void kz_attn_softmax_partial(float *sc, int n_rep, int n, float *ml) {
    for (int r = 0; r < n_rep; r++) {
        float *s = sc + (size_t)r * n;
        const float mx = kz_row_max(s + 1, s[0], n - 1);
        ml[2 * r] = mx;
        ml[2 * r + 1] = (float)kz_exp_sum(s, mx, n);
    }
}

/* kz_attn_partial for 4 query heads per kv head, head_dim % 32 == 0, F16 or F32 cache, p1 > p0;
 * returns 0 (nothing written) for any other case. Same bits as the generic body. x86-64 only,
 * call only at the AVX-512 level. */
int kz_attn_partial_avx512(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                           float *ml, float *acc, float *scratch);
/* the same for AArch64 NEON (head_dim % 8 == 0); call at the neon level or above */
int kz_attn_partial_neon(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                         float *ml, float *acc, float *scratch);
#endif
