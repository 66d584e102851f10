/* ChatML prompt for one turn (Qwen3 / Qwen3.5 templates, docs/qwen35.md#chat-template).
 *
 *   [<|im_start|>system\n{system}<|im_end|>\n]     only if system is non-empty
 *   <|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n
 *   think off          : <think>\n\n</think>\n\n      (both archs)
 *   think on,  qwen35  : <think>\n                   (its template forces the block open)
 *   think on,  qwen3   : nothing                     (the model emits <think> itself)
 * qwen35's template applies |trim to message content (ASCII whitespace here); qwen3's does not.
 *
 * The prompt is a list of segments: control tokens (looked up by exact text, never parsed out
 * of content) and plain text. Adjacent text segments are tokenised together with
 * parse_special = 0, so "<|im_end|>" typed by a user stays ordinary text (no prompt injection)
 * while the text around it tokenises exactly as the whole rendered template would. */
#ifndef KZ_CHAT_H
#define KZ_CHAT_H
#include <stddef.h>
#include <stdint.h>
#include "text/tokenizer.h"

typedef enum { KZ_CHAT_QWEN3 = 0, KZ_CHAT_QWEN35 = 1 } kz_chat_arch;

typedef struct {
    int special;      /* 1: one control token whose text is text[0..len) */
    const char *text; /* points into a static literal or the caller's system/user string */
    size_t len;
} kz_chat_seg;

#define KZ_CHAT_MAX_SEGS 24

/* Fill segs (capacity >= KZ_CHAT_MAX_SEGS). system/user may be NULL (= ""). Returns the count. */
int kz_chat_segments(kz_chat_arch arch, const char *system, const char *user, int think,
                     kz_chat_seg *segs);
/* Total bytes of the rendered prompt (no NUL), or SIZE_MAX on overflow. */
size_t kz_chat_rendered_len(const kz_chat_seg *segs, int n);
/* Rendered prompt as one malloc'd NUL-terminated string (for display/tests); NULL on failure. */
char *kz_chat_render(const kz_chat_seg *segs, int n);
/* Tokenise the segments. On success returns the token count and sets *out (malloc'd, caller
 * frees); on failure returns -1 with a message in err. */
int kz_chat_tokenize(const kz_tokenizer *t, const kz_chat_seg *segs, int n, int32_t **out,
                     char *err, size_t errlen);
#endif
