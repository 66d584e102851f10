/* MTP self-speculative decoding (issue 25) on tiny random qwen35 models with an MTP block
 * (kz_mkmodel n_nextn = 1):
 *  - the block loads (and a model without it reports none);
 *  - verify batches: drafts taken from the plain greedy continuation with errors put in at
 *    random places, verified and cut back with kz_seq_verify_keep: every verified row's logits
 *    are byte-equal to plain one-token decoding's at that position, before and after rollbacks;
 *  - kz_generate with the MTP drafts: the same tokens as plain greedy over >= 512 tokens,
 *    several prompts longer than a prefill chunk, KV f16 and q8_0, k = 1, 3, 8 and adaptive,
 *    and across a cancel (callback stop) followed by a resumed generation;
 *  - sampling (temperature 0.8, top-k/p): the same tokens as plain sampling with the same seed;
 *  - the whole test again with KZ_ISA=scalar and avx2 (children), as the level is per process;
 *    KZ_TEST_SMALL=1 (ARM64 under qemu, tests/arm64_ci.sh) runs the children's lighter set. */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "api/context.h"
#include "api/speculative.h"
#include "forward/seq.h"
#include "model/model.h"
#include "model/types.h"
#include "nn/ops.h"
#include "tools/mkmodel/mkmodel.h"
#include "kt_model.h"

static kz_model *make(const char *path, uint32_t wtype, int nextn, uint64_t seed) {
    return kt_tiny_qwen35(path, wtype, nextn, seed);
}

/* ---- verify batches against plain decoding, bit for bit ---- */

#define NP 37  /* prompt: 3 chunks of 16 (the chunked GDN and attention), the last partial */
#define ND 120 /* decode steps */

static void test_verify_rows(kz_model *m, kz_kv_type kv) {
    const int V = kz_model_n_vocab(m);
    char err[256];
    unsigned long long r = 0x9e3779b97f4a7c15ull ^ (unsigned long long)kv;
    int32_t tok[NP + ND + 1];
    for (int i = 0; i < NP; i++) tok[i] = (int32_t)(kt_rng(&r) % (unsigned)V);
    /* plain: prefill, then greedy one-token steps; logits after every token */
    kz_seq *a = kz_seq_new(m, 512, 16, 2, kv, err, sizeof err);
    CHECKF(a != NULL, "%s", err);
    if (!a) return;
    kz_seq_mtp_enable(a, 0);
    float *ref = malloc((size_t)(ND + 1) * V * sizeof(float));
    CHECK(kz_forward(m, a, tok, NP, ref, 0, err, sizeof err) == 0);
    for (int i = 0; i < ND; i++) {
        tok[NP + i] = (int32_t)kz_argmax(ref + (size_t)i * V, V);
        CHECK(kz_forward(m, a, &tok[NP + i], 1, ref + (size_t)(i + 1) * V, 0, err, sizeof err) == 0);
    }
    kz_seq_free(a);

    /* speculative: batches [t, drafts], drafts = the true continuation with a wrong token at a
     * random place (or none), keep the agreeing prefix */
    kz_seq *b = kz_seq_new(m, 512, 16, 2, kv, err, sizeof err);
    CHECK(kz_seq_has_mtp(b));
    float *lg = malloc((size_t)KZ_SPEC_NMAX * V * sizeof(float)), *h = malloc(2 * 256 * sizeof(float));
    CHECK(kz_forward(m, b, tok, NP, lg, 0, err, sizeof err) == 0);
    CHECK(memcmp(lg, ref, (size_t)V * sizeof(float)) == 0); /* the MTP fill leaves the trunk alone */
    int pos = 0, bad_rows = 0, rounds = 0, kept_hist[KZ_SPEC_NMAX + 1] = {0};
    while (pos < ND - KZ_SPEC_NMAX) {
        const int k = 1 + (int)(kt_rng(&r) % (KZ_SPEC_NMAX - 1));
        int32_t batch[KZ_SPEC_NMAX];
        for (int i = 0; i <= k; i++) batch[i] = tok[NP + pos + i];
        const int wrong = (int)(kt_rng(&r) % (unsigned)(k + 2)); /* 1..k: that draft is wrong */
        if (wrong >= 1 && wrong <= k) batch[wrong] = (batch[wrong] + 1 + (int32_t)(kt_rng(&r) % 7)) % V;
        /* a draft step runs the MTP block in between, as the decoder does (its KV slots are
         * rewritten by the verify's fill) */
        const float *hid = kz_seq_mtp_hidden(b);
        CHECK(hid != NULL);
        if (hid) {
            int32_t d = kz_seq_mtp_draft(b, hid, batch[0], kz_seq_n_past(b) - 1, lg, h);
            CHECK(d >= 0 && d < V);
        }
        CHECK(kz_seq_verify_begin(b, err, sizeof err) == 0);
        CHECK(kz_forward(m, b, batch, k + 1, lg, 1, err, sizeof err) == 0);
        int keep = 1;
        while (keep <= k && (int32_t)kz_argmax(lg + (size_t)(keep - 1) * V, V) == batch[keep]) keep++;
        CHECK(wrong < 1 || wrong > k || keep == wrong);
        for (int i = 0; i < keep; i++)
            if (memcmp(lg + (size_t)i * V, ref + (size_t)(pos + i + 1) * V, (size_t)V * sizeof(float))) bad_rows++;
        /* now and then cut further back first, then to keep: the record allows it */
        if (keep > 1 && (kt_rng(&r) & 3) == 0) CHECK(kz_seq_verify_keep(b, keep) == 0 && kz_seq_verify_keep(b, 1) == 0);
        else CHECK(kz_seq_verify_keep(b, keep) == 0);
        if (kz_seq_n_past(b) != NP + pos + keep) {
            /* cut to 1: replay the rest as one-token steps */
            for (int i = 1; i < keep; i++) {
                CHECK(kz_forward(m, b, &tok[NP + pos + i], 1, lg, 0, err, sizeof err) == 0);
                if (memcmp(lg, ref + (size_t)(pos + i + 1) * V, (size_t)V * sizeof(float))) bad_rows++;
            }
        }
        CHECK(kz_seq_n_past(b) == NP + pos + keep);
        kept_hist[keep]++;
        pos += keep;
        rounds++;
    }
    CHECKF(bad_rows == 0, "kv %d: %d verified rows differ from plain decoding", (int)kv, bad_rows);
    int multi = 0;
    for (int i = 2; i <= KZ_SPEC_NMAX; i++) multi += kept_hist[i];
    CHECKF(multi > 5 && kept_hist[1] >= 2, "rounds %d: kept 1: %d, more: %d", rounds, kept_hist[1], multi);
    free(lg);
    free(h);
    free(ref);
    kz_seq_free(b);
}

