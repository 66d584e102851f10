/* Random-weight GGUF writer for qwen35 / qwen3 (see mkmodel.h).
 * Keys, tensor names and shapes follow llama.cpp's converter (docs/qwen35.md: GGUF metadata keys, tensors, Qwen3 dense); 1-D tensors,
 * ssm_conv1d, ssm_alpha and ssm_beta stay F32 like in real files. Every row of every tensor
 * has its own PRNG stream derived from (seed, tensor name, row), so the output does not depend
 * on the thread count or the chunking. Data is generated, converted and written one block of
 * rows at a time. */
#include "tools/mkmodel/mkmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "matmul/quant.h"
#include "sys/threadpool.h"
#include "model/types.h"
#include "sys/err.h"

enum { K_MAT, K_MAT_F32, K_NORM, K_SSM_A, K_DT_BIAS, K_CONV };

/* correlation of GDN key channels with the query channels of the same head (see tie()) */
#define TIE_RHO 0.9f

typedef struct {
    char name[64];
    uint32_t n_dims;
    int64_t ne[2]; /* ne[1] = 1 for 1-D */
    uint32_t type;
    int kind;
    float scale; /* std multiplier for matrices */
    /* rows [tie_lo, tie_hi) are correlated (coefficient tie_rho) with rows r - tie_off */
    int64_t tie_lo, tie_hi, tie_off;
    float tie_rho;
} tspec;

typedef struct {
    tspec *t;
    int n, cap;
    int n_fallback;
    int oom;
    const kz_mkmodel_cfg *cfg;
} tlist;

/* ---------------- presets ---------------- */

static const char *const k_presets[] = { "qwen35-0.8b", "qwen35-2b", "qwen35-4b", "qwen35-9b", "qwen3-0.6b", "qwen3-4b",
                                         "qwen3-8b",
                                         "qwen35-tiny", "qwen3-tiny", NULL };

const char *const *kz_mkmodel_preset_names(void) { return k_presets; }

static void base_qwen35(kz_mkmodel_cfg *c) {
    strcpy(c->arch, "qwen35");
    c->n_ctx_train = 262144;
    c->head_dim = 256;
    c->n_rot = 64;
    c->rms_eps = 1e-6f;
    c->rope_base = 1e7f;
    c->full_attn_interval = 4;
    c->ssm_d_conv = 4;
    c->ssm_d_state = 128;
    c->ssm_n_group = 16;
    c->n_vocab = 248320;
    c->tied = 1;
}

static void base_qwen3(kz_mkmodel_cfg *c) {
    strcpy(c->arch, "qwen3");
    c->n_ctx_train = 40960;
    c->head_dim = 128;
    c->n_rot = 128;
    c->rms_eps = 1e-6f;
    c->rope_base = 1e6f;
    c->n_vocab = 151936;
    c->tied = 1;
}

int kz_mkmodel_preset(const char *name, kz_mkmodel_cfg *c) {
    if (!name || !c) return -1;
    memset(c, 0, sizeof *c);
    c->wtype = KZ_T_F16;
    c->seed = 1;
    /* shapes: docs/qwen35.md#model-sizes (Qwen3.5) and #qwen3-dense (Qwen3-4B) */
    if (!strcmp(name, "qwen35-0.8b")) {
        base_qwen35(c);
        c->n_layer = 24; c->n_embd = 1024; c->n_ff = 3584; c->n_head = 8; c->n_head_kv = 2;
        c->ssm_dt_rank = 16; c->ssm_d_inner = 2048;
    } else if (!strcmp(name, "qwen35-2b")) {
        base_qwen35(c);
        c->n_layer = 24; c->n_embd = 2048; c->n_ff = 6144; c->n_head = 8; c->n_head_kv = 2;
        c->ssm_dt_rank = 16; c->ssm_d_inner = 2048;
    } else if (!strcmp(name, "qwen35-4b")) {
        base_qwen35(c);
        c->n_layer = 32; c->n_embd = 2560; c->n_ff = 9216; c->n_head = 16; c->n_head_kv = 4;
        c->ssm_dt_rank = 32; c->ssm_d_inner = 4096;
    } else if (!strcmp(name, "qwen35-9b")) {
        base_qwen35(c);
        c->n_layer = 32; c->n_embd = 4096; c->n_ff = 12288; c->n_head = 16; c->n_head_kv = 4;
        c->ssm_dt_rank = 32; c->ssm_d_inner = 4096;
        c->tied = 0;
    } else if (!strcmp(name, "qwen3-4b")) {
        base_qwen3(c);
        c->n_layer = 36; c->n_embd = 2560; c->n_ff = 9728; c->n_head = 32; c->n_head_kv = 8;
    } else if (!strcmp(name, "qwen3-0.6b")) { /* Qwen3-0.6B / Qwen3Guard-Gen-0.6B config.json */
        base_qwen3(c);
        c->n_layer = 28; c->n_embd = 1024; c->n_ff = 3072; c->n_head = 16; c->n_head_kv = 8;
    } else if (!strcmp(name, "qwen3-8b")) { /* Qwen3-8B / Qwen3Guard-Gen-8B: untied LM head */
        base_qwen3(c);
        c->n_layer = 36; c->n_embd = 4096; c->n_ff = 12288; c->n_head = 32; c->n_head_kv = 8;
        c->tied = 0;
    } else if (!strcmp(name, "qwen35-tiny")) {
        base_qwen35(c);
        c->n_layer = 8; c->n_embd = 256; c->n_ff = 512; c->n_head = 4; c->n_head_kv = 2;
        c->head_dim = 64; c->n_rot = 16;
        c->ssm_d_conv = 4; c->ssm_d_state = 32; c->ssm_n_group = 2; c->ssm_dt_rank = 4; c->ssm_d_inner = 128;
        c->n_vocab = 0;
    } else if (!strcmp(name, "qwen3-tiny")) {
        base_qwen3(c);
        c->n_layer = 8; c->n_embd = 256; c->n_ff = 512; c->n_head = 4; c->n_head_kv = 2;
        c->head_dim = 64; c->n_rot = 64;
        c->n_vocab = 0;
    } else {
        return -1;
    }
    snprintf(c->name, sizeof c->name, "kazeia-random-%s", name);
    return 0;
}

