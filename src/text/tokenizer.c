/* Byte-level BPE tokenizer (GGUF tokenizer.ggml.model = "gpt2") for Qwen2/Qwen3/Qwen3.5.
 *
 * Encode = HF `tokenizers` pipeline for these models, which is the reference the tests compare
 * against id for id:
 *   1. added tokens are cut out of the raw text first (leftmost, then longest match);
 *      USER_DEFINED always, CONTROL only with parse_special (llama.cpp's rule; HF matches both);
 *   2. every stretch between them is NFC-normalised;
 *   3. pre-tokenised by a hand-written matcher equivalent to the variant's Split regex run by
 *      Oniguruma (ordered alternation, greedy with backtracking, see match_piece);
 *   4. each piece's bytes go through rank-ordered BPE (lowest rank first, leftmost on ties).
 * Ill-formed UTF-8 is never dropped: its bytes act as "other" characters and are encoded byte
 * by byte. No state is mutated after construction, so one tokenizer serves many threads.
 * Differences from llama.cpp, all in HF's direction: NFC (llama.cpp does none); the regex
 * classes use Unicode 16.0 and NFC Unicode 9.0 data, as HF does (tools/gen_unicode_tables.py);
 * added tokens are matched leftmost-longest in one scan (llama.cpp cuts them out token by
 * token, longest first; the two only differ for overlapping token texts); duplicate merges
 * keep their first rank (llama.cpp's choice; HF keeps the last). */
#include "text/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/unicode.h"
#include "sys/err.h"

enum { ATTR_CONTROL = 1, ATTR_EOG = 2 };

typedef struct { uint64_t key; uint32_t rank; int32_t merged; } pair_slot;

struct kz_tokenizer {
    int n;
    int variant;
    char *text;        /* all token texts, concatenated (GGUF form) */
    uint32_t *toff;    /* n + 1 offsets into text */
    char *dec;         /* decoded bytes of every token */
    uint32_t *doff;    /* n + 1 offsets into dec */
    uint8_t *type;     /* KZ_TOKTYPE_* */
    uint8_t *attr;     /* ATTR_* */
    int32_t *tmap;     /* text -> id, open addressing, -1 = empty */
    uint32_t tmask;
    pair_slot *pmap;   /* (left id, right id) -> rank, merged id; key UINT64_MAX = empty */
    uint32_t pmask;
    int32_t byte_tok[256];
    /* special tokens (CONTROL / USER_DEFINED), bucketed by first byte, longest first */
    int32_t *sp;       /* ids */
    uint32_t sp_start[257];
    uint8_t sp_first[256]; /* bit0: some USER_DEFINED starts with this byte, bit1: some CONTROL */
    int32_t eos;
};

/* ---- helpers ---- */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 16777619u; }
    return h;
}
static uint32_t hash_pair(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return (uint32_t)k;
}

static const char *tok_text(const kz_tokenizer *t, int32_t id, size_t *len) {
    *len = t->toff[id + 1] - t->toff[id];
    return t->text + t->toff[id];
}

static int32_t find_text(const kz_tokenizer *t, const char *s, size_t n) {
    uint32_t h = hash_bytes(s, n) & t->tmask;
    for (;;) {
        int32_t id = t->tmap[h];
        if (id < 0) return -1;
        size_t l;
        const char *x = tok_text(t, id, &l);
        if (l == n && memcmp(x, s, n) == 0) return id;
        h = (h + 1) & t->tmask;
    }
}

