/* Saved sequence state images (see state.h).
 *
 * Format version 2 (version 1 is the same without the MTP section; both are read), host byte
 * order (an endianness tag refuses a file from the other order):
 *   0   magic "KZSTATE\0"            8   u32 version (2)          12  u32 tag 0x01020304
 *   16  u64 model fingerprint        24  char arch[16]
 *   40  u32 n_layer  44 u32 n_embd  48 u32 n_vocab  52 u32 kv_type  56 u32 n_attn_layers
 *   60  u32 n_head_kv  64 u32 head_dim  68 u32 n_gdn_layers  72 u64 conv floats  80 u64 ssm floats
 *   88  u32 n_past   92 u32 flags (1: logits saved, 2: checksummed, 4: MTP cache saved)
 *   96  u64 total image bytes        104 u64 KV row bytes
 *   112 u32 MTP KV rows (n_past - 1 with flag 4, else 0)   116 reserved (12 zero bytes)
 *   128 payload: i32 tokens[n_past]; f32 logits[n_vocab] if flag 1; per attention layer the
 *       K rows then the V rows [n_head_kv][n_past] (KV type's row bytes each); f32 conv
 *       states; f32 recurrent states; if flag 4 the MTP block's K then V rows
 *       [n_head_kv][n_past - 1] and f32 hidden[n_embd] (the trunk's, at n_past - 1)
 *   end u64 hash of every byte before it (0 when not checksummed)
 * The n_* fields repeat what the fingerprint covers so a mismatch can be explained. An image
 * without the MTP section loads into a context that drafts: its draft cache starts empty. */
#include <string.h>
#include "forward/state.h"
#include "sys/err.h"

#define HDR 128
#define F_LOGITS 1u
#define F_CHECKSUM 2u
#define F_MTP 4u
#define ENDIAN_TAG 0x01020304u
static const char MAGIC[8] = {'K', 'Z', 'S', 'T', 'A', 'T', 'E', 0};

/* ---- streaming 64-bit hash over 8-byte words (rotate, xor, odd multiply: each step is a
 * bijection of the word, so any single changed word changes the result) ---- */
typedef struct {
    uint64_t h;
    unsigned char part[8];
    int np;
} hasher;

static inline uint64_t mix(uint64_t h, uint64_t w) {
    h = (h << 23) | (h >> 41);
    return (h ^ w) * 0x9E3779B97F4A7C15ull;
}
static void h_init(hasher *s) { s->h = 0x6a09e667f3bcc908ull; s->np = 0; }
static void h_feed(hasher *s, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n && s->np) { /* finish a partial word */
        s->part[s->np++] = *b++;
        n--;
        if (s->np == 8) { uint64_t w; memcpy(&w, s->part, 8); s->h = mix(s->h, w); s->np = 0; }
    }
    for (; n >= 8; n -= 8, b += 8) { uint64_t w; memcpy(&w, b, 8); s->h = mix(s->h, w); }
    while (n--) s->part[s->np++] = *b++;
}
static uint64_t h_final(hasher *s) {
    uint64_t h = s->h;
    if (s->np) { /* zero-padded tail, its length mixed in */
        uint64_t w = 0;
        memcpy(&w, s->part, (size_t)s->np);
        h = mix(h, w ^ ((uint64_t)s->np << 56));
    }
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; /* avalanche */
    return h;
}
static void h_u64(hasher *s, uint64_t v) { h_feed(s, &v, 8); }

uint64_t kz_model_fingerprint(const kz_model *m) {
    const kz_hparams *hp = &m->hp;
    hasher s;
    h_init(&s);
    h_feed(&s, m->arch_name, strnlen(m->arch_name, sizeof m->arch_name));
    const int64_t iv[] = {hp->arch, hp->n_layer, hp->n_layer_all, hp->n_embd, hp->n_ff, hp->n_vocab,
                          hp->n_ctx_train, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot,
                          hp->full_attn_interval, hp->ssm_d_conv, hp->ssm_d_state, hp->ssm_n_k_heads,
                          hp->ssm_n_v_heads, hp->ssm_d_inner, hp->ssm_head_v_dim, hp->rope_sections[0],
                          hp->rope_sections[1], hp->rope_sections[2], hp->rope_sections[3]};
    for (size_t i = 0; i < sizeof iv / sizeof *iv; i++) h_u64(&s, (uint64_t)iv[i]);
    uint32_t fb[2];
    memcpy(&fb[0], &hp->rms_eps, 4);
    memcpy(&fb[1], &hp->rope_base, 4);
    h_feed(&s, fb, sizeof fb);
    const kz_gguf *g = m->gguf;
    h_u64(&s, g ? g->n_tensors : 0);
    for (uint64_t t = 0; g && t < g->n_tensors; t++) {
        const kz_tensor_info *ti = &g->tensors[t];
        const size_t nl = strlen(ti->name);
        h_u64(&s, nl);
        h_feed(&s, ti->name, nl);
        h_u64(&s, ti->n_dims);
        for (int d = 0; d < 4; d++) h_u64(&s, (uint64_t)ti->ne[d]);
        h_u64(&s, ti->type);
    }
    return h_final(&s);
}

