/* Byte-level BPE tokenizer read from GGUF metadata (tokenizer.ggml.*), Qwen2/Qwen3.5
 * pre-tokenizer regex implemented by hand over real Unicode tables. */
#ifndef KZ_TOKENIZER_H
#define KZ_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "model/gguf.h"

typedef struct kz_tokenizer kz_tokenizer;
/* Reads tokenizer.ggml.{model ("gpt2" only), pre ("qwen2" | "qwen35"), tokens, token_type,
 * merges, eos/bos/padding/eot/eom_token_id}; validates everything (ids in range, UTF-8 texts,
 * merges naming vocab tokens, all 256 byte tokens present). Copies what it needs: g may be
 * closed afterwards. NULL + one-line message on failure. */
kz_tokenizer *kz_tokenizer_from_gguf(const kz_gguf *g, char *err, size_t errlen);
void kz_tokenizer_free(kz_tokenizer *t);
int kz_tok_n_vocab(const kz_tokenizer *t);
/* encode UTF-8 text (invalid UTF-8 bytes are still encoded byte-wise, never dropped).
 * As HF `tokenizers`: added-token texts are cut out of the raw text first (leftmost, longest);
 * USER_DEFINED ones always, CONTROL ones only when parse_special (llama.cpp's rule; HF's own
 * encode matches both, i.e. parse_special = 1); the text between them is NFC-normalised, split
 * by the tokenizer.ggml.pre regex and BPE-merged. Thread-safe (t is never modified).
 * Returns token count (may exceed max; out may be NULL when max == 0), -1 on error. */
int kz_tok_encode(const kz_tokenizer *t, const char *text, size_t len, int parse_special,
                  int32_t *out, int max);
/* raw decoded bytes of token id; returns length or -1 (bad id). buf may be NULL if len 0;
 * copies min(length, len) bytes, no NUL. NORMAL tokens go through the inverse GPT-2 byte map
 * (may be part of a UTF-8 sequence); CONTROL / USER_DEFINED give their literal text; UNUSED
 * (padding) tokens give nothing. */
int kz_tok_bytes(const kz_tokenizer *t, int32_t id, char *buf, size_t len);
/* id of a token whose text is exactly s (e.g. "<|im_end|>"), or -1 */
int32_t kz_tok_find(const kz_tokenizer *t, const char *s);
/* end of generation: tokens whose text is <|im_end|>, <|endoftext|>, <|fim_pad|>,
 * <|repo_name|>, <|file_sep|> or <|eot_id|> (and not NORMAL), plus eos / eot / eom ids */
int kz_tok_is_eog(const kz_tokenizer *t, int32_t id);
int kz_tok_is_control(const kz_tokenizer *t, int32_t id); /* token_type CONTROL */
int32_t kz_tok_eos(const kz_tokenizer *t);

/* bytes the tokenizer's tables take (the memory budget) */
size_t kz_tok_mem_bytes(const kz_tokenizer *t);

/* Streaming UTF-8 assembler: never emits half a code point. Invalid sequences become U+FFFD,
 * one per maximal ill-formed subpart (Python's errors='replace'). Zero-initialise the struct.
 * Every ill-formed byte can become 3 output bytes, so cap must be >= KZ_UTF8_FEED_CAP(n)
 * for nothing to be lost (output is cut at cap, never written past it). A complete, valid
 * input never needs more than n + 4 bytes. */
typedef struct { unsigned char buf[4]; int n; } kz_utf8_stream;
#define KZ_UTF8_FEED_CAP(n) (3 * (size_t)(n) + 8)
/* returns bytes written to out */
size_t kz_utf8_feed(kz_utf8_stream *s, const char *in, size_t n, char *out, size_t cap);
/* pending incomplete sequence -> one U+FFFD; resets the stream; cap >= 3 */
size_t kz_utf8_flush(kz_utf8_stream *s, char *out, size_t cap);

/* ---- internal, for tests and tools ---- */
/* Build a tokenizer from plain arrays (what kz_tokenizer_from_gguf does after reading keys).
 * tokens[i] is the GGUF token text (byte-level encoded for NORMAL tokens), types[i] a
 * KZ_TOKTYPE_* (NULL: all NORMAL), merges[i] "left right" in rank order. */
enum { KZ_TOKTYPE_NORMAL = 1, KZ_TOKTYPE_UNKNOWN = 2, KZ_TOKTYPE_CONTROL = 3,
       KZ_TOKTYPE_USER_DEFINED = 4, KZ_TOKTYPE_UNUSED = 5, KZ_TOKTYPE_BYTE = 6 };
typedef struct {
    const char *pre; /* tokenizer.ggml.pre: "qwen2" or "qwen35" */
    int n_tokens;
    const kz_str *tokens;
    const int32_t *types;
    int n_merges;
    const kz_str *merges;
    int32_t eos, bos, pad, eot, eom; /* -1 = absent */
} kz_tok_spec;
kz_tokenizer *kz_tokenizer_new(const kz_tok_spec *spec, char *err, size_t errlen);
/* pre-tokenizer variants */
enum { KZ_PRE_QWEN2 = 0, KZ_PRE_QWEN35 = 1 };
/* Split already-normalised text like the variant's regex: writes the end offset of each piece
 * to ends (up to max), returns the number of pieces. */
size_t kz_pretokenize(int variant, const char *text, size_t len, size_t *ends, size_t max);
int kz_tok_variant(const kz_tokenizer *t); /* KZ_PRE_* of a loaded tokenizer */
#endif
