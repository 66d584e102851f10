/* The log sink (kz_log_set). It is process-wide configuration, like a signal handler, not engine
 * data: the kernel level it reports is itself chosen once per process, before any model may
 * exist. The (fn, user) pair sits behind a mutex so a reader never sees one half of an old pair
 * and one of a new; the callback runs outside the lock (it may be slow, or log again). */
#include "sys/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static kz_log_fn g_log_fn;  /* guarded by g_log_mu */
static void *g_log_user;    /* guarded by g_log_mu */

void kz_log_set(kz_log_fn fn, void *user) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fn = fn;
    g_log_user = user;
    pthread_mutex_unlock(&g_log_mu);
}

void kz_logf(kz_log_level level, const char *fmt, ...) {
    pthread_mutex_lock(&g_log_mu);
    kz_log_fn fn = g_log_fn;
    void *user = g_log_user;
    pthread_mutex_unlock(&g_log_mu);
    if (!fn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fn(level, msg, user);
}
