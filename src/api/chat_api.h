/* Conversation internals the tests use (not in the public header). */
#ifndef KZ_API_CHAT_API_H
#define KZ_API_CHAT_API_H
#include "kazeia.h"

/* Tokens of messages[0..upto) rendered by the model's template (+ the generation prompt for
 * think when add_gen). Count and a malloc'd array in *out, or -1 (kz_chat_error). */
int kz_chat_render_tokens(kz_chat *chat, int upto, int add_gen, int think, int32_t **out);
/* The first half of kz_chat_reply: render, restore / reuse, evaluate the new tokens; afterwards
 * kz_logits(context) are the logits the reply samples its first token from. stats as
 * kz_chat_reply's (n_gen 0). 0 or -1; a cancel returns 0 with stats->stop KZ_STOP_CANCELLED. */
int kz_chat_prefill(kz_chat *chat, int think, kz_stats *stats);
#endif
