/* Token sampler over one logits vector.
 *
 * Order of operations (llama.cpp's default chain, so user-quoted settings mean the same here):
 *   1. penalties over the last repeat_last_n tokens of the history (0 = whole history):
 *        repeat:    logit > 0 ? logit / repeat_penalty : logit * repeat_penalty
 *        frequency: logit -= frequency_penalty * count
 *        presence:  logit -= presence_penalty  (once, if count > 0)
 *   2. temperature <= 0: greedy argmax of the penalised logits (lowest id wins ties); stop.
 *   3. top-k    (k <= 0 or k >= n_vocab: off)
 *   4. top-p    on the softmax of the surviving logits at temperature 1 (p >= 1: off);
 *               keeps the smallest most-probable set whose mass is >= p
 *   5. min-p    keeps tokens with prob >= min_p * max prob (p <= 0: off)
 *   6. temperature: softmax(logit / T) over the survivors, one draw from the sampler's RNG.
 * Every filter keeps at least one token. Ties are broken by lower id, so results depend only on
 * the logits, the history and the seed (never on thread count or memory layout).
 * Cost per token: O(V) for penalties-free greedy; top-k/top-p use selection + a sort of the
 * kept prefix only (top-p grows the prefix geometrically until it holds mass p). */
#ifndef KZ_SAMPLE_H
#define KZ_SAMPLE_H
#include <stdint.h>

typedef struct {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
    float repeat_penalty;
    int repeat_last_n;
    float presence_penalty;
    float frequency_penalty;
    uint64_t seed;
} kz_sampler_params;

typedef struct kz_sampler kz_sampler;

/* NULL on allocation failure or n_vocab < 1. */
kz_sampler *kz_sampler_new(int n_vocab, const kz_sampler_params *p);
void kz_sampler_free(kz_sampler *s);
/* Restart the RNG stream from p->seed (same seed -> same draws). */
void kz_sampler_reseed(kz_sampler *s, uint64_t seed);
void kz_sampler_set_params(kz_sampler *s, const kz_sampler_params *p);
/* Pick a token from logits[n_vocab] (not modified). hist: tokens of the sequence so far (used by
 * the penalties; ids outside [0,n_vocab) are ignored). Returns the token id. */
int32_t kz_sampler_sample(kz_sampler *s, const float *logits, const int32_t *hist, int n_hist);
/* the same, given argmax = kz_argmax(logits, n_vocab) when known (else -1): greedy sampling
 * without penalties returns it instead of scanning the logits */
int32_t kz_sampler_sample_hint(kz_sampler *s, const float *logits, const int32_t *hist, int n_hist,
                               int64_t argmax);

/* --- exposed for tests --- */
/* Apply the penalties of p to logits[n_vocab] in place (step 1 above). counts: scratch of
 * n_vocab ints, all zero on entry and on return. */
void kz_sample_apply_penalties(const kz_sampler_params *p, float *logits, int n_vocab,
                               const int32_t *hist, int n_hist, int *counts);
/* Uniform double in [0,1) from the sampler's RNG (advances it). */
double kz_sampler_uniform(kz_sampler *s);
/* Survivors of steps 3-5 for the last kz_sampler_sample call: writes up to max ids (sorted by
 * descending logit) and returns how many survived (only valid when temperature > 0). */
int kz_sampler_last_candidates(const kz_sampler *s, int32_t *ids, int max);
#endif
