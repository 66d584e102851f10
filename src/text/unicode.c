/* UTF-8 decoding, canonical (de)composition and NFC over the generated tables. */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ---- */

int kz_utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned b0 = s[0];
    if (b0 < 0x80) { *cp = b0; return 1; }
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte (Unicode table 3-7) */
    uint32_t c;
    if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; c = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2; c = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3; c = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else { *cp = KZ_UTF8_BAD; return -1; }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) { *cp = KZ_UTF8_TRUNC; return -k; }
        unsigned b = s[k];
        if (b < lo || b > hi) { *cp = KZ_UTF8_BAD; return -k; }
        lo = 0x80; hi = 0xBF;
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    return need + 1;
}

int kz_utf8_put(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- canonical decomposition / composition ---- */

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT,
       S_COUNT = L_COUNT * N_COUNT };

int kz_udecompose(uint32_t cp, uint32_t out[4]) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t si = cp - S_BASE;
        out[0] = L_BASE + si / N_COUNT;
        out[1] = V_BASE + (si % N_COUNT) / T_COUNT;
        if (si % T_COUNT) { out[2] = T_BASE + si % T_COUNT; return 3; }
        return 2;
    }
    int lo = 0, hi = kz_u_n_dec - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (kz_u_dec_cp[mid] == cp) {
            unsigned off = kz_u_dec_off[mid] & 0x1FFF, len = kz_u_dec_off[mid] >> 13;
            for (unsigned i = 0; i < len; i++) out[i] = kz_u_dec_pool[off + i];
            return (int)len;
        }
        if (kz_u_dec_cp[mid] < cp) lo = mid + 1; else hi = mid - 1;
    }
    out[0] = cp;
    return 1;
}

uint32_t kz_ucompose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 &&
        b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    if (a >= 0x110000 || b >= 0x110000) return 0;
    uint64_t key = (uint64_t)a << 21 | b;
    int lo = 0, hi = kz_u_n_comp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (kz_u_comp_key[mid] == key) return kz_u_comp_val[mid];
        if (kz_u_comp_key[mid] < key) lo = mid + 1; else hi = mid - 1;
    }
    return 0;
}

/* ---- NFC ---- */

/* growable byte output */
typedef struct { char *p; size_t n, cap; int oom; } obuf;

static void ob_put(obuf *o, const void *src, size_t n) {
    if (o->oom || n == 0) return;
    if (o->n + n > o->cap) {
        size_t nc = o->cap ? o->cap : 64;
        while (nc < o->n + n) nc *= 2;
        char *q = realloc(o->p, nc);
        if (!q) { o->oom = 1; return; }
        o->p = q; o->cap = nc;
    }
    memcpy(o->p + o->n, src, n);
    o->n += n;
}

/* Pseudo code points >= 0x110000 carry ill-formed bytes through the pipeline unchanged. */
#define RAWBYTE(b) (0x110000u + (b))

static unsigned ccc_of(uint32_t c) { return kz_uccc(c); }

/* stable sort of a run of non-starters by combining class */
static void sort_run(uint32_t *a, size_t n, uint32_t *tmp) {
    if (n < 2) return;
    if (n <= 32 || !tmp) {
        for (size_t i = 1; i < n; i++) {
            uint32_t x = a[i];
            unsigned cx = ccc_of(x);
            size_t j = i;
            while (j > 0 && ccc_of(a[j - 1]) > cx) { a[j] = a[j - 1]; j--; }
            a[j] = x;
        }
        return;
    }
    /* long runs (adversarial input): counting sort on the class, linear and stable */
    size_t cnt[257] = {0};
    for (size_t i = 0; i < n; i++) cnt[ccc_of(a[i]) + 1]++;
    for (int k = 1; k <= 256; k++) cnt[k] += cnt[k - 1];
    for (size_t i = 0; i < n; i++) tmp[cnt[ccc_of(a[i])]++] = a[i];
    memcpy(a, tmp, n * sizeof *a);
}

/* Normalise one segment s[0..n) that starts at a boundary; appends to o.
 * buf/tmp are scratch arrays the caller grows. */
