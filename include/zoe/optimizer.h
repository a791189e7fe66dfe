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
 * That is dpu_schedule ZOE_DPU_PLAIN; PREDICT and DC (zoe_dpu_schedule below) change what a
 * stale iteration reads or what the update applies, on the same timeline. ZOE_DPU_EXACT is not
 * stale at all: iteration i reads w_{i-1}, and the update overlaps the step's own backward and,
 * with gated_forward, the next forward (see zoe_dpu_schedule).
 *
 * Memory layout (docs/offload.md), per element of the rank's partition P unless stated; the
 * device holds the parameter buffer (compute dtype, 1 element per parameter of the TP shard) and
 * the gradient bucket ring besides. On a GPU (host side): fp32 master, m, v and the fp32
 * gradient accumulator = 16 bytes; the new compute-dtype weights go to the device through a
 * small pinned copy-out ring (2 slots of copy_out_numel, 8 MiB of bf16 each), never a full-size
 * buffer; the same with ZOE_DPU_EXACT. With a stale DPU schedule, 18: the update in flight first
 * rounds the finished gradient, divided by the micro-batch count, into a pinned compute-dtype
 * snapshot and releases the fp32 accumulator (the next iteration's first gradient write waits for
 * that), then writes the new compute-dtype weights over the snapshot, so one fp32 accumulator
 * serves, and the device keeps a partition buffer (2 bytes per element of P) that the new weights
 * are copied into while compute runs. On the CPU backend with fp32 weights the rank's slices of the
 * parameter buffer are the fp32 master weights (16 bytes per parameter at DP = 1 in all); writing
 * ZOE_STATE_MASTER then changes the rank's own slices at once (the other ranks' copies at
 * zoe_optimizer_refresh_params). With DPU there, the update reads the weights the forward is
 * reading and writes the new ones over the gradient it read, in a second fp32 gradient partition
 * (20 bytes per parameter). bf16 weights on the CPU backend: 18, and 20 with DPU (the bf16 snapshot
 * as above). Numerics: everything but DPU with 16-bit weights is bit for bit the fused step of
 * kernels/adam.h on the fp32 accumulator; DPU with bf16/fp16 weights applies Adam to the
 * snapshot, i.e. to the mean gradient rounded to the compute dtype (the precision of the
 * ZeRO-Offload paper's fp16 gradients: a relative error of at most 2^-9 for bf16, 2^-12 for
 * fp16 per element), while the accumulation over micro-batches and the norm stay fp32.
 *
 * Partial offload: partial_ratio r in [0, 1] keeps the first r of the rank's partition (rounded
 * down to 64 bytes) with its state in device memory, updated by a device Adam; the rest is on
 * the host. On the CPU backend device memory is host memory and the device Adam is the host's:
 * the device share then lives in the host arrays (counted as host memory).
 *
 * Threads: the host step runs on the OpenMP threads of the calling process; bind them first
 * (zoe_topology_bind) so that the state, first-touched by the threads that update it, lands in
 * their NUMA node. All functions are called from one thread.
 *
 * Explained in docs/offload.md. */
#ifndef ZOE_OPTIMIZER_H
#define ZOE_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>
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

/* What a stale iteration's forward and backward read, and what the delayed update applies
 * (docs/offload.md, "Delayed parameter update"; the table above is PLAIN's). */
typedef enum zoe_dpu_schedule {
    /* The ZeRO-Offload paper's: iteration i reads w_{i-2}; step i applies g_i to w_{i-1}. */
    ZOE_DPU_PLAIN = 0,
    /* Weight prediction: iteration i reads w_{i-2} moved on along the step that made it (that
     * step repeated with the moments it left, dpu_predict_scale times), a prediction of
     * w_{i-1}; the fp32 master stays exact. Needs a separate master on the CPU backend with
     * fp32 weights. */
    ZOE_DPU_PREDICT = 1,
    /* Delay compensation (DC-ASGD): g_i + lambda g_i^2 / sqrt(v) (w_{i-1} - w_{i-2}), the last
     * step recomputed from the master and moments as stored, in the host update (over the fp32
     * gradient partition in place, or a widened fp32 copy of the compute-dtype snapshot); not
     * with a device share on a GPU (the device Adam does not compensate). */
    ZOE_DPU_DC = 2,
    /* Exact, nothing stale: the host update of each bucket starts on a host thread as soon as
     * its gradient is final during the backward of the step's last micro-batch (declared by
     * zoe_optimizer_expect_step), speculating that the step applies with a clip factor of 1 and
     * the declared learning rate; zoe_optimizer_step then waits for the buckets still running
     * and, where the speculation failed (the norm clips, the gradient is not finite, the lr
     * differs), undoes and redoes them. Iteration i reads w_{i-1} at every step, as without DPU;
     * the host update overlaps backward instead of the next iteration, and the memory is that of
     * no DPU. The caller must not read tensor t's weights after marking its gradient ready in
     * that micro-batch (a model's backward does not). zoe-train's default. */
    ZOE_DPU_EXACT = 3,
} zoe_dpu_schedule;

