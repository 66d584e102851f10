/* The MTP draft cache in saved states (state image version 2), on a tiny random qwen35 model
 * with an MTP block (Q4_0, KV f16 and q8_0):
 *  - sequence level: after a restore the block's drafts (logits of three chained draft steps,
 *    before and after one more token) are byte-equal to those of the sequence that was saved;
 *    an image without the MTP section (MTP off when saved, or rewritten as version 1) loads,
 *    continues with the trunk's exact logits, and drafting waits for the next forward; an image
 *    with the section loads into a context that does not draft; damaged MTP fields are refused;
 *  - API level: kz_generate with drafts for N tokens (a callback stop mid-round for the cancel
 *    case), kz_state_save / kz_state_save_file, a fresh context loads it and the decode loop
 *    continues: the history equals one uninterrupted plain greedy run; after a v2 load the first
 *    step is already a verify (the cache came back), after a v1 load exactly one plain step;
 *    the same across a cancel + resume on one context, and through kz_chat_save / kz_chat_load. */
#include <stdint.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "api/chat_api.h"
#include "api/context.h"
#include "forward/seq.h"
#include "forward/state.h"
#include "model/model.h"
#include "model/types.h"
#include "nn/ops.h"
#include "tools/mkmodel/mkmodel.h"
#include "kt_model.h"

static kz_model *make(const char *path, uint64_t seed) {
    return kt_tiny_qwen35(path, KZ_T_Q4_0, 1, seed);
}

/* ---- sequence level ---- */

#define NP 37 /* prompt: chunks of 16, the last partial */
#define NT 6  /* one-token steps after it */
#define ND 3  /* chained drafts compared */

/* three chained drafts from the sequence's end: their logits into lg[ND][V] */
static void drafts(kz_seq *s, int32_t tok, float *lg, int V, int E) {
    float *h = malloc(2 * (size_t)E * sizeof(float));
    memcpy(h, kz_seq_mtp_hidden(s), (size_t)E * sizeof(float));
    int32_t d = tok;
    for (int i = 0; i < ND; i++)
        d = kz_seq_mtp_draft(s, h + (size_t)(i & 1) * E, d, kz_seq_n_past(s) - 1 + i, lg + (size_t)i * V,
                             h + (size_t)((i + 1) & 1) * E);
    free(h);
}

/* image of s (hist: its tokens), malloc'd; checksum 0: unchecksummed */
static unsigned char *image(kz_model *m, kz_seq *s, const int32_t *hist, int checksum, size_t *n) {
    char err[256];
    *n = kz_state_image_size(m, s, 0);
    unsigned char *b = malloc(*n);
    size_t w = kz_state_image_write(m, s, hist, NULL, checksum, b, *n, NULL, err, sizeof err);
    CHECKF(w == *n, "%s", err);
    return b;
}

