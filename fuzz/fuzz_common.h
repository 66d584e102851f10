/* Shared by the tokenizer and chat fuzzers: one tokenizer per pre-tokenizer variant, built
 * once from a closed subset of the real Qwen3 vocab (vocab_small.h), and the expected result
 * of a decode(encode(x)) round trip computed independently of the tokenizer's own splitting. */
#ifndef KZ_FUZZ_COMMON_H
#define KZ_FUZZ_COMMON_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fuzz_check.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "vocab_small.h"

/* One tokenizer per variant, built on first use and kept for the process (test code: the
 * fuzzer's lifetime is the process). */
static inline kz_tokenizer *fz_tokenizer(int variant) {
    static kz_tokenizer *tk[2];
    if (tk[variant]) return tk[variant];
    static kz_str toks[FZ_N_TOKENS], merges[FZ_N_MERGES];
    for (int i = 0; i < FZ_N_TOKENS; i++) { toks[i].ptr = fz_tokens[i]; toks[i].len = strlen(fz_tokens[i]); }
    for (int i = 0; i < FZ_N_MERGES; i++) { merges[i].ptr = fz_merges[i]; merges[i].len = strlen(fz_merges[i]); }
    kz_tok_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.pre = variant == KZ_PRE_QWEN35 ? "qwen35" : "qwen2";
    sp.n_tokens = FZ_N_TOKENS;
    sp.tokens = toks;
    sp.types = fz_types;
    sp.n_merges = FZ_N_MERGES;
    sp.merges = merges;
    sp.eos = sp.bos = sp.pad = sp.eot = sp.eom = -1;
    char err[256];
    tk[variant] = kz_tokenizer_new(&sp, err, sizeof err);
    FZ_CHECK(tk[variant] != NULL, "kz_tokenizer_new: %s", err);
    return tk[variant];
}

typedef struct { unsigned char *p; size_t n, cap; } fz_buf;
static inline void fz_put(fz_buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        FZ_CHECK(b->p != NULL, "oom");
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static inline void fz_put_nfc(fz_buf *b, const char *s, size_t n) {
    char *o = NULL;
    size_t on = 0;
    int r = kz_nfc(s, n, &o, &on);
    FZ_CHECK(r >= 0, "kz_nfc failed");
    if (r) { fz_put(b, o, on); free(o); }
    else fz_put(b, s, n);
}

/* What decode(encode(x)) must give: added-token texts are cut out leftmost-longest (USER_DEFINED
 * always, CONTROL only with parse_special) and kept verbatim; the text between them is NFC'd. */
static inline void fz_expected(const char *x, size_t n, int parse_special, fz_buf *out) {
    static int sp[64], nsp = -1;
    static size_t spl[64];
    static unsigned char first[256];
    if (nsp < 0) {
        nsp = 0;
        for (int id = 0; id < FZ_N_TOKENS; id++)
            if (fz_types[id] != KZ_TOKTYPE_NORMAL && nsp < 64) {
                spl[nsp] = strlen(fz_tokens[id]);
                first[(unsigned char)fz_tokens[id][0]] = 1;
                sp[nsp++] = id;
            }
    }
    size_t seg = 0;
    for (size_t i = 0; i < n;) {
        size_t best = 0;
        for (int k = 0; k < nsp && first[(unsigned char)x[i]]; k++) {
            int id = sp[k], ty = fz_types[id];
            if (!(ty == KZ_TOKTYPE_USER_DEFINED || (ty == KZ_TOKTYPE_CONTROL && parse_special))) continue;
            size_t l = spl[k];
            if (l > best && l <= n - i && !memcmp(x + i, fz_tokens[id], l)) best = l;
        }
        if (!best) { i++; continue; }
        fz_put_nfc(out, x + seg, i - seg);
        fz_put(out, x + i, best);
        i += best;
        seg = i;
    }
    fz_put_nfc(out, x + seg, n - seg);
}

/* concatenated raw bytes of ids; checks every id is in range */
static inline void fz_decode(const kz_tokenizer *t, const int32_t *ids, int n, fz_buf *out) {
    char piece[512];
    for (int i = 0; i < n; i++) {
        int l = kz_tok_bytes(t, ids[i], piece, sizeof piece);
        FZ_CHECK(l >= 0 && (size_t)l <= sizeof piece, "token %d: kz_tok_bytes = %d", ids[i], l);
        fz_put(out, piece, (size_t)l);
    }
}

static inline int fz_count_type(const kz_tokenizer *t, const int32_t *ids, int n, int control) {
    int k = 0;
    for (int i = 0; i < n; i++) k += kz_tok_is_control(t, ids[i]) == control;
    return k;
}
#endif