/* Start it from ZOE_OPTIMIZER_CONFIG_INITIALIZER (other fields zero) or
 * zoe_optimizer_config_default; later fields go at the end, and create refuses a struct whose
 * size or version is not the library's. */
typedef struct zoe_optimizer_config {
    size_t struct_size;      /* sizeof(zoe_optimizer_config) where the caller was built */
    int api_version;         /* ZOE_API_VERSION where the caller was built */
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
    size_t copy_out_numel;   /* elements per slot of the pinned ring that carries the new weights
                              * to a GPU without DPU (rounded up to ZOE_ADAM_TILE): 1 << 22 */
    zoe_dpu_schedule dpu_schedule; /* ZOE_DPU_PLAIN (0) */
    /* ZOE_DPU_DC: lambda = dpu_dc_kappa / lr of the previous step (dimensionless: the
     * preconditioned curvature the correction assumes per unit of g^2 / v): 1 */
    float dpu_dc_kappa;
    /* ZOE_DPU_PREDICT: the prediction is w + scale * (the last step repeated): 1.5, the
     * linear stability analysis's best (docs/offload.md) */
    float dpu_predict_scale;
    /* ZOE_DPU_EXACT: 1 when the caller calls zoe_optimizer_weights_ready before its forward
     * reads each tensor's weights; the step then returns with what is left of its update (the
     * buckets not done during backward, or redone) still running, in forward order, and the
     * forward waits per bucket. 0 (the default): the step finishes the update. */
    int gated_forward;
    /* The dtypes the host holds the state in (Megatron's --main-params-dtype, --exp-avg-dtype,
     * --exp-avg-sq-dtype; docs/offload.md, "Compressed state"): ZOE_F32 (0, the default) or
     * ZOE_BF16, each written by the host Adam with stochastic rounding keyed by (rounding_seed,
     * the DP rank, the step, the element), so every path gives the same bits, TP-replicated
     * tensors round alike on every TP rank, and
     * a resumed run rounds as the uninterrupted one. The moments may also be ZOE_I8: blockwise
     * int8 codes with one fp32 scale per 256 elements of the partition (kernels/adam_state.h,
     * docs/offload.md "Blockwise int8 moments"; the partition then aligns to whole blocks). Every
     * DPU schedule runs over it: predict and dc recompute the last step from the state as
     * stored, widened to fp32; exact speculates, and a redo restores int8 moments within their
     * quantisation (kernels/adam_state.h). On CUDA the device share of partial offload is
     * held in the same dtypes and rounds as the host would (the CPU backend's bits). */
    zoe_dtype main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
    uint64_t rounding_seed; /* 0 is a seed like any other */
    /* The dtype of the host gradient partition (Megatron's --main-grads-dtype): ZOE_F32 (0, the
     * default), into which micro-batches accumulate, or the compute dtype (2 bytes) for steps of
     * one micro-batch: the reduced gradient is stored as it arrives, times 1 / dp_size (exact
     * for a power-of-two DP size), and a second micro-batch in a step is refused. Not with a
     * device share on the CPU backend; the exact schedule's undo reads the gradient as stored,
     * and dc compensates a widened fp32 copy of it. */
    zoe_dtype main_grads_dtype;
    /* Streamed weights (zoe-train --offload-params cpu; docs/offload.md, "Streamed weights"): 1
     * keeps no parameter buffer on the device. The parameter buffer is then this rank's partition
     * in host memory (page-locked), in partition coordinates: partition_numel elements of the
     * compute dtype, the fp32 master itself on the CPU backend with fp32 weights. The host step
     * writes the new weights there and the refresh gathers nothing: whoever reads weights
     * gathers them over DP where it uses them (offload/param_stream.h, per layer). Not with a
     * device share (partial_ratio 0 only). 0: the default. */
    int params_on_host;
    /* State on drives (zoe-train --offload nvme; docs/nvme.md, "State and weights on drives"):
     * NULL or "" keeps the host state in host memory; else the directories, one per drive,
     * comma-separated (copied at create), of this rank's scratch file. The host state (master
     * weights unless they are the parameters, moments, int8 scales) then lives there, bucket by
     * bucket in the layout of host memory, and host memory holds a ring of 2 state_ahead + 1
     * buckets: the host step reads bucket i + state_ahead while it updates bucket i and writes
     * bucket i - state_ahead. Bit for bit the same state, steps and checkpoints. Not with a
     * device share (partial_ratio 0 only). */
    const char *state_paths;
    int state_ahead; /* 0: 2 */
    /* The device gradient ring by bytes (docs/offload.md, "The gradient ring"): 0 (the default)
     * keeps bucket_ring slots, each as large as the largest bucket; > 0 is the most elements of
     * tensors whose gradients the caller holds open at once besides bucket 0's (a model's block,
     * or its largest tensor): the ring is then one buffer where each bucket has a fixed place,
     * sized for the buckets such a window touches (offload/layout.h, zoe_layout_ring_places), and
     * bucket_ring is not read. Buckets then need not be as large as the largest tensor: a tensor
     * larger than bucket_numel is a bucket of its own, its place its own size. */
    size_t bucket_ring_window;
    /* With state_paths: 1 puts the host gradient partition(s) on the drives too (zoe-train
     * --offload-grads nvme; docs/nvme.md, "The gradient partition on drives"), one region per
     * bucket beside the state's; host memory then holds a staging ring of 4 bucket partitions
     * for the accumulation (one summed, one written, two read ahead; 2 where micro_batches is 1)
     * and a bucket's gradient in
     * each state ring slot. Bit for bit the same gradients, norm, steps and checkpoints. 0 (the
     * default): the partition in host memory. */
    int grads_on_drives;
    /* Weights on drives (zoe-train --offload-params nvme; docs/nvme.md, "Weights on drives"):
     * with params_on_host and state_paths, 1 keeps the host partition of the weights in the
     * drives' state regions too (the master where it is the weights, else a compute-dtype
     * weights array beside it), so that host memory holds no copy of them: zoe_optimizer_params
     * is then NULL between calls, and the weights are reached with zoe_optimizer_params_copy
     * (the weight stream reads them straight from the drives). 0: the default. */
    int params_on_drive;
    /* The micro-batches a step will have, as far as the caller knows (zoe-train: --grad-accum);
     * 0 (the default): not known. With grads_on_drives and 1, nothing is read back to add to,
     * so the accumulation stages 2 bucket partitions instead of 4 (none read ahead). A step
     * with more micro-batches than said still sums the same bits: each bucket is read at its
     * turn. */
    int micro_batches;
} zoe_optimizer_config;

