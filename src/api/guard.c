/* Guard cascade (include/kazeia.h, "guard cascade"): Qwen3Guard-Gen prompt and response
 * moderation on a guard model's own sequence. docs/guard.md has the formats and the design.
 *
 * One check = render the conversation with the guard's template (text/guard_prompt.c), append
 * the tokens of "Safety:" (the part the three labels share), evaluate only what the sequence
 * does not hold yet, read the label from the next-token distribution (the first token where
 * "Safety: Safe" / "Safety: Controversial" / "Safety: Unsafe" differ), then generate the
 * Categories / Refusal lines greedily (bounded) and parse them.
 *
 * State reuse: the guard is attention-only, so its sequence can be rewound to any position by
 * setting n_past (later KV rows are overwritten). Each check keeps the longest common token
 * prefix of what the sequence holds and the new rendering, and evaluates the rest. Within one
 * answer that prefix is the template head, the user's prompt and the answer up to its last
 * pre-token boundary; the tail (template text after the answer, "Safety:", the generated lines)
 * is evaluated again at every check, since the template puts text after the answer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "api/guard.h"
#include "api/api.h"
#include "forward/seq.h"
#include "model/model.h"
#include "nn/ops.h"
#include "sys/clock.h"
#include "sys/err.h"
#include "text/chat.h"
#include "text/guard_prompt.h"
#include "text/tokenizer.h"

#define N_CATS 9
static const char *const k_cat[N_CATS] = {"Violent", "Non-violent Illegal Acts", "Sexual Content or Sexual Acts",
                                          "PII", "Suicide & Self-Harm", "Unethical Acts",
                                          "Politically Sensitive Topics", "Copyright Violation", "Jailbreak"};
static const char *const k_label[3] = {"Safe", "Controversial", "Unsafe"}; /* kz_guard_label order */
#define MAX_PREFIX 32 /* tokens of "Safety:" (+ space on a byte vocabulary) */

struct kz_guard {
    kz_model *m;
    kz_seq *seq;
    kz_guard_params p;
    int n_vocab;
    int32_t *hist; /* n_ctx: tokens the sequence holds */
    int n_hist;
    float *logits;
    int32_t prefix[MAX_PREFIX]; /* tokens of the labels' common prefix ("Safety:") */
    int n_prefix;
    int32_t label_tok[3]; /* first token of each label after the prefix */
    char prefix_text[64];
    /* the answer under response moderation */
    char *user;
    char *resp;
    size_t resp_len, resp_cap;
    int resp_active, pieces;
    /* test double and counters */
    kz_guard_script_fn script;
    void *script_user;
    int n_checks;
    long n_evaluated;
    char err[512];
    kz_status status;
};

__attribute__((format(printf, 3, 4)))
static void set_err(kz_guard *g, kz_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    g->status = st;
}
static void begin(kz_guard *g) {
    g->err[0] = 0;
    g->status = KZ_OK;
}

const char *kz_guard_category_name(int i) { return i >= 0 && i < N_CATS ? k_cat[i] : NULL; }

kz_guard_params kz_guard_default_params(void) {
    kz_guard_params p;
    memset(&p, 0, sizeof p);
    p.policy = KZ_GUARD_STRICT;
    p.action = KZ_GUARD_BLOCK;
    p.check_every = 32;
    p.max_verdict_tokens = 24;
    p.n_ctx = 0;
    p.n_threads = 0;
    p.kv_type = KZ_KV_F16;
    return p;
}

/* The labels' common token prefix and first distinct tokens; 0, or -1 when the vocabulary
 * cannot tell them apart at one token. */
