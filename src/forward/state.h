/* Saved sequence state ("prompt state"): a versioned binary image of everything a sequence
 * needs to continue exactly where it was (token history, KV rows [0, n_past), GDN conv and
 * recurrent states, position, optionally the last logits, the MTP draft cache when it is
 * filled), tied to the model by a fingerprint. Format (host byte order, version 2) in state.c. */
#ifndef KZ_STATE_H
#define KZ_STATE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "forward/seq.h"

#define KZ_STATE_VERSION 2 /* 2: + the MTP draft cache; version 1 images still load */

/* 64-bit hash of what makes two GGUF models interchangeable for a saved state: arch,
 * hparams, tensor count, and every tensor's name, shape and type (not the weights). */
uint64_t kz_model_fingerprint(const kz_model *m);

/* Bytes of the image of s holding hist[0..n_past) (+ n_vocab logits when with_logits). */
size_t kz_state_image_size(const kz_model *m, kz_seq *s, int with_logits);

/* Write the image to buf (cap bytes) or, when f != NULL, to f. hist: the n_past tokens in s;
 * logits: NULL or n_vocab floats after the last of them. checksum = 0 leaves the trailer 0
 * and flags it (in-memory snapshots, which never leave the process). Returns bytes written,
 * 0 on error (message in err). */
size_t kz_state_image_write(const kz_model *m, kz_seq *s, const int32_t *hist, const float *logits, int checksum,
                            void *buf, size_t cap, FILE *f, char *err, size_t errlen);

typedef struct {
    int n_past;     /* tokens restored */
    int has_logits; /* logits were saved and copied out */
} kz_state_info;

/* Validate the whole image first (magic, version, byte order, size, checksum when present,
 * model fingerprint, KV type and n_ctx of s), then restore it into s, hist (capacity
 * hist_cap >= n_past) and logits (n_vocab floats; NULL to ignore saved logits). On error s is
 * unchanged and a one-line message is in err. Returns 0 or -1. */
int kz_state_image_read(const kz_model *m, kz_seq *s, const void *buf, size_t len, int32_t *hist, int hist_cap,
                        float *logits, kz_state_info *info, char *err, size_t errlen);
#endif