static void test_seq(kz_model *m, kz_kv_type kv) {
    const int V = kz_model_n_vocab(m), E = m->hp.n_embd;
    char err[256];
    unsigned long long r = 0x5eed ^ (unsigned long long)kv;
    int32_t tok[NP + NT + 2];
    for (int i = 0; i < NP + NT + 2; i++) tok[i] = (int32_t)(kt_rng(&r) % (unsigned)V);
    kz_seq *a = kz_seq_new(m, 256, 16, 2, kv, err, sizeof err), *b = kz_seq_new(m, 256, 16, 2, kv, err, sizeof err),
           *off = kz_seq_new(m, 256, 16, 2, kv, err, sizeof err);
    CHECKF(a && b && off, "%s", err);
    if (!a || !b || !off) return;
    float *la = malloc((size_t)ND * V * sizeof(float)), *lb = malloc((size_t)ND * V * sizeof(float));
    float *ta = malloc((size_t)V * sizeof(float)), *tb = malloc((size_t)V * sizeof(float));
    /* b holds another sequence first: the restore must replace all of it */
    CHECK(kz_forward(m, b, tok + 5, 20, NULL, 0, err, sizeof err) == 0);
    CHECK(kz_forward(m, a, tok, NP, NULL, 0, err, sizeof err) == 0);
    /* a verify batch cut back to 2 of its 4 tokens, then one-token steps */
    CHECK(kz_seq_verify_begin(a, err, sizeof err) == 0);
    CHECK(kz_forward(m, a, tok + NP, 4, NULL, 0, err, sizeof err) == 0 && kz_seq_verify_keep(a, 2) == 0);
    for (int i = 2; i < NT; i++) CHECK(kz_forward(m, a, tok + NP + i, 1, NULL, 0, err, sizeof err) == 0);
    const int n0 = NP + NT;
    CHECK(kz_seq_n_past(a) == n0 && kz_seq_mtp_ready(a));
    size_t n;
    unsigned char *img = image(m, a, tok, 1, &n);
    drafts(a, tok[n0], la, V, E);

    CHECKF(kz_state_image_read(m, b, img, n, tok, n0 + 2, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(kz_seq_n_past(b) == n0 && kz_seq_mtp_ready(b));
    drafts(b, tok[n0], lb, V, E);
    CHECKF(!memcmp(la, lb, (size_t)ND * V * sizeof(float)), "kv %d: drafts after a restore differ", (int)kv);
    /* one more token through both: trunk and drafts still equal (the fill pairs it with the
     * restored hidden) */
    CHECK(kz_forward(m, a, tok + n0, 1, ta, 0, err, sizeof err) == 0);
    CHECK(kz_forward(m, b, tok + n0, 1, tb, 0, err, sizeof err) == 0);
    CHECK(!memcmp(ta, tb, (size_t)V * sizeof(float)));
    drafts(a, tok[n0 + 1], la, V, E);
    drafts(b, tok[n0 + 1], lb, V, E);
    CHECKF(!memcmp(la, lb, (size_t)ND * V * sizeof(float)), "kv %d: drafts one token after a restore differ", (int)kv);

    /* the cache is really in the image: without it (a cold load) the drafts differ */
    size_t n1;
    kz_seq_mtp_enable(off, 0);
    CHECK(kz_forward(m, off, tok, n0, NULL, 0, err, sizeof err) == 0 && !kz_seq_mtp_ready(off));
    unsigned char *img1 = image(m, off, tok, 0, &n1);
    CHECK(n1 < n && !(img1[92] & 4));
    img1[8] = 1; /* the same layout is a version 1 image */
    CHECKF(kz_state_image_read(m, b, img1, n1, tok, n0 + 2, NULL, NULL, err, sizeof err) == 0, "v1: %s", err);
    CHECK(kz_seq_n_past(b) == n0 && !kz_seq_mtp_ready(b)); /* no hidden yet: no draft */
    CHECK(kz_forward(m, b, tok + n0, 1, tb, 0, err, sizeof err) == 0 && kz_seq_mtp_ready(b));
    CHECK(!memcmp(ta, tb, (size_t)V * sizeof(float))); /* the trunk is exact */
    drafts(b, tok[n0 + 1], lb, V, E);
    CHECK(memcmp(la, lb, (size_t)ND * V * sizeof(float)) != 0);

    /* an image with the cache into a sequence that does not draft: skipped, trunk exact */
    CHECKF(kz_state_image_read(m, off, img, n, tok, n0 + 2, NULL, NULL, err, sizeof err) == 0, "%s", err);
    CHECK(kz_forward(m, off, tok + n0, 1, tb, 0, err, sizeof err) == 0);
    CHECK(!memcmp(ta, tb, (size_t)V * sizeof(float)));

    /* damaged MTP fields (unchecksummed, so the size checks must catch them) */
    size_t nu;
    unsigned char *u = image(m, a, tok, 0, &nu), *bad = malloc(nu);
    CHECK(u[92] & 4);
    memcpy(bad, u, nu);
    bad[112] ^= 1; /* MTP row count */
    CHECK(kz_state_image_read(m, b, bad, nu, tok, 256, NULL, NULL, err, sizeof err) == -1 && strstr(err, "corrupt"));
    memcpy(bad, u, nu);
    bad[92] &= ~4; /* flag off: the section is extra bytes */
    CHECK(kz_state_image_read(m, b, bad, nu, tok, 256, NULL, NULL, err, sizeof err) == -1 && strstr(err, "corrupt"));
    memcpy(bad, u, nu);
    bad[8] = 1; /* an MTP section in a version 1 image */
    CHECK(kz_state_image_read(m, b, bad, nu, tok, 256, NULL, NULL, err, sizeof err) == -1 && strstr(err, "flags"));
    CHECK(kz_state_image_read(m, b, u, nu, tok, 256, NULL, NULL, err, sizeof err) == 0 && kz_seq_mtp_ready(b));
    /* a conversation checkpoint's rewind keeps the MTP slots before it: with the hidden saved
     * there, the drafts are those of a sequence that stopped at that point */
    kz_seq_free(off);
    off = kz_seq_new(m, 256, 16, 2, kv, err, sizeof err);
    float *h20 = malloc((size_t)E * sizeof(float));
    CHECK(off && kz_forward(m, off, tok, 20, NULL, 0, err, sizeof err) == 0);
    memcpy(h20, kz_seq_mtp_hidden(off), (size_t)E * sizeof(float));
    drafts(off, tok[20], la, V, E);
    CHECK(kz_forward(m, off, tok + 20, n0 - 20, NULL, 0, err, sizeof err) == 0);
    CHECK(kz_seq_rewind(off, n0 + 1, h20) == -1 && kz_seq_rewind(off, 20, NULL) == 0 && !kz_seq_mtp_ready(off));
    CHECK(kz_seq_rewind(off, 20, h20) == 0 && kz_seq_mtp_ready(off));
    drafts(off, tok[20], lb, V, E);
    CHECKF(!memcmp(la, lb, (size_t)ND * V * sizeof(float)), "kv %d: drafts after a rewind differ", (int)kv);
    free(h20);
    printf("kv %d: image of %d tokens %zu bytes with the MTP cache, %zu without; drafts equal after restore\n",
           (int)kv, n0, n, n1);
    free(u);
    free(bad);
    free(img);
    free(img1);
    free(la);
    free(lb);
    free(ta);
    free(tb);
    kz_seq_free(a);
    kz_seq_free(b);
    kz_seq_free(off);
}

/* ---- API level: generate, save, load elsewhere, continue ---- */

static const char *SYS = "You are terse.";
static const char *USER =
    "Write a long story about a lighthouse keeper who counts the waves every night and the ships that pass "
    "by the rocks, with every detail of the weather.";

/* greedy; with mtp always 3 drafts (not adaptive): a plain step only when no draft can start */
static kz_context *ctx(kz_model *m, kz_kv_type kv, int mtp) {
    return kt_mtp_context(m, (kt_mtp_cfg){.n_ctx = 900, .n_batch = 16, .kv = kv, .k = mtp ? 3 : 0});
}

/* history of c (prompt + evaluated tokens) equals ref[0..n) */
static int same_hist(kz_context *c, const int32_t *ref, int n) {
    int h = 0;
    const int32_t *t = kz_context_history(c, &h);
    if (h == n && !memcmp(t, ref, (size_t)n * sizeof *t)) return 1;
    int i = 0;
    while (i < h && i < n && t[i] == ref[i]) i++;
    fprintf(stderr, "history: %d tokens, expected %d, first difference at %d\n", h, n, i);
    return 0;
}

/* continue c's decoding for max_tok tokens (n_gen: the count expected); its MTP stats of this
 * call in *ms */
static void cont(kz_context *c, int max_tok, int n_gen, kz_mtp_stats *ms) {
    kz_mtp_stats s0, s1;
    kz_context_mtp_stats(c, &s0);
    kz_decode_opts o = {.max_tokens = max_tok};
    kz_stats st;
    CHECKF(kz_decode_run(c, &o, &st) == 0 && st.n_gen == n_gen, "continued for %d tokens, expected %d", st.n_gen,
           n_gen);
    kz_context_mtp_stats(c, &s1);
    ms->verifies = s1.verifies - s0.verifies;
    ms->plain_steps = s1.plain_steps - s0.plain_steps;
}

static void test_api(kz_model *m, kz_kv_type kv, const char *tmp) {
    enum { N0 = 100, N1 = 450, STOP = 41 };
    /* the reference: one plain greedy run of up to N0 + N1 - 1 tokens, T sampled (the last
     * sampled token of each call is not evaluated: a continuation samples it again from the
     * saved logits, and ends where the reference did, at max_tokens or end of turn) */
    kz_context *p = ctx(m, kv, 0);
    kz_stats st;
    CHECK(p && kz_generate(p, SYS, USER, N0 + N1 - 1, NULL, NULL, &st) == 0);
    if (!p) return;
    const int T = st.n_gen;
    CHECKF(T > N0 + 20, "the reference stopped (%d) after %d tokens", (int)st.stop, T);
    int32_t *ref = NULL;
    const int nref = kt_history(p, 0, &ref);
    CHECK(nref > 0);
    if (nref <= 0) { kz_context_free(p); return; }
    const int np = nref - (T - 1);
    kz_context_free(p);

    for (int how = 0; how < 4; how++) {
        /* 0: memory image; 1: a file; 2: cancelled mid-round, then a file; 3: a version 1 image */
        kz_context *a = ctx(m, kv, 1), *b = ctx(m, kv, 1);
        CHECK(a && b);
        if (!a || !b) continue;
        kt_stop_at cs = {0, how == 2 ? STOP : 0};
        CHECK(kz_generate(a, SYS, USER, N0, kt_stop_at_piece, &cs, &st) == 0);
        const int done = st.n_gen; /* tokens sampled; the last one not evaluated */
        CHECKF(st.stop == (how == 2 ? KZ_STOP_CANCELLED : KZ_STOP_MAX_TOKENS) && done > 1 && done <= N0,
               "stop %d after %d tokens", (int)st.stop, done);
        CHECKF(same_hist(a, ref, np + done - 1), "how %d: history before the save differs", how);
        kz_mtp_stats ms;
        if (how == 1 || how == 2) {
            char path[256];
            snprintf(path, sizeof path, "%s.state", tmp);
            CHECK(kz_state_save_file(a, path) == 0);
            CHECKF(kz_state_load_file(b, path) == 0, "%s", kz_context_error(b));
            remove(path);
        } else {
            size_t n = kz_state_size(a);
            unsigned char *img = malloc(n);
            CHECK(kz_state_save(a, img, n) == n && (img[92] & 4));
            if (how == 3) { /* drop the MTP section: what version 1 wrote */
                size_t k = (size_t)m->hp.n_embd * 4 +
                           2 * (size_t)m->hp.n_head_kv * (size_t)(np + done - 2) *
                               kz_kv_type_row_bytes(kv, m->hp.head_dim);
                memmove(img + n - 8 - k, img + n - 8, 8);
                n -= k;
                img[8] = 1;
                img[92] &= ~(4 | 2); /* no checksum: the trailer is now stale */
                memset(img + 112, 0, 4);
                uint64_t tot = n;
                memcpy(img + 96, &tot, 8);
            }
            CHECKF(kz_state_load(b, img, n) == 0, "how %d: %s", how, kz_context_error(b));
            free(img);
        }
        cont(b, N0 + N1 - done, T - done + 1, &ms);
        CHECKF(same_hist(b, ref, nref), "how %d kv %d: continued history differs from plain greedy", how, (int)kv);
        /* v2: the first step after the load is already a verify; v1: one plain step first */
        CHECKF(ms.plain_steps == (how == 3) && ms.verifies > 0, "how %d: %ld plain steps, %ld verifies", how,
               ms.plain_steps, ms.verifies);
        if (how == 2) { /* resume on the cancelled context itself */
            cont(a, N0 + N1 - done, T - done + 1, &ms);
            CHECKF(same_hist(a, ref, nref), "kv %d: resumed history differs from plain greedy", (int)kv);
            CHECK(ms.plain_steps == 0 && ms.verifies > 0);
        }
        kz_context_free(a);
        kz_context_free(b);
    }

    /* conversations: the chat file carries the state image, MTP cache included */
    kz_context *a = ctx(m, kv, 1), *b = ctx(m, kv, 1);
    char err[256], path[256];
    kz_chat *ca = a ? kz_chat_new(a, NULL, err, sizeof err) : NULL, *cb = b ? kz_chat_new(b, NULL, err, sizeof err) : NULL;
    CHECK(ca && cb);
    if (ca && cb) {
        kz_gen_params gp = kz_gen_default_params(m, 0);
        gp.temperature = 0;
        gp.max_tokens = 40;
        CHECK(kz_chat_add(ca, KZ_ROLE_USER, "Hello there, tell me about the sea.") == 0);
        CHECK(kz_chat_reply(ca, &gp, NULL, NULL, &st) == 0);
        snprintf(path, sizeof path, "%s.chat", tmp);
        CHECKF(kz_chat_save(ca, path) == 0, "%s", kz_chat_error(ca));
        CHECKF(kz_chat_load(cb, path) == 0, "%s", kz_chat_error(cb));
        remove(path);
        CHECK(kz_seq_mtp_ready(b->seq) && kz_seq_n_past(b->seq) == kz_seq_n_past(a->seq));
        /* the next turn restores the checkpoint (the reply's rendering changes) in both: the
         * checkpoints carry the MTP hidden, so both draft the same after the prefill */
        CHECK(kz_chat_add(ca, KZ_ROLE_USER, "And about the rocks?") == 0 && kz_chat_add(cb, KZ_ROLE_USER, "And about the rocks?") == 0);
        kz_stats sa, sb;
        CHECK(kz_chat_prefill(ca, -1, &sa) == 0 && kz_chat_prefill(cb, -1, &sb) == 0);
        CHECK(sa.n_reused == sb.n_reused && sa.n_prompt == sb.n_prompt);
        CHECK(kz_seq_mtp_ready(a->seq) && kz_seq_mtp_ready(b->seq));
        const int V = kz_model_n_vocab(m), E = m->hp.n_embd;
        float *la = malloc((size_t)ND * V * sizeof(float)), *lb = malloc((size_t)ND * V * sizeof(float));
        drafts(a->seq, 17, la, V, E);
        drafts(b->seq, 17, lb, V, E);
        CHECKF(!memcmp(la, lb, (size_t)ND * V * sizeof(float)), "kv %d: drafts after the chat file's checkpoint differ",
               (int)kv);
        free(la);
        free(lb);
    }
    kz_chat_free(ca);
    kz_chat_free(cb);
    kz_context_free(a);
    kz_context_free(b);
    free(ref);
    printf("kv %d: %d tokens continued after save/load (memory, file, cancel, v1 image): plain greedy's\n", (int)kv, T);
}

int main(void) {
    char path[96];
    snprintf(path, sizeof path, "/tmp/kz_test_mtp_state_%d.gguf", (int)getpid());
    kz_model *m = make(path, 5);
    CHECK(m && kz_model_has_mtp(m));
    if (m) {
        test_seq(m, KZ_KV_F16);
        test_seq(m, KZ_KV_Q8_0);
        test_api(m, KZ_KV_F16, path);
        test_api(m, KZ_KV_Q8_0, path);
        kz_model_free(m);
    }
    remove(path);
    KT_END();
}