static int label_tokens(kz_guard *g, char *err, size_t errlen) {
    int32_t t[3][64];
    int n[3];
    for (int i = 0; i < 3; i++) {
        char s[48];
        snprintf(s, sizeof s, "Safety: %s", k_label[i]);
        n[i] = kz_tok_encode(g->m->tok, s, strlen(s), 0, t[i], 64);
        if (n[i] < 1 || n[i] > 64) { kz_seterr(err, errlen, "guard model: cannot tokenize '%s'", s); return -1; }
    }
    int L = 0;
    while (L < n[0] && L < n[1] && L < n[2] && t[0][L] == t[1][L] && t[0][L] == t[2][L]) L++;
    if (L < 1 || L > MAX_PREFIX || L >= n[0] || L >= n[1] || L >= n[2] || t[0][L] == t[1][L] ||
        t[0][L] == t[2][L] || t[1][L] == t[2][L]) {
        kz_seterr(err, errlen, "guard model: its vocabulary does not separate 'Safe', 'Controversial' and 'Unsafe' "
                  "after 'Safety:' by one token (not a Qwen3Guard-Gen model?)");
        return -1;
    }
    memcpy(g->prefix, t[0], (size_t)L * sizeof *g->prefix);
    g->n_prefix = L;
    for (int i = 0; i < 3; i++) g->label_tok[i] = t[i][L];
    size_t o = 0;
    for (int i = 0; i < L; i++) {
        char b[32];
        int k = kz_tok_bytes(g->m->tok, g->prefix[i], b, sizeof b);
        if (k > 0 && o + (size_t)k < sizeof g->prefix_text) { memcpy(g->prefix_text + o, b, (size_t)k); o += (size_t)k; }
    }
    g->prefix_text[o] = 0;
    return 0;
}

kz_guard *kz_guard_new(kz_model *m, const kz_guard_params *pp, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!m) { kz_seterr(err, errlen, "kz_guard_new: guard model is NULL"); return NULL; }
    kz_guard_params p = pp ? *pp : kz_guard_default_params();
    if (p.policy != KZ_GUARD_STRICT && p.policy != KZ_GUARD_LOOSE) {
        kz_seterr(err, errlen, "kz_guard_new: unknown policy %d (KZ_GUARD_STRICT or KZ_GUARD_LOOSE)", (int)p.policy);
        return NULL;
    }
    if (p.action != KZ_GUARD_BLOCK && p.action != KZ_GUARD_FLAG) {
        kz_seterr(err, errlen, "kz_guard_new: unknown action %d (KZ_GUARD_BLOCK or KZ_GUARD_FLAG)", (int)p.action);
        return NULL;
    }
    if (p.check_every < 0 || p.max_verdict_tokens < 0 || p.max_verdict_tokens > 256 || p.n_ctx < 0 || p.n_threads < 0) {
        kz_seterr(err, errlen, "kz_guard_new: check_every, n_ctx, n_threads must be >= 0 and max_verdict_tokens in "
                  "0..256 (got %d, %d, %d, %d)", p.check_every, p.n_ctx, p.n_threads, p.max_verdict_tokens);
        return NULL;
    }
    if (m->hp.n_gdn_layers > 0) {
        kz_seterr(err, errlen, "kz_guard_new: the guard model must be attention-only (qwen3, e.g. Qwen3Guard-Gen), "
                  "this one is %s with recurrent layers", m->arch_name);
        return NULL;
    }
    kz_guard *g = calloc(1, sizeof *g);
    if (!g) { kz_seterr(err, errlen, "out of memory"); return NULL; }
    g->m = m;
    if (p.n_ctx == 0) p.n_ctx = 4096;
    if (p.n_threads == 0) p.n_threads = m->n_threads;
    g->p = p;
    g->n_vocab = m->hp.n_vocab;
    if (label_tokens(g, err, errlen)) { kz_guard_free(g); return NULL; }
    char e[384] = "";
    g->seq = kz_seq_new(m, p.n_ctx, 512, p.n_threads, p.kv_type, e, sizeof e);
    if (!g->seq) { kz_seterr(err, errlen, "guard context: %s", e); kz_guard_free(g); return NULL; }
    g->hist = malloc((size_t)p.n_ctx * sizeof *g->hist);
    g->logits = malloc((size_t)g->n_vocab * sizeof *g->logits);
    if (!g->hist || !g->logits) { kz_seterr(err, errlen, "out of memory"); kz_guard_free(g); return NULL; }
    return g;
}

void kz_guard_free(kz_guard *g) {
    if (!g) return;
    kz_seq_free(g->seq);
    free(g->hist);
    free(g->logits);
    free(g->user);
    free(g->resp);
    free(g);
}