static const pair_slot *find_pair(const kz_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t h = hash_pair(key) & t->pmask;
    for (;;) {
        const pair_slot *p = &t->pmap[h];
        if (p->key == UINT64_MAX) return NULL;
        if (p->key == key) return p;
        h = (h + 1) & t->pmask;
    }
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static void byte_map(uint32_t b2u[256]) {
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = keep ? (uint32_t)b : (uint32_t)(256 + k++);
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- construction ---- */

static int is_eog_text(const char *s, size_t n) {
    static const char *const names[] = {"<|im_end|>", "<|endoftext|>", "<|fim_pad|>",
                                        "<|repo_name|>", "<|file_sep|>", "<|eot_id|>", NULL};
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return 1;
    return 0;
}

void kz_tokenizer_free(kz_tokenizer *t) {
    if (!t) return;
    free(t->text); free(t->toff); free(t->dec); free(t->doff); free(t->type); free(t->attr);
    free(t->tmap); free(t->pmap); free(t->sp);
    free(t);
}

/* sort key for special tokens: first byte ascending, then length descending, then id */
typedef struct { int32_t id; uint32_t len; unsigned char first; } sp_ent;
static int sp_cmp(const void *a, const void *b) {
    const sp_ent *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

kz_tokenizer *kz_tokenizer_new(const kz_tok_spec *sp, char *err, size_t errlen) {
    if (!sp || !sp->tokens || sp->n_tokens <= 0) { kz_seterr(err, errlen, "tokenizer: empty token list"); return NULL; }
    if (sp->n_tokens > (1 << 26)) { kz_seterr(err, errlen, "tokenizer: %d tokens is too many", sp->n_tokens); return NULL; }
    if (sp->n_merges < 0 || (sp->n_merges > 0 && !sp->merges)) { kz_seterr(err, errlen, "tokenizer: bad merge list"); return NULL; }
    int variant;
    if (sp->pre && !strcmp(sp->pre, "qwen2")) variant = KZ_PRE_QWEN2;
    else if (sp->pre && !strcmp(sp->pre, "qwen35")) variant = KZ_PRE_QWEN35;
    else {
        kz_seterr(err, errlen, "tokenizer.ggml.pre '%s' is not supported (supported: qwen2, qwen35)",
                  sp->pre ? sp->pre : "(missing)");
        return NULL;
    }
    int n = sp->n_tokens;
    kz_tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->n = n;
    t->variant = variant;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!sp->tokens[i].ptr && sp->tokens[i].len) { kz_seterr(err, errlen, "tokenizer: token %d has no text", i); goto fail; }
        total += sp->tokens[i].len;
    }
    if (total >= UINT32_MAX / 2) { kz_seterr(err, errlen, "tokenizer: token texts too large"); goto fail; }
    t->text = malloc(total + 1);
    t->toff = malloc(((size_t)n + 1) * sizeof *t->toff);
    t->type = malloc((size_t)n);
    t->attr = calloc((size_t)n, 1);
    if (!t->text || !t->toff || !t->type || !t->attr) goto oom;
    uint32_t off = 0;
    for (int i = 0; i < n; i++) {
        const kz_str *s = &sp->tokens[i];
        /* validate UTF-8: GGUF strings are UTF-8 and the byte map needs code points */
        for (uint64_t k = 0; k < s->len;) {
            uint32_t cp;
            int r = kz_utf8_next((const unsigned char *)s->ptr + k, s->len - k, &cp);
            if (r < 0) { kz_seterr(err, errlen, "tokenizer.ggml.tokens[%d] is not valid UTF-8", i); goto fail; }
            k += (uint64_t)r;
        }
        t->toff[i] = off;
        if (s->len) memcpy(t->text + off, s->ptr, s->len);
        off += (uint32_t)s->len;
        int ty = sp->types ? sp->types[i] : KZ_TOKTYPE_NORMAL;
        if (ty < KZ_TOKTYPE_NORMAL || ty > KZ_TOKTYPE_BYTE) {
            kz_seterr(err, errlen, "tokenizer.ggml.token_type[%d] = %d is not a known type (1..6)", i, ty);
            goto fail;
        }
        t->type[i] = (uint8_t)ty;
        if (ty == KZ_TOKTYPE_CONTROL) t->attr[i] |= ATTR_CONTROL;
    }
    t->toff[n] = off;
    t->text[off] = 0;

    /* text -> id (first id wins on duplicates) */
    t->tmask = pow2_at_least((uint64_t)n + (uint64_t)n / 2) - 1; /* load <= 2/3 */
    t->tmap = malloc(((size_t)t->tmask + 1) * sizeof *t->tmap);
    if (!t->tmap) goto oom;
    memset(t->tmap, 0xff, ((size_t)t->tmask + 1) * sizeof *t->tmap);
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *x = tok_text(t, i, &l);
        if (find_text(t, x, l) >= 0) continue;
        uint32_t h = hash_bytes(x, l) & t->tmask;
        while (t->tmap[h] >= 0) h = (h + 1) & t->tmask;
        t->tmap[h] = i;
    }

    /* decoded bytes: NORMAL tokens through the inverse byte map, others literally */
    uint32_t b2u[256];
    int16_t u2b[324];
    byte_map(b2u);
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (int16_t)b;
    t->dec = malloc(total + 1);
    t->doff = malloc(((size_t)n + 1) * sizeof *t->doff);
    if (!t->dec || !t->doff) goto oom;
    uint32_t doff = 0;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *x = tok_text(t, i, &l);
        t->doff[i] = doff;
        if (t->type[i] == KZ_TOKTYPE_UNUSED) continue; /* padding ids ("[PAD<i>]") are no text */
        if (t->type[i] != KZ_TOKTYPE_NORMAL) {
            memcpy(t->dec + doff, x, l);
            doff += (uint32_t)l;
            continue;
        }
        for (size_t k = 0; k < l;) {
            uint32_t cp;
            int r = kz_utf8_next((const unsigned char *)x + k, l - k, &cp);
            if (cp < 324 && u2b[cp] >= 0) t->dec[doff++] = (char)u2b[cp];
            else { memcpy(t->dec + doff, x + k, (size_t)r); doff += (uint32_t)r; } /* not byte-level: literal */
            k += (size_t)r;
        }
    }
    t->doff[n] = doff;

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        int k = kz_utf8_put(b2u[b], u);
        int32_t id = find_text(t, (const char *)u, (size_t)k);
        if (id < 0) {
            kz_seterr(err, errlen, "tokenizer: vocab has no token for byte 0x%02X (expected text \"%.*s\"); "
                      "not a byte-level BPE vocab", b, k, (const char *)u);
            goto fail;
        }
        t->byte_tok[b] = id;
    }

    /* merges */
    t->pmask = pow2_at_least((uint64_t)(sp->n_merges > 0 ? sp->n_merges : 1) * 3 / 2) - 1;
    t->pmap = malloc(((size_t)t->pmask + 1) * sizeof *t->pmap);
    if (!t->pmap) goto oom;
    for (uint32_t i = 0; i <= t->pmask; i++) t->pmap[i].key = UINT64_MAX;
    char *cat = NULL;
    size_t catcap = 0;
    for (int m = 0; m < sp->n_merges; m++) {
        const kz_str *s = &sp->merges[m];
        const char *sep = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
        if (!sep) {
            free(cat);
            char q[72];
            kz_seterr(err, errlen, "tokenizer.ggml.merges[%d] \"%s\" is not \"left right\"", m,
                      kz_utf8_printable(s->ptr ? s->ptr : "", s->ptr ? s->len : 0, q, sizeof q));
            goto fail;
        }
        size_t la = (size_t)(sep - s->ptr), lb = s->len - la - 1;
        int32_t a = find_text(t, s->ptr, la), b = find_text(t, sep + 1, lb);
        if (la + lb > catcap) {
            char *c2 = realloc(cat, la + lb);
            if (!c2) { free(cat); goto oom; }
            cat = c2; catcap = la + lb;
        }
        memcpy(cat, s->ptr, la);
        memcpy(cat + la, sep + 1, lb);
        int32_t ab = a >= 0 && b >= 0 ? find_text(t, cat, la + lb) : -1;
        if (ab < 0) {
            free(cat);
            char q[72];
            kz_seterr(err, errlen, "tokenizer.ggml.merges[%d] \"%s\" refers to a token not in the vocab", m,
                      kz_utf8_printable(s->ptr, s->len, q, sizeof q));
            goto fail;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t h = hash_pair(key) & t->pmask;
        while (t->pmap[h].key != UINT64_MAX && t->pmap[h].key != key) h = (h + 1) & t->pmask;
        if (t->pmap[h].key == key) continue; /* duplicate pair: the first (lowest) rank stays */
        t->pmap[h].key = key;
        t->pmap[h].rank = (uint32_t)m;
        t->pmap[h].merged = ab;
    }
    free(cat);

    /* special ids */
    const int32_t ids[5] = {sp->eos, sp->bos, sp->pad, sp->eot, sp->eom};
    static const char *const idn[5] = {"eos", "bos", "padding", "eot", "eom"};
    for (int k = 0; k < 5; k++)
        if (ids[k] < -1 || ids[k] >= n) {
            kz_seterr(err, errlen, "tokenizer.ggml.%s_token_id = %d is outside the vocab (0..%d)", idn[k], ids[k], n - 1);
            goto fail;
        }
    t->eos = sp->eos;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *x = tok_text(t, i, &l);
        if (t->type[i] != KZ_TOKTYPE_NORMAL && is_eog_text(x, l)) t->attr[i] |= ATTR_EOG;
    }
    if (sp->eos >= 0) t->attr[sp->eos] |= ATTR_EOG;
    if (sp->eot >= 0) t->attr[sp->eot] |= ATTR_EOG;
    if (sp->eom >= 0) t->attr[sp->eom] |= ATTR_EOG;

    /* special-token matcher */
    int nsp = 0;
    for (int i = 0; i < n; i++)
        if ((t->type[i] == KZ_TOKTYPE_CONTROL || t->type[i] == KZ_TOKTYPE_USER_DEFINED) && t->toff[i + 1] > t->toff[i]) nsp++;
    sp_ent *ents = malloc((size_t)(nsp ? nsp : 1) * sizeof *ents);
    t->sp = malloc((size_t)(nsp ? nsp : 1) * sizeof *t->sp);
    if (!ents || !t->sp) { free(ents); goto oom; }
    int k = 0;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *x = tok_text(t, i, &l);
        if ((t->type[i] == KZ_TOKTYPE_CONTROL || t->type[i] == KZ_TOKTYPE_USER_DEFINED) && l) {
            ents[k].id = i; ents[k].len = (uint32_t)l; ents[k].first = (unsigned char)x[0];
            t->sp_first[(unsigned char)x[0]] |= t->type[i] == KZ_TOKTYPE_CONTROL ? 2 : 1;
            k++;
        }
    }
    qsort(ents, (size_t)nsp, sizeof *ents, sp_cmp);
    int e = 0;
    for (int b = 0; b < 256; b++) {
        t->sp_start[b] = (uint32_t)e;
        while (e < nsp && ents[e].first == b) { t->sp[e] = ents[e].id; e++; }
    }
    t->sp_start[256] = (uint32_t)nsp;
    free(ents);
    return t;

