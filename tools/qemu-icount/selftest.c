/* Guest program for the kz-icount self-tests.
 *   icount-selftest N      (bench/arm_icount.sh --selftest) a loop with a known mix of SDOT
 *                          (vector and by element), SMMLA and their unsigned twins, which the
 *                          plugin must not count;
 *   icount-selftest N K    (bench/arm_threads.sh --selftest) the same loop on K threads: thread
 *                          0 runs N passes alone, then two dispatches in which thread i runs
 *                          (i + 1) N passes inside a task (called through a pointer from
 *                          dispatch / worker) and then spins in wait_flag until all are done. */
#include <arm_neon.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static int8x16_t a, b;
static uint8x16_t ua, ub;
static int32x4_t s;
static uint32x4_t u;

__attribute__((noinline)) static void passes(long n) {
    for (long i = 0; i < n; i++) {
        __asm__ volatile("sdot %0.4s, %1.16b, %2.16b\n\t"
                         "sdot %0.4s, %1.16b, %2.4b[1]\n\t"
                         "sdot %0.2s, %1.8b, %2.4b[3]\n\t"
                         "smmla %0.4s, %1.16b, %2.16b\n\t"
                         "smmla %0.4s, %2.16b, %1.16b\n\t"
                         "udot %3.4s, %4.16b, %5.16b\n\t"
                         "udot %3.4s, %4.16b, %5.4b[2]\n\t"
                         "ummla %3.4s, %4.16b, %5.16b\n\t"
                         "usmmla %0.4s, %4.16b, %1.16b\n\t"
                         : "+w"(s), "+w"(a), "+w"(b), "+w"(u), "+w"(ua), "+w"(ub));
    }
}

/* the threaded mode: a two-dispatch pool of K threads (registers stay per thread) */
static long N;
static int K;
static atomic_int gen, done, finished;
static void (*volatile task_ptr)(int); /* through a pointer: BLR, as the pool's calls */

__attribute__((noinline)) static void wait_flag(atomic_int *p, int v) {
    while (atomic_load(p) < v) {}
}

static void task(int i) {
    passes((i + 1) * N);
    atomic_fetch_add(&finished, 1);
    wait_flag(&finished, atomic_load(&gen) * K); /* every task of this dispatch has run */
}

__attribute__((noinline)) static void *worker(void *arg) {
    const int i = (int)(long)arg;
    for (int g = 1; g <= 2; g++) {
        wait_flag(&gen, g);
        task_ptr(i);
        atomic_fetch_add(&done, 1);
    }
    return NULL;
}

__attribute__((noinline)) static void dispatch(int g) {
    atomic_store(&gen, g);
    task_ptr(0);
    wait_flag(&done, g * (K - 1));
}

int main(int argc, char **argv) {
    const long n = argc > 1 ? atol(argv[1]) : 1000;
    a = vdupq_n_s8((int8_t)argc), b = vdupq_n_s8(3);
    ua = vdupq_n_u8((uint8_t)argc), ub = vdupq_n_u8(5);
    if (argc > 2) {
        N = n, K = atoi(argv[2]);
        if (K < 1 || K > 16) return 2;
        task_ptr = task;
        pthread_t th[16];
        for (long i = 1; i < K; i++)
            if (pthread_create(&th[i], NULL, worker, (void *)i)) return 1;
        passes(N); /* serial: thread 0 outside a task */
        dispatch(1);
        dispatch(2);
        for (int i = 1; i < K; i++) pthread_join(th[i], NULL);
    } else {
        passes(n);
    }
    printf("%d %u\n", vgetq_lane_s32(s, 0), vgetq_lane_u32(u, 1));
    return 0;
}