const char *kz_guard_error(const kz_guard *g) { return g ? g->err : "guard is NULL"; }
kz_status kz_guard_status(const kz_guard *g) { return g ? g->status : KZ_ERR_INVALID_ARG; }
void kz_guard_set_script(kz_guard *g, kz_guard_script_fn fn, void *user) {
    if (g) { g->script = fn; g->script_user = user; }
}
long kz_guard_n_evaluated(const kz_guard *g) { return g ? g->n_evaluated : 0; }
int kz_guard_n_past(const kz_guard *g) { return g ? g->n_hist : 0; }

/* ---- the output grammar (../shared/data/qwen3guard/output_grammar.md) ---- */

typedef struct {
    int label;          /* -1: no valid Safety line */
    unsigned cats;
    int refusal;        /* -1: none / invalid */
    int ok;             /* every line the task asks for is present and valid */
} parsed;

/* [*p, end of line) trimmed of trailing spaces / CR; advances *p past the newline */
static size_t next_line(const char **p, const char **line) {
    const char *s = *p, *e = strchr(s, '\n');
    if (!e) e = s + strlen(s);
    *line = s;
    *p = *e ? e + 1 : e;
    size_t n = (size_t)(e - s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    return n;
}
static int eq(const char *s, size_t n, const char *lit) { return strlen(lit) == n && !memcmp(s, lit, n); }
static int starts(const char *s, size_t n, const char *lit) { size_t k = strlen(lit); return n >= k && !memcmp(s, lit, k); }

static void parse_output(const char *text, int response, parsed *o) {
    o->label = -1;
    o->cats = 0;
    o->refusal = -1;
    o->ok = 0;
    const char *p = text, *l;
    size_t n;
    do n = next_line(&p, &l); while (n == 0 && *p); /* blank lines before the first */
    int ok = 0;
    if (starts(l, n, "Safety: "))
        for (int i = 0; i < 3; i++)
            if (eq(l + 8, n - 8, k_label[i])) { o->label = i; ok = 1; }
    n = next_line(&p, &l);
    int cats_ok = 0;
    if (starts(l, n, "Categories:")) {
        cats_ok = 1;
        const char *s = l + 11, *e = l + n;
        int none = 0, items = 0;
        while (s <= e) {
            const char *c = memchr(s, ',', (size_t)(e - s));
            if (!c) c = e;
            const char *a = s, *b = c;
            while (a < b && *a == ' ') a++;
            while (b > a && b[-1] == ' ') b--;
            int known = 0;
            if (eq(a, (size_t)(b - a), "None")) none = known = 1;
            for (int i = 0; i < N_CATS; i++)
                if (eq(a, (size_t)(b - a), k_cat[i])) { o->cats |= 1u << i; known = 1; }
            if (!known) cats_ok = 0;
            items++;
            s = c + 1;
        }
        if (none && items > 1) cats_ok = 0;
    }
    ok = ok && cats_ok;
    if (response) {
        n = next_line(&p, &l);
        if (eq(l, n, "Refusal: Yes")) o->refusal = 1;
        else if (eq(l, n, "Refusal: No")) o->refusal = 0;
        else ok = 0;
    }
    o->ok = ok;
}

/* ---- one check ---- */

static void fail_closed(kz_guard_verdict *v) {
    memset(v, 0, sizeof *v);
    v->label = KZ_GUARD_UNSAFE;
    v->refusal = -1;
    v->unsafe = v->blocked = 1;
    v->malformed = 1;
}

/* rewind the sequence to from, then evaluate toks[0..n) after it; 0 or -1 */
static int eval_at(kz_guard *g, int from, const int32_t *toks, int n) {
    if (kz_seq_set_n_past(g->seq, from) != 0) { set_err(g, KZ_ERR_INTERNAL, "guard: cannot rewind to %d", from); return -1; }
    g->n_hist = from;
    char e[384] = "";
    if (kz_forward(g->m, g->seq, toks, n, g->logits, 0, e, sizeof e) != 0) {
        kz_seq_reset(g->seq);
        g->n_hist = 0;
        set_err(g, kz_status_from_message(e, KZ_ERR_INTERNAL), "guard: %s", e[0] ? e : "forward pass failed");
        return -1;
    }
    memcpy(g->hist + from, toks, (size_t)n * sizeof *toks);
    g->n_hist = from + n;
    g->n_evaluated += n;
    return 0;
}

static void append_text(char *dst, size_t cap, size_t *len, const char *s, size_t n) {
    if (*len + n >= cap) n = cap - 1 - *len;
    memcpy(dst + *len, s, n);
    *len += n;
    dst[*len] = 0;
}

/* final: lines always generated (else only for a label other than Safe) */
static int run_check(kz_guard *g, const kz_guard_msg *msgs, int n, int final, kz_guard_verdict *v) {
    const double t0 = kz_now_ms();
    const int response = !(n > 0 && msgs[n - 1].role && !strcmp(msgs[n - 1].role, "user"));
    fail_closed(v);
    if (n <= 0) { set_err(g, KZ_ERR_INVALID_ARG, "guard: nothing to check (no messages)"); return -1; }
    kz_chat_seg *segs = malloc(KZ_GUARD_SEGS(n) * sizeof *segs);
    if (!segs) { set_err(g, KZ_ERR_NOMEM, "guard: out of memory"); return -1; }
    int32_t *toks = NULL;
    char e[384] = "";
    int nt = kz_chat_tokenize(g->m->tok, segs, kz_guard_segments(msgs, n, segs), &toks, e, sizeof e);
    free(segs);
    if (nt < 0) { set_err(g, kz_status_from_message(e, KZ_ERR_INVALID_ARG), "guard: %s", e); return -1; }
    const int n_full = nt + g->n_prefix;
    if (n_full + g->p.max_verdict_tokens > g->p.n_ctx) {
        set_err(g, KZ_ERR_CTX_FULL, "guard: the conversation is %d tokens + %d for the verdict, more than the guard's "
                "n_ctx %d (raise kz_guard_params.n_ctx)", n_full, g->p.max_verdict_tokens, g->p.n_ctx);
        free(toks);
        return -1;
    }
    int32_t *full = realloc(toks, (size_t)n_full * sizeof *full);
    if (!full) { free(toks); set_err(g, KZ_ERR_NOMEM, "guard: out of memory"); return -1; }
    memcpy(full + nt, g->prefix, (size_t)g->n_prefix * sizeof *full);
    int lcp = 0;
    while (lcp < g->n_hist && lcp < n_full && g->hist[lcp] == full[lcp]) lcp++;
    if (lcp == n_full) lcp--; /* the logits after the last token are needed */
    int rc = eval_at(g, lcp, full + lcp, n_full - lcp);
    free(full);
    if (rc) return -1;
    v->n_reused = lcp;
    v->n_eval = n_full - lcp;

    char text[512];
    size_t tl = 0;
    text[0] = 0;
    int have_text = 0;
    if (g->script && g->script(g->script_user, response, g->n_checks, g->logits, g->n_vocab, text, sizeof text)) {
        text[sizeof text - 1] = 0;
        have_text = 1;
    }
    /* the three labels' probabilities (softmax over the whole vocabulary, in double) */
    float mx = g->logits[0];
    for (int i = 1; i < g->n_vocab; i++) mx = g->logits[i] > mx ? g->logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < g->n_vocab; i++) sum += exp((double)g->logits[i] - mx);
    double pl[3];
    int dist = 0;
    for (int i = 0; i < 3; i++) {
        pl[i] = isfinite(sum) && sum > 0 ? exp((double)g->logits[g->label_tok[i]] - mx) / sum : 0;
        if (pl[i] > pl[dist]) dist = i;
    }
    const double mass = pl[0] + pl[1] + pl[2];
    v->p_safe = (float)pl[KZ_GUARD_SAFE];
    v->p_controversial = (float)pl[KZ_GUARD_CONTROVERSIAL];
    v->p_unsafe = (float)pl[KZ_GUARD_UNSAFE];

    if (!have_text && g->p.max_verdict_tokens > 0 && (final || !response || dist != KZ_GUARD_SAFE)) {
        /* greedy lines after "Safety:"; the last token is not evaluated (nothing reads its logits) */
        append_text(text, sizeof text, &tl, g->prefix_text, strlen(g->prefix_text));
        int32_t tok = kz_argmax(g->logits, g->n_vocab);
        for (int i = 0; i < g->p.max_verdict_tokens; i++) {
            if (kz_tok_is_eog(g->m->tok, tok)) break;
            char b[256];
            int k = kz_tok_bytes(g->m->tok, tok, b, sizeof b);
            if (k > 0) append_text(text, sizeof text, &tl, b, (size_t)(k < (int)sizeof b ? k : (int)sizeof b));
            if (i + 1 == g->p.max_verdict_tokens) break;
            if (g->n_hist >= g->p.n_ctx) break;
            if (eval_at(g, g->n_hist, &tok, 1)) return -1;
            v->n_eval++;
            tok = kz_argmax(g->logits, g->n_vocab);
        }
        have_text = 1;
    }
    g->n_checks++;

    parsed o = {-1, 0, -1, 0};
    if (have_text) parse_output(text, response, &o);
    v->malformed = have_text ? !o.ok : mass < 0.5;
    v->label = o.label >= 0 ? (kz_guard_label)o.label
             : mass >= 0.5 ? (kz_guard_label)dist : KZ_GUARD_CONTROVERSIAL;
    v->categories = o.cats;
    v->refusal = response ? o.refusal : -1;
    v->unsafe = v->label == KZ_GUARD_UNSAFE || (g->p.policy == KZ_GUARD_STRICT && v->label == KZ_GUARD_CONTROVERSIAL);
    v->blocked = v->unsafe && g->p.action == KZ_GUARD_BLOCK;
    size_t keep = strlen(text) < sizeof v->text - 1 ? strlen(text) : sizeof v->text - 1; /* cut to fit */
    memcpy(v->text, text, keep);
    v->text[keep] = 0;
    v->t_ms = kz_now_ms() - t0;
    return 0;
}

