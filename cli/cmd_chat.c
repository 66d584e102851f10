/* kazeia chat: an interactive multi-turn conversation (kz_chat_*) in the terminal, or scripted
 * through a pipe (one line = one user turn). Answers stream to stdout; each turn's speed and
 * token reuse go to stderr. Ctrl-C stops the answer being written (the conversation stays
 * usable); a second Ctrl-C during the same answer, a Ctrl-C at the prompt, or EOF exits. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "args.h"
#include "kazeia.h"

/* Guard hook, called by the chat loop; the guard model (kz_guard_*) is wired here by --guard.
 * check_prompt: the user's text before it joins the conversation; non-zero blocks it (the turn
 * is not answered). check_answer: the answer so far, at every streamed piece (final 0) and once
 * complete (final 1); non-zero stops the generation and drops the reply from the conversation.
 * msg (cap bytes) may receive a line to show the user. NULL functions: no check. */
typedef struct {
    int (*check_prompt)(void *ud, const char *text, char *msg, size_t cap);
    int (*check_answer)(void *ud, const char *text, size_t len, int final, char *msg, size_t cap);
    void (*turn_end)(void *ud); /* after each turn: print the guard's cost and flags (stderr) */
    void *ud;
} chat_guard;

/* The kz_guard_* checker behind --guard. It runs on this thread inside the thinker's piece
 * callback, so guard and thinker use the cores in turn, never at once (docs/guard.md, Cores). */
typedef struct {
    kz_guard *g;
    size_t fed;        /* bytes of the answer given to kz_guard_response_feed */
    int checks;        /* this turn: checks run, guard tokens evaluated / reused, ms */
    long n_eval, n_reused;
    double t_ms;
    char v_prompt[160], v_answer[160]; /* this turn: the prompt's verdict, the answer's latest */
    char flag_prompt[192], flag_answer[192];
} guard_state;

static void verdict_text(const kz_guard_verdict *v, char *out, size_t cap) {
    static const char *const names[] = {"Safe", "Controversial", "Unsafe"};
    const float p = v->label == KZ_GUARD_SAFE ? v->p_safe : v->label == KZ_GUARD_UNSAFE ? v->p_unsafe
                                                                                       : v->p_controversial;
    int n = snprintf(out, cap, "%s (p %.2f)", names[v->label <= KZ_GUARD_UNSAFE ? v->label : 2], p);
    for (int i = 0, first = 1; i < 9 && n > 0 && (size_t)n < cap; i++) {
        if (!(v->categories & (1u << i))) continue;
        n += snprintf(out + n, cap - (size_t)n, "%s%s", first ? ", categories: " : ", ", kz_guard_category_name(i));
        first = 0;
    }
    if (v->refusal >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, ", refusal %s", v->refusal ? "yes" : "no");
    if (v->malformed && n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, ", malformed guard output");
}

/* one check's outcome: 1 blocks (msg says why), 0 lets through (a flag is recorded) */
static int guard_outcome(guard_state *s, const char *what, int r, const kz_guard_verdict *v, char *msg, size_t cap) {
    s->checks++;
    s->n_eval += v->n_eval;
    s->n_reused += v->n_reused;
    s->t_ms += v->t_ms;
    if (r < 0) { /* the verdict is filled fail-closed: blocked */
        const char *e = kz_guard_error(s->g);
        snprintf(msg, cap, "guard error: %s%s", e, strstr(e, "n_ctx") ? " (kazeia chat: --guard-ctx N)" : "");
        snprintf(!strcmp(what, "prompt") ? s->v_prompt : s->v_answer, sizeof s->v_prompt, "error");
        return 1;
    }
    char vt[160];
    verdict_text(v, vt, sizeof vt);
    snprintf(!strcmp(what, "prompt") ? s->v_prompt : s->v_answer, sizeof s->v_prompt, "%s", vt);
    if (v->blocked) { snprintf(msg, cap, "guard: %s %s", what, vt); return 1; }
    if (v->unsafe) { /* flag mode: the prompt's flag, and the answer's latest */
        char *f = !strcmp(what, "prompt") ? s->flag_prompt : s->flag_answer;
        snprintf(f, sizeof s->flag_prompt, "%s %s", what, vt);
    }
    return 0;
}

