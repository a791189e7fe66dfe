/* Tensor parallelism, Megatron style: the context every TP call takes, the traffic counter, and
 * the four region mappings (each a forward/backward pair over the TP communicator).
 *
 * Conventions of this layer (on top of kernels/kernels.h's):
 *  - All tensors are device pointers in the context's dtype, row-major, [rows, cols]; a
 *    "full" tensor has the global width, a "local" one the width / t slice of this rank
 *    (columns [rank * cols / t, (rank + 1) * cols / t)).
 *  - Work is issued on the kernels' stream; collectives run on the same stream.
 *  - With t == 1 the collectives are skipped (they would be identities), so a TP=1 run moves
 *    no bytes and pays no MPI call.
 *  - Layers do not allocate: parameters are described (param.h) and bound by the caller, and
 *    activations/scratch are caller buffers whose sizes the layers report.
 *
 * Explained in docs/tensor_parallel.md, "Region mappings". */
#ifndef ZOE_TP_TP_H
#define ZOE_TP_TP_H

#include <stdbool.h>
#include <stdint.h>
#include "kernels/kernels.h"
#include "zoe/comm.h"
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/status.h"

/* Borrowed handles, no ownership: a plain struct the caller fills with zoe_tp_init. */
typedef struct zoe_tp {
    zoe_kernels *kernels;
    zoe_comm *comm; /* the TP group (from zoe_grid_tp_comm); rank/size below are its own */
    zoe_stream *stream;
    zoe_device *device;
    zoe_dtype dtype; /* storage dtype of weights, activations and gradients */
    uint64_t seed;   /* Philox key of initial weights and dropout masks */
    int size, rank;
} zoe_tp;

/* comm's size is t. dtype must be fp32, bf16 or fp16. */
zoe_status zoe_tp_init(zoe_tp *tp, zoe_kernels *kernels, zoe_comm *comm, zoe_dtype dtype,
                       uint64_t seed);

/* Bytes this rank handed to TP collectives in the last forward and backward call of a layer
 * (zoe_comm_bytes deltas), to set against the formulas. */
typedef struct zoe_tp_traffic {
    uint64_t forward, backward;
} zoe_tp_traffic;

/* All-reduce (sum) over TP, send == recv allowed; skipped when t == 1 (a copy if the buffers
 * differ). *bytes (optional) grows by the bytes sent. */
zoe_status zoe_tp_all_reduce(const zoe_tp *tp, void *recv, const void *send, int64_t count,
                             uint64_t *bytes);

/* ---- region mappings; count/rows/cols are elements, cols the FULL width ----
 * copy_to: enters a parallel region. Forward identity, backward all-reduce of the gradient. */
zoe_status zoe_tp_copy_to_forward(const zoe_tp *tp, void *y, const void *x, int64_t count);
zoe_status zoe_tp_copy_to_backward(const zoe_tp *tp, void *dx, const void *dy, int64_t count);
/* reduce_from: leaves a parallel region by summing the partial results. Forward all-reduce,
 * backward identity. */
zoe_status zoe_tp_reduce_from_forward(const zoe_tp *tp, void *y, const void *x, int64_t count);
zoe_status zoe_tp_reduce_from_backward(const zoe_tp *tp, void *dx, const void *dy, int64_t count);
/* scatter_to: y_local = this rank's column slice of x_full; backward all-gathers the slices of
 * dy_local into dx_full. scratch: rows * cols elements (the gathered blocks before they are
 * interleaved). */
zoe_status zoe_tp_scatter_to_forward(const zoe_tp *tp, void *y_local, const void *x_full,
                                     int64_t rows, int64_t cols);
zoe_status zoe_tp_scatter_to_backward(const zoe_tp *tp, void *dx_full, const void *dy_local,
                                      int64_t rows, int64_t cols, void *scratch);
/* gather_from: y_full = the column slices of all ranks side by side; backward keeps this
 * rank's slice of dy_full. scratch: rows * cols elements. */
zoe_status zoe_tp_gather_from_forward(const zoe_tp *tp, void *y_full, const void *x_local,
                                      int64_t rows, int64_t cols, void *scratch);
zoe_status zoe_tp_gather_from_backward(const zoe_tp *tp, void *dx_local, const void *dy_full,
                                       int64_t rows, int64_t cols);

/* Rounds a sub-buffer size up so that carved buffers stay aligned for every backend. */
#define ZOE_TP_ALIGN 256
static inline size_t zoe_tp_align(size_t bytes) {
    return (bytes + ZOE_TP_ALIGN - 1) / ZOE_TP_ALIGN * ZOE_TP_ALIGN;
}

/* Carves aligned sub-buffers from one allocation. A layout function runs twice: with base NULL
 * it only counts (`used` is the bytes to allocate, the pointers it hands out are NULL), then
 * with the allocation as base it hands out the same offsets. */
typedef struct zoe_tp_carver {
    char *base;
    size_t used;
} zoe_tp_carver;

static inline void *zoe_tp_carve(zoe_tp_carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->used : NULL;
    c->used += zoe_tp_align(bytes);
    return p;
}

#endif
