/* The plan: what a training run will hold in each GPU's and each host's memory, and how long one
 * step will take, computed from the configuration before anything is allocated. zoe-plan prints
 * it; zoe-train computes it first and refuses a run that does not fit.
 *
 * Memory comes from the code that sizes the real allocations: the optimizer's footprint
 * (zoe_optimizer_footprint), the model's activation layout and its kernels' workspace
 * (models/gpt.c, kernels/), so the plan cannot drift from what a run allocates.
 *
 * Time is a model, not a measurement: GPU compute at a stated share of the GPU's peak (one
 * published figure per GPU, never fitted), the PCIe copies of gradients out and weights back
 * (2 bytes per parameter each way, the box's host links shared as it shares them), the host
 * Adam at the host's memory bandwidth times the bytes it moves or at its cores' measured
 * arithmetic, whichever is slower, the tensor-parallel
 * all-reduces and the data-parallel reduce-scatter and all-gather at the box's NVLink/NVSwitch
 * bandwidth, and what the delayed parameter update (DPU) hides.
 *
 * Explained in docs/plan.md. */
#ifndef ZOE_PLAN_H
#define ZOE_PLAN_H

#include <stdio.h>
#include "zoe/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One box: its GPUs (the CPU backend's "device" for `local`), its host and the links. */
typedef struct zoe_hardware {
    char name[32];
    const char *description; /* what it is and where each figure comes from (static string) */
    zoe_backend backend;     /* cuda for GPU boxes, cpu for `local` */
    zoe_dtype dtype;         /* the compute dtype it trains in (fp16 on V100s: no bf16) */
    int gpus;                /* GPUs in the box: the ranks one box holds (local: 0, any) */
    double gpu_bytes;        /* memory per GPU (local: 0, device memory is host memory) */
    double gpu_peak_flops;   /* dense fp16/bf16 tensor-core peak per GPU (local: measured) */
    double gpu_fraction;     /* share of peak GPT training reaches, from a published figure */
    const char *gpu_fraction_source;
    /* What attention's kernels depend on (kernels/attention_plan.h: the path, tiles and grid
     * they choose); gpu_cc 0 (local) prices attention as the other matmuls. */
    int gpu_cc;                  /* compute capability, major * 10 + minor */
    int gpu_sms;                 /* multiprocessors */
    double gpu_smem_per_block;   /* shared memory one block may opt in to, bytes */
    double gpu_fp32_flops;       /* fp32 peak of the CUDA cores (no tensor cores) */
    double gpu_memory_bandwidth; /* achievable bytes/s of device memory */
    double host_bytes;           /* host memory of the box */
    double host_reserve;         /* share of host memory left to the OS and everything else */
    int host_cores;
    double host_bandwidth;   /* achievable streaming bytes/s of the box's host memory */
    double pcie_bandwidth;   /* achievable bytes/s each way of one host link */
    int gpus_per_link;       /* GPUs that share one host link */
    double nvlink_bandwidth; /* all-reduce bus bandwidth per GPU over NVLink/NVSwitch, bytes/s */
    double rank_base_bytes;  /* host bytes a rank holds before its first allocation (CUDA
                              * context, MPI, libraries) */
    double host_free_bytes;  /* local: memory free now (MemAvailable), what other processes
                              * leave; 0 when unknown */
    /* The drive tier (docs/plan.md, "Drives"): the box's NVMe data drives, each one's capacity
     * in bytes and its achievable sequential read and write rates in bytes/s (O_DIRECT, large
     * blocks, deep queues), and where the figures come from. 0 drives: the box has none. */
    int drives;
    double drive_bytes;
    double drive_read_bandwidth, drive_write_bandwidth;
    const char *drive_source;
} zoe_hardware;

/* Fills *out with a named box: dgx2, v100-32g, dgx-a100-80g, dgx-h100, h200, or local (this
 * machine: hwloc, /proc/meminfo and a short memory-bandwidth and matmul probe). */
