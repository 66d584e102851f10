/* Internal to src/model: the checked reads of the loader, and the per-architecture load rules
 * (qwen35.c, qwen3.c) that model.c picks by general.architecture. Every function returns 0 or
 * -1 with a message in the kz_ld's error buffer. */
#ifndef KZ_LOADER_H
#define KZ_LOADER_H
#include <stddef.h>
#include <stdint.h>
#include "model/model.h"

typedef struct {
    const kz_gguf *g;
    const char *arch; /* the key prefix, "qwen35" */
    char *err;
    size_t errlen;
} kz_ld;

/* "<arch>.<suffix>" */
void kz_ld_key(const kz_ld *c, const char *suffix, char *key, size_t n);
/* required (def < 0) or optional (default def) integer key in [lo, hi] */
int kz_ld_int(kz_ld *c, const char *suffix, int *out, long def, long lo, long hi);
int kz_ld_float(kz_ld *c, const char *suffix, float *out, int required, float def, float lo, float hi);
/* '<arch>.attention.recurrent_layers' into rec[n_layer]: 1 if present, 0 if absent, -1 on error */
int kz_ld_recurrent_layers(kz_ld *c, int n_layer, unsigned char *rec);

/* 1-D tensors stored as F16/BF16 (or unaligned F32) are converted once all are known */
typedef struct {
    const kz_tensor_info *ti;
    const float **dst;
} kz_pending_vec;
typedef struct {
    kz_ld *c;
    kz_pending_vec *pend;
    int n_pend, cap_pend;
} kz_tload;

/* a weight matrix of exactly n_out rows of n_in elements, in a type the engine computes with */
int kz_ld_mat(kz_tload *L, const char *name, int64_t n_in, int64_t n_out, kz_wmat *w);
/* a small f32 tensor ([ne0] or [ne0, ne1]): zero-copy if stored as aligned F32 */
int kz_ld_vec(kz_tload *L, const char *name, int nd, int64_t ne0, int64_t ne1, const float **dst);
int kz_ld_convert_pending(kz_model *m, kz_tload *L);
void kz_ld_fmt_shape(char *buf, size_t n, int nd, const int64_t *ne);
const char *kz_ld_type_name(uint32_t t); /* NULL for an unknown id */
/* "blk.<il>.<suffix>" in nm */
const char *kz_ld_blk(char *nm, size_t n, int il, const char *suffix);

/* What one architecture adds to the common hparams and how its layers' tensors are named. */
typedef struct {
    const char *name; /* general.architecture */
    kz_arch arch;
    /* the architecture's own keys, read after the common ones; sets rec[il] = 1 for a
     * recurrent (Gated DeltaNet) layer */
    int (*hparams)(kz_ld *c, kz_hparams *hp, unsigned char *rec);
    int (*layer)(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly);
} kz_arch_rules;
extern const kz_arch_rules kz_arch_qwen35, kz_arch_qwen3;

/* the attention tensors of both architectures (q_gate: Qwen3.5's attn_q holds a gate per head
 * beside the query, twice the rows) and the SwiGLU FFN */
int kz_ld_attention(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly, int q_gate);
int kz_ld_ffn(kz_tload *L, const kz_hparams *hp, int il, kz_layer *ly);
/* Qwen3.5's MTP block at blk.il (qwen35.c): 1 loaded, 0 absent (no nextn.eh_proj), -1 error */
int kz_ld_qwen35_mtp(kz_tload *L, const kz_model *m, int il, kz_mtp *mtp);
#endif
