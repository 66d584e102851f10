/* kz_complete (plain-text continuation for base models) and kz_model_load_memory, on a tiny
 * random qwen35 model with an MTP block:
 * - greedy kz_complete evaluates exactly the tokens of a hand-written loop (kz_tokenize without
 *   special parsing, kz_eval, argmax, until max_tokens or an end-of-generation token): same
 *   sequence length and bit-identical final logits (MTP drafting on: same argmax, 1e-4), and
 *   streams valid UTF-8;
 * - the model loaded from a memory image gives the same logits as the file;
 * - bad input: empty text, NULL, a truncated image: an error with a message, no crash. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kt.h"
#include "kazeia.h"
#include "model/types.h"
#include "tools/mkmodel/mkmodel.h"

typedef struct { char buf[8192]; size_t n; } sink;


static int collect(const char *p, size_t n, void *ud) {
    sink *s = ud;
    if (s->n + n < sizeof s->buf) { memcpy(s->buf + s->n, p, n); s->n += n; }
    return 0;
}

static const char *TEXT = "Once upon a time, in a village by the sea, lived a fisherman; il était une fois.";

/* the reference loop by hand through the public eval API: greedy, stops at max_tokens (the
 * last token is not evaluated, as in kz_generate) or an end-of-generation token; leaves the
 * logits the context holds at the end and returns the tokens in the sequence */
static int by_hand(kz_model *m, int max_tokens, float *lg) {
    char err[256];
    kz_context_params cp = kz_context_default_params();
    cp.n_threads = 2;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (!c) return 0;
    int32_t toks[512];
    int n = kz_tokenize(m, TEXT, strlen(TEXT), 0, toks, 512);
    CHECK(n > 10 && n < 512);
    const int nv = kz_model_n_vocab(m);
    CHECK(kz_eval(c, toks, n, lg, 0) == 0);
    for (int i = 0; i < max_tokens; i++) {
        int32_t best = 0;
        for (int v = 1; v < nv; v++) if (lg[v] > lg[best]) best = v;
        if (kz_token_is_eog(m, best) || i == max_tokens - 1) break;
        CHECK(kz_eval(c, &best, 1, lg, 0) == 0);
    }
    int past = kz_context_n_past(c);
    kz_context_free(c);
    return past;
}

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int k = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++) if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* kz_complete's sequence length, final logits (copied to lg) and text */
static int complete(kz_model *m, int mtp, int max_tokens, float *lg, kz_stats *st) {
    char err[256];
    kz_context_params cp = kz_context_default_params();
    cp.n_threads = 2;
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (!c) return 0;
    kz_mtp_params mp = kz_mtp_default_params();
    mp.enabled = mtp;
    if (kz_model_has_mtp(m)) CHECK(kz_context_set_mtp(c, &mp) == 0);
    sink s = {.n = 0};
    CHECKF(kz_complete(c, TEXT, max_tokens, collect, &s, st) == 0, "%s", kz_context_error(c));
    CHECK(s.n > 0 && valid_utf8((const unsigned char *)s.buf, s.n));
    memcpy(lg, kz_logits(c), (size_t)kz_model_n_vocab(m) * sizeof *lg);
    int past = kz_context_n_past(c);
    /* errors: empty and NULL text, with a message; the context stays usable */
    kz_stats e;
    CHECK(kz_complete(c, "", 4, collect, &s, &e) == -1 && strstr(kz_context_error(c), "empty"));
    CHECK(kz_complete(c, NULL, 4, collect, &s, &e) == -1 && kz_context_status(c) == KZ_ERR_INVALID_ARG);
    CHECK(kz_complete(c, "again", 2, collect, &s, &e) == 0 && e.n_gen == 2);
    kz_context_free(c);
    return past;
}

/* same logits: bit-identical (exact = 1) or within 1e-4 of the largest magnitude, same argmax */
static int same_logits(const float *a, const float *b, int n, int exact) {
    if (exact) return !memcmp(a, b, (size_t)n * sizeof *a);
    float mx = 0, d = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < n; i++) {
        mx = fmaxf(mx, fabsf(a[i]));
        d = fmaxf(d, fabsf(a[i] - b[i]));
        if (a[i] > a[ia]) ia = i;
        if (b[i] > b[ib]) ib = i;
    }
    return ia == ib && d <= 1e-4f * mx;
}

int main(void) {
    char path[256], err[256];
    snprintf(path, sizeof path, "/tmp/kz_test_complete_%d.gguf", (int)getpid());
    kz_mkmodel_cfg cfg;
    kz_mkmodel_preset("qwen35-tiny", &cfg);
    cfg.wtype = KZ_T_Q8_0;
    cfg.n_nextn = 1;
    cfg.seed = 77;
    CHECKF(kz_mkmodel_write(&cfg, path, err, sizeof err) == 0, "%s", err);
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 2;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    CHECKF(m != NULL, "%s", err);
    if (!m) KT_END();

    enum { N = 40 };
    const int nv = kz_model_n_vocab(m);
    float *ref = malloc((size_t)nv * sizeof *ref), *a = malloc((size_t)nv * sizeof *a);
    int pr = by_hand(m, N, ref);
    kz_stats st;
    CHECK(complete(m, 0, N, a, &st) == pr && same_logits(a, ref, nv, 1));
    CHECK(st.n_gen > 0 && st.n_gen <= N && st.n_prompt > 10 && pr == st.n_prompt + st.n_gen - 1);
    CHECK(complete(m, 1, N, a, &st) == pr && same_logits(a, ref, nv, 0)); /* MTP drafts: same tokens */

    /* from memory: the file's bytes in a buffer */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* 64-byte aligned, as a file mapping or an .incbin is */
    unsigned char *img = aligned_alloc(64, ((size_t)sz + 63) / 64 * 64);
    CHECK(img && fread(img, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    kz_model *mm = kz_model_load_memory(img, (size_t)sz, "image", &mp, err, sizeof err);
    CHECKF(mm != NULL, "%s", err);
    if (mm) {
        CHECK(complete(mm, 0, N, a, &st) == pr && same_logits(a, ref, nv, 1));
        kz_model_free(mm);
    }
    free(ref);
    free(a);
    err[0] = 0;
    CHECK(kz_model_load_memory(img, (size_t)sz / 2, "half", &mp, err, sizeof err) == NULL && strstr(err, "half"));
    err[0] = 0;
    CHECK(kz_model_load_memory(NULL, 100, NULL, &mp, err, sizeof err) == NULL && err[0]);
    free(img);
    kz_model_free(m);
    unlink(path);
    KT_END();
}
