/* Large buffers streamed whole every token (repacked weights, the recurrent state). */
#ifndef KZ_MEM_H
#define KZ_MEM_H
#include <stddef.h>

/* bytes aligned to 2 MiB and advised onto transparent huge pages where the kernel offers them
 * (madvise mode): fewer page faults while filling, no TLB miss every 4 KiB while streaming.
 * Not zeroed; NULL when out of memory; release with free(). */
void *kz_alloc_huge(size_t bytes);
#endif
