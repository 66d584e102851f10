/* kz-icount: a QEMU TCG plugin (qemu-user, AArch64 guest) that counts executed guest
 * instructions: the total, SDOT and SMMLA from their encodings, and per ELF symbol.
 *
 *   qemu-aarch64 -cpu max -plugin build/kz-icount.so,out=FILE[,sym=1] ./prog args
 *   ... -plugin build/kz-icount.so,out=FILE,thr=1[,sym=1][,wait=A:B*:..][,par=F:G][,disp=0xADDR]
 *
 * Counts are instructions, not cycles: every instruction weighs 1 whatever its latency.
 * Default mode: counters added inline per translated block (no callback per instruction), not
 * atomic: run the guest on one thread. thr=1: per guest thread (qemu-user runs each guest thread
 * as a vCPU, vcpu_index in creation order, 0 = main): a callback per executed block adds to that
 * vCPU's counters (slower; API 1 has no per-vCPU inline counters). Instructions of the wait=
 * symbols (a name; '*' at either end matches any prefix / suffix) are waiting, the rest work. Work of a thread
 * between a BLR made from a par= symbol and its return is inside a parallel task; work of
 * vCPU 0 outside one is serial. disp= (the dispatcher's entry address) closes a dispatch each
 * time it is entered: the busiest thread's task work in it adds to "crit".
 * Built against the plugin API version 1 of QEMU 7.x; the declarations below restate that API's
 * C interface (include/qemu/qemu-plugin.h), which Debian does not install. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, sched_yield under -std=c11 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

/* ---- the plugin API (version 1) as QEMU 7.2 defines it ---- */
#define QPLUGIN_EXPORT __attribute__((visibility("default")))
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1,
                                              uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                                              uint64_t a7, uint64_t a8);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);
typedef void (*qemu_plugin_vcpu_syscall_ret_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_idx, int64_t num, int64_t ret);
void qemu_plugin_register_vcpu_syscall_ret_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_ret_cb_t cb);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
const char *qemu_plugin_insn_symbol(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);
QPLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv);
QPLUGIN_EXPORT int qemu_plugin_version = 1;

/* ---- AArch64 encodings (Arm ARM, Advanced SIMD) ---- */
/* SDOT (vector) 0 Q 0 01110 10 0 Rm 100101 Rn Rd; SDOT (by element) 0 Q 0 01111 10 L M Rm 1110 H 0
 * Rn Rd; SMMLA 0100 1110 100 Rm 101001 Rn Rd. The U bit (29) is part of each mask: UDOT /
 * UMMLA are not counted. */
static int is_sdot(uint32_t w) { return (w & 0xBFE0FC00u) == 0x0E809400u || (w & 0xBFC0F400u) == 0x0F80E000u; }
static int is_smmla(uint32_t w) { return (w & 0xFFE0FC00u) == 0x4E80A400u; }

/* BLR Xn (an indirect call): 1101011 0001 11111 000000 Rn 00000 */
static int is_blr(uint32_t w) { return (w & 0xFFFFFC1Fu) == 0xD63F0000u; }

#define MAXV 32    /* vCPU slots (guest threads); a higher vcpu_index shares the last slot */
#define MAXRET 64  /* return points of calls into parallel tasks */
#define MAXPAT 32  /* wait= and par= names */

/* one counter set; ctr structs are never moved (inline ops and blocks hold their addresses) */
typedef struct ctr {
    const char *name;
    uint64_t insns, sdot, smmla;
    int wait;     /* thr=1: a wait symbol */
    uint64_t *tv; /* thr=1: instructions per vCPU [MAXV] */
    uint64_t ser; /* thr=1: instructions on vCPU 0 outside tasks */
} ctr;

/* thr=1: one vCPU's counters, written by that vCPU's thread only (dwork excepted: the dispatch
 * closer reads and zeroes it while every task has ended); padded against false sharing */
typedef struct vstate {
    uint64_t insns, sdot, smmla, work, wait, outside, task, dwork;
    uint64_t vt, jump; /* lock=Q: virtual time (instructions, + jumps over futex waits) */
    uint64_t futex;    /* lock=Q: the futex word a blocked thread waits on */
    int in_task, seen, blocked, gone;
    char pad[128 - 11 * 8 - 4 * sizeof(int)];
} vstate;

