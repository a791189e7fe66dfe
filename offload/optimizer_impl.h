/* Internal: the optimizer struct, shared by the files of offload/.
 *
 * Explained in docs/offload.md, "Memory layout". */
#ifndef ZOE_OFFLOAD_OPTIMIZER_IMPL_H
#define ZOE_OFFLOAD_OPTIMIZER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
#include "offload/layout.h"
#include "runtime/drive_io.h"
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
    zoe_adam_rounding rounding; /* the stochastic rounding of bf16 state: the rank's, this step's */
} zoe_step_consts;

static inline const zoe_adam_consts *zoe_segment_consts(const zoe_step_consts *c,
                                                        const zoe_segment *seg) {
    return seg->no_decay ? &c->exempt : &c->decayed;
}

/* The memory layout (docs/offload.md, "Memory layout"): which arrays exist and how many elements
 * each holds, a pure function of the backend, the dtype, the flat layout and the configuration.
 * zoe_state_create() and zoe_grads_create() allocate exactly these, and
 * zoe_optimizer_footprint_of() sums them without allocating. */
typedef struct zoe_state_sizes {
    /* CPU backend, fp32 weights: the rank's slices of the parameter buffer are the fp32 master
     * weights (no separate master array, no weight copy). */
    int master_in_params;
    /* DPU with the master in the parameters: two fp32 gradient partitions alternate, and the
     * update in flight writes the new weights over the gradient it read (in place). */
    int dpu_swap;
    /* DPU otherwise: the step rounds the finished fp32 gradient (divided by the micro-batch
     * count) into a compute-dtype snapshot, the update in flight reads it and writes the new
     * compute-dtype weights over it (in place), and the one fp32 accumulator is free at once. */
    int dpu_snapshot;
    size_t h_lo;    /* partition coordinate of element 0 of the host arrays: 0 on CPU, else the
                     * device share (on CPU the device share lives in the host arrays) */
    size_t h_numel; /* elements of each host array: part_numel - h_lo */
    int h_master;   /* 1: a host master array */
    /* The host arrays' dtypes (zoe_optimizer_config.main_params_dtype ...); compressed: one of
     * them is not fp32, and the host step is kernels/adam_state.h's. The master in the
     * parameters is an fp32 master; the device share on CUDA has the same dtypes. */
    zoe_adam_state_dtypes host_dtypes;
    int compressed;
    size_t h_blocks; /* blocks of the host arrays (ZOE_ADAM_INT8_BLOCK): an int8 moment's scales */
    int h_grads;     /* host gradient partitions: 1, or 2 with dpu_swap */
    zoe_dtype grad_dtype; /* theirs: fp32, or the compute dtype (main_grads_dtype) */
    size_t snap;          /* DPU snapshot elements, compute dtype, plain host memory */
    /* Streamed weights with a bf16 master computing in bf16 or fp16: the weights are the
     * master's values (the host step's bf16 copy is the master's bits; its fp16 copy is their
     * exact conversion, which the weight stream makes on the device after each gather), so the
     * master array (pinned) is the parameter buffer, and no second copy is kept or written. Not
     * under a stale DPU schedule, whose update in flight rewrites the master while the forward
     * still reads the weights it had. */
    int params_are_master;
    size_t params;      /* device, compute dtype: the parameter buffer */
    size_t host_params; /* params_on_host: pinned host, compute dtype: the partition instead */
    size_t part_out;    /* device, compute dtype: the partition buffer (CUDA with DPU or a device
                         * share) the update writes before the all-gather; 0: none, the updated
                         * partition lands in the parameter buffer's own slices */
    size_t d_state;     /* device master, m and v of the device share (CUDA), in host_dtypes */
    int d_grads;        /* device fp32 gradient partitions of d_state elements: 1, 2 with DPU */
    size_t out_ring;    /* pinned copy-out ring (CUDA, resident weights): elements per slot, compute
                         * dtype */
    int out_slots;
    int slots;                       /* gradient bucket ring */
    size_t slot_device, slot_pinned; /* elements per slot, compute dtype */
    /* cfg.bucket_ring_window: one slot per bucket, each at its place (zoe_layout_ring_places) in
     * one device buffer of ring_device elements and one pinned buffer of ring_pinned (places / d),
     * instead of slot_device and slot_pinned each */
    size_t ring_device, ring_pinned;
    size_t full_grad, full_pinned; /* ZOE_GRAD_FULL_BUFFER, compute dtype */
    /* State on drives (cfg.state_paths; offload/state_drive.c): the host arrays the step reads
     * and writes (the master unless params_are_master, the moments, int8 scales) in the drive
     * engine's scratch space, bucket by bucket, and a ring of drive_slots (2 drive_ahead + 1,
     * or the buckets if fewer) slots of drive_slot bytes in host memory instead. drive_paged: the
     * host bytes they would take. */
    int drive, drive_ahead, drive_slots;
    size_t drive_slot, drive_bytes, drive_paged;
    /* The gradient partition(s) on drives too (cfg.grads_on_drives): h_grads regions per bucket
     * of drive_grad_slot bytes at most, counted in drive_bytes and drive_paged; each ring slot
     * holds a bucket's gradient after its state (drive_slot counts it), and drive_stage bytes of
     * host memory stage the accumulation (drive_stage_slots buckets: ZOE_GRAD_STAGE_SLOTS, or
     * with one micro-batch a step, cfg.micro_batches, none to read ahead). */
    int drive_grads, drive_stage_slots;
    size_t drive_grad_slot, drive_stage;
    /* Weights on drives (cfg.params_on_drive with streamed weights and state on drives): the
     * host partition of the weights lives in the buckets' regions too, as the master where
     * params_are_master, else as a weights array of weights_esize bytes per element (the fp32
     * master itself with master_in_params); host_params is then 0. */
    int weights_on_drive;
    size_t weights_esize;
} zoe_state_sizes;

