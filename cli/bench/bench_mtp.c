/* kazeia bench --mtp: what MTP self-speculative decoding costs and gains on a model with an MTP
 * block. In one run: the cost of one plain decode step, of a verify batch of n = 2..K+1 tokens
 * and of one MTP draft step (each relative to the plain step), the rollback of a verify's
 * tail; plain and speculative decode tok/s through kz_generate with the acceptance by draft
 * position; and the projected speed-up S(a, k) = E(a, k) / (v(k+1) + k d) with
 * E(a, k) = (1 - a^(k+1)) / (1 - a) tokens per round at a per-draft acceptance a, v(n) the
 * verify cost and d the draft cost relative to a plain step (docs/mtp.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kazeia.h"
#include "cli/args.h"
#include "cli/bench/bench_mtp.h"
#include "forward/seq.h"
#include "model/model.h"
#include "sys/clock.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kazeia bench --mtp -m MODEL.gguf [options]   MTP speculative decoding costs and speed\n"
               "  -t N            threads (default: all CPUs)\n"
               "  -r R            repetitions of each timed step (default 3)\n"
               "  -n N            tokens generated in each kz_generate run (default 64)\n"
               "  --mtp-max K     largest draft count measured (default 3, <= 8)\n"
               "  --mtp-vocab N   also measure the draft with its head trimmed to token ids < N, and\n"
               "                  use it in the speculative generate runs (default 0: full head only)\n"
               "  --kv f16|f32|q8_0  KV cache type (default f16)\n"
               "  -p TEXT         prompt of the generate runs (default: a short English request)\n"
               "  --profile       per-part time (ms per call) of the plain step and of each verify size\n");
}

/* the minimum of the repetitions is reported: the run least disturbed by other jobs */
typedef struct {
    double min, sum;
    int n;
} tm;
static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* median of n ratios (sorted in place) */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
static void tm_add(tm *t, double ms) {
    if (!t->n || ms < t->min) t->min = ms;
    t->sum += ms;
    t->n++;
}

static void prof_add(kz_profile *acc, const kz_profile *p) {
    for (int i = 0; i < KZ_PROF_COUNT; i++) acc->ms[i] += p->ms[i];
    acc->tokens += p->tokens;
    acc->calls += p->calls;
}

static int count_piece(const char *s, size_t n, void *ud) {
    (void)s;
    (void)n;
    (void)ud;
    return 0;
}

