/* Conversations (kazeia.h, "conversations"): message list, template rendering, prefix reuse with
 * GDN-state checkpoints, the reply through the shared decode loop, save / load.
 *
 * Reuse: the new rendering is compared with the tokens the context holds. If it extends them, only
 * the rest is evaluated. Otherwise the latest checkpoint whose tokens start both the new rendering
 * and the context's history is restored: its GDN conv + recurrent state is copied back and the
 * position rewound; the KV rows before it are the context's own (same tokens), so a checkpoint
 * holds no KV. Prefill splits at the end of the last user turn and checkpoints there, so a turn
 * restored from a checkpoint computes the same chunks as the previous turn did (bit-identical
 * logits with a from-scratch evaluation split at the same boundaries; tests/test_conversation.c).
 *
 * File (little-endian, version 1): "KZCHAT\0\0", u32 version, u32 arch (0 qwen3 / 1 qwen35),
 * u32 think, u32 max_checkpoints, u32 n_messages, per message {u32 role, u32 bytes, text},
 * u64 image bytes + the context's state image (state.c, own checksum), u32 n_checkpoints, per
 * checkpoint {u32 n_tokens, u64 n_floats, tokens, floats}, u64 FNV-1a of everything before it.
 * A checkpoint's floats: the GDN states, then (n_floats = n_gdn + n_embd) the MTP hidden. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "api/api.h"
#include "api/chat_api.h"
#include "api/context.h"
#include "forward/state.h"
#include "model/model.h"
#include "sys/clock.h"
#include "text/chat.h"
#include "text/chat_template.h"

typedef struct {
    int ntok;
    int32_t *tok;   /* the tokens the sequence held */
    float *gdn;     /* conv then recurrent state of every GDN layer (n_gdn floats; none for qwen3),
                     * then with has_mtp the MTP draft hidden (n_embd floats) */
    int has_mtp;
} ckpt;

typedef struct { int role; char *text; size_t len; } msg;

struct kz_chat {
    kz_context *c;
    kz_chat_params p;
    kz_chat_arch arch;
    msg *msgs;
    int n_msgs, cap_msgs;
    ckpt *ck;       /* [p.max_checkpoints], oldest first */
    int n_ck;
    size_t n_gdn;   /* floats per checkpoint */
    char err[512];
    kz_status status;
};

static const char MAGIC[8] = {'K', 'Z', 'C', 'H', 'A', 'T', 0, 0};
#define CHAT_VERSION 1u

__attribute__((format(printf, 3, 4)))
static int fail(kz_chat *h, kz_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    h->status = st;
    return -1;
}
static void begin(kz_chat *h) { h->err[0] = 0; h->status = KZ_OK; }

kz_chat_params kz_chat_default_params(void) {
    kz_chat_params p = {.think = 1, .max_checkpoints = 2};
    return p;
}

kz_gen_params kz_gen_default_params(const kz_model *m, int think) {
    kz_gen_params g;
    memset(&g, 0, sizeof g);
    g.max_tokens = 0;
    g.think = think ? 1 : 0;
    const int q35 = m && m->hp.arch == KZ_ARCH_QWEN35;
    g.temperature = think ? (q35 ? 1.0f : 0.6f) : 0.7f;
    g.top_p = think ? 0.95f : 0.8f;
    g.top_k = 20;
    g.min_p = 0.0f;
    g.presence_penalty = q35 ? 1.5f : 0.0f;
    g.repeat_penalty = 1.0f;
    g.frequency_penalty = 0.0f;
    g.repeat_last_n = 64;
    g.seed = 0;
    kz_model_sampling(m, &g);
    return g;
}

static void ck_free(ckpt *k) { free(k->tok); free(k->gdn); memset(k, 0, sizeof *k); }

static void ck_drop(kz_chat *h, int i) {
    ck_free(&h->ck[i]);
    memmove(h->ck + i, h->ck + i + 1, (size_t)(h->n_ck - i - 1) * sizeof *h->ck);
    h->n_ck--;
}

