/* `kazeia info MODEL.gguf`: header, architecture hparams, every metadata key, tensor table and
 * per-type totals. Uses only the GGUF reader so it also works on vocab-only files. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model/gguf.h"
#include "model/types.h"

typedef unsigned long long ull;

#define STR_SHOW 96   /* bytes of a scalar string shown (chat templates are kilobytes) */
#define ELEM_STR_SHOW 32
#define ARR_SHOW 8    /* array elements shown */

static void info_usage(FILE *f) {
    fprintf(f,
            "usage: kazeia info [options] MODEL.gguf\n"
            "Prints file size, GGUF version and alignment, the architecture and its hparams, every\n"
            "metadata key (type and value; arrays: count and first elements, long strings cut), the\n"
            "tensor table (name, type, shape in ggml ne order, bytes) and totals per type.\n"
            "  --no-tensors   skip the per-tensor table (totals are still printed)\n"
            "  -h, --help     this help\n"
            "Exit status: 0 ok, 1 invalid or unreadable file, 2 usage error.\n");
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void print_scalar(uint32_t t, const uint8_t *p) {
    switch (t) {
    case KZ_GGUF_U8: case KZ_GGUF_U16: case KZ_GGUF_U32: case KZ_GGUF_U64:
        printf("%llu", (ull)le(p, t == KZ_GGUF_U8 ? 1 : t == KZ_GGUF_U16 ? 2 : t == KZ_GGUF_U32 ? 4 : 8));
        break;
    case KZ_GGUF_I8: { int8_t v; memcpy(&v, p, 1); printf("%d", v); break; }
    case KZ_GGUF_I16: { uint16_t b = (uint16_t)le(p, 2); int16_t v; memcpy(&v, &b, 2); printf("%d", v); break; }
    case KZ_GGUF_I32: { uint32_t b = (uint32_t)le(p, 4); int32_t v; memcpy(&v, &b, 4); printf("%d", v); break; }
    case KZ_GGUF_I64: { uint64_t b = le(p, 8); int64_t v; memcpy(&v, &b, 8); printf("%lld", (long long)v); break; }
    case KZ_GGUF_F32: { uint32_t b = (uint32_t)le(p, 4); float v; memcpy(&v, &b, 4); printf("%.9g", v); break; }
    case KZ_GGUF_F64: { uint64_t b = le(p, 8); double v; memcpy(&v, &b, 8); printf("%.17g", v); break; }
    case KZ_GGUF_BOOL: printf("%s", p[0] ? "true" : "false"); break;
    default: printf("?");
    }
}

/* quoted, escaped, cut after max bytes */
static void print_str(kz_str s, uint64_t max) {
    putchar('"');
    uint64_t n = s.len < max ? s.len : max;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c == '\t') printf("\\t");
        else if (c == '\r') printf("\\r");
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (s.len > max) printf("... (%llu bytes)", (ull)s.len);
}