/* The smaller of two sizes (the offload files' one copy). */
static inline size_t zoe_min_size(size_t a, size_t b) {
    return a < b ? a : b;
}

/* The partition alignment, in elements: 64 bytes of the compute dtype, and with an int8 moment
 * whole blocks of it, so that every bucket's partition and the host share start at a block
 * boundary (a block never holds two buckets' elements, nor device and host ones). */
static inline size_t zoe_partition_align(const zoe_optimizer_config *cfg, zoe_dtype dtype) {
    size_t align = 64 / zoe_dtype_size(dtype);
    const zoe_adam_state_dtypes dt = {.master = cfg->main_params_dtype,
                                      .exp_avg = cfg->exp_avg_dtype,
                                      .exp_avg_sq = cfg->exp_avg_sq_dtype};
    return zoe_adam_state_has_int8(&dt) && align < ZOE_ADAM_INT8_BLOCK ? ZOE_ADAM_INT8_BLOCK
                                                                       : align;
}

/* The alignment of each tensor within its bucket, in elements: with an int8 moment whole blocks,
 * so that a block holds one tensor's elements. A block's scale is its largest value, and a
 * tensor held alike by several TP ranks (TP-replicated, or a sharded block on each of its
 * replicas) must quantise alike there: its blocks may not hold a neighbour that differs between
 * those ranks. The partition boundaries of DP ranks are whole blocks too (zoe_partition_align). */
static inline size_t zoe_tensor_align(const zoe_optimizer_config *cfg) {
    const zoe_adam_state_dtypes dt = {.master = cfg->main_params_dtype,
                                      .exp_avg = cfg->exp_avg_dtype,
                                      .exp_avg_sq = cfg->exp_avg_sq_dtype};
    return zoe_adam_state_has_int8(&dt) ? ZOE_ADAM_INT8_BLOCK : 1;
}

