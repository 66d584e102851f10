/* Tokenizer unit tests on a small synthetic byte-level vocab (written as a real GGUF with the
 * gguf writer), plus the pre-tokenizer, NFC and the streaming UTF-8 assembler. The full
 * comparison against HF `tokenizers` is tests/py/test_tokenizer_hf.py. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "kt.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

/* ---------------------------------------------------------------- synthetic vocab */

/* GPT-2 byte -> code point map, written out independently of tokenizer.c */
static uint32_t b2u(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) k++;
    return 256u + (uint32_t)k;
}

typedef struct {
    char *tok[400];
    int32_t type[400];
    int n;
    char *merge[64];
    int nm;
} vocab;

static int add_tok(vocab *v, const char *s, int type) {
    v->tok[v->n] = strdup(s);
    v->type[v->n] = type;
    return v->n++;
}
/* token text of the byte-level encoding of raw bytes s */
static char *enc(const char *s) {
    static char buf[8][64];
    static int k;
    char *o = buf[k++ & 7], *p = o;
    for (; *s; s++) p += kz_utf8_put(b2u((unsigned char)*s), (unsigned char *)p);
    *p = 0;
    return o;
}
static void add_merge(vocab *v, const char *a, const char *b) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s %s", enc(a), enc(b));
    v->merge[v->nm++] = strdup(buf);
}

enum { ID_IM_START = 256, ID_IM_END, ID_THINK, ID_IM_PFX, ID_EOT, ID_PAD };
static int id_he, id_ll, id_hell, id_hello, id_sp_h, id_bc, id_ab, id_aa, id_aaaa;

static void build_vocab(vocab *v, int bc_first) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0) { /* enc() stops at NUL: write U+0100 by hand */
            unsigned char u[4];
            int k = kz_utf8_put(b2u(0), u);
            char t[5];
            memcpy(t, u, (size_t)k);
            t[k] = 0;
            add_tok(v, t, KZ_TOKTYPE_NORMAL);
            continue;
        }
        add_tok(v, enc(s), KZ_TOKTYPE_NORMAL);
    }
    add_tok(v, "<|im_start|>", KZ_TOKTYPE_CONTROL);
    add_tok(v, "<|im_end|>", KZ_TOKTYPE_CONTROL);
    add_tok(v, "<think>", KZ_TOKTYPE_USER_DEFINED);
    add_tok(v, "<|im", KZ_TOKTYPE_USER_DEFINED);
    add_tok(v, "<|endoftext|>", KZ_TOKTYPE_CONTROL);
    add_tok(v, "[PAD261]", KZ_TOKTYPE_UNUSED);
    id_he = add_tok(v, enc("he"), KZ_TOKTYPE_NORMAL);
    id_ll = add_tok(v, enc("ll"), KZ_TOKTYPE_NORMAL);
    id_hell = add_tok(v, enc("hell"), KZ_TOKTYPE_NORMAL);
    id_hello = add_tok(v, enc("hello"), KZ_TOKTYPE_NORMAL);
    id_sp_h = add_tok(v, enc(" h"), KZ_TOKTYPE_NORMAL);
    id_bc = add_tok(v, enc("bc"), KZ_TOKTYPE_NORMAL);
    id_ab = add_tok(v, enc("ab"), KZ_TOKTYPE_NORMAL);
    id_aa = add_tok(v, enc("aa"), KZ_TOKTYPE_NORMAL);
    id_aaaa = add_tok(v, enc("aaaa"), KZ_TOKTYPE_NORMAL);
    add_merge(v, "l", "l");
    add_merge(v, "h", "e");
    add_merge(v, "he", "ll");
    add_merge(v, "hell", "o");
    add_merge(v, " ", "h");
    if (bc_first) { add_merge(v, "b", "c"); add_merge(v, "a", "b"); }
    else { add_merge(v, "a", "b"); add_merge(v, "b", "c"); }
    add_merge(v, "a", "a");
    add_merge(v, "aa", "aa");
}

static void free_vocab(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->nm; i++) free(v->merge[i]);
}

