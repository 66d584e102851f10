#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "args.h"

int kz_arg_long(const char *prog, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: bad value '%s' for %s (expected an integer in [%ld, %ld])\n", prog, s, opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int kz_arg_int(const char *prog, const char *opt, const char *s, long lo, long hi, int *out) {
    long v;
    if (kz_arg_long(prog, opt, s, lo, hi, &v)) return -1;
    *out = (int)v; /* callers pass bounds inside int range */
    return 0;
}

int kz_arg_float(const char *prog, const char *opt, const char *s, int positive, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v) || (positive && !(v > 0))) {
        fprintf(stderr, "%s: bad value '%s' for %s (expected a %s number)\n", prog, s, opt,
                positive ? "positive" : "finite");
        return -1;
    }
    *out = v;
    return 0;
}