static void nfc_segment(const unsigned char *s, size_t n, obuf *o, uint32_t **buf, uint32_t **tmp,
                        size_t *bcap) {
    if (o->oom) return;
    if (4 * n + 4 > *bcap) {
        size_t nc = 4 * n + 4;
        uint32_t *b = realloc(*buf, nc * sizeof *b), *t;
        if (!b) { o->oom = 1; return; }
        *buf = b;
        t = realloc(*tmp, nc * sizeof *t);
        if (!t) { o->oom = 1; return; }
        *tmp = t;
        *bcap = nc;
    }
    uint32_t *b = *buf;
    size_t m = 0;
    /* decompose */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = kz_utf8_next(s + i, n - i, &cp);
        if (k < 0) {
            for (int j = 0; j < -k; j++) b[m++] = RAWBYTE(s[i + j]);
            i += (size_t)-k;
            continue;
        }
        i += (size_t)k;
        uint32_t d[4];
        int nd = kz_udecompose(cp, d);
        for (int j = 0; j < nd; j++) b[m++] = d[j];
    }
    /* canonical ordering of each run of non-starters */
    for (size_t i = 0; i < m;) {
        if (ccc_of(b[i]) == 0) { i++; continue; }
        size_t j = i;
        while (j < m && ccc_of(b[j]) != 0) j++;
        sort_run(b + i, j - i, *tmp);
        i = j;
    }
    /* canonical composition */
    size_t out = 0;
    long starter = -1;
    unsigned last_cc = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = b[i];
        unsigned cc = ccc_of(c);
        if (starter >= 0 && ((size_t)starter == out - 1 || (last_cc != 0 && last_cc < cc))) {
            uint32_t comp = kz_ucompose(b[starter], c);
            if (comp) { b[starter] = comp; continue; }
        }
        if (cc == 0) starter = (long)out;
        last_cc = cc;
        b[out++] = c;
    }
    /* encode */
    unsigned char tmpb[4];
    for (size_t i = 0; i < out; i++) {
        if (b[i] >= 0x110000) { tmpb[0] = (unsigned char)(b[i] - 0x110000); ob_put(o, tmpb, 1); }
        else ob_put(o, tmpb, (size_t)kz_utf8_put(b[i], tmpb));
    }
}

int kz_nfc(const char *str, size_t n, char **out, size_t *outn) {
    const unsigned char *s = (const unsigned char *)str;
    *out = NULL;
    *outn = 0;
    /* Segments: a code point with no KZ_U_NFC flag is a starter that nothing before it can
     * interact with and that is never the second half of a composition, so text is cut before
     * each such code point; only segments holding a flagged code point need work. */
    size_t i = 0, copied = 0, boundary = 0;
    obuf o = {0};
    uint32_t *buf = NULL, *tmp = NULL;
    size_t bcap = 0;
    int changed = 0;
    while (i < n) {
        if (s[i] < 0x80) { boundary = i; i++; continue; }
        uint32_t cp;
        int k = kz_utf8_next(s + i, n - i, &cp);
        if (k < 0) { boundary = i; i += (size_t)-k; continue; }
        if (!(kz_uflags(cp) & KZ_U_NFC)) { boundary = i; i += (size_t)k; continue; }
        /* flagged: the segment runs from the last boundary to the next unflagged code point */
        size_t j = i + (size_t)k;
        while (j < n) {
            if (s[j] < 0x80) break;
            uint32_t c2;
            int k2 = kz_utf8_next(s + j, n - j, &c2);
            if (k2 < 0 || !(kz_uflags(c2) & KZ_U_NFC)) break;
            j += (size_t)k2;
        }
        ob_put(&o, s + copied, boundary - copied);
        size_t seg_out = o.n;
        nfc_segment(s + boundary, j - boundary, &o, &buf, &tmp, &bcap);
        if (o.oom) break;
        if (!changed && (o.n - seg_out != j - boundary || memcmp(o.p + seg_out, s + boundary, j - boundary)))
            changed = 1;
        copied = j;
        i = j;
        boundary = j;
    }
    free(buf);
    free(tmp);
    if (o.oom) { free(o.p); return -1; }
    if (!changed) { free(o.p); return 0; }
    ob_put(&o, s + copied, n - copied);
    if (o.oom) { free(o.p); return -1; }
    *out = o.p;
    *outn = o.n;
    return 1;
}

char *kz_utf8_printable(const char *s, size_t n, char *out, size_t cap) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = kz_utf8_next(u + i, n - i, &cp);
        /* C0, DEL and C1 controls would break the line (or the terminal) */
        int keep = k > 0 && !(cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || cp == 0x2028 || cp == 0x2029);
        size_t w = keep ? (size_t)k : 1;
        if (o + w + 4 > cap) { /* room for "..." and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (keep) memcpy(out + o, u + i, (size_t)k);
        else out[o] = '?';
        o += w;
        i += k > 0 ? (size_t)k : (size_t)-k;
    }
    out[o] = 0;
    return out;
}