#define ZOE_OPTIMIZER_CONFIG_INITIALIZER                                                           \
    { ZOE_STRUCT_VERSION(zoe_optimizer_config) }
/* Fills the defaults noted above; the macro passes the caller's struct size and version. */
#define zoe_optimizer_config_default(cfg)                                                          \
    zoe_optimizer_config_default_for((cfg), sizeof(zoe_optimizer_config), ZOE_API_VERSION)
zoe_status zoe_optimizer_config_default_for(zoe_optimizer_config *cfg, size_t struct_size,
                                            int api_version);

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
    /* ZOE_DPU_EXACT, this rank: the last step's update ran during backward and held
     * (speculated), what was left of it runs during the next forward (deferred, gated_forward),
     * or part of it had to be redone (undone, for a skipped step); steps redone so far. */
    int speculated, deferred, redone;
    long redone_total;
    /* State on drives (state_paths): of the most recent host update's streamed pass, the time
     * spent blocked on the drives (a bucket's read not landed at its turn, a ring slot's write
     * not landed when the slot was needed, the last writes). Milliseconds; 0 otherwise. */
    double ms_drive_wait;
    /* The gradient partition on drives (grads_on_drives): of the last step's accumulation, the
     * time its micro-batches' sums waited for the drives (a bucket's read not landed at its
     * turn, read ahead or not; a staging slot's write not landed when the slot was needed; the
     * writes waited for at the end of each micro-batch and, under ZOE_DPU_EXACT, before a bucket
     * is offered). Milliseconds; 0 otherwise. */
    double ms_grad_wait;
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

