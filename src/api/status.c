/* Version and status names (include/kazeia.h), and the status a failure message implies. */
#include <string.h>
#include "kazeia.h"
#include "api/api.h"

const char *kz_version(void) { return KZ_VERSION; }

const char *kz_status_name(kz_status s) {
    switch (s) {
    case KZ_OK: return "ok";
    case KZ_ERR_INVALID_ARG: return "invalid argument";
    case KZ_ERR_IO: return "i/o error";
    case KZ_ERR_FORMAT: return "bad format";
    case KZ_ERR_UNSUPPORTED: return "unsupported";
    case KZ_ERR_NOMEM: return "out of memory";
    case KZ_ERR_CTX_FULL: return "context full";
    case KZ_ERR_CANCELLED: return "cancelled";
    case KZ_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

/* The loaders below the API (GGUF reader, model, sequence, state image) report failures as
 * messages only; these phrases are theirs. tests/test_api.c checks one case of each kind. */
kz_status kz_status_from_message(const char *msg, kz_status otherwise) {
    static const struct { const char *phrase; kz_status st; } k[] = {
        { "out of memory", KZ_ERR_NOMEM },        { "address space", KZ_ERR_NOMEM },
        { "of RAM", KZ_ERR_NOMEM },               { "cannot create a pool", KZ_ERR_NOMEM },
        { "state size overflows", KZ_ERR_NOMEM }, { "cannot open", KZ_ERR_IO },
        { "cannot stat", KZ_ERR_IO },             { "not a regular file", KZ_ERR_IO },
        { "mmap failed", KZ_ERR_IO },             { "cannot read", KZ_ERR_IO },
        { "cannot create", KZ_ERR_IO },           { "cannot write", KZ_ERR_IO },
        { "not supported", KZ_ERR_UNSUPPORTED },  { "unsupported", KZ_ERR_UNSUPPORTED },
        { "needs a head_dim", KZ_ERR_UNSUPPORTED },
    };
    if (!msg) return otherwise;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strstr(msg, k[i].phrase)) return k[i].st;
    return otherwise;
}