int kz_mkmodel_file_type(uint32_t wtype) {
    switch (wtype) {
    case KZ_T_F32: return 0;
    case KZ_T_F16: return 1;
    case KZ_T_Q4_0: return 2;
    case KZ_T_Q4_1: return 3;
    case KZ_T_Q5_0: return 8;
    case KZ_T_Q5_1: return 9;
    case KZ_T_IQ4_NL: return 25;
    case KZ_T_Q8_0: return 7;
    case KZ_T_BF16: return 32;
    case KZ_T_Q4_K: return 14;
    case KZ_T_Q5_K: return 16;
    case KZ_T_Q6_K: return 18;
    case KZ_T_Q2_K: return 10;   /* MOSTLY_Q2_K */
    case KZ_T_Q3_K: return 12;   /* MOSTLY_Q3_K_M (pure Q3_K here) */
    case KZ_T_IQ4_XS: return 30; /* MOSTLY_IQ4_XS */
    }
    return -1;
}

static const char *tyname(uint32_t t) {
    const kz_type_info *ti = kz_type_get(t);
    return ti ? ti->name : "?";
}

/* ---------------- validation ---------------- */

#define DIM_MAX (1 << 20)

static int check_cfg(const kz_mkmodel_cfg *c, char *err, size_t errlen) {
    int q35 = !strcmp(c->arch, "qwen35");
    if (!q35 && strcmp(c->arch, "qwen3")) {
        kz_seterr(err, errlen, "unknown arch '%s' (use qwen35 or qwen3)", c->arch);
        return -1;
    }
    struct { const char *n; int v; } dims[] = {
        { "n_layer", c->n_layer }, { "n_embd", c->n_embd }, { "n_ff", c->n_ff }, { "n_head", c->n_head },
        { "n_head_kv", c->n_head_kv }, { "head_dim", c->head_dim }, { "n_rot", c->n_rot },
        { "n_ctx_train", c->n_ctx_train },
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || (dims[i].v > DIM_MAX && strcmp(dims[i].n, "n_ctx_train"))) {
            kz_seterr(err, errlen, "%s = %d is out of range (1..%d)", dims[i].n, dims[i].v, DIM_MAX);
            return -1;
        }
    if (c->n_vocab < 0 || c->n_vocab > (1 << 24)) {
        kz_seterr(err, errlen, "n_vocab = %d is out of range (0 = auto, up to %d)", c->n_vocab, 1 << 24);
        return -1;
    }
    if (c->n_head % c->n_head_kv) {
        kz_seterr(err, errlen, "n_head = %d is not a multiple of n_head_kv = %d", c->n_head, c->n_head_kv);
        return -1;
    }
    if (c->n_rot > c->head_dim || c->n_rot % 2) {
        kz_seterr(err, errlen, "n_rot = %d must be even and <= head_dim = %d", c->n_rot, c->head_dim);
        return -1;
    }
    if (!c->mix && kz_mkmodel_file_type(c->wtype) < 0) {
        kz_seterr(err, errlen, "matrix type %s is not supported (use f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k or iq4_xs)", tyname(c->wtype));
        return -1;
    }
    if (!(c->rms_eps > 0) || !(c->rope_base > 0)) {
        kz_seterr(err, errlen, "rms_eps and rope_base must be > 0");
        return -1;
    }
    if (!q35) {
        if (c->n_nextn) {
            kz_seterr(err, errlen, "n_nextn (MTP blocks) is only for qwen35");
            return -1;
        }
        return 0;
    }
    struct { const char *n; int v; } ssm[] = {
        { "full_attn_interval", c->full_attn_interval }, { "ssm_d_conv", c->ssm_d_conv },
        { "ssm_d_state", c->ssm_d_state }, { "ssm_n_group", c->ssm_n_group },
        { "ssm_dt_rank", c->ssm_dt_rank }, { "ssm_d_inner", c->ssm_d_inner },
    };
    for (size_t i = 0; i < sizeof ssm / sizeof ssm[0]; i++)
        if (ssm[i].v < 1 || ssm[i].v > DIM_MAX) {
            kz_seterr(err, errlen, "%s = %d is out of range (1..%d)", ssm[i].n, ssm[i].v, DIM_MAX);
            return -1;
        }
    if (c->ssm_d_inner % c->ssm_dt_rank) {
        kz_seterr(err, errlen, "ssm_d_inner = %d is not a multiple of ssm_dt_rank (value heads) = %d", c->ssm_d_inner,
                  c->ssm_dt_rank);
        return -1;
    }
    if (c->ssm_dt_rank % c->ssm_n_group) {
        kz_seterr(err, errlen, "ssm_dt_rank (value heads) = %d is not a multiple of ssm_n_group (key heads) = %d",
                  c->ssm_dt_rank, c->ssm_n_group);
        return -1;
    }
    if (c->n_nextn < 0 || c->n_nextn > 16) {
        kz_seterr(err, errlen, "n_nextn = %d is out of range (0..16)", c->n_nextn);
        return -1;
    }
    int s = 0;
    for (int i = 0; i < 4; i++) {
        if (c->rope_sections[i] < 0) {
            kz_seterr(err, errlen, "rope section %d is negative", i);
            return -1;
        }
        s += c->rope_sections[i];
    }
    if (s && s > c->n_rot / 2) {
        kz_seterr(err, errlen, "rope sections sum to %d, more than n_rot/2 = %d", s, c->n_rot / 2);
        return -1;
    }
    return 0;
}

