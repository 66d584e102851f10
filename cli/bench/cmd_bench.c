/* kazeia bench: prefill / decode throughput (llama-bench style), weight bytes read per decoded
 * token, and the achieved decode bandwidth as a share of the machine's measured read bandwidth.
 *
 * Method. One context with n_ctx = p + n (+ slack); every run starts from a reset sequence.
 * Prefill: p random token ids in one kz_eval with no logits buffer (split into n_batch chunks
 * inside), logits of the last token only. Decode: n single-token kz_evals right after the
 * prefill (depth p), each
 * feeding back the argmax of the previous logits (or a random id with --decode random).
 * Warm-up runs are not counted. tok/s per run; median, min, max and stddev over the runs.
 *
 * Weight bytes per decoded token: what one decode step has to stream from memory, taken from
 * the loaded model (not the file): every main layer's matrices and small f32 vectors (norms,
 * conv, gates; MTP blocks excluded, decode does not run them), the output norm, the LM head
 * and one token-embedding row. The KV cache / recurrent state reads are not counted.
 *
 * Read bandwidth (--membw, cli/bench/membw.c): T threads (a pool like the engine's) sum 1 MiB chunks,
 * taken from a shared counter, of a buffer much larger than the LLC with the fastest wide
 * integer vector loads this CPU has; the sum is checked against the value the fill implies, so
 * the compiler cannot drop a load.
 * Median GB/s of several passes. Decode is also compared with samples of it taken between its
 * tokens (--membw-every): see the runs below. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "cli/cli.h"
#include "cli/args.h"
#include "api/api.h"
#include "nn/attention.h"
#include "forward/seq.h"
#include "nn/ops.h"
#include "cli/bench/bench_mtp.h"
#include "cli/bench/bench_matmuls.h"
#include "cli/bench/bench_stats.h"
#include "cli/bench/membw.h"
#include "sys/threadpool.h"
#include "sys/topology.h"

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia bench -m MODEL.gguf [options]     prefill/decode speed + bandwidth use\n"
            "       kazeia bench --membw [-t T] [--json]    only measure memory read bandwidth\n"
            "       kazeia bench --cascade -m THINKER --guard GUARD [-c CTX]  resident memory (--cascade --help)\n"
            "       kazeia bench --mtp -m MODEL.gguf [...]  MTP speculative decoding costs/speed (--mtp --help)\n"
            "  -p N             prefill tokens (default 512; 0 = no prefill test)\n"
            "  -n N             decode tokens (default 128; 0 = no decode test)\n"
            "  -t T             threads (default: the library's, the fast cores on big.LITTLE)\n"
            "  -r R             measured runs (default 5), after --warmup W runs (default 1)\n"
            "  --kv f16|f32|q8_0  KV cache type (default f16)\n"
            "  --n-batch B      max tokens per prefill chunk (default 512)\n"
            "  --decode greedy|random  next decode token: argmax of the logits (default) or random\n"
            "  --seed S         seed of the random token ids (default 1)\n"
            "  --membw-gbs X    use X GB/s as the machine's read bandwidth (skips the measurement)\n"
            "  --no-membw       skip the bandwidth measurement (no %% of bandwidth reported)\n"
            "  --membw-mib M    bandwidth buffer size in MiB (default 1024)\n"
            "  --membw-passes K measured passes over the buffer (default 5, after 1 warm-up)\n"
            "  --membw-every K  also sample the read bandwidth every K decode tokens (default 16; 0 = off),\n"
            "                   outside the timed decode, and report the decode against those samples\n"
            "  --membw-sample-mib M  buffer of those samples in MiB (default 256)\n"
            "  --json           print one JSON object on stdout instead of the table\n"
            "  --profile        per-part time breakdown of the measured prefills and decode steps (table output)\n"
            "  --matmuls R      instead of -p/-n: R rounds of one decode step's matrix products alone (same\n"
            "                   kernels and dispatch, no attention/GDN/norms), each between two read-bandwidth\n"
            "                   samples of --membw-sample-mib MiB; %% of the samples per part\n"
            "  --no-repack      keep Q4_0 weights zero-copy (mmap): no 16-row repack at load (the default\n"
            "                   repacks where a packed kernel exists: AVX2, AVX-512 VNNI, ARM64 dotprod; --repack\n"
            "                   says so explicitly)\n"
            "Decode is measured right after the prefill (depth p). Peak RSS excludes the bandwidth\n"
            "buffers.\n");
}

static int parse_pos_double(const char *s, const char *opt, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || isinf(v)) {
        fprintf(stderr, "kazeia bench: bad value '%s' for %s (expected a positive number)\n", s, opt);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---------------- statistics ---------------- */