kz_chat *kz_chat_new(kz_context *c, const kz_chat_params *pp, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!c) { if (err && errlen) snprintf(err, errlen, "kz_chat_new: context is NULL"); return NULL; }
    kz_chat_params p = pp ? *pp : kz_chat_default_params();
    if (p.max_checkpoints < 0 || p.max_checkpoints > 1024) {
        if (err && errlen) snprintf(err, errlen, "max_checkpoints must be in 0..1024 (got %d)", p.max_checkpoints);
        return NULL;
    }
    if (p.max_checkpoints == 0) p.max_checkpoints = 2;
    p.think = p.think ? 1 : 0;
    kz_chat *h = calloc(1, sizeof *h);
    if (h) h->ck = calloc((size_t)p.max_checkpoints, sizeof *h->ck);
    if (!h || !h->ck) {
        free(h);
        if (err && errlen) snprintf(err, errlen, "out of memory allocating a conversation");
        return NULL;
    }
    h->c = c;
    h->p = p;
    h->arch = c->m->hp.arch == KZ_ARCH_QWEN35 ? KZ_CHAT_QWEN35 : KZ_CHAT_QWEN3;
    kz_seq_view v;
    kz_seq_view_get(c->seq, &v);
    h->n_gdn = v.n_conv + v.n_ssm;
    return h;
}

static void msgs_clear(kz_chat *h, int from) {
    for (int i = from; i < h->n_msgs; i++) free(h->msgs[i].text);
    if (from < h->n_msgs) h->n_msgs = from;
}

void kz_chat_free(kz_chat *h) {
    if (!h) return;
    msgs_clear(h, 0);
    free(h->msgs);
    for (int i = 0; i < h->n_ck; i++) ck_free(&h->ck[i]);
    free(h->ck);
    free(h);
}

const char *kz_chat_error(const kz_chat *h) { return h ? h->err : "conversation is NULL"; }
kz_status kz_chat_status(const kz_chat *h) { return h ? h->status : KZ_ERR_INVALID_ARG; }
int kz_chat_n_messages(const kz_chat *h) { return h ? h->n_msgs : 0; }
int kz_chat_message_role(const kz_chat *h, int i) { return h && i >= 0 && i < h->n_msgs ? h->msgs[i].role : -1; }
const char *kz_chat_message_text(const kz_chat *h, int i) {
    return h && i >= 0 && i < h->n_msgs ? h->msgs[i].text : NULL;
}
int kz_chat_n_checkpoints(const kz_chat *h) { return h ? h->n_ck : 0; }

size_t kz_chat_memory(const kz_chat *h) {
    if (!h) return 0;
    size_t n = sizeof *h + (size_t)h->p.max_checkpoints * sizeof *h->ck + (size_t)h->cap_msgs * sizeof *h->msgs;
    for (int i = 0; i < h->n_ck; i++)
        n += (size_t)h->ck[i].ntok * sizeof(int32_t) +
             (h->n_gdn + (h->ck[i].has_mtp ? (size_t)h->c->m->hp.n_embd : 0)) * sizeof(float);
    for (int i = 0; i < h->n_msgs; i++) n += h->msgs[i].len + 1;
    return n;
}

/* insert a copy of text[0..len) at position at */
static int msg_insert(kz_chat *h, int at, int role, const char *text, size_t len) {
    if (h->n_msgs == h->cap_msgs) {
        int cap = h->cap_msgs ? h->cap_msgs * 2 : 16;
        msg *m = realloc(h->msgs, (size_t)cap * sizeof *m);
        if (!m) return fail(h, KZ_ERR_NOMEM, "out of memory adding a message");
        h->msgs = m;
        h->cap_msgs = cap;
    }
    char *t = malloc(len + 1);
    if (!t) return fail(h, KZ_ERR_NOMEM, "out of memory copying a %zu-byte message", len);
    memcpy(t, text, len);
    t[len] = 0;
    memmove(h->msgs + at + 1, h->msgs + at, (size_t)(h->n_msgs - at) * sizeof *h->msgs);
    h->msgs[at].role = role;
    h->msgs[at].text = t;
    h->msgs[at].len = len;
    h->n_msgs++;
    return 0;
}

