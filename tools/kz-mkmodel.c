/* kz-mkmodel: write a random-weight qwen35 / qwen3 GGUF with real (or tiny) shapes.
 *   kz-mkmodel --arch qwen35 --preset qwen35-4b --type q4_0 [--vocab V.gguf] [--seed N] -o out.gguf
 * Every hparam can be overridden (--n-embd, --n-layer, ...); see --help. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "tools/mkmodel/mkmodel.h"
#include "cli/args.h"
#include "model/types.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kz-mkmodel [--arch qwen35|qwen3] [--preset NAME] [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|iq4_nl|q2_k|q3_k|q4_k|q5_k|q6_k|iq4_xs|q4_k_m]\n"
            "                  [--vocab VOCAB.gguf] [--seed N] [overrides] -o OUT.gguf\n"
            "presets:");
    for (const char *const *p = kz_mkmodel_preset_names(); *p; p++) fprintf(f, " %s", *p);
    fprintf(f,
            "\n(default preset: <arch>-tiny; default type f16)\n"
            "overrides:\n"
            "  --n-layer N  --n-embd N  --n-ff N  --n-vocab N  --n-ctx N\n"
            "  --n-head N  --n-head-kv N  --head-dim N  --n-rot N  --rms-eps X  --rope-base X\n"
            "  --rope-sections A,B,C,D         (qwen35; default 11,11,10,0 scaled to n_rot/2)\n"
            "  --interval N                    (qwen35 full_attention_interval)\n"
            "  --ssm-conv N  --ssm-state N  --ssm-k-heads N  --ssm-v-heads N  --ssm-inner N  (qwen35 GDN)\n"
            "  --nextn N                       (qwen35: append N MTP blocks)\n"
            "  --tied | --untied               (output.weight absent / present)\n"
            "  --name S  --threads N  -q (quiet)\n");
}

static size_t file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n > 0 ? (size_t)n : 0;
}

int main(int argc, char **argv) {
    const char *arch = NULL, *preset = NULL, *type = "f16", *outp = NULL;
    int quiet = 0;
    /* pass 1: the base (arch / preset), so overrides apply on top whatever their order */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 < argc && !strcmp(argv[i], "--arch")) arch = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--preset")) preset = argv[++i];
    }
    char defpreset[32];
    if (!preset) {
        snprintf(defpreset, sizeof defpreset, "%s-tiny", arch ? arch : "qwen35");
        preset = defpreset;
    }
    kz_mkmodel_cfg c;
    if (kz_mkmodel_preset(preset, &c)) {
        fprintf(stderr, "kz-mkmodel: unknown preset '%s'\n", preset);
        usage(stderr);
        return 2;
    }
    if (arch && strcmp(arch, c.arch)) {
        fprintf(stderr, "kz-mkmodel: preset '%s' is arch %s, not %s\n", preset, c.arch, arch);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        long v;
        if (!strcmp(o, "--tied")) { c.tied = 1; continue; }
        if (!strcmp(o, "--untied")) { c.tied = 0; continue; }
        if (!strcmp(o, "-q") || !strcmp(o, "--quiet")) { quiet = 1; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "kz-mkmodel: unknown option or missing value: %s\n", o);
            usage(stderr);
            return 2;
        }
        const char *a = argv[++i];
        struct { const char *opt; int *dst; long lo, hi; } ints[] = {
            { "--n-layer", &c.n_layer, 1, 4096 }, { "--n-embd", &c.n_embd, 1, 1 << 20 },
            { "--n-ff", &c.n_ff, 1, 1 << 20 }, { "--n-vocab", &c.n_vocab, 1, 1 << 24 },
            { "--n-ctx", &c.n_ctx_train, 1, 1 << 30 }, { "--n-head", &c.n_head, 1, 4096 },
            { "--n-head-kv", &c.n_head_kv, 1, 4096 }, { "--head-dim", &c.head_dim, 1, 1 << 16 },
            { "--n-rot", &c.n_rot, 2, 1 << 16 }, { "--interval", &c.full_attn_interval, 1, 4096 },
            { "--ssm-conv", &c.ssm_d_conv, 1, 64 }, { "--ssm-state", &c.ssm_d_state, 1, 1 << 16 },
            { "--ssm-k-heads", &c.ssm_n_group, 1, 4096 }, { "--ssm-v-heads", &c.ssm_dt_rank, 1, 4096 },
            { "--ssm-inner", &c.ssm_d_inner, 1, 1 << 20 }, { "--nextn", &c.n_nextn, 0, 16 },
            { "--threads", &c.n_threads, 1, 512 },
        };
        int done = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(o, ints[k].opt)) {
                if (kz_arg_long("kz-mkmodel", o, a, ints[k].lo, ints[k].hi, &v)) return 2;
                *ints[k].dst = (int)v;
                done = 1;
            }
        if (done) continue;
        if (!strcmp(o, "--arch") || !strcmp(o, "--preset")) continue;
        if (!strcmp(o, "--type")) type = a;
        else if (!strcmp(o, "--vocab")) c.vocab_path = a;
        else if (!strcmp(o, "-o") || !strcmp(o, "--out")) outp = a;
        else if (!strcmp(o, "--name")) snprintf(c.name, sizeof c.name, "%s", a);
        else if (!strcmp(o, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(a, &end, 0);
            if (errno || end == a || *end) {
                fprintf(stderr, "kz-mkmodel: --seed expects an integer, got '%s'\n", a);
                return 2;
            }
            c.seed = s;
        } else if (!strcmp(o, "--rms-eps")) {
            if (kz_arg_float("kz-mkmodel", o, a, 1, &c.rms_eps)) return 2;
        } else if (!strcmp(o, "--rope-base")) {
            if (kz_arg_float("kz-mkmodel", o, a, 1, &c.rope_base)) return 2;
        } else if (!strcmp(o, "--rope-sections")) {
            int s[4], n = 0;
            char tail;
            n = sscanf(a, "%d,%d,%d,%d%c", &s[0], &s[1], &s[2], &s[3], &tail);
            if (n != 4) {
                fprintf(stderr, "kz-mkmodel: --rope-sections expects A,B,C,D, got '%s'\n", a);
                return 2;
            }
            memcpy(c.rope_sections, s, sizeof s);
        } else {
            fprintf(stderr, "kz-mkmodel: unknown option %s\n", o);
            usage(stderr);
            return 2;
        }
    }
    if (!outp) {
        fprintf(stderr, "kz-mkmodel: no output file (-o OUT.gguf)\n");
        usage(stderr);
        return 2;
    }
    /* q4_k_m: llama-quantize's Q4_K_M per-tensor mix (Q4_K, Q6_K where it uses more bits) */
    c.mix = !strcasecmp(type, "q4_k_m") ? KZ_MKMODEL_MIX_Q4_K_M : 0;
    int t = c.mix ? (int)KZ_T_Q4_K : kz_type_from_name(type);
    if (t < 0 || kz_mkmodel_file_type((uint32_t)t) < 0) {
        fprintf(stderr, "kz-mkmodel: --type %s is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, q4_k_m\n", type);
        return 2;
    }
    c.wtype = (uint32_t)t;
    c.log = quiet ? NULL : stderr;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char err[512];
    if (kz_mkmodel_write(&c, outp, err, sizeof err)) {
        fprintf(stderr, "kz-mkmodel: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!quiet)
        fprintf(stderr, "kz-mkmodel: wrote %s (%s %s, %s, %.1f MB) in %.1f s\n", outp, c.arch, preset,
                kz_type_get((uint32_t)t)->name, file_size(outp) / 1e6,
                (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return 0;
}