/* ---------------- tensor list ---------------- */

static void add(tlist *L, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1, uint32_t type, int kind) {
    if (L->oom) return;
    if (L->n == L->cap) {
        int cap = L->cap ? L->cap * 2 : 256;
        tspec *t = realloc(L->t, (size_t)cap * sizeof *t);
        if (!t) { L->oom = 1; return; }
        L->t = t;
        L->cap = cap;
    }
    tspec *t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->type = type;
    t->kind = kind;
    t->scale = 1.0f;
}

/* llama-quantize's choice for Q4_K_M (llama_tensor_get_type, as the llama.cpp behind
 * llama-cpp-python 0.3.x picks it, checked by tests/py/test_kquant_model.py): the LM head
 * (output.weight, or token_embd when tied) Q6_K; attn_v / attn_qkv (one counter) and ffn_down
 * Q6_K in the layers use_more_bits selects (first and last eighth, every third between),
 * everything else 2-D Q4_K (the GDN ssm_alpha / ssm_beta too). */
static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }
static uint32_t q4km_type(const kz_mkmodel_cfg *c, const char *name) {
    const int n_blk = c->n_layer + (!strcmp(c->arch, "qwen35") ? c->n_nextn : 0);
    if (!strcmp(name, "output.weight") || (c->tied && !strcmp(name, "token_embd.weight"))) return KZ_T_Q6_K;
    int il = -1, off = 0;
    if (sscanf(name, "blk.%d.%n", &il, &off) == 1 && off > 0) {
        const char *sfx = name + off;
        if ((!strcmp(sfx, "attn_v.weight") || !strcmp(sfx, "attn_qkv.weight") || !strcmp(sfx, "ffn_down.weight")) &&
            use_more_bits(il, n_blk))
            return KZ_T_Q6_K;
    }
    return KZ_T_Q4_K;
}

/* the type of a weight matrix with rows of n_in: the requested type (or the Q4_K_M mix's);
 * when n_in is not a whole number of blocks, llama-quantize's fallback: K-quants Q4_K ->
 * Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (Q8_0 where this build has no Q5_0 / Q5_1 kernels yet),
 * 32-element types -> F16 */
static uint32_t mat_type(tlist *L, const char *name, int64_t n_in) {
    const kz_mkmodel_cfg *c = L->cfg;
    uint32_t ty = c->mix ? q4km_type(c, name) : c->wtype;
    const kz_type_info *ti = kz_type_get(ty);
    if (!ti || n_in % ti->blck == 0) return ty;
    uint32_t fb = KZ_T_F16;
    if (ty == KZ_T_Q4_K) fb = KZ_T_Q5_0;
    else if (ty == KZ_T_Q5_K) fb = KZ_T_Q5_1;
    else if (ty == KZ_T_Q6_K) fb = KZ_T_Q8_0;
    else if (ty == KZ_T_Q2_K || ty == KZ_T_Q3_K || ty == KZ_T_IQ4_XS) fb = KZ_T_IQ4_NL; /* llama-quantize */
    if (fb != KZ_T_F16 && (n_in % 32 || !kz_type_compute_ok(fb))) fb = n_in % 32 ? KZ_T_F16 : KZ_T_Q8_0;
    if (c->log)
        fprintf(c->log, "note: %s: row length %lld is not a multiple of %u, written as %s instead of %s\n", name,
                (long long)n_in, ti->blck, tyname(fb), ti->name);
    L->n_fallback++;
    return fb;
}

/* a weight matrix [n_in, n_out] */
static void mat_s(tlist *L, const char *name, int64_t n_in, int64_t n_out, float scale) {
    add(L, name, 2, n_in, n_out, mat_type(L, name, n_in), K_MAT);
    if (!L->oom) L->t[L->n - 1].scale = scale;
}
static void mat(tlist *L, const char *name, int64_t n_in, int64_t n_out) { mat_s(L, name, n_in, n_out, 1.0f); }

/* rows [key_dim, 2 key_dim) of the last tensor follow rows [0, key_dim) */
static void tie(tlist *L, int64_t key_dim) {
    if (L->oom) return;
    tspec *t = &L->t[L->n - 1];
    t->tie_lo = key_dim;
    t->tie_hi = 2 * key_dim;
    t->tie_off = key_dim;
    t->tie_rho = TIE_RHO;
}

static void vec(tlist *L, const char *name, int64_t n, int kind) { add(L, name, 1, n, 1, KZ_T_F32, kind); }