static uint64_t vsize(uint32_t t) {
    static const uint8_t sz[KZ_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < KZ_GGUF_NTYPES ? sz[t] : 0;
}

static void print_value(const kz_gguf_kv *kv) {
    if (kv->type == KZ_GGUF_STR) { print_str(kv->strs[0], STR_SHOW); return; }
    if (kv->type != KZ_GGUF_ARR) { print_scalar(kv->type, kv->data); return; }
    printf("n=%llu [", (ull)kv->n);
    if (kv->arr_type == KZ_GGUF_ARR) { printf("nested arrays]"); return; }
    uint64_t show = kv->n < ARR_SHOW ? kv->n : ARR_SHOW;
    for (uint64_t i = 0; i < show; i++) {
        if (i) printf(", ");
        if (kv->arr_type == KZ_GGUF_STR) print_str(kv->strs[i], ELEM_STR_SHOW);
        else print_scalar(kv->arr_type, kv->data + i * vsize(kv->arr_type));
    }
    if (kv->n > show) printf(", ...");
    printf("]");
}

static void type_label(const kz_gguf_kv *kv, char *buf, size_t n) {
    if (kv->type == KZ_GGUF_ARR) snprintf(buf, n, "arr[%s]", kz_gguf_type_name(kv->arr_type));
    else snprintf(buf, n, "%s", kz_gguf_type_name(kv->type));
}

/* names come from the file: keep one entry per line even if they hold control bytes */
static void put_name(const char *s, int width) {
    int n = 0;
    for (; *s; s++, n++) putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
    for (; n < width; n++) putchar(' ');
}

static void print_kv_line(const kz_gguf_kv *kv, int width) {
    char tl[32];
    type_label(kv, tl, sizeof tl);
    printf("  ");
    put_name(kv->key, width);
    printf(" %-10s ", tl);
    print_value(kv);
    putchar('\n');
}

/* llama_ftype names (gguf-py LlamaFileType) */
static const char *ftype_name(uint32_t ft) {
    static const char *const n[] = {
        [0] = "ALL_F32",         [1] = "MOSTLY_F16",      [2] = "MOSTLY_Q4_0",     [3] = "MOSTLY_Q4_1",
        [7] = "MOSTLY_Q8_0",     [8] = "MOSTLY_Q5_0",     [9] = "MOSTLY_Q5_1",     [10] = "MOSTLY_Q2_K",
        [11] = "MOSTLY_Q3_K_S",  [12] = "MOSTLY_Q3_K_M",  [13] = "MOSTLY_Q3_K_L",  [14] = "MOSTLY_Q4_K_S",
        [15] = "MOSTLY_Q4_K_M",  [16] = "MOSTLY_Q5_K_S",  [17] = "MOSTLY_Q5_K_M",  [18] = "MOSTLY_Q6_K",
        [19] = "MOSTLY_IQ2_XXS", [20] = "MOSTLY_IQ2_XS",  [21] = "MOSTLY_Q2_K_S",  [22] = "MOSTLY_IQ3_XS",
        [23] = "MOSTLY_IQ3_XXS", [24] = "MOSTLY_IQ1_S",   [25] = "MOSTLY_IQ4_NL",  [26] = "MOSTLY_IQ3_S",
        [27] = "MOSTLY_IQ3_M",   [28] = "MOSTLY_IQ2_S",   [29] = "MOSTLY_IQ2_M",   [30] = "MOSTLY_IQ4_XS",
        [31] = "MOSTLY_IQ1_M",   [32] = "MOSTLY_BF16",    [36] = "MOSTLY_TQ1_0",   [37] = "MOSTLY_TQ2_0",
        [38] = "MOSTLY_MXFP4_MOE", [39] = "MOSTLY_NVFP4", [40] = "MOSTLY_Q1_0",
    };
    if (ft == 1024) return "GUESSED";
    return ft < sizeof n / sizeof n[0] && n[ft] ? n[ft] : "unknown";
}

static void human(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", b / (double)(1ull << 20));
    else if (b >= 1024) snprintf(buf, n, "%.2f KiB", b / 1024.0);
    else snprintf(buf, n, "%llu B", (ull)b);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int tensors_table = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { info_usage(stdout); return 0; }
        if (!strcmp(argv[i], "--no-tensors")) { tensors_table = 0; continue; }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kazeia info: unknown option '%s'\n", argv[i]);
            info_usage(stderr);
            return 2;
        }
        if (path) { fprintf(stderr, "kazeia info: more than one model file given\n"); return 2; }
        path = argv[i];
    }
    if (!path) { info_usage(stderr); return 2; }

    char err[512];
    kz_gguf *g = kz_gguf_open(path, err, sizeof err);
    if (!g) { fprintf(stderr, "kazeia info: %s\n", err); return 1; }

    char hb[32];
    human(g->size, hb, sizeof hb);
    printf("file:          %s\n", path);
    printf("size:          %llu bytes (%s)\n", (ull)g->size, hb);
    printf("gguf version:  %u\n", g->version);
    printf("alignment:     %llu\n", (ull)g->alignment);
    printf("data offset:   %llu\n", (ull)g->data_offset);
    printf("counts:        %llu metadata keys, %llu tensors\n", (ull)g->n_kv, (ull)g->n_tensors);

    kz_str arch = {0};
    char archbuf[128] = "";
    if (kz_gguf_get_str(g, "general.architecture", &arch) == 0 && arch.len < sizeof archbuf - 1) {
        memcpy(archbuf, arch.ptr, arch.len);
        archbuf[arch.len] = 0;
    }
    printf("architecture:  %s\n", archbuf[0] ? archbuf : "(none: no general.architecture string)");
    const char *const hdr_keys[][2] = {{"general.name", "name"},
                                       {"general.file_type", "file type"},
                                       {"general.quantization_version", "quant version"},
                                       {"tokenizer.ggml.model", "tokenizer"},
                                       {"tokenizer.ggml.pre", "tokenizer pre"}};
    for (size_t i = 0; i < sizeof hdr_keys / sizeof hdr_keys[0]; i++) {
        const kz_gguf_kv *kv = kz_gguf_get_kv(g, hdr_keys[i][0]);
        if (!kv) continue;
        char lbl[40];
        snprintf(lbl, sizeof lbl, "%s:", hdr_keys[i][1]);
        printf("%-15s", lbl);
        print_value(kv);
        uint32_t ft;
        if (i == 1 && kz_gguf_get_u32(g, "general.file_type", &ft) == 0) printf(" (%s)", ftype_name(ft));
        putchar('\n');
    }
    const kz_gguf_kv *tok = kz_gguf_get_kv(g, "tokenizer.ggml.tokens");
    if (tok && tok->type == KZ_GGUF_ARR) printf("vocab:         %llu tokens\n", (ull)tok->n);

    /* hparams: every <arch>.* key, in file order */
    int width = 24;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        int l = (int)strlen(g->kv[i].key);
        if (l > width) width = l < 56 ? l : 56;
    }
    size_t alen = strlen(archbuf);
    if (alen) {
        printf("hparams (%s.*):\n", archbuf);
        int any = 0;
        for (uint64_t i = 0; i < g->n_kv; i++) {
            const kz_gguf_kv *kv = &g->kv[i];
            if (strncmp(kv->key, archbuf, alen) || kv->key[alen] != '.') continue;
            print_kv_line(kv, width);
            any = 1;
        }
        if (!any) printf("  (none)\n");
    }

    printf("\nmetadata (%llu):\n", (ull)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) print_kv_line(&g->kv[i], width);

    /* tensors */
    int nw = 24;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        int l = (int)strlen(g->tensors[i].name);
        if (l > nw) nw = l;
    }
    uint64_t cnt[KZ_T_COUNT] = {0}, bytes[KZ_T_COUNT] = {0}, elems[KZ_T_COUNT] = {0};
    uint64_t tot_bytes = 0, tot_elems = 0;
    if (tensors_table && g->n_tensors) {
        printf("\ntensors (%llu):\n", (ull)g->n_tensors);
        printf("  %5s  %-*s %-8s %-28s %14s %14s\n", "#", nw, "name", "type", "shape (ne)", "bytes", "offset");
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kz_tensor_info *t = &g->tensors[i];
        uint64_t ne = 1;
        char shape[128];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++) {
            ne *= (uint64_t)t->ne[d];
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        }
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        cnt[t->type]++;
        bytes[t->type] += t->nbytes;
        elems[t->type] += ne;
        tot_bytes += t->nbytes;
        tot_elems += ne;
        if (tensors_table) {
            printf("  %5llu  ", (ull)i);
            put_name(t->name, nw);
            printf(" %-8s %-28s %14llu %14llu\n", kz_type_get(t->type)->name, shape, (ull)t->nbytes, (ull)t->offset);
        }
    }

    printf("\ntotals per type:\n");
    for (uint32_t ty = 0; ty < KZ_T_COUNT; ty++) {
        if (!cnt[ty]) continue;
        human(bytes[ty], hb, sizeof hb);
        printf("  %-8s %6llu tensors %16llu bytes (%s) %14llu elements\n", kz_type_get(ty)->name, (ull)cnt[ty], (ull)bytes[ty], hb,
               (ull)elems[ty]);
    }
    human(tot_bytes, hb, sizeof hb);
    printf("  %-8s %6llu tensors %16llu bytes (%s) %14llu elements", "total", (ull)g->n_tensors, (ull)tot_bytes, hb, (ull)tot_elems);
    if (tot_elems) printf(", %.3f bits/element", 8.0 * (double)tot_bytes / (double)tot_elems);
    putchar('\n');
    kz_gguf_close(g);
    return 0;
}
