/* Internal: the optimizer struct, shared by the files of offload/. */
#ifndef ZOE_OFFLOAD_OPTIMIZER_IMPL_H
#define ZOE_OFFLOAD_OPTIMIZER_IMPL_H

#include <pthread.h>
#include "kernels/adam.h"
#include "offload/layout.h"
#include "zoe/comm.h"
#include "zoe/optimizer.h"

typedef enum { SLOT_FREE = 0, SLOT_OPEN, SLOT_IN_FLIGHT } slot_state;

/* One device bucket buffer of the ring and the pinned buffer its partition is copied into. */
typedef struct grad_slot {
    void *device;    /* dp_size * max_part elements, compute dtype */
    void *pinned;    /* max_part elements, compute dtype */
    zoe_event *done; /* recorded on the copy stream after the device-to-host copy */
    slot_state state;
    int bucket;    /* the bucket it holds, -1 when free */
    long sequence; /* order of completion, to drain the oldest first */
} grad_slot;

/* The Adam constants of one step: with the configured weight decay, and with none for the
 * segments of exempt tensors. Derived once per step; each segment picks one set. */
typedef struct zoe_step_consts {
    zoe_adam_consts decayed, exempt;
} zoe_step_consts;

static inline const zoe_adam_consts *zoe_segment_consts(const zoe_step_consts *c,
                                                        const zoe_segment *seg) {
    return seg->no_decay ? &c->exempt : &c->decayed;
}

/* Per-bucket progress within the micro-batch. */
typedef struct bucket_progress {
    int ready; /* tensors marked ready */
    int slot;  /* ring slot, -1 when none */
    int reduced;
} bucket_progress;

struct zoe_optimizer {
    zoe_optimizer_config cfg;
    zoe_grid *grid;
    zoe_device *dev;
    zoe_stream *stream;        /* the caller's compute stream */
    zoe_stream *copy_stream;   /* reductions and device-to-host copies of gradients */
    zoe_stream *update_stream; /* the device Adam and host-to-device copies of an update */
    zoe_event *grads_written;  /* recorded on the compute stream when a bucket is final */
    zoe_event *grads_reduced;  /* recorded on the copy stream before an update reads gradients */
    zoe_event *refreshed;      /* recorded on the compute stream after the all-gather */
    zoe_comm *dp;
    int dp_size, dp_rank;
    zoe_dtype dtype;
    size_t esz;
    zoe_layout lay;
    size_t host_numel; /* partition elements on the host: part_numel - device_numel */

    void *params;   /* device, lay.flat_numel elements of compute dtype */
    void *part_out; /* device, the updated partition in compute dtype, all-gathered at refresh */
    /* Device-resident state (partial offload), partition coordinates [0, device_numel). */
    float *d_master, *d_m, *d_v, *d_grad[2];
    /* Host state, partition coordinates [device_numel, part_numel) shifted to 0. */
    float *h_master, *h_m, *h_v, *h_grad[2];
    void *h_out; /* pinned, host_numel elements of compute dtype; on the CPU backend the host
                  * part of part_out itself (see zoe_device_is_host_memory) */
    size_t num_chunks;
    int *chunk_segment; /* first host segment that reaches into each chunk */

    /* Gradients of the current accumulation. */
    grad_slot *slots;
    bucket_progress *progress;
    unsigned char *tensor_ready;
    void *full_grad;   /* ZOE_GRAD_FULL_BUFFER: device, flat_numel elements */
    void *full_pinned; /* ZOE_GRAD_FULL_BUFFER: pinned, host_numel elements */
    long sequence;
    int in_micro_batch;
    int micro_batches; /* completed since the last step */
    int grad_buf;      /* which of the two gradient partitions receives gradients */
    double host_sumsq; /* counted sum of squares of the host gradient partition */

    /* Step state. */
    long iteration; /* calls of zoe_optimizer_step since init */
    float loss_scale;
    int clean_steps;
    zoe_optimizer_stats stats;

    /* Delayed parameter update: the update in flight on the worker thread. */
    pthread_t worker;
    int in_flight;
    int refresh_due; /* the update landed (zoe_optimizer_settle) but its refresh is still due */
    zoe_step_consts flight_consts;
    int flight_buf;
    zoe_status flight_status;
    char flight_error[256];
};

/* grads.c */
zoe_status zoe_grads_create(zoe_optimizer *opt);
void zoe_grads_destroy(zoe_optimizer *opt);
/* ZOE_GRAD_FULL_BUFFER: reduces the full buffer into the gradient partitions (in step). */
zoe_status zoe_grads_reduce_full(zoe_optimizer *opt);

/* step.c */
zoe_status zoe_state_create(zoe_optimizer *opt);
void zoe_state_destroy(zoe_optimizer *opt);
/* Waits for the update in flight (DPU), if any, and refreshes the parameters with it. */
zoe_status zoe_update_wait(zoe_optimizer *opt);

/* On the CPU backend device memory is host memory: the host can read and write "device"
 * buffers in place, so staging copies between them, which would only move the same bytes, are
 * skipped (the reduced gradient buckets are read where the reduce-scatter left them, and the
 * host Adam writes the new weights straight into the partition buffer). */
static inline int zoe_device_is_host_memory(const zoe_optimizer *opt) {
    return zoe_device_backend(opt->dev) == ZOE_BACKEND_CPU;
}

#endif