void zoe_state_sizes_of(zoe_backend backend, zoe_dtype dtype, const zoe_layout *lay, int dp_size,
                        const zoe_optimizer_config *cfg, zoe_state_sizes *out);
void zoe_state_sizes_bytes(const zoe_state_sizes *z, const zoe_layout *lay, zoe_dtype dtype,
                           zoe_optimizer_footprint *out);

/* State on drives (offload/state_drive.c). The arrays of a bucket: master, exp_avg, exp_avg_sq,
 * exp_avg's and exp_avg_sq's int8 scales, each at ZOE_STATE_DRIVE_ALIGN bytes (a multiple of any
 * drive's O_DIRECT alignment, fixed so that the sizes are known before a drive is opened). */
enum {
    ZOE_STATE_ARRAYS = 6, /* and the weights (sz.weights_esize), last */
    ZOE_STATE_WEIGHTS = 5,
    ZOE_STATE_DRIVE_ALIGN = 4096,
    ZOE_STATE_AHEAD_DEFAULT = 2,
    ZOE_STATE_MAX_PATHS = 64,
    /* Gradients on drives, the accumulation's staging: one bucket summed, the one before it
     * landing on the drive, and ZOE_GRAD_STAGE_AHEAD read ahead (micro-batches after the
     * step's first), whatever the model. */
    ZOE_GRAD_STAGE_AHEAD = 2,
    ZOE_GRAD_STAGE_SLOTS = ZOE_GRAD_STAGE_AHEAD + 2,
};
enum { ZOE_STAGE_FREE = 0, ZOE_STAGE_AHEAD, ZOE_STAGE_OPEN }; /* a staging slot's state */
typedef struct zoe_state_drive {
    zoe_drive_io *io;
    char *paths_given; /* cfg.state_paths, copied */
    char *paths_text;  /* cfg.state_paths, split in place */
    int ahead, slots;
    size_t slot_bytes;
    char *ring; /* slots * slot_bytes, aligned for O_DIRECT */
    int num_buckets;
    size_t *h0, *numel;     /* per bucket: its host coordinates [h0, h0 + numel) */
    size_t *offset, *bytes; /* per bucket: its region of the scratch space */
    int *slot_state;        /* per slot: idle, reading or writing */
    int *slot_bucket;
    zoe_drive_io_ticket *ticket;
    unsigned char *written; /* per bucket: written to the drives once (else it reads as zeros) */
    int cached, dirty;      /* the bucket paged into slot 0 outside the step's stream, -1: none */
    int shown;              /* the bucket the window shows, -1: none */
    int paging;             /* a paged pass is running (they do not nest) */
    /* the last streamed pass's time blocked on the drives (stats.ms_drive_wait): written by
     * the thread that streams (the update's worker under DPU), read by stats_get */
    _Atomic double ms_wait;
    /* Gradients on drives (sz.drive_grads): per bucket the region of gradient partition 0
     * (partition 1's is grad_span further); in each ring slot the bucket's gradient at grad_at.
     * grad_buf: which partition a pass shows (-1: none), grad_write: whether it goes back. */
    size_t *grad_offset, *grad_bytes, grad_span, grad_at;
    int grad_partitions; /* sz.h_grads */
    int grad_buf, grad_write;
    int *grad_pending; /* per slot: a gradient request in flight */
    zoe_drive_io_ticket *grad_ticket;
    /* The accumulation's staging (the main thread's, while a worker may stream the state):
     * ZOE_GRAD_STAGE_SLOTS buckets, each written to its region behind the next one's sums, and
     * in a micro-batch after the step's first, the buckets due next read ahead into free slots
     * (offload/state_drive.c, "The accumulation's staging"). Per slot: its state (free, read
     * ahead, open), bucket and gradient partition, and the request in flight (stage_busy). */
    char *stage;
    int stage_state[ZOE_GRAD_STAGE_SLOTS], stage_bucket[ZOE_GRAD_STAGE_SLOTS],
        stage_buf[ZOE_GRAD_STAGE_SLOTS], stage_busy[ZOE_GRAD_STAGE_SLOTS];
    zoe_drive_io_ticket stage_ticket[ZOE_GRAD_STAGE_SLOTS];
    int stage_slots; /* of them in use: sz.drive_stage_slots */
    int stage_next;  /* where the search for a free slot starts: the oldest write */
    int stage_open;  /* the slot being summed, -1: none */
    /* The order the buckets were staged in: the last micro-batch's (stage_order_count of
     * them, stage_rank[b] bucket b's place, -1: not staged), the prediction of this one's;
     * this one's so far (stage_now, stage_count). stage_done[b]: b staged in this one. */
    int *stage_order, *stage_rank, stage_order_count, *stage_now, stage_count;
    unsigned char *stage_done;
    /* Of the step's accumulation (since its first micro-batch began): the time the main thread
     * waited for the staging's reads and writes (stats.ms_grad_wait), the buckets whose read
     * was ahead (hits) and those read at their turn (misses). */
    double ms_stage_wait;
    long stage_hits, stage_misses;
} zoe_state_drive;

