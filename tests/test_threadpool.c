/* Worker pool: every thread index runs exactly once per kz_pool_run, results are visible to
 * the caller afterwards, the caller is thread 0, pools work concurrently from different
 * threads, and an idle pool does not burn CPU. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "kt.h"
#include "sys/threadpool.h"

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

/* kz_run: items [0, n) in one run per thread (fewer runs than threads when nruns < nth: the
 * rest only steal); every item must be taken exactly once, and a thread's first take from its
 * own run must start at the run's front */
typedef struct {
    kz_run run[KZ_RUNS_MAX];
    int nruns;
    uint32_t div;
    _Atomic int taken[4096];
    int first_ok[MAXT];
} run_job;

static void run_task(void *arg, int ith, int nth) {
    (void)nth;
    run_job *j = arg;
    int64_t c0, c1;
    int k = 0, first = 1;
    const uint64_t fb = ith < j->nruns ? atomic_load(&j->run[ith].fb) : 0;
    j->first_ok[ith] = 1;
    while (kz_runs_next(j->run, j->nruns, ith, j->div, &k, &c0, &c1)) {
        /* k == 0: a take from its own run's front (a thief may have emptied the run before its
         * owner started, never taken its front) */
        if (first && k == 0 && c0 != (int64_t)(uint32_t)fb) j->first_ok[ith] = 0;
        first = 0;
        for (int64_t i = c0; i < c1; i++) atomic_fetch_add(&j->taken[i], 1);
    }
}

static int runs_round(kz_pool *p, run_job *j, long n, int nruns, uint32_t div) {
    j->nruns = nruns;
    j->div = div;
    for (long i = 0; i < n; i++) atomic_init(&j->taken[i], 0);
    kz_runs_split(j->run, nruns, n);
    kz_pool_run(p, run_task, j);
    int bad = 0;
    for (long i = 0; i < n; i++) bad += atomic_load(&j->taken[i]) != 1;
    for (int t = 0; t < kz_pool_size(p); t++) bad += !j->first_ok[t];
    return bad;
}

int main(void) {
    CHECK(kz_num_cpus() >= 1);

    /* kz_run_take: owner takes max(1, left / div) from the front, a thief the last item */
    {
        kz_run r;
        int64_t c0 = -1, c1 = -1;
        kz_run_set(&r, 10, 30);
        CHECK(kz_run_take(&r, 1, 4, &c0, &c1) && c0 == 10 && c1 == 15);
        CHECK(kz_run_take(&r, 0, 1, &c0, &c1) && c0 == 29 && c1 == 30);
        CHECK(kz_run_take(&r, 1, UINT32_MAX, &c0, &c1) && c0 == 15 && c1 == 16);
        int n = 0;
        while (kz_run_take(&r, n % 2, 3, &c0, &c1)) n += (int)(c1 - c0);
        CHECKF(n == 13, "run emptied after %d more items", n);
        kz_run_set(&r, 7, 7);
        CHECK(!kz_run_take(&r, 1, 1, &c0, &c1) && !kz_run_take(&r, 0, 1, &c0, &c1));
    }
    /* under contention: pools of 1..4 threads, runs per thread or fewer, odd sizes */
    {
        static run_job rj;
        int bad = 0, rounds = 0;
        for (int nt = 1; nt <= 4; nt++) {
            kz_pool *p = kz_pool_new(nt);
            if (!p) { CHECK(p != NULL); continue; }
            for (int r = 0; r < 300; r++) {
                const long n = 1 + (long)(((unsigned)r * 2654435761u) % 4000u);
                const int nruns = r % 5 == 0 && nt > 1 ? nt - 1 : nt;
                bad += runs_round(p, &rj, n, nruns, r % 3 == 0 ? UINT32_MAX : 4);
                rounds++;
            }
            kz_pool_free(p);
        }
        CHECKF(bad == 0, "kz_run: %d items taken other than once (or a bad first take) over %d rounds", bad, rounds);
    }

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