oom:
    kz_seterr(err, errlen, "tokenizer: out of memory");
fail:
    kz_tokenizer_free(t);
    return NULL;
}

static int get_id(const kz_gguf *g, const char *key, int32_t *out, char *err, size_t errlen) {
    int64_t v;
    int r = kz_gguf_get_i64(g, key, &v);
    *out = -1;
    if (r == -1) return 0;
    if (r != 0 || v < -1 || v > INT32_MAX) { kz_seterr(err, errlen, "%s has a bad type or value", key); return -1; }
    *out = (int32_t)v;
    return 0;
}

kz_tokenizer *kz_tokenizer_from_gguf(const kz_gguf *g, char *err, size_t errlen) {
    kz_str model, pre;
    int r = kz_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (r != 0) { kz_seterr(err, errlen, "tokenizer.ggml.model is %s", r == -1 ? "missing" : "not a string"); return NULL; }
    if (model.len != 4 || memcmp(model.ptr, "gpt2", 4) != 0) {
        char q[48];
        kz_seterr(err, errlen, "tokenizer.ggml.model '%s' is not supported (only 'gpt2' byte-level BPE)",
                  kz_utf8_printable(model.ptr, model.len, q, sizeof q));
        return NULL;
    }
    r = kz_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (r != 0) { kz_seterr(err, errlen, "tokenizer.ggml.pre is %s (expected qwen2 or qwen35)", r == -1 ? "missing" : "not a string"); return NULL; }
    char pre_s[64];
    kz_utf8_printable(pre.ptr, pre.len, pre_s, sizeof pre_s); /* compared exactly below; quoted in errors */
    const kz_gguf_kv *tk = kz_gguf_get_kv(g, "tokenizer.ggml.tokens");
    if (!tk) { kz_seterr(err, errlen, "tokenizer.ggml.tokens is missing"); return NULL; }
    if (tk->type != KZ_GGUF_ARR || tk->arr_type != KZ_GGUF_STR || !tk->strs || tk->n == 0 || tk->n > (1u << 26)) {
        kz_seterr(err, errlen, "tokenizer.ggml.tokens is not a non-empty string array");
        return NULL;
    }
    int n = (int)tk->n;
    int32_t *types = NULL;
    const kz_gguf_kv *tt = kz_gguf_get_kv(g, "tokenizer.ggml.token_type");
    if (tt) {
        if (tt->type != KZ_GGUF_ARR || tt->n != tk->n) {
            kz_seterr(err, errlen, "tokenizer.ggml.token_type must be an integer array of %d entries", n);
            return NULL;
        }
        types = malloc((size_t)n * sizeof *types);
        if (!types) { kz_seterr(err, errlen, "tokenizer: out of memory"); return NULL; }
        for (int i = 0; i < n; i++) {
            int64_t v;
            if (kz_gguf_arr_i64(tt, (uint64_t)i, &v) != 0 || v < INT32_MIN || v > INT32_MAX) {
                free(types);
                kz_seterr(err, errlen, "tokenizer.ggml.token_type[%d] is not an integer", i);
                return NULL;
            }
            types[i] = (int32_t)v;
        }
    }
    const kz_gguf_kv *mk = kz_gguf_get_kv(g, "tokenizer.ggml.merges");
    if (mk && (mk->type != KZ_GGUF_ARR || (mk->n > 0 && (mk->arr_type != KZ_GGUF_STR || !mk->strs)) || mk->n > INT32_MAX)) {
        free(types);
        kz_seterr(err, errlen, "tokenizer.ggml.merges is not a string array");
        return NULL;
    }
    kz_tok_spec sp = {0};
    sp.pre = pre_s;
    sp.n_tokens = n;
    sp.tokens = tk->strs;
    sp.types = types;
    sp.n_merges = mk ? (int)mk->n : 0;
    sp.merges = mk ? mk->strs : NULL;
    if (get_id(g, "tokenizer.ggml.eos_token_id", &sp.eos, err, errlen) ||
        get_id(g, "tokenizer.ggml.bos_token_id", &sp.bos, err, errlen) ||
        get_id(g, "tokenizer.ggml.padding_token_id", &sp.pad, err, errlen) ||
        get_id(g, "tokenizer.ggml.eot_token_id", &sp.eot, err, errlen) ||
        get_id(g, "tokenizer.ggml.eom_token_id", &sp.eom, err, errlen)) {
        free(types);
        return NULL;
    }
    kz_tokenizer *t = kz_tokenizer_new(&sp, err, errlen);
    free(types);
    return t;
}

