/* CPU topology for thread placement on big.LITTLE phones: which cores are fast, how many worker
 * threads to run by default, and where to pin them.
 *
 * Rule (kz_topology_plan): each CPU's speed is its cpu_capacity (the scheduler's own scale,
 * uarch x frequency) when every CPU has one, else its cpufreq/cpuinfo_max_freq; a CPU is fast
 * when its speed is at least KZ_TOPO_FAST_PCT % of the fastest. On a homogeneous machine (all
 * speeds equal or unknown) nothing changes: every allowed CPU, no pinning. On a heterogeneous
 * one: never more workers than fast cores, and one core left to the app's own threads (UI,
 * render, audio) when every core is fast; the workers are pinned to the fast set (best effort).
 * Overrides: KZ_THREADS=N (default thread count; a context's n_threads wins over both),
 * KZ_PIN=0 (no pinning). The process-wide plan is read once from /sys/devices/system/cpu and the
 * process's affinity mask (a fact of the machine, like the CPU features). */
#ifndef KZ_TOPOLOGY_H
#define KZ_TOPOLOGY_H
#include <stddef.h>

#define KZ_TOPO_MAX_CPUS 256
#define KZ_TOPO_FAST_PCT 75

typedef enum { KZ_TOPO_SRC_NONE = 0, KZ_TOPO_SRC_CAPACITY = 1, KZ_TOPO_SRC_MAXFREQ = 2 } kz_topo_src;

typedef struct {
    int n_cpus;                    /* cpu0 .. cpu<n_cpus-1> directories found */
    long speed[KZ_TOPO_MAX_CPUS];  /* capacity or max kHz; 0 when unknown (or no such cpu) */
    kz_topo_src src;
} kz_topology;

typedef struct {
    int n_threads;                          /* default worker count (caller thread included) */
    int n_fast;                             /* fast CPUs among the allowed ones */
    int pin;                                /* 1: pin workers to cpus[] */
    unsigned char cpus[KZ_TOPO_MAX_CPUS];   /* the fast allowed CPUs */
} kz_thread_plan;

/* Reads root/cpuN/cpu_capacity and root/cpuN/cpufreq/cpuinfo_max_freq (root: the sysfs cpu
 * folder; tests pass fake trees). Returns the number of CPUs found (0: none, t->src NONE). */
int kz_topology_read(const char *root, kz_topology *t);
/* The rule above for the CPUs in allowed[] (NULL: all of them); a pure function. */
void kz_topology_plan(const kz_topology *t, const unsigned char *allowed, kz_thread_plan *out);
/* One line: "8 cpus (capacity): fast 3-7; 5 threads, pinned" (snprintf style). */
int kz_thread_plan_describe(const kz_topology *t, const kz_thread_plan *p, char *buf, size_t len);

/* This process's plan, with the KZ_THREADS / KZ_PIN overrides, computed once. */
const kz_thread_plan *kz_thread_plan_get(void);
/* Default thread count for a model or pool given none. */
int kz_default_threads(void);
/* Pins the calling thread to the plan's fast CPUs when the plan says so. Returns 1 if pinned,
 * 0 if not asked to, -1 if the kernel refused (ignored: best effort). */
int kz_topology_pin_self(void);
#endif