/* ---- plain steps defer their MTP KV slots (kz_mtp_flush): the drafts after a run of plain
 * steps (longer than the wait ring, so it also fills when full) equal those of a sequence whose
 * slots were filled after every step (a draft flushes first), bit for bit ---- */
static void test_deferred_fill(kz_model *m) {
    const int V = kz_model_n_vocab(m), E = kz_model_n_embd(m), NS = 150; /* > 2 x KZ_MTP_PEND_MAX plain steps */
    char err[256];
    unsigned long long r = 0x51ed27a1f00dull;
    int32_t tok[NP + 150];
    for (int i = 0; i < NP + NS; i++) tok[i] = (int32_t)(kt_rng(&r) % (unsigned)V);
    kz_seq *a = kz_seq_new(m, 512, 16, 2, KZ_KV_F16, err, sizeof err), *b = kz_seq_new(m, 512, 16, 2, KZ_KV_F16, err, sizeof err);
    float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
    float *h = malloc(2 * (size_t)E * sizeof(float)), *hb = malloc(2 * (size_t)E * sizeof(float));
    CHECK(a && b && la && lb && h && hb);
    if (!a || !b || !la || !lb || !h || !hb) goto out;
    CHECK(kz_forward(m, a, tok, NP, la, 0, err, sizeof err) == 0 && kz_forward(m, b, tok, NP, lb, 0, err, sizeof err) == 0);
    int diff = 0, drafts = 0;
    for (int i = 0; i < NS; i++) {
        CHECK(kz_forward(m, a, &tok[NP + i], 1, la, 0, err, sizeof err) == 0);
        CHECK(kz_forward(m, b, &tok[NP + i], 1, lb, 0, err, sizeof err) == 0);
        CHECK(kz_seq_mtp_ready(a) && kz_seq_mtp_ready(b));
        /* b drafts after every step; a only now and then (at 23, 87, 149: its ring filled before) */
        memcpy(hb, kz_seq_mtp_hidden(b), (size_t)E * sizeof(float));
        const int32_t db = kz_seq_mtp_draft(b, hb, tok[NP + i], kz_seq_n_past(b) - 1, lb, hb + E);
        if (i == 23 || i == 87 || i == NS - 1) {
            memcpy(h, kz_seq_mtp_hidden(a), (size_t)E * sizeof(float));
            const int32_t da = kz_seq_mtp_draft(a, h, tok[NP + i], kz_seq_n_past(a) - 1, la, h + E);
            diff += da != db || memcmp(la, lb, (size_t)V * sizeof(float)) != 0 ||
                    memcmp(h + E, hb + E, (size_t)E * sizeof(float)) != 0;
            drafts++;
        }
    }
    CHECKF(diff == 0 && drafts == 3, "%d of %d drafts after deferred MTP fills differ", diff, drafts);
out:
    free(la);
    free(lb);
    free(h);
    free(hb);
    kz_seq_free(a);
    kz_seq_free(b);
}

