/* libFuzzer target: the ChatML prompt builder. Input: byte 0 = flags (bit 0 arch qwen35, bit 1
 * think, bits 2/3 empty system/user as NULL), then "system NUL user" (C strings, so the user part ends at the next NUL).
 * Checks: the rendered prompt equals the template written out here; the tokens decode to it
 * (text runs as the tokenizer's round trip gives them); exactly the template's control tokens
 * appear (content can never inject one). */
#include "text/chat.h"
#include "fuzz_common.h"

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static void put_s(fz_buf *b, const char *s) { fz_put(b, s, strlen(s)); }
static void put_content(fz_buf *b, const char *s, int trim) {
    size_t n = strlen(s), i = 0;
    if (trim) {
        while (i < n && ws(s[i])) i++;
        while (n > i && ws(s[n - 1])) n--;
    }
    fz_put(b, s + i, n - i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int q35 = data[0] & 1, think = (data[0] >> 1) & 1;
    char *buf = malloc(size + 1);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    buf[size] = 0;
    const char *sys = buf, *user = buf + strlen(buf) + 1; /* <= buf + size */
    if (user > buf + size) user = buf + size;
    /* flag bits 2, 3: pass an empty system / user as NULL (means "") */
    const char *sys_arg = ((data[0] & 4) && !sys[0]) ? NULL : sys;
    const char *user_arg = ((data[0] & 8) && !user[0]) ? NULL : user;

    kz_chat_seg segs[KZ_CHAT_MAX_SEGS];
    int n = kz_chat_segments(q35 ? KZ_CHAT_QWEN35 : KZ_CHAT_QWEN3, sys_arg, user_arg, think, segs);
    FZ_CHECK(n > 0 && n <= KZ_CHAT_MAX_SEGS, "%d segments", n);

    /* template, independently */
    fz_buf want = {0};
    if (sys[0]) {
        put_s(&want, "<|im_start|>system\n");
        put_content(&want, sys, q35);
        put_s(&want, "<|im_end|>\n");
    }
    put_s(&want, "<|im_start|>user\n");
    put_content(&want, user, q35);
    put_s(&want, "<|im_end|>\n<|im_start|>assistant\n");
    if (!think) put_s(&want, "<think>\n\n</think>\n\n");
    else if (q35) put_s(&want, "<think>\n");

    char *r = kz_chat_render(segs, n);
    FZ_CHECK(r != NULL, "render failed");
    size_t rl = kz_chat_rendered_len(segs, n);
    FZ_CHECK(rl == strlen(r) && rl == want.n && !memcmp(r, want.p, rl), "rendered prompt differs from the template");
    free(r);

    const kz_tokenizer *t = fz_tokenizer(q35 ? KZ_PRE_QWEN35 : KZ_PRE_QWEN2);
    int32_t *ids = NULL;
    char err[256];
    int nt = kz_chat_tokenize(t, segs, n, &ids, err, sizeof err);
    FZ_CHECK(nt > 0 && ids != NULL, "kz_chat_tokenize: %s", err);

    /* expected decode: specials verbatim, each run of text segments as a round trip of the run */
    fz_buf exp = {0}, run = {0};
    int n_control = 0;
    for (int i = 0; i < n; i++) {
        if (segs[i].special) {
            int32_t id = kz_tok_find(t, segs[i].text);
            FZ_CHECK(id >= 0, "no token for '%s'", segs[i].text);
            n_control += kz_tok_is_control(t, id);
            fz_put(&exp, segs[i].text, segs[i].len);
            continue;
        }
        run.n = 0;
        for (; i < n && !segs[i].special; i++) fz_put(&run, segs[i].text, segs[i].len);
        i--;
        fz_expected((const char *)run.p, run.n, 0, &exp);
    }
    fz_buf got = {0};
    fz_decode(t, ids, nt, &got);
    FZ_CHECK(got.n == exp.n && !memcmp(got.p, exp.p, got.n), "prompt tokens decode to something else");
    FZ_CHECK(fz_count_type(t, ids, nt, 1) == n_control, "%d control tokens, template has %d",
             fz_count_type(t, ids, nt, 1), n_control);
    free(ids);
    free(exp.p);
    free(run.p);
    free(got.p);
    free(want.p);
    free(buf);
    return 0;
}
