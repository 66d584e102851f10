/* Qwen3 dense (general.architecture "qwen3"): every layer full attention with q/k RMSNorm,
 * GQA and NEOX rope, then a SwiGLU FFN (docs/qwen35.md). No keys beyond the common ones. */
#include "model/loader.h"

static int hparams(kz_ld *c, kz_hparams *hp, unsigned char *rec) {
    (void)c, (void)hp, (void)rec; /* all layers attention: rec stays 0 */
    return 0;
}

static int layer(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly) {
    char nm[96];
    const int64_t d = hp->n_embd;
    if (kz_ld_vec(L, kz_ld_blk(nm, sizeof nm, il, "attn_norm.weight"), 1, d, 1, &ly->attn_norm)) return -1;
    if (kz_ld_vec(L, kz_ld_blk(nm, sizeof nm, il, "ffn_norm.weight"), 1, d, 1, &ly->post_norm)) return -1;
    if (kz_ld_attention(L, hp, il, ly, 0)) return -1;
    return kz_ld_ffn(L, hp, il, ly);
}

const kz_arch_rules kz_arch_qwen3 = {"qwen3", KZ_ARCH_QWEN3, hparams, layer};
