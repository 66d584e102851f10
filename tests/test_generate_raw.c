/* kz_generate_raw (the JNI layer's generation call) on tiny random models with the synthetic
 * byte vocab, whose random tokens make partial and ill-formed UTF-8 all the time:
 *   - every token but the final end-of-turn reaches the callback, in order, with exactly
 *     kz_token_bytes' bytes (none for control tokens), and n_gen counts them (+ the EOG);
 *   - greedy ids equal an independent loop of kz_eval + argmax of kz_logits on the same prompt;
 *   - sampled (temperature 0.9, seed) its ids and stats equal kz_generate's for the same seed,
 *     and the non-control bytes, concatenated, are what kz_generate's text pieces came from
 *     (equal whenever those bytes are well-formed UTF-8; else kz_generate has U+FFFD in it);
 *   - a non-zero return stops it (KZ_STOP_CANCELLED) and the context stays usable. */
#include <stdint.h>
#include <unistd.h>
#include "tests/kt.h"
#include "kazeia.h"
#include "tools/mkmodel/mkmodel.h"

typedef struct {
    const kz_model *m;
    int32_t ids[512];
    int n, bad_bytes, stop_at;
    char bytes[8192];
    size_t nb;
} rec;

static int on_tok(int32_t tok, const char *b, size_t len, void *ud) {
    rec *r = ud;
    char want[256];
    int wl = kz_token_bytes(r->m, tok, want, sizeof want);
    /* control tokens come without text; the others with exactly their bytes */
    if (len != 0 || wl == 0) {
        if (wl < 0 || (size_t)wl != len || memcmp(want, b, len) != 0) r->bad_bytes++;
    }
    if (r->n < 512) r->ids[r->n] = tok;
    r->n++;
    if (r->nb + len < sizeof r->bytes) { memcpy(r->bytes + r->nb, b, len); r->nb += len; }
    return r->stop_at && r->n >= r->stop_at;
}

typedef struct { char text[16384]; size_t n; } txt;
static int on_piece(const char *p, size_t len, void *ud) {
    txt *t = ud;
    if (t->n + len < sizeof t->text) { memcpy(t->text + t->n, p, len); t->n += len; }
    return 0;
}

/* is b[0..n) well-formed UTF-8 (no surrogates, no overlongs, <= U+10FFFF)? written here from the
 * Unicode table 3-7, independent of src/text/unicode.c */
static int utf8_ok(const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!k || i + k > n) return 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        for (size_t j = 1; j < k; j++) {
            unsigned x = b[i + j];
            if (x < (j == 1 ? lo : 0x80) || x > (j == 1 ? hi : 0xBF)) return 0;
        }
        i += k;
    }
    return 1;
}

static void run(const char *preset) {
    char path[128], err[512];
    snprintf(path, sizeof path, "/tmp/kz_test_generate_raw_%d.gguf", (int)getpid());
    kz_mkmodel_cfg cfg;
    CHECK(kz_mkmodel_preset(preset, &cfg) == 0);
    cfg.wtype = 0;
    cfg.n_threads = 1;
    if (kz_mkmodel_write(&cfg, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); CHECK(0); return; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    remove(path);
    CHECK(m != NULL);
    if (!m) return;
    kz_context_params cp = kz_context_default_params();
    cp.n_threads = 1;
    cp.think = 0;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err), *ref = kz_context_new(m, &cp, err, sizeof err);
    CHECK(c && ref);

    /* greedy: ids against kz_eval + argmax */
    static rec r;
    memset(&r, 0, sizeof r);
    r.m = m;
    kz_stats st;
    CHECK(kz_generate_raw(c, NULL, "hello", 24, on_tok, &r, &st) == 0);
    CHECKF(r.bad_bytes == 0, "%s: %d tokens with other bytes than kz_token_bytes", preset, r.bad_bytes);
    CHECK(st.n_gen == r.n + (st.stop == KZ_STOP_EOG));
    CHECK(r.n >= 1);
    const char *tpl = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    int32_t prompt[256];
    int np = kz_tokenize(m, tpl, strlen(tpl), 1, prompt, 256);
    CHECKF(np == st.n_prompt, "%s: prompt %d tokens, generate evaluated %d", preset, np, st.n_prompt);
    if (np == st.n_prompt) {
        CHECK(kz_eval(ref, prompt, np, NULL, 0) == 0);
        const int nv = kz_model_n_vocab(m);
        int agree = 0;
        for (int i = 0; i < r.n && i < 512; i++) {
            const float *lg = kz_logits(ref);
            int best = 0;
            for (int k = 1; k < nv; k++) if (lg[k] > lg[best]) best = k;
            if (best != r.ids[i]) break;
            agree++;
            int32_t t = best;
            if (kz_eval(ref, &t, 1, NULL, 0) != 0) break;
        }
        CHECKF(agree == r.n, "%s: greedy ids agree with eval+argmax for %d of %d tokens", preset, agree, r.n);
    }

    /* sampled: same ids and stats as kz_generate for the seed, text from the same bytes */
    kz_context_params sp = cp;
    sp.temperature = 0.9f;
    sp.seed = 1234;
    kz_context *a = kz_context_new(m, &sp, err, sizeof err), *b = kz_context_new(m, &sp, err, sizeof err);
    memset(&r, 0, sizeof r);
    r.m = m;
    static txt t;
    memset(&t, 0, sizeof t);
    kz_stats sa, sb;
    CHECK(kz_generate_raw(a, "sys", "a longer user message", 40, on_tok, &r, &sa) == 0);
    CHECK(kz_generate(b, "sys", "a longer user message", 40, on_piece, &t, &sb) == 0);
    CHECK(sa.n_gen == sb.n_gen && sa.n_prompt == sb.n_prompt && sa.stop == sb.stop);
    CHECK(r.bad_bytes == 0);
    if (utf8_ok((const unsigned char *)r.bytes, r.nb)) CHECK(t.n == r.nb && memcmp(t.text, r.bytes, r.nb) == 0);
    else CHECK(t.n > 0 && strstr(t.text, "\xEF\xBF\xBD") != NULL); /* ill-formed -> U+FFFD */
    printf("%s: %d sampled tokens, %zu raw bytes (%s UTF-8), kz_generate text %zu bytes\n", preset, r.n, r.nb,
           utf8_ok((const unsigned char *)r.bytes, r.nb) ? "well-formed" : "ill-formed", t.n);

    /* stop from the callback, then the context still works */
    memset(&r, 0, sizeof r);
    r.m = m;
    r.stop_at = 3;
    CHECK(kz_generate_raw(a, NULL, "x", 50, on_tok, &r, &sa) == 0);
    CHECK(r.n == 3 && sa.stop == KZ_STOP_CANCELLED);
    memset(&r, 0, sizeof r);
    r.m = m;
    CHECK(kz_generate_raw(a, NULL, "y", 5, on_tok, &r, &sa) == 0 && (sa.stop == KZ_STOP_MAX_TOKENS || sa.stop == KZ_STOP_EOG));
    CHECK(kz_generate_raw(NULL, NULL, "y", 5, on_tok, &r, &sa) == -1 && sa.stop == KZ_STOP_ERROR);
    kz_context_free(a);
    kz_context_free(b);
    kz_context_free(c);
    kz_context_free(ref);
    kz_model_free(m);
}

int main(void) {
    run("qwen35-tiny");
    run("qwen3-tiny");
    KT_END();
}
