/* Guard cascade (src/api/guard.c) on real tiny models: a qwen3-tiny guard and a qwen35-tiny
 * thinker (random weights, synthetic byte vocabulary). The test double (kz_guard_set_script)
 * scripts only what the guard model says: its output text and/or its next-token distribution;
 * rendering, evaluation, parsing, policy and the flow control are the real code. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/guard.h"
#include "text/guard_prompt.h"
#include "tools/mkmodel/mkmodel.h"

static kz_model *make_model(const char *preset, const char *path) {
    kz_mkmodel_cfg cfg;
    char err[256];
    if (kz_mkmodel_preset(preset, &cfg) != 0) return NULL;
    cfg.wtype = 0; /* F32 */
    cfg.n_threads = 1;
    if (kz_mkmodel_write(&cfg, path, err, sizeof err) != 0) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load %s: %s\n", path, err);
    return m;
}

/* ---- the test double ---- */
typedef struct {
    const char *prompt_text;   /* scripted output of prompt checks (NULL: the model generates) */
    const char *resp_text;     /* of response checks before unsafe_from */
    const char *resp_unsafe;   /* of response checks from the unsafe_from-th on (counted from 1) */
    int unsafe_from;
    int32_t boost_tok;         /* >= 0: this token's logit is raised by boost */
    float boost;
    int n_resp_checks, n_prompt_checks;
    float *keep;               /* when set: a copy of the logits of the last check */
    int n_vocab;
} script;

static int script_fn(void *user, int response, int check_no, float *logits, int n_vocab, char *text, size_t cap) {
    script *s = user;
    (void)check_no;
    if (s->keep) memcpy(s->keep, logits, (size_t)n_vocab * sizeof *logits);
    if (s->boost_tok >= 0) logits[s->boost_tok] += s->boost;
    const char *t;
    if (response) {
        s->n_resp_checks++;
        t = s->unsafe_from > 0 && s->n_resp_checks >= s->unsafe_from ? s->resp_unsafe : s->resp_text;
    } else {
        s->n_prompt_checks++;
        t = s->prompt_text;
    }
    if (!t) return 0;
    snprintf(text, cap, "%s", t);
    return 1;
}

static int32_t tok1(kz_model *m, const char *s) {
    int32_t t[8];
    return kz_tokenize(m, s, strlen(s), 0, t, 8) == 1 ? t[0] : -1;
}

/* ---- what the thinker does while the cascade runs ---- */
typedef struct {
    int pieces;
    kz_guard *g; /* when set: the guard's sequence must not grow while the thinker... (alternation) */
} app;
static int on_piece(const char *p, size_t n, void *u) {
    (void)p; (void)n;
    ((app *)u)->pieces++;
    return 0;
}

static void test_new_errors(kz_model *guard, kz_model *thinker) {
    char err[256];
    CHECK(kz_guard_new(NULL, NULL, err, sizeof err) == NULL && strstr(err, "NULL"));
    kz_guard *g = kz_guard_new(thinker, NULL, err, sizeof err);
    CHECKF(g == NULL && strstr(err, "attention-only"), "qwen35 guard refused: %s", err);
    kz_guard_params p = kz_guard_default_params();
    p.policy = (kz_guard_policy)7;
    CHECK(kz_guard_new(guard, &p, err, sizeof err) == NULL && strstr(err, "policy"));
    p = kz_guard_default_params();
    p.check_every = -1;
    CHECK(kz_guard_new(guard, &p, err, sizeof err) == NULL);
    CHECK(!strcmp(kz_guard_category_name(0), "Violent") && !strcmp(kz_guard_category_name(8), "Jailbreak") &&
          kz_guard_category_name(9) == NULL);
}