/* thr=1: a translated block's counts, runs of one symbol each */
enum { TB_DISP = 1, TB_TASK_END = 2, TB_TASK_START = 4 };
typedef struct tbrun {
    ctr *c;
    uint32_t ni, nd, nm;
} tbrun;
typedef struct tbinfo {
    int flags, nrun;
    uint32_t ni, nd, nm, nwork;
    tbrun run[];
} tbinfo;

/* all the plugin's state: one plugin instance per process (QEMU's model); translation is
 * serialised by QEMU (user mode: under the mmap lock), execution callbacks run on each thread */
static struct {
    ctr total;
    int per_sym, thr;
    char *out;
    ctr **tab; /* open addressing on the symbol string's address (QEMU returns stable pointers) */
    size_t cap, n;
    char *wait[MAXPAT], *par[MAXPAT];
    int nwait, npar;
    uint64_t disp, ret[MAXRET];
    int nret, ret_full;
    vstate v[MAXV];
    uint64_t crit, dsum, ndisp, vover;
    uint64_t lock, stalls; /* lock=Q: no thread runs more than Q instructions ahead of another */
    uint64_t last_wake; /* lock=Q: the waker's clock at the last FUTEX_WAKE */
    uint64_t n_wake, j_wake, n_ret, j_ret; /* lock=Q: wakes by FUTEX_WAKE / by return, and their jumps */
    int nv;                /* vCPU slots in use */
} S;

/* name matches pattern: exact, "pre*" a prefix, "*suf" a suffix, "*mid*" a substring */
static int name_match(const char *name, const char *pat) {
    const size_t l = strlen(pat), ln = strlen(name);
    const int head = l && pat[0] == '*', tail = l > (size_t)head && pat[l - 1] == '*';
    const size_t k = l - head - tail; /* the literal part */
    if (head && tail) {
        for (size_t i = 0; i + k <= ln; i++)
            if (!strncmp(name + i, pat + 1, k)) return 1;
        return 0;
    }
    if (head) return ln >= k && !strncmp(name + ln - k, pat + 1, k);
    if (tail) return !strncmp(name, pat, k);
    return !strcmp(name, pat);
}

static int name_in(const char *name, char *const *pat, int np) {
    for (int i = 0; name && i < np; i++)
        if (name_match(name, pat[i])) return 1;
    return 0;
}

static ctr *sym_ctr(const char *name) {
    if (!name) name = "?";
    if (S.n * 2 >= S.cap) {
        size_t nc = S.cap ? S.cap * 2 : 4096;
        ctr **nt = calloc(nc, sizeof *nt);
        if (!nt) return NULL;
        for (size_t i = 0; i < S.cap; i++)
            if (S.tab[i]) {
                size_t h = ((uintptr_t)S.tab[i]->name >> 3) * 0x9E3779B97F4A7C15ull % nc;
                while (nt[h]) h = (h + 1) % nc;
                nt[h] = S.tab[i];
            }
        free(S.tab);
        S.tab = nt;
        S.cap = nc;
    }
    size_t h = ((uintptr_t)name >> 3) * 0x9E3779B97F4A7C15ull % S.cap;
    while (S.tab[h]) {
        if (S.tab[h]->name == name) return S.tab[h];
        h = (h + 1) % S.cap;
    }
    ctr *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (S.thr && !(c->tv = calloc(MAXV, sizeof *c->tv))) {
        free(c);
        return NULL;
    }
    c->name = name;
    c->wait = name_in(name, S.wait, S.nwait);
    S.tab[h] = c;
    S.n++;
    return c;
}

static void add_run(struct qemu_plugin_tb *tb, ctr *c, uint64_t ni, uint64_t nd, uint64_t nm) {
    if (ni) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->insns, ni);
    if (nd) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->sdot, nd);
    if (nm) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->smmla, nm);
}

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, y) __atomic_store_n(&(x), (y), __ATOMIC_RELAXED)

/* the dispatch that ended: its busiest thread's task work to crit, all of it to dsum. Called
 * when the dispatcher is entered again (or at exit): every task of the last one has returned
 * (the dispatcher waited for it) and the next one has not started. */
static void close_dispatch(void) {
    uint64_t m = 0, sum = 0;
    for (int i = 0; i < MAXV; i++) {
        const uint64_t d = LD(S.v[i].dwork);
        if (!d) continue;
        sum += d, m = d > m ? d : m;
        ST(S.v[i].dwork, 0);
    }
    if (!sum) return;
    S.crit += m, S.dsum += sum, S.ndisp++;
}

