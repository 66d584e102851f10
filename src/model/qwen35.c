/* Qwen3.5 (general.architecture "qwen35"): Gated DeltaNet layers interleaved with gated
 * full-attention layers (docs/qwen35.md). Its hparams beyond the common ones, and the tensors
 * of its two layer kinds. */
#include <stdio.h>
#include <string.h>
#include "model/loader.h"
#include "sys/err.h"

static int hparams(kz_ld *c, kz_hparams *hp, unsigned char *rec) {
    const int BIG = 1 << 20;
    if (kz_ld_int(c, "ssm.conv_kernel", &hp->ssm_d_conv, -1, 1, 64)) return -1;
    if (kz_ld_int(c, "ssm.state_size", &hp->ssm_d_state, -1, 1, 1 << 14)) return -1;
    if (kz_ld_int(c, "ssm.group_count", &hp->ssm_n_k_heads, -1, 1, 4096)) return -1;
    if (kz_ld_int(c, "ssm.time_step_rank", &hp->ssm_n_v_heads, -1, 1, 4096)) return -1;
    if (kz_ld_int(c, "ssm.inner_size", &hp->ssm_d_inner, -1, 1, BIG)) return -1;
    if (hp->ssm_d_inner % hp->ssm_n_v_heads) {
        kz_seterr(c->err, c->errlen, "%s.ssm.inner_size %d is not a multiple of ssm.time_step_rank %d",
                  c->arch, hp->ssm_d_inner, hp->ssm_n_v_heads);
        return -1;
    }
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads) {
        kz_seterr(c->err, c->errlen, "%s.ssm.time_step_rank %d is not a multiple of ssm.group_count %d",
                  c->arch, hp->ssm_n_v_heads, hp->ssm_n_k_heads);
        return -1;
    }
    hp->ssm_head_v_dim = hp->ssm_d_inner / hp->ssm_n_v_heads;
    if ((long)hp->ssm_n_k_heads * hp->ssm_d_state > BIG) {
        kz_seterr(c->err, c->errlen, "%s.ssm key dim %d x %d is too large", c->arch,
                  hp->ssm_n_k_heads, hp->ssm_d_state);
        return -1;
    }
    hp->ssm_key_dim = hp->ssm_n_k_heads * hp->ssm_d_state;
    hp->ssm_conv_dim = 2 * hp->ssm_key_dim + hp->ssm_d_inner;
    /* IMROPE sections (text positions make it plain NEOX except an unused 4th section) */
    char key[128];
    kz_ld_key(c, "rope.dimension_sections", key, sizeof key);
    const kz_gguf_kv *kv = kz_gguf_get_kv(c->g, key);
    if (kv) {
        if (kv->type != KZ_GGUF_ARR || kv->n < 1) {
            kz_seterr(c->err, c->errlen, "metadata key '%s' must be an integer array", key);
            return -1;
        }
        for (uint64_t i = 0; i < 4 && i < kv->n; i++) {
            int64_t v;
            if (kz_gguf_arr_i64(kv, i, &v) != 0 || v < 0 || v > 1 << 16) {
                kz_seterr(c->err, c->errlen, "metadata key '%s' has a bad entry %llu", key,
                          (unsigned long long)i);
                return -1;
            }
            hp->rope_sections[i] = (int)v;
        }
    }
    int r = kz_ld_recurrent_layers(c, hp->n_layer, rec);
    if (r < 0) return -1;
    if (r == 0) {
        if (kz_ld_int(c, "full_attention_interval", &hp->full_attn_interval, 4, 1, 1 << 20)) return -1;
        for (int i = 0; i < hp->n_layer; i++) rec[i] = (i + 1) % hp->full_attn_interval != 0;
    }
    return 0;
}

