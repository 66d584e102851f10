/* Qwen3Guard-Gen prompts: the model's chat template (../shared/data/qwen3guard/chat_template.jinja,
 * docs/guard.md) rendered as chat segments, so that tokenising them gives the ids HF tokenizers
 * gives for the rendered text (control tokens of the template found by text; message content
 * never parsed for control tokens: typed "<|im_end|>" cannot forge a verdict).
 *
 * The last message selects the task: role "user" = prompt moderation (2 output lines), any other
 * role = response moderation (3 lines). Messages are printed as the template prints them: a first
 * system or user message as "USER: <text>", a first assistant message dropped, a user message
 * right after a system message glued on as "\n\n<text>", later ones as "\n\nUSER: " /
 * "\n\nASSISTANT: " + text, other roles dropped. No messages: nothing. */
#ifndef KZ_GUARD_PROMPT_H
#define KZ_GUARD_PROMPT_H
#include <stddef.h>
#include <stdint.h>
#include "text/chat.h"

typedef struct {
    const char *role;    /* "system", "user", "assistant", other roles print nothing */
    const char *content; /* NULL = "" */
} kz_guard_msg;

/* segments a rendering of n messages needs at most */
#define KZ_GUARD_SEGS(n) (2 * (size_t)(n) + 16)

/* Fill segs (capacity KZ_GUARD_SEGS(n)) with the rendering of msgs[0..n). Returns the count. */
int kz_guard_segments(const kz_guard_msg *msgs, int n, kz_chat_seg *segs);


/* ---- for the tests (ctypes, dev library) ---- */
/* The rendering as one malloc'd NUL-terminated string, or NULL on out of memory. */
char *kz_guard_render(const char *const *roles, const char *const *contents, int n);
/* Token ids of the rendering with m's tokenizer (model is a const kz_model *): the count (may
 * exceed max: call again), or -1 (message in err). */
struct kz_model;
int kz_guard_prompt_tokens(const struct kz_model *m, const char *const *roles, const char *const *contents, int n,
                           int32_t *out, int max, char *err, size_t errlen);
#endif