/* ---- kz_generate: speculative == plain ---- */

/* drafts from the plain run's tokens (ref, the whole history of that run), wrong now and then */
typedef struct {
    const int32_t *ref;
    int n_ref;
    unsigned long long rng;
} oracle_t;
static int32_t oracle(void *ud, const int32_t *hist, int n_hist, int32_t tok, int i) {
    oracle_t *o = ud;
    (void)hist;
    const int at = n_hist + 1 + i; /* position of the draft in the history */
    int32_t d = at < o->n_ref ? o->ref[at] : tok;
    if ((kt_rng(&o->rng) % 6) == 0) d = (d + 1) % 512;
    return d;
}

/* generates max_tok tokens for (sys, user) on a fresh context; the history (prompt + tokens) in
 * *hist (malloc'd), its length returned, or -1 */
static int gen(kz_model *m, kz_kv_type kv, int mtp_k, int adaptive, float temp, const char *user, int max_tok,
               int stop_at, int32_t **hist, kz_mtp_stats *ms, int resume, oracle_t *orc) {
    if (ms) memset(ms, 0, sizeof *ms); /* a gen that fails reports no verify */
    kz_context *c = kt_mtp_context(m, (kt_mtp_cfg){.n_ctx = 1400, .n_batch = 16, .kv = kv, .temperature = temp,
                                                   .seed = 1234, .k = mtp_k, .adaptive = adaptive});
    if (!c) return -1;
    if (orc) kz_spec_set_oracle(c, oracle, orc);
    kt_stop_at cs = {0, stop_at};
    kz_stats st;
    int rc = kz_generate(c, "You are terse.", user, max_tok, kt_stop_at_piece, &cs, &st);
    if (rc == 0 && resume) { /* continue the conversation: prefix reuse of everything so far */
        cs.stop_at = 0;
        rc = kz_generate(c, "You are terse.", user, max_tok, kt_stop_at_piece, &cs, &st);
    }
    int n = -1;
    if (rc == 0) {
        n = kt_history(c, 1, hist);
        if (n >= 0) (*hist)[n] = st.n_gen; /* the last sampled token is not in the history: compare counts */
    } else {
        fprintf(stderr, "generate: %s\n", kz_context_error(c));
    }
    if (ms) kz_context_mtp_stats(c, ms);
    kz_context_free(c);
    return n;
}

static const char *k_prompts[] = {
    ("Write a long story about a lighthouse keeper who counts the waves every night and the ships that pass "
     "by the rocks, with every detail of the weather, the lamp and the sea birds."), /* (): one string, for clang */
    "List numbers, colours and animals: one two three four five six seven, red green blue, cat dog horse cow.",
    "Explain in French: pourquoi le ciel est-il bleu, et pourquoi les couchers de soleil sont-ils rouges ?",
};

