/* The library's diagnostics, sent to the callback the app set with kz_log_set (kazeia.h).
 * Nothing in the library writes to stderr/stdout itself. */
#ifndef KZ_LOG_H
#define KZ_LOG_H
#include "kazeia.h"

/* printf-style message to the app's log callback; a no-op (no formatting) when none is set */
__attribute__((format(printf, 2, 3)))
void kz_logf(kz_log_level level, const char *fmt, ...);
#endif
