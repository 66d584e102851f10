/* Regression tests for what the fuzzers found, in the normal suite.
 *  - fuzz_model: error messages quoted file text verbatim (a merge with a newline and an
 *    ill-formed byte broke the one-line rule); now every quoted string goes through
 *    kz_utf8_printable. Checked for the merges, tokenizer.ggml.model / .pre and
 *    general.architecture, and kz_utf8_printable itself. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kazeia.h"
#include "model/gguf.h"
#include "kt.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

/* a message a user can read on one line: no C0/DEL bytes, well-formed UTF-8 */
static int one_line(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = kz_utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

static void test_printable(void) {
    char out[16];
    CHECK(!strcmp(kz_utf8_printable("abc", 3, out, sizeof out), "abc"));
    CHECK(!strcmp(kz_utf8_printable("a\nb\tc\x7f", 6, out, sizeof out), "a?b?c?"));
    CHECK(!strcmp(kz_utf8_printable("\xc3\xa9t\xc3\xa9", 5, out, sizeof out), "\xc3\xa9t\xc3\xa9")); /* kept */
    CHECK(!strcmp(kz_utf8_printable("x\xff\xc3y", 4, out, sizeof out), "x??y"));
    CHECK(!strcmp(kz_utf8_printable("\xc2\x85z", 3, out, sizeof out), "?z")); /* C1 control NEL */
    CHECK(!strcmp(kz_utf8_printable("a\0b", 3, out, sizeof out), "a?b"));
    /* cut: never past cap, never inside a code point, marked */
    const char *lng = "0123456789abcdefghij";
    kz_utf8_printable(lng, strlen(lng), out, sizeof out);
    CHECKF(strlen(out) == 15 && !strcmp(out + 12, "..."), "'%s'", out);
    char o2[8];
    kz_utf8_printable("\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5", 9, o2, sizeof o2);
    CHECKF(!strcmp(o2, "\xe6\x97\xa5..."), "'%s'", o2);
    char o4[4];
    kz_utf8_printable("abcdef", 6, o4, sizeof o4);
    CHECKF(!strcmp(o4, "..."), "'%s'", o4);
    CHECK(!strcmp(kz_utf8_printable("", 0, o4, sizeof o4), ""));
}

/* GPT-2 byte -> code point, written out here */
static uint32_t b2u(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) k++;
    return 256u + (uint32_t)k;
}

/* a vocab-only GGUF: 256 byte tokens, one merge (merge_len bytes, may hold anything), the given
 * model / pre strings and, when arch is set, general.architecture */
static int write_vocab(const char *path, const char *model, const char *pre, const char *merge, size_t merge_len,
                       const char *arch) {
    static char texts[256][4];
    const char *toks[256];
    uint64_t lens[256];
    for (int b = 0; b < 256; b++) {
        int k = kz_utf8_put(b2u(b), (unsigned char *)texts[b]);
        toks[b] = texts[b];
        lens[b] = (uint64_t)k;
    }
    const char *mg[1] = {merge};
    uint64_t ml[1] = {merge_len};
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    int rc = arch ? kz_gguf_w_str(w, "general.architecture", arch) : 0;
    rc |= kz_gguf_w_str(w, "tokenizer.ggml.model", model) | kz_gguf_w_str(w, "tokenizer.ggml.pre", pre) |
          kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, lens, 256) |
          kz_gguf_w_arr_str(w, "tokenizer.ggml.merges", mg, ml, merge ? 1 : 0) | kz_gguf_writer_begin(w, path) |
          kz_gguf_writer_finish(w);
    if (rc) fprintf(stderr, "writer: %s\n", kz_gguf_writer_error(w));
    kz_gguf_writer_free(w);
    return rc;
}

static void tok_error(const char *path, const char *label, const char *want) {
    char err[512] = "";
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "%s: %s", label, err);
    if (!g) return;
    kz_tokenizer *t = kz_tokenizer_from_gguf(g, err, sizeof err);
    CHECKF(!t && one_line(err) && strstr(err, want), "%s: '%s'", label, err);
    printf("%s: %s\n", label, err);
    kz_tokenizer_free(t);
    kz_gguf_close(g);
}

static void test_quoted_file_text(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kz_test_hostile_%d.gguf", (int)getpid());
    /* the fuzzer's case: merge "\xc4\n \xc4\x8a" (ill-formed byte, newline) */
    static const char m1[] = "\xc4\n \xc4\x8a";
    CHECK(write_vocab(path, "gpt2", "qwen2", m1, sizeof m1 - 1, NULL) == 0);
    tok_error(path, "merge with newline", "merges[0]");
    static const char m2[] = "\x1b[31mred\x1b[0m";
    CHECK(write_vocab(path, "gpt2", "qwen2", m2, sizeof m2 - 1, NULL) == 0);
    tok_error(path, "merge with escapes", "not \"left right\"");
    CHECK(write_vocab(path, "gp\nt2\x1b", "qwen2", NULL, 0, NULL) == 0);
    tok_error(path, "model with newline", "tokenizer.ggml.model");
    CHECK(write_vocab(path, "gpt2", "qwen2\r\n", NULL, 0, NULL) == 0);
    tok_error(path, "pre with CRLF", "tokenizer.ggml.pre");
    /* the whole model load: architecture name with a newline */
    CHECK(write_vocab(path, "gpt2", "qwen2", NULL, 0, "qwen3\nINJECTED") == 0);
    char err[512] = "";
    kz_model *m = kz_model_load(path, NULL, err, sizeof err);
    CHECKF(!m && one_line(err) && strstr(err, "unsupported architecture 'qwen3?INJECTED'"), "arch: '%s'", err);
    printf("architecture with newline: %s\n", err);
    kz_model_free(m);
    unlink(path);
}

int main(void) {
    test_printable();
    test_quoted_file_text();
    KT_END();
}
