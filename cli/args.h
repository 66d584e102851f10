/* Option-value parsing shared by the kazeia subcommands and the tools: the whole string must be
 * the value, and a bad one prints "PROG: bad value 'S' for OPT (expected ...)" on stderr. */
#ifndef KZ_CLI_ARGS_H
#define KZ_CLI_ARGS_H
/* decimal integer in [lo, hi]; 0 ok, -1 bad */
int kz_arg_long(const char *prog, const char *opt, const char *s, long lo, long hi, long *out);
int kz_arg_int(const char *prog, const char *opt, const char *s, long lo, long hi, int *out);
/* finite float; with positive != 0 it must also be > 0 */
int kz_arg_float(const char *prog, const char *opt, const char *s, int positive, float *out);
#endif