/* ZOE_DPU_EXACT (offload/speculate.c). Two phases, never at once: the speculation (the step's
 * host update, started bucket by bucket on a worker thread during the last micro-batch's
 * backward with the constants the step is expected to take) and, with gated_forward, the
 * settling (what the step left to do, on a worker in bucket order while the next forward runs,
 * each bucket refreshed when the forward asks for it). */
typedef struct zoe_speculation {
    int expected;           /* zoe_optimizer_expect_step for the step being built */
    int armed;              /* the speculation's worker was started (at the first bucket) */
    zoe_step_consts consts; /* the expected step: declared lr, clip factor 1, next step number */
    double certain_clip;    /* raw host sum of squares past which the step clips for certain */
    double unscale;         /* 1 / (micro-batches * loss scale) of the expected step */
    int stopped;            /* a bucket failed the checks: it and the rest wait for the step */
    int spec_set;           /* which segments the worker updates (speculate.c's run_set) */
    /* The running speculation's own copies (expect_step of the next step may write the above
     * while its worker still runs, the settling having taken the step's tail over). */
    zoe_step_consts run_consts;
    int run_set;
    int *queue; /* bucket indices in completion order, num_buckets */
    int queued, taken, closing;
    unsigned char *applied; /* per bucket: the worker updated it (read after the join) */
    /* Settling: the worker updates bucket after bucket (settle_consts, or undoes the applied
     * ones for a skipped step) and publishes done_upto; the forward refreshes up to a bucket. */
    int settling, settle_skip, settle_set, done_upto, next_refresh, settle_buf;
    zoe_step_consts settle_consts, settle_guess; /* the step's, and the speculation's */
    pthread_t worker;                            /* the speculation's worker, or the settling's */
    pthread_t spec_tail; /* the speculation's worker, handed to the settling to join */
    int worker_running, tail_running, lock_ready;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    zoe_status status;        /* the speculation worker's */
    zoe_status settle_status; /* the settling worker's (and the speculation's it took over) */
    char error[256];
    double ms_update; /* the speculation worker's Adam time */
    double ms_settle; /* the settling worker's, reported with the next step */
    double ms_gated;  /* what the forward waited for the settling, reported with the next step */
} zoe_speculation;

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
    zoe_state_sizes sz;
    zoe_optimizer_footprint mem; /* what was allocated, counted as it was */

    void *params;   /* device, lay.flat_numel elements of compute dtype; params_on_host: pinned
                     * host, lay.part_numel (zoe_weights_index) */
    void *part_out; /* device partition buffer (sz.part_out), or NULL */
    /* Device-resident state (partial offload), partition coordinates [0, device_numel), in
     * sz.host_dtypes (the scales: int8 moments, one per block). On the CPU backend these alias
     * the host arrays (whose element 0 is partition coordinate 0). */
    void *d_master, *d_m, *d_v;
    float *d_m_scale, *d_v_scale, *d_grad[2];
    zoe_adam_table *device_table; /* the device segments, for one-launch steps and norms */
    /* Host state, partition coordinates [sz.h_lo, part_numel) shifted to 0. h_master is NULL
     * with the master in the parameters; h_grad[1] is h_grad[0] unless sz.dpu_swap. */
    void *h_master, *h_m, *h_v;   /* in sz.host_dtypes */
    float *h_m_scale, *h_v_scale; /* int8 moments: one scale per block of the host arrays */
    void *h_grad[2]; /* in sz.grad_dtype: zoe_host_grad_at; fp32 ones also zoe_host_grad_f32 */
    uint64_t rounding_seed; /* cfg.rounding_seed mixed with the DP rank (optimizer.c) */
    void *h_snap;           /* sz.snap elements of compute dtype, or NULL */
    void *out_ring[2];      /* pinned copy-out ring, or NULL */
    zoe_event *out_done[2]; /* recorded after each slot's copy to the device */
    size_t num_chunks;
    int first_run_segment; /* the first segment the host Adam updates (0 on CPU) */
    int *chunk_segment;    /* first such segment that reaches into each chunk */

    /* Gradients of the current accumulation. */
    grad_slot *slots;
    void *ring_device, *ring_pinned; /* sz.ring_device: the slots' buffers */
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
    zoe_step_consts flight_snap_consts; /* for the host share's snapshot (sz.dpu_snapshot) */
    float flight_snap_scale;            /* the snapshot's factor: 1 / micro-batches */
    /* With a snapshot the update in flight first takes it from the fp32 gradient partition,
     * then releases the partition: grad_held is 1 until then, and the next iteration's first
     * write to the partition waits for the release (zoe_grads_wait_released). */
    pthread_mutex_t release_lock;
    pthread_cond_t released;
    int grad_held;
    int flight_buf;
    zoe_status flight_status;
    char flight_error[256];
    double flight_ms_update; /* the worker writes it; join_update publishes it in stats */
    /* The schedule variants (zoe_dpu_schedule): the update in flight writes a prediction of the
     * next weights instead of its own (flight_predict), or first compensates its gradient for
     * the step it is late by, with the constants of that step and lambda (flight_dc). */
    int flight_predict, flight_dc;
    zoe_step_consts flight_prev_consts;
    float flight_dc_lambda;
    float last_lr; /* of the last applied step (zoe_optimizer_progress) */
    zoe_speculation spec;
    int out_next; /* the copy-out ring slot the next block uses */
    /* State on drives: h_master (unless params_are_master), h_m, h_v and the scales show one
     * bucket of a ring slot, whose element 0 is host coordinate win_lo[array] (0: resident). */
    zoe_state_drive *drive;
    size_t win_lo[3];
    size_t win_grad; /* gradients on drives: host coordinate of h_grad[buf]'s element 0 */
    /* Weights on drives: params shows one bucket's weights, whose element 0 is partition
     * coordinate params_lo (0: the whole partition, resident). */
    size_t params_lo;
};

