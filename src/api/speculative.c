/* MTP self-speculative decoding: kz_generate's decode step when the model has an MTP block.
 *
 * A round: the MTP block drafts k tokens after the sampled token t (chained: each step's
 * output hidden is the next step's input), then [t, d1..dk] runs through the model as one verify
 * batch (each weight read once for k+1 rows; forward/verify.c makes every row's logits those
 * of a one-token step, bit for bit). The decode loop then keeps sampling as it always does: the
 * logits after t are handed back; when the sampler picks d1 the logits after d1 are already
 * there, and so on. The first token the sampler picks that is not the next draft ends the round:
 * the batch's tail is dropped (kz_seq_verify_keep) and a new round starts with that token.
 * Every token is drawn by the sampler from the model's own logits after the exact prefix, so
 * the output (greedy or sampled, same seed) is plain decoding's; with argmax drafts this is the
 * speculative-sampling rule min(1, p/q) for a one-hot q (kz_spec_accept has the general rule).
 *
 * Adaptive draft length: k in 0..max_draft maximises the expected tokens per unit of time,
 * E(k) / (cost(verify of k+1) + k cost(draft)), from running estimates of the acceptance at
 * each draft position and of the measured costs relative to a plain step. Costs are medians of
 * the last few timings: on a loaded phone or shared machine one preempted step (a thread losing
 * its core mid-barrier) takes milliseconds and must not decide the draft length. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "api/api.h"
#include "api/context.h"
#include "api/speculative.h"
#include "sys/clock.h"

#define KMAX KZ_MTP_MAX_DRAFT
#define NWIN 7 /* timings kept per cost, for its median */
#define PROBE_MIN 16 /* plain steps between one-draft probes while drafting does not pay... */
#define PROBE_MAX 256 /* ... doubling after each probe that confirms it, up to this */
#define ALPHA_EMA 0.25 /* ... of the acceptance: a few misses stop drafting on text it cannot guess */
#define PLAIN_WARM 3 /* plain steps timed before the first draft (the first one is not counted:
                      * it pays the cold caches and page faults of the decode start) */

struct kz_spec {
    kz_mtp_params p;
    int active;             /* a verified batch is being consumed */
    int32_t q[KMAX];        /* its drafts */
    int q_len, q_pos;       /* drafts, and how many the sampler took so far */
    int rec_p0;             /* n_hist before the batch */
    float *lg;              /* [KMAX + 1][n_vocab] the batch's logits */
    float *qlg;             /* [n_vocab] a draft step's logits */
    float *h[2];            /* [n_embd] the draft chain's hiddens */
    /* adaptive k: acceptance at each draft position given the previous one was accepted, and
     * costs in ms (verify[n]: a verify of n tokens; verify[1]: a plain step) */
    double alpha[KMAX];
    struct cost {
        double t[NWIN];
        int n;
    } verify[KMAX + 2], draft;
    int since_plain, since_probe, probe_every;
    double fixed[KMAX + 2]; /* tests: costs given instead of measured ([0] the draft); fixed[1] = 1 */
    kz_mtp_stats st;
    kz_spec_oracle oracle;
    void *oracle_ud;
};

kz_mtp_params kz_mtp_default_params(void) {
    kz_mtp_params p = {1, 3, 1, 0};
    return p;
}

int kz_model_has_mtp(const kz_model *m) { return m && m->mtp != NULL; }

void kz_spec_free(struct kz_spec *sp) {
    if (!sp) return;
    free(sp->lg);
    free(sp->qlg);
    free(sp->h[0]);
    free(sp);
}

static struct kz_spec *spec_new(kz_context *c) {
    struct kz_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    const size_t V = (size_t)c->n_vocab, E = (size_t)c->m->hp.n_embd;
    sp->lg = malloc((KMAX + 1) * V * sizeof(float));
    sp->qlg = malloc(V * sizeof(float));
    sp->h[0] = malloc(2 * E * sizeof(float));
    if (!sp->lg || !sp->qlg || !sp->h[0]) { kz_spec_free(sp); return NULL; }
    sp->h[1] = sp->h[0] + E;
    sp->p = kz_mtp_default_params();
    for (int i = 0; i < KMAX; i++) sp->alpha[i] = 0.6; /* below reported real-model rates */
    sp->probe_every = PROBE_MIN;
    return sp;
}

