/* The decode loop: sample a token from the context's logits, stream its text, evaluate it, repeat.
 * One function for every caller (kz_generate, kz_chat_reply), so a change to how tokens are
 * produced (speculative decoding) is made once.
 *
 * Stop strings: the text is held back while its tail could still grow into a stop string, so
 * the callback never sees a stop string or a piece of one; a stop string ends the turn with
 * KZ_STOP_EOG. The last sampled token is never evaluated. */
#include <stdlib.h>
#include <string.h>
#include "api/context.h"
#include "model/model.h"
#include "sys/clock.h"
#include "text/tokenizer.h"

typedef struct {
    const kz_decode_opts *o;
    char *buf;        /* text produced but not yet given to the callback */
    size_t len, cap;
    int stopped;      /* the callback asked to stop */
    int hit;          /* a stop string was produced */
} text_out;

static int out_cb(text_out *t, const char *p, size_t n) {
    if (n == 0 || !t->o->cb || t->stopped) return 0;
    if (t->o->cb(p, n, t->o->ud) != 0) t->stopped = 1;
    return t->stopped;
}

/* bytes at the end of buf[0..len) that start some stop string (could still become one) */
static size_t holdback(const text_out *t) {
    size_t best = 0;
    for (int i = 0; i < t->o->n_stop; i++) {
        const char *s = t->o->stop[i];
        size_t sl = strlen(s);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > best; k--)
            if (k <= t->len && !memcmp(t->buf + t->len - k, s, k)) { best = k; break; }
    }
    return best;
}

/* 0, 1 when the caller must stop (callback asked, or a stop string), -1 out of memory */
static int text_add(text_out *t, const char *p, size_t n) {
    if (t->o->n_stop == 0 || n == 0) return out_cb(t, p, n);
    if (t->len + n > t->cap) {
        size_t cap = (t->len + n) * 2 + 64;
        char *b = realloc(t->buf, cap);
        if (!b) return -1;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
    /* earliest stop string in the text (a match can only end in the new bytes) */
    size_t cut = t->len;
    for (int i = 0; i < t->o->n_stop; i++) {
        const char *s = t->o->stop[i];
        size_t sl = strlen(s);
        if (sl == 0 || sl > t->len) continue;
        for (size_t at = 0; at + sl <= t->len && at < cut; at++)
            if (!memcmp(t->buf + at, s, sl)) { cut = at; break; }
    }
    if (cut < t->len) {
        t->hit = 1;
        out_cb(t, t->buf, cut);
        t->len = 0;
        return 1;
    }
    size_t keep = holdback(t), give = t->len - keep;
    if (give > 0) {
        int r = out_cb(t, t->buf, give);
        memmove(t->buf, t->buf + give, keep);
        t->len = keep;
        if (r) return 1;
    }
    return 0;
}

int kz_decode_run(kz_context *c, const kz_decode_opts *o, kz_stats *st) {
    const double t1 = kz_now_ms();
    kz_sampler_params saved = kz_ctx_sampler_params(&c->p);
    if (o->sp) kz_sampler_set_params(c->smp, o->sp);
    kz_sampler_reseed(c->smp, o->sp ? o->sp->seed : c->p.seed); /* same seed + prompt -> same text */
    text_out t = {.o = o};
    kz_utf8_stream us;
    memset(&us, 0, sizeof us);
    char out[1024];
    st->stop = KZ_STOP_MAX_TOKENS;
    st->n_gen = 0;
    int fin = 0; /* text_add said stop */
    for (;;) {
        if (kz_ctx_cancelled(c)) { st->stop = KZ_STOP_CANCELLED; break; }
        int32_t tok = kz_sampler_sample_hint(c->smp, c->logits, c->hist, c->n_hist, c->logits_argmax);
        st->n_gen++;
        if (kz_tok_is_eog(c->m->tok, tok)) { st->stop = KZ_STOP_EOG; break; }
        if (o->tcb) { /* raw: every token, a control token without its text */
            const int len = kz_tok_is_control(c->m->tok, tok) ? 0 : kz_ctx_token_piece(c, tok);
            if (o->tcb(tok, c->piece, len > 0 ? (size_t)len : 0, o->ud) != 0) { st->stop = KZ_STOP_CANCELLED; fin = 1; break; }
        } else if (!kz_tok_is_control(c->m->tok, tok)) {
            int len = kz_ctx_token_piece(c, tok);
            if (len < 0) len = 0; /* id past the tokenizer's table (padded LM head): no text */
            /* feed in slices small enough that nothing is cut (ill-formed bytes expand 3x) */
            int slice = (int)((sizeof out - 8) / 3);
            for (int off = 0; off < len && !fin;) {
                int k = len - off < slice ? len - off : slice;
                size_t n = kz_utf8_feed(&us, c->piece + off, (size_t)k, out, sizeof out);
                fin = text_add(&t, out, n);
                off += k;
            }
            if (fin < 0) { kz_ctx_seterr(c, KZ_ERR_NOMEM, "out of memory holding back text for stop strings"); st->stop = KZ_STOP_ERROR; break; }
            if (fin) { st->stop = t.hit ? KZ_STOP_EOG : KZ_STOP_CANCELLED; break; }
        }
        if (o->max_tokens > 0 && st->n_gen >= o->max_tokens) { st->stop = KZ_STOP_MAX_TOKENS; break; }
        if (kz_ctx_cancelled(c)) { st->stop = KZ_STOP_CANCELLED; break; }
        if (c->n_hist >= c->p.n_ctx) { st->stop = KZ_STOP_CTX_FULL; break; }
        c->logits_valid = 0;
        c->logits_argmax = -1;
        const int r = kz_spec_decode(c, tok); /* MTP drafts + verify (speculative.c); 1: plain step */
        if ((r > 0 ? kz_ctx_eval_chunk(c, &tok, 1, c->logits, 0) : r) != 0) { st->stop = KZ_STOP_ERROR; break; }
        c->logits_valid = 1;
        c->logits_argmax = kz_seq_logits_argmax(c->seq);
    }
    kz_spec_end(c); /* verified tokens the loop did not take leave the sequence */
    if (!fin && st->stop != KZ_STOP_ERROR) {
        /* a trailing partial code point becomes U+FFFD rather than vanishing; held-back text that
         * never became a stop string is text after all */
        size_t n = kz_utf8_flush(&us, out, sizeof out);
        if (n > 0 && text_add(&t, out, n) == 1 && t.hit) st->stop = KZ_STOP_EOG;
        if (!t.hit) out_cb(&t, t.buf, t.len);
    }
    free(t.buf);
    if (o->sp) kz_sampler_set_params(c->smp, &saved);
    st->t_decode_ms = kz_now_ms() - t1;
    return st->stop == KZ_STOP_ERROR ? -1 : 0;
}
