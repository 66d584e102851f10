#include "sys/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

void *kz_alloc_huge(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* advisory: ignore failure */
#endif
    return p;
}
