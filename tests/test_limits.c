/* Resource limits on hostile or oversized requests: each is a clear one-line error before any
 * large allocation, and the model stays usable.
 *   - n_ctx whose state size overflows, or that needs more than the machine's RAM
 *     (the policy: sequence state is anonymous memory, so it must fit in physical RAM)
 *   - a model with no attention layers gets no n_ctx-sized attention scratch
 *   - a prompt of exactly n_ctx tokens works, n_ctx + 1 is refused, a 1 MB prompt is refused
 *   - tensors declared past the end of the file, or with sizes that overflow 64 bits
 *   - a file larger than the address space (RLIMIT_AS in a child; skipped under ASan, whose
 *     shadow memory needs the address space)
 * "Before any allocation" is checked by running the request in a child whose address space is
 * capped a little above what it uses: an allocation attempted before the check would fail there
 * with "out of memory" instead of the size message. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kazeia.h"
#include "api/api.h"
#include "model/gguf.h"
#include "kt.h"
#include "tools/mkmodel/mkmodel.h"
#include "model/model.h"
#include "model/types.h"

#if defined(__SANITIZE_ADDRESS__)
#define KT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_ASAN 1
#endif
#endif
#ifndef KT_ASAN
#define KT_ASAN 0
#endif

static char g_dir[64];

static kz_model *make(const char *preset, const char *file, int all_gdn) {
    kz_mkmodel_cfg c;
    char path[256], err[512];
    kz_mkmodel_preset(preset, &c);
    c.wtype = KZ_T_F16;
    c.n_threads = 1;
    c.n_layer = 4;
    if (all_gdn) c.full_attn_interval = 100; /* > n_layer: every layer is gated delta net */
    snprintf(path, sizeof path, "%s/%s", g_dir, file);
    if (kz_mkmodel_write(&c, path, err, sizeof err)) { fprintf(stderr, "mkmodel: %s\n", err); return NULL; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = 1;
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    if (!m) fprintf(stderr, "load: %s\n", err);
    return m;
}

static size_t phys_bytes(void) {
    return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGE_SIZE);
}

/* Runs kz_context_new(m, n_ctx) in a child with the address space capped at its current size
 * + 256 MiB (normal builds; under ASan without the cap). Returns 1 if the context was created,
 * 0 if refused; the refusal message goes to msg. */
static int ctx_in_child(kz_model *m, int n_ctx, kz_kv_type kv, char *msg, size_t msglen) {
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (!KT_ASAN) {
            FILE *f = fopen("/proc/self/statm", "r");
            unsigned long pages = 0;
            if (f) { if (fscanf(f, "%lu", &pages) != 1) pages = 0; fclose(f); }
            struct rlimit rl;
            rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGE_SIZE) + (256u << 20);
            if (pages) setrlimit(RLIMIT_AS, &rl);
        }
        kz_context_params p = kz_context_default_params();
        p.n_ctx = n_ctx;
        p.n_threads = 1;
        p.kv_type = kv;
        char err[512] = "";
        kz_context *c = kz_context_new(m, &p, err, sizeof err);
        char out[520];
        int n = snprintf(out, sizeof out, "%c%s", c ? 'Y' : 'N', err);
        if (write(fd[1], out, (size_t)n) != n) _exit(3);
        _exit(0); /* no cleanup: the child only reports */
    }
    close(fd[1]);
    char buf[520];
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n <= 0 || !WIFEXITED(st)) { snprintf(msg, msglen, "(child died)"); return -1; }
    buf[n] = 0;
    snprintf(msg, msglen, "%.500s", buf + 1);
    return buf[0] == 'Y';
}

static void test_n_ctx(kz_model *m, const char *label) {
    char msg[512];
    /* overflow of the size computation: clear message naming n_ctx */
    int r = ctx_in_child(m, INT32_MAX, KZ_KV_F32, msg, sizeof msg);
    CHECKF(r == 0 && strstr(msg, "n_ctx") && !strstr(msg, "out of memory"), "%s INT_MAX: '%s'", label, msg);
    /* fits in size_t but not in RAM: the GiB needed and the RAM are named */
    const kz_hparams *hp = &m->hp;
    double per_tok = 2.0 * hp->n_attn_layers * hp->n_head_kv * hp->head_dim * 4; /* f32 KV */
    double want = (double)phys_bytes() * 1.5 / per_tok;
    if (hp->n_attn_layers && want < INT32_MAX) {
        r = ctx_in_child(m, (int)want, KZ_KV_F32, msg, sizeof msg);
        CHECKF(r == 0 && strstr(msg, "RAM") && strstr(msg, "GiB") && strstr(msg, "n_ctx"),
               "%s n_ctx %d (1.5x RAM): '%s'", label, (int)want, msg);
    }
    printf("%s: n_ctx refusal: %s\n", label, msg);
    /* the model still works */
    kz_context_params p = kz_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 1;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    CHECKF(c != NULL, "%s: %s", label, err);
    kz_context_free(c);
}

