/* Fixtures for the JVM tests (tests/jni/run_jvm_tests.sh):
 *   jni_fixture emoji-model OUT.gguf
 *       a tiny random qwen35 model whose vocab, besides the 256 byte tokens, holds ~400 tokens
 *       that cut 4-byte emoji between tokens (F0 9F 98 | 80, "a" F0 9F | 98 80, ...) and
 *       ill-formed sequences (FF, C0 AF, an encoded surrogate, a truncated 3-byte code)
 *   jni_fixture gen MODEL SEED TEMPERATURE MAX_TOKENS USER [SYSTEM]
 *       the C API's answer (kz_generate's UTF-8 pieces) as raw bytes on stdout: the reference
 *       the Java side's incremental decoding of the raw token bytes must reproduce
 *   jni_fixture chat MODEL SYSTEM TURN...
 *       a conversation through kz_chat_* (system "" = none). TURN = "k=v;k=v|user text", keys:
 *       n (max tokens), think (0/1), seed, temp (set: the fixed explicit sampling below; unset:
 *       kz_gen_default_params), stop (one stop string). Per turn on stdout:
 *       "TURN n_prompt n_reused n_gen stop bytes\n" + the reply's streamed bytes + "\n" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "model/gguf.h"
#include "model/types.h"
#include "tools/mkmodel/mkmodel.h"

/* GPT-2 byte-to-unicode: printable bytes map to themselves, the rest to U+0100.. in order */
static int byte_cp(int b) {
    int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (keep) return b;
    int k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
    return 256 + k;
}

/* token text (byte-level BPE form) of raw bytes b[0..n) into out; returns its length */
static size_t tok_text(const unsigned char *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int cp = byte_cp(b[i]);
        if (cp < 0x80) out[o++] = (char)cp;
        else { out[o++] = (char)(0xC0 | (cp >> 6)); out[o++] = (char)(0x80 | (cp & 0x3F)); }
    }
    return o;
}

#define MAXTOK 1024
static char g_buf[MAXTOK * 24];
static const char *g_strs[MAXTOK];
static uint64_t g_lens[MAXTOK];
static int32_t g_types[MAXTOK];

static int add(int *n, size_t *off, const unsigned char *b, size_t len, int type) {
    if (*n >= MAXTOK) return -1;
    g_strs[*n] = g_buf + *off;
    g_lens[*n] = tok_text(b, len, g_buf + *off);
    *off += g_lens[*n];
    g_types[*n] = type;
    (*n)++;
    return 0;
}

static int emoji_model(const char *out) {
    int n = 0;
    size_t off = 0;
    for (int b = 0; b < 256; b++) { unsigned char c = (unsigned char)b; add(&n, &off, &c, 1, 1); }
    static const char *const special[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>" };
    for (int k = 0; k < 5; k++) {
        g_strs[n] = special[k];
        g_lens[n] = strlen(special[k]);
        g_types[n] = k < 3 ? 3 : 4;
        n++;
    }
    for (int e = 0; e < 80; e++) { /* U+1F600 + e = F0 9F 98|99 xx */
        unsigned cp = 0x1F600u + (unsigned)e;
        unsigned char u[4] = { 0xF0, (unsigned char)(0x80 | ((cp >> 12) & 0x3F)), (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
                               (unsigned char)(0x80 | (cp & 0x3F)) };
        unsigned char t[8];
        add(&n, &off, u, 3, 1);                                       /* F0 9F 98 | */
        t[0] = u[3], t[1] = 0xF0, t[2] = 0x9F;                        /* | 80 F0 9F | */
        add(&n, &off, t, 3, 1);
        add(&n, &off, u + 2, 2, 1);                                   /* | 98 80 */
        t[0] = 'a', memcpy(t + 1, u, 2);                              /* a F0 9F | */
        add(&n, &off, t, 3, 1);
        add(&n, &off, u + 1, 3, 1);                                   /* | 9F 98 80 */
    }
    static const unsigned char bad[][5] = {
        { 1, 0xFF }, { 2, 0xC0, 0xAF }, { 3, 0xED, 0xA0, 0x80 }, { 4, 0xF4, 0x90, 0x80, 0x80 }, { 2, 0xE2, 0x82 },
        { 2, 0xAC, 'b' }, { 1, 0x80 }, { 3, 0xF0, 0x9F, 'c' },
    };
    for (int r = 0; r < 4; r++)
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) add(&n, &off, bad[k] + 1, bad[k][0], 1);
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s.vocab.gguf", out);
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    int rc = 0;
    rc |= kz_gguf_w_str(w, "general.architecture", "qwen35");
    rc |= kz_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= kz_gguf_w_str(w, "tokenizer.ggml.pre", "qwen35");
    rc |= kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", g_strs, g_lens, (uint64_t)n);
    rc |= kz_gguf_w_arr(w, "tokenizer.ggml.token_type", KZ_GGUF_I32, g_types, (uint64_t)n);
    rc |= kz_gguf_w_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0);
    rc |= kz_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 258);
    rc |= kz_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", 256);
    rc |= kz_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    rc |= kz_gguf_writer_begin(w, vocab);
    rc |= kz_gguf_writer_finish(w);
    if (rc) { fprintf(stderr, "jni_fixture: writing %s: %s\n", vocab, kz_gguf_writer_error(w)); kz_gguf_writer_free(w); return 1; }
    kz_gguf_writer_free(w);
    kz_mkmodel_cfg c;
    kz_mkmodel_preset("qwen35-tiny", &c);
    c.wtype = KZ_T_Q8_0;
    c.vocab_path = vocab;
    c.seed = 7;
    char err[512];
    if (kz_mkmodel_write(&c, out, err, sizeof err)) { fprintf(stderr, "jni_fixture: %s\n", err); return 1; }
    remove(vocab);
    return 0;
}