/* ---- size ---- */

/* a += b * c with overflow check; 0 on overflow */
static int madd(size_t *a, size_t b, size_t c) {
    if (b && c > SIZE_MAX / b) return 0;
    if (b * c > SIZE_MAX - *a) return 0;
    *a += b * c;
    return 1;
}

/* image bytes for n_past tokens; 0 on overflow. with_mtp: the MTP section (v->mtp_kv set) */
static size_t image_bytes(const kz_model *m, const kz_seq_view *v, size_t n_past, int with_logits, int with_mtp) {
    size_t n = HDR + 8;
    const size_t rb = v->n_kv_layers ? kz_kv_row_bytes(&v->kv[0]) : 0;
    const size_t hkv = v->n_kv_layers ? (size_t)v->kv[0].n_head_kv : 0;
    int ok = madd(&n, n_past, 4) && (!with_logits || madd(&n, (size_t)m->hp.n_vocab, 4)) &&
             madd(&n, (size_t)v->n_kv_layers * 2 * hkv, n_past * rb) && madd(&n, v->n_conv, 4) &&
             madd(&n, v->n_ssm, 4);
    if (ok && with_mtp)
        ok = n_past >= 1 && madd(&n, 2 * (size_t)v->mtp_kv->n_head_kv, (n_past - 1) * kz_kv_row_bytes(v->mtp_kv)) &&
             madd(&n, (size_t)m->hp.n_embd, 4);
    return ok ? n : 0;
}

size_t kz_state_image_size(const kz_model *m, kz_seq *s, int with_logits) {
    kz_seq_view v;
    kz_seq_view_get(s, &v);
    return image_bytes(m, &v, (size_t)v.n_past, with_logits, v.mtp_ready);
}

/* ---- write ---- */

typedef struct {
    unsigned char *buf;
    FILE *f;
    size_t pos;
    hasher hs;
    int failed;
} sink;

static void put(sink *k, const void *p, size_t n) {
    if (k->failed || !n) return;
    h_feed(&k->hs, p, n);
    if (k->f) {
        if (fwrite(p, 1, n, k->f) != n) k->failed = 1;
    } else {
        memcpy(k->buf + k->pos, p, n);
    }
    k->pos += n;
}

static void wr32(unsigned char *h, size_t off, uint32_t v) { memcpy(h + off, &v, 4); }
static void wr64(unsigned char *h, size_t off, uint64_t v) { memcpy(h + off, &v, 8); }
static uint32_t rd32(const unsigned char *h, size_t off) { uint32_t v; memcpy(&v, h + off, 4); return v; }
static uint64_t rd64(const unsigned char *h, size_t off) { uint64_t v; memcpy(&v, h + off, 8); return v; }