/* all-GDN model: sequence state does not grow with n_ctx (no KV, no attention scratch), so a
 * huge n_ctx costs only the token history; in a capped address space it must still work */
static void test_no_attention(kz_model *m) {
    CHECK(m->hp.n_attn_layers == 0 && m->hp.n_gdn_layers == 4);
    char msg[512];
    int r = ctx_in_child(m, 1 << 25, KZ_KV_F32, msg, sizeof msg); /* history: 128 MiB */
    CHECKF(r == 1, "all-GDN model, n_ctx 2^25 in a capped address space: '%s'", msg);
    kz_context_params p = kz_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 1;
    char err[256];
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (c) {
        kz_stats st;
        CHECK(kz_generate(c, NULL, "hi", 4, NULL, NULL, &st) == 0 && st.n_gen >= 1);
        kz_context_free(c);
    }
}

static void test_prompt_len(kz_model *m, const char *label) {
    char err[256];
    kz_context_params p = kz_context_default_params();
    p.n_ctx = 48;
    p.n_batch = 16;
    p.n_threads = 1;
    kz_context *c = kz_context_new(m, &p, err, sizeof err);
    CHECKF(c != NULL, "%s", err);
    if (!c) return;
    /* find a user text whose prompt is exactly n_ctx tokens (synthetic byte vocab: 1 byte = 1 token) */
    char user[128];
    int32_t *pt = NULL;
    int np = 0, k;
    for (k = 1; k < 100; k++) {
        for (int i = 0; i < k; i++) user[i] = (char)('a' + (i * 7) % 26);
        user[k] = 0;
        np = kz_context_prompt_tokens(c, NULL, user, &pt);
        free(pt);
        if (np >= 48) break;
    }
    CHECKF(np == 48, "%s: no user text gives a 48-token prompt (%d)", label, np);
    kz_stats st;
    int r = kz_generate(c, NULL, user, 10, NULL, NULL, &st);
    CHECKF(r == 0 && st.n_prompt == 48 && st.n_gen == 1 && (st.stop == KZ_STOP_CTX_FULL || st.stop == KZ_STOP_EOG),
           "%s: prompt == n_ctx: r %d, prompt %d, gen %d, stop %d", label, r, st.n_prompt, st.n_gen, (int)st.stop);
    CHECK(kz_context_n_past(c) == 48);
    /* one more token: refused before any evaluation, with both sizes in the message */
    user[k] = 'z';
    user[k + 1] = 0;
    r = kz_generate(c, NULL, user, 10, NULL, NULL, &st);
    CHECKF(r == -1 && st.stop == KZ_STOP_ERROR && strstr(kz_context_error(c), "49") && strstr(kz_context_error(c), "48"),
           "%s: prompt n_ctx+1: '%s'", label, kz_context_error(c));
    CHECK(st.n_prompt == 0 && st.n_gen == 0);
    /* a 1 MiB prompt: refused, nothing evaluated */
    size_t big = 1u << 20;
    char *u = malloc(big + 1);
    for (size_t i = 0; i < big; i++) u[i] = (char)('a' + i % 23);
    u[big] = 0;
    kz_context_reset(c);
    r = kz_generate(c, "sys", u, 10, NULL, NULL, &st);
    CHECKF(r == -1 && strstr(kz_context_error(c), "context is 48"), "%s: 1 MiB prompt: '%s'", label, kz_context_error(c));
    CHECK(kz_context_n_past(c) == 0);
    free(u);
    /* and then a normal prompt works */
    r = kz_generate(c, NULL, "hi", 3, NULL, NULL, &st);
    CHECK(r == 0 && st.n_gen >= 1 && kz_context_error(c)[0] == 0);
    kz_context_free(c);
}

/* ---- hand-written hostile files ---- */
static void put32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void putstr(FILE *f, const char *s) { put64(f, strlen(s)); fwrite(s, 1, strlen(s), f); }

/* header + general.architecture + one tensor "token_embd.weight" of shape ne (F32) at
 * offset 0; the file ends after data_bytes bytes of data (a sparse tail when truncate_to) */
