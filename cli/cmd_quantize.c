/* `kazeia quantize IN.gguf OUT.gguf TYPE [options]`: kz_quantize with a progress line on stderr
 * (tensor i/n, name, types, MB/s, ETA); Ctrl-C cancels and leaves no OUT behind. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "kazeia.h"

static void quantize_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia quantize [options] IN.gguf OUT.gguf TYPE\n"
            "Quantises a GGUF model tensor by tensor, choosing each tensor's type as llama-quantize does.\n"
            "TYPE: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S\n"
            "      Q5_K_M Q6_K F16 BF16 F32 (Q3_K, Q4_K, Q5_K = the _M mixes, as in llama-quantize)\n"
            "  --imatrix FILE          importance matrix (llama-imatrix / kazeia imatrix GGUF)\n"
            "  -t, --threads N         worker threads (default: all CPUs)\n"
            "  --tensor-type RE=TYPE   tensors whose name matches the POSIX regex RE get TYPE (repeatable,\n"
            "                          first match wins)\n"
            "  --pure                  every quantised tensor in TYPE's own type (no mix rules)\n"
            "  --leave-output          keep output.weight as it is\n"
            "  -q, --quiet             no progress line\n"
            "  -h, --help              this help\n"
            "Sources: F32, F16, BF16, Q8_0 (requantising says it loses quality) and the other types kazeia\n"
            "runs. Norms and other 1-D tensors are kept. OUT is written to a temporary file beside it and\n"
            "renamed at the end: an error or Ctrl-C leaves no OUT.\n"
            "Exit status: 0 ok, 1 error, 2 usage error, 130 cancelled.\n");
}

static volatile sig_atomic_t g_cancel; /* set by SIGINT / SIGTERM, read by the library */
static void on_signal(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct {
    int tty, quiet, last_i;
    double last_t;
} prog_state;

static void fmt_time(double s, char *b, size_t n) {
    const long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
}

static void on_progress(const kz_quantize_progress *p, void *ud) {
    prog_state *s = ud;
    if (s->quiet) return;
    const double mb = 1048576.0;
    if (p->finished) {
        char el[32];
        fmt_time(p->seconds, el, sizeof el);
        fprintf(stderr, "%squantised %d tensors: %.1f MiB -> %.1f MiB (%.1f%%) in %s, %.1f MB/s\n", s->tty ? "\r\033[K" : "",
                p->n_tensors, (double)p->bytes_total / mb, (double)p->bytes_out / mb,
                p->bytes_total ? 100.0 * (double)p->bytes_out / (double)p->bytes_total : 0.0, el,
                p->seconds > 0 ? (double)p->bytes_done / 1e6 / p->seconds : 0.0);
        return;
    }
    /* a tty gets one line rewritten at most 5 times a second; a log one line per tensor */
    if (s->tty ? (p->i_tensor == s->last_i && p->seconds - s->last_t < 0.2) : p->i_tensor == s->last_i) return;
    s->last_i = p->i_tensor;
    s->last_t = p->seconds;
    const double rate = p->seconds > 0 ? (double)p->bytes_done / p->seconds : 0.0;
    char eta[32] = "?";
    if (rate > 0 && p->bytes_done > 0) fmt_time((double)(p->bytes_total - p->bytes_done) / rate, eta, sizeof eta);
    fprintf(stderr, "%s[%4d/%4d] %-40s %6s -> %-6s %5.1f%% %7.1f MB/s ETA %s%s", s->tty ? "\r\033[K" : "", p->i_tensor,
            p->n_tensors, p->name, p->type_in, p->type_out,
            p->bytes_total ? 100.0 * (double)p->bytes_done / (double)p->bytes_total : 100.0, rate / 1e6, eta,
            s->tty ? "" : "\n");
}

int cmd_quantize(int argc, char **argv) {
    kz_quantize_params p = kz_quantize_default_params();
    const char *pos[3];
    int npos = 0, quiet = 0;
    const char **tt = calloc((size_t)argc + 1, sizeof *tt);
    int ntt = 0;
    if (!tt) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(stdout);
            free(tt);
            return 0;
        } else if (!strcmp(a, "--imatrix") && more) p.imatrix = argv[++i];
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && more) {
            if (kz_arg_int("kazeia quantize", a, argv[++i], 1, 1024, &p.n_threads)) { free(tt); return 2; }
        } else if (!strcmp(a, "--tensor-type") && more) tt[ntt++] = argv[++i];
        else if (!strcmp(a, "--pure")) p.pure = 1;
        else if (!strcmp(a, "--leave-output")) p.leave_output = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kazeia quantize: unknown option or missing value: '%s'\n", a);
            quantize_usage(stderr);
            free(tt);
            return 2;
        } else if (npos < 3) pos[npos++] = a;
        else {
            fprintf(stderr, "kazeia quantize: too many arguments ('%s')\n", a);
            free(tt);
            return 2;
        }
    }
    if (npos != 3) {
        quantize_usage(stderr);
        free(tt);
        return 2;
    }
    p.type = pos[2];
    p.tensor_types = ntt ? tt : NULL;
    prog_state ps = {.tty = isatty(2), .quiet = quiet, .last_i = 0, .last_t = 0};
    p.progress = on_progress;
    p.userdata = &ps;
    p.cancel = (const int *)&g_cancel;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    char err[1024];
    const kz_status st = kz_quantize(pos[0], pos[1], &p, err, sizeof err);
    free(tt);
    if (st != KZ_OK) {
        fprintf(stderr, "%skazeia quantize: %s\n", ps.tty && !quiet ? "\r\033[K" : "", err);
        return st == KZ_ERR_CANCELLED ? 130 : 1;
    }
    return 0;
}