zoe_status zoe_hardware_preset(const char *name, zoe_hardware *out);
int zoe_hardware_preset_count(void);
const char *zoe_hardware_preset_name(int index);
/* This machine as `local` describes it; with probe 0 only its capacities (cores, memory), the
 * probed rates left 0, so that the plan's memory is right and its time model reports nothing
 * (zoe-train plans this way: the probes' buffers would count in its peak memory). */
zoe_status zoe_hardware_local(int probe, zoe_hardware *out);
/* rank_base_bytes := this process's resident memory now (zoe-train calls it after MPI_Init,
 * before it allocates, so that the plan adds its allocations to what the rank already holds),
 * plus what a CPU rank maps later outside the plan's buffers (BLAS and MPI buffers); `local`
 * states the same base with the first part as measured on a small VM. */
zoe_status zoe_hardware_measure_rank_base(zoe_hardware *hw);
/* The drives of --nvme-path DIR[,DIR...] on this machine: one drive per directory, each of
 * the least free space among them (statvfs; a rank's file is striped evenly across them); the
 * rates are left as they are (0 on `local`: not probed). A directory that cannot be read is
 * refused, naming it. */
zoe_status zoe_hardware_drives_of_paths(const char *paths, zoe_hardware *hw);

#define ZOE_PLAN_CONFIG_VERSION                                                                    \
    4 /* 2: main_grads_dtype; 3: offload_params, prefetch_layers;                                  \
       * 4: state_on_drives, grads_on_drives, weights on drives */
/* offload_params: the weights live on the box's drives (version 4). */
#define ZOE_PLAN_WEIGHTS_ON_DRIVES 2
/* grads_on_drives: the plan decides (on drives only where the host cannot hold them). */
#define ZOE_PLAN_GRADS_AUTO (-1)

typedef struct zoe_plan_config {
    int version; /* ZOE_PLAN_CONFIG_VERSION */
    zoe_model_config model;
    int tp, dp;                  /* grid: tp * dp ranks */
    int micro_batch, grad_accum; /* per rank */
    zoe_dtype dtype;             /* compute dtype */
    int recompute;
    int dpu;             /* delayed parameter update on (after its warm-up) */
    float offload_ratio; /* share of the optimizer state on the host (DeepSpeed's "ratio"): 1 is
                          * ZeRO-Offload, 0 keeps everything on the device */
    int64_t bucket_mb;   /* gradient bucket size */
    int host_threads;    /* OpenMP threads per rank; 0: the host's cores shared by its ranks */
    int ranks_per_node;  /* ranks sharing one host; 0: as many as the box has GPUs (local: all) */
    zoe_hardware hardware;
    /* The host's optimizer state dtypes (zoe_train_state_dtype; zoe_train_config's fields of
     * the same names): fp32 (0) by default. */
    int main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
    /* The host buffers that a run's options add (each page-locked on a GPU): dpu_schedule
     * (zoe_dpu_schedule; ZOE_DPU_EXACT, zoe-train's default) with evaluates (a validation set)
     * adds, on a stale schedule, the copy of the parameter buffer an evaluation keeps; checkpoints
     * (saving or resuming) the checkpoint files' staging buffer. */
    int dpu_schedule;
    int evaluates, checkpoints;
    zoe_dtype main_grads_dtype; /* the host gradient partition: fp32, or the compute dtype */
    /* Version 3. Streamed weights (--offload-params cpu): 1 keeps the weights on the host, in
     * the compute dtype (a bf16 master is itself those weights; for fp16 the device rounds it
     * on arrival, as the host step rounds resident weights), and gathers each unit
     * (a transformer layer, the embedding, the LM head) into a ring of prefetch_layers + 1
     * device buffers just before its forward and again before its backward: the rank's
     * 1/(t*d) partition host->device, the rest by an all-gather over DP. 0: the weights stay
     * on the device (the default). prefetch_layers: units fetched ahead; 0 takes the plan's,
     * the fewest that hide one unit's copy behind compute (time.stream.prefetch). */
    int offload_params;
    int prefetch_layers;
    /* Version 4. The drive tier (--offload nvme, --offload-params nvme; docs/plan.md,
     * "Drives"). state_on_drives 1: the optimizer state (master, moments) lives on the box's
     * drives and the host step streams it per bucket through a host ring (read bucket i + k,
     * update i, write i - k). offload_params ZOE_PLAN_WEIGHTS_ON_DRIVES: the weights too, each
     * unit's partition read from the drives into a host ring ahead of its host->device copy,
     * once per forward and once per backward of every micro-batch (needs state_on_drives: the
     * host step writes them). grads_on_drives, with state_on_drives: the gradient partition on
     * the drives (1), on the host (0), or ZOE_PLAN_GRADS_AUTO, on the drives only where the host
     * cannot hold it. */
    int state_on_drives;
    int grads_on_drives;
} zoe_plan_config;

