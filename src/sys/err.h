/* The one error helper: every internal function that can fail writes a one-line message the
 * user can act on into a caller's buffer (err may be NULL or errlen 0: then nothing is written). */
#ifndef KZ_ERR_H
#define KZ_ERR_H
#include <stddef.h>

void kz_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