static kz_tokenizer *from_arrays(vocab *v, const char *pre, char *err, size_t errlen) {
    kz_str toks[400], merges[64];
    for (int i = 0; i < v->n; i++) { toks[i].ptr = v->tok[i]; toks[i].len = strlen(v->tok[i]); }
    for (int i = 0; i < v->nm; i++) { merges[i].ptr = v->merge[i]; merges[i].len = strlen(v->merge[i]); }
    kz_tok_spec sp = {pre, v->n, toks, v->type, v->nm, merges, ID_IM_END, -1, ID_EOT, -1, -1};
    return kz_tokenizer_new(&sp, err, errlen);
}

/* write the vocab as a vocab-only GGUF; model/pre strings as given */
static int write_gguf(const char *path, vocab *v, const char *model, const char *pre, int32_t eos) {
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    if (!w) return -1;
    uint64_t lens[400], mlens[64];
    for (int i = 0; i < v->n; i++) lens[i] = strlen(v->tok[i]);
    for (int i = 0; i < v->nm; i++) mlens[i] = strlen(v->merge[i]);
    int r = 0;
    r |= kz_gguf_w_str(w, "general.architecture", "qwen3");
    r |= kz_gguf_w_str(w, "tokenizer.ggml.model", model);
    if (pre) r |= kz_gguf_w_str(w, "tokenizer.ggml.pre", pre);
    r |= kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, lens, (uint64_t)v->n);
    r |= kz_gguf_w_arr(w, "tokenizer.ggml.token_type", KZ_GGUF_I32, v->type, (uint64_t)v->n);
    r |= kz_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge, mlens, (uint64_t)v->nm);
    r |= kz_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    r |= kz_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", ID_EOT);
    r |= kz_gguf_writer_begin(w, path);
    r |= kz_gguf_writer_finish(w);
    kz_gguf_writer_free(w);
    return r ? -1 : 0;
}

static int enc_ids(const kz_tokenizer *t, const char *s, size_t n, int special, int32_t *out, int max) {
    return kz_tok_encode(t, s, n, special, out, max);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int)(sizeof((const int32_t[]){__VA_ARGS__}) / 4)

static int same_ids(const int32_t *got, int ng, const int32_t *want, int nw) {
    if (ng != nw) return 0;
    for (int i = 0; i < nw; i++) if (got[i] != want[i]) return 0;
    return 1;
}
static void print_ids(const char *what, const int32_t *a, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", a[i]);
    fputc('\n', stderr);
}
#define CHECK_ENC(t, text, special, ...) do { \
    int32_t got_[256]; const char *tx_ = (text); \
    int ng_ = enc_ids(t, tx_, strlen(tx_), special, got_, 256); \
    const int32_t *w_ = ((const int32_t[]){__VA_ARGS__}); \
    int nw_ = (int)(sizeof((const int32_t[]){__VA_ARGS__}) / 4); \
    CHECKF(same_ids(got_, ng_, w_, nw_), "encode(\"%s\", special=%d)", tx_, special); \
    if (!same_ids(got_, ng_, w_, nw_)) { print_ids("got", got_, ng_ > 0 ? ng_ : 0); print_ids("want", w_, nw_); } \
} while (0)

