/* ZeRO-Offload: the optimizer of a flat parameter buffer, partitioned over the DP ranks of a
 * grid, with its state (fp32 master weights, Adam moments, accumulated gradients) in host
 * memory and a vectorised host Adam/AdamW.
 *
 * Layout. The caller lists its tensors (name, numel, replicated-over-TP flag) in a fixed order.
 * Consecutive tensors are grouped into buckets of about bucket_numel elements (a tensor is never
 * split; a tensor larger than bucket_numel is a bucket of its own). Each bucket is cut into d
 * equal DP partitions whose length is rounded up to 64 bytes of the compute dtype; the padding
 * at the end of a bucket is never updated and never counted in the norm. The device parameter
 * buffer holds the buckets back to back in this padded layout; zoe_optimizer_tensor_offset()
 * says where each tensor starts. DP rank r owns partition r of every bucket: its host state
 * is the concatenation of those partitions (about 1/d of the buffer).
 *
 * One training iteration, as the caller drives it:
 *
 *     for each micro-batch:
 *         zoe_optimizer_begin_micro_batch(opt)
 *         forward with the weights in zoe_optimizer_params(opt)
 *         backward: for each tensor t (any order)
 *             zoe_optimizer_grad_buffer(opt, t, &g)   zeroed buffer, compute dtype, numel(t)
 *             accumulate t's gradient into g
 *             zoe_optimizer_grad_ready(opt, t)        g is final for this micro-batch
 *         zoe_optimizer_end_micro_batch(opt)
 *     zoe_optimizer_step(opt, lr)
 *
 * Gradients are a mean: the optimizer divides the sum over DP ranks by d and the sum over the
 * k micro-batches of the step by k, so per-micro-batch mean gradients give the mean over the
 * global batch. With ZOE_GRAD_BUCKETS (the default), the device holds only a ring of bucket
 * buffers: when every tensor of a bucket is ready, the bucket is reduce-scattered over DP,
 * the rank's partition copied to pinned host memory (on CUDA on a copy stream, overlapping the
 * rest of backward) and added in fp32 into the host gradient partition, and the buffer is
 * reused. Only as many buckets as the ring holds can be open (written but not yet complete) at
 * once, and every DP rank must complete buckets in the same order (the same backward does). With
 * ZOE_GRAD_FULL_BUFFER a device gradient buffer as large as the parameters accumulates all
 * micro-batches and is reduced once, in zoe_optimizer_step().
 *
 * Step. The global gradient norm is the square root of the sum of squares over every DP
 * partition and TP rank, a TP-replicated tensor counted once (on tp_rank 0). A non-finite
 * gradient on any rank makes every rank skip the step (master weights, moments and the step
 * count unchanged); the dynamic loss scaler then halves the scale, and doubles it after
 * loss_scale_window clean steps. When norm > clip_norm the gradients are multiplied by
 * clip_norm / (norm + 1e-6). Weight decay (AdamW's decoupled decay or Adam's L2 term) applies
 * only to tensors whose no_weight_decay is 0: the GPT rule exempts biases and LayerNorm weights
 * (the 1-D tensors), which the caller flags; their elements take the same Adam step with a
 * weight decay of 0. The host pass then updates master weights and
 * moments and writes the compute-dtype weights, which are copied back and all-gathered over DP
 * into the parameter buffer (the refresh).
 *
 * Delayed parameter update (DPU), with warm-up N = dpu_warmup > 0. Let w_0 be the initial
 * weights and w_i the weights after step i. Iteration i's forward and backward (before
 * zoe_optimizer_step number i) read:
 *     w_{i-1}  for i <= N + 1                 (synchronous steps: step i refreshes w_i at once)
 *     w_{i-2}  for i >= N + 2                 (one step stale)
 * Step i for i > N: zoe_optimizer_step() computes the norm and the skip decision of g_i, waits
 * for step i-1's host update (if one is in flight) and refreshes the parameter buffer with
 * w_{i-1}, then starts the host update of step i on a host thread, and returns. That
 * update runs while the device computes iteration i+1 with w_{i-1}; iteration i+1's gradients
 * arrive in a second host gradient partition. The refresh of w_i lands at the start of step
 * i+1, before iteration i+2 reads the weights. zoe_optimizer_flush() waits for the update in
 * flight and refreshes, so that the parameter buffer holds the latest weights (before
 * evaluation or a checkpoint). The stats of step i are those of g_i, known when step i returns.
 *
 * Partial offload: partial_ratio r in [0, 1] keeps the first r of the rank's partition (rounded
 * down to 64 bytes) with its state in device memory, updated by a device Adam; the rest is on
 * the host. On the CPU backend device memory is host memory and the device Adam is the host's.
 *
 * Threads: the host step runs on the OpenMP threads of the calling process; bind them first
 * (zoe_topology_bind) so that the state, first-touched by the threads that update it, lands in
 * their NUMA node. All functions are called from one thread. */
