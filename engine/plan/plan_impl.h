/* Internal to engine/plan*.c: the pieces of a plan before they are added up.
 *
 * Explained in docs/plan.md. */
#ifndef ZOE_ENGINE_PLAN_IMPL_H
#define ZOE_ENGINE_PLAN_IMPL_H

#include <stddef.h>
#include "models/gpt.h"
#include "zoe/plan.h"

/* The model's side, in bytes per rank. */
typedef struct zoe_plan_model {
    double act_recompute, act_full; /* the activation allocation with and without recompute */
    double workspace;               /* the kernels' workspace */
    double host_other;              /* the model's own host tables */
} zoe_plan_model;

/* The optimizer's side, in bytes per rank, from its footprint. */
typedef struct zoe_plan_optimizer {
    double device_params, device_ring, device_other; /* device allocations */
    double host, pinned;                             /* host allocations */
    double params_host;  /* of pinned: streamed weights' compute-dtype copy of the partition */
    double comm_staging; /* the CPU backend's fp32 staging of DP collectives, on every rank */
    double comm_root;    /* and MPI's temporary on each DP group's root (dp_rank 0) */
    double comm_pack;    /* the CPU backend's packing of collectives past INT_MAX elements */
    size_t part_numel, host_numel; /* the partition, and its host part, in elements */
    double adam_bytes_per_param;   /* host memory the host step moves per element */
    double adam_ns_per_param;      /* one core's arithmetic of the host step per element */
    /* The drive tier's pieces, from the footprint: of the host share, the state arrays (master,
     * moments, scales), of them a master held pinned as the streamed weights, the gradient
     * partitions; the largest bucket's partition in elements. With the weights on drives,
     * params_host and pinned_master are what the weights would pin in host memory (the layout
     * with them there): what the drives hold of them, and move; the other figures are the
     * layout's as allocated. */
    double state_bytes, pinned_master, grads_bytes;
    size_t bucket_part_numel;
    /* State on drives: the optimizer's scratch bytes and its host ring (and gradient staging),
     * both counted as it allocates them; host above holds the ring, not what the drives hold. */
    double drive_bytes, drive_ring;
} zoe_plan_optimizer;

/* One core's host Adam arithmetic in nanoseconds per element for the state's dtypes (ZOE_F32,
 * ZOE_BF16; the moments also ZOE_I8) and whether it writes a 16-bit copy of the weights, from
 * constants measured on one core (engine/plan/hardware.c). */
double zoe_plan_adam_ns_per_param(zoe_dtype master, zoe_dtype exp_avg, zoe_dtype exp_avg_sq,
                                  int weights_out_16bit);

/* The optimizer the trainer would build for c and model g at dp DP ranks. */
zoe_status zoe_plan_optimizer_of(const zoe_train_config *c, const zoe_gpt *g, int dp,
                                 zoe_plan_optimizer *out);

#endif
