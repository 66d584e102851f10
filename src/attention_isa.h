/* ISA-specific builds of the attention kernels (attention.c chooses among them at run time). */
#ifndef KZ_ATTENTION_ISA_H
#define KZ_ATTENTION_ISA_H
#include "attention.h"

/* kz_attn_partial for 4 query heads per kv head, head_dim % 32 == 0, F16 or F32 cache, p1 > p0;
 * returns 0 (nothing written) for any other case. Same bits as the generic body. x86-64 only,
 * call only at the AVX-512 level. */
int kz_attn_partial_avx512(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                           float *ml, float *acc, float *scratch);
/* the same for AArch64 NEON (head_dim % 8 == 0); call at the neon level or above */
int kz_attn_partial_neon(const kz_kv_layer *kv, int g, int p0, int p1, const float *q, size_t ldq, float scale,
                         float *ml, float *acc, float *scratch);
#endif