static int guard_check_prompt(void *ud, const char *text, char *msg, size_t cap) {
    guard_state *s = ud;
    s->fed = 0;
    s->checks = 0;
    s->n_eval = s->n_reused = 0;
    s->t_ms = 0;
    s->v_prompt[0] = s->v_answer[0] = s->flag_prompt[0] = s->flag_answer[0] = 0;
    kz_guard_verdict v;
    int r = kz_guard_check_prompt(s->g, text, &v);
    if (guard_outcome(s, "prompt", r, &v, msg, cap)) return 1;
    if (kz_guard_response_begin(s->g, text) != 0) {
        snprintf(msg, cap, "guard error: %s", kz_guard_error(s->g));
        return 1;
    }
    return 0;
}

static int guard_check_answer(void *ud, const char *text, size_t len, int final, char *msg, size_t cap) {
    guard_state *s = ud;
    kz_guard_verdict v;
    int r = 0;
    if (len > s->fed) { /* one call per streamed piece: the new bytes are that piece */
        r = kz_guard_response_feed(s->g, text + s->fed, len - s->fed, &v);
        s->fed = len;
        if (r != 0 && guard_outcome(s, "answer", r < 0 ? -1 : 0, &v, msg, cap)) return 1;
    }
    if (!final) return 0;
    r = kz_guard_response_end(s->g, &v);
    return guard_outcome(s, "answer", r, &v, msg, cap);
}

static void guard_turn_end(void *ud) {
    guard_state *s = ud;
    if (!s->checks) return;
    fprintf(stderr, "[guard: %d check%s, %ld tok evaluated, %ld reused, %.1f ms | prompt: %s | answer: %s]\n",
            s->checks, s->checks == 1 ? "" : "s", s->n_eval, s->n_reused, s->t_ms, s->v_prompt,
            s->v_answer[0] ? s->v_answer : "-");
    if (s->flag_prompt[0]) fprintf(stderr, "[guard flag: %s]\n", s->flag_prompt);
    if (s->flag_answer[0]) fprintf(stderr, "[guard flag: %s]\n", s->flag_answer);
    s->checks = 0;
}

static void chat_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia chat -m MODEL.gguf [options]\n"
            "  -m, --model FILE         GGUF model (qwen35 / qwen3)\n"
            "  --system TEXT            system message (default: none)\n"
            "  --think on|off           thinking before answering (default on; /think switches it)\n"
            "  -n, --n-predict N        max tokens per answer (default -1: until end of turn)\n"
            "  --temp T --top-k K --top-p P --min-p P --presence-penalty P --repeat-penalty R --seed S\n"
            "                           sampling; default: the model card's values for the think mode\n"
            "                           (Qwen3 think 0.6/20/0.95/0, else 0.7/20/0.8/0; Qwen3.5 think\n"
            "                           1.0/20/0.95/0, else 0.7/20/0.8/0, presence penalty 1.5)\n"
            "  --checkpoints N          GDN state checkpoints kept (default 2)\n"
            "  -t, --threads N          worker threads (default: all CPUs)\n"
            "  -c, --ctx-size N         context size in tokens (default: min(train ctx, 4096))\n"
            "  -b, --batch-size N       prefill chunk (default 512)\n"
            "  --kv f32|f16|q8_0        KV cache type (default f16)\n"
            "  --no-repack              keep Q4_0 weights zero-copy\n"
            "  --guard FILE             guard model (Qwen3Guard-Gen, qwen3): checks each prompt before the\n"
            "                           answer, and the answer as it streams\n"
            "  --guard-policy strict|loose  Controversial counts as Unsafe (strict, default) or Safe\n"
            "  --guard-action block|flag    Unsafe: block the prompt / stop and drop the answer (default),\n"
            "                           or only print a flag\n"
            "  --guard-every N          check the answer every N tokens and at the end (default 32; 0: end)\n"
            "  --guard-ctx N            guard context in tokens (default 4096)\n"
            "In the chat: /reset, /system TEXT, /think on|off, /save FILE, /load FILE, /stats, /quit.\n"
            "Ctrl-C stops an answer; Ctrl-C at the prompt, a second Ctrl-C or EOF (Ctrl-D) exits.\n"
            "Without a terminal on stdin each line is one user turn.\n");
}