int kz_chat_add(kz_chat *h, kz_role role, const char *text) {
    if (!h) return -1;
    begin(h);
    if (role != KZ_ROLE_SYSTEM && role != KZ_ROLE_USER && role != KZ_ROLE_ASSISTANT)
        return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_add: unknown role %d", (int)role);
    if (!text) return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_add: text is NULL");
    if (role == KZ_ROLE_SYSTEM && h->n_msgs > 0 && h->arch == KZ_CHAT_QWEN35)
        return fail(h, KZ_ERR_INVALID_ARG,
                    "kz_chat_add: Qwen3.5's template takes a system message only first (use kz_chat_set_system)");
    return msg_insert(h, h->n_msgs, role, text, strlen(text));
}

int kz_chat_set_system(kz_chat *h, const char *text) {
    if (!h) return -1;
    begin(h);
    int has = h->n_msgs > 0 && h->msgs[0].role == KZ_ROLE_SYSTEM;
    if (has) {
        free(h->msgs[0].text);
        memmove(h->msgs, h->msgs + 1, (size_t)(h->n_msgs - 1) * sizeof *h->msgs);
        h->n_msgs--;
    }
    if (!text || !text[0]) return 0;
    return msg_insert(h, 0, KZ_ROLE_SYSTEM, text, strlen(text));
}

int kz_chat_pop(kz_chat *h) {
    if (!h) return -1;
    begin(h);
    if (h->n_msgs == 0) return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_pop: the conversation has no message");
    msgs_clear(h, h->n_msgs - 1);
    return 0;
}

void kz_chat_reset(kz_chat *h) {
    if (!h) return;
    begin(h);
    msgs_clear(h, h->n_msgs > 0 && h->msgs[0].role == KZ_ROLE_SYSTEM ? 1 : 0);
    while (h->n_ck) ck_drop(h, h->n_ck - 1);
}

/* rendering of msgs[0..upto) (+ generation prompt) as segments */
static int render(kz_chat *h, int upto, int add_gen, int think, kz_tmpl_out *o) {
    kz_tmpl_msg *m = malloc((size_t)(upto > 0 ? upto : 1) * sizeof *m);
    if (!m) return fail(h, KZ_ERR_NOMEM, "out of memory rendering the conversation");
    for (int i = 0; i < upto; i++) { m[i].role = h->msgs[i].role; m[i].text = h->msgs[i].text; m[i].len = h->msgs[i].len; }
    int r = kz_chat_template_render(h->arch, m, upto, add_gen, think ? 1 : 0, o, h->err, sizeof h->err);
    free(m);
    if (r) h->status = kz_status_from_message(h->err, KZ_ERR_INVALID_ARG);
    return r;
}

static int tokens_of(kz_chat *h, const kz_chat_seg *s, int n, int32_t **out) {
    int nt = kz_chat_tokenize(h->c->m->tok, s, n, out, h->err, sizeof h->err);
    if (nt < 0) h->status = kz_status_from_message(h->err, KZ_ERR_INVALID_ARG);
    return nt;
}

int kz_chat_render_tokens(kz_chat *h, int upto, int add_gen, int think, int32_t **out) {
    *out = NULL;
    if (!h) return -1;
    begin(h);
    if (upto < 0 || upto > h->n_msgs) return fail(h, KZ_ERR_INVALID_ARG, "upto %d outside 0..%d", upto, h->n_msgs);
    kz_tmpl_out o = {0};
    int n = render(h, upto, add_gen, think, &o);
    if (n == 0) n = tokens_of(h, o.segs, o.n, out);
    kz_tmpl_out_free(&o);
    return n;
}

/* checkpoint i is usable for a rendering toks[0..n): a proper prefix of it and of the context's
 * history (whose KV rows it relies on) */
static int ck_fits(const kz_chat *h, const ckpt *k, const int32_t *toks, int n) {
    const kz_context *c = h->c;
    return k->ntok > 0 && k->ntok < n && k->ntok <= c->n_hist && kz_seq_n_past(c->seq) == c->n_hist &&
           !memcmp(k->tok, toks, (size_t)k->ntok * sizeof *toks) &&
           !memcmp(k->tok, c->hist, (size_t)k->ntok * sizeof *toks);
}

