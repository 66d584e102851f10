#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "kazeia.h"

static void usage(FILE *f) {
    fprintf(f,
            "kazeia " KZ_VERSION " - GGUF inference engine for Qwen3.5 / Qwen3\n"
            "usage: kazeia <command> [options]\n"
            "  run       [-m MODEL.gguf] -p PROMPT generate a chat answer (streams to stdout; no -m: built-in model)\n"
            "  chat      -m MODEL.gguf             interactive multi-turn chat (or one turn per stdin line)\n"
            "  info      MODEL.gguf                architecture, hparams, tensor table\n"
            "  logits    -m MODEL.gguf --tokens ..  dump logits for a token sequence (testing)\n"
            "  tokenize  -m MODEL.gguf [-f FILE]    token ids of text (testing)\n"
            "  bench     -m MODEL.gguf [-p N -n N]  prefill/decode speed, memory bandwidth use\n"
            "  quantize  IN.gguf OUT.gguf TYPE      quantise a model (Q4_K_M, Q4_0, IQ4_NL, ...)\n"
            "  perplexity -m MODEL.gguf -f TEXT   perplexity; KL divergence vs a reference (llama.cpp's method)\n"
            "  imatrix   -m MODEL.gguf -f TEXT -o OUT.gguf  importance matrix for quantize (llama.cpp's format)\n"
            "  guard     -m GUARD.gguf -p PROMPT    Qwen3Guard-Gen verdict as one line of JSON\n"
            "Run 'kazeia <command> --help' for the options of a command.\n");
}

/* the library never prints; the CLI shows its warnings (a refused KZ_ISA, ...) on stderr */
static void log_warnings(kz_log_level level, const char *msg, void *user) {
    (void)user;
    if (level >= KZ_LOG_WARN) fprintf(stderr, "kazeia: %s\n", msg);
}

int main(int argc, char **argv) {
    kz_log_set(log_warnings, NULL);
    if (argc < 2) { usage(stderr); return 2; }
    const char *c = argv[1];
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(c, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(c, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(c, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(c, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(c, "perplexity")) return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(c, "imatrix")) return cmd_imatrix(argc - 1, argv + 1);
    if (!strcmp(c, "guard")) return cmd_guard(argc - 1, argv + 1);
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) { usage(stdout); return 0; }
    if (!strcmp(c, "--version")) { printf("kazeia %s\n", kz_version()); return 0; }
    fprintf(stderr, "kazeia: unknown command '%s'\n", c);
    usage(stderr);
    return 2;
}
