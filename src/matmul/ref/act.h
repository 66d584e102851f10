/* Activation block types (see ref/act.c): byte layouts, for the weight kernels that
 * take them (their quantizers: ref/ref.h). */
#ifndef KZ_QUANT_ACT_H
#define KZ_QUANT_ACT_H
#include <stddef.h>
#include <stdint.h>

#define KZ_Q8_1_BYTES 36  /* fp16 d, fp16 s = d*sum(qs), int8 qs[32] */
#define KZ_Q8_K_BYTES 292 /* f32 d, int8 qs[256] at +4, int16 bsums[16] at +260 */

#endif