static void test_bpe_and_specials(void) {
    vocab v;
    char err[256];
    char path[64];
    snprintf(path, sizeof path, "/tmp/kz_test_tok_%d.gguf", (int)getpid());
    build_vocab(&v, 1);
    CHECK(write_gguf(path, &v, "gpt2", "qwen2", ID_IM_END) == 0);
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) { free_vocab(&v); return; }
    kz_tokenizer *t = kz_tokenizer_from_gguf(g, err, sizeof err);
    CHECKF(t != NULL, "%s", err);
    kz_gguf_close(g); /* the tokenizer owns its copies */
    unlink(path);
    if (!t) { free_vocab(&v); return; }
    CHECK(kz_tok_n_vocab(t) == v.n);
    CHECK(kz_tok_eos(t) == ID_IM_END);

    CHECK_ENC(t, "hello", 0, id_hello);
    CHECK_ENC(t, "hell", 0, id_hell);
    CHECK_ENC(t, "helo", 0, id_he, 'l', 'o');
    CHECK_ENC(t, " hello", 0, ' ', id_hello); /* "l l" < "h e" < ... < " h": " h" comes too late */
    CHECK_ENC(t, " h", 0, id_sp_h);
    CHECK_ENC(t, "abc", 0, 'a', id_bc);    /* "b c" has the lower rank */
    CHECK_ENC(t, "aaa", 0, id_aa, 'a');    /* equal ranks: leftmost first */
    CHECK_ENC(t, "aaaaa", 0, id_aaaa, 'a');
    CHECK_ENC(t, "a1b", 0, 'a', '1', 'b');
    /* specials: CONTROL only with parse_special, USER_DEFINED always, longest match first */
    CHECK_ENC(t, "<|im_start|>hello<|im_end|>", 1, ID_IM_START, id_hello, ID_IM_END);
    CHECK_ENC(t, "<|im_start|>", 0, ID_IM_PFX, '_', 's', 't', 'a', 'r', 't', '|', '>');
    CHECK_ENC(t, "x<think>y", 0, 'x', ID_THINK, 'y');
    CHECK_ENC(t, "<|im<|im_end|>", 1, ID_IM_PFX, ID_IM_END);
    CHECK_ENC(t, "<|endoftext|", 1, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|');
    CHECK_ENC(t, "<|endoftext|><|endoftext|>", 1, ID_EOT, ID_EOT);
    /* byte-level: invalid UTF-8 is encoded byte by byte, nothing dropped */
    CHECK_ENC(t, "\xff\xfe", 0, 0xff, 0xfe);
    CHECK_ENC(t, "a\xc3", 0, 'a', 0xc3);
    {
        int32_t ids[8];
        const char nul[3] = {'a', 0, 'b'};
        int n = kz_tok_encode(t, nul, 3, 0, ids, 8);
        CHECK(n == 3 && ids[0] == 'a' && ids[1] == 0 && ids[2] == 'b');
    }
    /* count beyond max, NULL out with max 0 */
    {
        int32_t one[1] = {-7};
        CHECK(kz_tok_encode(t, "a b c", 5, 0, one, 1) == 5 && one[0] == 'a');
        CHECK(kz_tok_encode(t, "a b c", 5, 0, NULL, 0) == 5);
        CHECK(kz_tok_encode(t, "", 0, 0, NULL, 0) == 0);
        CHECK(kz_tok_encode(t, "x", 1, 0, NULL, 1) == -1);
    }
    /* long input (takes the piece-cache path): must equal the per-unit encodings joined */
    {
        static const char *const units[] = {"hello\n", "abc\n", "aaaaa\n", "\xff\n", "he\n"};
        int32_t uid[5][8];
        int un[5];
        for (int u = 0; u < 5; u++) un[u] = kz_tok_encode(t, units[u], strlen(units[u]), 0, uid[u], 8);
        size_t cap = 40000, len = 0;
        char *big = malloc(cap + 16);
        int32_t *want = malloc((cap + 16) * sizeof *want), *got = malloc((cap + 16) * sizeof *got);
        int nw = 0;
        unsigned long long sd = 42;
        while (len < cap) {
            int u = (int)(kt_rng(&sd) % 5);
            memcpy(big + len, units[u], strlen(units[u]));
            len += strlen(units[u]);
            for (int k = 0; k < un[u]; k++) want[nw++] = uid[u][k];
        }
        int ng = kz_tok_encode(t, big, len, 0, got, (int)cap + 16);
        CHECKF(same_ids(got, ng, want, nw), "long text: %d ids, want %d", ng, nw);
        free(big); free(want); free(got);
    }
    /* decode */
    char buf[64];
    CHECK(kz_tok_bytes(t, id_sp_h, buf, sizeof buf) == 2 && !memcmp(buf, " h", 2));
    CHECK(kz_tok_bytes(t, ID_IM_START, buf, sizeof buf) == 12 && !memcmp(buf, "<|im_start|>", 12));
    CHECK(kz_tok_bytes(t, 0x0A, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(kz_tok_bytes(t, 0xC4, buf, sizeof buf) == 1 && (unsigned char)buf[0] == 0xC4);
    CHECK(kz_tok_bytes(t, ID_IM_START, NULL, 0) == 12);
    CHECK(kz_tok_bytes(t, ID_IM_START, buf, 3) == 12 && !memcmp(buf, "<|i", 3));
    CHECK(kz_tok_bytes(t, ID_PAD, buf, sizeof buf) == 0);
    CHECK(kz_tok_bytes(t, v.n, buf, sizeof buf) == -1 && kz_tok_bytes(t, -1, buf, sizeof buf) == -1);
    CHECK(kz_tok_find(t, "<|im_end|>") == ID_IM_END && kz_tok_find(t, "<nope>") == -1);
    CHECK(kz_tok_find(t, enc("hello")) == id_hello);
    CHECK(kz_tok_is_eog(t, ID_IM_END) && kz_tok_is_eog(t, ID_EOT) && !kz_tok_is_eog(t, ID_IM_START));
    CHECK(!kz_tok_is_eog(t, id_hello) && !kz_tok_is_eog(t, -1) && !kz_tok_is_eog(t, 100000));
    CHECK(kz_tok_is_control(t, ID_IM_START) && !kz_tok_is_control(t, ID_THINK) && !kz_tok_is_control(t, 'a'));

    /* random bytes: never crash, and decode(encode(x)) == NFC(x) */
    unsigned long long seed = 0x1234567ull;
    for (int iter = 0; iter < 300; iter++) {
        char in[200];
        int len = (int)(kt_rng(&seed) % 200);
        for (int i = 0; i < len; i++) {
            unsigned r = (unsigned)kt_rng(&seed);
            in[i] = (r & 3) ? (char)(r >> 8) : "ab <|>hel\n\xcc\x81\xe2\x82"[(r >> 8) % 15];
        }
        int n = kz_tok_encode(t, in, (size_t)len, (int)(iter & 1), NULL, 0);
        CHECK(n >= 0);
        if (n < 0) break;
        int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
        CHECK(kz_tok_encode(t, in, (size_t)len, (int)(iter & 1), ids, n) == n);
        char out[1024];
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            int l = kz_tok_bytes(t, ids[i], out + o, sizeof out - o);
            if (l < 0 || o + (size_t)l > sizeof out) { o = (size_t)-1; break; }
            o += (size_t)l;
        }
        free(ids);
        char *norm;
        size_t nn;
        int r = kz_nfc(in, (size_t)len, &norm, &nn);
        const char *want = r ? norm : in;
        size_t wn = r ? nn : (size_t)len;
        /* specials are matched in the raw text, so compare only texts where no special split
         * could separate NFC-interacting characters: always true here except around '>' */
        CHECKF(o == wn && !memcmp(out, want, wn), "round trip of random bytes #%d", iter);
        free(norm);
    }
    kz_tokenizer_free(t);

    /* the other merge order changes the result: ranks matter */
    free_vocab(&v);
    build_vocab(&v, 0);
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECKF(t != NULL, "%s", err);
    if (t) { CHECK_ENC(t, "abc", 0, id_ab, 'c'); kz_tokenizer_free(t); }
    free_vocab(&v);
}

static void test_load_errors(void) {
    vocab v;
    char err[256];
    build_vocab(&v, 1);
    kz_tokenizer *t = from_arrays(&v, "llama3", err, sizeof err);
    CHECK(t == NULL && strstr(err, "llama3") && strstr(err, "qwen2"));
    t = from_arrays(&v, NULL, err, sizeof err);
    CHECK(t == NULL);
    /* bad token type */
    v.type[v.n - 1] = 9;
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECK(t == NULL && strstr(err, "token_type"));
    free_vocab(&v);
    /* merge referring to an unknown token */
    build_vocab(&v, 1);
    free(v.merge[0]);
    v.merge[0] = strdup("x zzz");
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECK(t == NULL && strstr(err, "merges[0]"));
    free(v.merge[0]);
    v.merge[0] = strdup("nospace");
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECK(t == NULL && strstr(err, "merges[0]"));
    free_vocab(&v);
    /* missing byte token */
    build_vocab(&v, 1);
    free(v.tok['q']);
    v.tok['q'] = strdup("qq-not-a-byte");
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECK(t == NULL && strstr(err, "0x71"));
    free_vocab(&v);
    /* invalid UTF-8 token text */
    build_vocab(&v, 1);
    free(v.tok[ID_PAD]);
    v.tok[ID_PAD] = strdup("\xff");
    t = from_arrays(&v, "qwen2", err, sizeof err);
    CHECK(t == NULL && strstr(err, "UTF-8"));
    free_vocab(&v);
    /* eos out of range, through GGUF; and a non-gpt2 model */
    build_vocab(&v, 1);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kz_test_tok_e_%d.gguf", (int)getpid());
    const struct { const char *model, *pre; int32_t eos; const char *msg; } cases[] = {
        {"gpt2", "qwen2", 100000, "eos_token_id"},
        {"llama", "qwen2", ID_IM_END, "'llama' is not supported"},
        {"gpt2", NULL, ID_IM_END, "tokenizer.ggml.pre"},
        {"gpt2", "qwen35", ID_IM_END, NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        CHECK(write_gguf(path, &v, cases[k].model, cases[k].pre, cases[k].eos) == 0);
        kz_gguf *g = kz_gguf_open(path, err, sizeof err);
        CHECKF(g != NULL, "%s", err);
        if (!g) continue;
        err[0] = 0;
        t = kz_tokenizer_from_gguf(g, err, sizeof err);
        if (cases[k].msg) CHECKF(t == NULL && strstr(err, cases[k].msg), "case %zu: %s", k, err);
        else CHECKF(t != NULL, "case %zu: %s", k, err);
        kz_tokenizer_free(t);
        kz_gguf_close(g);
    }
    unlink(path);
    free_vocab(&v);
}

/* ---------------------------------------------------------------- pre-tokenizer */

/* pieces separated by '|' in want (text must not contain '|') */
static void check_split(int variant, const char *text, const char *want) {
    size_t ends[128];
    size_t n = kz_pretokenize(variant, text, strlen(text), ends, 128);
    char got[1024];
    size_t o = 0, prev = 0;
    for (size_t i = 0; i < n && i < 128; i++) {
        if (i) got[o++] = '|';
        memcpy(got + o, text + prev, ends[i] - prev);
        o += ends[i] - prev;
        prev = ends[i];
    }
    got[o] = 0;
    CHECKF(!strcmp(got, want), "split%s(\"%s\"): got \"%s\" want \"%s\"", variant ? "35" : "2", text, got, want);
}

static void test_pretokenizer(void) {
    for (int v = 0; v < 2; v++) {
        check_split(v, "Hello world", "Hello| world");
        check_split(v, "I'm you're we've he'll she'd it's", "I|'m| you|'re| we|'ve| he|'ll| she|'d| it|'s");
        check_split(v, "DON'T WE'LL YOU'RE We'Ve", "DON|'T| WE|'LL| YOU|'RE| We|'Ve");
        check_split(v, "it'\xc5\xbf x it'\xc5\xbf" "elf", "it|'\xc5\xbf| x| it|'\xc5\xbf|" "elf"); /* U+017F folds to s */
        check_split(v, "'Sup 'LLama 'Dx 're", "'S|up| '|LLama| '|Dx| '|re");
        check_split(v, "'sup 'hello ''", "'s|up| '|hello| ''");
        check_split(v, "12345", "1|2|3|4|5");
        check_split(v, "abc123def", "abc|1|2|3|def");
        check_split(v, "x\xc2\xb2 \xe2\x85\xab", "x|\xc2\xb2| |\xe2\x85\xab"); /* No, Nl are \p{N} */
        check_split(v, "a  b", "a| | b");
        check_split(v, "a   \n\n  b", "a|   \n\n| | b");
        check_split(v, "a  ", "a|  ");
        check_split(v, "a \n", "a| \n");
        check_split(v, "!!!\n\nx", "!!!\n\n|x");
        check_split(v, " !! (x) ", " !!| (|x|)| ");
        check_split(v, "\t\tfoo", "\t|\tfoo");
        check_split(v, "x\r\n\r\ny", "x|\r\n\r\n|y");
        check_split(v, "x \t \ny", "x| \t \n|y");
        check_split(v, "\xe3\x80\x80\xe6\x97\xa5\xe6\x9c\xac", "\xe3\x80\x80\xe6\x97\xa5\xe6\x9c\xac"); /* U+3000 + CJK */
        check_split(v, "\xe6\x88\x91\xe6\x83\xb3" "apple\xe5\xb7\xa5 1314", "\xe6\x88\x91\xe6\x83\xb3" "apple\xe5\xb7\xa5| |1|3|1|4");
        check_split(v, "a\xc2\xa0" "b", "a|\xc2\xa0" "b");          /* NBSP is \s, not \r\n */
        check_split(v, "a\xe2\x80\x8b" "b", "a|\xe2\x80\x8b" "b");  /* ZWSP is not \s */
        check_split(v, "", "");
        check_split(v, "\n", "\n");
        check_split(v, "a\xff" "b\xfe", "a|\xff" "b|\xfe");         /* bad bytes: "other" */
        check_split(v, " \xf0\x9f\x98\x80\xf0\x9f\x98\x80!", " \xf0\x9f\x98\x80\xf0\x9f\x98\x80!");
    }
    /* combining marks: qwen2 keeps them out of words, qwen35 joins them */
    check_split(KZ_PRE_QWEN2, "e\xcc\x81t\xc3\xa9", "e|\xcc\x81t\xc3\xa9");
    check_split(KZ_PRE_QWEN35, "e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9");
    check_split(KZ_PRE_QWEN2, " \xcc\x81x", " \xcc\x81|x");
    check_split(KZ_PRE_QWEN35, " \xcc\x81x", " \xcc\x81x");
    check_split(KZ_PRE_QWEN2, "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
                "\xe0\xa4\xb9|\xe0\xa4\xbf\xe0\xa4\xa8|\xe0\xa5\x8d\xe0\xa4\xa6|\xe0\xa5\x80"); /* हिन्दी: mark + letters */
    check_split(KZ_PRE_QWEN35, "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
                "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80");
    check_split(KZ_PRE_QWEN2, "!\xcc\x81!", "!\xcc\x81!");
    check_split(KZ_PRE_QWEN2, "!!\xcc\x81 ?\xcc\x81x", "!!\xcc\x81| ?\xcc\x81|x");
    check_split(KZ_PRE_QWEN35, "!!\xcc\x81 ?\xcc\x81x", "!!|\xcc\x81| ?|\xcc\x81x");
    check_split(KZ_PRE_QWEN35, "!\xcc\x81!", "!\xcc\x81|!");   /* '!' is the optional prefix */
    /* pieces tile the input exactly, on random bytes */
    unsigned long long seed = 99;
    for (int it = 0; it < 200; it++) {
        char s[300];
        size_t n = kt_rng(&seed) % 300, ends[300];
        for (size_t i = 0; i < n; i++) s[i] = (char)(kt_rng(&seed) >> 16);
        size_t np = kz_pretokenize(it & 1, s, n, ends, 300);
        int ok = np <= n;
        for (size_t i = 0; ok && i < np; i++) ok = ends[i] > (i ? ends[i - 1] : 0) && ends[i] <= n;
        CHECKF(ok && (np == 0 ? n == 0 : ends[np - 1] == n), "tiling #%d", it);
    }
}

/* ---------------------------------------------------------------- unicode / NFC */

static void check_nfc(const char *in, const char *want) {
    char *out;
    size_t on;
    int r = kz_nfc(in, strlen(in), &out, &on);
    const char *got = r ? out : in;
    size_t gn = r ? on : strlen(in);
    CHECKF(r >= 0 && gn == strlen(want) && !memcmp(got, want, gn), "NFC(\"%s\")", in);
    CHECKF((r == 0) == !strcmp(in, want), "NFC(\"%s\") changed flag", in);
    free(out);
}

static void test_unicode(void) {
    CHECK(kz_uflags('a') & KZ_U_L && kz_uflags('7') & KZ_U_N && kz_uflags(' ') & KZ_U_WS);
    CHECK(kz_uflags(0x0301) & KZ_U_M && !(kz_uflags(0x0301) & KZ_U_L));
    CHECK(kz_uflags(0x1C89) & KZ_U_L);            /* assigned in Unicode 16.0 */
    CHECK(kz_uflags(0x3000) & KZ_U_WS && kz_uflags(0x85) & KZ_U_WS && !(kz_uflags(0x200B) & KZ_U_WS));
    CHECK(!(kz_uflags(0x1C) & KZ_U_WS) && kz_uflags(0x110000) == 0);
    CHECK(kz_uccc(0x0301) == 230 && kz_uccc(0x0316) == 220 && kz_uccc('a') == 0);
    CHECK(kz_uccc(0x0D3B) == 0);                  /* ccc 9 only since Unicode 10: HF's NFC has 0 */
    CHECK(kz_ucompose('e', 0x0301) == 0xE9 && kz_ucompose(0x1100, 0x1161) == 0xAC00);
    CHECK(kz_ucompose(0x0915, 0x093C) == 0);       /* U+0958 is a composition exclusion */
    uint32_t d[4];
    CHECK(kz_udecompose(0x1E69, d) == 3 && d[0] == 's' && d[1] == 0x0323 && d[2] == 0x0307);
    CHECK(kz_udecompose(0xD4DB, d) == 3 && d[0] == 0x1111 && d[1] == 0x1171 && d[2] == 0x11B6);
    CHECK(kz_udecompose('x', d) == 1 && d[0] == 'x');

    check_nfc("plain ascii", "plain ascii");
    check_nfc("d\xc3\xa9j\xc3\xa0", "d\xc3\xa9j\xc3\xa0");                       /* already NFC */
    check_nfc("de\xcc\x81ja\xcc\x80", "d\xc3\xa9j\xc3\xa0");                     /* NFD -> NFC */
    check_nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81");           /* jamo -> 각 */
    check_nfc("a\xcc\x81\xcc\x96", "\xc3\xa1\xcc\x96");                          /* reorder, compose */
    check_nfc("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc");                       /* U+0958 excluded */
    check_nfc("\xe2\x84\xab", "\xc3\x85");                                       /* Angstrom singleton */
    check_nfc("\xcd\x84", "\xcc\x88\xcc\x81");                                   /* U+0344 non-starter */
    check_nfc("\xe0\xad\x87\xe0\xac\xbe", "\xe0\xad\x8b");                       /* two starters compose */
    check_nfc("a\xff\xcc\x81", "a\xff\xcc\x81");                                 /* bad byte blocks */
    check_nfc("e\xcc\x81\xff", "\xc3\xa9\xff");
    /* long runs of combining marks (counting-sort path): 220s before 230s, stable */
    {
        char in[4000], want[4000];
        size_t o = 0, w = 0;
        in[o++] = 'x';
        want[w++] = 'x';
        for (int i = 0; i < 600; i++) { memcpy(in + o, i & 1 ? "\xcc\x96" : "\xcc\x80", 2); o += 2; }
        for (int i = 0; i < 300; i++) { memcpy(want + w, "\xcc\x96", 2); w += 2; }
        for (int i = 0; i < 300; i++) { memcpy(want + w, "\xcc\x80", 2); w += 2; }
        in[o] = want[w] = 0;
        /* there is no precomposed x-grave, so only the reordering shows */
        check_nfc(in, want);
    }
}

/* ---------------------------------------------------------------- streaming UTF-8 */

static void feed_all(const char *in, size_t n, size_t chunk, char *out, size_t *on) {
    kz_utf8_stream s;
    memset(&s, 0, sizeof s);
    size_t o = 0;
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        o += kz_utf8_feed(&s, in + i, k, out + o, KZ_UTF8_FEED_CAP(k));
    }
    o += kz_utf8_flush(&s, out + o, 8);
    *on = o;
}

static void check_stream(const char *in, size_t n, const char *want) {
    char out[4096];
    for (size_t chunk = 1; chunk <= n + 1; chunk++) {
        size_t on;
        feed_all(in, n, chunk, out, &on);
        CHECKF(on == strlen(want) && !memcmp(out, want, on), "utf8 stream of %zu bytes, chunk %zu", n, chunk);
    }
}
#define FFFD "\xef\xbf\xbd"

static void test_utf8_stream(void) {
    /* every truncation of multi-byte characters: nothing emitted until complete */
    const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf"};
    for (size_t c = 0; c < sizeof chars / sizeof *chars; c++) {
        size_t len = strlen(chars[c]);
        for (size_t cut = 1; cut < len; cut++) {
            kz_utf8_stream s;
            memset(&s, 0, sizeof s);
            char out[32];
            size_t o = kz_utf8_feed(&s, chars[c], cut, out, sizeof out);
            CHECKF(o == 0, "partial %zu/%zu emitted %zu bytes", cut, len, o);
            o = kz_utf8_feed(&s, chars[c] + cut, len - cut, out, sizeof out);
            CHECKF(o == len && !memcmp(out, chars[c], len), "completed char %zu cut %zu", c, cut);
            CHECK(kz_utf8_flush(&s, out, sizeof out) == 0);
            /* truncated then flushed: exactly one U+FFFD */
            memset(&s, 0, sizeof s);
            o = kz_utf8_feed(&s, chars[c], cut, out, sizeof out);
            o += kz_utf8_flush(&s, out + o, sizeof out - o);
            CHECKF(o == 3 && !memcmp(out, FFFD, 3), "truncated char %zu cut %zu", c, cut);
        }
    }
    /* expected outputs are Python's bytes.decode('utf-8', 'replace') */
    check_stream("abc", 3, "abc");
    check_stream("\x80", 1, FFFD);
    check_stream("\xe2\x82x", 3, FFFD "x");
    check_stream("\xed\xa0\x80", 3, FFFD FFFD FFFD);      /* surrogate */
    check_stream("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD); /* > U+10FFFF */
    check_stream("\xc0\xaf", 2, FFFD FFFD);                /* overlong */
    check_stream("\xe0\x80\x80", 3, FFFD FFFD FFFD);
    check_stream("\xf0\x80", 2, FFFD FFFD);
    check_stream("\xe1\x80\xe1\x80\x41", 5, FFFD FFFD "A");
    check_stream("\xf0\x9f\x98", 3, FFFD);
    check_stream("\xf0\x9f\x98\xf0\x9f\x98\x80", 7, FFFD "\xf0\x9f\x98\x80");
    check_stream("\xff\xfe\xc3\xa9\xc3", 5, FFFD FFFD "\xc3\xa9" FFFD);
    check_stream("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z", 11, "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z");
    /* random bytes: output independent of chunking, always valid UTF-8 */
    unsigned long long seed = 7;
    for (int it = 0; it < 300; it++) {
        char in[64], ref[256], out[256];
        size_t n = kt_rng(&seed) % 64, rn, on;
        for (size_t i = 0; i < n; i++) {
            unsigned r = (unsigned)kt_rng(&seed);
            in[i] = (char)((r & 1) ? 0x80 + (r >> 8) % 0x80 : (r >> 8));
        }
        feed_all(in, n, n + 1, ref, &rn);
        size_t chunk = 1 + kt_rng(&seed) % 5;
        feed_all(in, n, chunk, out, &on);
        CHECKF(on == rn && !memcmp(out, ref, on), "chunking changes output #%d", it);
        int valid = 1;
        for (size_t i = 0; i < rn && valid;) {
            uint32_t cp;
            int k = kz_utf8_next((const unsigned char *)ref + i, rn - i, &cp);
            if (k < 0) valid = 0; else i += (size_t)k;
        }
        CHECKF(valid, "stream output not valid UTF-8 #%d", it);
    }
    /* small cap: never written past */
    {
        kz_utf8_stream s;
        memset(&s, 0, sizeof s);
        char out[8] = {0};
        size_t o = kz_utf8_feed(&s, "\xff\xff\xff\xff", 4, out, 5);
        CHECK(o <= 5 && out[6] == 0 && out[7] == 0);
    }
}

int main(void) {
    test_unicode();
    test_pretokenizer();
    test_utf8_stream();
    test_bpe_and_specials();
    test_load_errors();
    KT_END();
}
