/* Small helpers shared by the bench commands (cli/cmd_bench.c, cli/bench_matmuls.c). */
#ifndef KZ_CLI_BENCH_STATS_H
#define KZ_CLI_BENCH_STATS_H
/* monotonic clock, seconds */
double kz_bench_now(void);
/* qsort comparator for doubles, ascending */
int kz_cmp_double(const void *a, const void *b);
/* the q-quantile of v[0..n) (a sorted copy in t[0..n)), linear between ranks; 0 when n <= 0 */
double kz_quantile(const double *v, int n, double q, double *t);
#endif