/* Pure getters (NULL and 0 for a NULL optimizer): the device parameter buffer (compute dtype,
 * padded layout) and its size in elements; with params_on_host the rank's host partition of the
 * weights (partition coordinates) and partition_numel. */
void *zoe_optimizer_params(zoe_optimizer *opt);
size_t zoe_optimizer_params_numel(const zoe_optimizer *opt);
/* The dtype of the buffer zoe_optimizer_params returns (fp32 for NULL): the compute dtype, except
 * with params_on_host where a bf16 master computing in fp16 is the buffer: bf16 then, and whoever
 * reads the weights converts them to fp16 where they are used (offload/param_stream.c). */
zoe_dtype zoe_optimizer_params_dtype(const zoe_optimizer *opt);
/* 1 where that buffer is host memory (params_on_host: page-locked, from zoe_host_alloc), 0 where
 * it is the device's (zoe_device_alloc; on the CPU backend host memory standing in for it): the
 * side a copy to or from it names (zoe_copy_kind). */
int zoe_optimizer_params_on_host(const zoe_optimizer *opt);
/* With params_on_host: elements [x, x + n) of this rank's host partition of the weights (in
 * zoe_optimizer_params_dtype) copied into buf (write 0) or from it (write 1), wherever the
 * partition lives (host memory, or the drives with params_on_drive: read and written through
 * the state's pages). Not while an update is in flight. */
zoe_status zoe_optimizer_params_copy(zoe_optimizer *opt, size_t x, size_t n, void *buf, int write);
/* Element offset of tensor index t in the parameter buffer. */
zoe_status zoe_optimizer_tensor_offset(const zoe_optimizer *opt, int t, size_t *offset);
/* Elements of this rank's partition (host and device parts together), padding included. */
size_t zoe_optimizer_partition_numel(const zoe_optimizer *opt);
/* The part of tensor t this rank owns: its elements [*first, *first + *count) sit at
 * *partition_offset of the partition (*count is 0 when the rank owns none of it). */
zoe_status zoe_optimizer_tensor_shard(const zoe_optimizer *opt, int t, size_t *first, size_t *count,
                                      size_t *partition_offset);

/* Master weights := the parameter buffer's values on this rank's partition; moments := 0,
 * step := 0. Every DP rank must hold the same parameters. With fp16 compute and a bf16 master
 * the weights then become the master's values (kernels/adam_state.h: every step makes them so),
 * and initial weights of magnitude 65280 or more, which round to a bf16 master beyond fp16's
 * range, are refused (ZOE_ERR_INVALID_ARGUMENT on every rank). Collective over the grid. */
zoe_status zoe_optimizer_init_from_params(zoe_optimizer *opt);

zoe_status zoe_optimizer_begin_micro_batch(zoe_optimizer *opt);
/* A zeroed device buffer of numel(t) elements in the compute dtype for tensor t's gradient,
 * valid until zoe_optimizer_grad_ready(opt, t). Fails when the ring has no free bucket. */
zoe_status zoe_optimizer_grad_buffer(zoe_optimizer *opt, int t, void **grad);
/* Tensor t's gradient for this micro-batch is final (once per tensor per micro-batch). */
zoe_status zoe_optimizer_grad_ready(zoe_optimizer *opt, int t);
/* Tensors never marked ready count as zero gradients. Collective over DP. */
zoe_status zoe_optimizer_end_micro_batch(zoe_optimizer *opt);
/* Declares that the micro-batch just begun is the step's last and that zoe_optimizer_step(opt,
 * lr) follows it: call between zoe_optimizer_begin_micro_batch and its first grad_ready. Under
 * ZOE_DPU_EXACT after the warm-up, the host update of each bucket then starts as soon as its
 * gradient is final; elsewhere it does nothing. A step that differs (another lr, a clipped or
 * non-finite gradient) is still exact: the buckets already updated are redone. Not collective. */
zoe_status zoe_optimizer_expect_step(zoe_optimizer *opt, float lr);
/* With gated_forward: tensors [first, first + n) are about to be read by a forward. Waits for
 * what is left of the last step's update on their buckets and refreshes those buckets (every
 * bucket before them too, in bucket order), so the parameter buffer holds their new weights.
 * Collective over DP (every DP rank gates the same tensors in the same order: the same forward
 * does). Returns at once when nothing is left. Any other call that reads or writes the state,
 * the next backward's first gradient buffer and the next step finish all buckets first (those
 * calls are then collective over DP as well). */
zoe_status zoe_optimizer_weights_ready(zoe_optimizer *opt, int first, int n);