static int layer(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly) {
    char nm[96];
    const int64_t d = hp->n_embd;
    if (kz_ld_vec(L, kz_ld_blk(nm, sizeof nm, il, "attn_norm.weight"), 1, d, 1, &ly->attn_norm)) return -1;
    if (kz_ld_vec(L, kz_ld_blk(nm, sizeof nm, il, "post_attention_norm.weight"), 1, d, 1, &ly->post_norm))
        return -1;
    if (!ly->is_gdn) {
        if (kz_ld_attention(L, hp, il, ly, 1)) return -1;
    } else {
#define TN(suffix) kz_ld_blk(nm, sizeof nm, il, suffix)
        const int64_t hv = hp->ssm_n_v_heads, vd = hp->ssm_d_inner;
        if (kz_ld_mat(L, TN("attn_qkv.weight"), d, hp->ssm_conv_dim, &ly->wqkv)) return -1;
        if (kz_ld_mat(L, TN("attn_gate.weight"), d, vd, &ly->wgate)) return -1;
        if (kz_ld_mat(L, TN("ssm_beta.weight"), d, hv, &ly->wbeta)) return -1;
        if (kz_ld_mat(L, TN("ssm_alpha.weight"), d, hv, &ly->walpha)) return -1;
        if (kz_ld_mat(L, TN("ssm_out.weight"), vd, d, &ly->wssm_out)) return -1;
        if (kz_ld_vec(L, TN("ssm_conv1d.weight"), 2, hp->ssm_d_conv, hp->ssm_conv_dim, &ly->conv1d)) return -1;
        if (kz_ld_vec(L, TN("ssm_dt.bias"), 1, hv, 1, &ly->dt_bias)) return -1;
        if (kz_ld_vec(L, TN("ssm_a"), 1, hv, 1, &ly->ssm_a)) return -1;
        if (kz_ld_vec(L, TN("ssm_norm.weight"), 1, hp->ssm_head_v_dim, 1, &ly->ssm_norm)) return -1;
#undef TN
    }
    return kz_ld_ffn(L, hp, il, ly);
}

int kz_ld_qwen35_mtp(kz_tload *L, const kz_model *m, int il, kz_mtp *mtp) {
    char nm[96];
    const kz_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
#define TN(suffix) kz_ld_blk(nm, sizeof nm, il, suffix)
    if (!kz_gguf_find_tensor(L->c->g, TN("nextn.eh_proj.weight"))) return 0;
    memset(mtp, 0, sizeof *mtp);
    if (kz_ld_mat(L, nm, 2 * d, d, &mtp->eh_proj)) return -1;
    if (kz_ld_vec(L, TN("nextn.enorm.weight"), 1, d, 1, &mtp->enorm)) return -1;
    if (kz_ld_vec(L, TN("nextn.hnorm.weight"), 1, d, 1, &mtp->hnorm)) return -1;
    /* optional parts fall back to the trunk's, as llama.cpp's graph does */
    mtp->head_norm = m->output_norm;
    if (kz_gguf_find_tensor(L->c->g, TN("nextn.shared_head_norm.weight")) &&
        kz_ld_vec(L, nm, 1, d, 1, &mtp->head_norm))
        return -1;
    mtp->embed = m->tok_embd;
    if (kz_gguf_find_tensor(L->c->g, TN("nextn.embed_tokens.weight")) &&
        kz_ld_mat(L, nm, d, hp->n_vocab, &mtp->embed))
        return -1;
    mtp->head = m->output;
    if (kz_gguf_find_tensor(L->c->g, TN("nextn.shared_head_head.weight")) &&
        kz_ld_mat(L, nm, d, hp->n_vocab, &mtp->head))
        return -1;
#undef TN
    mtp->ly.is_gdn = 0;
    mtp->ly.state_idx = hp->n_attn_layers;
    return layer(L, hp, il, &mtp->ly) ? -1 : 1;
}

const kz_arch_rules kz_arch_qwen35 = {"qwen35", KZ_ARCH_QWEN35, hparams, layer};
