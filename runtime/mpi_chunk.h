/* How a collective too large for one MPI call is cut into calls.
 *
 * MPI counts are int, and Open MPI adds up the blocks of an all-gather or a reduce-scatter in
 * int too (there are no MPI-4 large-count `_c` calls in Open MPI 4.1), so one call may move at
 * most INT_MAX elements over all of its ranks. A caller that packs each call's blocks through
 * a buffer (runtime/comm.c's chunked path, the trainer's logits) also bounds that buffer to
 * ZOE_MPI_PACK_BYTES, so that it costs a fixed, small amount of memory whatever the size of the
 * collective, and the plan counts that much (engine/plan/optimizer_footprint.c).
 *
 * Explained in docs/plan.md, "Memory: from the code that allocates". */
#ifndef ZOE_RUNTIME_MPI_CHUNK_H
#define ZOE_RUNTIME_MPI_CHUNK_H

#include <stddef.h>

/* 64 MiB: at the DP group's bus rates of the presets a call of that size is milliseconds long,
 * so cutting a large collective into such calls costs per-call latency far below its time. */
#define ZOE_MPI_PACK_BYTES ((size_t)64 << 20)

/* The whole rows of row_count elements (of esz bytes) per rank that one call over `ranks`
 * ranks moves: at most max_count elements over all the ranks, and at most pack_bytes of them;
 * at least one row. */
static inline size_t zoe_mpi_chunk_rows(size_t row_count, size_t ranks, size_t esz,
                                        size_t max_count, size_t pack_bytes) {
    size_t per_call = row_count * ranks;
    size_t by_count = max_count / per_call, by_bytes = pack_bytes / (per_call * esz);
    size_t rows = by_count < by_bytes ? by_count : by_bytes;
    return rows > 0 ? rows : 1;
}

#endif