/* ---- queries ---- */

int kz_tok_n_vocab(const kz_tokenizer *t) { return t ? t->n : 0; }
int32_t kz_tok_eos(const kz_tokenizer *t) { return t ? t->eos : -1; }
int kz_tok_variant(const kz_tokenizer *t) { return t ? t->variant : -1; }
int kz_tok_is_eog(const kz_tokenizer *t, int32_t id) { return t && id >= 0 && id < t->n && (t->attr[id] & ATTR_EOG); }
int kz_tok_is_control(const kz_tokenizer *t, int32_t id) { return t && id >= 0 && id < t->n && (t->attr[id] & ATTR_CONTROL); }

int32_t kz_tok_find(const kz_tokenizer *t, const char *s) {
    if (!t || !s) return -1;
    return find_text(t, s, strlen(s));
}

int kz_tok_bytes(const kz_tokenizer *t, int32_t id, char *buf, size_t len) {
    if (!t || id < 0 || id >= t->n) return -1;
    size_t l = t->doff[id + 1] - t->doff[id];
    if (buf && len) memcpy(buf, t->dec + t->doff[id], l < len ? l : len);
    return (int)l;
}

/* ---- pre-tokenizer ---- */

enum { C_L = 1, C_N = 2, C_M = 4, C_WS = 8, C_CRLF = 16, C_SP = 32 };