/* Element `index` of the parameter buffer (zoe_weights_index), in its window where the weights
 * are on drives. */
static inline void *zoe_params_at(const zoe_optimizer *opt, size_t index) {
    return (char *)opt->params + (index - opt->params_lo) * opt->esz;
}

/* Host element h of gradient partition buf, in sz.grad_dtype. */
static inline void *zoe_host_grad_at(const zoe_optimizer *opt, int buf, size_t h) {
    return (char *)opt->h_grad[buf] + (h - opt->win_grad) * zoe_dtype_size(opt->sz.grad_dtype);
}
/* Host element h of gradient partition buf as fp32, for what only an fp32 partition reaches (an
 * fp32 master in the parameters' dpu_swap and dc's compensation in place there, the exact
 * schedule's undo and speculation: the configurations a 2-byte partition refuses or steps without,
 * zoe_grads_dtype_check). */
static inline float *zoe_host_grad_f32(const zoe_optimizer *opt, int buf, size_t h) {
    return (float *)zoe_host_grad_at(opt, buf, h);
}

/* The scales of the block holding host element h of an int8 moment (which 1 or 2), else NULL. */
static inline float *zoe_host_scale_at(const zoe_optimizer *opt, int which, size_t h) {
    float *base = which == 1 ? opt->h_m_scale : which == 2 ? opt->h_v_scale : NULL;
    return base ? base + (h - opt->win_lo[which]) / ZOE_ADAM_INT8_BLOCK : NULL;
}

