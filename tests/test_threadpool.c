/* Worker pool: every thread index runs exactly once per kz_pool_run, results are visible to
 * the caller afterwards, the caller is thread 0, pools work concurrently from different
 * threads, and an idle pool does not burn CPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "kt.h"
#include "threadpool.h"

#define MAXT 8

typedef struct {
    int nth_seen[MAXT];  /* nth each index was called with */
    long count[MAXT];    /* calls per index (plain writes: made visible by the pool's barrier) */
    long sum[MAXT];      /* partial sums of the current round */
    long n;              /* round size */
    int bad_nth;
    pthread_t caller;
    int caller_is_0;
} job;

static void task(void *arg, int ith, int nth) {
    job *j = arg;
    if (ith < 0 || ith >= MAXT || nth <= 0 || nth > MAXT) { j->bad_nth++; return; }
    j->nth_seen[ith] = nth;
    j->count[ith]++;
    long lo, hi, s = 0;
    kz_split(j->n, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) s += i * 3 + 1;
    j->sum[ith] = s;
    if (ith == 0) j->caller_is_0 = pthread_equal(pthread_self(), j->caller);
}

/* run `rounds` rounds on pool p; returns number of wrong sums */
static int rounds_on(kz_pool *p, int rounds, unsigned seed, int sleepy) {
    job j;
    memset(&j, 0, sizeof j);
    j.caller = pthread_self();
    int nth = kz_pool_size(p), wrong = 0;
    for (int r = 0; r < rounds; r++) {
        j.n = (long)((seed * 2654435761u + (unsigned)r * 40503u) % 5000u);
        for (int i = 0; i < nth; i++) j.sum[i] = -1;
        kz_pool_run(p, task, &j);
        long s = 0;
        for (int i = 0; i < nth; i++) s += j.sum[i];
        long want = 0;
        for (long i = 0; i < j.n; i++) want += i * 3 + 1;
        if (s != want || !j.caller_is_0) wrong++;
        /* now and then let the workers fall asleep, to exercise the condvar wake-up path */
        if (sleepy && r % 97 == 0) usleep(300);
    }
    for (int i = 0; i < nth; i++) {
        if (j.count[i] != rounds) wrong++;
        if (j.nth_seen[i] != nth) wrong++;
    }
    return wrong + j.bad_nth;
}

typedef struct {
    int n_threads, rounds;
    unsigned seed;
    int wrong;
} thr_arg;

static void *thr_main(void *a) {
    thr_arg *t = a;
    kz_pool *p = kz_pool_new(t->n_threads);
    if (!p) { t->wrong = -1; return NULL; }
    t->wrong = rounds_on(p, t->rounds, t->seed, 1);
    kz_pool_free(p);
    return NULL;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
    CHECK(kz_num_cpus() >= 1);

    /* kz_split partitions [0,n) into contiguous, balanced ranges */
    for (long n = 0; n < 70; n++)
        for (int nth = 1; nth <= 7; nth++) {
            long prev = 0, mn = n, mx = 0;
            int ok = 1;
            for (int i = 0; i < nth; i++) {
                long lo, hi;
                kz_split(n, i, nth, &lo, &hi);
                if (lo != prev || hi < lo) ok = 0;
                prev = hi;
                if (hi - lo < mn) mn = hi - lo;
                if (hi - lo > mx) mx = hi - lo;
            }
            CHECKF(ok && prev == n && mx - mn <= 1, "kz_split n=%ld nth=%d", n, nth);
        }

    /* pools of 1..4 threads, many rounds each */
    for (int n = 1; n <= 4; n++) {
        kz_pool *p = kz_pool_new(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(kz_pool_size(p) == n);
        int w = rounds_on(p, 20000, (unsigned)n, n == 3);
        CHECKF(w == 0, "pool of %d: %d wrong rounds", n, w);
        kz_pool_free(p);
    }
    /* default size = CPUs; NULL pool runs inline as a pool of one */
    kz_pool *pd = kz_pool_new(0);
    CHECK(pd && kz_pool_size(pd) == kz_num_cpus());
    kz_pool_free(pd);
    CHECK(kz_pool_size(NULL) == 1);
    {
        job j;
        memset(&j, 0, sizeof j);
        j.caller = pthread_self();
        j.n = 10;
        kz_pool_run(NULL, task, &j);
        CHECK(j.count[0] == 1 && j.nth_seen[0] == 1 && j.caller_is_0 && j.sum[0] == 145);
    }
    kz_pool_free(NULL);

    /* two pools driven concurrently from two threads */
    thr_arg ta[2] = { { 2, 8000, 11u, 0 }, { 3, 8000, 22u, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, thr_main, &ta[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECKF(ta[0].wrong == 0 && ta[1].wrong == 0, "concurrent pools: %d / %d wrong", ta[0].wrong, ta[1].wrong);

    /* an idle pool blocks: process CPU time while the caller sleeps must stay near zero */
    {
        kz_pool *p = kz_pool_new(4);
        CHECK(rounds_on(p, 100, 5u, 0) == 0);
        usleep(20000); /* past the spin budget */
        double c0 = cpu_s();
        usleep(300000);
        double used = cpu_s() - c0;
        CHECKF(used < 0.03, "idle pool of 4 used %.3f s CPU in 0.3 s", used);
        printf("  idle pool of 4: %.4f s CPU during 0.3 s sleep\n", used);
        /* and it still works after sleeping */
        CHECK(rounds_on(p, 100, 6u, 0) == 0);
        kz_pool_free(p);
    }

    /* create/free churn (threads are joined cleanly) */
    for (int i = 0; i < 50; i++) {
        kz_pool *p = kz_pool_new(1 + i % 4);
        CHECK(p != NULL);
        if (i % 2) CHECK(rounds_on(p, 3, (unsigned)i, 0) == 0);
        kz_pool_free(p);
    }
    KT_END();
}