typedef struct { double median, min, max, mean, stddev; } bstats;

static bstats stats_of(const double *v, int n) {
    bstats s = {0, 0, 0, 0, 0};
    if (n <= 0) return s;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return s;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, kz_cmp_double);
    s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    s.min = t[0];
    s.max = t[n - 1];
    double sum = 0, sq = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    s.mean = sum / n;
    for (int i = 0; i < n; i++) sq += (t[i] - s.mean) * (t[i] - s.mean);
    s.stddev = n > 1 ? sqrt(sq / (n - 1)) : 0.0; /* sample stddev, as llama-bench */
    free(t);
    return s;
}

/* a measured run's per-part times added into the sum over runs */
static void prof_add(kz_profile *sum, const kz_profile *p) {
    for (int i = 0; i < KZ_PROF_COUNT; i++) sum->ms[i] += p->ms[i];
    sum->tokens += p->tokens;
    sum->calls += p->calls;
}

/* ---------------- memory read bandwidth ---------------- */

/* Median GB/s of `passes` timed passes after one warm-up; -1 on failure. */
static double measure_membw(int n_threads, size_t mib, int passes, double *best, const char **loads, char *err,
                            size_t errlen) {
    kz_membw *b = kz_membw_open(n_threads, mib, err, errlen);
    if (!b) return -1;
    if (loads) *loads = kz_membw_method(b);
    double *gbs = malloc((size_t)passes * sizeof *gbs);
    double res = -1;
    if (!gbs) { snprintf(err, errlen, "out of memory setting up the bandwidth test"); goto out; }
    for (int pass = -1; pass < passes; pass++) {
        double g = kz_membw_pass(b, err, errlen);
        if (g < 0) goto out;
        if (pass >= 0) gbs[pass] = g;
    }
    bstats st = stats_of(gbs, passes);
    res = st.median;
    if (best) *best = st.max;
out:
    free(gbs);
    kz_membw_close(b);
    return res;
}

/* ---------------- model accounting ---------------- */

typedef struct {
    uint64_t layers, lm_head, output_norm, embd_row, total;
    uint64_t model_bytes, n_params; /* all tensors in the file */
} wbytes_t;

static uint64_t mat_bytes(const kz_wmat *w) { return w->data ? (uint64_t)w->row_bytes * (uint64_t)w->n_out : 0; }
static uint64_t vec_bytes(const float *p, int64_t n) { return p ? (uint64_t)n * sizeof(float) : 0; }

static wbytes_t weight_bytes(const kz_model *m) {
    const kz_hparams *hp = &m->hp;
    wbytes_t b;
    memset(&b, 0, sizeof b);
    for (int il = 0; il < hp->n_layer; il++) {
        const kz_layer *l = &m->layers[il];
        uint64_t s = vec_bytes(l->attn_norm, hp->n_embd) + vec_bytes(l->post_norm, hp->n_embd);
        s += mat_bytes(&l->ffn_gate) + mat_bytes(&l->ffn_up) + mat_bytes(&l->ffn_down);
        if (l->is_gdn) {
            s += mat_bytes(&l->wqkv) + mat_bytes(&l->wgate) + mat_bytes(&l->wbeta) + mat_bytes(&l->walpha) +
                 mat_bytes(&l->wssm_out);
            s += vec_bytes(l->conv1d, (int64_t)hp->ssm_conv_dim * hp->ssm_d_conv);
            s += vec_bytes(l->dt_bias, hp->ssm_n_v_heads) + vec_bytes(l->ssm_a, hp->ssm_n_v_heads);
            s += vec_bytes(l->ssm_norm, hp->ssm_head_v_dim);
        } else {
            s += mat_bytes(&l->wq) + mat_bytes(&l->wk) + mat_bytes(&l->wv) + mat_bytes(&l->wo);
            s += vec_bytes(l->q_norm, hp->head_dim) + vec_bytes(l->k_norm, hp->head_dim);
        }
        b.layers += s;
    }
    b.lm_head = mat_bytes(&m->output);
    b.output_norm = vec_bytes(m->output_norm, hp->n_embd);
    b.embd_row = m->tok_embd.row_bytes;
    b.total = b.layers + b.lm_head + b.output_norm + b.embd_row;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const kz_tensor_info *ti = &m->gguf->tensors[i];
        uint64_t ne = 1;
        for (uint32_t d = 0; d < ti->n_dims; d++) ne *= (uint64_t)ti->ne[d];
        b.n_params += ne;
        b.model_bytes += ti->nbytes;
    }
    return b;
}

