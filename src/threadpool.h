/* Persistent worker pool: kz_pool_run(fn) executes fn(arg, ith, nth) on every thread
 * (the caller is thread 0) and returns when all are done. One pool per context, so two
 * contexts can compute concurrently. */
#ifndef KZ_THREADPOOL_H
#define KZ_THREADPOOL_H
#include <stdatomic.h>
typedef struct kz_pool kz_pool;
typedef void (*kz_task_fn)(void *arg, int ith, int nth);
kz_pool *kz_pool_new(int n_threads); /* n_threads <= 0: online CPUs */
void kz_pool_free(kz_pool *p);
int kz_pool_size(const kz_pool *p);
void kz_pool_run(kz_pool *p, kz_task_fn fn, void *arg);
/* split [0,n) evenly: thread ith gets [*lo,*hi) */
static inline void kz_split(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
/* Dynamic sharing of n items: each thread takes the next item (or run of items) from a counter
 * the task holds, so a thread that starts late (woken from sleep, preempted, or a slower core
 * of a big.LITTLE phone) simply takes fewer; results must not depend on who runs an item.
 * Set .next to 0 before kz_pool_run. */
typedef struct {
    atomic_long next;
} kz_dyn;
static inline long kz_dyn_take(kz_dyn *d, long k) {
    return atomic_fetch_add_explicit(&d->next, k, memory_order_relaxed);
}
int kz_num_cpus(void);
#endif