/* the Unsafe prompt is blocked before the thinker evaluates anything */
static void test_prompt_blocked(kz_model *guard, kz_model *thinker) {
    char err[256];
    kz_guard *g = kz_guard_new(guard, NULL, err, sizeof err);
    kz_context *c = kz_context_new(thinker, NULL, err, sizeof err);
    CHECK(g && c);
    if (!g || !c) goto out;
    script s = {.prompt_text = "Safety: Unsafe\nCategories: Violent, Non-violent Illegal Acts", .boost_tok = -1};
    kz_guard_set_script(g, script_fn, &s);
    app a = {0, g};
    kz_stats st;
    kz_guard_verdict v;
    CHECK(kz_guard_generate(g, c, NULL, "How can I make a bomb?", 16, on_piece, &a, &st, &v) == 0);
    CHECK(v.label == KZ_GUARD_UNSAFE && v.blocked && v.unsafe && !v.malformed);
    CHECK(v.categories == (KZ_GUARD_CAT_VIOLENT | KZ_GUARD_CAT_ILLEGAL));
    CHECK(v.refusal == -1);
    CHECK(st.stop == KZ_STOP_CANCELLED && st.n_gen == 0 && st.n_prompt == 0);
    CHECK(a.pieces == 0 && kz_context_n_past(c) == 0); /* the thinker never ran */
    CHECK(s.n_prompt_checks == 1 && s.n_resp_checks == 0);
    CHECK(v.n_eval > 300 && v.n_reused == 0); /* the whole template was evaluated */
    CHECK(strstr(v.text, "Safety: Unsafe") == v.text);

    /* a Safe prompt: the thinker runs, the answer is checked at the end */
    s.prompt_text = "Safety: Safe\nCategories: None";
    s.resp_text = "Safety: Safe\nCategories: None\nRefusal: No";
    CHECK(kz_guard_generate(g, c, NULL, "Hello there", 12, on_piece, &a, &st, &v) == 0);
    CHECK(!v.blocked && v.label == KZ_GUARD_SAFE && v.refusal == 0 && !v.malformed);
    CHECK(st.n_gen == 12 && st.stop == KZ_STOP_MAX_TOKENS);
    CHECK(s.n_resp_checks == 1); /* 12 pieces < check_every 32: only the final check */

    /* FLAG: an Unsafe prompt is reported and the thinker still answers */
    kz_guard_free(g);
    kz_guard_params p = kz_guard_default_params();
    p.action = KZ_GUARD_FLAG;
    g = kz_guard_new(guard, &p, err, sizeof err);
    CHECK(g != NULL);
    if (!g) goto out;
    kz_guard_set_script(g, script_fn, &s);
    s.prompt_text = "Safety: Unsafe\nCategories: PII";
    CHECK(kz_guard_check_prompt(g, "what is Bob's address", &v) == 0);
    CHECK(v.unsafe && !v.blocked && v.categories == KZ_GUARD_CAT_PII);
out:
    kz_guard_free(g);
    kz_context_free(c);
}

/* an Unsafe verdict in mid-answer stops the thinker at that piece */
static void test_response_stops(kz_model *guard, kz_model *thinker) {
    char err[256];
    kz_guard_params p = kz_guard_default_params();
    p.check_every = 4;
    kz_guard *g = kz_guard_new(guard, &p, err, sizeof err);
    kz_context_params cp = kz_context_default_params();
    cp.think = 0;
    kz_context *c = kz_context_new(thinker, &cp, err, sizeof err);
    CHECK(g && c);
    if (!g || !c) goto out;
    script s = {.prompt_text = "Safety: Safe\nCategories: None",
                .resp_text = "Safety: Safe\nCategories: None\nRefusal: No",
                .resp_unsafe = "Safety: Unsafe\nCategories: Violent\nRefusal: No", .unsafe_from = 3, .boost_tok = -1};
    kz_guard_set_script(g, script_fn, &s);
    app a = {0, g};
    kz_stats st;
    kz_guard_verdict v;
    CHECK(kz_guard_generate(g, c, NULL, "Tell me a story", 200, on_piece, &a, &st, &v) == 0);
    CHECK(v.blocked && v.label == KZ_GUARD_UNSAFE && v.categories == KZ_GUARD_CAT_VIOLENT && v.refusal == 0);
    CHECKF(a.pieces == 12, "pieces shown %d (stopped at the third check, 3 x 4)", a.pieces);
    CHECK(s.n_resp_checks == 3);
    CHECKF(st.stop == KZ_STOP_CANCELLED && st.n_gen >= 12 && st.n_gen < 200, "stop %d n_gen %d", st.stop, st.n_gen);
    /* the checks after the first reused the guard's state: only the suffix was evaluated */
    CHECK(v.n_reused > 300 && v.n_eval < v.n_reused);

    /* the same with a Safe guard all along: the answer runs to max_tokens */
    s.unsafe_from = 0;
    s.n_resp_checks = 0;
    a.pieces = 0;
    CHECK(kz_guard_generate(g, c, NULL, "Tell me a story", 40, on_piece, &a, &st, &v) == 0);
    CHECK(!v.blocked && st.stop == KZ_STOP_MAX_TOKENS && st.n_gen == 40);
    CHECKF(s.n_resp_checks == a.pieces / 4 + 1, "checks %d for %d pieces", s.n_resp_checks, a.pieces);
out:
    kz_guard_free(g);
    kz_context_free(c);
}