/* Host array element h of state array which (0 master, 1 exp_avg, 2 exp_avg_sq), typed by its
 * dtype: the address of the state of host coordinate h. */
static inline void *zoe_host_state_at(const zoe_optimizer *opt, int which, size_t h) {
    void *base[] = {opt->h_master, opt->h_m, opt->h_v};
    zoe_dtype dt = zoe_optimizer_state_dtype(opt, (zoe_optimizer_state)which);
    return base[which] ? (char *)base[which] + (h - opt->win_lo[which]) * zoe_adam_state_esize(dt)
                       : NULL;
}

/* memory.c: allocations counted into opt->mem (ring: a fixed-size ring buffer). */
zoe_status zoe_state_device_alloc(zoe_optimizer *opt, size_t bytes, int ring, void **out);
zoe_status zoe_state_pinned_alloc(zoe_optimizer *opt, size_t bytes, int ring, const char *what,
                                  void **out);
void *zoe_state_host_alloc(zoe_optimizer *opt, size_t bytes); /* zoe_host_array_alloc; free() */
zoe_status zoe_config_check(const zoe_optimizer_config *cfg);
/* The gradient partition's dtype against the compute dtype and the layout (main_grads_dtype). */
zoe_status zoe_grads_dtype_check(const zoe_optimizer_config *cfg, zoe_backend backend,
                                 zoe_dtype dtype, const zoe_layout *lay);

/* grads.c */
zoe_status zoe_grads_create(zoe_optimizer *opt);
void zoe_grads_destroy(zoe_optimizer *opt);
/* Waits until the update in flight has taken its snapshot of the gradient partition. */
void zoe_grads_wait_released(zoe_optimizer *opt);
/* ZOE_GRAD_FULL_BUFFER: reduces the full buffer into the gradient partitions (in step). */
zoe_status zoe_grads_reduce_full(zoe_optimizer *opt);

/* state.c */
zoe_status zoe_state_create(zoe_optimizer *opt);
/* Host elements [h, h + n) of state array which (0 master, 1 exp_avg, 2 exp_avg_sq) in fp32:
 * fp32 and bf16 exactly, int8 codes through their blocks' scales. */
zoe_status zoe_host_state_read(const zoe_optimizer *opt, int which, size_t h, size_t n, float *dst);
void zoe_state_destroy(zoe_optimizer *opt);
/* Elements per block of the host step (the copy-out ring's slot, else the whole host range):
 * the host arrays are first-touched and updated block by block, each block's tiles on the
 * OpenMP threads with a static schedule, so each thread updates the pages it placed. */
size_t zoe_host_block(const zoe_optimizer *opt);
/* Partition range [x0, x0 + n) of compute-dtype weights from host buffer src to the device:
 * into the partition buffer when there is one, else into this rank's slices of the parameter
 * buffer. On stream; src must stay untouched until the stream has done. With params_on_host a
 * copy into the host partition, done on return (the weight stream's fetches read it in host
 * order, after no stream). */
zoe_status zoe_partition_upload(zoe_optimizer *opt, size_t x0, const void *src, size_t n,
                                zoe_stream *stream);