/* class of the code point at s[i]; *next = index after it. Ill-formed bytes are single
 * "other" characters (class 0). */
static inline unsigned cls_at(const unsigned char *s, size_t n, size_t i, size_t *next) {
    unsigned b = s[i];
    if (b < 0x80) {
        *next = i + 1;
        if ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') return C_L;
        if (b >= '0' && b <= '9') return C_N;
        if (b == ' ') return C_WS | C_SP;
        if (b == '\r' || b == '\n') return C_WS | C_CRLF;
        if (b >= 9 && b <= 13) return C_WS;
        return 0;
    }
    uint32_t cp;
    int k = kz_utf8_next(s + i, n - i, &cp);
    if (k < 0) { *next = i + 1; return 0; }
    *next = i + (size_t)k;
    return kz_uflags(cp) & (C_L | C_N | C_M | C_WS);
}

static size_t run_of(const unsigned char *s, size_t n, size_t p, unsigned mask) {
    while (p < n) {
        size_t q;
        if (!(cls_at(s, n, p, &q) & mask)) break;
        p = q;
    }
    return p;
}
static size_t run_not(const unsigned char *s, size_t n, size_t p, unsigned mask) {
    while (p < n) {
        size_t q;
        if (cls_at(s, n, p, &q) & mask) break;
        p = q;
    }
    return p;
}

static inline unsigned lc(unsigned b) { return b >= 'A' && b <= 'Z' ? b + 32 : b; }

/* One regex match starting at i (every character is matched by some alternative, so the
 * leftmost match always starts at i). qwen2:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * qwen35 has [\p{L}\p{M}]+ for the letter run and [^\s\p{L}\p{M}\p{N}] for the symbol run. */