/* Defaults: the demo model, TP=1 x DP=1, micro-batch 4, fp32 (zoe-plan takes the box's own dtype),
 * no recompute, no DPU (its schedule exact), offload ratio 1, 16 MiB buckets, no evaluation, no
 * checkpoints, nothing on drives (gradients there where the host cannot hold them, once the
 * state is). hardware is left empty: fill it with
 * zoe_hardware_preset. */
void zoe_plan_config_init(zoe_plan_config *cfg);
/* The plan configuration of a zoe-train run on world ranks (micro-batch, accumulation, dtype,
 * recompute, DPU, offload, buckets as the trainer will build them) on hardware hw. */
zoe_status zoe_plan_config_from_train(const zoe_train_config *train, int world,
                                      const zoe_hardware *hw, zoe_plan_config *out);

/* Where memory goes, in bytes. Per GPU means per rank's device; on the CPU backend the
 * device is host memory and counts in the host total too. */
typedef struct zoe_plan_result {
    int ranks, ranks_per_node, nodes;
    int64_t params;       /* the model as defined */
    int64_t rank_params;  /* this rank's TP shard, padded vocabulary */
    int64_t state_params; /* this rank's optimizer partition */

    struct {
        double weights;     /* compute-dtype parameter buffer */
        double grad_ring;   /* gradient bucket buffers */
        double optimizer;   /* everything else the optimizer holds on the device */
        double activations; /* with the run's recompute setting */
        double activations_recompute, activations_full; /* with and without recompute */
        double workspace; /* kernel workspace (CUDA; on CPU it is host memory) */
        double comm;      /* communication buffers (NCCL) */
        double total, capacity;
    } gpu;
    struct {
        double optimizer_per_rank; /* optimizer state and buffers in pageable memory */
        double pinned_per_rank;    /* page-locked staging */
        double other_per_rank;     /* the rest: rank base, device memory on the CPU backend, host
                                    * workspace and communication staging */
        double per_rank;           /* the fullest rank (a DP group's root) */
        double total;              /* the box's ranks together */
        double capacity, reserve, available; /* available = capacity - reserve */
    } host;
    int fits_gpu, fits_host, fits;
    char verdict[256]; /* "fits" or the binding figure ("host: 4 ranks x 9.8 GiB = ...") */

    /* One step, in seconds. */
    struct {
        double flops_per_gpu;    /* model FLOPs a GPU executes per step (recompute included) */
        double compute;          /* at the stated share of peak; attention as its kernels run */
        double attention;        /* of compute: attention's kernels (0: priced as matmuls) */
        char attention_path[64]; /* which kernels run it: "tensor cores", "fp32 flash ..." */
        double tp_comm;          /* TP all-reduces (not overlapped) */
        double dp_reduce_scatter, dp_all_gather;
        double pcie_out, pcie_in; /* gradients device -> host, weights host -> device */
        double host_adam;         /* the larger of the two below */
        /* The host Adam at the host's memory bandwidth (the bytes it moves), and at its cores'
         * arithmetic (one core's measured nanoseconds per parameter for the state's dtypes,
         * host_adam_ns_per_param, over the cores the box's ranks run it on); host_adam_bound
         * says which is larger: "memory" or "compute". */
        double host_adam_memory, host_adam_compute;
        double host_adam_ns_per_param;
        int host_adam_cores;
        char host_adam_bound[8];
        double hidden_by_dpu; /* time DPU takes (or would take) off the critical path */
        double host_stall;    /* what the host step would add to the step without DPU */
        double stall_share;   /* host_stall / the step without DPU */
        double step;
        double tokens, tokens_per_second, tflops_per_gpu;
        char bound[32]; /* the resource that binds: "gpu compute", "host adam", "pcie" ... */
    } time;

    /* Streamed weights (offload_params): what the device holds of them, what the host holds,
     * and what crosses per step. Zero without streaming. */
    struct {
        int prefetch;           /* units fetched ahead: the ring holds prefetch + 1 */
        int prefetch_from_plan; /* 1: the plan chose it (no prefetch_layers given) */
        double layer_bytes;     /* a transformer layer's TP shard in the compute dtype */
        double embedding_bytes; /* the embedding's (GPT: also the LM head), held through a pass */
        double ring; /* on the device: prefetch + 1 buffers of the largest unit the ring cycles
                      * through, the embedding's own, and over DP the gather's staging */
        double host_weights; /* per rank: the compute-dtype weights of its partition, 0 where
                              * the master is those weights (a bf16 master computing in bf16
                              * under no stale DPU schedule; fp32 on the CPU backend); the
                              * optimizer's sizing says (zoe_optimizer_footprint) */
        double host_bytes_per_param; /* the box's host total over the parameters it holds */
        /* Per rank per step: each unit crosses once per forward and once per backward of every
         * micro-batch, its 1/(t*d) partition host->device and the rest by the DP all-gather. */
        double pcie_bytes, gather_bytes;
        double pcie, all_gather; /* seconds of each per step, the host link shared as the box
                                  * shares it */
        /* Per micro-batch: one layer's forward compute, the pace of its copy (the slower of its
         * PCIe and all-gather, which pipeline over units), and its latency (both in turn). */
        double layer_forward, layer_copy, layer_latency;
        double exposed; /* what the copies add to the step: where they outlast the forward's or
                         * the backward's compute, and the embedding's fetch that opens
                         * each pass */
        /* The smallest micro-batch from which the forward's compute hides its copies (copies per
         * micro-batch are fixed, compute grows with it), and whether that run fits. */
        int hide_micro_batch;
        int hide_fits;
        char bound[32];    /* what paces the stream: "compute" (hidden), "pcie", "dp all-gather",
                            * "host copies" (the CPU backend),
                            * "latency" (too few units prefetched) */
        double head_bytes; /* an untied LM head's (Llama), a unit of its own; 0 when tied */
        /* The units the ring cycles through are a layer's parts (tensor_parallel/layers.h:
         * the attention's input, its output projection, the MLP's input, fc2): the largest
         * one's TP shard, and with recompute the bytes of a layer the backward fetches a second
         * time (every part but fc2, which the recomputation hands on to the backward). */
        double part_bytes, refetch_bytes;
    } stream;
    /* Model FLOPs utilisation: the model's FLOPs per step (forward and backward, 3 x the
     * forward; a recomputed forward not counted) per GPU over the step, against the GPU's peak. */
    double mfu;

    /* The drive tier (state_on_drives): what lives on the drives, the host rings that stream it,
     * and what crosses per step. Zero without it. */
    struct {
        int grads;            /* the gradient partition is on the drives (as asked, or decided) */
        int buckets_ahead;    /* k: the host step reads bucket i + k while it updates bucket i */
        double state_bytes;   /* per rank: master, moments, scales */
        double weights_bytes; /* per rank: the compute-dtype weights apart from the master */
        double grads_bytes;   /* per rank: the gradient partition */
        double per_rank, total, capacity, available; /* available: capacity less the reserve */
        int fits;
        /* Host rings, per rank: 2k + 1 buckets of state (and of the gradient where it is on the
         * drives, and the written weights), and, with the weights on the drives, prefetch + 2
         * partitions of the largest unit (pinned: they feed the host->device copy). */
        double state_ring, weights_ring;
        /* Per rank per step: the host step's reads and writes, the weights' reads. */
        double step_read_bytes, step_write_bytes, stream_read_bytes;
        double read_bandwidth, write_bandwidth; /* the box's drives together, bytes/s */
        /* Seconds per step of the box's drives: the host step's traffic (reads at the read rate
         * and writes at the write rate, in turn: one drive serves both), the weights' reads,
         * and both together (the drives are busy this long whatever overlaps). */
        double host_step, stream, seconds;
    } drive;
} zoe_plan_result;

