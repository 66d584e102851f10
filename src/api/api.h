/* Internal additions to the API (not in the public header, not exported by libkazeia.so): used by
 * the CLI, tests and tools, which link the static library. */
#ifndef KZ_API_H
#define KZ_API_H
#include "kazeia.h"

/* Tokens currently held in the sequence state (prompt + generated tokens that were evaluated);
 * *n = kz_context_n_past(c). The pointer is valid until the next call on c. */
const int32_t *kz_context_history(const kz_context *c, int *n);
/* ChatML prompt tokens kz_generate would build for (system, user) with c's think setting.
 * Returns the count and a malloc'd array in *out (caller frees), or -1 (see kz_context_error). */
int kz_context_prompt_tokens(kz_context *c, const char *system, const char *user, int32_t **out);
/* The context's sequence (for kz_seq_profile_enable / kz_seq_profile, see model.h). */
struct kz_seq *kz_context_seq(kz_context *c);
/* kz_argmax of kz_logits(c) when the forward that wrote them found it along the LM head (one
 * logits row: kz_eval with logits NULL or one token, kz_generate's steps), else -1 */
int64_t kz_context_logits_argmax(const kz_context *c);
/* The status a failure message from the layers below the API implies (they report messages
 * only): out of memory, i/o, unsupported; `otherwise` when none of those. */
kz_status kz_status_from_message(const char *msg, kz_status otherwise);
#endif