static void build_tensors(tlist *L, const kz_mkmodel_cfg *c, int n_vocab) {
    const int q35 = !strcmp(c->arch, "qwen35");
    const int64_t d = c->n_embd, hd = c->head_dim;
    char nm[64];
#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
    mat(L, "token_embd.weight", d, n_vocab);
    const int n_blk = c->n_layer + (q35 ? c->n_nextn : 0);
    /* projections back into the residual stream get std / sqrt(2 * n_layer) (GPT-2 style), so
     * the stream grows slowly and the random network is well conditioned (small rounding
     * differences, e.g. f16 vs f32 activations, are not amplified from layer to layer) */
    const float rs = 1.0f / sqrtf(2.0f * (float)c->n_layer);
    for (int il = 0; il < n_blk; il++) {
        vec(L, NM("blk.%d.attn_norm.weight", il), d, K_NORM);
        int attn = !q35 || il >= c->n_layer || (il + 1) % c->full_attn_interval == 0;
        if (!q35) {
            mat(L, NM("blk.%d.attn_q.weight", il), d, (int64_t)c->n_head * hd);
            mat(L, NM("blk.%d.attn_k.weight", il), d, (int64_t)c->n_head_kv * hd);
            mat(L, NM("blk.%d.attn_v.weight", il), d, (int64_t)c->n_head_kv * hd);
            mat_s(L, NM("blk.%d.attn_output.weight", il), (int64_t)c->n_head * hd, d, rs);
            vec(L, NM("blk.%d.attn_q_norm.weight", il), hd, K_NORM);
            vec(L, NM("blk.%d.attn_k_norm.weight", il), hd, K_NORM);
            vec(L, NM("blk.%d.ffn_norm.weight", il), d, K_NORM);
        } else if (attn) {
            /* q_proj carries [query | output gate] per head: 2 * n_head * head_dim rows */
            mat(L, NM("blk.%d.attn_q.weight", il), d, 2 * (int64_t)c->n_head * hd);
            mat(L, NM("blk.%d.attn_k.weight", il), d, (int64_t)c->n_head_kv * hd);
            mat(L, NM("blk.%d.attn_v.weight", il), d, (int64_t)c->n_head_kv * hd);
            mat_s(L, NM("blk.%d.attn_output.weight", il), (int64_t)c->n_head * hd, d, rs);
            vec(L, NM("blk.%d.attn_q_norm.weight", il), hd, K_NORM);
            vec(L, NM("blk.%d.attn_k_norm.weight", il), hd, K_NORM);
        } else {
            const int64_t key_dim = (int64_t)c->ssm_n_group * c->ssm_d_state;
            const int64_t conv_dim = 2 * key_dim + c->ssm_d_inner;
            const int64_t hv = c->ssm_dt_rank, v_dim = c->ssm_d_inner / c->ssm_dt_rank;
            /* k channels correlated with the q channels of the same head (projection rows and
             * conv taps): with independent random q and k, q.k of unit vectors is ~0 and the
             * per-head normalised GDN output ~ sign(q.k) flips under tiny perturbations; a
             * clear q.k keeps the random network well conditioned (trained ones are, too) */
            mat(L, NM("blk.%d.attn_qkv.weight", il), d, conv_dim);
            tie(L, key_dim);
            mat(L, NM("blk.%d.attn_gate.weight", il), d, c->ssm_d_inner);
            add(L, NM("blk.%d.ssm_conv1d.weight", il), 2, c->ssm_d_conv, conv_dim, KZ_T_F32, K_CONV);
            tie(L, key_dim);
            vec(L, NM("blk.%d.ssm_dt.bias", il), hv, K_DT_BIAS);
            vec(L, NM("blk.%d.ssm_a", il), hv, K_SSM_A);
            /* F32 as the converter writes them; llama-quantize's Q4_K_M quantizes them too */
            NM("blk.%d.ssm_beta.weight", il);
            add(L, nm, 2, d, hv, c->mix ? mat_type(L, nm, d) : KZ_T_F32, K_MAT_F32);
            NM("blk.%d.ssm_alpha.weight", il);
            add(L, nm, 2, d, hv, c->mix ? mat_type(L, nm, d) : KZ_T_F32, K_MAT_F32);
            vec(L, NM("blk.%d.ssm_norm.weight", il), v_dim, K_NORM);
            mat_s(L, NM("blk.%d.ssm_out.weight", il), c->ssm_d_inner, d, rs);
        }
        if (q35) vec(L, NM("blk.%d.post_attention_norm.weight", il), d, K_NORM);
        mat(L, NM("blk.%d.ffn_gate.weight", il), d, c->n_ff);
        mat(L, NM("blk.%d.ffn_up.weight", il), d, c->n_ff);
        mat_s(L, NM("blk.%d.ffn_down.weight", il), c->n_ff, d, rs);
        if (q35 && il >= c->n_layer) { /* MTP block extras (never run by a plain forward pass) */
            mat(L, NM("blk.%d.nextn.eh_proj.weight", il), 2 * d, d);
            vec(L, NM("blk.%d.nextn.enorm.weight", il), d, K_NORM);
            vec(L, NM("blk.%d.nextn.hnorm.weight", il), d, K_NORM);
            vec(L, NM("blk.%d.nextn.shared_head_norm.weight", il), d, K_NORM);
        }
    }
    vec(L, "output_norm.weight", d, K_NORM);
    if (!c->tied) mat(L, "output.weight", d, n_vocab);
#undef NM
}