/* lock=Q: equal-speed cores in virtual time. Each running thread's clock is its instruction
 * count; a thread Q ahead of the slowest running one waits (on the host) for it to catch up.
 * A thread blocked in a futex wait (parked) holds nobody up; a FUTEX_WAKE on its word makes it
 * running at the waker's clock at once (a wake costs nothing, and the waker cannot run ahead
 * while the host takes its time to wake it). The critical path is then thread 0's clock. */
static uint64_t min_running(unsigned int self) {
    uint64_t m = UINT64_MAX;
    const int nv = LD(S.nv);
    for (int i = 0; i < nv; i++) {
        const vstate *v = &S.v[i];
        if ((unsigned)i == self || !LD(v->seen) || LD(v->blocked) || LD(v->gone)) continue;
        const uint64_t t = LD(v->vt);
        m = t < m ? t : m;
    }
    return m;
}

static long long host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void lock_step(unsigned int vi, vstate *s) {
    long long t0 = 0;
    for (unsigned k = 1;; k++) {
        const uint64_t m = min_running(vi);
        if (m == UINT64_MAX || s->vt <= m + S.lock) return;
        if (!(k & 63)) { /* the slowest is held elsewhere (in QEMU, or woken by us but not by the
                          * kernel): after 1 s count it as parked until it runs again */
            const long long t = host_ns();
            if (!t0) t0 = t;
            else if (t - t0 > 1000000000LL) {
                __atomic_fetch_add(&S.stalls, 1, __ATOMIC_RELAXED);
                for (int i = 0; i < LD(S.nv); i++)
                    if ((unsigned)i != vi && LD(S.v[i].seen) && !LD(S.v[i].blocked) && LD(S.v[i].vt) == m)
                        ST(S.v[i].blocked, 1);
                t0 = 0;
            }
        }
        sched_yield();
    }
}