static size_t match_piece(const unsigned char *s, size_t n, size_t i, int q35) {
    const unsigned LM = q35 ? (C_L | C_M) : C_L;
    const unsigned PX = q35 ? (C_WS | C_L | C_N | C_M) : (C_WS | C_L | C_N);
    size_t j;
    unsigned c0 = cls_at(s, n, i, &j);

    /* 1. contractions; Oniguruma's case folding also lets U+017F (long s) match 's */
    if (s[i] == '\'' && j < n) {
        unsigned a = lc(s[j]);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return j + 1;
        if (j + 1 < n) {
            unsigned b = lc(s[j + 1]);
            if (s[j] == 0xC5 && s[j + 1] == 0xBF) return j + 2;
            if ((a == 'r' || a == 'v') && b == 'e') return j + 2;
            if (a == 'l' && b == 'l') return j + 2;
        }
    }
    /* 2. [^\r\n\p{L}\p{N}]?LM+ : the optional char is tried first, then dropped */
    if (!(c0 & (C_CRLF | C_L | C_N)) && j < n) {
        size_t k;
        if (cls_at(s, n, j, &k) & LM) return run_of(s, n, k, LM);
    }
    if (c0 & LM) return run_of(s, n, j, LM);
    /* 3. one digit */
    if (c0 & C_N) return j;
    /* 4. ' ?' then a run of "other" characters, then [\r\n]* */
    {
        size_t st = j;
        unsigned sc = c0;
        if ((c0 & C_SP) && j < n) {
            size_t k;
            unsigned c1 = cls_at(s, n, j, &k);
            if (!(c1 & PX)) { sc = c1; st = k; }
        }
        if (!(sc & PX)) {
            size_t e = run_not(s, n, st, PX);
            while (e < n && (s[e] == '\r' || s[e] == '\n')) e++;
            return e;
        }
    }
    /* 5-7. whitespace run W = s[i..p) */
    if (c0 & C_WS) {
        size_t p = j, last_start = i, nl_end = (c0 & C_CRLF) ? j : 0;
        while (p < n) {
            size_t q;
            unsigned c = cls_at(s, n, p, &q);
            if (!(c & C_WS)) break;
            if (c & C_CRLF) nl_end = q;
            last_start = p;
            p = q;
        }
        if (nl_end) return nl_end;        /* \s*[\r\n]+ : up to the last line break of W */
        if (p == n) return p;             /* \s+(?!\S) at the end of the text */
        if (last_start > i) return last_start; /* \s+(?!\S) : W minus its last char */
        return p;                         /* \s+ */
    }
    return j; /* not reachable: every class is covered above */
}

size_t kz_pretokenize(int variant, const char *text, size_t len, size_t *ends, size_t max) {
    const unsigned char *s = (const unsigned char *)text;
    size_t np = 0;
    for (size_t i = 0; i < len;) {
        size_t e = match_piece(s, len, i, variant == KZ_PRE_QWEN35);
        if (np < max) ends[np] = e;
        np++;
        i = e;
    }
    return np;
}

/* ---- BPE ---- */

typedef struct { uint32_t rank; uint32_t left; int32_t lid, rid; } heap_ent;

/* Per-call memo of piece -> ids (HF keeps a similar word cache): text repeats its words, and
 * a repeated piece then costs one hash lookup instead of a BPE run. Only for long inputs. */
enum { CACHE_SLOTS = 1 << 16, CACHE_MAX_ENT = CACHE_SLOTS / 2, CACHE_MAX_KEY = 64 };
typedef struct { uint32_t koff, ioff; uint16_t klen, nids; } cache_ent;

typedef struct {
    int32_t *id;
    int32_t *prev, *next;
    heap_ent *heap;
    size_t cap, hcap;
    int oom;
    /* cache (cslot == NULL: off) */
    uint32_t *cslot;       /* entry index + 1, 0 = empty */
    cache_ent *cent;
    uint32_t cn;
    unsigned char *ckey;
    size_t cklen, ckcap;
    int32_t *cids;
    size_t cilen, cicap;
} bpe_ws;

typedef struct {
    int32_t *out;
    int max;
    int64_t count;
} emitter;

static inline void emit(emitter *e, int32_t id) {
    if (e->count < e->max) e->out[e->count] = id;
    e->count++;
}

static inline int heap_less(const heap_ent *a, const heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_ws *w, size_t *hn, heap_ent x) {
    if (*hn == w->hcap) {
        size_t nc = w->hcap ? w->hcap * 2 : 64;
        heap_ent *h = realloc(w->heap, nc * sizeof *h);
        if (!h) { w->oom = 1; return; }
        w->heap = h; w->hcap = nc;
    }
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&x, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = x;
}

