/* ggml tensor type ids as stored in GGUF files, and their block geometry. */
#ifndef KZ_TYPES_H
#define KZ_TYPES_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KZ_T_F32 = 0, KZ_T_F16 = 1, KZ_T_Q4_0 = 2, KZ_T_Q4_1 = 3,
    KZ_T_Q5_0 = 6, KZ_T_Q5_1 = 7, KZ_T_Q8_0 = 8, KZ_T_Q8_1 = 9,
    KZ_T_Q2_K = 10, KZ_T_Q3_K = 11, KZ_T_Q4_K = 12, KZ_T_Q5_K = 13, KZ_T_Q6_K = 14, KZ_T_Q8_K = 15,
    KZ_T_IQ2_XXS = 16, KZ_T_IQ2_XS = 17, KZ_T_IQ3_XXS = 18, KZ_T_IQ1_S = 19, KZ_T_IQ4_NL = 20,
    KZ_T_IQ3_S = 21, KZ_T_IQ2_S = 22, KZ_T_IQ4_XS = 23, KZ_T_I8 = 24, KZ_T_I16 = 25, KZ_T_I32 = 26,
    KZ_T_I64 = 27, KZ_T_F64 = 28, KZ_T_IQ1_M = 29, KZ_T_BF16 = 30,
    KZ_T_TQ1_0 = 34, KZ_T_TQ2_0 = 35, KZ_T_MXFP4 = 39, KZ_T_NVFP4 = 40, KZ_T_Q1_0 = 41, KZ_T_Q2_0 = 42,
    KZ_T_COUNT = 43
} kz_type;

typedef struct {
    const char *name;   /* "Q4_0"; NULL for ids that are not (or no longer) valid */
    uint32_t blck;      /* elements per block */
    uint32_t bytes;     /* bytes per block */
} kz_type_info;

/* NULL if id is unknown/removed. */
const kz_type_info *kz_type_get(uint32_t id);
/* Type id from a name like "q4_0" (case-insensitive); -1 if unknown. */
int kz_type_from_name(const char *name);
/* Bytes of one row of n elements; 0 if n is not a multiple of the block size or type invalid. */
size_t kz_row_bytes(uint32_t type, int64_t n);

#endif
