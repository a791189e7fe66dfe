/* Streamed weights (zoe-train --offload-params cpu): the weights live on the host, in the
 * optimizer's parameter buffer with params_on_host (each rank's 1/(t d) partition, in the compute
 * dtype), and each unit of the model (the embedding, a block, the tail) is gathered into a small
 * ring of device buffers just before a pass reads it: a host-to-device copy of the rank's pieces
 * on a copy stream, then an all-gather over DP (ZeRO-3's pattern), prefetched k units ahead in
 * the pass's order and released after use. One unit (the embedding, whose tied head is read
 * first and last in both passes) has a buffer of its own and is held from its acquire to its
 * release within a pass.
 *
 * Narrow on both sides: it knows the optimizer only through its public calls (the partition's
 * pieces of each tensor, zoe_optimizer_weights_ready, zoe_optimizer_params) and the model not at
 * all: units are runs of tensor indices, and the passes are orders of units. The trainer wires it
 * to the model's weight source (models/gpt.h, zoe_gpt_weight_source).
 *
 * Explained in docs/offload.md, "Streamed weights". */
#ifndef ZOE_OFFLOAD_PARAM_STREAM_H
#define ZOE_OFFLOAD_PARAM_STREAM_H

#include <mpi.h>
#include "zoe/device.h"
#include "zoe/optimizer.h"

/* Tensors [first, first + n) of the optimizer's tensor list. */
typedef struct zoe_param_unit {
    int first, n;
} zoe_param_unit;

enum { ZOE_PARAM_STREAM_PASSES = 2 };

typedef struct zoe_param_stream_config {
    zoe_dtype dtype;     /* the compute dtype (the optimizer's) */
    const size_t *numel; /* per tensor of the optimizer: its element count on this rank */
    int num_tensors;
    const zoe_param_unit *units; /* consecutive, covering every tensor once */
    int num_units;
    /* The order in which each pass acquires the units (order_len entries each): prefetching
     * follows it. A unit may stand in it more than once (a block's part read by the
     * recomputation, then by the backward). */
    const int *order[ZOE_PARAM_STREAM_PASSES];
    int held_unit; /* the unit with a buffer of its own (-1: none) */
    int prefetch;  /* k >= 0: units fetched ahead of the one in use; the ring holds k + 1 */
    int order_len[ZOE_PARAM_STREAM_PASSES]; /* entries of each order; 0: num_units */
} zoe_param_stream_config;

typedef struct zoe_param_stream zoe_param_stream;

/* Buffers of each of the stream's rings: prefetch + 1 that the units cycle through, and one of
 * the held unit's own (held: 1 where there is one). The device's ring has them, and so does the
 * host's where the weights are on drives (zoe_optimizer_config.params_on_drive: each slot takes
 * its unit's pieces of the partition on their way from the drives, each read rounded out to the
 * drive's alignment). The plan sizes both rings with it (engine/plan/plan.c). */
int zoe_param_stream_slots(int prefetch, int held);

/* opt: created with params_on_host (borrowed); dp_group: its DP group (borrowed); compute: the
 * stream the passes run on. Collective over dp_group. */
zoe_status zoe_param_stream_create(zoe_optimizer *opt, MPI_Comm dp_group, zoe_device *dev,
                                   zoe_stream *compute, const zoe_param_stream_config *cfg,
                                   zoe_param_stream **out);
void zoe_param_stream_destroy(zoe_param_stream *ps);

/* The unit whose first tensor is `first` and which holds n tensors, or -1. */
int zoe_param_stream_unit_of(const zoe_param_stream *ps, int first, int n);
/* Unit u for pass p: waits for its update (zoe_optimizer_weights_ready), fetches it unless it
 * was prefetched, makes the compute stream wait for it, writes its tensors' device addresses to
 * weights[0 .. n), and prefetches the next units of p's order (after u's next place in it from
 * the previous acquire of p; from its first place when a pass starts over). Collective over DP:
 * every DP rank acquires the same units in the same order. */
zoe_status zoe_param_stream_acquire(zoe_param_stream *ps, int u, int pass, void **weights);
/* Unit u's buffer may be reused once the compute stream has passed this point. */
zoe_status zoe_param_stream_release(zoe_param_stream *ps, int u);
/* Unit u's buffer without fetching it, for its weights to be written (initialisation, import):
 * weights as acquire; then store copies this rank's pieces of them into the host partition and
 * releases the unit. Not collective. */
zoe_status zoe_param_stream_stage(zoe_param_stream *ps, int u, void **weights);
zoe_status zoe_param_stream_store(zoe_param_stream *ps, int u);

#endif
