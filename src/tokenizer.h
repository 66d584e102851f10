/* Byte-level BPE tokenizer read from GGUF metadata (tokenizer.ggml.*), Qwen2/Qwen3.5
 * pre-tokenizer regex implemented by hand over real Unicode tables. */
#ifndef KZ_TOKENIZER_H
#define KZ_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "gguf.h"

typedef struct kz_tokenizer kz_tokenizer;
kz_tokenizer *kz_tokenizer_from_gguf(const kz_gguf *g, char *err, size_t errlen);
void kz_tokenizer_free(kz_tokenizer *t);
int kz_tok_n_vocab(const kz_tokenizer *t);
/* encode UTF-8 text (invalid UTF-8 bytes are still encoded byte-wise, never dropped).
 * Returns token count (may exceed max; out may be NULL when max == 0), -1 on error. */
int kz_tok_encode(const kz_tokenizer *t, const char *text, size_t len, int parse_special,
                  int32_t *out, int max);
/* raw decoded bytes of token id; returns length or -1 (bad id). buf may be NULL if len 0 */
int kz_tok_bytes(const kz_tokenizer *t, int32_t id, char *buf, size_t len);
/* id of a token whose text is exactly s (e.g. "<|im_end|>"), or -1 */
int32_t kz_tok_find(const kz_tokenizer *t, const char *s);
int kz_tok_is_eog(const kz_tokenizer *t, int32_t id);
int kz_tok_is_control(const kz_tokenizer *t, int32_t id);
int32_t kz_tok_eos(const kz_tokenizer *t);

/* Streaming UTF-8 assembler: never emits half a code point. Invalid sequences become U+FFFD. */
typedef struct { unsigned char buf[4]; int n; } kz_utf8_stream;
/* returns bytes written to out (cap must be >= n + 8) */
size_t kz_utf8_feed(kz_utf8_stream *s, const char *in, size_t n, char *out, size_t cap);
size_t kz_utf8_flush(kz_utf8_stream *s, char *out, size_t cap);
#endif
