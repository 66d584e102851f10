/* Multi-turn chat rendering (see chat_template.h; the rules side by side in docs/chat.md). */
#include "text/chat_template.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sys/err.h"

typedef struct { const char *p; size_t n; } span;

static span sp_of(const char *p, size_t n) { span s = {p, n}; return s; }

/* code point at s[0..n) and its length (an ill-formed byte counts as one non-space unit) */
static unsigned cp_at(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k <= 1 || (size_t)k > n) { *len = 1; return k == 1 ? c : 0xFFFFFFFFu; }
    unsigned v = c & (0x7Fu >> k);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) { *len = 1; return 0xFFFFFFFFu; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *len = (size_t)k;
    return v;
}

/* Python's str.isspace, which Jinja's trim (str.strip) uses */
static int py_space(unsigned c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static span trim(span s) {
    const unsigned char *p = (const unsigned char *)s.p;
    size_t a = 0, b = s.n, l;
    while (a < b && py_space(cp_at(p + a, b - a, &l))) a += l;
    /* from the end: step back over continuation bytes to the code point's start */
    while (b > a) {
        size_t st = b - 1;
        while (st > a && (p[st] & 0xC0) == 0x80 && b - st < 4) st--;
        unsigned c = cp_at(p + st, b - st, &l);
        if (st + l != b) { st = b - 1; c = 0xFFFFFFFFu; }
        if (!py_space(c)) break;
        b = st;
    }
    return sp_of(s.p + a, b - a);
}
static span lstrip_nl(span s) { while (s.n && s.p[0] == '\n') { s.p++; s.n--; } return s; }
static span rstrip_nl(span s) { while (s.n && s.p[s.n - 1] == '\n') s.n--; return s; }

/* first / last occurrence of lit in s (-1 if none) */
static long find_first(span s, const char *lit) {
    size_t l = strlen(lit);
    for (size_t i = 0; i + l <= s.n; i++) if (!memcmp(s.p + i, lit, l)) return (long)i;
    return -1;
}
static long find_last(span s, const char *lit) {
    size_t l = strlen(lit);
    if (l > s.n) return -1;
    for (size_t i = s.n - l + 1; i-- > 0;) if (!memcmp(s.p + i, lit, l)) return (long)i;
    return -1;
}
static int starts(span s, const char *lit) { size_t l = strlen(lit); return s.n >= l && !memcmp(s.p, lit, l); }
static int ends(span s, const char *lit) { size_t l = strlen(lit); return s.n >= l && !memcmp(s.p + s.n - l, lit, l); }

/* reasoning and answer of an assistant message, as content.split('</think>') gives them */
static void split_think(span c, span *reasoning, span *answer) {
    *reasoning = sp_of(c.p, 0);
    *answer = c;
    long f = find_first(c, "</think>");
    if (f < 0) return;
    long l = find_last(c, "</think>");
    *answer = lstrip_nl(sp_of(c.p + l + 8, c.n - (size_t)l - 8));
    span pre = rstrip_nl(sp_of(c.p, (size_t)f));
    long t = find_last(pre, "<think>");
    if (t >= 0) pre = sp_of(pre.p + t + 7, pre.n - (size_t)t - 7);
    *reasoning = lstrip_nl(pre);
}

typedef struct { kz_tmpl_out *o; int oom; } emit;

static void put(emit *e, int special, const char *p, size_t n) {
    if (e->oom || (n == 0 && !special)) return;
    kz_tmpl_out *o = e->o;
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 32;
        kz_chat_seg *s = realloc(o->segs, (size_t)cap * sizeof *s);
        if (!s) { e->oom = 1; return; }
        o->segs = s;
        o->cap = cap;
    }
    o->segs[o->n].special = special;
    o->segs[o->n].text = p;
    o->segs[o->n].len = n;
    o->n++;
}
static void lit(emit *e, const char *s) { put(e, 0, s, strlen(s)); }
static void spec(emit *e, const char *s) { put(e, 1, s, strlen(s)); }
static void text(emit *e, span s) { put(e, 0, s.p, s.n); }

static void open_turn(emit *e, const char *role_nl) { spec(e, "<|im_start|>"); lit(e, role_nl); }
static void close_turn(emit *e) { spec(e, "<|im_end|>"); lit(e, "\n"); }
static void think_block(emit *e, span reasoning) {
    spec(e, "<think>");
    lit(e, "\n");
    text(e, reasoning);
    lit(e, "\n");
    spec(e, "</think>");
    lit(e, "\n\n");
}