static heap_ent heap_pop(bpe_ws *w, size_t *hn) {
    heap_ent top = w->heap[0], x = w->heap[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!heap_less(&w->heap[c], &x)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = x;
    return top;
}

static void try_pair(const kz_tokenizer *t, bpe_ws *w, size_t *hn, int32_t l) {
    int32_t r = w->next[l];
    if (r < 0) return;
    const pair_slot *p = find_pair(t, w->id[l], w->id[r]);
    if (p) heap_push(w, hn, (heap_ent){p->rank, (uint32_t)l, w->id[l], w->id[r]});
}

/* BPE of s[0..n) (n >= 2); result is the chain w->id[0], w->id[next[0]], ... */
static void bpe_run(const kz_tokenizer *t, const unsigned char *s, size_t n, bpe_ws *w) {
    if (n > w->cap) {
        size_t nc = n < 64 ? 64 : n;
        int32_t *a = realloc(w->id, nc * sizeof *a), *b, *c;
        if (!a) { w->oom = 1; return; }
        w->id = a;
        b = realloc(w->prev, nc * sizeof *b);
        if (!b) { w->oom = 1; return; }
        w->prev = b;
        c = realloc(w->next, nc * sizeof *c);
        if (!c) { w->oom = 1; return; }
        w->next = c;
        w->cap = nc;
    }
    for (size_t i = 0; i < n; i++) {
        w->id[i] = t->byte_tok[s[i]];
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, w, &hn, (int32_t)i);
    while (hn > 0 && !w->oom) {
        heap_ent h = heap_pop(w, &hn);
        int32_t l = (int32_t)h.left, r = w->next[l];
        /* stale entry: either side changed since it was pushed (ids only grow, so equal ids
         * mean the same pair) */
        if (w->id[l] != h.lid || r < 0 || w->id[r] != h.rid) continue;
        const pair_slot *p = find_pair(t, h.lid, h.rid);
        w->id[l] = p->merged;
        w->id[r] = -1; /* dead */
        int32_t rn = w->next[r];
        w->next[l] = rn;
        if (rn >= 0) w->prev[rn] = l;
        if (w->prev[l] >= 0) try_pair(t, w, &hn, w->prev[l]);
        try_pair(t, w, &hn, l);
    }
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static void bpe_piece(const kz_tokenizer *t, const unsigned char *s, size_t n, bpe_ws *w, emitter *e) {
    if (n == 1) { emit(e, t->byte_tok[s[0]]); return; }
    uint32_t h = 0;
    int cacheable = w->cslot && n <= CACHE_MAX_KEY;
    if (cacheable) {
        h = hash_bytes((const char *)s, n) & (CACHE_SLOTS - 1);
        for (uint32_t k; (k = w->cslot[h]) != 0; h = (h + 1) & (CACHE_SLOTS - 1)) {
            const cache_ent *c = &w->cent[k - 1];
            if (c->klen == n && !memcmp(w->ckey + c->koff, s, n)) {
                for (unsigned i = 0; i < c->nids; i++) emit(e, w->cids[c->ioff + i]);
                return;
            }
        }
    }
    bpe_run(t, s, n, w);
    if (w->oom) return;
    if (cacheable && w->cn < CACHE_MAX_ENT &&
        !grow((void **)&w->ckey, &w->ckcap, w->cklen + n, 1) &&
        !grow((void **)&w->cids, &w->cicap, w->cilen + n, sizeof *w->cids)) {
        cache_ent *c = &w->cent[w->cn];
        c->koff = (uint32_t)w->cklen;
        c->ioff = (uint32_t)w->cilen;
        c->klen = (uint16_t)n;
        memcpy(w->ckey + w->cklen, s, n);
        w->cklen += n;
        unsigned k = 0;
        for (int32_t i = 0; i >= 0; i = w->next[i]) w->cids[w->cilen + k++] = w->id[i];
        c->nids = (uint16_t)k;
        w->cilen += k;
        w->cslot[h] = ++w->cn;
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) emit(e, w->id[i]);
}

/* ---- encode ---- */

static void encode_text(const kz_tokenizer *t, const char *text, size_t len, bpe_ws *w, emitter *e) {
    char *norm = NULL;
    size_t nlen = 0;
    int r = kz_nfc(text, len, &norm, &nlen);
    if (r < 0) { w->oom = 1; return; }
    const unsigned char *s = (const unsigned char *)(r ? norm : text);
    size_t n = r ? nlen : len;
    int q35 = t->variant == KZ_PRE_QWEN35;
    for (size_t i = 0; i < n && !w->oom;) {
        size_t end = match_piece(s, n, i, q35);
        bpe_piece(t, s + i, end - i, w, e);
        i = end;
    }
    free(norm);
}

int kz_tok_encode(const kz_tokenizer *t, const char *text, size_t len, int parse_special,
                  int32_t *out, int max) {
    if (!t || (!text && len) || max < 0 || (max > 0 && !out)) return -1;
    bpe_ws w = {0};
    emitter e = {out, max, 0};
    if (len >= 16384) { /* the cache pays for itself only on long texts; without it we still work */
        w.cslot = calloc(CACHE_SLOTS, sizeof *w.cslot);
        w.cent = malloc(CACHE_MAX_ENT * sizeof *w.cent);
        if (!w.cslot || !w.cent) { free(w.cslot); free(w.cent); w.cslot = NULL; w.cent = NULL; }
    }
    const unsigned char *s = (const unsigned char *)text;
    unsigned want = parse_special ? 3u : 1u;
    size_t seg = 0;
    for (size_t i = 0; i < len && !w.oom;) {
        unsigned b = s[i];
        if (!(t->sp_first[b] & want)) { i++; continue; }
        /* longest special token starting here (bucket is sorted longest first) */
        int32_t hit = -1;
        size_t hl = 0;
        for (uint32_t k = t->sp_start[b]; k < t->sp_start[b + 1]; k++) {
            int32_t id = t->sp[k];
            if (t->type[id] == KZ_TOKTYPE_CONTROL && !parse_special) continue;
            size_t l;
            const char *x = tok_text(t, id, &l);
            if (l <= len - i && memcmp(x, s + i, l) == 0) { hit = id; hl = l; break; }
        }
        if (hit < 0) { i++; continue; }
        if (i > seg) encode_text(t, text + seg, i - seg, &w, &e);
        emit(&e, hit);
        i += hl;
        seg = i;
    }
    if (seg < len && !w.oom) encode_text(t, text + seg, len - seg, &w, &e);
    free(w.id); free(w.prev); free(w.next); free(w.heap);
    free(w.cslot); free(w.cent); free(w.ckey); free(w.cids);
    if (w.oom || e.count > INT_MAX) return -1;
    return (int)e.count;
}

/* ---- streaming UTF-8 ---- */

static size_t put_fffd(char *out, size_t o, size_t cap) {
    static const char r[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    if (o + 3 > cap) return o;
    memcpy(out + o, r, 3);
    return o + 3;
}

size_t kz_utf8_feed(kz_utf8_stream *st, const char *in, size_t n, char *out, size_t cap) {
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0, i = 0;
    if (st->n < 0 || st->n > 3) st->n = 0;
    if (st->n > 0 && n > 0) {
        /* finish the pending sequence with the first new bytes */
        unsigned char win[8];
        size_t pn = (size_t)st->n, take = n < 4 - pn ? n : 4 - pn;
        memcpy(win, st->buf, pn);
        memcpy(win + pn, s, take);
        uint32_t cp;
        int k = kz_utf8_next(win, pn + take, &cp);
        if (k > 0) {
            if (o + (size_t)k <= cap) { memcpy(out + o, win, (size_t)k); o += (size_t)k; }
            i = (size_t)k - pn;
            st->n = 0;
        } else if (cp == KZ_UTF8_TRUNC) {
            memcpy(st->buf + pn, s, take); /* still incomplete: all input consumed */
            st->n = (int)(pn + take);
            return o;
        } else {
            /* pending bytes were a valid prefix, so the bad byte is the first new one */
            o = put_fffd(out, o, cap);
            i = (size_t)(-k) > pn ? (size_t)(-k) - pn : 0;
            st->n = 0;
        }
    }
    while (i < n) {
        if (s[i] < 0x80) {
            if (o < cap) out[o++] = (char)s[i];
            i++;
            continue;
        }
        uint32_t cp;
        int k = kz_utf8_next(s + i, n - i, &cp);
        if (k > 0) {
            if (o + (size_t)k <= cap) { memcpy(out + o, s + i, (size_t)k); o += (size_t)k; }
            i += (size_t)k;
        } else if (cp == KZ_UTF8_TRUNC) {
            memcpy(st->buf, s + i, n - i);
            st->n = (int)(n - i);
            break;
        } else {
            o = put_fffd(out, o, cap);
            i += (size_t)(-k);
        }
    }
    return o;
}

size_t kz_utf8_flush(kz_utf8_stream *st, char *out, size_t cap) {
    size_t o = 0;
    if (st->n > 0) o = put_fffd(out, 0, cap);
    st->n = 0;
    return o;
}

size_t kz_tok_mem_bytes(const kz_tokenizer *t) {
    if (!t) return 0;
    const size_t n = (size_t)t->n;
    size_t nsp = 0;
    for (size_t i = 0; i < n; i++)
        if ((t->type[i] == KZ_TOKTYPE_CONTROL || t->type[i] == KZ_TOKTYPE_USER_DEFINED) && t->toff[i + 1] > t->toff[i]) nsp++;
    return sizeof *t + (size_t)t->toff[n] + 1 + (size_t)t->doff[n] + 1 + 2 * (n + 1) * sizeof(uint32_t) + 2 * n +
           ((size_t)t->tmask + 1) * sizeof *t->tmap + ((size_t)t->pmask + 1) * sizeof *t->pmap + nsp * sizeof *t->sp;
}
