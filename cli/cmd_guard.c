/* kazeia guard: one Qwen3Guard-Gen verdict as one line of JSON, for scripts.
 *   kazeia guard -m GUARD.gguf -p PROMPT                   prompt moderation
 *   kazeia guard -m GUARD.gguf -p PROMPT --response TEXT   moderation of TEXT as the answer to PROMPT
 * Exit status: 0 safe under the policy, 1 unsafe, 2 usage error, 3 failure. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/args.h"
#include "kazeia.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kazeia guard -m GUARD.gguf -p PROMPT [--response TEXT] [options]\n"
               "  prints the verdict as one line of JSON; exit 0 safe, 1 unsafe, 3 error\n"
               "  --policy strict|loose  Controversial counts as Unsafe (strict, default) or Safe\n"
               "  --max-verdict-tokens N tokens generated for the Categories / Refusal lines (default 24; 0 = label only)\n"
               "  -c N                   guard context (default 4096)\n"
               "  -t T                   threads (default: all CPUs)\n");
}

/* length of the valid UTF-8 sequence at p (1..4), or 0 when it is not one */
static int utf8_len(const unsigned char *p) {
    int n = p[0] < 0x80 ? 1 : (p[0] & 0xE0) == 0xC0 && p[0] >= 0xC2 ? 2 : (p[0] & 0xF0) == 0xE0 ? 3
          : (p[0] & 0xF8) == 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return 0;
    if (n == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return 0;
    return n;
}

/* s as a JSON string (the guard's text may hold any bytes: invalid UTF-8 becomes U+FFFD) */
static void json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (n == 0) { printf("\\ufffd"); p++; continue; }
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p == '\n') printf("\\n");
        else if (*p < 0x20) printf("\\u%04x", *p);
        else fwrite(p, 1, (size_t)n, stdout);
        p += n;
    }
    putchar('"');
}

int cmd_guard(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *response = NULL, *policy = "strict";
    long n_ctx = 4096, threads = 0, mvt = 24;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "kazeia guard: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--response")) response = v;
        else if (!strcmp(a, "--policy")) policy = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) bad = kz_arg_long("kazeia guard", a, v, 64, 1 << 24, &n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_long("kazeia guard", a, v, 1, 512, &threads);
        else if (!strcmp(a, "--max-verdict-tokens")) bad = kz_arg_long("kazeia guard", a, v, 0, 256, &mvt);
        else { fprintf(stderr, "kazeia guard: unknown option '%s'\n", a); usage(stderr); return 2; }
        if (bad) return 2;
    }
    if (!model || !prompt) { usage(stderr); return 2; }
    kz_guard_params gp = kz_guard_default_params();
    if (!strcmp(policy, "strict")) gp.policy = KZ_GUARD_STRICT;
    else if (!strcmp(policy, "loose")) gp.policy = KZ_GUARD_LOOSE;
    else { fprintf(stderr, "kazeia guard: bad value '%s' for --policy (expected strict or loose)\n", policy); return 2; }
    gp.n_ctx = (int)n_ctx;
    gp.n_threads = (int)threads;
    gp.max_verdict_tokens = (int)mvt;
    gp.check_every = 0;
    char err[512];
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = (int)threads;
    kz_model *m = kz_model_load(model, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "kazeia guard: %s\n", err); return 3; }
    kz_guard *g = kz_guard_new(m, &gp, err, sizeof err);
    if (!g) { fprintf(stderr, "kazeia guard: %s\n", err); kz_model_free(m); return 3; }
    kz_guard_verdict v;
    int r;
    if (response) {
        const char *roles[2] = {"user", "assistant"}, *contents[2] = {prompt, response};
        r = kz_guard_check_messages(g, roles, contents, 2, &v);
    } else {
        r = kz_guard_check_prompt(g, prompt, &v);
    }
    if (r) {
        fprintf(stderr, "kazeia guard: %s\n", kz_guard_error(g));
        kz_guard_free(g);
        kz_model_free(m);
        return 3;
    }
    static const char *const labels[3] = {"Safe", "Controversial", "Unsafe"};
    printf("{\"task\": \"%s\", \"label\": \"%s\", \"p_safe\": %.6f, \"p_controversial\": %.6f, \"p_unsafe\": %.6f, "
           "\"categories\": [",
           response ? "response" : "prompt", labels[v.label], v.p_safe, v.p_controversial, v.p_unsafe);
    int first = 1;
    for (int i = 0; kz_guard_category_name(i); i++)
        if (v.categories & (1u << i)) { printf("%s", first ? "" : ", "); json_str(kz_guard_category_name(i)); first = 0; }
    printf("], \"refusal\": %s, \"unsafe\": %s, \"malformed\": %s, \"policy\": \"%s\", \"n_eval\": %d, \"ms\": %.1f, "
           "\"text\": ",
           v.refusal < 0 ? "null" : v.refusal ? "true" : "false", v.unsafe ? "true" : "false",
           v.malformed ? "true" : "false", policy, v.n_eval, v.t_ms);
    json_str(v.text);
    printf("}\n");
    kz_guard_free(g);
    kz_model_free(m);
    return v.unsafe ? 1 : 0;
}