static kz_context *volatile g_ctx;
static volatile sig_atomic_t g_generating, g_cancels, g_quit;

static void on_sigint(int sig) {
    (void)sig;
    if (g_generating) {
        if (g_cancels++ > 0) _exit(130);
        if (g_ctx) kz_cancel(g_ctx);
    } else {
        g_quit = 1;
    }
}

typedef struct {
    const chat_guard *guard;
    char *text;        /* the answer so far (for the guard) */
    size_t len, cap;
    int blocked;
    char msg[256];
} turn_out;

static int on_piece(const char *p, size_t n, void *ud) {
    turn_out *o = ud;
    fwrite(p, 1, n, stdout);
    fflush(stdout);
    if (o->guard && o->guard->check_answer) {
        if (o->len + n + 1 > o->cap) {
            size_t cap = (o->len + n + 1) * 2;
            char *b = realloc(o->text, cap);
            if (!b) return 1;
            o->text = b;
            o->cap = cap;
        }
        memcpy(o->text + o->len, p, n);
        o->len += n;
        o->text[o->len] = 0;
        if (o->guard->check_answer(o->guard->ud, o->text, o->len, 0, o->msg, sizeof o->msg)) o->blocked = 1;
    }
    return o->blocked || ferror(stdout);
}

static const char *stop_name(kz_stop_reason r) {
    switch (r) {
    case KZ_STOP_EOG: return "end of turn";
    case KZ_STOP_MAX_TOKENS: return "max tokens";
    case KZ_STOP_CANCELLED: return "stopped";
    case KZ_STOP_CTX_FULL: return "context full";
    default: return "error";
    }
}

/* sampling flags given on the command line; the rest follow the think mode's defaults */
typedef struct {
    int has_temp, has_topk, has_topp, has_minp, has_pres, has_rep, has_seed;
    float temp, topp, minp, pres, rep;
    int topk, n_predict;
    uint64_t seed;
} overrides;

static kz_gen_params gen_params(const kz_model *m, int think, const overrides *ov) {
    kz_gen_params g = kz_gen_default_params(m, think);
    g.think = think;
    g.max_tokens = ov->n_predict;
    if (ov->has_temp) g.temperature = ov->temp;
    if (ov->has_topk) g.top_k = ov->topk;
    if (ov->has_topp) g.top_p = ov->topp;
    if (ov->has_minp) g.min_p = ov->minp;
    if (ov->has_pres) g.presence_penalty = ov->pres;
    if (ov->has_rep) g.repeat_penalty = ov->rep;
    if (ov->has_seed) g.seed = ov->seed;
    return g;
}

static char *trim_arg(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    return s;
}

typedef struct { long turns, evaluated, reused; double t_pf, t_dc; long n_gen; } totals;