/* ---------------- random values ---------------- */

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* approximately standard normal: sum of four 16-bit uniforms (Irwin-Hall, |z| <= 3.46) */
static inline float gauss(uint64_t *s) {
    uint64_t r = splitmix(s);
    uint32_t u = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) + (uint32_t)((r >> 32) & 0xffff) +
                 (uint32_t)(r >> 48);
    return ((float)u - 131070.0f) * (1.0f / 37837.23f);
}
static inline float unif(uint64_t *s) { return (float)(splitmix(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }

static uint64_t name_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t s = seed ^ h;
    return splitmix(&s);
}

static uint64_t row_stream(uint64_t tseed, int64_t row) {
    uint64_t s = tseed ^ ((uint64_t)row * 0xD1B54A32D192ED03ull);
    splitmix(&s);
    return s;
}

/* x = sd * N(0,1), or for a tied row sd * (rho * base row + sqrt(1 - rho^2) * own noise) */
static void gauss_row(const tspec *t, uint64_t tseed, int64_t row, float sd, float *x) {
    const int64_t n = t->ne[0];
    uint64_t s = row_stream(tseed, row);
    if (row >= t->tie_lo && row < t->tie_hi) {
        uint64_t sb = row_stream(tseed, row - t->tie_off);
        const float a = t->tie_rho, b = sqrtf(1.0f - t->tie_rho * t->tie_rho);
        for (int64_t i = 0; i < n; i++) {
            float base = gauss(&sb);
            x[i] = (a * base + b * gauss(&s)) * sd;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = gauss(&s) * sd;
}

static void gen_row(const tspec *t, uint64_t tseed, int64_t row, float *x) {
    uint64_t s = row_stream(tseed, row);
    const int64_t n = t->ne[0];
    switch (t->kind) {
    case K_MAT:
    case K_MAT_F32: /* N(0, 1/n_in): unit-variance outputs for unit-RMS inputs (times scale) */
        gauss_row(t, tseed, row, t->scale / sqrtf((float)n), x);
        break;
    case K_NORM: /* multipliers near 1 (the GGUF stores the effective weight) */
        for (int64_t i = 0; i < n; i++) x[i] = 1.0f + 0.1f * gauss(&s);
        break;
    case K_SSM_A: /* -exp(A_log), A_log ~ U(-1, 1): decays in (-2.72, -0.37) */
        for (int64_t i = 0; i < n; i++) x[i] = -expf(unif(&s));
        break;
    case K_DT_BIAS:
        for (int64_t i = 0; i < n; i++) x[i] = 0.25f * gauss(&s);
        break;
    case K_CONV: /* small causal-conv taps */
        gauss_row(t, tseed, row, 0.5f / sqrtf((float)n), x);
        break;
    }
}

typedef struct {
    const tspec *t;
    uint64_t tseed;
    int64_t row0, nrows;
    uint8_t *out;
    size_t rb;
    float *scratch; /* one row per thread */
} gen_task;

static void gen_fn(void *arg, int ith, int nth) {
    const gen_task *g = arg;
    long lo, hi;
    kz_split((long)g->nrows, ith, nth, &lo, &hi);
    float *x = g->scratch + (size_t)ith * (size_t)g->t->ne[0];
    for (long r = lo; r < hi; r++) {
        gen_row(g->t, g->tseed, g->row0 + r, x);
        kz_quant_row(g->t->type, x, g->out + (size_t)r * g->rb, g->t->ne[0]);
    }
}

/* ---------------- vocab ---------------- */

typedef struct {
    const char **strs;
    uint64_t *lens;
    int32_t *types;
    float *scores;  /* only when the source has scores */
    char *buf;      /* storage for generated strings */
    size_t off;     /* bytes of buf used */
    int n;
} vocab_arrays;

static void vocab_free(vocab_arrays *v) {
    free(v->strs);
    free(v->lens);
    free(v->types);
    free(v->scores);
    free(v->buf);
    memset(v, 0, sizeof *v);
}

/* GPT-2 byte-to-unicode: byte b -> code point; ids 0..255 follow GPT-2's order (printable
 * bytes first, then the remaining ones mapped to U+0100..) */
static int byte_order(int *bs, int *cs) {
    int n = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) { bs[n] = b; cs[n] = b; n++; }
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) { bs[n] = b; cs[n] = 256 + extra++; n++; }
    return n;
}

static int utf8_put(char *p, int cp) {
    if (cp < 0x80) { p[0] = (char)cp; return 1; }
    p[0] = (char)(0xC0 | (cp >> 6));
    p[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* code points here are < 0x800 */
}

#define N_SPECIAL 5
static const char *const k_special[N_SPECIAL] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>" };

/* allocate arrays for n_vocab tokens; synthetic: fill the 256 byte tokens + the specials */
static int vocab_build(vocab_arrays *v, int n_vocab, int synthetic, char *err, size_t errlen) {
    v->n = n_vocab;
    v->strs = calloc((size_t)n_vocab, sizeof *v->strs);
    v->lens = calloc((size_t)n_vocab, sizeof *v->lens);
    v->types = calloc((size_t)n_vocab, sizeof *v->types);
    v->buf = malloc((size_t)n_vocab * 16 + 4096);
    if (!v->strs || !v->lens || !v->types || !v->buf) {
        kz_seterr(err, errlen, "out of memory for a vocab of %d tokens", n_vocab);
        return -1;
    }
    size_t off = 0;
    if (synthetic) {
        int bs[256], cs[256];
        byte_order(bs, cs);
        for (int i = 0; i < 256; i++) {
            v->strs[i] = v->buf + off;
            v->lens[i] = (uint64_t)utf8_put(v->buf + off, cs[i]);
            off += v->lens[i];
            v->types[i] = 1; /* NORMAL */
        }
        for (int k = 0; k < N_SPECIAL; k++) {
            v->strs[256 + k] = k_special[k];
            v->lens[256 + k] = strlen(k_special[k]);
            v->types[256 + k] = k < 3 ? 3 : 4; /* <|...|> CONTROL, <think> USER_DEFINED */
        }
    }
    v->off = off;
    return 0;
}

/* tokens [from, n) become "[PAD<i>]" of type UNUSED (as the converter pads) */
static void vocab_pad(vocab_arrays *v, int from) {
    for (int i = from; i < v->n; i++) {
        int len = snprintf(v->buf + v->off, 16, "[PAD%d]", i);
        v->strs[i] = v->buf + v->off;
        v->lens[i] = (uint64_t)len;
        v->off += (size_t)len;
        v->types[i] = 5; /* UNUSED */
        if (v->scores) v->scores[i] = -1000.0f;
    }
}

static int write_vocab_synthetic(kz_gguf_writer *w, const kz_mkmodel_cfg *c, int n_vocab, char *err, size_t errlen) {
    vocab_arrays v = { 0 };
    if (vocab_build(&v, n_vocab, 1, err, errlen)) { vocab_free(&v); return -1; }
    vocab_pad(&v, 256 + N_SPECIAL);
    const int q35 = !strcmp(c->arch, "qwen35");
    const uint32_t eot = 256, im_end = 258;
    int rc = 0;
    rc |= kz_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= kz_gguf_w_str(w, "tokenizer.ggml.pre", q35 ? "qwen35" : "qwen2");
    rc |= kz_gguf_w_arr_str(w, "tokenizer.ggml.tokens", v.strs, v.lens, (uint64_t)n_vocab);
    rc |= kz_gguf_w_arr(w, "tokenizer.ggml.token_type", KZ_GGUF_I32, v.types, (uint64_t)n_vocab);
    rc |= kz_gguf_w_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0);
    rc |= kz_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", im_end);
    rc |= kz_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", eot);
    if (!q35) rc |= kz_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", eot); /* Qwen3 files carry one, unused */
    rc |= kz_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    vocab_free(&v);
    if (rc) kz_seterr(err, errlen, "writing the synthetic vocab: %s", kz_gguf_writer_error(w));
    return rc ? -1 : 0;
}

/* copy every tokenizer.* kv of the vocab file; tokens / token_type / scores padded to n_vocab */
static int write_vocab_file(kz_gguf_writer *w, const kz_gguf *vf, const char *path, int n_vocab, char *err,
                            size_t errlen) {
    const kz_gguf_kv *tok = kz_gguf_get_kv(vf, "tokenizer.ggml.tokens");
    const int n_file = (int)tok->n;
    vocab_arrays v = { 0 };
    const kz_gguf_kv *sc = kz_gguf_get_kv(vf, "tokenizer.ggml.scores");
    const kz_gguf_kv *tt = kz_gguf_get_kv(vf, "tokenizer.ggml.token_type");
    int pad = n_vocab > n_file;
    if (pad) {
        if (vocab_build(&v, n_vocab, 0, err, errlen)) { vocab_free(&v); return -1; }
        for (int i = 0; i < n_file; i++) {
            v.strs[i] = tok->strs[i].ptr;
            v.lens[i] = tok->strs[i].len;
            v.types[i] = 1;
        }
        if (tt) {
            if (tt->type != KZ_GGUF_ARR || tt->n != (uint64_t)n_file) {
                kz_seterr(err, errlen, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %d", path,
                          (unsigned long long)tt->n, n_file);
                vocab_free(&v);
                return -1;
            }
            for (int i = 0; i < n_file; i++) {
                int64_t t;
                if (kz_gguf_arr_i64(tt, (uint64_t)i, &t)) {
                    kz_seterr(err, errlen, "%s: tokenizer.ggml.token_type is not an integer array", path);
                    vocab_free(&v);
                    return -1;
                }
                v.types[i] = (int32_t)t;
            }
        }
        if (sc) {
            if (sc->type != KZ_GGUF_ARR || sc->n != (uint64_t)n_file || !(v.scores = calloc((size_t)n_vocab, sizeof(float)))) {
                kz_seterr(err, errlen, "%s: tokenizer.ggml.scores is not a float array of %d entries", path, n_file);
                vocab_free(&v);
                return -1;
            }
            for (int i = 0; i < n_file; i++) {
                double s;
                if (kz_gguf_arr_f64(sc, (uint64_t)i, &s)) {
                    kz_seterr(err, errlen, "%s: tokenizer.ggml.scores is not a float array", path);
                    vocab_free(&v);
                    return -1;
                }
                v.scores[i] = (float)s;
            }
        }
        vocab_pad(&v, n_file);
    }
    int rc = 0;
    for (uint64_t i = 0; i < vf->n_kv && !rc; i++) {
        const kz_gguf_kv *kv = &vf->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        if (pad && !strcmp(kv->key, "tokenizer.ggml.tokens"))
            rc = kz_gguf_w_arr_str(w, kv->key, v.strs, v.lens, (uint64_t)n_vocab);
        else if (pad && kv == tt)
            rc = kz_gguf_w_arr(w, kv->key, KZ_GGUF_I32, v.types, (uint64_t)n_vocab);
        else if (pad && kv == sc)
            rc = kz_gguf_w_arr(w, kv->key, KZ_GGUF_F32, v.scores, (uint64_t)n_vocab);
        else
            rc = kz_gguf_w_copy_kv(w, vf, kv);
    }
    /* a padded vocab needs types for the padding even if the file had none */
    if (!rc && pad && !tt) rc = kz_gguf_w_arr(w, "tokenizer.ggml.token_type", KZ_GGUF_I32, v.types, (uint64_t)n_vocab);
    vocab_free(&v);
    if (rc) kz_seterr(err, errlen, "copying the vocab of %s: %s", path, kz_gguf_writer_error(w));
    return rc ? -1 : 0;
}

/* ---------------- the writer ---------------- */

static void rope_sections(const kz_mkmodel_cfg *c, int32_t out[4]) {
    int s = c->rope_sections[0] + c->rope_sections[1] + c->rope_sections[2] + c->rope_sections[3];
    if (s) {
        for (int i = 0; i < 4; i++) out[i] = c->rope_sections[i];
        return;
    }
    /* the converter default [11, 11, 10, 0] covers n_rot/2 = 32 rotary pairs; scale to n_rot/2 */
    int total = c->n_rot / 2;
    out[0] = out[1] = (int32_t)((11 * total + 16) / 32);
    out[2] = total - 2 * out[0];
    if (out[2] < 0) { out[0] = out[1] = total / 2; out[2] = total - 2 * out[0]; }
    out[3] = 0;
}

static int write_kvs(kz_gguf_writer *w, const kz_mkmodel_cfg *c) {
    const int q35 = !strcmp(c->arch, "qwen35");
    char k[96];
    const char *a = c->arch;
#define K(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    int rc = 0;
    rc |= kz_gguf_w_str(w, "general.architecture", a);
    rc |= kz_gguf_w_str(w, "general.type", "model");
    rc |= kz_gguf_w_str(w, "general.name", c->name[0] ? c->name : "kazeia-random");
    rc |= kz_gguf_w_u32(w, K("block_count"), (uint32_t)(c->n_layer + (q35 ? c->n_nextn : 0)));
    if (q35 && c->n_nextn) rc |= kz_gguf_w_u32(w, K("nextn_predict_layers"), (uint32_t)c->n_nextn);
    rc |= kz_gguf_w_u32(w, K("context_length"), (uint32_t)c->n_ctx_train);
    rc |= kz_gguf_w_u32(w, K("embedding_length"), (uint32_t)c->n_embd);
    rc |= kz_gguf_w_u32(w, K("feed_forward_length"), (uint32_t)c->n_ff);
    rc |= kz_gguf_w_u32(w, K("attention.head_count"), (uint32_t)c->n_head);
    rc |= kz_gguf_w_u32(w, K("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    if (q35) {
        int32_t sec[4];
        rope_sections(c, sec);
        rc |= kz_gguf_w_arr(w, K("rope.dimension_sections"), KZ_GGUF_I32, sec, 4);
    }
    rc |= kz_gguf_w_f32(w, K("rope.freq_base"), c->rope_base);
    rc |= kz_gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), c->rms_eps);
    rc |= kz_gguf_w_u32(w, K("attention.key_length"), (uint32_t)c->head_dim);
    rc |= kz_gguf_w_u32(w, K("attention.value_length"), (uint32_t)c->head_dim);
    rc |= kz_gguf_w_u32(w, "general.file_type", c->mix ? 15u /* MOSTLY_Q4_K_M */ : (uint32_t)kz_mkmodel_file_type(c->wtype));
    if (q35) {
        rc |= kz_gguf_w_u32(w, K("ssm.conv_kernel"), (uint32_t)c->ssm_d_conv);
        rc |= kz_gguf_w_u32(w, K("ssm.state_size"), (uint32_t)c->ssm_d_state);
        rc |= kz_gguf_w_u32(w, K("ssm.group_count"), (uint32_t)c->ssm_n_group);
        rc |= kz_gguf_w_u32(w, K("ssm.time_step_rank"), (uint32_t)c->ssm_dt_rank);
        rc |= kz_gguf_w_u32(w, K("ssm.inner_size"), (uint32_t)c->ssm_d_inner);
        rc |= kz_gguf_w_u32(w, K("full_attention_interval"), (uint32_t)c->full_attn_interval);
        rc |= kz_gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)c->n_rot);
    } else if (c->n_rot != c->head_dim) {
        /* the qwen3 converter writes no rope.dimension_count (llama.cpp then uses head_dim) */
        rc |= kz_gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)c->n_rot);
    }
    rc |= kz_gguf_w_u32(w, "general.quantization_version", 2);
