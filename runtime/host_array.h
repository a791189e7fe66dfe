/* Internal: host memory for the large arrays that are streamed end to end (parameters on the CPU
 * backend, gradient partitions, the optimizer's master, m and v).
 *
 * The host Adam moves 28-30 bytes per parameter at the memory bound. With 4 KiB pages each
 * stream crosses a page every 4 KiB: a TLB miss, and the hardware prefetcher starts over at the
 * boundary, which costs the step (with its division and square root it reaches less far ahead)
 * more than a plain streaming pass. Arrays of ZOE_HOST_ARRAY_HUGE_MIN bytes and more are
 * therefore 2 MiB aligned, rounded up to 2 MiB, and advised for transparent huge pages (Linux
 * with THP "always" or "madvise", Debian's default; elsewhere the advice is ignored). Measured
 * in docs/offload.md, "Host Adam speed". */
#ifndef ZOE_RUNTIME_HOST_ARRAY_H
#define ZOE_RUNTIME_HOST_ARRAY_H

#include <stddef.h>

enum { ZOE_HOST_ARRAY_HUGE_MIN = 4 << 20 };

/* bytes of untouched host memory (the first write places the pages), 64-byte aligned, or 2 MiB
 * aligned and advised for huge pages from ZOE_HOST_ARRAY_HUGE_MIN up; NULL when out of memory.
 * Released with free(). */
void *zoe_host_array_alloc(size_t bytes);

#endif
