/* Importance matrices in the GGUF layout llama.cpp's llama-imatrix writes (general.type
 * "imatrix"; per weight W: tensor "W.in_sum2" F32 [n_per_row, n_mat], the per-column sums of the
 * squared activations that entered W, and "W.counts" F32 [1, n_mat], the rows summed), so that
 * our files are read by llama-quantize and theirs by `kazeia quantize --imatrix`.
 * Collected by `kazeia imatrix`, used by the weighted quantizers (kz_quant_row_w). */
#ifndef KZ_MODEL_IMATRIX_H
#define KZ_MODEL_IMATRIX_H
#include <stddef.h>
#include <stdint.h>

typedef struct kz_imatrix kz_imatrix;

kz_imatrix *kz_imatrix_new(void);
void kz_imatrix_free(kz_imatrix *im);
/* accumulate n_rows activation rows x[n_rows][n_per_row] entering weight `name` (2-D weights:
 * n_mat 1); -1 (message) on out of memory or a width that differs from earlier calls */
int kz_imatrix_add(kz_imatrix *im, const char *name, int64_t n_per_row, const float *x, int64_t n_rows, char *err,
                   size_t errlen);
/* write / read the GGUF file (written to a temporary beside path, fsynced, then renamed).
 * dataset NULL keeps the datasets of the file the matrix was read from. The reader requires
 * what llama-quantize requires: the three imatrix.* keys and F32 in_sum2/counts pairs. */
int kz_imatrix_write(const kz_imatrix *im, const char *path, const char *dataset, int chunk_count, int chunk_size,
                     char *err, size_t errlen);
kz_imatrix *kz_imatrix_read(const char *path, char *err, size_t errlen);
/* the importance of the n_per_row columns of weight `name` into out: in_sum2 / counts of matrix
 * 0 (all 1 when no row reached it, as llama-quantize does); 0, or -1 when there is no entry of
 * that name and width */
int kz_imatrix_weights(const kz_imatrix *im, const char *name, int64_t n_per_row, float *out);
int kz_imatrix_count(const kz_imatrix *im); /* entries */
const char *kz_imatrix_name(const kz_imatrix *im, int i); /* entry i's weight name, NULL past the end */
/* raw view of one entry: sums [n_mat][n_per_row] and counts [n_mat]; 0, or -1 when absent */
int kz_imatrix_entry(const kz_imatrix *im, const char *name, int64_t *n_per_row, int64_t *n_mat, const double **sum2,
                     const int64_t **counts);
/* what a file read declared (0 / NULL for a matrix being collected): quantize records them */
int kz_imatrix_chunk_count(const kz_imatrix *im);
int kz_imatrix_chunk_size(const kz_imatrix *im);
const char *kz_imatrix_dataset(const kz_imatrix *im); /* the first of imatrix.datasets */
#endif
