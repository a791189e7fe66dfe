/* Host memory for the large streamed arrays (runtime/host_array.h says why huge pages).
 *
 * Explained in docs/offload.md, "Memory layout". */
#include "runtime/host_array.h"
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

void *zoe_host_array_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < ZOE_HOST_ARRAY_HUGE_MIN) {
        size_t rounded = (bytes + 63) / 64 * 64;
        return aligned_alloc(64, rounded ? rounded : 64);
    }
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* Advice only: a kernel without THP refuses it, and 4 KiB pages are still correct. */
    if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}
