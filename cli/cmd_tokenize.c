/* kazeia tokenize: token ids of a text, using only the GGUF metadata (works on vocab-only
 * files). For testing against reference tokenizers. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/gguf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

static void tok_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia tokenize -m FILE.gguf [-f TEXTFILE | -p TEXT] [--special] [--ids-only] [--decode]\n"
            "  -m FILE      GGUF model or vocab-only file\n"
            "  -f TEXTFILE  read the text from a file ('-' = stdin), bytes as they are\n"
            "  -p TEXT      the text itself\n"
            "  --special    control tokens written in the text (e.g. <|im_start|>) become their ids\n"
            "  --ids-only   print only the ids (the default output; kept for scripts)\n"
            "  --decode     print the concatenated bytes of the tokens instead of ids\n"
            "testing only (the raw text, no special tokens):\n"
            "  --pieces     print the byte end offset of each pre-tokenizer piece\n"
            "  --nfc        print the NFC-normalised text\n");
}

static char *read_all(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n == cap) {
            char *c = realloc(b, cap * 2);
            if (!c) { free(b); b = NULL; break; }
            b = c; cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (!b) { snprintf(err, errlen, "%s: out of memory", path); return NULL; }
    if (bad) { free(b); snprintf(err, errlen, "%s: read error", path); return NULL; }
    *len = n;
    return b;
}

static int print_pieces(const kz_tokenizer *t, const char *s, size_t len) {
    size_t *ends = malloc((len ? len : 1) * sizeof *ends);
    if (!ends) { fprintf(stderr, "kazeia tokenize: out of memory\n"); return 1; }
    size_t n = kz_pretokenize(kz_tok_variant(t), s, len, ends, len);
    for (size_t i = 0; i < n; i++) printf(i ? " %zu" : "%zu", ends[i]);
    putchar('\n');
    free(ends);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int print_nfc(const char *s, size_t len) {
    char *o = NULL;
    size_t on = 0;
    int r = kz_nfc(s, len, &o, &on);
    if (r < 0) { fprintf(stderr, "kazeia tokenize: out of memory\n"); return 1; }
    fwrite(r ? o : s, 1, r ? on : len, stdout);
    free(o);
    return fflush(stdout) == 0 ? 0 : 1;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *prompt = NULL;
    int special = 0, decode = 0, pieces = 0, nfc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tok_usage(stdout); return 0; }
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--ids-only")) { /* default */ }
        else if (!strcmp(a, "--decode")) decode = 1;
        else if (!strcmp(a, "--pieces")) pieces = 1;
        else if (!strcmp(a, "--nfc")) nfc = 1;
        else if ((!strcmp(a, "-m") || !strcmp(a, "-f") || !strcmp(a, "-p")) && i + 1 < argc) {
            const char *v = argv[++i];
            if (a[1] == 'm') model = v; else if (a[1] == 'f') file = v; else prompt = v;
        } else {
            fprintf(stderr, "kazeia tokenize: unknown or incomplete option '%s'\n", a);
            tok_usage(stderr);
            return 2;
        }
    }
    if (!model || (!file && !prompt) || (file && prompt)) {
        fprintf(stderr, "kazeia tokenize: need -m FILE and exactly one of -f / -p\n");
        tok_usage(stderr);
        return 2;
    }
    char err[512];
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = read_all(file, &len, err, sizeof err);
        if (!text) { fprintf(stderr, "kazeia tokenize: %s\n", err); return 1; }
    }
    kz_gguf *g = kz_gguf_open(model, err, sizeof err);
    if (!g) { fprintf(stderr, "kazeia tokenize: %s\n", err); free(text); return 1; }
    kz_tokenizer *t = kz_tokenizer_from_gguf(g, err, sizeof err);
    if (!t) {
        fprintf(stderr, "kazeia tokenize: %s: %s\n", model, err);
        kz_gguf_close(g);
        free(text);
        return 1;
    }
    const char *src = file ? text : prompt;
    if (!file) len = strlen(prompt);
    int rc = 1;
    if (pieces || nfc) {
        rc = pieces ? print_pieces(t, src, len) : print_nfc(src, len);
        kz_tokenizer_free(t);
        kz_gguf_close(g);
        free(text);
        return rc;
    }
    int n = kz_tok_encode(t, src, len, special, NULL, 0);
    int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
    if (n < 0 || (n > 0 && !ids)) {
        fprintf(stderr, "kazeia tokenize: encoding failed (out of memory)\n");
        goto done;
    }
    if (n > 0 && kz_tok_encode(t, src, len, special, ids, n) != n) {
        fprintf(stderr, "kazeia tokenize: encoding is not deterministic (internal error)\n");
        goto done;
    }
    if (decode) {
        char small[256];
        for (int i = 0; i < n; i++) {
            int l = kz_tok_bytes(t, ids[i], small, sizeof small);
            if (l < 0) { fprintf(stderr, "kazeia tokenize: bad id %d\n", ids[i]); goto done; }
            if ((size_t)l <= sizeof small) fwrite(small, 1, (size_t)l, stdout);
            else {
                char *big = malloc((size_t)l);
                if (!big) { fprintf(stderr, "kazeia tokenize: out of memory\n"); goto done; }
                kz_tok_bytes(t, ids[i], big, (size_t)l);
                fwrite(big, 1, (size_t)l, stdout);
                free(big);
            }
        }
    } else {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ids);
    kz_tokenizer_free(t);
    kz_gguf_close(g);
    free(text);
    return rc;
}
