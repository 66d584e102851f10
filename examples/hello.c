/* The README's C example, built and run by `make test` (make example): load a GGUF model,
 * answer one prompt, stream the text to stdout. Only the public header is needed. */
#include <stdio.h>
#include "kazeia.h"

static int on_piece(const char *piece, size_t len, void *userdata) {
    (void)userdata;
    fwrite(piece, 1, len, stdout);
    return 0; /* non-zero stops the generation */
}

int main(int argc, char **argv) {
    char err[512];
    if (argc != 2) { fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]); return 2; }
    kz_model_params mp = kz_model_default_params();
    kz_model *m = kz_model_load(argv[1], &mp, err, sizeof err);
    if (!m) { fprintf(stderr, "%s\n", err); return 1; }
    kz_context_params cp = kz_context_default_params();
    kz_context *c = kz_context_new(m, &cp, err, sizeof err);
    if (!c) { fprintf(stderr, "%s\n", err); kz_model_free(m); return 1; }
    kz_stats st;
    int rc = kz_generate(c, NULL, "What is the capital of France?", 32, on_piece, NULL, &st);
    if (rc != 0) fprintf(stderr, "%s\n", kz_context_error(c));
    else printf("\n(%d prompt tokens, %d generated)\n", st.n_prompt, st.n_gen);
    kz_context_free(c);
    kz_model_free(m);
    return rc != 0;
}