static void test_generate(kz_model *m, int light) {
    const kz_kv_type kvs[2] = {KZ_KV_F16, KZ_KV_Q8_0};
    const int ks[] = {1, 3, 8, 4};
    long drafted = 0, accepted = 0, verifies = 0, o_drafted = 0, o_accepted = 0, n_tok = 0;
    for (int ip = 0; ip < 3; ip++)
        for (int ikv = 0; ikv < 2; ikv++) {
            if (light && (ip != 1 || ikv != 1)) continue;
            if (!light && ip == 2 && ikv == 0) continue; /* time: 5 of the 6 pairs */
            int32_t *ref = NULL;
            const int nr = gen(m, kvs[ikv], 0, 0, 0.0f, k_prompts[ip], 600, 0, &ref, NULL, 0, NULL);
            CHECK(nr > 0);
            if (nr <= 0) continue;
            n_tok += ref[nr];
            /* the MTP block's drafts (k = 1, 3, 8 or adaptive up to 4), then drafts from the
             * oracle (mostly right: the accept path) with another k */
            for (int pass = 0; pass < 2; pass++) {
                const int ik = (ip * 2 + ikv + pass) % 4;
                oracle_t o = {ref, nr, 77 + (unsigned long long)ip};
                int32_t *got = NULL;
                kz_mtp_stats ms;
                const int ng = gen(m, kvs[ikv], ks[ik], ik == 3, 0.0f, k_prompts[ip], 600, 0, &got, &ms, 0,
                                   pass ? &o : NULL);
                CHECKF(ng == nr && !memcmp(got, ref, (size_t)(nr + 1) * sizeof *ref),
                       "prompt %d kv %d k %d %s: speculative history differs (%d vs %d tokens)", ip, ikv, ks[ik],
                       pass ? "oracle" : "mtp", ng, nr);
                if (ik < 3) CHECKF(ms.verifies > 0, "prompt %d k %d: no verify ran", ip, ks[ik]);
                CHECK(ms.accepted <= ms.drafted);
                if (pass) { o_drafted += ms.drafted; o_accepted += ms.accepted; }
                else { drafted += ms.drafted; accepted += ms.accepted; verifies += ms.verifies; }
                free(got);
            }
            free(ref);
        }
    printf("generate: %ld tokens compared per setting; MTP drafts: %ld verifies, %ld drafts, %ld accepted; "
           "oracle drafts: %ld, accepted %ld\n", n_tok, verifies, drafted, accepted, o_drafted, o_accepted);
    CHECKF(light || n_tok >= 512, "only %ld tokens generated", n_tok);
    CHECK(o_accepted > o_drafted / 3); /* the accept path ran a lot */
    if (light) return;

    /* cancel (the callback stops at piece 77) then a resumed generation on the same context */
    for (int ikv = 0; ikv < 2; ikv++) {
        int32_t *ref = NULL, *got = NULL;
        const int nr = gen(m, kvs[ikv], 0, 0, 0.0f, k_prompts[1], 300, 77, &ref, NULL, 1, NULL);
        oracle_t o = {ref, nr, 5};
        const int ng = gen(m, kvs[ikv], 3, 0, 0.0f, k_prompts[1], 300, 77, &got, NULL, 1, ikv ? &o : NULL);
        CHECKF(nr > 0 && ng == nr && !memcmp(got, ref, (size_t)(nr + 1) * sizeof *ref),
               "cancel + resume, kv %d: %d vs %d tokens", ikv, ng, nr);
        free(ref);
        free(got);
    }
    /* sampling: every token is the sampler's own draw, so the same seed gives the same text */
    {
        int32_t *ref = NULL, *got = NULL;
        const int nr = gen(m, KZ_KV_F16, 0, 0, 0.8f, k_prompts[0], 300, 0, &ref, NULL, 0, NULL);
        oracle_t o = {ref, nr, 9};
        const int ng = gen(m, KZ_KV_F16, 3, 0, 0.8f, k_prompts[0], 300, 0, &got, NULL, 0, &o);
        CHECKF(nr > 0 && ng == nr && !memcmp(got, ref, (size_t)(nr + 1) * sizeof *ref), "sampled: %d vs %d", ng, nr);
        free(ref);
        free(got);
    }
}

/* ---- the speculative-sampling rule: the output is distributed as p ---- */

static double unif01(unsigned long long *r) { return (double)(kt_rng(r) >> 11) * (1.0 / 9007199254740992.0); }
static int draw(const float *q, int n, double u) {
    double c = 0;
    for (int i = 0; i < n; i++) {
        c += q[i];
        if (u < c) return i;
    }
    return n - 1;
}

