/* kz-icount: a QEMU TCG plugin (qemu-user, AArch64 guest) that counts executed guest
 * instructions: the total, SDOT and SMMLA from their encodings, and per ELF symbol.
 *
 *   qemu-aarch64 -cpu max -plugin build/kz-icount.so,out=FILE[,sym=1] ./prog args
 *
 * Counts are instructions, not cycles: every instruction weighs 1 whatever its latency.
 * Counters are added inline per translated block (no callback per instruction), and are not
 * atomic: run the guest on one thread. Built against the plugin API version 1 of QEMU 7.x; the
 * declarations below restate that API's C interface (include/qemu/qemu-plugin.h), which Debian
 * does not install. */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
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

/* one counter set; ctr structs are never moved (inline ops hold their addresses) */
typedef struct ctr {
    const char *name;
    uint64_t insns, sdot, smmla;
} ctr;

/* all the plugin's state: one plugin instance per process (QEMU's model) */
static struct {
    ctr total;
    int per_sym;
    char *out;
    ctr **tab; /* open addressing on the symbol string's address (QEMU returns stable pointers) */
    size_t cap, n;
} S;

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
    c->name = name;
    S.tab[h] = c;
    S.n++;
    return c;
}

static void add_run(struct qemu_plugin_tb *tb, ctr *c, uint64_t ni, uint64_t nd, uint64_t nm) {
    if (ni) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->insns, ni);
    if (nd) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->sdot, nd);
    if (nm) qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &c->smmla, nm);
}

/* at translation: the block's counts, split into runs of one symbol when per-symbol counts are on */
static void on_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
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

/* at exit: "total/sdot/smmla N" lines, then "sym INSNS SDOT SMMLA NAME" by count */
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
    EMIT("total %" PRIu64 "\nsdot %" PRIu64 "\nsmmla %" PRIu64 "\n", S.total.insns, S.total.sdot, S.total.smmla);
    if (S.per_sym && S.n) {
        ctr **v = malloc(S.n * sizeof *v);
        size_t k = 0;
        for (size_t i = 0; v && i < S.cap; i++)
            if (S.tab[i]) v[k++] = S.tab[i];
        if (v) {
            qsort(v, k, sizeof *v, by_insns);
            for (size_t i = 0; i < k && v[i]->insns; i++)
                EMIT("sym %" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n", v[i]->insns, v[i]->sdot, v[i]->smmla, v[i]->name);
            free(v);
        }
    }
#undef EMIT
    if (f) fclose(f);
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
        if (!strncmp(argv[i], "out=", 4)) S.out = argv[i] + 4;
        else if (!strcmp(argv[i], "sym=1") || !strcmp(argv[i], "sym=on")) S.per_sym = 1;
        else if (!strcmp(argv[i], "sym=0") || !strcmp(argv[i], "sym=off")) S.per_sym = 0;
        else {
            char line[300];
            snprintf(line, sizeof line, "kz-icount: unknown argument '%.200s' (use out=FILE, sym=1)\n", argv[i]);
            qemu_plugin_outs(line);
            return -1;
        }
    }
    S.total.name = "(total)";
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_trans);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
