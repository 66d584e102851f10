/* Measuring a model on text, the way llama.cpp's tools do so that numbers compare:
 * perplexity over windows (tools/perplexity), the KL divergence of a model against a reference
 * model's saved log-probabilities (perplexity --kl-divergence, same file format), and the
 * importance matrix collected from the forward pass (tools/imatrix). The commands that print
 * them are cli/cmd_perplexity.c and cli/cmd_imatrix.c. */
#ifndef KZ_EVAL_EVAL_H
#define KZ_EVAL_EVAL_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "forward/seq.h"
#include "model/imatrix.h"
#include "model/model.h"

/* ---- text -> tokens, windows ---- */

/* the whole file (NUL-terminated, *len bytes without it), or NULL (err) */
char *kz_eval_read_text(const char *path, size_t *len, char *err, size_t errlen);
/* the BOS id llama.cpp puts at the start of each window for this vocabulary, or -1 for none
 * (tokenizer.ggml.add_bos_token; absent = none, llama.cpp's default for the Qwen vocabularies);
 * -2 (err) when the key asks for a BOS the file does not name */
int32_t kz_eval_bos(const kz_model *m, char *err, size_t errlen);

/* Tokens of a whole text as llama-perplexity takes them: the vocabulary's BOS first when its
 * tokenizer.ggml.add_bos_token is true (special-token texts are not parsed). *bos gets the BOS id
 * when one is added, else -1. Returns the count (tokens malloc'ed into *out), or -1 (err). */
int kz_eval_tokenize(const kz_model *m, const char *text, size_t len, int32_t **out, int32_t *bos, char *err,
                     size_t errlen);

/* Called for each position pos in [first, n_ctx - 1) of a window with the logits row that
 * predicts token pos + 1; non-zero stops the window (its value is returned). */
typedef int (*kz_eval_row_fn)(void *user, int pos, const float *logits);

/* One window: the sequence reset, tokens tok[0..n_ctx) evaluated (tok[0] replaced by bos when
 * bos >= 0), logits of positions >= first handed to fn in pieces of n_batch rows (rows [] must
 * hold n_batch * n_vocab floats). 0, -1 (err), or fn's non-zero value. */
int kz_eval_window(const kz_model *m, kz_seq *s, const int32_t *tok, int n_ctx, int first, int32_t bos, int n_batch,
                   float *rows, kz_eval_row_fn fn, void *user, char *err, size_t errlen);

/* ---- perplexity ---- */

/* -log p(tok) under softmax(logits), in double */
double kz_nll(const float *logits, int n_vocab, int tok);

typedef struct {
    double nll, nll2; /* sums of -log p and its square */
    long count;
} kz_ppl;
static inline void kz_ppl_add(kz_ppl *p, double nll) { p->nll += nll; p->nll2 += nll * nll; p->count++; }
/* exp(mean nll); *err (may be NULL) its standard error as llama-perplexity states it:
 * ppl * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)); -1 when undefined */
double kz_ppl_value(const kz_ppl *p, double *err);

/* ---- KL divergence (llama-perplexity --kl-divergence-base file) ----
 * File: "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk * n_ctx] (as read,
 * before the BOS swap), then per chunk n_ctx - 1 - n_ctx/2 rows of kz_klrow_words(n_vocab) u16:
 * f32 scale, f32 min_log_prob, then n_vocab codes, log p_i ~= min_log_prob + scale * code_i
 * (log-probs below max - 16 clamp to code 0). All little-endian. */
static inline size_t kz_klrow_words(int n_vocab) { return (size_t)(2 * ((n_vocab + 1) / 2) + 4); }
/* encode one logits row into row[kz_klrow_words]; returns -log p(tok) */
double kz_klrow_encode(const float *logits, int n_vocab, int tok, uint16_t *row);

typedef struct {
    double nll, nll2, nll_base, nll_base2, nll_nll_base; /* sums */
    double kld, kld2, p_diff, p_diff2, p_diff4;
    double max_p_diff;
    long n_same_top, count;
} kz_kld;
/* one position: logits of the model under test against the reference's encoded row */
double kz_kld_add(kz_kld *k, const float *logits, int n_vocab, const uint16_t *base_row, int tok);
/* mean and its standard error (0 error under 10 samples, as llama.cpp) */
void kz_mean_err(double sum, double sum2, long count, double *mean, double *err);

/* ---- importance matrix ---- */

/* What `kazeia imatrix` collects, as llama-imatrix: the inputs of the block weights ("blk.*"),
 * and of output.weight only with process_output; calls of fewer than 16 rows are skipped. */
typedef struct {
    kz_imatrix *im;
    int process_output;
    int failed;        /* set on the first error (message in err); later calls do nothing */
    char err[256];
} kz_im_collector;
/* the kz_mm_observer that feeds c (user = c) */
void kz_im_collect(void *user, const kz_wmat *w, const float *x, int n);
#endif