/* malformed outputs and the distribution-only verdicts */
static void test_malformed(kz_model *guard) {
    char err[256];
    kz_guard_params p = kz_guard_default_params();
    kz_guard *g = kz_guard_new(guard, &p, err, sizeof err);
    p.policy = KZ_GUARD_LOOSE;
    kz_guard *gl = kz_guard_new(guard, &p, err, sizeof err);
    CHECK(g && gl);
    if (!g || !gl) goto out;
    /* byte vocabulary: "Safety: " is the shared prefix, 'S' / 'C' / 'U' the label tokens */
    const int32_t tU = tok1(guard, "U"), tC = tok1(guard, "C"), tS = tok1(guard, "S");
    CHECK(tU >= 0 && tC >= 0 && tS >= 0);
    script s = {.boost_tok = -1};
    kz_guard_set_script(g, script_fn, &s);
    kz_guard_set_script(gl, script_fn, &s);
    kz_guard_verdict v;
    struct { const char *text; int label, malformed; unsigned cats; } cases[] = {
        {"Safety: Unsafe\nCategories: Jailbreak", KZ_GUARD_UNSAFE, 0, KZ_GUARD_CAT_JAILBREAK},
        {"Safety: Controversial\nCategories: Politically Sensitive Topics,Copyright Violation\n", KZ_GUARD_CONTROVERSIAL, 0,
         KZ_GUARD_CAT_POLITICAL | KZ_GUARD_CAT_COPYRIGHT},
        {"\nSafety: Safe  \r\nCategories: None", KZ_GUARD_SAFE, 0, 0},
        {"Safety: Unsafe\nCategories: Weapons", KZ_GUARD_UNSAFE, 1, 0},           /* unknown category */
        {"Safety: Unsafe", KZ_GUARD_UNSAFE, 1, 0},                                /* line missing */
        {"Safety: Safe\nCategories: None, Violent", KZ_GUARD_SAFE, 1, KZ_GUARD_CAT_VIOLENT},
        {"Safety: unsafe\nCategories: None", KZ_GUARD_CONTROVERSIAL, 1, 0},       /* bad label: fallback */
        {"", KZ_GUARD_CONTROVERSIAL, 1, 0},
        {"\xff\xfe garbage \x01\n\n\n,,,", KZ_GUARD_CONTROVERSIAL, 1, 0},
        {"Safety: SafeSafe\nCategories: None", KZ_GUARD_CONTROVERSIAL, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        s.prompt_text = cases[i].text;
        CHECK(kz_guard_check_prompt(g, "hello", &v) == 0);
        /* the untouched tiny model puts < 50 % on 'S'/'C'/'U', so a bad Safety line falls back to
         * Controversial: blocked under STRICT, let through under LOOSE */
        CHECKF((int)v.label == cases[i].label && v.malformed == cases[i].malformed && v.categories == cases[i].cats,
               "case %zu: label %d malformed %d cats %x", i, v.label, v.malformed, v.categories);
        CHECK(v.blocked == (v.label != KZ_GUARD_SAFE));
        CHECK(kz_guard_check_prompt(gl, "hello", &v) == 0);
        CHECK(v.blocked == (v.label == KZ_GUARD_UNSAFE));
    }
    CHECK(v.p_safe + v.p_unsafe + v.p_controversial < 0.5f);
    /* response checks need the Refusal line */
    s.resp_text = "Safety: Safe\nCategories: None";
    CHECK(kz_guard_response_begin(g, "hi") == 0 && kz_guard_response_end(g, &v) == 0);
    CHECK(v.malformed && v.label == KZ_GUARD_SAFE && v.refusal == -1 && !v.blocked);
    s.resp_text = "Safety: Safe\nCategories: None\nRefusal: Yes";
    CHECK(kz_guard_response_begin(g, "hi") == 0 && kz_guard_response_end(g, &v) == 0);
    CHECK(!v.malformed && v.refusal == 1);

    /* a malformed text with a confident distribution: the label comes from the distribution */
    s.prompt_text = "Safety: ???";
    s.boost_tok = tU;
    s.boost = 60.0f;
    CHECK(kz_guard_check_prompt(gl, "hello", &v) == 0);
    CHECK(v.malformed && v.label == KZ_GUARD_UNSAFE && v.blocked && v.p_unsafe > 0.99f);

    /* label from one forward pass (max_verdict_tokens 0): the distribution decides */
    kz_guard_free(gl);
    p = kz_guard_default_params();
    p.max_verdict_tokens = 0;
    gl = kz_guard_new(guard, &p, err, sizeof err);
    CHECK(gl != NULL);
    if (!gl) goto out;
    kz_guard_set_script(gl, script_fn, &s);
    s.prompt_text = NULL;
    s.boost_tok = tC;
    CHECK(kz_guard_check_prompt(gl, "hello", &v) == 0);
    CHECK(!v.malformed && v.label == KZ_GUARD_CONTROVERSIAL && v.blocked && v.p_controversial > 0.99f && !v.text[0]);
    s.boost_tok = tS;
    long before = kz_guard_n_evaluated(gl);
    CHECK(kz_guard_check_prompt(gl, "hello", &v) == 0);
    CHECK(!v.malformed && v.label == KZ_GUARD_SAFE && !v.blocked && v.p_safe > 0.99f);
    CHECK(v.n_eval == 1 && kz_guard_n_evaluated(gl) - before == 1); /* same prompt: only the last token again */
    s.boost_tok = -1;
    CHECK(kz_guard_check_prompt(gl, "hello", &v) == 0);
    CHECK(v.malformed && v.label == KZ_GUARD_CONTROVERSIAL && v.blocked);

    /* the model's own greedy output (no script): whatever it writes, no crash, a verdict */
    kz_guard_set_script(g, NULL, NULL);
    CHECK(kz_guard_check_prompt(g, "hello", &v) == 0);
    CHECK(strncmp(v.text, "Safety: ", 8) == 0 && v.n_eval > 300);
    CHECK((int)v.label >= 0 && (int)v.label <= 2);

    /* errors fail closed */
    CHECK(kz_guard_response_feed(g, "x", 1, &v) == -1 && v.blocked && strstr(kz_guard_error(g), "begin"));
    kz_guard_params small = kz_guard_default_params();
    small.n_ctx = 256;
    kz_guard *gs = kz_guard_new(guard, &small, err, sizeof err);
    CHECK(gs != NULL);
    if (gs) {
        CHECK(kz_guard_check_prompt(gs, "hello", &v) == -1 && v.blocked && kz_guard_status(gs) == KZ_ERR_CTX_FULL);
        kz_guard_free(gs);
    }
out:
    kz_guard_free(g);
    kz_guard_free(gl);
}

/* Response checks reuse the guard's state: each evaluates exactly the tokens after the longest
 * common prefix with the previous check's sequence, and gives the logits a fresh guard gives. */
static void test_reuse(kz_model *guard) {
    char err[256];
    kz_guard_params p = kz_guard_default_params();
    p.check_every = 3;
    p.max_verdict_tokens = 0; /* the sequence then holds exactly rendering + "Safety:" */
    kz_guard *g = kz_guard_new(guard, &p, err, sizeof err);
    kz_guard *fresh = kz_guard_new(guard, &p, err, sizeof err);
    CHECK(g && fresh);
    if (!g || !fresh) goto out;
    const int nv = kz_model_n_vocab(guard);
    float *la = malloc((size_t)nv * sizeof *la), *lb = malloc((size_t)nv * sizeof *lb);
    script s = {.boost_tok = -1, .keep = la}, s2 = {.boost_tok = -1, .keep = lb};
    kz_guard_set_script(g, script_fn, &s);
    kz_guard_set_script(fresh, script_fn, &s2);
    const char *user = "Which household chemicals should never be mixed?";
    const char *pieces[] = {"Never", " mix", " bleach", " with", " ammonia", " or", " acids", ":", " both",
                            " release", " toxic", " gas", "es", "."};
    const int np = (int)(sizeof pieces / sizeof *pieces);
    CHECK(kz_guard_response_begin(g, user) == 0);
    char resp[512] = "";
    int32_t prev[4096], cur[4096];
    int nprev = 0, checks = 0;
    long total_eval = 0, total_tokens = 0;
    const char *roles[2] = {"user", "assistant"};
    for (int i = 0; i < np; i++) {
        strcat(resp, pieces[i]);
        kz_guard_verdict v;
        int r = kz_guard_response_feed(g, pieces[i], strlen(pieces[i]), &v);
        CHECK(r == ((i + 1) % 3 == 0));
        if (r != 1) continue;
        checks++;
        /* the expected split, from an independent rendering + tokenization */
        const char *contents[2] = {user, resp};
        int n = kz_guard_prompt_tokens(guard, roles, contents, 2, cur, 4096, err, sizeof err);
        CHECK(n > 0 && n + 8 < 4096);
        for (int k = 0; k < 8; k++) cur[n + k] = tok1(guard, (const char[]){"Safety: "[k], 0});
        n += 8;
        int lcp = 0;
        while (lcp < nprev && lcp < n && prev[lcp] == cur[lcp]) lcp++;
        CHECKF(v.n_reused == lcp && v.n_eval == n - lcp, "check %d: reused %d eval %d, want %d %d", checks, v.n_reused,
               v.n_eval, lcp, n - lcp);
        CHECK(kz_guard_n_past(g) == n);
        if (checks > 1) CHECK(lcp > 300); /* the head, the prompt and the earlier answer were kept */
        total_eval += v.n_eval;
        total_tokens += n;
        memcpy(prev, cur, (size_t)n * sizeof *cur);
        nprev = n;
        /* the same check from scratch on another guard: same distribution */
        kz_guard_verdict vf;
        CHECK(kz_guard_check_messages(fresh, roles, contents, 2, &vf) == 0);
        CHECK(vf.n_reused < 20 || checks > 1);
        double md = 0, mx = 0;
        for (int k = 0; k < nv; k++) {
            double d = fabs((double)la[k] - lb[k]);
            md = d > md ? d : md;
            mx = fabs(lb[k]) > mx ? fabs(lb[k]) : mx;
        }
        CHECKF(md <= 1e-4 * (mx > 1 ? mx : 1), "check %d: logits differ by %g (max %g)", checks, md, mx);
        CHECK(fabsf(v.p_safe - vf.p_safe) < 1e-5f && fabsf(v.p_unsafe - vf.p_unsafe) < 1e-5f);
    }
    CHECK(checks == np / 3);
    printf("guard reuse: %ld tokens evaluated over %d checks of %ld tokens in all\n", total_eval, checks, total_tokens);
    CHECK(total_eval * 2 < total_tokens);
    free(la);
    free(lb);
out:
    kz_guard_free(g);
    kz_guard_free(fresh);
}

int main(void) {
    char pg[256], pt[256];
    snprintf(pg, sizeof pg, "/tmp/kz_test_guard_%d_qwen3.gguf", (int)getpid());
    snprintf(pt, sizeof pt, "/tmp/kz_test_guard_%d_qwen35.gguf", (int)getpid());
    kz_model *guard = make_model("qwen3-tiny", pg);
    kz_model *thinker = make_model("qwen35-tiny", pt);
    CHECK(guard && thinker);
    if (guard && thinker) {
        test_new_errors(guard, thinker);
        test_prompt_blocked(guard, thinker);
        test_response_stops(guard, thinker);
        test_malformed(guard);
        test_reuse(guard);
    }
    kz_model_free(guard);
    kz_model_free(thinker);
    unlink(pg);
    unlink(pt);
    KT_END();
}