#undef K
    return rc ? -1 : 0;
}

static size_t type_row_bytes(uint32_t type, int64_t n) {
    const kz_type_info *ti = kz_type_get(type);
    return ti && n % ti->blck == 0 ? (size_t)(n / ti->blck) * ti->bytes : 0;
}

int kz_mkmodel_write(const kz_mkmodel_cfg *cfg, const char *path, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!cfg || !path || !path[0]) {
        kz_seterr(err, errlen, "kz_mkmodel_write: no config or output path");
        return -1;
    }
    if (check_cfg(cfg, err, errlen)) return -1;

    kz_gguf *vf = NULL;
    int n_vocab = cfg->n_vocab;
    if (cfg->vocab_path) {
        char e2[256];
        vf = kz_gguf_open(cfg->vocab_path, e2, sizeof e2);
        if (!vf) {
            kz_seterr(err, errlen, "vocab file: %s", e2);
            return -1;
        }
        const kz_gguf_kv *tok = kz_gguf_get_kv(vf, "tokenizer.ggml.tokens");
        if (!tok || tok->type != KZ_GGUF_ARR || tok->arr_type != KZ_GGUF_STR || !tok->strs || tok->n == 0 ||
            tok->n > (1u << 24)) {
            kz_seterr(err, errlen, "%s: no usable tokenizer.ggml.tokens string array (make it with tools/convert_tokenizer.py)",
                      cfg->vocab_path);
            kz_gguf_close(vf);
            return -1;
        }
        if (n_vocab == 0) n_vocab = (int)tok->n;
        if ((uint64_t)n_vocab < tok->n) {
            kz_seterr(err, errlen, "%s has %llu tokens, more than n_vocab = %d", cfg->vocab_path, (unsigned long long)tok->n,
                      n_vocab);
            kz_gguf_close(vf);
            return -1;
        }
    } else {
        if (n_vocab == 0) n_vocab = 512;
        if (n_vocab < 256 + N_SPECIAL) {
            kz_seterr(err, errlen, "n_vocab = %d is too small for the synthetic vocab (needs >= %d)", n_vocab, 256 + N_SPECIAL);
            return -1;
        }
    }

    tlist L = { .cfg = cfg };
    build_tensors(&L, cfg, n_vocab);
    kz_gguf_writer *w = kz_gguf_writer_new(0);
    kz_pool *pool = NULL;
    float *scratch = NULL;
    uint8_t *out = NULL;
    int rc = -1;
    if (L.oom || !w) {
        kz_seterr(err, errlen, "out of memory");
        goto done;
    }
    if (write_kvs(w, cfg)) {
        kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
        goto done;
    }
    if (vf ? write_vocab_file(w, vf, cfg->vocab_path, n_vocab, err, errlen)
           : write_vocab_synthetic(w, cfg, n_vocab, err, errlen))
        goto done;
    for (int i = 0; i < L.n; i++)
        if (kz_gguf_w_tensor_info(w, L.t[i].name, L.t[i].n_dims, L.t[i].ne, L.t[i].type)) {
            kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
            goto done;
        }
    if (kz_gguf_writer_begin(w, path)) {
        kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
        goto done;
    }

    int nth = cfg->n_threads > 0 ? cfg->n_threads : kz_num_cpus();
    if (nth > 8 && cfg->n_threads <= 0) nth = 8;
    pool = kz_pool_new(nth);
    if (!pool) {
        kz_seterr(err, errlen, "cannot start %d threads", nth);
        goto done;
    }
    nth = kz_pool_size(pool);
    /* chunk = about 1M elements: a few MB of buffers whatever the model size */
    const int64_t chunk_elems = 1 << 20;
    int64_t max_n = 1;
    size_t max_out = 1;
    for (int i = 0; i < L.n; i++) {
        const tspec *t = &L.t[i];
        if (t->ne[0] > max_n) max_n = t->ne[0];
        int64_t rows = chunk_elems / t->ne[0];
        if (rows < 1) rows = 1;
        if (rows > t->ne[1]) rows = t->ne[1];
        size_t ob = (size_t)rows * type_row_bytes(t->type, t->ne[0]);
        if (ob > max_out) max_out = ob;
    }
    scratch = malloc((size_t)nth * (size_t)max_n * sizeof(float));
    out = malloc(max_out);
    if (!scratch || !out) {
        kz_seterr(err, errlen, "out of memory for %zu-byte row buffers", max_out);
        goto done;
    }
    for (int i = 0; i < L.n; i++) {
        const tspec *t = &L.t[i];
        gen_task g = { .t = t, .tseed = name_seed(cfg->seed, t->name), .out = out, .scratch = scratch,
                       .rb = type_row_bytes(t->type, t->ne[0]) };
        int64_t rows = chunk_elems / t->ne[0];
        if (rows < 1) rows = 1;
        for (int64_t r0 = 0; r0 < t->ne[1]; r0 += rows) {
            g.row0 = r0;
            g.nrows = t->ne[1] - r0 < rows ? t->ne[1] - r0 : rows;
            kz_pool_run(pool, gen_fn, &g);
            if (kz_gguf_writer_write_part(w, out, (size_t)g.nrows * g.rb)) {
                kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
                goto done;
            }
        }
        if (kz_gguf_writer_end_tensor(w)) {
            kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
            goto done;
        }
    }
    if (kz_gguf_writer_finish(w)) {
        kz_seterr(err, errlen, "%s", kz_gguf_writer_error(w));
        goto done;
    }
    if (cfg->log && L.n_fallback)
        fprintf(cfg->log, "note: %d matri%s written in a fallback type (row length not a multiple of the block)\n", L.n_fallback,
                L.n_fallback == 1 ? "x" : "ces");
    rc = 0;
done:
    kz_gguf_writer_free(w); /* removes the partial file on failure */
    kz_pool_free(pool);
    free(scratch);
    free(out);
    free(L.t);
    if (vf) kz_gguf_close(vf);
    return rc;
}