/* Plans cfg. Pure: allocates only its own tables, touches no device, needs no MPI. */
zoe_status zoe_plan(const zoe_plan_config *cfg, zoe_plan_result *out);

/* The report, human-readable or as one JSON object. */
void zoe_plan_print(FILE *out, const zoe_plan_config *cfg, const zoe_plan_result *r);
zoe_status zoe_plan_write_json(FILE *out, const zoe_plan_config *cfg, const zoe_plan_result *r);
/* One line: "plan on dgx2: fits; GPU 20.02 of 32.00 GiB; host 1079.51 of 1382.40 GiB available
 * (16 ranks, up to 67.47 GiB each); step 21.238 s predicted (host adam binds)". */
void zoe_plan_summary(const zoe_plan_config *cfg, const zoe_plan_result *r, char *buf, size_t len);

/* --offload-ratio auto: the smallest share of optimizer state on the host (0 to 1 in steps of
 * 1/64), that is the largest share on the device, with which cfg fits; fails when even 1
 * (everything offloaded) does not fit. */
zoe_status zoe_plan_auto_offload_ratio(const zoe_plan_config *cfg, float *ratio);
/* --dpu auto: DPU pays when, in a plan made without it, the host step would stall the device by
 * more than ZOE_PLAN_DPU_STALL_SHARE of the synchronous step and DPU would hide some of it. */
