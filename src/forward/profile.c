/* Optional per-part wall-time breakdown of kz_forward (forward/seq.h); the marks are prof()
 * in internal.h. */
#include <stdio.h>
#include <string.h>
#include "forward/internal.h"

void kz_seq_profile_enable(kz_seq *s, int on) {
    if (!s) return;
    s->prof_on = on != 0;
    memset(&s->prof, 0, sizeof s->prof);
}
const kz_profile *kz_seq_profile(const kz_seq *s) { return s ? &s->prof : NULL; }

const char *kz_prof_name(int part) {
    static const char *names[KZ_PROF_COUNT] = {"embed", "norm+residual", "attn matmuls", "attention",
                                               "gdn matmuls", "gdn conv+qk", "gdn core+norm",
                                               "ffn matmuls", "ffn swiglu", "lm head"};
    return part >= 0 && part < KZ_PROF_COUNT ? names[part] : "?";
}

void kz_profile_print(const kz_profile *p, FILE *f) {
    double tot = 0;
    for (int i = 0; i < KZ_PROF_COUNT; i++) tot += p->ms[i];
    fprintf(f, "profile: %ld tokens in %ld forward calls, %.1f ms\n", p->tokens, p->calls, tot);
    fprintf(f, "  %-14s %10s %7s %10s\n", "part", "ms", "%", "us/token");
    for (int i = 0; i < KZ_PROF_COUNT; i++)
        fprintf(f, "  %-14s %10.2f %6.1f%% %10.2f\n", kz_prof_name(i), p->ms[i], tot > 0 ? 100.0 * p->ms[i] / tot : 0.0,
                p->tokens ? 1e3 * p->ms[i] / (double)p->tokens : 0.0);
}