int kz_context_set_mtp(kz_context *c, const kz_mtp_params *p) {
    if (!c) return -1;
    c->err[0] = 0;
    c->status = KZ_OK;
    kz_mtp_params q = p ? *p : kz_mtp_default_params();
    if (q.max_draft < 1 || q.max_draft > KMAX) {
        snprintf(c->err, sizeof c->err, "mtp max_draft must be 1..%d (got %d)", KMAX, q.max_draft);
        c->status = KZ_ERR_INVALID_ARG;
        return -1;
    }
    if (q.draft_vocab < 0) {
        snprintf(c->err, sizeof c->err, "mtp draft_vocab must be >= 0 (0: the whole vocabulary; got %d)", q.draft_vocab);
        c->status = KZ_ERR_INVALID_ARG;
        return -1;
    }
    if (!c->spec && !(c->spec = spec_new(c))) {
        snprintf(c->err, sizeof c->err, "out of memory for the speculative-decoding buffers");
        c->status = KZ_ERR_NOMEM;
        return -1;
    }
    struct kz_spec *sp = c->spec;
    sp->p = q;
    memset(&sp->st, 0, sizeof sp->st);
    sp->active = 0;
    if (c->m->mtp) {
        kz_seq_mtp_enable(c->seq, q.enabled);
        kz_seq_mtp_set_vocab(c->seq, q.draft_vocab);
    }
    return 0;
}

int kz_spec_set_oracle(kz_context *c, kz_spec_oracle fn, void *ud) {
    if (!c->spec && !(c->spec = spec_new(c))) return -1;
    c->spec->oracle = fn;
    c->spec->oracle_ud = ud;
    return 0;
}

int kz_spec_set_costs(kz_context *c, double draft, const double *verify, int n) {
    if (!c->spec && !(c->spec = spec_new(c))) return -1;
    memset(c->spec->fixed, 0, sizeof c->spec->fixed);
    if (!verify) return 0;
    if (n < 2 || n > KMAX + 1) return -1;
    c->spec->fixed[0] = draft;
    for (int i = 1; i < KMAX + 2; i++) c->spec->fixed[i] = verify[i <= n ? i : n];
    return 0;
}

int kz_context_mtp_stats(const kz_context *c, kz_mtp_stats *out) {
    if (!c || !out) return -1;
    if (c->spec) *out = c->spec->st;
    else memset(out, 0, sizeof *out);
    return 0;
}

/* ---- the speculative-sampling rule for a sampled draft ---- */

int32_t kz_spec_accept(const float *p, const float *q, int n, int32_t d, double u, double u2) {
    const double pd = p[d], qd = q[d];
    if (qd > 0 && u * qd < pd) return d; /* accept with min(1, p(d) / q(d)) */
    double z = 0;
    for (int i = 0; i < n; i++) z += p[i] > q[i] ? (double)p[i] - q[i] : 0.0;
    if (!(z > 0)) return d; /* p == q: the draft is always accepted above; unreachable */
    double acc = 0, t = u2 * z;
    int32_t last = d;
    for (int i = 0; i < n; i++) {
        const double r = p[i] > q[i] ? (double)p[i] - q[i] : 0.0;
        if (r <= 0) continue;
        last = i;
        acc += r;
        if (t < acc) return i; /* from the residual max(0, p - q), normalised */
    }
    return last;
}

/* ---- adaptive draft length ---- */

