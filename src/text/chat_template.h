/* Multi-turn chat rendering: a message list rendered as the models' own Jinja chat templates render
 * it (Qwen3.5: chat_template.jinja of Qwen/Qwen3.5-4B; Qwen3: tokenizer_config.json of Qwen3),
 * text only (no tools, no images), checked byte for byte against transformers'
 * apply_chat_template (tests/py/test_chat_template.py). What the templates do, in short:
 *   - qwen35 trims every message (Python str.strip: Unicode whitespace); qwen3 trims nothing;
 *   - an assistant message is split at its last </think>: the text before it (after the last
 *     <think>) is the reasoning, the text after it the answer. Assistant turns before the last
 *     user query keep only the answer; later ones get "<think>\nREASONING\n</think>\n\n" (qwen3:
 *     only the last message, or one with reasoning);
 *   - the generation prompt is "<|im_start|>assistant\n", then "<think>\n\n</think>\n\n" when
 *     enable_thinking is false, and (qwen35 only) "<think>\n" otherwise;
 *   - qwen35 refuses a system message after the first and a history without a user query.
 * The output is kz_chat_seg segments (chat.h): control tokens apart from text, so message text
 * is tokenised without special-token parsing (typed "<|im_end|>" stays text). */
#ifndef KZ_CHAT_TEMPLATE_H
#define KZ_CHAT_TEMPLATE_H
#include <stddef.h>
#include "text/chat.h"

enum { KZ_TMPL_SYSTEM = 0, KZ_TMPL_USER = 1, KZ_TMPL_ASSISTANT = 2 };

typedef struct {
    int role;          /* KZ_TMPL_* */
    const char *text;  /* UTF-8, text[0..len) */
    size_t len;
} kz_tmpl_msg;

typedef struct {
    kz_chat_seg *segs; /* point into the messages' text or static literals */
    int n, cap;
    int n_before_gen;  /* segments before the generation prompt (== n without one) */
} kz_tmpl_out;

/* Render msgs[0..n). enable_thinking: -1 undefined (the template default), 0 false, 1 true.
 * 0, or -1 with a message in err (the template's own refusal, or out of memory). out is reset
 * first; free it with kz_tmpl_out_free. */
int kz_chat_template_render(kz_chat_arch arch, const kz_tmpl_msg *msgs, int n, int add_generation_prompt,
                            int enable_thinking, kz_tmpl_out *out, char *err, size_t errlen);
void kz_tmpl_out_free(kz_tmpl_out *o);

/* For the conformance test (ctypes on the dev library): roles[i] / texts[i] (NUL-terminated) as
 * above, arch 0 qwen3 / 1 qwen35. Writes the rendered text (NUL-terminated when it fits) to buf;
 * returns its length (may exceed cap: call again), or -1 with the error in buf. */
long kz_chat_template_dev(int arch, int n, const int *roles, const char *const *texts, int add_generation_prompt,
                          int enable_thinking, char *buf, size_t cap);
#endif