size_t kz_state_image_write(const kz_model *m, kz_seq *s, const int32_t *hist, const float *logits, int checksum,
                            void *buf, size_t cap, FILE *f, char *err, size_t errlen) {
    kz_seq_view v;
    kz_seq_view_get(s, &v);
    const int with_mtp = v.mtp_ready;
    const size_t total = image_bytes(m, &v, (size_t)v.n_past, logits != NULL, with_mtp);
    if (!total) { kz_seterr(err, errlen, "state of %d tokens is too large to save", v.n_past); return 0; }
    if (!f && (!buf || cap < total)) {
        kz_seterr(err, errlen, "state buffer too small: %zu bytes, the state needs %zu", cap, total);
        return 0;
    }
    if (v.n_past > 0 && !hist) { kz_seterr(err, errlen, "state: no token history given"); return 0; }
    const kz_hparams *hp = &m->hp;
    unsigned char h[HDR];
    memset(h, 0, sizeof h);
    memcpy(h, MAGIC, 8);
    wr32(h, 8, KZ_STATE_VERSION);
    wr32(h, 12, ENDIAN_TAG);
    wr64(h, 16, kz_model_fingerprint(m));
    memcpy(h + 24, m->arch_name, strnlen(m->arch_name, 15));
    wr32(h, 40, (uint32_t)hp->n_layer);
    wr32(h, 44, (uint32_t)hp->n_embd);
    wr32(h, 48, (uint32_t)hp->n_vocab);
    wr32(h, 52, (uint32_t)v.kv_type);
    wr32(h, 56, (uint32_t)v.n_kv_layers);
    wr32(h, 60, (uint32_t)(v.n_kv_layers ? v.kv[0].n_head_kv : 0));
    wr32(h, 64, (uint32_t)(v.n_kv_layers ? v.kv[0].head_dim : 0));
    wr32(h, 68, (uint32_t)hp->n_gdn_layers);
    wr64(h, 72, v.n_conv);
    wr64(h, 80, v.n_ssm);
    wr32(h, 88, (uint32_t)v.n_past);
    wr32(h, 92, (logits ? F_LOGITS : 0) | (checksum ? F_CHECKSUM : 0) | (with_mtp ? F_MTP : 0));
    wr64(h, 96, total);
    wr64(h, 104, v.n_kv_layers ? kz_kv_row_bytes(&v.kv[0]) : 0);
    wr32(h, 112, with_mtp ? (uint32_t)(v.n_past - 1) : 0);
    sink k = {buf, f, 0, {0, {0}, 0}, 0};
    h_init(&k.hs);
    put(&k, h, HDR);
    put(&k, hist, (size_t)v.n_past * 4);
    if (logits) put(&k, logits, (size_t)hp->n_vocab * 4);
    for (int i = 0; i < v.n_kv_layers; i++)
        for (int which = 0; which < 2; which++)
            for (int g = 0; g < v.kv[i].n_head_kv; g++)
                put(&k, kz_kv_row(&v.kv[i], which, g, 0), (size_t)v.n_past * kz_kv_row_bytes(&v.kv[i]));
    put(&k, v.conv, v.n_conv * 4);
    put(&k, v.ssm, v.n_ssm * 4);
    if (with_mtp) {
        for (int which = 0; which < 2; which++)
            for (int g = 0; g < v.mtp_kv->n_head_kv; g++)
                put(&k, kz_kv_row(v.mtp_kv, which, g, 0), (size_t)(v.n_past - 1) * kz_kv_row_bytes(v.mtp_kv));
        put(&k, v.mtp_h, (size_t)hp->n_embd * 4);
    }
    uint64_t hash = checksum ? h_final(&k.hs) : 0;
    put(&k, &hash, 8);
    if (k.failed) { kz_seterr(err, errlen, "cannot write the state (disk full?)"); return 0; }
    return k.pos;
}

/* ---- read ---- */

static const char *kv_name(uint32_t t) {
    return t == KZ_KV_F32 ? "f32" : t == KZ_KV_F16 ? "f16" : t == KZ_KV_Q8_0 ? "q8_0" : "unknown";
}

