/* Internal to speculative decoding (speculative.c); the decode-loop hooks are in api/context.h. */
#ifndef KZ_SPECULATIVE_H
#define KZ_SPECULATIVE_H
#include <stdint.h>

/* The speculative-sampling rule for a draft d drawn from q: with u, u2 uniform in [0, 1), d is
 * kept with probability min(1, p(d) / q(d)), else the token comes from the normalised residual
 * max(0, p - q). p and q: n probabilities each. The result is distributed as p. */
int32_t kz_spec_accept(const float *p, const float *q, int n, int32_t d, double u, double u2);
#endif
