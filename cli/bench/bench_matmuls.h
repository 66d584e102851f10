/* kazeia bench --matmuls: a decode step's matrix products alone vs enclosing read-bandwidth
 * samples (cli/bench_matmuls.c). */
#ifndef KZ_BENCH_MATMULS_H
#define KZ_BENCH_MATMULS_H
#include <stddef.h>
#include "model/model.h"
/* rounds >= 1; prints a table (or JSON) on stdout; 0 on success, 1 after printing an error */
int kz_bench_matmuls(const kz_model *m, int threads, int rounds, size_t sample_mib, int json);
#endif