#ifndef ZOE_OPTIMIZER_H
#define ZOE_OPTIMIZER_H

#include <stddef.h>
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/grid.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zoe_optimizer zoe_optimizer;

typedef enum zoe_grad_mode {
    ZOE_GRAD_BUCKETS = 0,     /* a ring of device buckets, reduced as backward completes them */
    ZOE_GRAD_FULL_BUFFER = 1, /* a full device gradient buffer, reduced once per step */
} zoe_grad_mode;

typedef struct zoe_optimizer_config {
    float beta1, beta2, eps; /* Adam: 0.9, 0.999, 1e-8 */
    float weight_decay;      /* 0; not on tensors flagged no_weight_decay */
    int adamw;               /* 1: decoupled weight decay (AdamW, the default); 0: L2 in the grad */
    float clip_norm;         /* clip the global gradient norm to this; <= 0 disables (1.0) */
    /* Dynamic loss scaling, for fp16 compute (off by default; a static scale without it). */
    int dynamic_loss_scale;
    float loss_scale;        /* initial (dynamic) or fixed scale the loss was multiplied by: 1 */
    int loss_scale_window;   /* clean steps before the scale doubles: 1000 */
    float min_loss_scale;    /* the scale never halves below this: 1 */
    size_t bucket_numel;     /* elements per gradient bucket: 1 << 24 */
    int bucket_ring;         /* device bucket buffers in the ring: 2 */
    zoe_grad_mode grad_mode; /* ZOE_GRAD_BUCKETS */
    int dpu_warmup;          /* synchronous steps before DPU; 0 disables DPU (the default) */
    float partial_ratio;     /* share of the partition kept and updated on the device: 0 */
} zoe_optimizer_config;

void zoe_optimizer_config_default(zoe_optimizer_config *cfg);

typedef struct zoe_param_tensor {
    const char *name;    /* copied */
    size_t numel;        /* > 0 */
    int tp_replicated;   /* 1: the same tensor on every TP rank (LayerNorm, row-parallel bias) */
    int no_weight_decay; /* 1: exempt from weight decay (biases, LayerNorm; see above) */
} zoe_param_tensor;

typedef struct zoe_optimizer_stats {
    long step;          /* steps applied so far (skipped ones not counted) */
    double grad_norm;   /* global norm of the (unscaled, averaged) gradients of the last step */
    double clip_coef;   /* factor the gradients were multiplied by: min(1, clip / norm) */
    double loss_scale;  /* the scale to multiply the next iteration's loss by */
    int skipped;        /* 1 when the last step was skipped for a non-finite gradient */
    long skipped_total; /* steps skipped so far */
    /* Wall time of the most recent completed host update (the fused Adam pass and the copy of
     * the new weights; under DPU it ran on the update thread, overlapped with compute), of the
     * most recent refresh (the all-gather into the parameter buffer), and what the last step
     * spent waiting for an update in flight. Milliseconds. */
    double ms_update, ms_refresh, ms_wait;
} zoe_optimizer_stats;

/* Collective over the grid. Creates DP communicators for the device (MPI on CPU, NCCL on CUDA)
 * from the grid's DP comm; stream is the caller's compute stream (the model's backward), which
 * gradient buffers are written on and the refresh is ordered on. compute_dtype is fp32, bf16 or
 * fp16. The parameter buffer is zeroed: write the initial weights into it, then call
 * zoe_optimizer_init_from_params(). */
zoe_status zoe_optimizer_create(zoe_grid *grid, zoe_device *device, zoe_stream *stream,
                                zoe_dtype compute_dtype, const zoe_param_tensor *tensors,
                                int num_tensors, const zoe_optimizer_config *cfg,
                                zoe_optimizer **out);
void zoe_optimizer_destroy(zoe_optimizer *opt);

/* The device parameter buffer (compute dtype, padded layout) and its size in elements. */
void *zoe_optimizer_params(zoe_optimizer *opt);
size_t zoe_optimizer_params_numel(const zoe_optimizer *opt);
/* Element offset of tensor index t in the parameter buffer. */
zoe_status zoe_optimizer_tensor_offset(const zoe_optimizer *opt, int t, size_t *offset);
/* Elements of this rank's partition (host and device parts together), padding included. */
size_t zoe_optimizer_partition_numel(const zoe_optimizer *opt);
/* The part of tensor t this rank owns: its elements [*first, *first + *count) sit at
 * *partition_offset of the partition (*count is 0 when the rank owns none of it). */
