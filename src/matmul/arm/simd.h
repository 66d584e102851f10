/* The AArch64 SIMD preamble, included first by neon.c, dotprod.c and i8mm.c (and by the
 * templates they instantiate). */
#ifndef KZ_MATMUL_ARM_SIMD_H
#define KZ_MATMUL_ARM_SIMD_H
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "matmul/simd.h"
#include "sys/fp16.h"

/* The float part of the integer kernels must round like the scalar reference (product, then
 * add): no contraction into FMADD, whatever the build flags. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif
