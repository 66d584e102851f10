/* ggml tensor type table (ids as stored in GGUF) and block geometry helpers. */
#include "model/types.h"

#include <ctype.h>
#include <stdint.h>

/* Indexed by type id. Removed ids (4, 5, 31-33, 36-38) have name NULL so every lookup rejects
 * them. Q8_1 is 36 bytes as in ggml's block_q8_1 {half d, half s, int8 qs[32]} (gguf-py says 40;
 * the type never appears in model files). */
static const kz_type_info k_types[KZ_T_COUNT] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},     [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 36},     [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74}, [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110}, [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},  [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},   [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},   [42] = {"Q2_0", 64, 18},
};

const kz_type_info *kz_type_get(uint32_t id) {
    if (id >= KZ_T_COUNT || !k_types[id].name) return NULL;
    return &k_types[id];
}

int kz_type_from_name(const char *name) {
    if (!name) return -1;
    for (uint32_t id = 0; id < KZ_T_COUNT; id++) {
        const char *a = k_types[id].name, *b = name;
        if (!a) continue;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return (int)id;
    }
    return -1;
}

size_t kz_row_bytes(uint32_t type, int64_t n) {
    const kz_type_info *t = kz_type_get(type);
    if (!t || n <= 0 || n % t->blck) return 0;
    uint64_t blocks = (uint64_t)n / t->blck;
    if (blocks > SIZE_MAX / t->bytes) return 0; /* would overflow size_t */
    return (size_t)(blocks * t->bytes);
}
