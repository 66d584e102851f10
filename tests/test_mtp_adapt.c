/* The adaptive draft length of MTP decoding (src/api/speculative.c, choose_k) on a tiny random
 * qwen35 with an MTP block. The costs are given (kz_spec_set_costs) and the drafts come from an
 * oracle of known accuracy, so every decision is deterministic:
 *  - drafts always wrong, cheap steps: drafting stops after a few misses, and the one-draft
 *    probes that follow back off (16, 32, 64... steps apart), so a model that cannot guess costs
 *    a handful of verifies, not one every 16 tokens;
 *  - drafts always right, cheap steps: nearly every round drafts the maximum;
 *  - drafts always right, but a draft as dear as a plain step and a verify of n tokens n steps
 *    (a small model whose decode is compute bound): drafting never pays, only probes run.
 * Every run's tokens equal plain greedy decoding's. */
#include <stdint.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "api/api.h"
#include "api/context.h"
#include "model/types.h"
#include "kt_model.h"

#define NGEN 400

typedef struct {
    const int32_t *ref;
    int n_ref, wrong, V;
} oracle_t;

static int32_t oracle(void *ud, const int32_t *hist, int n_hist, int32_t tok, int i) {
    const oracle_t *o = ud;
    (void)hist;
    const int at = n_hist + 1 + i;
    const int32_t d = at < o->n_ref ? o->ref[at] : tok;
    return o->wrong ? (d + 1) % o->V : d;
}

static int count(const char *s, size_t n, void *ud) {
    (void)s;
    (void)n;
    (void)ud;
    return 0;
}

/* greedy generation; with costs: MTP adaptive k <= 3 with the oracle. Returns the history length */
static int gen(kz_model *m, const double *costs, oracle_t *o, int32_t **hist, kz_mtp_stats *ms) {
    if (ms) memset(ms, 0, sizeof *ms); /* a gen that fails reports no verify */
    kz_context *c = kt_mtp_context(m, (kt_mtp_cfg){.n_ctx = 1024, .kv = KZ_KV_F16, .k = costs ? 3 : 0, .adaptive = 1});
    if (!c) return -1;
    if (costs) {
        CHECK(kz_spec_set_oracle(c, oracle, o) == 0);
        CHECK(kz_spec_set_costs(c, costs[0], costs, 4) == 0);
    }
    kz_stats st;
    int n = -1;
    if (kz_generate(c, NULL, "Count the waves and the ships, one by one, all night long.", NGEN, count, NULL, &st) == 0) {
        n = kt_history(c, 0, hist);
    } else {
        fprintf(stderr, "generate: %s\n", kz_context_error(c));
    }
    if (ms) kz_context_mtp_stats(c, ms);
    kz_context_free(c);
    return n;
}

int main(void) {
    char path[96];
    snprintf(path, sizeof path, "/tmp/kz_test_mtp_adapt_%d.gguf", (int)getpid());
    kz_model *m = kt_tiny_qwen35(path, KZ_T_Q8_0, 1, 4) /* a seed whose text runs to NGEN */;
    CHECK(m != NULL);
    if (!m) KT_END();
    int32_t *ref = NULL;
    const int nr = gen(m, NULL, NULL, &ref, NULL);
    CHECKF(nr > 300, "plain run: %d tokens", nr);
    /* [0]: a draft step; [1..4]: a verify of 1..4 tokens, relative to a plain step */
    const double cheap[5] = {0.05, 1.0, 1.05, 1.1, 1.15}, dear[5] = {1.0, 1.0, 2.0, 3.0, 4.0};
    struct {
        const char *what;
        const double *costs;
        int wrong;
    } cases[3] = {{"always wrong, cheap", cheap, 1}, {"always right, cheap", cheap, 0}, {"always right, dear", dear, 0}};
    for (int ic = 0; ic < 3 && nr > 0; ic++) {
        oracle_t o = {ref, nr, cases[ic].wrong, kz_model_n_vocab(m)};
        int32_t *got = NULL;
        kz_mtp_stats ms;
        const int ng = gen(m, cases[ic].costs, &o, &got, &ms);
        CHECKF(ng == nr && !memcmp(got, ref, (size_t)nr * sizeof *ref), "%s: tokens differ from plain greedy",
               cases[ic].what);
        printf("%-20s %4ld tokens: %3ld verifies, %3ld plain steps, %3ld/%3ld drafts accepted\n", cases[ic].what,
               ms.tokens, ms.verifies, ms.plain_steps, ms.accepted, ms.drafted);
        if (ic == 1) { /* k = 3 nearly always; plain steps: the re-measure every 32 rounds */
            CHECKF(ms.accepted >= ms.drafted - 3 && ms.drafted >= 3 * ms.verifies - 3, "%ld/%ld over %ld verifies",
                   ms.accepted, ms.drafted, ms.verifies);
            CHECKF(ms.plain_steps * 20 <= ms.tokens, "%ld plain steps of %ld tokens", ms.plain_steps, ms.tokens);
        } else { /* the misses (case 0) stop drafting after ~7; then probes, 16, 32, 64... apart */
            CHECKF(ms.verifies >= 3 && ms.verifies <= 14, "%s: %ld verifies", cases[ic].what, ms.verifies);
            CHECKF(ms.plain_steps + ms.verifies + ms.accepted == ms.tokens, "%ld + %ld + %ld != %ld",
                   ms.plain_steps, ms.verifies, ms.accepted, ms.tokens);
        }
        free(got);
    }
    free(ref);
    kz_model_free(m);
    remove(path);
    KT_END();
}