/* ---------------- runs ---------------- */

/* greedy: the argmax the LM head found as it wrote the logits (kz_eval with no logits buffer,
 * one row), as kz_generate's greedy sampling uses it; the scan of the row otherwise */
static int32_t greedy_next(const kz_context *c, int nv) {
    const int64_t a = kz_context_logits_argmax(c);
    return a >= 0 ? (int32_t)a : (int32_t)kz_argmax(kz_logits(c), nv);
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void json_stats(FILE *f, const char *name, const bstats *s, const double *runs, int n) {
    fprintf(f, "  \"%s\": {\"median\": %.6g, \"min\": %.6g, \"max\": %.6g, \"mean\": %.6g, \"stddev\": %.6g, \"runs\": [",
            name, s->median, s->min, s->max, s->mean, s->stddev);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.6g", i ? ", " : "", runs[i]);
    fprintf(f, "]},\n");
}

/* Under a real-time policy with RT throttling on, a CPU's RT threads are stopped for the rest of
 * each period once they used their share, and a decode (whose steps wait for every thread)
 * stalls ~50 ms a second: warn instead of measuring that. */
static void warn_rt_throttle(void) {
    const int pol = sched_getscheduler(0);
    if (pol != SCHED_FIFO && pol != SCHED_RR) return;
    long rt = -1, period = 0;
    FILE *f = fopen("/proc/sys/kernel/sched_rt_runtime_us", "r");
    if (f) {
        if (fscanf(f, "%ld", &rt) != 1) rt = -1;
        fclose(f);
    }
    f = fopen("/proc/sys/kernel/sched_rt_period_us", "r");
    if (f) {
        if (fscanf(f, "%ld", &period) != 1) period = 0;
        fclose(f);
    }
    if (rt < 0 || rt >= period) return;
    fprintf(stderr,
            "kazeia bench: note: running under a real-time policy with RT throttling on (sched_rt_runtime_us %ld of "
            "%ld): each CPU's real-time threads are stopped for up to %ld ms of every %ld ms, which stalls a decode "
            "waiting on them; run without chrt (or with kernel.sched_rt_runtime_us = -1)\n",
            rt, period, (period - rt) / 1000, period / 1000);
}

static const char *kv_name(kz_kv_type k) { return k == KZ_KV_F32 ? "f32" : k == KZ_KV_F16 ? "f16" : "q8_0"; }

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *kvs = "f16", *decs = "greedy";
    long p = 512, n = 128, threads = 0, runs = 5, warmup = 1, n_batch = 512, seed = 1;
    long membw_mib = 1024, membw_passes = 5, membw_every = 16, membw_inter_mib = 256, mm_rounds = 0;
    double membw_given = 0;
    int json = 0, membw_only = 0, no_membw = 0, profile = 0, repack = -1;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--cascade")) return cmd_bench_cascade(argc, argv); /* cli/bench/cascade.c */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bench_usage(stdout); return 0; }
        if (!strcmp(a, "--mtp")) return cmd_bench_mtp(argc, argv); /* bench_mtp.c */
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--profile")) { profile = 1; continue; }
        if (!strcmp(a, "--repack")) { repack = 1; continue; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (!strcmp(a, "--membw")) { membw_only = 1; continue; }
        if (!strcmp(a, "--no-membw")) { no_membw = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia bench: option %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p")) bad = kz_arg_long("kazeia bench", a, v, 0, 1 << 24, &p);
        else if (!strcmp(a, "-n")) bad = kz_arg_long("kazeia bench", a, v, 0, 1 << 24, &n);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_long("kazeia bench", a, v, 1, 512, &threads);
        else if (!strcmp(a, "-r") || !strcmp(a, "--runs")) bad = kz_arg_long("kazeia bench", a, v, 1, 1000, &runs);
        else if (!strcmp(a, "--warmup")) bad = kz_arg_long("kazeia bench", a, v, 0, 100, &warmup);
        else if (!strcmp(a, "--n-batch")) bad = kz_arg_long("kazeia bench", a, v, 1, 1 << 24, &n_batch);
        else if (!strcmp(a, "--seed")) bad = kz_arg_long("kazeia bench", a, v, 0, 0x7fffffffL, &seed);
        else if (!strcmp(a, "--matmuls")) bad = kz_arg_long("kazeia bench", a, v, 1, 100000, &mm_rounds);
        else if (!strcmp(a, "--kv")) kvs = v;
        else if (!strcmp(a, "--decode")) decs = v;
        else if (!strcmp(a, "--membw-gbs")) bad = parse_pos_double(v, a, &membw_given);
        else if (!strcmp(a, "--membw-mib")) bad = kz_arg_long("kazeia bench", a, v, 1, 1L << 20, &membw_mib);
        else if (!strcmp(a, "--membw-passes")) bad = kz_arg_long("kazeia bench", a, v, 1, 1000, &membw_passes);
        else if (!strcmp(a, "--membw-every")) bad = kz_arg_long("kazeia bench", a, v, 0, 1 << 24, &membw_every);
        else if (!strcmp(a, "--membw-sample-mib")) bad = kz_arg_long("kazeia bench", a, v, 1, 1L << 20, &membw_inter_mib);
        else { fprintf(stderr, "kazeia bench: unknown option '%s'\n", a); bench_usage(stderr); return 2; }
        if (bad) return 2;
    }
    warn_rt_throttle();
    if (threads == 0) threads = kz_default_threads(); /* as the library picks (big.LITTLE: fast cores) */
    if (threads < 1) threads = 1;
    char err[512];
    err[0] = 0;

    if (membw_only) {
        double best = 0;
        const char *loads = "";
        double g = measure_membw((int)threads, (size_t)membw_mib, (int)membw_passes, &best, &loads, err, sizeof err);
        if (g < 0) { fprintf(stderr, "kazeia bench: %s\n", err); return 1; }
        if (json)
            printf("{\"membw_gbs\": %.4f, \"membw_best_gbs\": %.4f, \"threads\": %ld, \"buffer_mib\": %ld, \"passes\": %ld, "
                   "\"membw_loads\": \"%s\"}\n",
                   g, best, threads, membw_mib, membw_passes, loads);
        else
            printf("memory read bandwidth: %.2f GB/s median, %.2f GB/s best (%ld threads, %ld MiB buffer, %ld passes, "
                   "%s loads)\n",
                   g, best, threads, membw_mib, membw_passes, loads);
        return 0;
    }

    if (!model) { fprintf(stderr, "kazeia bench: -m MODEL.gguf is required (or --membw)\n"); bench_usage(stderr); return 2; }
    if (mm_rounds > 0 && (no_membw || membw_given > 0)) {
        /* its figures are shares of the samples it takes itself */
        fprintf(stderr, "kazeia bench: --matmuls samples the read bandwidth around every round; it does not take "
                        "--no-membw or --membw-gbs\n");
        return 2;
    }
    if (p + n < 1 && mm_rounds == 0) { fprintf(stderr, "kazeia bench: nothing to measure: -p and -n are both 0\n"); return 2; }
    kz_kv_type kv;
    if (!strcmp(kvs, "f32")) kv = KZ_KV_F32;
    else if (!strcmp(kvs, "f16")) kv = KZ_KV_F16;
    else if (!strcmp(kvs, "q8_0")) kv = KZ_KV_Q8_0;
    else { fprintf(stderr, "kazeia bench: unknown --kv '%s' (use f16, f32 or q8_0)\n", kvs); return 2; }
    int greedy;
    if (!strcmp(decs, "greedy")) greedy = 1;
    else if (!strcmp(decs, "random")) greedy = 0;
    else { fprintf(stderr, "kazeia bench: unknown --decode '%s' (use greedy or random)\n", decs); return 2; }

    kz_model_params mp = kz_model_default_params();
    mp.n_threads = (int)threads;
    if (repack >= 0) mp.repack_weights = repack;
    repack = mp.repack_weights;
    double tl = kz_bench_now();
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "kazeia bench: %s\n", err); return 1; }
    tl = kz_bench_now() - tl;
    if (mm_rounds > 0) {
        const int r = kz_bench_matmuls(m, (int)threads, (int)mm_rounds, (size_t)membw_inter_mib, json);
        kz_model_free(m);
        return r;
    }
    kz_context_params cp = kz_context_default_params();
    cp.n_ctx = (int)(p + n + 1);
    cp.n_batch = (int)n_batch;
    cp.n_threads = (int)threads;
    cp.kv_type = kv;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) { fprintf(stderr, "kazeia bench: %s\n", err); kz_model_free(m); return 1; }

    const int nv = kz_model_n_vocab(m);
    int32_t *toks = malloc((size_t)(p > 0 ? p : 1) * sizeof *toks);
    double *pp = calloc((size_t)runs, sizeof *pp), *tg = calloc((size_t)runs, sizeof *tg);
    double *eff = NULL, *effm = NULL, *isamp = NULL; /* per-run decode efficiency (%) vs the samples' median
                                                        * and mean, interleaved bw samples */
    long n_isamp = 0, cap_isamp = 0;
    kz_membw *bws = NULL;
    const char *samp_loads = ""; /* read build of the interleaved samples */
    int rc = 0;
    if (!toks || !pp || !tg) { fprintf(stderr, "kazeia bench: out of memory\n"); rc = 1; goto done; }
    uint64_t rs = (uint64_t)seed;
    for (long i = 0; i < p; i++) toks[i] = (int32_t)(rng_next(&rs) % (uint64_t)nv);

    /* Bandwidth samples between decode tokens: this host's read bandwidth can drift by tens of
     * percent within seconds (other tenants), so a decode run is compared with the bandwidth the
     * machine offered while it ran: a pass over a separate buffer before the first token and
     * after every `every` tokens, outside the timed decode. A run's efficiency is its decode
     * GB/s over the median of its samples (the median: a pass that waited for the host now and
     * then does not move it). */
    uint64_t rss_before_bws = 0;
    const wbytes_t wb = weight_bytes(m);
    if (n > 0 && membw_every > 0 && membw_given <= 0 && !no_membw) {
        struct rusage ru0;
        getrusage(RUSAGE_SELF, &ru0);
        rss_before_bws = (uint64_t)ru0.ru_maxrss * 1024u;
        bws = kz_membw_open((int)threads, (size_t)membw_inter_mib, err, sizeof err);
        if (!bws) { fprintf(stderr, "kazeia bench: %s\n", err); rc = 1; goto done; }
        samp_loads = kz_membw_method(bws);
    }
    if (!(eff = calloc((size_t)runs, sizeof *eff)) || !(effm = calloc((size_t)runs, sizeof *effm))) {
        fprintf(stderr, "kazeia bench: out of memory\n");
        rc = 1;
        goto done;
    }
    kz_profile prof_sum, dec_sum; /* prefill / decode breakdowns summed over the measured runs */
    memset(&prof_sum, 0, sizeof prof_sum);
    memset(&dec_sum, 0, sizeof dec_sum);
    for (long r = -warmup; r < runs && !rc; r++) {
        kz_context_reset(c);
        if (profile) kz_seq_profile_enable(kz_context_seq(c), 1);
        uint64_t drs = (uint64_t)seed * 7919u + 17u; /* same decode ids every run */
        int32_t tok = (int32_t)(rng_next(&drs) % (uint64_t)nv);
        double t0 = kz_bench_now();
        if (p > 0) {
            if (kz_eval(c, toks, (int)p, NULL, 0)) { rc = 1; break; }
            if (greedy) tok = greedy_next(c, nv);
        }
        double t1 = kz_bench_now();
        if (profile) {
            if (r >= 0) prof_add(&prof_sum, kz_seq_profile(kz_context_seq(c)));
            kz_seq_profile_enable(kz_context_seq(c), 0);
            /* decode steps get their own breakdown (a few clock reads per layer: ~0.01 % of a step) */
            if (n > 0) kz_seq_profile_enable(kz_context_seq(c), 1);
        }
        double dec_s = 0, prev_bw = 0, seg_t0 = t1;
        long seg_n = 0, run_s0 = n_isamp; /* this run's samples start at isamp[run_s0] */
        if (bws) {
            if ((prev_bw = kz_membw_pass(bws, err, sizeof err)) < 0) { fprintf(stderr, "kazeia bench: %s\n", err); rc = 2; break; }
            seg_t0 = kz_bench_now();
        }
        for (long i = 0; i < n; i++) {
            /* the logits stay in the context (no logits buffer): no 1 MB copy per token */
            if (kz_eval(c, &tok, 1, NULL, 0)) { rc = 1; break; }
            tok = greedy ? greedy_next(c, nv) : (int32_t)(rng_next(&drs) % (uint64_t)nv);
            if (bws && (++seg_n == membw_every || i == n - 1)) {
                const double seg = kz_bench_now() - seg_t0;
                const double g = kz_membw_pass(bws, err, sizeof err);
                if (g < 0) { fprintf(stderr, "kazeia bench: %s\n", err); rc = 2; break; }
                dec_s += seg;
                if (r >= 0) {
                    if (n_isamp + 2 > cap_isamp) {
                        cap_isamp = cap_isamp ? 2 * cap_isamp : 64;
                        double *ns = realloc(isamp, (size_t)cap_isamp * sizeof *ns);
                        if (!ns) { fprintf(stderr, "kazeia bench: out of memory\n"); rc = 2; break; }
                        isamp = ns;
                    }
                    if (n_isamp == run_s0) isamp[n_isamp++] = prev_bw;
                    isamp[n_isamp++] = g;
                }
                prev_bw = g;
                seg_n = 0;
                seg_t0 = kz_bench_now();
            }
        }
        if (rc == 2) break;
        double t2 = kz_bench_now();
        if (!bws) dec_s = t2 - t1;
        if (profile && n > 0) {
            if (r >= 0) prof_add(&dec_sum, kz_seq_profile(kz_context_seq(c)));
            kz_seq_profile_enable(kz_context_seq(c), 0);
        }
        if (r >= 0) {
            pp[r] = p > 0 ? (double)p / (t1 - t0 > 0 ? t1 - t0 : 1e-9) : 0;
            tg[r] = n > 0 ? (double)n / (dec_s > 0 ? dec_s : 1e-9) : 0;
            if (bws && n > 0 && dec_s > 0) {
                const bstats rb = stats_of(isamp + run_s0, (int)(n_isamp - run_s0));
                const double gbs = (double)wb.total * (double)n / dec_s / 1e9; /* this run's decode GB/s */
                eff[r] = rb.median > 0 ? 100.0 * gbs / rb.median : 0;
                effm[r] = rb.mean > 0 ? 100.0 * gbs / rb.mean : 0;
            }
        }
    }
    if (rc == 2) { rc = 1; goto done; } /* the sampler's error is printed */
    if (rc) { fprintf(stderr, "kazeia bench: %s\n", kz_context_error(c)); goto done; }

    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        uint64_t rss = (uint64_t)ru.ru_maxrss * 1024u; /* Linux: KiB */
        if (bws) {
            /* the sampling buffer stayed resident from its allocation on: the peak without it is
             * the larger of the peak before it and the peak since, less its size */
            const uint64_t since = rss > kz_membw_bytes(bws) ? rss - kz_membw_bytes(bws) : 0;
            rss = since > rss_before_bws ? since : rss_before_bws;
            kz_membw_close(bws);
            bws = NULL;
        }
        const bstats se = stats_of(eff, (int)runs), sem = stats_of(effm, (int)runs), si = stats_of(isamp, (int)n_isamp);
        const int have_eff = n > 0 && n_isamp > 0;
        /* Other memory a decode step moves, not in the roofline's weight bytes: the GDN conv and
         * recurrent state, read and written once per token, and the KV rows attention reads, at
         * the mean decode depth p + (n-1)/2 (the row a step writes is not counted). */
        const kz_hparams *hp = &m->hp;
        const double st_bytes = 2.0 * 4.0 * (double)hp->n_gdn_layers *
                                ((double)hp->ssm_n_v_heads * hp->ssm_head_v_dim * hp->ssm_d_state +
                                 (double)hp->ssm_conv_dim * (hp->ssm_d_conv > 0 ? hp->ssm_d_conv - 1 : 0));
        const double kv_bytes = 2.0 * hp->n_attn_layers * (double)hp->n_head_kv *
                                (double)kz_kv_type_row_bytes((int)kv, hp->head_dim) * ((double)p + 0.5 * (double)(n - 1) + 1.0);
        const double all_pct = se.median * ((double)wb.total + st_bytes + kv_bytes) / (double)wb.total;
        char desc[1024];
        kz_model_describe(m, desc, sizeof desc);
        char arch[32]; /* copied: the model is freed before printing */
        snprintf(arch, sizeof arch, "%s", kz_model_arch(m));
        int n_layer = m->hp.n_layer;
        bstats sp = stats_of(pp, (int)runs), sg = stats_of(tg, (int)runs);
        kz_context_free(c);
        c = NULL;
        uint64_t repacked = m->repack_bytes;
        kz_model_free(m); /* its pool must be idle and its pages out of the way of the bw test */
        m = NULL;

        double bw = membw_given, bw_best = 0;
        int bw_measured = 0;
        const char *bw_loads = samp_loads;
        if (bw <= 0 && !no_membw) {
            bw = measure_membw((int)threads, (size_t)membw_mib, (int)membw_passes, &bw_best, &bw_loads, err, sizeof err);
            if (bw < 0) { fprintf(stderr, "kazeia bench: %s\n", err); rc = 1; goto done; }
            bw_measured = 1;
        }
        double dec_bw = n > 0 ? (double)wb.total * sg.median / 1e9 : 0; /* GB/s */
        double pct = (bw > 0 && n > 0) ? 100.0 * dec_bw / bw : -1;

        if (json) {
            FILE *f = stdout;
            fprintf(f, "{\n  \"model\": ");
            json_str(f, model);
            fprintf(f, ",\n  \"arch\": ");
            json_str(f, arch);
            fprintf(f, ",\n  \"n_layer\": %d,\n  \"n_vocab\": %d,\n  \"n_params\": %llu,\n  \"model_bytes\": %llu,\n",
                    n_layer, nv, (unsigned long long)wb.n_params, (unsigned long long)wb.model_bytes);
            fprintf(f, "  \"threads\": %ld,\n  \"n_prompt\": %ld,\n  \"n_gen\": %ld,\n  \"runs\": %ld,\n  \"warmup\": %ld,\n",
                    threads, p, n, runs, warmup);
            fprintf(f, "  \"n_batch\": %ld,\n  \"kv\": \"%s\",\n  \"decode\": \"%s\",\n  \"load_s\": %.4f,\n",
                    n_batch, kv_name(kv), greedy ? "greedy" : "random", tl);
            fprintf(f, "  \"repack\": %d,\n  \"repacked_bytes\": %llu,\n", repack, (unsigned long long)repacked);
            if (p > 0) json_stats(f, "prefill_tok_s", &sp, pp, (int)runs);
            if (n > 0) json_stats(f, "decode_tok_s", &sg, tg, (int)runs);
            fprintf(f, "  \"weight_bytes_per_token\": %llu,\n", (unsigned long long)wb.total);
            fprintf(f, "  \"weight_bytes\": {\"layers\": %llu, \"lm_head\": %llu, \"output_norm\": %llu, \"token_embd_row\": %llu},\n",
                    (unsigned long long)wb.layers, (unsigned long long)wb.lm_head,
                    (unsigned long long)wb.output_norm, (unsigned long long)wb.embd_row);
            if (n > 0) fprintf(f, "  \"decode_gbs\": %.6g,\n", dec_bw);
            if (bw > 0) fprintf(f, "  \"membw_gbs\": %.6g,\n  \"membw_measured\": %s,\n", bw, bw_measured ? "true" : "false");
            if (bw_loads[0]) fprintf(f, "  \"membw_loads\": \"%s\",\n", bw_loads);
            if (pct >= 0) fprintf(f, "  \"decode_bw_pct\": %.4g,\n", pct);
            if (n > 0)
                fprintf(f, "  \"state_bytes_per_token\": %.0f,\n  \"kv_read_bytes_per_token\": %.0f,\n", st_bytes, kv_bytes);
            if (have_eff) {
                fprintf(f, "  \"decode_all_traffic_pct_interleaved\": %.4g,\n", all_pct);
                json_stats(f, "decode_bw_pct_interleaved", &se, eff, (int)runs);
                json_stats(f, "decode_bw_pct_interleaved_vs_mean", &sem, effm, (int)runs);
                json_stats(f, "membw_interleaved_gbs", &si, isamp, (int)n_isamp);
                fprintf(f, "  \"membw_every\": %ld,\n  \"membw_interleaved_loads\": \"%s\",\n", membw_every, samp_loads);
            }
            fprintf(f, "  \"peak_rss_bytes\": %llu\n}\n", (unsigned long long)rss);
        } else {
            const char *base = strrchr(model, '/');
            base = base ? base + 1 : model;
            printf("%s\n", desc);
            printf("| %-32s | %9s | %8s | %7s | %4s | %7s | %22s | %17s |\n", "model", "size", "params", "threads",
                   "kv", "test", "t/s (median +- sd)", "min .. max");
            printf("| %.32s | %.9s | %.8s | %.7s | %.4s | %.7s | %.22s | %.17s |\n",
                   "--------------------------------", "---------", "--------", "-------", "----", "-------",
                   "----------------------", "-----------------");
            char test[32];
            if (p > 0) {
                snprintf(test, sizeof test, "pp%ld", p);
                printf("| %-32.32s | %5.2f GiB | %6.2f B | %7ld | %4s | %7s | %13.2f +- %5.2f | %7.2f .. %7.2f |\n",
                       base, wb.model_bytes / 1073741824.0, wb.n_params / 1e9, threads, kv_name(kv), test,
                       sp.median, sp.stddev, sp.min, sp.max);
            }
            if (n > 0) {
                snprintf(test, sizeof test, "tg%ld", n);
                printf("| %-32.32s | %5.2f GiB | %6.2f B | %7ld | %4s | %7s | %13.2f +- %5.2f | %7.2f .. %7.2f |\n",
                       base, wb.model_bytes / 1073741824.0, wb.n_params / 1e9, threads, kv_name(kv), test,
                       sg.median, sg.stddev, sg.min, sg.max);
            }
            printf("runs: %ld (+%ld warm-up); decode at depth %ld, %s next token\n", runs, warmup, p,
                   greedy ? "greedy" : "random");
            printf("weights read per decoded token: %.2f MiB (layers %.2f, lm head %.2f)\n", wb.total / 1048576.0,
                   wb.layers / 1048576.0, wb.lm_head / 1048576.0);
            if (n > 0) printf("decode bandwidth: %.2f GB/s", dec_bw);
            if (n > 0 && pct >= 0) {
                printf(" = %.1f%% of %s read bandwidth %.2f GB/s", pct, bw_measured ? "measured" : "given", bw);
                if (bw_measured) printf(" (%s loads)", bw_loads);
            }
            if (n > 0) printf("\n");
            if (have_eff) {
                printf("decode vs the read bandwidth sampled every %ld tokens (%ld samples, %.2f GB/s median, %.2f .. "
                       "%.2f): %.1f%% median over runs (%.1f .. %.1f; each run against its own samples' median)\n",
                       membw_every, n_isamp, si.median, si.min, si.max, se.median, se.min, se.max);
                printf("  against the mean of each run's samples instead (%.2f GB/s over all; the host's bandwidth comes in "
                       "bursts of milliseconds, which a median of few samples catches or misses): %.1f%%\n",
                       si.mean, sem.median);
                printf("  with the recurrent state (%.1f MiB read + written) and KV reads (%.1f MiB at the mean depth) "
                       "also counted: %.1f%%\n", st_bytes / 1048576.0, kv_bytes / 1048576.0,
                       all_pct);
            }
            printf("peak RSS: %.1f MiB\n", rss / 1048576.0);
            if (repack)
                printf("weights repacked at load: %.1f MiB of Q4_0 in the 16-row layout%s (load %.2f s)\n",
                       repacked / 1048576.0, repacked ? "" : " (none: no packed kernel at this ISA level)", tl);
            if (profile && p > 0) {
                printf("prefill time by part, %ld measured runs:\n", runs);
                kz_profile_print(&prof_sum, stdout);
            }
            if (profile && n > 0) {
                printf("decode time by part, %ld measured runs:\n", runs);
                kz_profile_print(&dec_sum, stdout);
            }
        }
    }
done:
    kz_membw_close(bws);
    free(eff);
    free(effm);
    free(isamp);
    free(toks);
    free(pp);
    free(tg);
    kz_context_free(c);
    kz_model_free(m);
    return rc;
}
