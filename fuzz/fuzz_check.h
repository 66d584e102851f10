/* Checks shared by all fuzz targets: FZ_CHECK aborts (libFuzzer records the input) and an error
 * message must be one line a user can read: non-empty, well-formed UTF-8, no control chars. */
#ifndef KZ_FUZZ_CHECK_H
#define KZ_FUZZ_CHECK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s: ", \
    __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } } while (0)

/* 1 if s[0..n) is well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF); written out
 * here independently of src/text/unicode.c */
static inline int fz_utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return 0;
        if (i + k > n) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t j = 2; j < k; j++) if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
        i += k;
    }
    return 1;
}

static inline int fz_msg_ok(const char *err, size_t cap) {
    const char *z = memchr(err, 0, cap);
    if (!z || z == err) return 0;
    size_t n = (size_t)(z - err);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f) return 0;
    /* a message cut by the buffer size may end inside a code point: only the body must be valid */
    while (n > 0 && n + 4 > cap && ((unsigned char)err[n - 1] & 0xC0) == 0x80) n--;
    if (n > 0 && n + 4 > cap && (unsigned char)err[n - 1] >= 0xC0) n--;
    return fz_utf8_valid((const unsigned char *)err, n);
}
#endif
