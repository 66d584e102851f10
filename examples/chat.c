/* A two-turn conversation (docs/chat.md; built and run by `make test-c`): the second
 * answer sees the first turn, and only the new tokens are evaluated. Only kazeia.h is needed. */
#include <stdio.h>
#include "kazeia.h"

static int on_piece(const char *piece, size_t len, void *userdata) {
    (void)userdata;
    fwrite(piece, 1, len, stdout);
    return 0; /* non-zero stops the answer */
}

int main(int argc, char **argv) {
    char err[512];
    if (argc != 2) { fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]); return 2; }
    kz_model *m = kz_model_load(argv[1], NULL, err, sizeof err);
    if (!m) { fprintf(stderr, "%s\n", err); return 1; }
    kz_context *c = kz_context_new(m, NULL, err, sizeof err);
    kz_chat *chat = c ? kz_chat_new(c, NULL, err, sizeof err) : NULL;
    if (!chat) { fprintf(stderr, "%s\n", err); kz_context_free(c); kz_model_free(m); return 1; }

    const char *questions[2] = {"What is the capital of France?", "And how many people live there?"};
    kz_gen_params gp = kz_gen_default_params(m, 0); /* the model card's sampling, thinking off */
    gp.max_tokens = 48;
    kz_chat_set_system(chat, "You answer in one sentence.");
    int rc = 0;
    for (int turn = 0; turn < 2 && rc == 0; turn++) {
        kz_stats st;
        printf("> %s\n", questions[turn]);
        if (kz_chat_add(chat, KZ_ROLE_USER, questions[turn]) != 0 ||
            kz_chat_reply(chat, &gp, on_piece, NULL, &st) != 0) {
            fprintf(stderr, "%s\n", kz_chat_error(chat));
            rc = 1;
        } else {
            printf("\n(%d prompt tokens evaluated, %d reused, %d generated)\n", st.n_prompt, st.n_reused, st.n_gen);
        }
    }
    kz_chat_free(chat);
    kz_context_free(c);
    kz_model_free(m);
    return rc;
}