/* The optimizer step with learning rate lr over the micro-batches since the last step.
 * Collective over the grid. Under DPU it returns with the host update in flight (see above). */
zoe_status zoe_optimizer_step(zoe_optimizer *opt, float lr);
/* Waits for an update in flight and refreshes the parameter buffer. Collective over DP. */
zoe_status zoe_optimizer_flush(zoe_optimizer *opt);
zoe_status zoe_optimizer_stats_get(const zoe_optimizer *opt, zoe_optimizer_stats *out);

/* Checkpoint access to the rank's partition, in partition coordinates [0, partition_numel):
 * fp32 master weights, first and second moments, count elements from offset. Waits for an
 * update in flight. Writing the master weights does not refresh the parameter buffer (on the
 * CPU backend with fp32 weights it changes this rank's own slices, which are the master, and
 * no other rank's copy): call zoe_optimizer_refresh_params() after writing. */
typedef enum zoe_optimizer_state {
    ZOE_STATE_MASTER = 0,
    ZOE_STATE_EXP_AVG = 1,
    ZOE_STATE_EXP_AVG_SQ = 2,
} zoe_optimizer_state;
zoe_status zoe_optimizer_read_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                    size_t count, float *dst);
zoe_status zoe_optimizer_write_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                     size_t count, const float *src);
/* The same with the caller's buffer in dtype (ZOE_F32 or ZOE_BF16): a checkpoint stores the state
 * as it is held. Into bf16 the values round to nearest even; a state held in bf16 moves exactly
 * to and from a bf16 or fp32 buffer. An int8 moment reads as its values; a write requantises
 * (to nearest) every block it touches from the block's values with the range replaced, so the
 * values of an int8 block written back are held exactly once the whole block has been written
 * (in one call, or by writing its pieces twice over: the checkpoint's load). */
zoe_status zoe_optimizer_read_state_as(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                       size_t count, zoe_dtype dtype, void *dst);
zoe_status zoe_optimizer_write_state_as(zoe_optimizer *opt, zoe_optimizer_state which,
                                        size_t offset, size_t count, zoe_dtype dtype,
                                        const void *src);
/* An int8 moment (ZOE_I8) as it is held, bit for bit: what ZOE_STATE_CODES gives are the codes
 * of partition elements [offset, offset + count), one byte each (int8 for exp_avg, uint8 for
 * exp_avg_sq); ZOE_STATE_SCALES the fp32 scales of partition blocks [offset, offset + count),
 * block b holding elements [b, b + 1) * ZOE_OPTIMIZER_INT8_BLOCK. Every tensor starts at a block
 * boundary of the partition, so a tensor's blocks are its own (a checkpoint stores them so). */
#define ZOE_OPTIMIZER_INT8_BLOCK 256
typedef enum zoe_optimizer_held_part {
    ZOE_STATE_CODES = 0,
    ZOE_STATE_SCALES = 1
} zoe_optimizer_held_part;
zoe_status zoe_optimizer_read_held(zoe_optimizer *opt, zoe_optimizer_state which,
                                   zoe_optimizer_held_part part, size_t offset, size_t count,
                                   void *dst);
zoe_status zoe_optimizer_write_held(zoe_optimizer *opt, zoe_optimizer_state which,
                                    zoe_optimizer_held_part part, size_t offset, size_t count,
                                    const void *src);
/* The dtype a state array is held in (main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype; the
 * host's share and the device share of partial offload alike). */
zoe_dtype zoe_optimizer_state_dtype(const zoe_optimizer *opt, zoe_optimizer_state which);
/* The step count (for bias correction) after a restore. */
zoe_status zoe_optimizer_set_step(zoe_optimizer *opt, long step);
/* Parameter buffer := compute-dtype copy of the master weights, all-gathered. Collective. */
zoe_status zoe_optimizer_refresh_params(zoe_optimizer *opt);

/* Memory, in bytes as allocated (see "Memory layout" above). host: plain host memory (master
 * weights, moments, gradient accumulators, the DPU snapshot on the CPU backend); pinned:
 * page-locked host memory from the device layer (gradient staging, the copy-out ring, the DPU
 * snapshot on CUDA); device: the device layer's memory (the parameter buffer, the gradient
 * bucket ring or full buffer, the partition buffer, the device share of partial offload; on the
 * CPU backend host memory standing in for it). pinned_ring and device_ring are the parts of
 * pinned and device that do not grow with the model (staging and bucket rings). */
