/* Internal additions to the guard API (src/api/guard.c) for the tests: a test double that
 * scripts what the guard model "says", and a count of the tokens it evaluated. */
#ifndef KZ_API_GUARD_H
#define KZ_API_GUARD_H
#include <stddef.h>
#include "kazeia.h"

/* Called in every check right after the forward pass that ends with "Safety:". It may change
 * logits (n_vocab floats: the next-token distribution the label probabilities are read from)
 * and may write the guard's whole output text (from "Safety:" on, NUL-terminated, cap bytes) and
 * return 1: that text is then parsed instead of generating it; return 0 to generate as usual.
 * response: 1 for response checks; check_no counts the guard's checks from 0. */
typedef int (*kz_guard_script_fn)(void *user, int response, int check_no, float *logits, int n_vocab, char *text,
                                  size_t cap);
void kz_guard_set_script(kz_guard *g, kz_guard_script_fn fn, void *user);
/* Tokens the guard's forward passes evaluated since it was created. */
long kz_guard_n_evaluated(const kz_guard *g);
/* Tokens in the guard's sequence now (its KV rows). */
int kz_guard_n_past(const kz_guard *g);
#endif