int cmd_chat(int argc, char **argv) {
    const char *P = "kazeia chat";
    const char *model_path = NULL, *system = NULL, *guard_path = NULL;
    kz_guard_params gdp = kz_guard_default_params();
    int n_threads = 0, repack = -1, think = 1, n_ck = 0;
    overrides ov = {.n_predict = -1};
    kz_context_params cp = kz_context_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { chat_usage(stdout); return 0; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (!strcmp(a, "--repack")) { repack = 1; continue; }
        static const char *const with_value[] = {"-m", "--model", "--system", "--think", "-n", "--n-predict", "--temp",
                                                 "--top-k", "--top-p", "--min-p", "--presence-penalty",
                                                 "--repeat-penalty", "--seed", "--checkpoints", "-t", "--threads",
                                                 "-c", "--ctx-size", "-b", "--batch-size", "--kv", "--guard",
                                                 "--guard-policy", "--guard-action", "--guard-every",
                                                 "--guard-ctx", NULL};
        int known = 0;
        for (int k = 0; with_value[k]; k++) if (!strcmp(a, with_value[k])) known = 1;
        if (!known) { fprintf(stderr, "%s: unknown option '%s' (see kazeia chat --help)\n", P, a); return 2; }
        if (i + 1 >= argc) { fprintf(stderr, "%s: option %s needs a value\n", P, a); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        long l;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--think")) {
            if (!strcmp(v, "on")) think = 1;
            else if (!strcmp(v, "off")) think = 0;
            else { fprintf(stderr, "%s: --think expects on or off, got '%s'\n", P, v); bad = 1; }
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) bad = kz_arg_int(P, a, v, -1, INT_MAX, &ov.n_predict);
        else if (!strcmp(a, "--temp")) { bad = kz_arg_float(P, a, v, 0, &ov.temp); ov.has_temp = 1; }
        else if (!strcmp(a, "--top-k")) { bad = kz_arg_int(P, a, v, 0, INT_MAX, &ov.topk); ov.has_topk = 1; }
        else if (!strcmp(a, "--top-p")) { bad = kz_arg_float(P, a, v, 0, &ov.topp); ov.has_topp = 1; }
        else if (!strcmp(a, "--min-p")) { bad = kz_arg_float(P, a, v, 0, &ov.minp); ov.has_minp = 1; }
        else if (!strcmp(a, "--presence-penalty")) { bad = kz_arg_float(P, a, v, 0, &ov.pres); ov.has_pres = 1; }
        else if (!strcmp(a, "--repeat-penalty")) { bad = kz_arg_float(P, a, v, 1, &ov.rep); ov.has_rep = 1; }
        else if (!strcmp(a, "--seed")) { bad = kz_arg_long(P, a, v, 0, LONG_MAX, &l); ov.seed = (uint64_t)l; ov.has_seed = 1; }
        else if (!strcmp(a, "--checkpoints")) bad = kz_arg_int(P, a, v, 1, 1024, &n_ck);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = kz_arg_int(P, a, v, 1, 1024, &n_threads);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) bad = kz_arg_int(P, a, v, 1, INT_MAX, &cp.n_ctx);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) bad = kz_arg_int(P, a, v, 1, INT_MAX, &cp.n_batch);
        else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f32")) cp.kv_type = KZ_KV_F32;
            else if (!strcmp(v, "f16")) cp.kv_type = KZ_KV_F16;
            else if (!strcmp(v, "q8_0")) cp.kv_type = KZ_KV_Q8_0;
            else { fprintf(stderr, "%s: --kv expects f32, f16 or q8_0, got '%s'\n", P, v); bad = 1; }
        }
        else if (!strcmp(a, "--guard")) guard_path = v;
        else if (!strcmp(a, "--guard-policy")) {
            if (!strcmp(v, "strict")) gdp.policy = KZ_GUARD_STRICT;
            else if (!strcmp(v, "loose")) gdp.policy = KZ_GUARD_LOOSE;
            else { fprintf(stderr, "%s: --guard-policy expects strict or loose, got '%s'\n", P, v); bad = 1; }
        } else if (!strcmp(a, "--guard-action")) {
            if (!strcmp(v, "block")) gdp.action = KZ_GUARD_BLOCK;
            else if (!strcmp(v, "flag")) gdp.action = KZ_GUARD_FLAG;
            else { fprintf(stderr, "%s: --guard-action expects block or flag, got '%s'\n", P, v); bad = 1; }
        } else if (!strcmp(a, "--guard-every")) bad = kz_arg_int(P, a, v, 0, INT_MAX, &gdp.check_every);
        else if (!strcmp(a, "--guard-ctx")) bad = kz_arg_int(P, a, v, 1, INT_MAX, &gdp.n_ctx);
        if (bad) return 2;
    }
    if (!model_path) { fprintf(stderr, "%s: missing -m MODEL.gguf (see kazeia chat --help)\n", P); return 2; }
    if (ov.n_predict == 0) { fprintf(stderr, "%s: -n 0 generates nothing; use -n -1 for no limit\n", P); return 2; }

    char err[512] = "";
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = n_threads;
    if (repack >= 0) mp.repack_weights = repack;
    kz_model *m = kz_model_load(model_path, &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "%s: cannot load model: %s\n", P, err[0] ? err : model_path); return 1; }
    cp.n_threads = n_threads;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    kz_chat_params hp = kz_chat_default_params();
    hp.think = think;
    hp.max_checkpoints = n_ck;
    kz_chat *h = c ? kz_chat_new(c, &hp, err, sizeof err) : NULL;
    if (!h) {
        fprintf(stderr, "%s: %s\n", P, err[0] ? err : "cannot create the conversation");
        kz_context_free(c);
        kz_model_free(m);
        return 1;
    }
    if (system && kz_chat_set_system(h, system) != 0) fprintf(stderr, "%s: %s\n", P, kz_chat_error(h));

    kz_model *gm = NULL;
    guard_state gs = {0};
    chat_guard gh = {guard_check_prompt, guard_check_answer, guard_turn_end, &gs};
    const chat_guard *guard = NULL;
    if (guard_path) { /* loaded once, beside the thinker; its own context, used in turn with it */
        gm = kz_model_load(guard_path, &mp, err, sizeof err);
        gdp.n_threads = n_threads;
        gs.g = gm ? kz_guard_new(gm, &gdp, err, sizeof err) : NULL;
        if (!gs.g) {
            fprintf(stderr, "%s: %s %s: %s\n", P, gm ? "cannot use guard model" : "cannot load guard model",
                    guard_path, err[0] ? err : "unknown error");
            kz_model_free(gm);
            kz_chat_free(h);
            kz_context_free(c);
            kz_model_free(m);
            return 1;
        }
        guard = &gh;
    }
    const int tty = isatty(STDIN_FILENO);
    g_ctx = c;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);
    if (tty) fprintf(stderr, "kazeia chat: %s, %s. /help for commands, Ctrl-D to quit.\n", kz_model_arch(m),
                     think ? "thinking on" : "thinking off");

    totals tot = {0};
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        errno = 0;
        ssize_t nl = getline(&line, &lcap, stdin);
        if (g_quit || nl < 0) { if (tty) fputc('\n', stdout); break; }
        while (nl > 0 && (line[nl - 1] == '\n' || line[nl - 1] == '\r')) line[--nl] = 0;
        if (nl == 0) continue;
        if (line[0] == '/') {
            char *cmd = line + 1, *arg = cmd + strcspn(cmd, " \t");
            if (*arg) *arg++ = 0;
            arg = trim_arg(arg);
            if (!strcmp(cmd, "quit") || !strcmp(cmd, "exit")) break;
            else if (!strcmp(cmd, "reset")) { kz_chat_reset(h); fprintf(stderr, "[conversation cleared]\n"); }
            else if (!strcmp(cmd, "system")) {
                if (kz_chat_set_system(h, arg) != 0) fprintf(stderr, "[%s]\n", kz_chat_error(h));
                else fprintf(stderr, arg[0] ? "[system message set]\n" : "[system message removed]\n");
            } else if (!strcmp(cmd, "think")) {
                if (!strcmp(arg, "on")) think = 1;
                else if (!strcmp(arg, "off")) think = 0;
                else fprintf(stderr, "[usage: /think on|off]\n");
                fprintf(stderr, "[thinking %s]\n", think ? "on" : "off");
            } else if (!strcmp(cmd, "save")) {
                if (!arg[0]) fprintf(stderr, "[usage: /save FILE]\n");
                else if (kz_chat_save(h, arg) != 0) fprintf(stderr, "[%s]\n", kz_chat_error(h));
                else fprintf(stderr, "[saved %d messages to %s]\n", kz_chat_n_messages(h), arg);
            } else if (!strcmp(cmd, "load")) {
                if (!arg[0]) fprintf(stderr, "[usage: /load FILE]\n");
                else if (kz_chat_load(h, arg) != 0) fprintf(stderr, "[%s]\n", kz_chat_error(h));
                else fprintf(stderr, "[loaded %d messages, %d tokens, from %s]\n", kz_chat_n_messages(h),
                             kz_context_n_past(c), arg);
            } else if (!strcmp(cmd, "stats")) {
                fprintf(stderr,
                        "[%d messages, %d / %d context tokens, %d checkpoints (%.1f KiB), %ld turns: %ld prompt "
                        "tokens evaluated, %ld reused; %ld generated]\n",
                        kz_chat_n_messages(h), kz_context_n_past(c), kz_context_n_ctx(c), kz_chat_n_checkpoints(h),
                        kz_chat_memory(h) / 1024.0, tot.turns, tot.evaluated, tot.reused, tot.n_gen);
            } else if (!strcmp(cmd, "help")) {
                fprintf(stderr, "[/reset  /system TEXT  /think on|off  /save FILE  /load FILE  /stats  /quit]\n");
            } else {
                fprintf(stderr, "[unknown command /%s: /help lists them]\n", cmd);
            }
            continue;
        }
        char gmsg[256] = "";
        if (guard && guard->check_prompt && guard->check_prompt(guard->ud, line, gmsg, sizeof gmsg)) {
            fprintf(stderr, "[prompt blocked%s%s]\n", gmsg[0] ? ": " : "", gmsg);
            if (guard->turn_end) guard->turn_end(guard->ud);
            continue;
        }
        if (kz_chat_add(h, KZ_ROLE_USER, line) != 0) { fprintf(stderr, "[%s]\n", kz_chat_error(h)); continue; }
        kz_gen_params gp = gen_params(m, think, &ov);
        turn_out o = {.guard = guard};
        kz_stats st;
        g_cancels = 0;
        g_generating = 1;
        if (think && !strcmp(kz_model_arch(m), "qwen35")) fputs("<think>\n", stdout); /* the prompt opened it */
        int r = kz_chat_reply(h, &gp, on_piece, &o, &st);
        g_generating = 0;
        if (r == 0 && guard && guard->check_answer && !o.blocked &&
            guard->check_answer(guard->ud, o.text ? o.text : "", o.len, 1, o.msg, sizeof o.msg))
            o.blocked = 1;
        if (o.blocked) { /* the blocked reply (kept if generated at all) and its prompt leave the history */
            int n = kz_chat_n_messages(h);
            if (n > 0 && kz_chat_message_role(h, n - 1) == KZ_ROLE_ASSISTANT && kz_chat_pop(h) == 0) n--;
            if (n > 0 && kz_chat_message_role(h, n - 1) == KZ_ROLE_USER) kz_chat_pop(h);
        }
        free(o.text);
        fputc('\n', stdout);
        fflush(stdout);
        if (guard && guard->turn_end) guard->turn_end(guard->ud);
        if (r != 0) {
            fprintf(stderr, "[%s]\n", kz_chat_error(h));
            if (kz_chat_n_messages(h) > 0 && kz_chat_message_role(h, kz_chat_n_messages(h) - 1) == KZ_ROLE_USER)
                kz_chat_pop(h); /* not answered: the user can retry it */
            if (kz_chat_status(h) != KZ_ERR_CTX_FULL) { rc = 1; }
            continue;
        }
        if (o.blocked) fprintf(stderr, "[answer blocked%s%s; removed from the conversation]\n", o.msg[0] ? ": " : "", o.msg);
        tot.turns++;
        tot.evaluated += st.n_prompt;
        tot.reused += st.n_reused;
        tot.n_gen += st.n_gen;
        double pf = st.t_prefill_ms > 0 ? st.n_prompt * 1e3 / st.t_prefill_ms : 0;
        double dc = st.t_decode_ms > 0 ? st.n_gen * 1e3 / st.t_decode_ms : 0;
        fprintf(stderr, "[prefill %d tok (%d reused) %.1f tok/s | decode %d tok %.1f tok/s | %s]\n", st.n_prompt,
                st.n_reused, pf, st.n_gen, dc, stop_name(st.stop));
    }
    free(line);
    signal(SIGINT, SIG_DFL);
    g_ctx = NULL;
    kz_chat_free(h);
    kz_context_free(c);
    kz_guard_free(gs.g);
    kz_model_free(gm);
    kz_model_free(m);
    return rc;
}