void kz_tmpl_out_free(kz_tmpl_out *o) {
    if (!o) return;
    free(o->segs);
    memset(o, 0, sizeof *o);
}

int kz_chat_template_render(kz_chat_arch arch, const kz_tmpl_msg *msgs, int n, int add_gen, int enable_thinking,
                            kz_tmpl_out *out, char *err, size_t errlen) {
    out->n = 0;
    out->n_before_gen = 0;
    const int q35 = arch == KZ_CHAT_QWEN35;
    if (n < 1 || !msgs) { kz_seterr(err, errlen, "chat template: no messages"); return -1; }
    for (int i = 0; i < n; i++)
        if (msgs[i].role < KZ_TMPL_SYSTEM || msgs[i].role > KZ_TMPL_ASSISTANT || (!msgs[i].text && msgs[i].len)) {
            kz_seterr(err, errlen, "chat template: message %d has an unknown role %d or no text", i, msgs[i].role);
            return -1;
        }
    /* index of the last user query (a user message that is not a wrapped tool response) */
    int lqi = n - 1, found = 0;
    for (int i = n - 1; i >= 0 && !found; i--) {
        if (msgs[i].role != KZ_TMPL_USER) continue;
        span c = sp_of(msgs[i].text, msgs[i].len);
        if (q35) c = trim(c);
        if (!(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) { lqi = i; found = 1; }
    }
    if (q35 && !found) { kz_seterr(err, errlen, "chat template: no user query found in the messages"); return -1; }

    emit e = {out, 0};
    for (int i = 0; i < n; i++) {
        span c = sp_of(msgs[i].text, msgs[i].len);
        if (q35) c = trim(c);
        switch (msgs[i].role) {
        case KZ_TMPL_SYSTEM:
            if (i > 0 && q35) {
                kz_seterr(err, errlen, "chat template: a system message must be the first (message %d is not)", i);
                return -1;
            }
            open_turn(&e, "system\n");
            text(&e, c);
            close_turn(&e);
            break;
        case KZ_TMPL_USER:
            open_turn(&e, "user\n");
            text(&e, c);
            close_turn(&e);
            break;
        default: {
            span reasoning, answer;
            split_think(c, &reasoning, &answer);
            open_turn(&e, "assistant\n");
            if (q35) {
                if (i > lqi) think_block(&e, trim(reasoning));
                text(&e, answer);
            } else {
                /* without a </think>, reasoning is empty and the answer the whole text */
                if (i > lqi && (i == n - 1 || reasoning.n)) {
                    think_block(&e, rstrip_nl(lstrip_nl(reasoning)));
                    text(&e, lstrip_nl(answer));
                } else {
                    text(&e, answer);
                }
            }
            close_turn(&e);
        }
        }
    }
    out->n_before_gen = out->n;
    if (add_gen) {
        open_turn(&e, "assistant\n");
        if (enable_thinking == 0) think_block(&e, sp_of("", 0));
        else if (q35) { spec(&e, "<think>"); lit(&e, "\n"); }
    }
    if (e.oom) { kz_seterr(err, errlen, "out of memory rendering %d chat messages", n); return -1; }
    return 0;
}

long kz_chat_template_dev(int arch, int n, const int *roles, const char *const *texts, int add_gen,
                          int enable_thinking, char *buf, size_t cap) {
    kz_tmpl_msg *m = calloc(n > 0 ? (size_t)n : 1, sizeof *m);
    if (!m) return -1;
    for (int i = 0; i < n; i++) { m[i].role = roles[i]; m[i].text = texts[i]; m[i].len = texts[i] ? strlen(texts[i]) : 0; }
    kz_tmpl_out o = {0};
    char e[256];
    long r = -1;
    if (kz_chat_template_render(arch ? KZ_CHAT_QWEN35 : KZ_CHAT_QWEN3, m, n, add_gen, enable_thinking, &o, e,
                                sizeof e) == 0) {
        size_t total = kz_chat_rendered_len(o.segs, o.n), w = 0;
        for (int i = 0; i < o.n; i++) {
            if (w + o.segs[i].len <= cap) memcpy(buf + w, o.segs[i].text, o.segs[i].len);
            w += o.segs[i].len;
        }
        if (w < cap) buf[w] = 0;
        r = (long)total;
    } else if (cap) {
        snprintf(buf, cap, "%s", e);
    }
    kz_tmpl_out_free(&o);
    free(m);
    return r;
}