static void vcpu_seen(unsigned int vi) {
    int nv = LD(S.nv);
    while ((int)vi >= nv && !__atomic_compare_exchange_n(&S.nv, &nv, (int)vi + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    if (!S.v[vi].seen) {
        const uint64_t m = min_running(vi); /* a new thread starts now: at the slowest clock */
        ST(S.v[vi].vt, m == UINT64_MAX ? 0 : m);
        ST(S.v[vi].seen, 1);
    }
}

static void on_vcpu_init(qemu_plugin_id_t id, unsigned int vi) {
    (void)id;
    if (vi < MAXV) vcpu_seen(vi);
}

/* AArch64 Linux: futex 98 (FUTEX_WAIT 0, FUTEX_WAIT_BITSET 9, low 7 bits of the op), exit 93,
 * exit_group 94 */
static void on_syscall(qemu_plugin_id_t id, unsigned int vi, int64_t num, uint64_t a1, uint64_t a2, uint64_t a3,
                       uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8) {
    (void)id, (void)a1, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8;
    if (vi >= MAXV) return;
    if (num == 98 && ((a2 & 127) == 0 || (a2 & 127) == 9)) ST(S.v[vi].futex, a1), ST(S.v[vi].blocked, 1);
    if (num == 98 && ((a2 & 127) == 1 || (a2 & 127) == 10)) { /* FUTEX_WAKE(_BITSET) of up to a3 */
        ST(S.last_wake, S.v[vi].vt);
        long n = (long)(int32_t)a3;
        for (int i = 0; i < LD(S.nv) && n > 0; i++) {
            vstate *w = &S.v[i];
            if ((unsigned)i == vi || !LD(w->blocked) || (LD(w->futex) & ~(uint64_t)7) != (a1 & ~(uint64_t)7)) continue;
            if (LD(w->vt) < S.v[vi].vt) {
                __atomic_fetch_add(&S.j_wake, S.v[vi].vt - LD(w->vt), __ATOMIC_RELAXED);
                w->jump += S.v[vi].vt - LD(w->vt), ST(w->vt, S.v[vi].vt);
            }
            __atomic_fetch_add(&S.n_wake, 1, __ATOMIC_RELAXED);
            ST(w->blocked, 0), n--;
        }
    }
    if (num == 93 || num == 94) ST(S.v[vi].gone, 1);
}

/* a wait that no modelled wake ended (its wake came first, or went to another word) resumes at
 * the clock of the last FUTEX_WAKE, not at the others' clock: while it sat in the kernel they
 * ran ahead on the host's schedule, not by the model */
static void on_syscall_ret(qemu_plugin_id_t id, unsigned int vi, int64_t num, int64_t ret) {
    (void)id, (void)num, (void)ret;
    if (vi >= MAXV || !S.v[vi].blocked) return;
    vstate *s = &S.v[vi];
    const uint64_t m = min_running(vi);
    const uint64_t lw = LD(S.last_wake), to = lw < m ? lw : m;
    if (to != UINT64_MAX && to > s->vt) {
        __atomic_fetch_add(&S.j_ret, to - s->vt, __ATOMIC_RELAXED);
        s->jump += to - s->vt, ST(s->vt, to);
    }
    __atomic_fetch_add(&S.n_ret, 1, __ATOMIC_RELAXED);
    ST(s->blocked, 0);
}

/* lock=Q at a dispatch: every parked thread runs from the dispatcher's clock on (on the phone
 * the pool's workers spin through the gaps between dispatches; under qemu the pool's spin
 * budget, in host time, parks them after a few thousand guest instructions, and their kernel
 * wake-up follows the host's schedule) */
static void wake_all(unsigned int vi) {
    for (int i = 0; i < LD(S.nv); i++) {
        vstate *w = &S.v[i];
        if ((unsigned)i == vi || !LD(w->blocked) || LD(w->gone)) continue;
        if (LD(w->vt) < S.v[vi].vt) w->jump += S.v[vi].vt - LD(w->vt), ST(w->vt, S.v[vi].vt);
        ST(w->blocked, 0);
        __atomic_fetch_add(&S.n_wake, 1, __ATOMIC_RELAXED);
    }
}

static void on_exec(unsigned int vi, void *u) {
    const tbinfo *b = u;
    if (vi >= MAXV) vi = MAXV - 1, ST(S.vover, 1);
    vstate *s = &S.v[vi];
    if (b->flags & TB_DISP) {
        close_dispatch();
        if (S.lock) wake_all(vi);
    }
    if (b->flags & TB_TASK_END) s->in_task = 0;
    if (b->flags & TB_TASK_START) s->in_task = 1;
    if (!s->seen) vcpu_seen(vi);
    s->insns += b->ni, s->sdot += b->nd, s->smmla += b->nm;
    s->wait += b->ni - b->nwork;
    s->work += b->nwork;
    if (s->in_task) {
        s->task += b->nwork;
        ST(s->dwork, s->dwork + b->nwork);
    } else {
        s->outside += b->nwork;
    }
    if (S.lock) {
        if (LD(s->blocked)) on_syscall_ret(0, vi, 0, 0); /* it runs: not parked */
        if (LD(s->gone)) { /* a new thread in an exited one's vCPU slot (QEMU reuses them): it starts now */
            const uint64_t m = min_running(vi);
            if (m != UINT64_MAX && m > s->vt) ST(s->vt, m);
            ST(s->gone, 0);
        }
        ST(s->vt, s->vt + b->ni);
        lock_step(vi, s);
    }
    if (S.per_sym)
        for (int i = 0; i < b->nrun; i++) {
            const tbrun *r = &b->run[i];
            r->c->tv[vi] += r->ni;
            if (!vi && !s->in_task) r->c->ser += r->ni;
            if (r->nd) __atomic_fetch_add(&r->c->sdot, r->nd, __ATOMIC_RELAXED);
            if (r->nm) __atomic_fetch_add(&r->c->smmla, r->nm, __ATOMIC_RELAXED);
        }
}

/* thr=1 at translation: the block's runs and flags, one callback per execution */
static void trans_thr(struct qemu_plugin_tb *tb, size_t n) {
    tbinfo *b = calloc(1, sizeof *b + n * sizeof(tbrun));
    if (!b) return; /* not counted: the totals would say so against a default-mode run */
    const char *rs = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct qemu_plugin_insn *in = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w = 0;
        if (qemu_plugin_insn_size(in) == 4) memcpy(&w, qemu_plugin_insn_data(in), 4);
        const char *s = qemu_plugin_insn_symbol(in);
        const uint64_t va = qemu_plugin_insn_vaddr(in);
        if (i == 0) {
            if (S.disp && va == S.disp) b->flags |= TB_DISP;
            for (int k = 0; k < S.nret; k++)
                if (S.ret[k] == va) b->flags |= TB_TASK_END;
        }
        /* a call from a par= symbol enters a task; it returns to the next instruction, which
         * starts a block translated after this one (the call ends this block) */
        if (i == n - 1 && is_blr(w) && name_in(s, S.par, S.npar)) {
            b->flags |= TB_TASK_START;
            int k = 0;
            while (k < S.nret && S.ret[k] != va + 4) k++;
            if (k == S.nret) {
                if (S.nret < MAXRET) S.ret[S.nret++] = va + 4;
                else S.ret_full = 1;
            }
        }
        if (i == 0 || s != rs) {
            b->run[b->nrun++].c = sym_ctr(s);
            rs = s;
        }
        tbrun *r = &b->run[b->nrun - 1];
        r->ni++, r->nd += is_sdot(w), r->nm += is_smmla(w);
    }
    for (int i = 0; i < b->nrun; i++) {
        tbrun *r = &b->run[i];
        b->ni += r->ni, b->nd += r->nd, b->nm += r->nm;
        if (!r->c || !r->c->wait) b->nwork += r->ni;
        if (!r->c) r->c = &S.total; /* out of memory for a symbol: its counts go to the total's slot */
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, b);
}

/* at translation: the block's counts, split into runs of one symbol when per-symbol counts are on */
static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    if (S.thr) {
        if (n) trans_thr(tb, n);
        return;
    }
    uint64_t ni = 0, nd = 0, nm = 0, ri = 0, rd = 0, rm = 0;
    const char *rs = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct qemu_plugin_insn *in = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w = 0;
        if (qemu_plugin_insn_size(in) == 4) memcpy(&w, qemu_plugin_insn_data(in), 4); /* little-endian guest */
        const int d = is_sdot(w), m = is_smmla(w);
        ni++, nd += d, nm += m;
        if (S.per_sym) {
            const char *s = qemu_plugin_insn_symbol(in);
            if (i > 0 && s != rs) {
                ctr *c = sym_ctr(rs);
                if (c) add_run(tb, c, ri, rd, rm);
                ri = rd = rm = 0;
            }
            rs = s;
            ri++, rd += d, rm += m;
        }
    }
    add_run(tb, &S.total, ni, nd, nm);
    if (S.per_sym && ri) {
        ctr *c = sym_ctr(rs);
        if (c) add_run(tb, c, ri, rd, rm);
    }
}