static int on_piece(const char *p, size_t n, void *ud) {
    (void)ud;
    fwrite(p, 1, n, stdout);
    return 0;
}

static int gen(int argc, char **argv) {
    if (argc < 7) return 2;
    char err[512];
    kz_model *m = kz_model_load(argv[2], NULL, err, sizeof err);
    if (!m) { fprintf(stderr, "%s\n", err); return 1; }
    kz_context_params p = kz_context_default_params();
    p.seed = strtoull(argv[3], NULL, 10);
    p.temperature = (float)atof(argv[4]);
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    if (!c) { fprintf(stderr, "%s\n", err); kz_model_free(m); return 1; }
    kz_stats st;
    int rc = kz_generate(c, argc > 7 ? argv[7] : NULL, argv[6], atoi(argv[5]), on_piece, NULL, &st);
    if (rc) fprintf(stderr, "%s\n", kz_context_error(c));
    kz_context_free(c);
    kz_model_free(m);
    return rc != 0;
}

/* the explicit sampling of a turn with temp= (the Java test sets the same fields) */
static void explicit_sampling(kz_gen_params *g, float temp, uint64_t seed) {
    g->temperature = temp;
    g->seed = seed;
    g->top_k = 30;
    g->top_p = 0.9f;
    g->min_p = 0.02f;
    g->repeat_penalty = 1.1f;
    g->repeat_last_n = 32;
    g->presence_penalty = 0.5f;
    g->frequency_penalty = 0.1f;
}

typedef struct { char *buf; size_t len, cap; } sbuf;
static int on_chat_piece(const char *p, size_t n, void *ud) {
    sbuf *b = ud;
    if (b->len + n > b->cap) {
        size_t cap = (b->len + n) * 2 + 64;
        char *nb = realloc(b->buf, cap);
        if (!nb) return 1;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
    return 0;
}

static int chat(int argc, char **argv) {
    char err[512];
    kz_model *m = kz_model_load(argv[2], NULL, err, sizeof err);
    if (!m) { fprintf(stderr, "%s\n", err); return 1; }
    kz_context *c = kz_context_new(m, NULL, err, sizeof err);
    kz_chat *h = c ? kz_chat_new(c, NULL, err, sizeof err) : NULL;
    if (!h) { fprintf(stderr, "%s\n", err); kz_context_free(c); kz_model_free(m); return 1; }
    int rc = argv[3][0] ? kz_chat_set_system(h, argv[3]) : 0;
    for (int t = 4; t < argc && rc == 0; t++) {
        char spec[512], stop[128] = "";
        const char *bar = strchr(argv[t], '|');
        if (!bar || (size_t)(bar - argv[t]) >= sizeof spec) { fprintf(stderr, "bad turn '%s'\n", argv[t]); rc = 2; break; }
        memcpy(spec, argv[t], (size_t)(bar - argv[t]));
        spec[bar - argv[t]] = 0;
        int n = 0, think = 1, has_temp = 0;
        float temp = 0;
        uint64_t seed = 0;
        for (char *kv = strtok(spec, ";"); kv; kv = strtok(NULL, ";")) {
            char *eq = strchr(kv, '=');
            if (!eq) continue;
            *eq = 0;
            const char *v = eq + 1;
            if (!strcmp(kv, "n")) n = atoi(v);
            else if (!strcmp(kv, "think")) think = atoi(v);
            else if (!strcmp(kv, "seed")) seed = strtoull(v, NULL, 10);
            else if (!strcmp(kv, "temp")) { temp = (float)atof(v); has_temp = 1; }
            else if (!strcmp(kv, "stop")) snprintf(stop, sizeof stop, "%s", v);
        }
        kz_gen_params g = kz_gen_default_params(m, think);
        g.max_tokens = n;
        if (has_temp) explicit_sampling(&g, temp, seed);
        const char *stops[1] = {stop};
        if (stop[0]) { g.stop = stops; g.n_stop = 1; }
        sbuf b = {0};
        kz_stats st;
        if (kz_chat_add(h, KZ_ROLE_USER, bar + 1) != 0 || kz_chat_reply(h, &g, on_chat_piece, &b, &st) != 0) {
            fprintf(stderr, "%s\n", kz_chat_error(h));
            rc = 1;
        } else {
            printf("TURN %d %d %d %d %zu\n", st.n_prompt, st.n_reused, st.n_gen, (int)st.stop, b.len);
            if (b.len) fwrite(b.buf, 1, b.len, stdout);
            printf("\n");
        }
        free(b.buf);
    }
    kz_chat_free(h);
    kz_context_free(c);
    kz_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "emoji-model")) return emoji_model(argv[2]);
    if (argc >= 7 && !strcmp(argv[1], "gen")) return gen(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "chat")) return chat(argc, argv);
    fprintf(stderr, "usage: jni_fixture emoji-model OUT.gguf | gen MODEL SEED TEMP MAX_TOKENS USER [SYSTEM] | chat MODEL SYSTEM TURN...\n");
    return 2;
}