int kz_guard_check_messages(kz_guard *g, const char *const *roles, const char *const *contents, int n,
                            kz_guard_verdict *v) {
    kz_guard_verdict tmp;
    if (!v) v = &tmp;
    fail_closed(v);
    if (!g) return -1;
    begin(g);
    if (n <= 0 || !roles || !contents) {
        set_err(g, KZ_ERR_INVALID_ARG, "kz_guard_check_messages: need at least one message (got %d)", n);
        return -1;
    }
    kz_guard_msg *m = malloc((size_t)n * sizeof *m);
    if (!m) { set_err(g, KZ_ERR_NOMEM, "guard: out of memory"); return -1; }
    for (int i = 0; i < n; i++) {
        m[i].role = roles[i];
        m[i].content = contents[i];
    }
    int r = run_check(g, m, n, 1, v);
    free(m);
    return r;
}

int kz_guard_check_prompt(kz_guard *g, const char *user, kz_guard_verdict *v) {
    const char *role = "user";
    const char *content = user ? user : "";
    return kz_guard_check_messages(g, &role, &content, 1, v);
}

int kz_guard_response_begin(kz_guard *g, const char *user) {
    if (!g) return -1;
    begin(g);
    char *u = strdup(user ? user : "");
    if (!u) { set_err(g, KZ_ERR_NOMEM, "guard: out of memory"); return -1; }
    free(g->user);
    g->user = u;
    g->resp_len = 0;
    if (g->resp) g->resp[0] = 0;
    g->pieces = 0;
    g->resp_active = 1;
    return 0;
}

