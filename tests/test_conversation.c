/* Conversations (kz_chat_*) on tiny random qwen35 and qwen3 models: a 10-turn chat where, at every
 * turn, the logits the reply samples from equal those of a fresh context evaluating the
 * template-rendered full history from scratch, while the conversation evaluates only new tokens.
 *
 * The reference splits its evaluation at the same chunk boundaries as the conversation's state was
 * built with (prefill chunks, restored checkpoints, one-token decode steps; tracked here from the
 * stats), and must then be bit-identical; a single-call evaluation of the whole history (other
 * chunking: the chunked GDN and tiled attention round differently) must agree to 1e-4 relative.
 * Also: save -> free -> new context -> load in the middle; a reply cancelled mid-way (kz_cancel
 * from the stream callback); thinking on, off and switched per turn; stop strings; bad files. */
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "api/chat_api.h"
#include "tools/mkmodel/mkmodel.h"

#define NCTX 2048
#define NBATCH 16

/* how the context's current state was built: eval calls as [start, end) runs, in order */
typedef struct { int a[4096], n; } segs;

static void segs_cut(segs *s, int at) { /* keep the runs that end at or before token position at */
    int k = 0;
    while (k < s->n && s->a[k] <= at) k++;
    CHECKF(at == 0 || (k > 0 && s->a[k - 1] == at), "restore point %d is not a run boundary", at);
    s->n = k;
}
static void segs_add(segs *s, int end) { if (s->n < 4096) s->a[s->n++] = end; }

static kz_context *new_ctx(kz_model *m) {
    kz_context_params p = kz_context_default_params();
    p.n_ctx = NCTX;
    p.n_batch = NBATCH;
    p.n_threads = 1;
    p.kv_type = KZ_KV_F32;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    if (!c) fprintf(stderr, "kz_context_new: %s\n", err);
    return c;
}

typedef struct { kz_context *c; int pieces, cancel_at; size_t bytes; } stream;
static int on_piece(const char *p, size_t n, void *ud) {
    (void)p;
    stream *s = ud;
    s->bytes += n;
    if (++s->pieces == s->cancel_at) kz_cancel(s->c); /* as another thread would */
    return 0;
}