/* Pearson chi-square of N draws of kz_spec_accept (draft d ~ q) against N p. 5 degrees of
 * freedom: P(chi2 > 35.9) = 1e-6 under the rule, so a correct rule fails this seeded test
 * with probability 1e-6, while accepting every draft (output ~ q) gives thousands here. */
static void test_accept_rule(void) {
    enum { NV = 6, N = 200000 };
    const float p[NV] = {0.30f, 0.05f, 0.25f, 0.0f, 0.15f, 0.25f};  /* a zero where q is not */
    const float q[NV] = {0.10f, 0.40f, 0.25f, 0.15f, 0.0f, 0.10f};  /* and the other way round */
    unsigned long long r = 12345;
    long cnt[NV] = {0}, cnt_bad[NV] = {0};
    long accepted = 0;
    for (int i = 0; i < N; i++) {
        const int d = draw(q, NV, unif01(&r));
        const int x = kz_spec_accept(p, q, NV, d, unif01(&r), unif01(&r));
        CHECK(x >= 0 && x < NV);
        cnt[x]++;
        cnt_bad[d]++;
        accepted += x == d;
    }
    double chi = 0, chi_bad = 0;
    for (int i = 0; i < NV; i++) {
        if (p[i] == 0) { CHECK(cnt[i] == 0); continue; } /* p = 0: never produced */
        const double e = (double)N * p[i];
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        chi_bad += (cnt_bad[i] - e) * (cnt_bad[i] - e) / e;
    }
    double want_acc = 0; /* sum min(p, q) */
    for (int i = 0; i < NV; i++) want_acc += p[i] < q[i] ? p[i] : q[i];
    printf("accept rule: chi2 %.2f (5 dof, bound 35.9), accept-always chi2 %.0f, acceptance %.4f (sum min(p,q) %.4f)\n",
           chi, chi_bad, (double)accepted / N, want_acc);
    CHECK(chi < 35.9);
    CHECK(chi_bad > 35.9);
    CHECK(fabs((double)accepted / N - want_acc) < 0.01);
}

int main(int argc, char **argv) {
    test_accept_rule();
    char path[96], path0[96];
    snprintf(path, sizeof path, "/tmp/kz_test_mtp_%d.gguf", (int)getpid());
    snprintf(path0, sizeof path0, "/tmp/kz_test_mtp0_%d.gguf", (int)getpid());
    kz_model *m0 = make(path0, KZ_T_Q8_0, 0, 3);
    CHECK(m0 && !kz_model_has_mtp(m0));
    kz_model_free(m0);
    remove(path0);
    const uint32_t types[2] = {KZ_T_F32, KZ_T_Q4_0};
    /* children and KZ_TEST_SMALL (qemu): the Q4_0 model, verify rows + one generate setting */
    const int child = (argc >= 2 && !strcmp(argv[1], "--child")) || getenv("KZ_TEST_SMALL");
    for (int it = child; it < 2; it++) { /* children: the Q4_0 model only (time) */
        kz_model *m = make(path, types[it], 1, 5 + it);
        CHECK(m && kz_model_has_mtp(m));
        if (!m) continue;
        char d[1024];
        kz_model_describe(m, d, sizeof d);
        CHECKF(strstr(d, "+ MTP block") != NULL, "%s", d);
        test_verify_rows(m, KZ_KV_F16);
        test_deferred_fill(m);
        if (!child && it == 1) test_verify_rows(m, KZ_KV_Q8_0);
        if (!child && it == 0) test_verify_rows(m, KZ_KV_F32);
        if (it == 1) test_generate(m, child); /* Q4_0: the integer paths; F32 rows checked above */
        kz_model_free(m);
    }
    remove(path);
    if (!child) { /* the other x86 levels, each in a child */
#if defined(__x86_64__)
        const char *isa = getenv("KZ_ISA");
        const char *lv[] = {"scalar", "avx2"};
        for (int i = 0; i < 2; i++) {
            if (isa && !strcmp(isa, lv[i])) continue;
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                setenv("KZ_ISA", lv[i], 1);
                execl("/proc/self/exe", argv[0], "--child", (char *)NULL);
                _exit(127);
            }
            int st = 0;
            CHECKF(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                   "KZ_ISA=%s child failed", lv[i]);
        }
#endif
    }
    KT_END();
}
