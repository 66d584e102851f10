/* kazeia run: one chat turn, answer streamed to stdout, stats to stderr. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "cli.h"
#include "args.h"
#include "kazeia.h"

static void run_usage(FILE *f) {
    kz_context_params d = kz_context_default_params();
    fprintf(f,
            "usage: kazeia run [-m MODEL.gguf] -p PROMPT [options]\n"
            "  -m, --model FILE         GGUF model (qwen35 / qwen3); without it, the built-in default\n"
            "                           model (a small base model: the prompt is continued, --raw;\n"
            "                           sampling: the file's recommendation, see below)\n"
            "  --raw                    continue the prompt as plain text (no chat template)\n"
            "  -p, --prompt TEXT        user message\n"
            "  --system TEXT            system message (default: none)\n"
            "  -n, --n-predict N        max tokens to generate (default -1: until end of turn or full context)\n"
            "  --no-think               empty think block (answer directly)\n"
            "  --temp T                 temperature, <= 0 = greedy (default %g)\n"
            "  --top-k K                top-k, 0 = off (default %d; only when --temp > 0)\n"
            "  --top-p P                top-p, 1 = off (default %g)\n"
            "  --min-p P                min-p, 0 = off (default %g)\n"
            "  --repeat-penalty R       1 = off (default %g)\n"
            "  --repeat-last-n N        penalty window, 0 = whole context (default %d)\n"
            "  --presence-penalty P     0 = off (default %g)\n"
            "  --frequency-penalty F    0 = off (default %g)\n"
            "  --seed S                 sampler seed (default %llu; same seed, same output)\n"
            "  -t, --threads N          worker threads (default: all CPUs)\n"
            "  -c, --ctx-size N         context size in tokens (default: min(train ctx, 4096))\n"
            "  -b, --batch-size N       prefill chunk (default 512)\n"
            "  --kv f32|f16|q8_0        KV cache type (default f16)\n"
            "  --no-repack              keep the Q4_0 weights zero-copy (mmap) instead of the default copy\n"
            "                           into the 16-row layout made at load where a packed kernel exists\n"
            "                           (AVX2, AVX-512 VNNI, ARM64 dotprod: faster prefill and decode, about\n"
            "                           the same resident size, ~0.5 s/GB load; nothing done elsewhere)\n"
            "  --no-mtp                 no MTP speculative decoding (default: on when the model has an MTP block)\n"
            "  --mtp-max K              drafts per verify, 1..8 (default 3; the decoder adapts 0..K)\n"
            "  --mtp-vocab N            drafts pick among token ids < N only (cheaper draft head; 0 = all,\n"
            "                           the default; the output is the same)\n"
            "  -h, --help               this text\n"
            "A file's general.sampling.* keys (temp, top_k, top_p, min_p, penalty_repeat, penalty_last_n:\n"
            "its recommended sampler, as the converter writes it from generation_config.json) replace\n"
            "these defaults; the options given on the command line win over both.\n"
            "Stats (prompt tokens, prefill/decode speed, generated tokens, peak RSS) go to stderr.\n",
            (double)d.temperature, d.top_k, (double)d.top_p, (double)d.min_p,
            (double)d.repeat_penalty, d.repeat_last_n, (double)d.presence_penalty,
            (double)d.frequency_penalty, (unsigned long long)d.seed);
}

static int parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (s[0] == '-') goto bad;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end) goto bad;
    *out = (uint64_t)v;
    return 0;
bad:
    fprintf(stderr, "kazeia run: %s expects a non-negative integer, got '%s'\n", opt, s);
    return -1;
}

/* SIGINT: ask the generation to stop (kz_cancel is a lock-free atomic store, signal-safe);
 * a second ^C falls back to the default action. */
static kz_context *g_sig_ctx;
static void on_sigint(int sig) {
    (void)sig;
    if (g_sig_ctx) kz_cancel(g_sig_ctx);
    signal(SIGINT, SIG_DFL);
}

typedef struct { int n_pieces; size_t n_bytes; } run_out;

static int print_piece(const char *piece, size_t len, void *ud) {
    run_out *o = ud;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    o->n_pieces++;
    o->n_bytes += len;
    return ferror(stdout) ? 1 : 0; /* closed pipe: stop generating */
}