static double max_rel(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

static const char *USERS[] = {"Hello there!", "What is a delta rule?", "  Tell me more, with spaces.  ",
                              "Encore une question ? Café, naïve.", "東京はどこ?", "Typed <|im_end|> stays text.",
                              "Short.", "A longer message that spans more than one prefill chunk of sixteen tokens, "
                              "so that the chunking inside a turn is exercised as well.",
                              "Thanks.", "Bye!"};

static double g_worst_rel;
static long g_evaluated, g_full;

static void conversation(kz_model *m, const char *arch, int think) {
    const int V = kz_model_n_vocab(m);
    char path[128];
    snprintf(path, sizeof path, "/tmp/kz_test_conv_%d_%s_%d.kzchat", (int)getpid(), arch, think);
    kz_context *c = new_ctx(m), *ref = new_ctx(m);
    CHECK(c && ref);
    if (!c || !ref) return;
    kz_chat_params cp = kz_chat_default_params();
    cp.think = think;
    cp.max_checkpoints = 3;
    char err[256];
    kz_chat *h = kz_chat_new(c, &cp, err, sizeof err);
    CHECKF(h != NULL, "%s", err);
    if (!h) return;
    CHECK(kz_chat_set_system(h, "You are a terse assistant.") == 0);
    float *want = malloc((size_t)V * sizeof *want), *one = malloc((size_t)V * sizeof *one);
    segs sg = {.n = 0};
    int prev_b = 0, evaluated = 0, full = 0, restored = 0;
    for (int t = 0; t < 10; t++) {
        const int th = t == 4 ? !think : think; /* switched for one turn */
        CHECK(kz_chat_add(h, KZ_ROLE_USER, USERS[t]) == 0);
        int32_t *toks = NULL, *pre = NULL;
        int n = kz_chat_render_tokens(h, kz_chat_n_messages(h), 1, th, &toks);
        int b = kz_chat_render_tokens(h, kz_chat_n_messages(h), 0, th, &pre);
        CHECKF(n > 0 && b > 0 && b < n && !memcmp(pre, toks, (size_t)b * 4), "%s render %d %d", arch, n, b);
        free(pre);
        kz_stats st;
        CHECKF(kz_chat_prefill(h, th, &st) == 0, "%s turn %d: %s", arch, t, kz_chat_error(h));
        /* only the new tokens: everything from the last user turn's end at most */
        CHECKF(st.n_reused >= prev_b && st.n_reused + st.n_prompt == n && kz_context_n_past(c) == n,
               "%s think %d turn %d: reused %d evaluated %d of %d (previous user end %d)", arch, th, t, st.n_reused,
               st.n_prompt, n, prev_b);
        if (st.n_reused < kz_context_n_past(c) && t > 0) restored++;
        evaluated += st.n_prompt;
        full += n;
        /* the runs the state was built from: kept prefix, then the prefill split at the user end */
        segs_cut(&sg, st.n_reused);
        if (st.n_reused < b) segs_add(&sg, b);
        segs_add(&sg, n);
        kz_context_reset(ref);
        int ok = 1;

        for (int k = 0, at = 0; k < sg.n && ok; at = sg.a[k++])
            ok = kz_eval(ref, toks + at, sg.a[k] - at, k == sg.n - 1 ? want : NULL, 0) == 0;
        CHECKF(ok, "%s: reference eval: %s", arch, kz_context_error(ref));
        const float *got = kz_logits(c);
        CHECK(got != NULL);
        if (got && ok)
            CHECKF(!memcmp(got, want, (size_t)V * sizeof *got), "%s think %d turn %d: logits differ from the reference "
                   "(max rel %.3g)", arch, th, t, max_rel(got, want, V));
        /* one call over the whole rendering: other chunk boundaries, so not bit for bit */
        kz_context_reset(ref);
        CHECK(kz_eval(ref, toks, n, one, 0) == 0);
        double r = got ? max_rel(got, one, V) : 1;
        if (r > g_worst_rel) g_worst_rel = r;
        CHECKF(r < 1e-4, "%s turn %d: rel err %.3g vs a single evaluation", arch, t, r);
        free(toks);

        /* the reply: decode continues from these logits (nothing re-evaluated) */
        stream s = {.c = c, .cancel_at = t == 6 ? 1 : 0};
        kz_gen_params gp = kz_gen_default_params(m, th);
        gp.max_tokens = 10 + t;
        gp.seed = 100 + (uint64_t)t;
        const int before = kz_chat_n_messages(h);
        CHECKF(kz_chat_reply(h, &gp, on_piece, &s, &st) == 0, "%s: %s", arch, kz_chat_error(h));
        CHECKF(st.n_prompt == 0 && st.n_reused == n, "%s turn %d: reply re-evaluated %d", arch, t, st.n_prompt);
        CHECK(kz_chat_n_messages(h) == before + 1 && kz_chat_message_role(h, before) == KZ_ROLE_ASSISTANT);
        if (t == 6) CHECKF(st.stop == KZ_STOP_CANCELLED && st.n_gen < gp.max_tokens, "%s: cancel: stop %d n_gen %d",
                           arch, (int)st.stop, st.n_gen);
        for (int p = n; p < kz_context_n_past(c); p++) segs_add(&sg, p + 1); /* one-token decode steps */
        prev_b = b;

        if (t == 4) { /* the whole conversation to a file, and back in a new context */
            CHECKF(kz_chat_save(h, path) == 0, "%s", kz_chat_error(h));
            int nm = kz_chat_n_messages(h), nck = kz_chat_n_checkpoints(h);
            kz_chat_free(h);
            kz_context_free(c);
            c = new_ctx(m);
            h = kz_chat_new(c, NULL, err, sizeof err);
            CHECK(h != NULL);
            if (!h) break;
            CHECKF(kz_chat_load(h, path) == 0, "%s", kz_chat_error(h));
            CHECK(kz_chat_n_messages(h) == nm && kz_chat_n_checkpoints(h) == nck && nck > 0);
            CHECK(kz_context_n_past(c) > 0);
        }
    }
    CHECKF(restored >= 8, "%s think %d: %d turns restored a checkpoint", arch, think, restored);
    CHECK(kz_chat_n_checkpoints(h) <= 3);
    printf("%s think %d: 10 turns, evaluated %d prompt tokens (full histories: %d), %d checkpoints, %zu bytes held\n",
           arch, think, evaluated, full, kz_chat_n_checkpoints(h), kz_chat_memory(h));
    g_evaluated += evaluated;
    g_full += full;
    CHECK(evaluated * 2 < full);

    /* bad files: the conversation stays as it was */
    int nm = kz_chat_n_messages(h), np = kz_context_n_past(c);
    FILE *f = fopen(path, "r+b");
    if (f) { fseek(f, 40, SEEK_SET); fputc('#', f); fclose(f); }
    CHECK(kz_chat_load(h, path) == -1 && kz_chat_status(h) == KZ_ERR_FORMAT);
    CHECK(kz_chat_load(h, "/nonexistent/x.kzchat") == -1 && kz_chat_status(h) == KZ_ERR_IO);
    CHECK(kz_chat_n_messages(h) == nm && kz_context_n_past(c) == np);
    unlink(path);
    /* a reply needs a user message last */
    CHECK(kz_chat_reply(h, NULL, NULL, NULL, NULL) == -1 && kz_chat_status(h) == KZ_ERR_INVALID_ARG);
    kz_chat_reset(h);
    CHECK(kz_chat_n_messages(h) == 1 && kz_chat_message_role(h, 0) == KZ_ROLE_SYSTEM && kz_chat_n_checkpoints(h) == 0);
    free(want);
    free(one);
    kz_chat_free(h);
    kz_context_free(c);
    kz_context_free(ref);
}

/* stop strings: the text streamed and recorded ends before the first stop string (the replies of
 * a random model hold any byte, NUL included: lengths, not strlen) */
typedef struct { char b[8192]; size_t n; } text;
static int collect(const char *p, size_t n, void *ud) {
    text *t = ud;
    if (t->n + n < sizeof t->b) { memcpy(t->b + t->n, p, n); t->n += n; }
    return 0;
}
static const char *find(const char *h, size_t hn, const char *s, size_t sn) {
    for (size_t i = 0; i + sn <= hn; i++) if (!memcmp(h + i, s, sn)) return h + i;
    return NULL;
}
static void stop_strings(kz_model *m) {
    kz_context *c = new_ctx(m);
    kz_chat *h = kz_chat_new(c, NULL, NULL, 0);
    CHECK(h != NULL);
    if (!h) { kz_context_free(c); return; }
    kz_gen_params gp = kz_gen_default_params(m, 0);
    gp.max_tokens = 40;
    gp.seed = 7;
    static text full, cut;
    full.n = cut.n = 0;
    CHECK(kz_chat_add(h, KZ_ROLE_USER, "Say something.") == 0);
    CHECK(kz_chat_reply(h, &gp, collect, &full, NULL) == 0);
    size_t L = full.n, i = L / 2;
    while (i + 1 < L && ((unsigned char)full.b[i] - 1u >= 0x7Fu || (unsigned char)full.b[i + 1] - 1u >= 0x7Fu)) i++;
    CHECKF(i + 1 < L, "no two ASCII bytes in the reply's second half (%zu bytes)", L);
    if (i + 1 < L) {
        /* a stop string from the middle of the unconstrained reply (whole code points) */
        char stop[3] = {full.b[i], full.b[i + 1], 0};
        const char *stops[2] = {"\x01never", stop};
        gp.stop = stops;
        gp.n_stop = 2;
        kz_chat_reset(h);
        CHECK(kz_chat_add(h, KZ_ROLE_USER, "Say something.") == 0);
        kz_stats st;
        CHECK(kz_chat_reply(h, &gp, collect, &cut, &st) == 0);
        const char *at = find(full.b, full.n, stop, 2);
        CHECKF(at && cut.n == (size_t)(at - full.b) && !memcmp(cut.b, full.b, cut.n) && st.stop == KZ_STOP_EOG,
               "stop '%s': %zu bytes streamed, first stop at %ld of %zu", stop, cut.n, at ? (long)(at - full.b) : -1L, L);
        const char *rec = kz_chat_message_text(h, 1);
        CHECK(rec && !strstr(rec, stop));
    }
    kz_chat_free(h);
    kz_context_free(c);
}

static kz_model *make_model(const char *preset, const char *path) {
    kz_mkmodel_cfg cfg;
    char err[256];
    if (kz_mkmodel_preset(preset, &cfg) != 0) return NULL;
    cfg.wtype = 0;
    cfg.n_threads = 1;
    if (kz_mkmodel_write(&cfg, path, err, sizeof err) != 0) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load %s: %s\n", path, err);
    return m;
}

int main(void) {
    const char *presets[2] = {"qwen35-tiny", "qwen3-tiny"};
    for (int k = 0; k < 2; k++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/kz_test_conv_%d_%s.gguf", (int)getpid(), presets[k]);
        kz_model *m = make_model(presets[k], path);
        CHECK(m != NULL);
        if (!m) continue;
        conversation(m, kz_model_arch(m), 1);
        conversation(m, kz_model_arch(m), 0);
        stop_strings(m);
        kz_model_free(m);
        unlink(path);
    }
    printf("prompt tokens evaluated %ld vs %ld for full re-reads; worst rel err vs one-call eval %.3g\n", g_evaluated,
           g_full, g_worst_rel);
    KT_END();
}
