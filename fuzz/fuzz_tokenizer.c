/* libFuzzer target: arbitrary bytes -> encode (specials parsed and not, both pre-tokenizer
 * variants) -> decode -> must equal the expected text (fz_expected: added tokens verbatim, the
 * rest NFC'd; ill-formed UTF-8 bytes survive unchanged); streaming the decoded bytes through
 * kz_utf8_feed gives valid UTF-8 (the same bytes when they were valid); the pre-tokenizer
 * covers its input with increasing piece ends; a short output buffer gets no write past max;
 * NFC is idempotent. */
#include "fuzz_common.h"

static void check_stream(const kz_tokenizer *t, const int32_t *ids, int n, const fz_buf *dec) {
    kz_utf8_stream st;
    memset(&st, 0, sizeof st);
    fz_buf o = {0};
    char piece[512], out[KZ_UTF8_FEED_CAP(512)];
    for (int i = 0; i < n; i++) {
        int l = kz_tok_bytes(t, ids[i], piece, sizeof piece);
        size_t w = kz_utf8_feed(&st, piece, (size_t)l, out, sizeof out);
        FZ_CHECK(fz_utf8_valid((unsigned char *)out, w), "kz_utf8_feed emitted invalid UTF-8");
        fz_put(&o, out, w);
    }
    size_t w = kz_utf8_flush(&st, out, sizeof out);
    FZ_CHECK(w <= 3, "flush wrote %zu bytes", w);
    fz_put(&o, out, w);
    if (fz_utf8_valid(dec->p, dec->n))
        FZ_CHECK(o.n == dec->n && (o.n == 0 || !memcmp(o.p, dec->p, o.n)), "stream changed valid UTF-8");
    else
        FZ_CHECK(o.n > 0, "invalid input vanished in the stream");
    free(o.p);
}

/* decode(encode(x)) against fz_expected. full: also the count-only call, a short output buffer
 * and the streaming check (done for one of the four variant/special combinations per input, to
 * keep executions fast) */
static void round_trip(int variant, const char *x, size_t n, int parse_special, int full) {
    const kz_tokenizer *t = fz_tokenizer(variant);
    size_t cap = 3 * n + 1; /* NFC grows text at most 3x; a token covers >= 1 byte */
    int32_t *ids = malloc((cap + 1) * sizeof *ids);
    FZ_CHECK(ids != NULL, "oom");
    int cnt = kz_tok_encode(t, x, n, parse_special, ids, (int)cap);
    FZ_CHECK(cnt >= 0 && (size_t)cnt < cap, "count %d for %zu bytes", cnt, n);
    ids[cnt] = 0x5a5a5a5a;
    if (full) {
        FZ_CHECK(kz_tok_encode(t, x, n, parse_special, NULL, 0) == cnt, "count-only call differs");
        if (cnt > 1) { /* short buffer: same count, same prefix, nothing written past max */
            int32_t *s = malloc((size_t)cnt * sizeof *s);
            int half = cnt / 2;
            s[half] = 0x77777777;
            FZ_CHECK(kz_tok_encode(t, x, n, parse_special, s, half) == cnt, "count with short buffer");
            FZ_CHECK(s[half] == 0x77777777 && !memcmp(s, ids, (size_t)half * sizeof *s), "short buffer");
            free(s);
        }
    }
    fz_buf got = {0}, want = {0};
    fz_decode(t, ids, cnt, &got);
    fz_expected(x, n, parse_special, &want);
    FZ_CHECK(got.n == want.n && (got.n == 0 || !memcmp(got.p, want.p, got.n)),
             "round trip differs (variant %d, special %d): %zu bytes back, %zu expected", variant,
             parse_special, got.n, want.n);
    /* CONTROL tokens only ever come from parsed specials */
    if (!parse_special) FZ_CHECK(fz_count_type(t, ids, cnt, 1) == 0, "control token without parse_special");
    if (full) check_stream(t, ids, cnt, &got);
    free(ids);
    free(got.p);
    free(want.p);
}

static void check_pretok(int variant, const char *x, size_t n) {
    if (!n) return;
    size_t *ends = malloc(n * sizeof *ends);
    size_t np = kz_pretokenize(variant, x, n, ends, n);
    FZ_CHECK(np >= 1 && np <= n, "%zu pieces for %zu bytes", np, n);
    size_t prev = 0;
    for (size_t i = 0; i < np; i++) {
        FZ_CHECK(ends[i] > prev && ends[i] <= n, "piece %zu ends at %zu after %zu", i, ends[i], prev);
        prev = ends[i];
    }
    FZ_CHECK(prev == n, "pieces cover %zu of %zu bytes", prev, n);
    free(ends);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *x = (const char *)data;
    /* NFC: idempotent, keeps valid UTF-8 valid */
    fz_buf a = {0}, b = {0};
    fz_put_nfc(&a, x, size);
    fz_put_nfc(&b, (const char *)a.p, a.n);
    FZ_CHECK(a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n)), "NFC not idempotent");
    if (fz_utf8_valid(data, size)) FZ_CHECK(fz_utf8_valid(a.p, a.n), "NFC broke valid UTF-8");
    check_pretok(KZ_PRE_QWEN2, (const char *)a.p, a.n);
    check_pretok(KZ_PRE_QWEN35, (const char *)a.p, a.n);
    free(a.p);
    free(b.p);
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    for (int v = 0; v < 2; v++)
        for (int ps = 0; ps < 2; ps++) round_trip(v, x, size, ps, (unsigned)(2 * v + ps) == (h & 3));
    /* long texts switch on the piece cache (>= 16 KiB): one input in 64, chosen by a hash of
     * the whole input (so the corpus cannot drift towards it), is tiled to reach it */
    if (size >= 16 && (h >> 26) == 0) {
        size_t n = 0, cap = 16384 + size;
        char *big = malloc(cap);
        while (n + size <= cap) { memcpy(big + n, x, size); n += size; }
        round_trip((h >> 2) & 1, big, n, (h >> 3) & 1, 0);
        free(big);
    }
    return 0;
}