static void ck_restore(kz_chat *h, const ckpt *k) {
    kz_context *c = h->c;
    kz_seq_view v;
    kz_seq_view_get(c->seq, &v);
    if (v.n_conv) memcpy(v.conv, k->gdn, v.n_conv * sizeof(float));
    if (v.n_ssm) memcpy(v.ssm, k->gdn + v.n_conv, v.n_ssm * sizeof(float));
    /* the KV rows (MTP draft cache included) before it are the context's own */
    kz_seq_rewind(c->seq, k->ntok, k->has_mtp ? k->gdn + h->n_gdn : NULL);
    c->n_hist = k->ntok;
    c->logits_valid = 0;
    c->logits_argmax = -1;
}

/* checkpoint the sequence as it is now (best effort: none on OOM) */
static void ck_take(kz_chat *h) {
    kz_context *c = h->c;
    /* checkpoints the history has left behind can never be restored again */
    for (int i = h->n_ck - 1; i >= 0; i--) {
        ckpt *k = &h->ck[i];
        if (k->ntok > c->n_hist || memcmp(k->tok, c->hist, (size_t)k->ntok * sizeof *k->tok) || k->ntok == c->n_hist)
            ck_drop(h, i);
    }
    if (h->n_ck == h->p.max_checkpoints) ck_drop(h, 0);
    ckpt k = {.ntok = c->n_hist};
    k.tok = malloc((size_t)c->n_hist * sizeof *k.tok);
    kz_seq_view v;
    kz_seq_view_get(c->seq, &v);
    k.has_mtp = v.mtp_ready;
    k.gdn = malloc((h->n_gdn + (k.has_mtp ? (size_t)c->m->hp.n_embd : 0) + 1) * sizeof *k.gdn);
    if (!k.tok || !k.gdn) { ck_free(&k); return; }
    memcpy(k.tok, c->hist, (size_t)c->n_hist * sizeof *k.tok);
    if (k.has_mtp) memcpy(k.gdn + h->n_gdn, v.mtp_h, (size_t)c->m->hp.n_embd * sizeof(float));
    if (v.n_conv) memcpy(k.gdn, v.conv, v.n_conv * sizeof(float));
    if (v.n_ssm) memcpy(k.gdn + v.n_conv, v.ssm, v.n_ssm * sizeof(float));
    h->ck[h->n_ck++] = k;
}

static int reply_think(const kz_chat *h, int think) { return think < 0 ? h->p.think : think != 0; }

