/* The one clock: monotonic wall time, for timings, profiles and spin budgets. */
#ifndef KZ_CLOCK_H
#define KZ_CLOCK_H
#include <time.h>

static inline long long kz_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline double kz_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
#endif
