/* Unicode support for the tokenizer: UTF-8 decoding, the code point classes the pre-tokenizer
 * regexes use, and NFC normalisation. Tables come from tools/gen_unicode_tables.py (see there
 * for which Unicode version each part follows and why). */
#ifndef KZ_UNICODE_H
#define KZ_UNICODE_H
#include <stddef.h>
#include <stdint.h>

/* per-code-point flags */
enum {
    KZ_U_L = 1,    /* \p{L} */
    KZ_U_N = 2,    /* \p{N} */
    KZ_U_M = 4,    /* \p{M} */
    KZ_U_WS = 8,   /* \s (White_Space) */
    KZ_U_NFC = 16, /* NFC may change text around this code point (ccc != 0 or NFC_QC != Yes) */
};

/* generated tables (src/unicode_tables.c) */
extern const uint16_t kz_u_flags_idx[];
extern const uint8_t kz_u_flags_blk[];
extern const uint16_t kz_u_ccc_idx[];
extern const uint8_t kz_u_ccc_blk[];
extern const uint32_t kz_u_dec_cp[];
extern const uint16_t kz_u_dec_off[];
extern const uint32_t kz_u_dec_pool[];
extern const int kz_u_n_dec;
extern const uint64_t kz_u_comp_key[];
extern const uint32_t kz_u_comp_val[];
extern const int kz_u_n_comp;

static inline unsigned kz_uflags(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return kz_u_flags_blk[(uint32_t)kz_u_flags_idx[cp >> 7] * 128u + (cp & 127u)];
}
static inline unsigned kz_uccc(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return kz_u_ccc_blk[(uint32_t)kz_u_ccc_idx[cp >> 7] * 128u + (cp & 127u)];
}
/* Full canonical decomposition of cp (Hangul included): writes up to 4 code points to out,
 * returns the count (1 and out[0] = cp when cp does not decompose). */
int kz_udecompose(uint32_t cp, uint32_t out[4]);
/* Primary composite of the pair (a, b), or 0 (Hangul included). */
uint32_t kz_ucompose(uint32_t a, uint32_t b);

/* UTF-8. kz_utf8_next decodes one code point at s[0..n) (n >= 1):
 *   returns k > 0 and *cp: a well-formed sequence of k bytes;
 *   returns -k (k >= 1): an ill-formed "maximal subpart" of k bytes (Unicode / Python 'replace'
 *     semantics: one U+FFFD per returned subpart); *cp = KZ_UTF8_TRUNC if those k bytes are a
 *     valid prefix cut short by the end of the input (k == n), else KZ_UTF8_BAD. */
#define KZ_UTF8_BAD 0xFFFFFFFFu
#define KZ_UTF8_TRUNC 0xFFFFFFFEu
int kz_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* encode cp (< 0x110000, not a surrogate) to out; returns 1..4 */
int kz_utf8_put(uint32_t cp, unsigned char *out);

/* Copy of untrusted text s[0..n) for a one-line error message: well-formed printable UTF-8 is
 * kept, control characters and ill-formed bytes become '?', the copy is cut with "..." to fit
 * cap (>= 4) and NUL-terminated. Returns out. */
char *kz_utf8_printable(const char *s, size_t n, char *out, size_t cap);

/* NFC. If s[0..n) is already normalised (the common case, checked quickly) returns 0 and
 * leaves *out NULL. Otherwise returns 1 with *out a malloc'd buffer of *outn bytes (caller
 * frees). Returns -1 on allocation failure. Ill-formed UTF-8 bytes are kept as they are and
 * act as starters that compose with nothing. */
int kz_nfc(const char *s, size_t n, char **out, size_t *outn);
#endif