/* state_drive.c: state on drives. What touches host coordinates [a, e) of the state. */
typedef zoe_status (*zoe_span_fn)(zoe_optimizer *opt, size_t a, size_t e, void *ctx);
/* sz.drive_slot, drive_bytes and drive_paged of the sizes (drive and the dtypes set). */
void zoe_state_drive_sizes(zoe_state_sizes *z, const zoe_layout *lay);
zoe_status zoe_state_drive_create(zoe_optimizer *opt);
void zoe_state_drive_destroy(zoe_optimizer *opt);
/* fn over host coordinates [h0, h1): at once with resident state; with state on drives a
 * bucket's piece at a time, each bucket paged in and shown (write: it goes back to the drive
 * before another bucket takes its place). */
zoe_status zoe_state_paged(zoe_optimizer *opt, size_t h0, size_t h1, int write, zoe_span_fn fn,
                           void *ctx);
/* zoe_state_paged that also shows gradient partition grad_buf (-1: none) through h_grad
 * (zoe_host_grad_at), read from the drive with each bucket (never cached: the accumulation
 * rewrites it between steps) and, with grad_write, written back after fn. Without gradients on
 * drives the same as zoe_state_paged. */
zoe_status zoe_state_paged_grads(zoe_optimizer *opt, size_t h0, size_t h1, int write, int grad_buf,
                                 int grad_write, zoe_span_fn fn, void *ctx);
/* fn over host coordinates [h0, h1) of gradient partition buf alone (the state not read, and
 * not shown), a bucket at a time on drives (write: each goes back after fn), at once in host
 * memory: what reads or writes the gradient and no state (the DPU snapshot, dpu_swap's staged
 * weights). */
zoe_status zoe_grads_paged(zoe_optimizer *opt, size_t h0, size_t h1, int buf, int write,
                           zoe_span_fn fn, void *ctx);
/* fn over the whole host range: with state on drives bucket by bucket through the ring, read
 * ahead and written behind (the host step); grad_buf and grad_write as zoe_state_paged_grads
 * (the bucket's gradient read with its state, in the same pass). */
zoe_status zoe_state_streamed(zoe_optimizer *opt, int grad_buf, int grad_write, zoe_span_fn fn,
                              void *ctx);
/* Gradients on drives: a micro-batch's staging begins (bucket mode; before its first
 * zoe_grad_stage_begin). The last micro-batch's staging order is this one's prediction; reads:
 * this micro-batch adds to partition buf (not the step's first), so the first
 * ZOE_GRAD_STAGE_AHEAD buckets of the prediction are read ahead now. Without gradients on
 * drives a no-op. */
zoe_status zoe_grad_stage_micro_batch(zoe_optimizer *opt, int buf, int reads);
/* Gradients on drives: the staging slot for bucket b's host partition (its host coordinate
 * h0 of the bucket is element 0), after the slot's previous write has landed; zeroed when
 * assign, else bucket b's region of partition buf: its read ahead if one was started (waited
 * for), else read now. Then the buckets the prediction puts next are read ahead (not assign). */
zoe_status zoe_grad_stage_begin(zoe_optimizer *opt, int b, int buf, int assign, void **stage);
/* Starts the write of the staged bucket b to its region; wait: and waits for it. */
zoe_status zoe_grad_stage_end(zoe_optimizer *opt, int b, int buf, int wait);
/* Waits for every staged write (before the step reads the gradients) and drops the reads
 * ahead not taken (waited for: their buffers are free after). */
zoe_status zoe_grad_stage_drain(zoe_optimizer *opt);
/* Weights on drives, for the weight stream's reads (offload/param_stream.c): the drive handle,
 * and where partition element x's weight lies in its scratch space (contiguous to the end of
 * its bucket's partition, *contiguous elements). */
zoe_drive_io *zoe_weights_drive_io(const zoe_optimizer *opt);
zoe_status zoe_weights_drive_offset(const zoe_optimizer *opt, size_t x, size_t *offset,
                                    size_t *contiguous);