int cmd_bench_mtp(int argc, char **argv) {
    const char *model = NULL, *kvs = "f16";
    const char *prompt = "Write a short story about a lighthouse keeper and the ships he watches at night.";
    int threads = 0, reps = 3, n_gen = 64, kmax = 3, dvocab = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--mtp")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--profile")) { profile = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia bench --mtp: option %s needs a value (see --help)\n", a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_int("kazeia bench", a, v, 1, 512, &threads);
        else if (!strcmp(a, "-r")) bad = kz_arg_int("kazeia bench", a, v, 1, 1000, &reps);
        else if (!strcmp(a, "-n")) bad = kz_arg_int("kazeia bench", a, v, 1, 1 << 20, &n_gen);
        else if (!strcmp(a, "--mtp-max")) bad = kz_arg_int("kazeia bench", a, v, 1, KZ_MTP_MAX_DRAFT, &kmax);
        else if (!strcmp(a, "--mtp-vocab")) bad = kz_arg_int("kazeia bench", a, v, 0, 1 << 30, &dvocab);
        else if (!strcmp(a, "--kv")) kvs = v;
        else if (!strcmp(a, "-p")) prompt = v;
        else { fprintf(stderr, "kazeia bench --mtp: unknown option '%s' (see --help)\n", a); return 2; }
        if (bad) return 2;
    }
    kz_kv_type kv = !strcmp(kvs, "f32") ? KZ_KV_F32 : !strcmp(kvs, "q8_0") ? KZ_KV_Q8_0 : KZ_KV_F16;
    if (strcmp(kvs, "f32") && strcmp(kvs, "f16") && strcmp(kvs, "q8_0")) {
        fprintf(stderr, "kazeia bench --mtp: --kv expects f32, f16 or q8_0, got '%s'\n", kvs);
        return 2;
    }
    if (!model) { fprintf(stderr, "kazeia bench --mtp: missing -m MODEL.gguf\n"); return 2; }
    char err[512] = "";
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = threads;
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "kazeia bench --mtp: cannot load model: %s\n", err); return 1; }
    if (!kz_model_has_mtp(m)) {
        fprintf(stderr, "kazeia bench --mtp: %s has no MTP block (nextn_predict_layers); convert it without --no-mtp\n",
                model);
        kz_model_free(m);
        return 1;
    }
    const int V = kz_model_n_vocab(m), E = m->hp.n_embd, P = 64;
    int rc = 1;
    double *ratio = NULL;
    float *lg = malloc((size_t)(KZ_SPEC_NMAX) * V * sizeof(float)), *h = malloc(2 * (size_t)E * sizeof(float));
    int32_t toks[64 + 16];
    unsigned long long r = 88172645463325252ull;
    for (int i = 0; i < 64 + 16; i++) {
        r ^= r << 13; r ^= r >> 7; r ^= r << 17;
        toks[i] = (int32_t)(r % (unsigned long long)V);
    }
    kz_seq *plain = kz_seq_new(m, 1024, 64, threads, kv, err, sizeof err);
    kz_seq *spec = plain ? kz_seq_new(m, 1024, 64, threads, kv, err, sizeof err) : NULL;
    if (!lg || !h || !plain || !spec) { fprintf(stderr, "kazeia bench --mtp: %s\n", err[0] ? err : "out of memory"); goto out; }
    kz_seq_mtp_enable(plain, 0);
    /* 1. step costs, at position P */
    if (kz_forward(m, plain, toks, P, lg, 0, err, sizeof err) || kz_forward(m, spec, toks, P, lg, 0, err, sizeof err)) {
        fprintf(stderr, "kazeia bench --mtp: %s\n", err);
        goto out;
    }
    /* --profile: [0] the plain steps, [n] the n-token verifies (each seq's profile reset around the call) */
    kz_profile pr[KZ_SPEC_NMAX + 1];
    memset(pr, 0, sizeof pr);
    tm t_plain = {0}, t_draft = {0}, t_draft_trim = {0}, t_verify[KZ_SPEC_NMAX + 1] = {{0}}, t_keep = {0};
    const int trim_rows = dvocab ? kz_seq_mtp_set_vocab(spec, dvocab) : V;
    kz_seq_mtp_set_vocab(spec, 0);
    /* per repetition, each cost over the plain step of the same repetition (they run back to
     * back): on a shared machine the median of these drifts less than ratios of minima */
    ratio = calloc((size_t)reps * (KZ_SPEC_NMAX + 3), sizeof *ratio); /* [0]: the trimmed draft */
    if (!ratio) goto out;
    for (int rep = 0; rep < reps; rep++) {
        kz_seq_profile_enable(plain, profile);
        double t0 = kz_now_ms();
        kz_forward(m, plain, &toks[P + (rep % 16)], 1, lg, 0, err, sizeof err);
        const double tp = kz_now_ms() - t0;
        if (profile) prof_add(&pr[0], kz_seq_profile(plain));
        tm_add(&t_plain, tp);
        const float *hid = kz_seq_mtp_hidden(spec);
        memcpy(h, hid, (size_t)E * sizeof(float));
        t0 = kz_now_ms();
        kz_seq_mtp_draft(spec, h, toks[P], kz_seq_n_past(spec) - 1, lg, h + E);
        tm_add(&t_draft, kz_now_ms() - t0);
        ratio[(size_t)1 * reps + rep] = (kz_now_ms() - t0) / tp;
        if (dvocab) { /* the same step with the trimmed head */
            kz_seq_mtp_set_vocab(spec, dvocab);
            t0 = kz_now_ms();
            kz_seq_mtp_draft(spec, h, toks[P], kz_seq_n_past(spec) - 1, lg, h + E);
            tm_add(&t_draft_trim, kz_now_ms() - t0);
            ratio[rep] = (kz_now_ms() - t0) / tp;
            kz_seq_mtp_set_vocab(spec, 0);
        }
        for (int n = 2; n <= kmax + 1; n++) {
            kz_seq_profile_enable(spec, profile);
            t0 = kz_now_ms();
            if (kz_seq_verify_begin(spec, err, sizeof err) || kz_forward(m, spec, &toks[P], n, lg, 1, err, sizeof err)) {
                fprintf(stderr, "kazeia bench --mtp: %s\n", err);
                goto out;
            }
            tm_add(&t_verify[n], kz_now_ms() - t0);
            if (profile) prof_add(&pr[n], kz_seq_profile(spec));
            kz_seq_profile_enable(spec, 0);
            ratio[(size_t)n * reps + rep] = (kz_now_ms() - t0) / tp;
            t0 = kz_now_ms();
            kz_seq_verify_keep(spec, 1); /* back to one token past P: the worst-case rollback */
            tm_add(&t_keep, kz_now_ms() - t0);
        }
    }
    const double unit = t_plain.min;
    double rel[KZ_SPEC_NMAX + 2];
    for (int n = 1; n <= kmax + 1; n++) rel[n] = median(ratio + (size_t)n * reps, reps); /* rel[1]: draft */
    printf("model: %s (%d threads, KV %s), position %d, %d repetitions: best time, and the median over\n"
           "repetitions of the cost / the plain step just before it\n", model, threads, kvs, P, reps);
    printf("plain decode step:   %8.2f ms  (1.00x)\n", unit);
    printf("MTP draft step:      %8.2f ms  (%.3fx)\n", t_draft.min, rel[1]);
    const double d_trim = dvocab ? median(ratio, reps) : rel[1];
    if (dvocab)
        printf("MTP draft, trimmed:  %8.2f ms  (%.3fx)  [LM head rows of token ids < %d of %d]\n", t_draft_trim.min,
               d_trim, trim_rows, V);
    for (int n = 2; n <= kmax + 1; n++)
        printf("verify of %d tokens:  %8.2f ms  (%.3fx)  [recorded inputs included]\n", n,
               t_verify[n].min, rel[n]);
    printf("rollback to 1 token: %8.2f ms  (%.3fx)  [restore + replay of the delta rule]\n", t_keep.min, t_keep.min / unit);
    {   /* what a snapshot copy of the GDN state would cost a verify (it reads the state from one
         * buffer and writes the other instead: verify.c) */
        kz_seq_view sv;
        kz_seq_view_get(spec, &sv);
        const size_t bytes = (sv.n_conv + sv.n_ssm) * sizeof(float);
        float *cp = malloc(bytes ? bytes : 1);
        tm t_cp = {0};
        for (int rep = 0; cp && rep < reps; rep++) {
            const double t0 = kz_now_ms();
            memcpy(cp, sv.conv, bytes);
            tm_add(&t_cp, kz_now_ms() - t0);
        }
        if (cp)
            printf("GDN state copy:      %8.2f ms  (%.3fx)  [%.1f MiB: saved per verify by a second buffer]\n", t_cp.min,
                   t_cp.min / unit, bytes / 1048576.0);
        free(cp);
    }

    if (profile) {
        printf("profile, ms per call (mean over %d repetitions):\n  %-14s %8s", reps, "part", "plain");
        for (int n = 2; n <= kmax + 1; n++) printf("  verify %d", n);
        printf("\n");
        for (int i = 0; i <= KZ_PROF_COUNT; i++) {
            printf("  %-14s", i < KZ_PROF_COUNT ? kz_prof_name(i) : "total");
            for (int n = 1; n <= kmax + 1; n++) {
                const kz_profile *q = &pr[n == 1 ? 0 : n];
                double v = 0;
                for (int j = 0; j < KZ_PROF_COUNT; j++)
                    if (i == KZ_PROF_COUNT || j == i) v += q->ms[j];
                printf(n == 1 ? " %8.2f" : " %9.2f", q->calls ? v / q->calls : 0.0);
            }
            printf("\n");
        }
    }

    /* 2. end to end through kz_generate: plain, speculative adaptive, speculative fixed k,
     * alternated over the repetitions (a load change hits all three); medians and spreads */
    double *tps = calloc((size_t)reps * 5, sizeof *tps), *rat = tps ? tps + (size_t)3 * reps : NULL;
    kz_mtp_stats st[3];
    memset(st, 0, sizeof st);
    if (!tps) goto out;
    for (int rep = 0; rep < reps; rep++)
        for (int mode = 0; mode < 3; mode++) {
            kz_context_params cp = kz_context_default_params();
            cp.n_threads = threads;
            cp.kv_type = kv;
            cp.n_ctx = 1024 > n_gen + 256 ? 1024 : n_gen + 256;
            kz_context *c = kz_context_new(m, &cp, err, sizeof err);
            if (!c) { fprintf(stderr, "kazeia bench --mtp: %s\n", err); free(tps); goto out; }
            kz_mtp_params q = kz_mtp_default_params();
            q.enabled = mode > 0;
            q.max_draft = kmax;
            q.adaptive = mode == 1;
            q.draft_vocab = dvocab;
            kz_context_set_mtp(c, &q);
            kz_stats gs;
            if (kz_generate(c, NULL, prompt, n_gen, count_piece, NULL, &gs) != 0) {
                fprintf(stderr, "kazeia bench --mtp: %s\n", kz_context_error(c));
                kz_context_free(c);
                free(tps);
                goto out;
            }
            tps[(size_t)mode * reps + rep] = gs.t_decode_ms > 0 ? gs.n_gen * 1e3 / gs.t_decode_ms : 0;
            kz_mtp_stats s1;
            kz_context_mtp_stats(c, &s1);
            kz_context_free(c);
            if (rep == reps - 1) st[mode] = s1; /* the same text every repetition: show one */
        }
    for (int mode = 1; mode < 3; mode++) { /* per repetition, against the plain run beside it */
        for (int rep = 0; rep < reps; rep++)
            rat[(size_t)(mode - 1) * reps + rep] = tps[rep] > 0 ? tps[(size_t)mode * reps + rep] / tps[rep] : 0;
    }
    double med[3], lo[3], hi[3];
    for (int mode = 0; mode < 3; mode++) {
        med[mode] = median(tps + (size_t)mode * reps, reps); /* sorts: lo/hi are the ends */
        lo[mode] = tps[(size_t)mode * reps];
        hi[mode] = tps[(size_t)mode * reps + reps - 1];
    }
    printf("generation of %d tokens, %d runs of each, alternated: median tok/s [min..max]\n", n_gen, reps);
    printf("decode, plain:                 %8.2f tok/s [%.2f..%.2f]\n", med[0], lo[0], hi[0]);
    for (int mode = 1; mode < 3; mode++) {
        const kz_mtp_stats *s = &st[mode];
        const double r1 = median(rat + (size_t)(mode - 1) * reps, reps);
        printf("decode, MTP %-8s k<=%d:     %8.2f tok/s [%.2f..%.2f] (%.2fx [%.2f..%.2f])  %ld verifies, %ld plain steps, "
               "%ld/%ld drafts accepted, %.2f tokens/verify\n",
               mode == 1 ? "adaptive" : "fixed", kmax, med[mode], lo[mode], hi[mode], r1, rat[(size_t)(mode - 1) * reps],
               rat[(size_t)(mode - 1) * reps + reps - 1], s->verifies, s->plain_steps, s->accepted, s->drafted,
               s->verifies ? (double)(s->verifies + s->accepted) / s->verifies : 0.0);
        printf("  acceptance by draft position:");
        for (int i = 0; i < kmax; i++)
            printf(" %d: %.2f", i + 1, s->drafted_at[i] ? (double)s->accepted_at[i] / s->drafted_at[i] : 0.0);
        printf("\n");
    }
    free(tps);
    /* 3. projection from the measured costs */
    printf("projected speed-up S(a,k) = (1 - a^(k+1)) / (1 - a) / (v(k+1) + k d), d = %.3f%s:\n", d_trim,
           dvocab ? " (trimmed head)" : "");
    const double as[] = {0.6, 0.75, 0.85};
    for (int ia = 0; ia < 3; ia++) {
        printf("  a = %.2f:", as[ia]);
        for (int k = 1; k <= kmax; k++) {
            double e = 0, p = 1;
            for (int j = 0; j <= k; j++) { e += p; p *= as[ia]; }
            printf("  k=%d %.2fx", k, e / (rel[k + 1] + k * d_trim));
        }
        printf("\n");
    }
    rc = 0;
out:
    free(ratio);
    kz_seq_free(plain);
    kz_seq_free(spec);
    free(lg);
    free(h);
    kz_model_free(m);
    return rc;
}