zoe_status zoe_optimizer_tensor_shard(const zoe_optimizer *opt, int t, size_t *first, size_t *count,
                                      size_t *partition_offset);

/* Master weights := the parameter buffer's values on this rank's partition; moments := 0,
 * step := 0. Every DP rank must hold the same parameters. Collective over DP. */
zoe_status zoe_optimizer_init_from_params(zoe_optimizer *opt);

zoe_status zoe_optimizer_begin_micro_batch(zoe_optimizer *opt);
/* A zeroed device buffer of numel(t) elements in the compute dtype for tensor t's gradient,
 * valid until zoe_optimizer_grad_ready(opt, t). Fails when the ring has no free bucket. */
zoe_status zoe_optimizer_grad_buffer(zoe_optimizer *opt, int t, void **grad);
/* Tensor t's gradient for this micro-batch is final (once per tensor per micro-batch). */
zoe_status zoe_optimizer_grad_ready(zoe_optimizer *opt, int t);
/* Tensors never marked ready count as zero gradients. Collective over DP. */
zoe_status zoe_optimizer_end_micro_batch(zoe_optimizer *opt);

/* The optimizer step with learning rate lr over the micro-batches since the last step.
 * Collective over the grid. Under DPU it returns with the host update in flight (see above). */
zoe_status zoe_optimizer_step(zoe_optimizer *opt, float lr);
/* Waits for an update in flight and refreshes the parameter buffer. Collective over DP. */
zoe_status zoe_optimizer_flush(zoe_optimizer *opt);
zoe_status zoe_optimizer_stats_get(const zoe_optimizer *opt, zoe_optimizer_stats *out);

/* Checkpoint access to the rank's partition, in partition coordinates [0, partition_numel):
 * fp32 master weights, first and second moments, count elements from offset. Waits for an
 * update in flight. Writing the master weights does not refresh the parameter buffer: call
 * zoe_optimizer_refresh_params() after writing. */
typedef enum zoe_optimizer_state {
    ZOE_STATE_MASTER = 0,
    ZOE_STATE_EXP_AVG = 1,
    ZOE_STATE_EXP_AVG_SQ = 2,
} zoe_optimizer_state;
zoe_status zoe_optimizer_read_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                    size_t count, float *dst);
zoe_status zoe_optimizer_write_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                     size_t count, const float *src);
/* The step count (for bias correction) after a restore. */
zoe_status zoe_optimizer_set_step(zoe_optimizer *opt, long step);
/* Parameter buffer := compute-dtype copy of the master weights, all-gathered. Collective. */
zoe_status zoe_optimizer_refresh_params(zoe_optimizer *opt);

/* The step bookkeeping a checkpoint carries besides the state arrays. */
typedef struct zoe_optimizer_progress {
    long iteration;     /* zoe_optimizer_step calls since init (the DPU warm-up counts them) */
    long step;          /* applied steps (Adam's bias correction) */
    long skipped_total; /* steps skipped for a non-finite gradient */
    float loss_scale;   /* the dynamic loss scaler's scale and its clean steps in the window */
    int clean_steps;
} zoe_optimizer_progress;
zoe_status zoe_optimizer_progress_get(const zoe_optimizer *opt, zoe_optimizer_progress *out);
zoe_status zoe_optimizer_progress_set(zoe_optimizer *opt, const zoe_optimizer_progress *in);

/* For a checkpoint under DPU, without disturbing the schedule: waits for the update in flight
 * but does NOT refresh. Afterwards the state arrays hold the state after the last step, the
 * parameter buffer still holds the weights the next iteration reads (one step stale), and
 * *refresh_due is 1: the next zoe_optimizer_step (or flush) refreshes first, as it would have.
 * *refresh_due is 0 when no update was in flight (the parameter buffer is then the
 * compute-dtype copy of the master weights). */
zoe_status zoe_optimizer_settle(zoe_optimizer *opt, int *refresh_due);
/* The resume side: after writing the state arrays, zoe_optimizer_refresh_params(), and then
 * writing the stale weights into the parameter buffer, marks the refresh of the latest weights
 * (already in the partition buffer) due at the next zoe_optimizer_step or flush. */
zoe_status zoe_optimizer_defer_refresh(zoe_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
