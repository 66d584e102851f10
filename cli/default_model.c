/* The default model (models/kazeia-default.gguf, trained by training/), built into the kazeia
 * binary so that `kazeia run -p ...` works without -m wherever the binary goes. */
#include <stddef.h>
#include "cli.h"

/* .incbin keeps the file out of the C compiler (a 10 MB array initialiser is slow to compile);
 * 64-byte alignment covers the GGUF data alignment (32) the loader checks. */
__asm__(".pushsection .rodata\n"
        ".balign 64\n"
        ".globl kz_cli_default_gguf\n"
        "kz_cli_default_gguf:\n"
        ".incbin \"" KZ_DEFAULT_MODEL_FILE "\"\n"
        ".globl kz_cli_default_gguf_end\n"
        "kz_cli_default_gguf_end:\n"
        ".popsection\n");

extern const unsigned char kz_cli_default_gguf[], kz_cli_default_gguf_end[];

kz_model *cli_default_model(const kz_model_params *p, char *err, size_t errlen) {
    size_t n = (size_t)(kz_cli_default_gguf_end - kz_cli_default_gguf);
    return kz_model_load_memory(kz_cli_default_gguf, n, "kazeia-default.gguf (built in)", p, err, errlen);
}
