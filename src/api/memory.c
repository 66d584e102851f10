/* Memory budget (include/kazeia.h, kz_memory_estimate): resident bytes of a model and a full
 * context predicted from shapes and parameters. The terms follow what the code allocates and
 * touches: model.c (file pages of every matrix a forward pass reads; the Q4_0 matrices it
 * repacks become anonymous copies and their file pages are dropped; an untied
 * embedding table is read one row per token), seq.c (kz_seq_plan_bytes: KV, GDN states,
 * scratch), api.c (history, logits, sampler, the system-prompt snapshot). docs/guard.md. */
#include <string.h>
#include <stdio.h>
#include "kazeia.h"
#include "forward/seq.h"
#include "matmul/matmul.h"
#include "model/model.h"
#include "model/types.h"
#include "sys/err.h"
#include "text/tokenizer.h"

#define PAGE 4096u
/* stack and TLS a worker thread touches: an allowance, not measured alone (< 0.1 % of the totals) */
#define THREAD_BYTES ((uint64_t)48 << 10)

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* bytes of the q4_0_16x4 copy of w (0 when it is not or would not be packed) and the file
 * bytes a forward pass still reads from the file */
static void mat_bytes(const kz_wmat *w, int pack, uint64_t *anon, uint64_t *file) {
    if (!w->data) return;
    int64_t np = w->q4_0_16x4 ? w->n_q4_0_16x4
               : pack && w->type == KZ_T_Q4_0 && w->n_out >= 16 ? w->n_out - w->n_out % 16 : 0;
    *anon += (uint64_t)(np / 16) * kz_q4_0_16x4_group_bytes(w->n_in);
    *file += round_up((uint64_t)(w->n_out - np) * w->row_bytes, PAGE);
}

static int is_matrix(const kz_model *m, const void *data) {
    if (data == m->tok_embd.data || data == m->output.data) return 1;
    for (int i = 0; i < m->hp.n_layer; i++) {
        const kz_layer *l = &m->layers[i];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++)
            if (ws[j]->data == data) return 1;
    }
    return 0;
}

/* pack: predict repacking (for a model loaded without it); a model that was packed says so itself */
static void model_terms(const kz_model *m, int pack, kz_memory_report *r) {
    const kz_gguf *g = m->gguf;
    uint64_t anon = 0, file = round_up(g->data_offset, PAGE), heap = 0;
    const int tied = m->output.data == m->tok_embd.data;
    if (m->repack_buf) pack = 0; /* the wmats carry their copies */
    /* the LM head reads the whole matrix every token; the embedding table one row per token */
    mat_bytes(&m->output, pack, &anon, &file);
    if (!tied) { /* rows only: not counted */ }
    for (int i = 0; i < m->hp.n_layer; i++) {
        const kz_layer *l = &m->layers[i];
        const kz_wmat *ws[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down, &l->wq, &l->wk, &l->wv, &l->wo,
                               &l->wqkv, &l->wgate, &l->wbeta, &l->walpha, &l->wssm_out};
        for (size_t j = 0; j < sizeof ws / sizeof *ws; j++) mat_bytes(ws[j], pack, &anon, &file);
    }
    /* small tensors (norms, conv, gates) of the layers evaluated; MTP blocks are never read */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        int blk;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= m->hp.n_layer) continue;
        if (is_matrix(m, t->data)) continue;
        file += t->nbytes;
        if (t->type == KZ_T_F16 || t->type == KZ_T_BF16) heap += t->nbytes * 2; /* f32 copies */
        heap += sizeof *t + strlen(t->name) + 1;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        heap += sizeof g->kv[i] + strlen(g->kv[i].key) + 1;
        if (g->kv[i].strs) heap += g->kv[i].n * sizeof(kz_str);
    }
    heap += kz_tok_mem_bytes(m->tok) + (uint64_t)m->hp.n_layer * sizeof(kz_layer) + sizeof *m;
    /* each span was rounded out to whole pages, so neighbours can count a page twice: the
     * resident pages of a file are at most its own (an unpacked tiny model went ~2 KB over) */
    if (file > round_up(g->size, PAGE)) file = round_up(g->size, PAGE);
    r->file_bytes = g->size;
    r->weights_file = file;
    r->weights_repacked = round_up(anon, PAGE);
    r->model_heap = heap;
    r->model_total = file + r->weights_repacked + heap;
}

static int context_terms(const kz_model *m, const kz_context_params *cp, kz_memory_report *r, char *err,
                         size_t errlen) {
    kz_context_params p = cp ? *cp : kz_context_default_params();
    /* the defaults kz_context_new resolves */
    int n_ctx = p.n_ctx > 0 ? p.n_ctx : (m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    int n_batch = p.n_batch > 0 ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    int n_threads = p.n_threads > 0 ? p.n_threads : m->n_threads;
    kz_seq_bytes b;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 ||
        kz_seq_plan_bytes(m, n_ctx, n_batch, n_threads, p.kv_type, &b) != 0) {
        kz_seterr(err, errlen, "kz_memory_estimate: bad context parameters (n_ctx %d, n_batch %d, n_threads %d)",
                  p.n_ctx, p.n_batch, p.n_threads);
        return -1;
    }
    const uint64_t nv = (uint64_t)m->hp.n_vocab;
    r->kv = b.kv;
    /* the state, and the copy a cancellable prefill keeps */
    r->gdn_state = 2 * round_up(b.gdn_state, PAGE);
    /* kz_generate keeps one image of the state after a system prompt: the GDN state (+ the
     * system prompt's KV rows, not counted) */
    r->checkpoints = b.gdn_state ? b.gdn_state + PAGE : 0;
    r->scratch = b.arena + b.mm_work + b.attn_cnt + (uint64_t)n_ctx * 4 + nv * 4 /* logits */ +
                 nv * (4 + 4 + 8 + 8) /* sampler */ + (uint64_t)n_threads * THREAD_BYTES;
    r->context_total = r->kv + r->gdn_state + r->checkpoints + r->scratch;
    r->chat_checkpoint = b.gdn_state + (uint64_t)n_ctx * 4; /* chat_api.c ck_take: state + tokens */
    return 0;
}

int kz_memory_estimate_model(const kz_model *m, const kz_context_params *cp, kz_memory_report *out, char *err,
                             size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!m || !out) { kz_seterr(err, errlen, "kz_memory_estimate_model: model or report is NULL"); return -1; }
    memset(out, 0, sizeof *out);
    model_terms(m, 0, out);
    if (context_terms(m, cp, out, err, errlen)) return -1;
    out->total = out->model_total + out->context_total;
    return 0;
}

int kz_memory_estimate(const char *path, const kz_model_params *mp, const kz_context_params *cp,
                       kz_memory_report *out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) { kz_seterr(err, errlen, "kz_memory_estimate: report is NULL"); return -1; }
    memset(out, 0, sizeof *out);
    kz_model_params p = mp ? *mp : kz_model_default_params();
    const int pack = p.repack_weights && kz_q4_0_16x4_supported();
    p.repack_weights = 0; /* the header and shapes only: no weight is read */
    kz_model *m = kz_model_load(path, &p, err, errlen);
    if (!m) return -1;
    model_terms(m, pack, out);
    if (pack) kz_model_plan_packed(m); /* the work area of the packed model */
    int r = context_terms(m, cp, out, err, errlen);
    if (!r) out->total = out->model_total + out->context_total;
    kz_model_free(m);
    return r;
}
