/* Memory read bandwidth sampler: see membw.c. */
#ifndef KZ_MEMBW_H
#define KZ_MEMBW_H
#include <stddef.h>
typedef struct kz_membw kz_membw;
/* a filled buffer of mib MiB (transparent huge pages where offered) and a pool of n_threads;
 * NULL with a message in err on failure */
kz_membw *kz_membw_open(int n_threads, size_t mib, char *err, size_t errlen);
/* one timed read pass: GB/s (1e9 bytes/s), or -1 (message in err) if the checksum is wrong */
double kz_membw_pass(kz_membw *b, char *err, size_t errlen);
/* the read build the samples use, the fastest here at open: "generic", "avx2" or "avx512" */
const char *kz_membw_method(const kz_membw *b);
/* bytes of the buffer (resident from open to close) */
size_t kz_membw_bytes(const kz_membw *b);
void kz_membw_close(kz_membw *b);
#endif