int kz_state_image_read(const kz_model *m, kz_seq *s, const void *buf, size_t len, int32_t *hist, int hist_cap,
                        float *logits, kz_state_info *info, char *err, size_t errlen) {
    const unsigned char *b = buf;
    const kz_hparams *hp = &m->hp;
    if (!b || len < 8 || memcmp(b, MAGIC, 8) != 0) {
        kz_seterr(err, errlen, "not a Kazeia state file (bad magic)");
        return -1;
    }
    if (len < HDR + 8) {
        kz_seterr(err, errlen, "state file is truncated (%zu bytes, the header alone is %d)", len, HDR + 8);
        return -1;
    }
    const uint32_t ver = rd32(b, 8);
    if (ver != 1 && ver != KZ_STATE_VERSION) {
        kz_seterr(err, errlen, "state file format version %u is not supported (this build reads versions 1 to %d)", ver,
                  KZ_STATE_VERSION);
        return -1;
    }
    if (rd32(b, 12) != ENDIAN_TAG) {
        kz_seterr(err, errlen, "state file was written on a machine of the other byte order");
        return -1;
    }
    const uint64_t total = rd64(b, 96);
    if (total != len) {
        kz_seterr(err, errlen, "state file is %s: %zu bytes, its header says %llu", total > len ? "truncated" : "too long",
                  len, (unsigned long long)total);
        return -1;
    }
    const uint32_t flags = rd32(b, 92);
    if (flags & ~(F_LOGITS | F_CHECKSUM | F_MTP) || (ver < 2 && (flags & F_MTP))) {
        kz_seterr(err, errlen, "state file has unknown flags 0x%x (corrupt or from a newer version)", flags);
        return -1;
    }
    if (flags & F_CHECKSUM) {
        hasher hs;
        h_init(&hs);
        h_feed(&hs, b, len - 8);
        if (h_final(&hs) != rd64(b, len - 8)) {
            kz_seterr(err, errlen, "state file is corrupt (checksum mismatch)");
            return -1;
        }
    }
    if (rd64(b, 16) != kz_model_fingerprint(m)) {
        char arch[17];
        memcpy(arch, b + 24, 16);
        arch[16] = 0;
        for (int i = 0; arch[i]; i++) if (arch[i] < 32 || arch[i] > 126) arch[i] = '?';
        kz_seterr(err, errlen,
                  "state file was saved with a different model (%s, %u layers, n_embd %u, vocab %u; this model: %s, "
                  "%d layers, n_embd %d, vocab %d%s)",
                  arch, rd32(b, 40), rd32(b, 44), rd32(b, 48), m->arch_name, hp->n_layer, hp->n_embd, hp->n_vocab,
                  !strcmp(arch, m->arch_name) && rd32(b, 40) == (uint32_t)hp->n_layer &&
                       rd32(b, 44) == (uint32_t)hp->n_embd && rd32(b, 48) == (uint32_t)hp->n_vocab
                   ? "; same sizes, other tensor shapes or types"
                   : "");
        return -1;
    }
    kz_seq_view v;
    kz_seq_view_get(s, &v);
    if (rd32(b, 52) != (uint32_t)v.kv_type) {
        kz_seterr(err, errlen, "state file has a %s KV cache, this context uses %s (create it with the same KV type)",
                  kv_name(rd32(b, 52)), kv_name((uint32_t)v.kv_type));
        return -1;
    }
    const uint32_t n_past = rd32(b, 88);
    if (n_past > (uint32_t)v.n_ctx) {
        kz_seterr(err, errlen, "state file holds %u tokens, more than this context's n_ctx %d", n_past, v.n_ctx);
        return -1;
    }
    if (!hist || (int)n_past > hist_cap) {
        kz_seterr(err, errlen, "state: token history buffer too small (%d for %u tokens)", hist_cap, n_past);
        return -1;
    }
    /* same fingerprint, so these can only differ in a forged or damaged unchecksummed image */
    const int has_logits = (flags & F_LOGITS) != 0, has_mtp = (flags & F_MTP) != 0;
    /* the MTP section's sizes are the block's KV layer's, also when this context does not draft */
    kz_seq_view vm = v;
    kz_kv_layer mtp_shape;
    if (has_mtp && !vm.mtp_kv && m->mtp && v.n_kv_layers) {
        mtp_shape = v.kv[0];
        vm.mtp_kv = &mtp_shape;
    }
    if (rd32(b, 56) != (uint32_t)v.n_kv_layers || rd64(b, 72) != v.n_conv || rd64(b, 80) != v.n_ssm ||
        rd64(b, 104) != (v.n_kv_layers ? kz_kv_row_bytes(&v.kv[0]) : 0) || (has_mtp && (!vm.mtp_kv || n_past < 1)) ||
        rd32(b, 112) != (has_mtp ? n_past - 1 : 0) || image_bytes(m, &vm, n_past, has_logits, has_mtp) != len) {
        kz_seterr(err, errlen, "state file is corrupt (its sizes do not match the model)");
        return -1;
    }
    const unsigned char *p = b + HDR;
    for (uint32_t i = 0; i < n_past; i++) {
        int32_t t;
        memcpy(&t, p + (size_t)i * 4, 4);
        if (t < 0 || t >= hp->n_vocab) {
            kz_seterr(err, errlen, "state file is corrupt (token %d at position %u is outside the vocabulary)", (int)t, i);
            return -1;
        }
    }
    /* valid: restore */
    if (n_past) memcpy(hist, p, (size_t)n_past * 4);
    p += (size_t)n_past * 4;
    if (has_logits) {
        if (logits) memcpy(logits, p, (size_t)hp->n_vocab * 4);
        p += (size_t)hp->n_vocab * 4;
    }
    for (int i = 0; i < v.n_kv_layers; i++)
        for (int which = 0; which < 2; which++)
            for (int g = 0; g < v.kv[i].n_head_kv; g++) {
                const size_t nb = (size_t)n_past * kz_kv_row_bytes(&v.kv[i]);
                memcpy(kz_kv_row(&v.kv[i], which, g, 0), p, nb);
                p += nb;
            }
    if (v.n_conv) memcpy(v.conv, p, v.n_conv * 4);
    p += v.n_conv * 4;
    if (v.n_ssm) memcpy(v.ssm, p, v.n_ssm * 4);
    p += v.n_ssm * 4;
    kz_seq_set_n_past(s, (int)n_past); /* clears the MTP cache: an image without it starts it empty */
    if (has_mtp && v.mtp_kv) { /* a context that does not draft ignores it */
        for (int which = 0; which < 2; which++)
            for (int g = 0; g < v.mtp_kv->n_head_kv; g++) {
                const size_t nb = (size_t)(n_past - 1) * kz_kv_row_bytes(v.mtp_kv);
                memcpy(kz_kv_row(v.mtp_kv, which, g, 0), p, nb);
                p += nb;
            }
        memcpy(v.mtp_h, p, (size_t)hp->n_embd * 4);
        kz_seq_mtp_restore(s);
    }
    if (info) {
        info->n_past = (int)n_past;
        info->has_logits = has_logits && logits != NULL;
    }
    return 0;
}