static const char *stop_name(kz_stop_reason r) {
    switch (r) {
    case KZ_STOP_EOG: return "end of turn";
    case KZ_STOP_MAX_TOKENS: return "max tokens";
    case KZ_STOP_CANCELLED: return "cancelled";
    case KZ_STOP_CTX_FULL: return "context full";
    default: return "error";
    }
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *system = NULL;
    int n_predict = -1, n_threads = 0, repack = -1, raw = 0;
    unsigned set = 0; /* sampling options given: 1 temp, 2 top-k, 4 top-p, 8 min-p, 16 repeat, 32 last-n */
    kz_mtp_params mtp = kz_mtp_default_params();
    kz_context_params cp = kz_context_default_params();

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { run_usage(stdout); return 0; }
        if (!strcmp(a, "--no-think")) { cp.think = 0; continue; }
        if (!strcmp(a, "--think")) { cp.think = 1; continue; }
        if (!strcmp(a, "--repack")) { repack = 1; continue; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (!strcmp(a, "--no-mtp")) { mtp.enabled = 0; continue; }
        if (!strcmp(a, "--raw")) { raw = 1; continue; }
        /* every other option takes a value */
        static const char *const with_value[] = {
            "-m", "--model", "-p", "--prompt", "--system", "-n", "--n-predict", "--temp", "--top-k",
            "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
            "--frequency-penalty", "--seed", "-t", "--threads", "-c", "--ctx-size", "-b",
            "--batch-size", "--kv", "--mtp-max", "--mtp-vocab", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++) if (!strcmp(a, with_value[k])) known = 1;
        if (!known) {
            fprintf(stderr, "kazeia run: unknown option '%s' (see kazeia run --help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia run: option %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) bad = kz_arg_int("kazeia run", a, v, -1, INT_MAX, &n_predict);
        else if (!strcmp(a, "--temp")) { bad = kz_arg_float("kazeia run", a, v, 0, &cp.temperature); set |= 1; }
        else if (!strcmp(a, "--top-k") && (set |= 2)) bad = kz_arg_int("kazeia run", a, v, 0, INT_MAX, &cp.top_k);
        else if (!strcmp(a, "--top-p") && (set |= 4)) {
            bad = kz_arg_float("kazeia run", a, v, 0, &cp.top_p);
            if (!bad && (cp.top_p < 0 || cp.top_p > 1)) { fprintf(stderr, "kazeia run: --top-p must be in [0, 1]\n"); bad = 1; }
        } else if (!strcmp(a, "--min-p") && (set |= 8)) {
            bad = kz_arg_float("kazeia run", a, v, 0, &cp.min_p);
            if (!bad && (cp.min_p < 0 || cp.min_p > 1)) { fprintf(stderr, "kazeia run: --min-p must be in [0, 1]\n"); bad = 1; }
        } else if (!strcmp(a, "--repeat-penalty")) {
            set |= 16;
            bad = kz_arg_float("kazeia run", a, v, 0, &cp.repeat_penalty);
            if (!bad && cp.repeat_penalty <= 0) { fprintf(stderr, "kazeia run: --repeat-penalty must be > 0 (1 = off)\n"); bad = 1; }
        } else if (!strcmp(a, "--repeat-last-n") && (set |= 32)) bad = kz_arg_int("kazeia run", a, v, 0, INT_MAX, &cp.repeat_last_n);
        else if (!strcmp(a, "--presence-penalty")) bad = kz_arg_float("kazeia run", a, v, 0, &cp.presence_penalty);
        else if (!strcmp(a, "--frequency-penalty")) bad = kz_arg_float("kazeia run", a, v, 0, &cp.frequency_penalty);
        else if (!strcmp(a, "--seed")) bad = parse_u64(a, v, &cp.seed);
        else if (!strcmp(a, "--mtp-max")) bad = kz_arg_int("kazeia run", a, v, 1, KZ_MTP_MAX_DRAFT, &mtp.max_draft);
        else if (!strcmp(a, "--mtp-vocab")) bad = kz_arg_int("kazeia run", a, v, 0, INT_MAX, &mtp.draft_vocab);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_int("kazeia run", a, v, 1, 1024, &n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) bad = kz_arg_int("kazeia run", a, v, 1, INT_MAX, &cp.n_ctx);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) bad = kz_arg_int("kazeia run", a, v, 1, INT_MAX, &cp.n_batch);
        else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f32")) cp.kv_type = KZ_KV_F32;
            else if (!strcmp(v, "f16")) cp.kv_type = KZ_KV_F16;
            else if (!strcmp(v, "q8_0")) cp.kv_type = KZ_KV_Q8_0;
            else { fprintf(stderr, "kazeia run: --kv expects f32, f16 or q8_0, got '%s'\n", v); bad = 1; }
        }
        if (bad) return 2;
    }
    if (!model_path && system) {
        fprintf(stderr, "kazeia run: --system needs a chat model (-m MODEL.gguf); the built-in model continues text\n");
        return 2;
    }
    if (raw && system) { fprintf(stderr, "kazeia run: --system and --raw exclude each other\n"); return 2; }
    if (!prompt) { fprintf(stderr, "kazeia run: missing -p PROMPT (see kazeia run --help)\n"); return 2; }
    if (n_predict == 0) { fprintf(stderr, "kazeia run: -n 0 generates nothing; use -n -1 for no limit\n"); return 2; }

    char err[512] = "";
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = n_threads;
    if (repack >= 0) mp.repack_weights = repack;
    if (!model_path) raw = 1; /* the default model is a base model: it continues text */
    kz_model *m = model_path ? kz_model_load(model_path, &mp, err, sizeof err)
                             : cli_default_model(&mp, err, sizeof err);
    if (!m) {
        /* the loader's message already names the file */
        fprintf(stderr, "kazeia run: cannot load model: %s\n", err[0] ? err : model_path ? model_path : "default");
        return 1;
    }
    { /* the file's recommended sampler (general.sampling.*), under the options given */
        kz_gen_params g = {.temperature = cp.temperature, .top_k = cp.top_k, .top_p = cp.top_p, .min_p = cp.min_p,
                           .repeat_penalty = cp.repeat_penalty, .repeat_last_n = cp.repeat_last_n};
        kz_model_sampling(m, &g);
        if (!(set & 1)) cp.temperature = g.temperature;
        if (!(set & 2)) cp.top_k = g.top_k;
        if (!(set & 4)) cp.top_p = g.top_p;
        if (!(set & 8)) cp.min_p = g.min_p;
        if (!(set & 16)) cp.repeat_penalty = g.repeat_penalty;
        if (!(set & 32)) cp.repeat_last_n = g.repeat_last_n;
    }
    cp.n_threads = n_threads;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) {
        fprintf(stderr, "kazeia run: cannot create context: %s\n", err[0] ? err : "unknown error");
        kz_model_free(m);
        return 1;
    }

    if (kz_model_has_mtp(m) && kz_context_set_mtp(c, &mtp) != 0) {
        fprintf(stderr, "kazeia run: %s\n", kz_context_error(c));
        kz_context_free(c);
        kz_model_free(m);
        return 2;
    }
    g_sig_ctx = c;
    signal(SIGINT, on_sigint);
    run_out o = {0, 0};
    kz_stats st;
    int r = raw ? kz_complete(c, prompt, n_predict, print_piece, &o, &st)
                : kz_generate(c, system, prompt, n_predict, print_piece, &o, &st);
    signal(SIGINT, SIG_DFL);
    g_sig_ctx = NULL;
    if (o.n_bytes > 0 && isatty(STDOUT_FILENO)) { fputc('\n', stdout); fflush(stdout); }

    int rc = 0;
    if (r != 0) {
        fprintf(stderr, "kazeia run: %s\n", kz_context_error(c));
        rc = 1;
    }
    if (r != 0 && st.n_prompt == 0 && st.n_gen == 0) { /* nothing ran: no stats to show */
        kz_context_free(c);
        kz_model_free(m);
        return rc;
    }
    struct rusage ru;
    double rss_mib = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0) rss_mib = (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
    double pf = st.t_prefill_ms > 0 ? st.n_prompt * 1e3 / st.t_prefill_ms : 0;
    double dc = st.t_decode_ms > 0 ? st.n_gen * 1e3 / st.t_decode_ms : 0;
    fprintf(stderr, "\n");
    fprintf(stderr, "prompt tokens:    %d (evaluated %d, reused %d)\n", st.n_prompt + st.n_reused,
            st.n_prompt, st.n_reused);
    fprintf(stderr, "prefill:          %.2f tok/s (%.1f ms)\n", pf, st.t_prefill_ms);
    fprintf(stderr, "generated tokens: %d\n", st.n_gen);
    fprintf(stderr, "decode:           %.2f tok/s (%.1f ms)\n", dc, st.t_decode_ms);
    fprintf(stderr, "peak RSS:         %.1f MiB\n", rss_mib);
    fprintf(stderr, "stop:             %s\n", stop_name(st.stop));
    kz_mtp_stats ms;
    if (kz_context_mtp_stats(c, &ms) == 0 && ms.verifies > 0)
        fprintf(stderr, "mtp:              %ld verifies, %ld drafts, %ld accepted (%.1f %%), %.2f tokens per verify\n",
                ms.verifies, ms.drafted, ms.accepted, ms.drafted ? 100.0 * ms.accepted / ms.drafted : 0.0,
                (double)(ms.verifies + ms.accepted) / ms.verifies);

    kz_context_free(c);
    kz_model_free(m);
    return rc;
}
