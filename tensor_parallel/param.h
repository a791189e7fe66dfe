/* Parameter descriptors. A layer does not allocate its weights: it describes each one (name,
 * global and local shape, how it is split over TP, how it is initialised), the model lays the
 * descriptors out in its flat buffers, and binds device pointers for the weight and gradient.
 *
 * Every tensor is viewed as 2-D [rows, cols] (a vector is [n, 1]); a shard is a contiguous
 * block of rows (SPLIT_ROWS: column-parallel weights and biases, the vocab-parallel
 * embedding) or of columns (SPLIT_COLS: row-parallel weights), so its global element index is
 * (local_offset[0] + i) * cols + local_offset[1] + j.
 *
 * Replicated parameters (LayerNorm weights and biases, row-parallel biases, position
 * embeddings) hold the same values on every TP rank. zoe keeps them identical without
 * communication: every input of their gradients (the residual stream, its gradient, the
 * LayerNorm inputs) is itself replicated after the TP all-reduces, so each rank computes the
 * identical full gradient, bit for bit, and the identical optimizer update. Their gradients
 * must therefore NOT be all-reduced over TP (that would multiply them by t), and a global
 * gradient norm counts them once (replicated == true).
 *
 * Sharded row splits (grouped-query attention's KV heads when tp > n_kv_heads): the rows are
 * cut into `shards` blocks, fewer than the t ranks, and each block is held by `replicas` =
 * t / shards consecutive ranks (rank r holds block r / replicas). Unlike replicated
 * parameters, the replicas' gradient inputs differ (each rank's query heads use the block), so
 * the owning layer sums the gradient over exactly those ranks before the weight gradient is
 * formed; afterwards every replica holds the identical full gradient, and a gradient norm
 * counts it on one rank of each replica group (tp_rank % replicas == 0).
 *
 * Explained in docs/tensor_parallel.md, "Layers" and "Replicated parameters stay identical". */
#ifndef ZOE_TP_PARAM_H
#define ZOE_TP_PARAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor_parallel/tp.h"

typedef enum zoe_tp_split {
    ZOE_TP_REPLICATED = 0, /* every rank holds the whole tensor */
    ZOE_TP_SPLIT_ROWS = 1, /* rank r holds rows [r * rows / t, (r + 1) * rows / t) */
    ZOE_TP_SPLIT_COLS = 2, /* rank r holds columns [r * cols / t, (r + 1) * cols / t) */
} zoe_tp_split;

typedef enum zoe_tp_init_kind {
    ZOE_TP_INIT_NORMAL = 0, /* N(0, init_std^2) from Philox, stream = hash of the name */
    ZOE_TP_INIT_ZEROS = 1,
    ZOE_TP_INIT_ONES = 2,
} zoe_tp_init_kind;

#define ZOE_TP_NAME_MAX 96

typedef struct zoe_tp_param {
    char name[ZOE_TP_NAME_MAX]; /* full name, e.g. "h.3.mlp.linear_fc1.weight" */
    int ndim;                   /* 1 or 2, for display and checkpoints */
    int64_t global_shape[2];    /* [rows, cols]; [n, 1] when ndim == 1 */
    int64_t local_shape[2];     /* this rank's shard */
    int64_t local_offset[2];    /* where the shard starts in the global tensor */
    int64_t local_numel;
    zoe_tp_split split;
    bool replicated; /* split == ZOE_TP_REPLICATED */
    int replicas;    /* TP ranks holding this shard: 1 for a split, t when replicated */
    zoe_tp_init_kind init;
    float init_std;
    uint64_t rng_stream; /* Philox stream of the initial values */
    void *data;          /* bound device pointers, local_numel elements of the tp dtype */
    void *grad;
} zoe_tp_param;

/* Fills p for a tensor of global shape [rows, cols] (cols = 1 and ndim = 1 for a vector) on
 * rank tp_rank of tp_size; the split dimension must divide by tp_size. Pointers start NULL. */
zoe_status zoe_tp_param_describe(zoe_tp_param *p, const char *name, int ndim, int64_t rows,
                                 int64_t cols, zoe_tp_split split, zoe_tp_init_kind init,
                                 float init_std, int tp_size, int tp_rank);

/* A row split into `shards` blocks (shards divides tp_size, rows divide by shards): rank r
 * holds block r / (tp_size / shards). shards == tp_size is SPLIT_ROWS. */
zoe_status zoe_tp_param_describe_sharded(zoe_tp_param *p, const char *name, int ndim, int64_t rows,
                                         int64_t cols, int shards, zoe_tp_init_kind init,
                                         float init_std, int tp_size, int tp_rank);

/* A LayerNorm's replicated name.weight (ones) and name.bias (zeros), both [C]. */
zoe_status zoe_tp_layernorm_describe(zoe_tp_param *weight, zoe_tp_param *bias, const char *name,
                                     int64_t C, int tp_size, int tp_rank);

static inline void zoe_tp_param_bind(zoe_tp_param *p, void *data, void *grad) {
    p->data = data;
    p->grad = grad;
}

/* Binds params[0..n) back to back (no padding) at data and grad (either may be NULL, leaving
 * that pointer NULL) with elements of dtype; returns the elements used. Call with both NULL to
 * size the buffers. */
int64_t zoe_tp_params_bind_flat(zoe_tp_param *const *params, int n, zoe_dtype dtype, void *data,
                                void *grad);

/* Writes the shard's initial values into p->data: element (i, j) of the shard gets the value
 * the global tensor's element (local_offset + (i, j)) has at TP=1 (seed = tp->seed). */
zoe_status zoe_tp_param_init(const zoe_tp *tp, const zoe_tp_param *p);

/* The whole tensor in global layout on the host (every rank), from the shards' data (of_grad
 * false) or gradients (true): host_out holds rows * cols elements of the tp dtype. Collective
 * over TP; a tool for checkpoints and tests, allocating one device buffer of the global size. */
zoe_status zoe_tp_param_gather(const zoe_tp *tp, const zoe_tp_param *p, bool of_grad,
                               void *host_out);

#endif
