/* Guest program for the kz-icount self-test (bench/arm_icount.sh --selftest): a loop with a
 * known mix of SDOT (vector and by element), SMMLA and their unsigned twins, which the plugin
 * must not count. */
#include <arm_neon.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    const long n = argc > 1 ? atol(argv[1]) : 1000;
    int8x16_t a = vdupq_n_s8((int8_t)argc), b = vdupq_n_s8(3);
    uint8x16_t ua = vdupq_n_u8((uint8_t)argc), ub = vdupq_n_u8(5);
    int32x4_t s = vdupq_n_s32(0);
    uint32x4_t u = vdupq_n_u32(0);
    for (long i = 0; i < n; i++) {
        __asm__ volatile("sdot %0.4s, %1.16b, %2.16b\n\t"
                         "sdot %0.4s, %1.16b, %2.4b[1]\n\t"
                         "sdot %0.2s, %1.8b, %2.4b[3]\n\t"
                         "smmla %0.4s, %1.16b, %2.16b\n\t"
                         "smmla %0.4s, %2.16b, %1.16b\n\t"
                         "udot %3.4s, %4.16b, %5.16b\n\t"
                         "udot %3.4s, %4.16b, %5.4b[2]\n\t"
                         "ummla %3.4s, %4.16b, %5.16b\n\t"
                         "usmmla %0.4s, %4.16b, %1.16b\n\t"
                         : "+w"(s), "+w"(a), "+w"(b), "+w"(u), "+w"(ua), "+w"(ub));
    }
    printf("%d %u\n", vgetq_lane_s32(s, 0), vgetq_lane_u32(u, 1));
    return 0;
}
