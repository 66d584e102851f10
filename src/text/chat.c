/* ChatML prompt builder + injection-safe tokenisation. See chat.h. */
#include "text/chat.h"
#include <stdlib.h>
#include <string.h>
#include "sys/err.h"

static const char IM_START[] = "<|im_start|>";
static const char IM_END[] = "<|im_end|>";
static const char THINK[] = "<think>";
static const char THINK_END[] = "</think>";

static void seg_special(kz_chat_seg *s, int *n, const char *lit) {
    s[*n].special = 1; s[*n].text = lit; s[*n].len = strlen(lit); (*n)++;
}
static void seg_text(kz_chat_seg *s, int *n, const char *p, size_t len) {
    if (len == 0) return;
    s[*n].special = 0; s[*n].text = p; s[*n].len = len; (*n)++;
}
static void seg_lit(kz_chat_seg *s, int *n, const char *lit) { seg_text(s, n, lit, strlen(lit)); }

/* <|im_start|>ROLE\nCONTENT<|im_end|>\n (role_nl holds the role and its newline) */
static void seg_message(kz_chat_seg *s, int *n, const char *role_nl, const char *p, size_t len) {
    seg_special(s, n, IM_START);
    seg_lit(s, n, role_nl);
    seg_text(s, n, p, len);
    seg_special(s, n, IM_END);
    seg_lit(s, n, "\n");
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* content as the template sees it: qwen35 trims, qwen3 keeps it verbatim */
static void content(kz_chat_arch arch, const char *s, const char **p, size_t *len) {
    if (!s) s = "";
    size_t n = strlen(s);
    if (arch == KZ_CHAT_QWEN35) {
        while (n > 0 && is_ws(*s)) { s++; n--; }
        while (n > 0 && is_ws(s[n - 1])) n--;
    }
    *p = s; *len = n;
}

int kz_chat_segments(kz_chat_arch arch, const char *system, const char *user, int think,
                     kz_chat_seg *segs) {
    int n = 0;
    const char *p;
    size_t len;
    /* the template tests the raw content for emptiness; "only if non-empty" is our API rule */
    if (system && system[0]) {
        content(arch, system, &p, &len);
        seg_message(segs, &n, "system\n", p, len);
    }
    content(arch, user, &p, &len);
    seg_message(segs, &n, "user\n", p, len);
    seg_special(segs, &n, IM_START);
    seg_lit(segs, &n, "assistant\n");
    if (!think) {
        seg_special(segs, &n, THINK);
        seg_lit(segs, &n, "\n\n");
        seg_special(segs, &n, THINK_END);
        seg_lit(segs, &n, "\n\n");
    } else if (arch == KZ_CHAT_QWEN35) {
        seg_special(segs, &n, THINK);
        seg_lit(segs, &n, "\n");
    }
    return n;
}

size_t kz_chat_rendered_len(const kz_chat_seg *segs, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (segs[i].len > SIZE_MAX - 1 - total) return SIZE_MAX;
        total += segs[i].len;
    }
    return total;
}

char *kz_chat_render(const kz_chat_seg *segs, int n) {
    size_t total = kz_chat_rendered_len(segs, n);
    if (total == SIZE_MAX) return NULL;
    char *s = malloc(total + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (int i = 0; i < n; i++) { memcpy(s + o, segs[i].text, segs[i].len); o += segs[i].len; }
    s[o] = 0;
    return s;
}

int kz_chat_tokenize(const kz_tokenizer *t, const kz_chat_seg *segs, int n, int32_t **out,
                     char *err, size_t errlen) {
    *out = NULL;
    size_t total = kz_chat_rendered_len(segs, n);
    /* byte-level BPE: every token covers >= 1 byte, so bytes + specials bounds the count */
    if (total == SIZE_MAX || total > (size_t)(INT32_MAX / 2)) {
        kz_seterr(err, errlen, "prompt too long (%zu bytes)", total);
        return -1;
    }
    int cap = (int)total + n + 1;
    int32_t *toks = malloc((size_t)cap * sizeof *toks);
    char *run = malloc(total + 1);
    if (!toks || !run) {
        free(toks); free(run);
        kz_seterr(err, errlen, "out of memory tokenizing a %zu-byte prompt", total);
        return -1;
    }
    int nt = 0;
    for (int i = 0; i < n;) {
        if (segs[i].special) {
            int32_t id = kz_tok_find(t, segs[i].text);
            if (id < 0) {
                kz_seterr(err, errlen, "model vocabulary has no '%s' token (not a ChatML model?)",
                         segs[i].text);
                free(toks); free(run);
                return -1;
            }
            toks[nt++] = id;
            i++;
            continue;
        }
        size_t rl = 0;
        for (; i < n && !segs[i].special; i++) { memcpy(run + rl, segs[i].text, segs[i].len); rl += segs[i].len; }
        int room = cap - nt;
        int k = kz_tok_encode(t, run, rl, 0, toks + nt, room);
        if (k < 0) {
            kz_seterr(err, errlen, "tokenizer failed on the prompt text");
            free(toks); free(run);
            return -1;
        }
        if (k > room) { /* cannot happen for byte-level BPE; handled anyway */
            int32_t *bigger = realloc(toks, ((size_t)nt + (size_t)k + (size_t)n + 1) * sizeof *toks);
            if (!bigger) { free(toks); free(run); kz_seterr(err, errlen, "out of memory"); return -1; }
            toks = bigger;
            cap = nt + k + n + 1;
            k = kz_tok_encode(t, run, rl, 0, toks + nt, cap - nt);
            if (k < 0 || k > cap - nt) {
                kz_seterr(err, errlen, "tokenizer failed on the prompt text");
                free(toks); free(run);
                return -1;
            }
        }
        nt += k;
    }
    free(run);
    *out = toks;
    return nt;
}