static void hostile(const char *path, int nd, const uint64_t *ne, uint32_t type, uint64_t data_bytes) {
    FILE *f = fopen(path, "wb");
    fwrite("GGUF", 1, 4, f);
    put32(f, 3);
    put64(f, 1); /* tensors */
    put64(f, 1); /* kvs */
    putstr(f, "general.architecture");
    put32(f, KZ_GGUF_STR);
    putstr(f, "qwen3");
    putstr(f, "token_embd.weight");
    put32(f, (uint32_t)nd);
    for (int d = 0; d < nd; d++) put64(f, ne[d]);
    put32(f, type);
    put64(f, 0);
    long pos = ftell(f);
    long pad = (32 - pos % 32) % 32;
    for (long i = 0; i < pad; i++) fputc(0, f);
    fclose(f);
    if (data_bytes) { /* sparse: no disk used */
        int fd = open(path, O_WRONLY);
        CHECK(fd >= 0 && ftruncate(fd, pos + pad + (off_t)data_bytes) == 0);
        close(fd);
    }
}

static void test_hostile_tensors(void) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/hostile.gguf", g_dir);
    kz_model_params mp = kz_model_default_params();
    /* 32 x 2^40 floats declared, 4 KiB present */
    uint64_t ne[2] = {32, 1ull << 40};
    hostile(path, 2, ne, KZ_T_F32, 4096);
    kz_model *m = kz_model_load(path, &mp, err, sizeof err);
    CHECKF(!m && strstr(err, "token_embd.weight") && strstr(err, "past the end"), "huge tensor: '%s'", err);
    /* byte size overflowing 64 bits */
    uint64_t ne2[3] = {1ull << 40, 1ull << 30, 64};
    hostile(path, 3, ne2, KZ_T_F32, 0);
    m = kz_model_load(path, &mp, err, sizeof err);
    CHECKF(!m && strstr(err, "token_embd.weight") && strstr(err, "overflow"), "overflowing tensor: '%s'", err);
    kz_model_free(m);
    unlink(path);
}

/* a 3 GiB (sparse) file in a child limited to 1 GiB of address space: the mapping is refused
 * with a message that names the size and the cause */
static void test_address_space(void) {
    if (KT_ASAN) { printf("address-space test skipped under ASan\n"); return; }
    /* qemu-user keeps RLIMIT_AS for itself and ignores the guest's (tests/arm64_full_ci.sh) */
    if (getenv("KZ_TEST_QEMU")) { printf("address-space test skipped under qemu-user\n"); return; }
    char path[256];
    snprintf(path, sizeof path, "%s/big.gguf", g_dir);
    uint64_t ne[2] = {1024, 768ull * 1024}; /* 3 GiB of F32 */
    hostile(path, 2, ne, KZ_T_F32, 3ull << 30);
    int fd[2];
    CHECK(pipe(fd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = 1ull << 30;
        setrlimit(RLIMIT_AS, &rl);
        char err[512] = "";
        kz_model_params mp = kz_model_default_params();
        kz_model *m = kz_model_load(path, &mp, err, sizeof err);
        char out[520];
        int n = snprintf(out, sizeof out, "%c%s", m ? 'Y' : 'N', err);
        if (write(fd[1], out, (size_t)n) != n) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    char buf[520];
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    CHECK(n > 0 && WIFEXITED(st));
    buf[n > 0 ? n : 0] = 0;
    CHECKF(n > 0 && buf[0] == 'N' && strstr(buf, "address space") && strstr(buf, "GiB"),
           "3 GiB file, 1 GiB address space: '%s'", n > 0 ? buf + 1 : "");
    printf("address space: %s\n", n > 0 ? buf + 1 : "");
    unlink(path);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kz_test_limits_%d", (int)getpid());
    char cmd[128];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", g_dir);
    if (system(cmd) != 0) return 1;
    kz_model *m35 = make("qwen35-tiny", "q35.gguf", 0), *m3 = make("qwen3-tiny", "q3.gguf", 0);
    kz_model *gdn = make("qwen35-tiny", "gdn.gguf", 1);
    CHECK(m35 && m3 && gdn);
    if (m35) { test_n_ctx(m35, "qwen35"); test_prompt_len(m35, "qwen35"); }
    if (m3) { test_n_ctx(m3, "qwen3"); test_prompt_len(m3, "qwen3"); }
    if (gdn) test_no_attention(gdn);
    test_hostile_tensors();
    test_address_space();
    kz_model_free(m35);
    kz_model_free(m3);
    kz_model_free(gdn);
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
    KT_END();
}
