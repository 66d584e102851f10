/* Activation block types (see quant_act.c): byte layouts and the scalar quantizers, for the
 * weight kernels that take them. */
#ifndef KZ_QUANT_ACT_H
#define KZ_QUANT_ACT_H
#include <stddef.h>
#include <stdint.h>

#define KZ_Q8_1_BYTES 36  /* fp16 d, fp16 s = d*sum(qs), int8 qs[32] */
#define KZ_Q8_K_BYTES 292 /* f32 d, int8 qs[256] at +4, int16 bsums[16] at +260 */

size_t kz_quant_q8_1(const float *src, void *dst, int64_t n);
size_t kz_quant_q8_K(const float *src, void *dst, int64_t n);
#endif