/* speculate.c (ZOE_DPU_EXACT) */
zoe_status zoe_spec_create(zoe_optimizer *opt);
void zoe_spec_destroy(zoe_optimizer *opt);
/* Bucket b is final for the step (its host gradient partition complete; host_sumsq its sum of
 * squares over every element of the host part): hands it to the worker if the checks pass. */
zoe_status zoe_spec_offer(zoe_optimizer *opt, int b, double host_sumsq);
/* Waits for the worker (the step's wait). */
zoe_status zoe_spec_join(zoe_optimizer *opt);
/* c is the step's constants (NULL: the step is skipped). Buckets the worker updated with other
 * constants are undone, and every bucket not yet updated with c is: here (after the join), or
 * with defer (gated_forward) on the settling worker while the next forward runs. */
zoe_status zoe_spec_finish(zoe_optimizer *opt, const zoe_step_consts *c, int buf, int defer,
                           int *redone);
/* Puts the state back as before the speculation (a state access between expect_step and step),
 * and finishes a settling (every bucket updated and refreshed; collective over DP). */
zoe_status zoe_spec_cancel(zoe_optimizer *opt);
/* Finishes a settling, if any (collective over DP). */
zoe_status zoe_spec_complete(zoe_optimizer *opt);

/* step.c */
/* A worker thread's first call: makes the optimizer's GPU current on it (CUDA). */
zoe_status zoe_worker_device(const zoe_optimizer *opt);
/* The Adam constants of a step with learning rate lr and gradient scale grad_scale, taken as
 * the step-th applied one: the configured weight decay, and none for exempt segments. */
void zoe_step_consts_of(const zoe_optimizer *opt, float lr, float grad_scale, long step,
                        zoe_step_consts *c);
/* The host Adam (undo = 1: its undo) with constants c over host coordinates [b0, b1) of
 * gradient partition buf and, on CUDA, the copy of the new weights to the device through the
 * copy-out ring, on the update stream (not synchronised). */
zoe_status zoe_host_range_update(zoe_optimizer *opt, const zoe_step_consts *c, int buf, size_t b0,
                                 size_t b1, int undo);
/* Waits for the update in flight (DPU), if any, and refreshes the parameters with it. */
zoe_status zoe_update_wait(zoe_optimizer *opt);
/* Waits for the update in flight, if any, without refreshing. */
zoe_status zoe_update_join(zoe_optimizer *opt);
/* All-gathers every rank's updated partition into the parameter buffer. Collective over DP. */
zoe_status zoe_refresh(zoe_optimizer *opt);
/* The same for bucket b alone, on the compute stream. */
zoe_status zoe_refresh_bucket(zoe_optimizer *opt, int b);

/* Where this rank's partition coordinate x of the weights sits in the parameter buffer, in
 * elements: its slice of the padded layout, at flat; with params_on_host the buffer is the
 * partition itself, so x. */
static inline size_t zoe_weights_index(const zoe_optimizer *opt, size_t x, size_t flat) {
    return opt->cfg.params_on_host ? x : flat;
}

/* On the CPU backend device memory is host memory: the host can read and write "device"
 * buffers in place, so staging copies between them, which would only move the same bytes, are
 * skipped (the reduced gradient buckets are read where the reduce-scatter left them, and the
 * host Adam writes the new weights straight into the partition buffer). */
static inline int zoe_device_is_host_memory(const zoe_optimizer *opt) {
    return zoe_device_backend(opt->dev) == ZOE_BACKEND_CPU;
}

/* The parameter buffer is host memory: on the CPU backend, or with params_on_host. The host step
 * then writes the new weights into it in place and the staged weights of a delayed update are
 * copied there by the host. */
static inline int zoe_params_in_host_memory(const zoe_optimizer *opt) {
    return zoe_device_is_host_memory(opt) || opt->cfg.params_on_host;
}

#endif