#define ZOE_PLAN_DPU_STALL_SHARE 0.10
/* --max-model: the GPT with the most parameters that fits cfg's run (grid, batch, dtype,
 * offload, hardware), along GPT-3's family of shapes (Brown et al. 2020, "Language Models are
 * Few-Shot Learners", Table 2.1: the 6.7B, 13B and 175B models have as many layers as heads,
 * each head 128 wide: 32 x 4096, 40 x 5120, 96 x 12288): L layers of hidden 128 L with L heads,
 * MLP 4 x hidden, L a multiple of tp; cfg's sequence length and vocabulary. Depth and width grow
 * together, so the answer is a shape of the family the field trains. With streamed weights and
 * no prefetch_layers given, a member fits at the plan's prefetch or, failing that, at one unit
 * ahead (the smallest ring; its copies then paced by their latency). *best_plan (optional) is
 * its plan (prefetch_from_plan 0 where it took one unit ahead). */
zoe_status zoe_plan_max_model(const zoe_plan_config *cfg, zoe_model_config *best,
                              zoe_plan_result *best_plan);
int zoe_plan_dpu_pays(const zoe_plan_result *r);
/* --max-model's run unless flags change it: a real training shape, GPT-3's sequence length and
 * GPT-2/3's vocabulary, one sequence per micro-batch, activations recomputed. */
#define ZOE_PLAN_MAX_MODEL_SEQ_LEN     2048
#define ZOE_PLAN_MAX_MODEL_VOCAB       50257
#define ZOE_PLAN_MAX_MODEL_MICRO_BATCH 1
#define ZOE_PLAN_MAX_MODEL_RECOMPUTE   1
/* The head width and the layers-to-heads ratio of the family zoe_plan_max_model scales. */
#define ZOE_PLAN_FAMILY_HEAD_DIM 128
/* *out := the family's member of `layers` layers (and heads; hidden 128 x layers) at base's
 * sequence length, vocabulary and dropout. */
void zoe_plan_family_member(const zoe_model_config *base, int layers, zoe_model_config *out);

#ifdef __cplusplus
}
#endif
#endif