int kz_chat_prefill(kz_chat *h, int think, kz_stats *st) {
    memset(st, 0, sizeof *st);
    st->stop = KZ_STOP_ERROR;
    kz_context *c = h->c;
    begin(h);
    if (h->n_msgs == 0 || h->msgs[h->n_msgs - 1].role != KZ_ROLE_USER)
        return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_reply: the last message must be a user message");
    think = reply_think(h, think);
    kz_tmpl_out o = {0};
    int32_t *toks = NULL, *pre = NULL;
    int n = -1, b = -1;
    if (render(h, h->n_msgs, 1, think, &o) == 0 && (n = tokens_of(h, o.segs, o.n, &toks)) >= 0)
        b = tokens_of(h, o.segs, o.n_before_gen, &pre); /* the checkpoint boundary: end of the user turn */
    kz_tmpl_out_free(&o);
    free(pre);
    if (n < 0 || b < 0) { free(toks); return -1; }
    if (n > c->p.n_ctx) {
        free(toks);
        return fail(h, KZ_ERR_CTX_FULL, "the conversation is %d tokens, the context holds %d (reset it, or raise n_ctx)",
                    n, c->p.n_ctx);
    }
    const double t0 = kz_now_ms();
    /* what to keep: the context as it is, or the latest checkpoint, whichever keeps more */
    int live = c->n_hist <= n && kz_seq_n_past(c->seq) == c->n_hist &&
               !memcmp(c->hist, toks, (size_t)c->n_hist * sizeof *toks) && (c->n_hist < n || c->logits_valid);
    int keep = live ? c->n_hist : 0, best = -1;
    for (int i = 0; i < h->n_ck; i++)
        if (ck_fits(h, &h->ck[i], toks, n) && h->ck[i].ntok > keep) { keep = h->ck[i].ntok; best = i; }
    if (best >= 0) ck_restore(h, &h->ck[best]);
    else if (!live) kz_context_reset(c);
    st->n_reused = keep;
    atomic_store(&c->cancel, 0);
    kz_ctx_begin(c);
    for (int i = keep; i < n;) {
        int k = n - i < c->p.n_batch ? n - i : c->p.n_batch;
        if (i < b && i + k > b) k = b - i; /* the same chunks whether or not a checkpoint is restored */
        if (kz_ctx_cancelled(c)) { st->stop = KZ_STOP_CANCELLED; break; }
        const int last = i + k == n;
        c->logits_valid = 0;
        c->logits_argmax = -1;
        kz_seq_set_abort(c->seq, &c->cancel);
        int r = kz_ctx_eval_chunk(c, toks + i, k, last ? c->logits : NULL, 0);
        kz_seq_set_abort(c->seq, NULL);
        if (r == KZ_FWD_ABORTED) { kz_ctx_begin(c); st->stop = KZ_STOP_CANCELLED; break; }
        if (r != 0) {
            st->n_prompt = c->n_hist > keep ? c->n_hist - keep : 0;
            free(toks);
            return fail(h, c->status, "%s", c->err);
        }
        if (last) { c->logits_valid = 1; c->logits_argmax = kz_seq_logits_argmax(c->seq); }
        i += k;
        if (i == b) ck_take(h);
    }
    st->n_prompt = c->n_hist > keep ? c->n_hist - keep : 0;
    st->t_prefill_ms = kz_now_ms() - t0;
    if (st->stop != KZ_STOP_CANCELLED) st->stop = KZ_STOP_EOG; /* prefill done; kz_chat_reply sets the real one */
    free(toks);
    return 0;
}

typedef struct {
    kz_piece_cb cb;
    void *ud;
    char *buf;
    size_t len, cap;
    int oom;
} collect;

static int collect_cb(const char *p, size_t n, void *ud) {
    collect *k = ud;
    if (k->len + n + 1 > k->cap) {
        size_t cap = (k->len + n + 1) * 2;
        char *b = realloc(k->buf, cap);
        if (!b) { k->oom = 1; return 1; }
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->len, p, n);
    k->len += n;
    k->buf[k->len] = 0;
    return k->cb ? k->cb(p, n, k->ud) : 0;
}

static int has(const char *s, size_t n, const char *lit) {
    size_t l = strlen(lit);
    for (size_t i = 0; i + l <= n; i++) if (!memcmp(s + i, lit, l)) return 1;
    return 0;
}