static int by_insns(const void *a, const void *b) {
    const ctr *x = *(ctr *const *)a, *y = *(ctr *const *)b;
    return x->insns < y->insns ? 1 : x->insns > y->insns ? -1 : strcmp(x->name, y->name);
}

/* at exit: "total/sdot/smmla N" lines, then "sym INSNS SDOT SMMLA NAME" by count; thr=1 adds
 * "thread V INSNS WORK WAIT OUTSIDE TASK SDOT SMMLA" per vCPU, "dispatches/crit/dsum N" and
 * "tsym V INSNS WAIT NAME" per vCPU and symbol, "ssym INSNS WAIT NAME" on vCPU 0 outside tasks */
static void on_exit_cb(qemu_plugin_id_t id, void *u) {
    (void)id, (void)u;
    FILE *f = S.out ? fopen(S.out, "w") : NULL;
    char line[512];
#define EMIT(...)                                                                                 \
    do {                                                                                          \
        snprintf(line, sizeof line, __VA_ARGS__);                                                 \
        if (f) fputs(line, f);                                                                    \
        else qemu_plugin_outs(line);                                                              \
    } while (0)
    if (S.out && !f) {
        snprintf(line, sizeof line, "kz-icount: cannot write %s; counts follow on stderr\n", S.out);
        qemu_plugin_outs(line);
    }
    if (S.thr) {
        close_dispatch();
        S.total.insns = S.total.sdot = S.total.smmla = 0;
        for (int i = 0; i < MAXV; i++)
            S.total.insns += S.v[i].insns, S.total.sdot += S.v[i].sdot, S.total.smmla += S.v[i].smmla;
        if (S.vover) EMIT("warning more than %d threads: the last slot holds several\n", MAXV);
        if (S.ret_full) EMIT("warning more than %d task return points: some task ends missed\n", MAXRET);
    }
    EMIT("total %" PRIu64 "\nsdot %" PRIu64 "\nsmmla %" PRIu64 "\n", S.total.insns, S.total.sdot, S.total.smmla);
    if (S.thr) {
        for (int i = 0; i < MAXV; i++) {
            const vstate *v = &S.v[i];
            if (v->seen)
                EMIT("thread %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                     i, v->insns, v->work, v->wait, v->outside, v->task, v->sdot, v->smmla);
        }
        EMIT("dispatches %" PRIu64 "\ncrit %" PRIu64 "\ndsum %" PRIu64 "\n", S.ndisp, S.crit, S.dsum);
        for (int i = 0; S.lock && i < MAXV; i++)
            if (S.v[i].seen) EMIT("vtime %d %" PRIu64 " %" PRIu64 "\n", i, S.v[i].vt, S.v[i].jump);
        if (S.lock) EMIT("stalls %" PRIu64 "\nwakes %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", S.stalls, S.n_wake, S.j_wake, S.n_ret, S.j_ret);
    }
    if (S.per_sym && S.n) {
        ctr **v = malloc(S.n * sizeof *v);
        size_t k = 0;
        for (size_t i = 0; v && i < S.cap; i++)
            if (S.tab[i]) {
                ctr *c = S.tab[i];
                if (S.thr)
                    for (int t = 0; t < MAXV; t++) c->insns += c->tv[t];
                v[k++] = c;
            }
        if (v) {
            qsort(v, k, sizeof *v, by_insns);
            for (size_t i = 0; i < k && v[i]->insns; i++)
                EMIT("sym %" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n", v[i]->insns, v[i]->sdot, v[i]->smmla, v[i]->name);
            for (size_t i = 0; S.thr && i < k && v[i]->insns; i++)
                for (int t = 0; t < MAXV; t++)
                    if (v[i]->tv[t]) EMIT("tsym %d %" PRIu64 " %d %s\n", t, v[i]->tv[t], v[i]->wait, v[i]->name);
            for (size_t i = 0; S.thr && i < k && v[i]->insns; i++)
                if (v[i]->ser) EMIT("ssym %" PRIu64 " %d %s\n", v[i]->ser, v[i]->wait, v[i]->name);
            free(v);
        }
    }
#undef EMIT
    if (f) fclose(f);
}

/* "a:b:c" into pat[] (the argument string stays alive: QEMU keeps argv) */
static int split_names(char *s, char **pat, int *np) {
    for (char *t = strtok(s, ":"); t; t = strtok(NULL, ":")) {
        if (*np >= MAXPAT) return -1;
        pat[(*np)++] = t;
    }
    return 0;
}

QPLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    if (info->version.min > 1 || info->version.cur < 1) {
        qemu_plugin_outs("kz-icount: this QEMU does not offer plugin API version 1\n");
        return -1;
    }
    if (strcmp(info->target_name, "aarch64") != 0) {
        qemu_plugin_outs("kz-icount: the SDOT/SMMLA decoding is for AArch64 guests only\n");
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        int bad = 0;
        if (!strncmp(argv[i], "out=", 4)) S.out = argv[i] + 4;
        else if (!strcmp(argv[i], "sym=1") || !strcmp(argv[i], "sym=on")) S.per_sym = 1;
        else if (!strcmp(argv[i], "sym=0") || !strcmp(argv[i], "sym=off")) S.per_sym = 0;
        else if (!strcmp(argv[i], "thr=1") || !strcmp(argv[i], "thr=on")) S.thr = 1;
        else if (!strcmp(argv[i], "thr=0") || !strcmp(argv[i], "thr=off")) S.thr = 0;
        else if (!strncmp(argv[i], "lock=", 5)) {
            char *e;
            S.lock = strtoull(argv[i] + 5, &e, 0);
            bad = *e != 0;
        }
        else if (!strncmp(argv[i], "wait=", 5)) bad = split_names(argv[i] + 5, S.wait, &S.nwait);
        else if (!strncmp(argv[i], "par=", 4)) bad = split_names(argv[i] + 4, S.par, &S.npar);
        else if (!strncmp(argv[i], "disp=", 5)) {
            char *e;
            S.disp = strtoull(argv[i] + 5, &e, 0);
            bad = *e != 0 || !S.disp;
        } else bad = 1;
        if (bad) {
            char line[400];
            snprintf(line, sizeof line,
                     "kz-icount: bad argument '%.200s' (use out=FILE, sym=1, thr=1, wait=A:B*, par=F:G, disp=0xADDR, lock=Q; "
                     "at most %d names)\n", argv[i], MAXPAT);
            qemu_plugin_outs(line);
            return -1;
        }
    }
    S.total.name = "(total)";
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    if (S.lock && !S.thr) {
        qemu_plugin_outs("kz-icount: lock= needs thr=1\n");
        return -1;
    }
    if (S.lock) {
        qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
        qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
    }
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
