/* Persistent worker pool. Workers are created once; kz_pool_run publishes a task by bumping
 * a generation counter. Waiting (workers for a new generation, the caller for the end of a
 * run) spins for a short time budget, then blocks on a condition variable, so an idle pool
 * costs no CPU. The "sleeping" counters let the fast path skip the mutex entirely: a waker
 * only locks + signals when somebody announced (under the mutex) that it is about to sleep.
 * All state lives in the pool, so independent pools can run concurrently. */
#include "sys/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "sys/clock.h"
#include "sys/topology.h"

#define KZ_POOL_MAX_THREADS 512
#define KZ_SPIN_NS 50000L /* spin budget before blocking: covers the gap between two matmuls */

struct kz_worker {
    struct kz_pool *pool;
    int ith;
};

struct kz_pool {
    int n;
    pthread_t *th;
    struct kz_worker *wk;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_start; /* workers wait here for a new generation */
    pthread_cond_t cv_done;  /* the caller waits here for pending == 0 */
    atomic_uint gen;
    atomic_int pending;      /* workers still running the current task */
    atomic_int n_sleep;      /* workers blocked (or about to block) on cv_start */
    atomic_int main_sleep;   /* caller blocked (or about to block) on cv_done */
    atomic_int stop;
    /* task: written by the caller before the gen bump (release), read after it (acquire) */
    kz_task_fn fn;
    void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

/* 1 once a spin-wait has run past KZ_SPIN_NS (the clock read every 64 calls); w = {0, 0} at
 * the start of the wait */
static int spin_spent(kz_spin *w) {
    if ((++w->i & 63) != 0) return 0;
    const long long t = kz_now_ns();
    if (!w->t0) w->t0 = t;
    else if (t - w->t0 > KZ_SPIN_NS) return 1;
    return 0;
}

/* spin until *gen != seen or the budget is spent; returns the generation seen last */
static unsigned spin_gen(struct kz_pool *p, unsigned seen) {
    kz_spin w = {0, 0};
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || spin_spent(&w)) return g;
        cpu_relax();
    }
}

static void *worker_main(void *varg) {
    struct kz_worker *w = varg;
    struct kz_pool *p = w->pool;
    unsigned seen = 0; /* the pool starts at generation 0 */
    kz_topology_pin_self(); /* big.LITTLE: the fast cores only (best effort; topology.h) */
    for (;;) {
        unsigned g = spin_gen(p, seen);
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleep, 1); /* seq_cst: pairs with the load in kz_pool_run */
            while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv_start, &p->mu);
            atomic_fetch_sub(&p->n_sleep, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        p->fn(p->arg, w->ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            /* last one out: wake the caller only if it announced that it sleeps */
            if (atomic_load(&p->main_sleep)) {
                pthread_mutex_lock(&p->mu);
                pthread_cond_signal(&p->cv_done);
                pthread_mutex_unlock(&p->mu);
            }
        }
    }
    return NULL;
}

void kz_spin_wait(kz_spin *w) {
    cpu_relax();
    if (spin_spent(w)) sched_yield(); /* a preempted thread holds the wait up */
}

void kz_phase_wait(kz_phase *p, long n) {
    /* what is left was taken by running threads (a waiter has taken all it could): a short wait */
    kz_spin w = {0, 0};
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n) kz_spin_wait(&w);
}

int kz_num_cpus(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
#endif
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

static void pool_stop(kz_pool *p) {
    atomic_store(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->th[i], NULL);
}

kz_pool *kz_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = kz_default_threads();
    if (n_threads > KZ_POOL_MAX_THREADS) n_threads = KZ_POOL_MAX_THREADS;
    kz_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->n_sleep, 0);
    atomic_init(&p->main_sleep, 0);
    atomic_init(&p->stop, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv_start, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv_done, NULL) != 0) {
        pthread_cond_destroy(&p->cv_start);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        p->wk = calloc((size_t)n_threads - 1, sizeof *p->wk);
        if (!p->th || !p->wk) goto fail;
        for (int i = 0; i < n_threads - 1; i++) {
            p->wk[i].pool = p;
            p->wk[i].ith = i + 1;
            if (pthread_create(&p->th[i], NULL, worker_main, &p->wk[i]) != 0) goto fail;
            p->n_started++;
        }
    }
    return p;
fail:
    kz_pool_free(p);
    return NULL;
}

void kz_pool_free(kz_pool *p) {
    if (!p) return;
    pool_stop(p);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_start);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->wk);
    free(p);
}

int kz_pool_size(const kz_pool *p) { return p ? p->n : 1; }

/* Not reentrant: one kz_pool_run at a time per pool, and fn must not call kz_pool_run on the
 * same pool. A NULL pool runs fn(arg, 0, 1) in the caller. */
void kz_pool_run(kz_pool *p, kz_task_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes fn/arg/pending */
    if (atomic_load(&p->n_sleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);

    /* wait for the workers: spin briefly, then block */
    kz_spin w = {0, 0};
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        if (spin_spent(&w)) {
            pthread_mutex_lock(&p->mu);
            /* an exchange, not a store: the announcement must be globally visible before
             * pending is read again (store-then-load, the one pattern TSO reorders). A seq_cst
             * store is enough in C11, but under qemu-user on an x86-64 host a stlr/ldar pair
             * was seen to lose this wakeup (1 run in ~10 of test_repack hung); the
             * read-modify-write is a full barrier everywhere */
            atomic_exchange(&p->main_sleep, 1);
            while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->cv_done, &p->mu);
            atomic_store(&p->main_sleep, 0);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        cpu_relax();
    }
}