static int response_check(kz_guard *g, int final, kz_guard_verdict *v) {
    kz_guard_msg m[2] = {{"user", g->user}, {"assistant", g->resp ? g->resp : ""}};
    return run_check(g, m, 2, final, v);
}

int kz_guard_response_feed(kz_guard *g, const char *text, size_t len, kz_guard_verdict *v) {
    kz_guard_verdict tmp;
    if (!v) v = &tmp;
    if (!g) { fail_closed(v); return -1; }
    begin(g);
    if (!g->resp_active) {
        fail_closed(v);
        set_err(g, KZ_ERR_INVALID_ARG, "kz_guard_response_feed: call kz_guard_response_begin first");
        return -1;
    }
    if (len > 0 && !text) { fail_closed(v); set_err(g, KZ_ERR_INVALID_ARG, "kz_guard_response_feed: text is NULL"); return -1; }
    if (len > ((size_t)1 << 30) || g->resp_len + len + 1 < g->resp_len) {
        fail_closed(v);
        set_err(g, KZ_ERR_INVALID_ARG, "kz_guard_response_feed: answer too long");
        return -1;
    }
    if (g->resp_len + len + 1 > g->resp_cap) {
        size_t cap = (g->resp_len + len + 1) * 2;
        char *b = realloc(g->resp, cap);
        if (!b) { fail_closed(v); set_err(g, KZ_ERR_NOMEM, "guard: out of memory"); return -1; }
        g->resp = b;
        g->resp_cap = cap;
    }
    if (len) memcpy(g->resp + g->resp_len, text, len);
    g->resp_len += len;
    g->resp[g->resp_len] = 0;
    if (g->p.check_every <= 0 || ++g->pieces < g->p.check_every) return 0;
    g->pieces = 0;
    return response_check(g, 0, v) ? -1 : 1;
}