static void cost_add(struct cost *c, double ms) {
    c->t[c->n % NWIN] = ms;
    if (++c->n >= 2 * NWIN) c->n -= NWIN; /* stays >= NWIN once full: the ring index wraps */
}
static double cost_med(const struct cost *c) {
    const int n = c->n < NWIN ? c->n : NWIN;
    double v[NWIN];
    for (int i = 0; i < n; i++) { /* insertion sort of <= 7 values */
        int j = i;
        for (; j > 0 && v[j - 1] > c->t[i]; j--) v[j] = v[j - 1];
        v[j] = c->t[i];
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* cost of a verify of n tokens relative to a plain step: measured when both are; else on the
 * line through (1, 1) and the largest size measured (each row adds about the same work), so
 * one dear verify rules out the smaller sizes without trying each; else a prior (a bandwidth-
 * bound step costs little more for a few more rows). Never below one step (it reads the same
 * weights), so a disturbed plain-step timing cannot make drafting look free. */
static double rel_verify(const struct kz_spec *sp, int n) {
    if (sp->fixed[1] > 0) return sp->fixed[n];
    double r = 1.0 + 0.1 * (n - 1);
    if (sp->verify[n].n && sp->verify[1].n) {
        r = cost_med(&sp->verify[n]) / cost_med(&sp->verify[1]);
    } else if (sp->verify[1].n) {
        for (int m = KZ_SPEC_NMAX; m >= 2; m--)
            if (sp->verify[m].n) {
                r = 1.0 + (cost_med(&sp->verify[m]) / cost_med(&sp->verify[1]) - 1.0) * (n - 1) / (m - 1);
                break;
            }
    }
    return r < 1.0 ? 1.0 : r;
}
static double rel_draft(const struct kz_spec *sp) {
    if (sp->fixed[1] > 0) return sp->fixed[0];
    if (sp->draft.n && sp->verify[1].n) return cost_med(&sp->draft) / cost_med(&sp->verify[1]);
    return 0.15;
}

static int choose_k(struct kz_spec *sp) {
    if (!sp->p.adaptive) return sp->p.max_draft;
    /* re-measure the plain step now and then, and keep probing one draft when k = 0 wins, so
     * the estimates follow the text */
    const int warm = sp->verify[1].n >= PLAIN_WARM || sp->fixed[1] > 0;
    if (++sp->since_plain >= 32 || !warm) { sp->since_plain = 0; return 0; }
    int best = 0;
    double best_v = 1.0, e = 1.0, run = 1.0;
    for (int k = 1; k <= sp->p.max_draft; k++) {
        run *= sp->alpha[k - 1];
        e += run;
        const double v = e / (rel_verify(sp, k + 1) + k * rel_draft(sp));
        if (v > best_v) { best_v = v; best = k; }
    }
    if (best > 0) sp->probe_every = PROBE_MIN;
    else if (++sp->since_probe >= sp->probe_every) { /* probe; the next one waits longer */
        sp->since_probe = 0;
        if (sp->probe_every < PROBE_MAX) sp->probe_every *= 2;
        best = 1;
    }
    return best;
}

/* a finished round: the sampler took `took` of its n drafts */
static void round_done(struct kz_spec *sp, int took, int n) {
    for (int i = 0; i < took && i < n; i++) sp->alpha[i] = (1 - ALPHA_EMA) * sp->alpha[i] + ALPHA_EMA;
    if (took < n) sp->alpha[took] = (1 - ALPHA_EMA) * sp->alpha[took];
}

/* ---- the decode step ---- */

static int fail(kz_context *c, const char *e) {
    snprintf(c->err, sizeof c->err, "%s", e[0] ? e : "forward pass failed");
    c->status = kz_status_from_message(e, KZ_ERR_INTERNAL);
    if (kz_seq_n_past(c->seq) != c->n_hist) kz_context_reset(c); /* unknown state: start over */
    c->logits_valid = 0;
    return -1;
}

int kz_spec_decode(kz_context *c, int32_t tok) {
    if (!c->m->mtp) return 1;
    if (!c->spec && !(c->spec = spec_new(c))) return 1; /* no memory for it: plain decoding */
    struct kz_spec *sp = c->spec;
    if (!sp->p.enabled) return 1;
    const size_t V = (size_t)c->n_vocab, E = (size_t)c->m->hp.n_embd;
    if (sp->active) {
        if (sp->q_pos < sp->q_len && tok == sp->q[sp->q_pos]) { /* already verified: its logits are here */
            c->hist[c->n_hist++] = tok;
            sp->st.accepted++;
            sp->st.accepted_at[sp->q_pos]++;
            sp->st.tokens++;
            sp->q_pos++;
            memcpy(c->logits, sp->lg + (size_t)sp->q_pos * V, V * sizeof(float));
            if (sp->q_pos == sp->q_len) {
                sp->active = 0;
                round_done(sp, sp->q_pos, sp->q_len);
            }
            return 0;
        }
        round_done(sp, sp->q_pos, sp->q_len);
        kz_spec_end(c); /* the sampler left the drafts: drop what it did not take */
    }
    char e[384] = "";
    /* no hidden to draft from (a state restored without the MTP cache): a plain step gives it */
    int k = kz_seq_mtp_ready(c->seq) ? choose_k(sp) : 0;
    const int room = c->p.n_ctx - c->n_hist - 1; /* t and k drafts must fit */
    if (k > room) k = room;
    if (k > c->p.n_batch - 1) k = c->p.n_batch - 1; /* one chunk */
    if (k > KZ_SPEC_NMAX - 1) k = KZ_SPEC_NMAX - 1;
    if (k < 0) k = 0;
    const double t0 = kz_now_ms();
    if (k == 0) { /* a plain step (timed: it is the unit of the costs) */
        if (kz_forward(c->m, c->seq, &tok, 1, c->logits, 0, e, sizeof e) != 0) return fail(c, e);
        c->hist[c->n_hist++] = tok;
        const double dt = kz_now_ms() - t0;
        if (sp->st.plain_steps > 0) cost_add(&sp->verify[1], dt);
        sp->st.plain_steps++;
        sp->st.tokens++;
        sp->st.t_plain_ms += dt;
        return 0;
    }
    /* drafts: slot n_hist - 1 pairs the last hidden with tok, each next one the draft's own */
    int32_t batch[KZ_SPEC_NMAX];
    batch[0] = tok;
    memcpy(sp->h[0], kz_seq_mtp_hidden(c->seq), E * sizeof(float));
    int32_t d = tok;
    for (int i = 0; i < k; i++) {
        d = sp->oracle ? sp->oracle(sp->oracle_ud, c->hist, c->n_hist, tok, i)
                       : kz_seq_mtp_draft(c->seq, sp->h[i & 1], d, c->n_hist - 1 + i, sp->qlg, sp->h[(i + 1) & 1]);
        sp->q[i] = batch[i + 1] = d;
    }
    const double t1 = kz_now_ms();
    if (kz_seq_verify_begin(c->seq, e, sizeof e) != 0) return fail(c, e);
    if (kz_forward(c->m, c->seq, batch, k + 1, sp->lg, 1, e, sizeof e) != 0) return fail(c, e);
    const double t2 = kz_now_ms();
    cost_add(&sp->draft, (t1 - t0) / k);
    cost_add(&sp->verify[k + 1], t2 - t1);
    sp->st.verifies++;
    sp->st.drafted += k;
    for (int i = 0; i < k; i++) sp->st.drafted_at[i]++;
    sp->st.tokens++;
    sp->st.t_draft_ms += t1 - t0;
    sp->st.t_verify_ms += t2 - t1;
    sp->rec_p0 = c->n_hist;
    c->hist[c->n_hist++] = tok;
    memcpy(c->logits, sp->lg, V * sizeof(float));
    sp->q_len = k;
    sp->q_pos = 0;
    sp->active = 1;
    return 0;
}

void kz_spec_end(kz_context *c) {
    struct kz_spec *sp = c->spec;
    if (!sp || !sp->active) return;
    sp->active = 0;
    /* the sequence keeps the batch's tokens the loop took; the rest goes */
    if (kz_seq_verify_keep(c->seq, c->n_hist - sp->rec_p0) != 0) kz_context_reset(c);
}
