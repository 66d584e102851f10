/* Persistent worker pool: kz_pool_run(fn) executes fn(arg, ith, nth) on every thread
 * (the caller is thread 0) and returns when all are done. One pool per context, so two
 * contexts can compute concurrently. */
#ifndef KZ_THREADPOOL_H
#define KZ_THREADPOOL_H
#include <stdatomic.h>
#include <stdint.h>
typedef struct kz_pool kz_pool;
typedef void (*kz_task_fn)(void *arg, int ith, int nth);
kz_pool *kz_pool_new(int n_threads); /* n_threads <= 0: kz_default_threads() (sys/topology.h) */
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
/* Runs: n items cut into one contiguous run per thread (up to KZ_RUNS_MAX); the owner of a run
 * takes from its front, so each thread streams through adjacent memory (the hardware
 * prefetchers and the callers' software prefetch ahead of the current item keep working across
 * items), and a thread out of work steals single items from the back of the others' runs, so a
 * late or slower thread still takes fewer. Front (low 32 bits) and end (high 32) share one word. */
#define KZ_RUNS_MAX 64 /* threads past this many only steal */
typedef struct {
    _Alignas(64) _Atomic uint64_t fb;
} kz_run;
static inline void kz_run_set(kz_run *r, uint32_t begin, uint32_t end) {
    atomic_init(&r->fb, ((uint64_t)end << 32) | begin);
}
/* owner (front = 1): the next max(1, left / div) items from the front (div >= 1); thief
 * (front = 0): the last item. [*c0, *c1) on success, 0 when the run is empty. */
static inline int kz_run_take(kz_run *r, int front, uint32_t div, int64_t *c0, int64_t *c1) {
    uint64_t v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    for (;;) {
        const uint32_t f = (uint32_t)v, e = (uint32_t)(v >> 32);
        if (f >= e) return 0;
        const uint32_t k = front ? ((e - f) / div > 1 ? (e - f) / div : 1) : 1;
        const uint64_t nv = front ? v + k : ((uint64_t)(e - 1) << 32) | f;
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, nv, memory_order_relaxed, memory_order_relaxed)) {
            *c0 = front ? f : e - 1;
            *c1 = *c0 + k;
            return 1;
        }
    }
}
/* items [0, n) cut into n_runs even runs (kz_split), set before the dispatch publishes them */
static inline void kz_runs_split(kz_run *run, int n_runs, long n) {
    for (int j = 0; j < n_runs; j++) {
        long lo, hi;
        kz_split(n, j, n_runs, &lo, &hi);
        kz_run_set(&run[j], (uint32_t)lo, (uint32_t)hi);
    }
}
/* The next items for thread ith: from the front of its own run (a 1 / div share of what is
 * left of it), then single items from the back of the others'; 0 when all are taken. *k (0 at
 * the start of a dispatch) counts the runs visited: while (kz_runs_next(...)) work(c0, c1); */
static inline int kz_runs_next(kz_run *run, int n_runs, int ith, uint32_t div, int *k, int64_t *c0, int64_t *c1) {
    if (*k == 0) {
        if (ith < n_runs && kz_run_take(&run[ith], 1, div, c0, c1)) return 1;
        *k = 1;
    }
    for (; *k <= n_runs; ++*k)
        if (kz_run_take(&run[(ith + *k) % n_runs], 0, 1, c0, c1)) return 1;
    return 0;
}
/* Phase barrier inside one task: the items of a first phase are counted as they are finished,
 * and a thread with nothing more to take waits until all n are done before its second phase
 * (decode: the matmul's activation row converted by all threads, then read by all; the GDN
 * conv, then the delta rule). Taken with kz_runs_next, a late thread's items go to the others
 * (a thread woken from sleep does not hold them), so only items a running thread took are
 * waited for. Set .done to 0 before kz_pool_run. */
typedef struct {
    _Alignas(64) atomic_long done;
} kz_phase;
/* k items finished: their writes become visible to the threads that kz_phase_wait */
static inline void kz_phase_add(kz_phase *p, long k) { atomic_fetch_add_explicit(&p->done, k, memory_order_release); }
void kz_phase_wait(kz_phase *p, long n);
/* One step of a spin-wait inside a task: a pause (PAUSE / YIELD), and past the pool's spin budget
 * a sched_yield, so that a preempted thread the waiter depends on gets the core back.
 * kz_spin w = {0, 0}; while (!ready) kz_spin_wait(&w); */
typedef struct {
    unsigned i;
    long long t0;
} kz_spin;
void kz_spin_wait(kz_spin *w);
int kz_num_cpus(void);
#endif