typedef struct zoe_optimizer_footprint {
    size_t host_bytes, pinned_bytes, device_bytes;
    size_t pinned_ring_bytes, device_ring_bytes;
    size_t params_numel;    /* elements of the device parameter buffer (padded layout; 0 with
                             * params_on_host, whose partition counts in pinned_bytes) */
    size_t partition_numel; /* elements of this rank's partition (padding included) */
    /* Host memory the host step reads and writes per element of the host share: the state
     * arrays twice (read and written, in their dtypes), the fp32 gradient once, and the
     * compute-dtype weights it writes unless the master is the weights (CPU backend, fp32;
     * streamed weights that are a bf16 master).
     * An int8 moment counts its codes; its scales (4 bytes per block of 256, read and written:
     * 0.03 bytes per element) are left out of this whole number, and counted in host_bytes. */
    size_t step_bytes_per_element;
    /* Of pinned_bytes, with params_on_host, the compute-dtype weights of the partition apart
     * from the master: 0 where the master is those weights (a bf16 master computing in bf16 or
     * fp16 under no stale DPU schedule; fp32 on the CPU backend) and without params_on_host. */
    size_t params_host_bytes;
    /* The drive tier's pieces (docs/plan.md, "Drives"): of the host share, the state arrays
     * (master, moments, an int8 moment's scales) wherever they are held, of that the master
     * held pinned as the streamed weights (params_are_master), the gradient partitions, and
     * the largest bucket's partition in elements (the unit a host step streams the state in). */
    size_t state_bytes, pinned_master_bytes, grads_bytes;
    size_t bucket_part_numel;
    /* State on drives (state_paths): the scratch bytes of this rank's state (and with
     * grads_on_drives its gradient partitions) on the drives; its host ring counts in
     * host_bytes, what the drives hold does not. 0 otherwise. */
    size_t drive_bytes;
    /* Of host_bytes, the drive tier's host buffers: the ring of state buckets (with
     * grads_on_drives each holding its bucket's gradient too) and the gradient staging. */
    size_t drive_ring_bytes;
} zoe_optimizer_footprint;

/* What zoe_optimizer_create would allocate, computed by the code that sizes the allocations,
 * without allocating: the tensors' element counts in the order given to create, the DP size and
 * the configuration (bucket_numel, bucket_ring, grad_mode, dpu_warmup and partial_ratio
 * matter). Every DP rank allocates the same. */
typedef struct zoe_optimizer_footprint_args {
    zoe_backend backend;
    zoe_dtype compute_dtype; /* fp32, bf16 or fp16 */
    const size_t *numel;     /* num_tensors element counts, each > 0 */
    int num_tensors;
    int dp_size;                        /* >= 1 */
    const zoe_optimizer_config *config; /* as passed to zoe_optimizer_create */
} zoe_optimizer_footprint_args;
zoe_status zoe_optimizer_footprint_of(const zoe_optimizer_footprint_args *args,
                                      zoe_optimizer_footprint *out);
/* What this optimizer allocated (counted as it allocated). Not counted by either: the DP
 * communicator's own staging (on the CPU backend, a 16-bit reduction stages its input as fp32:
 * up to 4 bytes per element of the largest bucket, allocated at the first reduction). */
zoe_status zoe_optimizer_memory(const zoe_optimizer *opt, zoe_optimizer_footprint *out);
/* The step bookkeeping a checkpoint carries besides the state arrays. */
typedef struct zoe_optimizer_progress {
    long iteration;     /* zoe_optimizer_step calls since init (the DPU warm-up counts them) */
    long step;          /* applied steps (Adam's bias correction) */
    long skipped_total; /* steps skipped for a non-finite gradient */
    float loss_scale;   /* the dynamic loss scaler's scale and its clean steps in the window */
    int clean_steps;
    /* The learning rate of the last applied step: the weight prediction (ZOE_DPU_PREDICT) and the
     * delay compensation (ZOE_DPU_DC) redo that step from the state arrays. */
    float last_lr;
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
/* The resume side, after writing the state arrays and zoe_optimizer_refresh_params(): stages
 * the latest weights (the master's compute-dtype copy) for a refresh that is due at the next
 * zoe_optimizer_step or flush, as zoe_optimizer_settle leaves it. The caller then writes the
 * stale weights the next forward reads into the parameter buffer. (Where the staged weights
 * live is the optimizer's business: the partition buffer here; the refresh reads them.) */
zoe_status zoe_optimizer_defer_refresh(zoe_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