int kz_chat_reply(kz_chat *h, const kz_gen_params *gp, kz_piece_cb cb, void *ud, kz_stats *stats) {
    kz_stats st;
    memset(&st, 0, sizeof st);
    st.stop = KZ_STOP_ERROR;
    if (stats) *stats = st;
    if (!h) return -1;
    kz_gen_params g = gp ? *gp : kz_gen_default_params(h->c->m, h->p.think);
    const int think = reply_think(h, gp ? g.think : -1);
    if (g.n_stop < 0 || (g.n_stop > 0 && !g.stop)) {
        begin(h);
        return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_reply: n_stop %d with stop %s", g.n_stop, g.stop ? "set" : "NULL");
    }
    for (int i = 0; i < g.n_stop; i++)
        if (!g.stop[i] || !g.stop[i][0]) { begin(h); return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_reply: stop string %d is empty", i); }
    if (g.temperature != g.temperature || g.top_p != g.top_p || g.min_p != g.min_p || !(g.repeat_penalty > 0) ||
        g.repeat_last_n < 0) {
        begin(h);
        return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_reply: a sampling parameter is NaN, or repeat_penalty <= 0, or repeat_last_n < 0");
    }
    if (kz_chat_prefill(h, think, &st) != 0) { if (stats) *stats = st; return -1; }
    if (st.stop == KZ_STOP_CANCELLED) { if (stats) *stats = st; return 0; }
    kz_sampler_params sp = {.temperature = g.temperature, .top_k = g.top_k, .top_p = g.top_p, .min_p = g.min_p,
                            .repeat_penalty = g.repeat_penalty, .repeat_last_n = g.repeat_last_n,
                            .presence_penalty = g.presence_penalty, .frequency_penalty = g.frequency_penalty,
                            .seed = g.seed};
    collect k = {.cb = cb, .ud = ud};
    kz_decode_opts o = {.max_tokens = g.max_tokens, .sp = &sp, .stop = g.stop, .n_stop = g.n_stop,
                        .cb = collect_cb, .ud = &k};
    int r = kz_decode_run(h->c, &o, &st);
    if (r != 0 || k.oom) {
        free(k.buf);
        if (stats) *stats = st;
        if (k.oom) return fail(h, KZ_ERR_NOMEM, "out of memory holding the reply");
        return fail(h, h->c->status ? h->c->status : KZ_ERR_INTERNAL, "%s", h->c->err);
    }
    /* the reply as the template will read it back: a thinking block cut short is closed, so
     * the template's split sees reasoning, not an answer */
    const char *txt = k.buf ? k.buf : "";
    int open = think && (h->arch == KZ_CHAT_QWEN35 || has(txt, k.len, "<think>")) && !has(txt, k.len, "</think>");
    size_t len = k.len;
    if (open) {
        static const char close[] = "\n</think>\n\n";
        char *b = realloc(k.buf, k.len + sizeof close);
        if (!b) { free(k.buf); return fail(h, KZ_ERR_NOMEM, "out of memory holding the reply"); }
        memcpy(b + k.len, close, sizeof close);
        k.buf = b;
        txt = b;
        len += sizeof close - 1;
    }
    r = msg_insert(h, h->n_msgs, KZ_ROLE_ASSISTANT, txt, len);
    free(k.buf);
    if (stats) *stats = st;
    return r;
}

/* ---- save / load ---- */

typedef struct { FILE *f; uint64_t h; int bad; } wfile;

static void w(wfile *o, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { o->h ^= b[i]; o->h *= 0x100000001b3ull; }
    if (n && fwrite(p, 1, n, o->f) != n) o->bad = 1;
}
static void w32(wfile *o, uint32_t v) { w(o, &v, 4); }
static void w64(wfile *o, uint64_t v) { w(o, &v, 8); }

int kz_chat_save(kz_chat *h, const char *path) {
    if (!h) return -1;
    begin(h);
    if (!path) return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_save: no path given");
    kz_context *c = h->c;
    size_t isz = kz_state_size(c);
    if (!isz) return fail(h, c->status, "%s", c->err);
    unsigned char *img = malloc(isz);
    if (!img) return fail(h, KZ_ERR_NOMEM, "out of memory saving the conversation (%zu-byte state)", isz);
    size_t got = kz_state_save(c, img, isz);
    if (!got) { free(img); return fail(h, c->status, "%s", c->err); }
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (!tmp) { free(img); return fail(h, KZ_ERR_NOMEM, "out of memory"); }
    snprintf(tmp, pl + 16, "%s.tmp%ld", path, (long)getpid());
    wfile o = {fopen(tmp, "wb"), 0xcbf29ce484222325ull, 0};
    if (!o.f) {
        int e = errno;
        free(img);
        fail(h, KZ_ERR_IO, "%s: cannot create the conversation file: %s", tmp, strerror(e));
        free(tmp);
        return -1;
    }
    w(&o, MAGIC, 8);
    w32(&o, CHAT_VERSION);
    w32(&o, (uint32_t)h->arch);
    w32(&o, (uint32_t)h->p.think);
    w32(&o, (uint32_t)h->p.max_checkpoints);
    w32(&o, (uint32_t)h->n_msgs);
    for (int i = 0; i < h->n_msgs; i++) {
        w32(&o, (uint32_t)h->msgs[i].role);
        w32(&o, (uint32_t)h->msgs[i].len);
        w(&o, h->msgs[i].text, h->msgs[i].len);
    }
    w64(&o, got);
    w(&o, img, got);
    free(img);
    w32(&o, (uint32_t)h->n_ck);
    for (int i = 0; i < h->n_ck; i++) {
        w32(&o, (uint32_t)h->ck[i].ntok);
        const size_t nf = h->n_gdn + (h->ck[i].has_mtp ? (size_t)c->m->hp.n_embd : 0);
        w64(&o, nf);
        w(&o, h->ck[i].tok, (size_t)h->ck[i].ntok * sizeof(int32_t));
        w(&o, h->ck[i].gdn, nf * sizeof(float));
    }
    uint64_t sum = o.h;
    w64(&o, sum);
    int bad = o.bad || fflush(o.f) != 0 || fsync(fileno(o.f)) != 0;
    bad |= fclose(o.f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        fail(h, KZ_ERR_IO, "%s: cannot write the conversation file: %s", path, bad ? "write failed (disk full?)" : strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

typedef struct { const unsigned char *p; size_t n, at; int bad; } rbuf;

static const unsigned char *rd(rbuf *r, size_t n) {
    if (r->bad || n > r->n - r->at) { r->bad = 1; return NULL; }
    const unsigned char *p = r->p + r->at;
    r->at += n;
    return p;
}
static uint32_t r32(rbuf *r) { const unsigned char *p = rd(r, 4); uint32_t v = 0; if (p) memcpy(&v, p, 4); return v; }
static uint64_t r64(rbuf *r) { const unsigned char *p = rd(r, 8); uint64_t v = 0; if (p) memcpy(&v, p, 8); return v; }

int kz_chat_load(kz_chat *h, const char *path) {
    if (!h) return -1;
    begin(h);
    if (!path) return fail(h, KZ_ERR_INVALID_ARG, "kz_chat_load: no path given");
    FILE *f = fopen(path, "rb");
    if (!f) return fail(h, KZ_ERR_IO, "%s: cannot open the conversation file: %s", path, strerror(errno));
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return fail(h, KZ_ERR_IO, "%s: cannot read it (not a regular file?)", path); }
    unsigned char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    if (!buf) { fclose(f); return fail(h, KZ_ERR_NOMEM, "%s: out of memory reading %ld bytes", path, sz); }
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    msg *nm = NULL;
    ckpt *nk = NULL;
    int n_msgs = 0, n_ck = 0;
    rbuf r = {buf, got, 0, 0};
    const char *why = NULL;
    kz_status st = KZ_ERR_FORMAT;
    if (got != (size_t)sz) { why = "short read"; st = KZ_ERR_IO; goto out; }
    if (got < 8 + 8 || memcmp(buf, MAGIC, 8)) { why = "not a kazeia conversation file"; goto out; }
    {
        uint64_t hsum = 0xcbf29ce484222325ull, want;
        for (size_t i = 0; i < got - 8; i++) { hsum ^= buf[i]; hsum *= 0x100000001b3ull; }
        memcpy(&want, buf + got - 8, 8);
        if (hsum != want) { why = "checksum mismatch (truncated or corrupt file)"; goto out; }
        r.n = got - 8;
    }
    rd(&r, 8);
    if (r32(&r) != CHAT_VERSION) { why = "unsupported version"; goto out; }
    if (r32(&r) != (uint32_t)h->arch) { why = "made for a model of the other architecture"; goto out; }
    uint32_t think = r32(&r), max_ck = r32(&r), nmsg = r32(&r);
    if (r.bad || max_ck < 1 || max_ck > 1024 || nmsg > (r.n - r.at) / 8) { why = "bad header"; goto out; }
    nm = calloc(nmsg ? nmsg : 1, sizeof *nm);
    if (!nm) { why = "out of memory"; st = KZ_ERR_NOMEM; goto out; }
    for (uint32_t i = 0; i < nmsg; i++, n_msgs++) {
        uint32_t role = r32(&r), len = r32(&r);
        const unsigned char *t = rd(&r, len);
        if (!t || role > KZ_ROLE_ASSISTANT) { why = "bad message"; goto out; }
        nm[i].role = (int)role;
        nm[i].len = len;
        if (!(nm[i].text = malloc((size_t)len + 1))) { why = "out of memory"; st = KZ_ERR_NOMEM; goto out; }
        memcpy(nm[i].text, t, len);
        nm[i].text[len] = 0;
    }
    uint64_t ilen = r64(&r);
    const unsigned char *img = ilen <= r.n - r.at ? rd(&r, (size_t)ilen) : NULL;
    if (!img) { why = "bad state image length"; goto out; }
    uint32_t nck = r32(&r);
    if (r.bad || nck > max_ck) { why = "bad checkpoint count"; goto out; }
    nk = calloc(nck ? nck : 1, sizeof *nk);
    if (!nk) { why = "out of memory"; st = KZ_ERR_NOMEM; goto out; }
    for (uint32_t i = 0; i < nck; i++, n_ck++) {
        uint32_t ntok = r32(&r);
        uint64_t ng = r64(&r);
        const size_t with_h = h->n_gdn + (h->c->m->mtp ? (size_t)h->c->m->hp.n_embd : 0);
        if (r.bad || (ng != h->n_gdn && ng != with_h) || ntok < 1 || ntok > (uint32_t)h->c->p.n_ctx) {
            why = "bad checkpoint";
            goto out;
        }
        const unsigned char *tp = rd(&r, (size_t)ntok * 4), *gp = rd(&r, (size_t)ng * 4);
        if (!tp || !gp) { why = "truncated checkpoint"; goto out; }
        nk[i].ntok = (int)ntok;
        nk[i].has_mtp = ng != h->n_gdn; /* the MTP hidden after the GDN states */
        nk[i].tok = malloc((size_t)ntok * 4);
        nk[i].gdn = malloc(((size_t)ng + 1) * 4);
        if (!nk[i].tok || !nk[i].gdn) { why = "out of memory"; st = KZ_ERR_NOMEM; goto out; }
        memcpy(nk[i].tok, tp, (size_t)ntok * 4);
        memcpy(nk[i].gdn, gp, (size_t)ng * 4);
    }
    if (r.at != r.n) { why = "trailing bytes"; goto out; }
    /* everything parsed: the state image is the last thing that can fail, and leaves the context
     * as it was when it does */
    {
        char e[384];
        if (kz_ctx_state_load(h->c, img, (size_t)ilen, e, sizeof e) != 0) {
            fail(h, kz_status_from_message(e, KZ_ERR_FORMAT), "%s: %s", path, e);
            goto out_quiet;
        }
    }
    msgs_clear(h, 0);
    free(h->msgs);
    h->msgs = nm;
    h->n_msgs = h->cap_msgs = n_msgs;
    nm = NULL;
    n_msgs = 0;
    for (int i = 0; i < h->n_ck; i++) ck_free(&h->ck[i]);
    h->n_ck = 0;
    if ((int)max_ck != h->p.max_checkpoints) {
        ckpt *b = realloc(h->ck, (size_t)max_ck * sizeof *b);
        if (b) { h->ck = b; h->p.max_checkpoints = (int)max_ck; }
    }
    for (int i = n_ck > h->p.max_checkpoints ? n_ck - h->p.max_checkpoints : 0; i < n_ck; i++) {
        h->ck[h->n_ck++] = nk[i];
        memset(&nk[i], 0, sizeof nk[i]);
    }
    h->p.think = think ? 1 : 0;
out:
    if (why) fail(h, st, "%s: %s", path, why);
out_quiet:
    for (int i = 0; i < n_msgs; i++) free(nm[i].text);
    free(nm);
    for (int i = 0; i < n_ck; i++) ck_free(&nk[i]);
    free(nk);
    free(buf);
    return h->status == KZ_OK ? 0 : -1;
}
