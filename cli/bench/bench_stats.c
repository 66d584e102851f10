#include "cli/bench/bench_stats.h"
#include <stdlib.h>
#include <string.h>
#include "sys/clock.h"

double kz_bench_now(void) { return (double)kz_now_ns() * 1e-9; }

int kz_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kz_quantile(const double *v, int n, double q, double *t) {
    if (n <= 0) return 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, kz_cmp_double);
    const double pos = q * (n - 1);
    const int i = (int)pos;
    return i + 1 < n ? t[i] + (pos - i) * (t[i + 1] - t[i]) : t[n - 1];
}