int kz_guard_response_end(kz_guard *g, kz_guard_verdict *v) {
    kz_guard_verdict tmp;
    if (!v) v = &tmp;
    if (!g) { fail_closed(v); return -1; }
    begin(g);
    if (!g->resp_active) {
        fail_closed(v);
        set_err(g, KZ_ERR_INVALID_ARG, "kz_guard_response_end: call kz_guard_response_begin first");
        return -1;
    }
    g->resp_active = 0;
    return response_check(g, 1, v);
}

int kz_guard_stream_piece(const char *piece, size_t len, void *userdata) {
    kz_guard_stream *s = userdata;
    if (!s || !s->guard) return 1;
    if (s->cb && s->cb(piece, len, s->userdata) != 0) return 1;
    kz_guard_verdict v;
    int r = kz_guard_response_feed(s->guard, piece, len, &v);
    if (r == 0) return 0;
    s->verdict = v;
    if (r < 0) { s->error = s->stopped = 1; return 1; }
    s->n_checks++;
    if (v.blocked) { s->stopped = 1; return 1; }
    return 0;
}

int kz_guard_stream_end(kz_guard_stream *s) {
    if (!s || !s->guard) return -1;
    if (s->stopped) { s->guard->resp_active = 0; return s->error ? -1 : 0; }
    int r = kz_guard_response_end(s->guard, &s->verdict);
    s->n_checks++;
    if (r) s->error = 1;
    return r;
}

int kz_guard_generate(kz_guard *g, kz_context *thinker, const char *system, const char *user, int max_tokens,
                      kz_piece_cb cb, void *userdata, kz_stats *stats, kz_guard_verdict *v) {
    kz_guard_verdict tmp;
    kz_stats st;
    if (!v) v = &tmp;
    if (!stats) stats = &st;
    memset(stats, 0, sizeof *stats);
    stats->stop = KZ_STOP_ERROR;
    fail_closed(v);
    if (!g || !thinker) return -1;
    if (kz_guard_check_prompt(g, user, v) != 0) return -1;
    if (v->blocked) { stats->stop = KZ_STOP_CANCELLED; return 0; }
    if (kz_guard_response_begin(g, user) != 0) return -1;
    kz_guard_stream s;
    memset(&s, 0, sizeof s);
    s.guard = g;
    s.cb = cb;
    s.userdata = userdata;
    s.verdict = *v;
    int r = kz_generate(thinker, system, user, max_tokens, kz_guard_stream_piece, &s, stats);
    if (r != 0) { g->resp_active = 0; fail_closed(v); return -1; }
    if (kz_guard_stream_end(&s) != 0) { fail_closed(v); return -1; }
    *v = s.verdict;
    return 0;
}
