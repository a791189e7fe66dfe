/* zoe_plan: the memory of a run from the code that sizes its allocations (the model's
 * description, the kernels' workspace plan, the optimizer's footprint) and a time model of one
 * step. See include/zoe/plan.h.
 *
 * Explained in docs/plan.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config/sizing.h"
#include "engine/plan/plan_impl.h"
#include "kernels/attention_plan.h"
#include "kernels/kernels.h"
#include "offload/param_stream.h"
#include "runtime/error.h"
#include "zoe/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

void zoe_plan_config_init(zoe_plan_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->version = ZOE_PLAN_CONFIG_VERSION;
    zoe_model_preset("demo", &cfg->model);
    cfg->tp = cfg->dp = 1;
    cfg->micro_batch = 4;
    cfg->grad_accum = 1;
    cfg->dtype = ZOE_F32;
    cfg->offload_ratio = 1.0f;
    cfg->bucket_mb = 16;
    cfg->dpu_schedule = ZOE_DPU_EXACT;
    cfg->offload_params = 0;
    cfg->prefetch_layers = 0;
    cfg->state_on_drives = 0;
    cfg->grads_on_drives = ZOE_PLAN_GRADS_AUTO;
}

zoe_status zoe_plan_config_from_train(const zoe_train_config *c, int world, const zoe_hardware *hw,
                                      zoe_plan_config *out) {
    if (!c || !hw || !out || world <= 0 || c->tp <= 0 || world % c->tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: %d ranks do not divide by tp=%d", world,
                        c ? c->tp : 0);
    zoe_plan_config_init(out);
    out->model = c->model;
    out->tp = c->tp;
    out->dp = world / c->tp;
    out->micro_batch = c->micro_batch;
    out->grad_accum = c->grad_accum;
    out->dtype = c->dtype;
    out->recompute = c->recompute;
    out->dpu = c->dpu != ZOE_DPU_OFF && c->dpu_warmup > 0;
    out->offload_ratio = zoe_train_offload_ratio(c);
    out->bucket_mb = c->bucket_mb;
    out->main_params_dtype = c->main_params_dtype;
    out->main_grads_dtype = c->main_grads_dtype;
    out->exp_avg_dtype = c->exp_avg_dtype;
    out->exp_avg_sq_dtype = c->exp_avg_sq_dtype;
    out->dpu_schedule = c->dpu_schedule;
    out->offload_params = c->offload_params;
    out->prefetch_layers = c->prefetch_layers;
    /* --offload nvme: the state on the drives, and the gradient partition where
     * --offload-grads says (auto: the plan decides, and zoe-train takes its decision) */
    out->state_on_drives = c->offload == ZOE_OFFLOAD_NVME;
    out->grads_on_drives = c->offload_grads == ZOE_OFFLOAD_GRADS_NVME  ? 1
                           : c->offload_grads == ZOE_OFFLOAD_GRADS_CPU ? 0
                                                                       : ZOE_PLAN_GRADS_AUTO;
    out->evaluates = c->val_data[0] != '\0' || c->split_val > 0;
    out->checkpoints = c->save[0] != '\0' || c->resume[0] != '\0';
    const char *threads = getenv("OMP_NUM_THREADS");
    out->host_threads = threads ? atoi(threads) : 0;
    out->hardware = *hw;
    return ZOE_OK;
}

/* Streamed weights: the fields of version 3, read only from configs that have them; from the
 * host (1) or, version 4, from the drives. */
static int streamed(const zoe_plan_config *p) {
    return p->version >= 3 && p->offload_params != 0;
}

/* The drive tier: the fields of version 4. */
static int state_on_drives(const zoe_plan_config *p) {
    return p->version >= 4 && p->state_on_drives != 0;
}

static int weights_on_drives(const zoe_plan_config *p) {
    return p->version >= 4 && p->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES;
}

/* The host step reads bucket i + k while it updates bucket i and writes bucket i - k: k buckets
 * of reads and k of writes in flight keep the drives' queues full while the update of one
 * bucket runs (an assumption of the plan: docs/plan.md, "Drives"). */
#define DRIVE_BUCKETS_AHEAD 2
/* The share of the drives' capacity left to the file system and everything else. */
#define DRIVE_RESERVE 0.05

/* The trainer's configuration for the plan's run, so that the model and optimizer are
 * described exactly as zoe_trainer_create will build them. */
static void train_config_of(const zoe_plan_config *p, int grads, zoe_train_config *c) {
    zoe_train_config_defaults(c);
    c->model = p->model;
    c->backend = p->hardware.backend;
    c->tp = p->tp;
    c->micro_batch = p->micro_batch;
    c->grad_accum = p->grad_accum;
    c->dtype = p->dtype;
    c->recompute = p->recompute;
    c->dpu_warmup = p->dpu ? (c->dpu_warmup > 0 ? c->dpu_warmup : 1) : 0;
    c->offload = ZOE_OFFLOAD_CPU;
    c->offload_ratio = p->offload_ratio;
    c->bucket_mb = p->bucket_mb;
    c->main_params_dtype = p->main_params_dtype;
    c->main_grads_dtype = p->main_grads_dtype;
    c->exp_avg_dtype = p->exp_avg_dtype;
    c->exp_avg_sq_dtype = p->exp_avg_sq_dtype;
    c->dpu_schedule = p->dpu_schedule;
    c->offload_params = weights_on_drives(p) ? ZOE_OFFLOAD_PARAMS_NVME
                        : streamed(p)        ? ZOE_OFFLOAD_PARAMS_CPU
                                             : ZOE_OFFLOAD_PARAMS_NONE;
    if (state_on_drives(p)) { /* the optimizer sizes its drive regions and host ring itself */
        c->offload = ZOE_OFFLOAD_NVME;
        snprintf(c->nvme_path, sizeof c->nvme_path, "drives"); /* sizes only: nothing opens it */
        c->nvme_ahead = DRIVE_BUCKETS_AHEAD;
        c->offload_grads = grads ? ZOE_OFFLOAD_GRADS_NVME : ZOE_OFFLOAD_GRADS_CPU;
    }
}

/* The drive tier's refusals: each names the value. */
static zoe_status check_drives(const zoe_plan_config *p) {
    if (p->version < 4) return ZOE_OK;
    const zoe_hardware *hw = &p->hardware;
    if (p->state_on_drives != 0 && p->state_on_drives != 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: state_on_drives=%d is not 0 or 1",
                        p->state_on_drives);
    if (p->grads_on_drives < ZOE_PLAN_GRADS_AUTO || p->grads_on_drives > 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: grads_on_drives=%d is not 0, 1 or auto (%d)", p->grads_on_drives,
                        ZOE_PLAN_GRADS_AUTO);
    if (weights_on_drives(p) && !state_on_drives(p))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: --offload-params nvme without --offload nvme: the host step writes "
                        "the weights it streams to the drives, so the state must be there too");
    if (p->grads_on_drives == 1 && !state_on_drives(p))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: the gradient partition on drives without --offload nvme: the host "
                        "step streams it with the state");
    if (!state_on_drives(p)) return ZOE_OK;
    /* the rates matter only where the box has a time model (zoe-train's unprobed `local` has
     * none, and its drives are its --nvme-path directories) */
    const int timed = hw->gpu_peak_flops > 0 && hw->host_bandwidth > 0 && hw->gpu_fraction > 0;
    if (hw->drives <= 0 || !(hw->drive_bytes > 0) ||
        (timed && (!(hw->drive_read_bandwidth > 0) || !(hw->drive_write_bandwidth > 0))))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: --offload nvme on %s: %d drives of %.3g TB at %.3g/%.3g GB/s "
                        "(--drives N, --drive-tb, --drive-read-gbs, --drive-write-gbs)",
                        hw->name, hw->drives, hw->drive_bytes / 1e12,
                        hw->drive_read_bandwidth / 1e9, hw->drive_write_bandwidth / 1e9);
    if (p->offload_ratio < 1.0f)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: --offload nvme with --offload-ratio %g: the drives hold the whole "
                        "optimizer state (ratio 1)",
                        (double)p->offload_ratio);
    return ZOE_OK;
}

static zoe_status check(const zoe_plan_config *p) {
    if (p->version < 2 || p->version > ZOE_PLAN_CONFIG_VERSION)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan config version %d (this zoe knows 2 to %d: zoe_plan_config_init)",
                        p->version, ZOE_PLAN_CONFIG_VERSION);
    const int most_params = p->version >= 4 ? ZOE_PLAN_WEIGHTS_ON_DRIVES : 1;
    if (streamed(p) && (p->offload_params < 0 || p->offload_params > most_params))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: offload_params=%d is not 0 to %d",
                        p->offload_params, most_params);
    ZOE_TRY(check_drives(p));
    if (streamed(p) && p->offload_ratio < 1.0f)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: --offload-params cpu with --offload-ratio %g: streamed weights keep "
                        "the whole optimizer state on the host (ratio 1)",
                        (double)p->offload_ratio);
    if (p->version >= 3 && p->prefetch_layers < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: prefetch_layers=%d is negative",
                        p->prefetch_layers);
    if (!p->hardware.name[0])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: no hardware (zoe_hardware_preset)");
    if (p->tp <= 0 || p->dp <= 0 || p->micro_batch <= 0 || p->grad_accum <= 0 || p->bucket_mb <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: tp=%d dp=%d micro-batch=%d grad-accum=%d bucket-mb=%lld must be "
                        "positive",
                        p->tp, p->dp, p->micro_batch, p->grad_accum, (long long)p->bucket_mb);
    if (!(p->offload_ratio >= 0.0f && p->offload_ratio <= 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "plan: offload ratio %g outside [0, 1]",
                        (double)p->offload_ratio);
    if (p->hardware.backend == ZOE_BACKEND_CUDA && p->hardware.gpus > 0 && p->tp > p->hardware.gpus)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "plan: --tp=%d exceeds the %d GPUs of %s (TP stays inside a box)", p->tp,
                        p->hardware.gpus, p->hardware.name);
    zoe_train_config c;
    train_config_of(p, 0, &c);
    return zoe_train_config_validate(&c, p->tp * p->dp);
}

/* Activation bytes of the model with recompute on or off. */
static zoe_status activation_bytes(const zoe_train_config *c, int recompute, double *bytes) {
    zoe_gpt_config gc = zoe_train_gpt_config(c);
    gc.recompute = recompute;
    zoe_gpt *g = NULL;
    ZOE_TRY(zoe_gpt_describe(&gc, c->tp, 0, &g));
    *bytes = (double)zoe_gpt_activation_bytes(g);
    zoe_gpt_destroy(g);
    return ZOE_OK;
}

static int host_threads(const zoe_plan_config *p, int ranks_per_node) {
    if (p->host_threads > 0) return p->host_threads;
    int t = p->hardware.host_cores / (ranks_per_node > 0 ? ranks_per_node : 1);
    return t > 0 ? t : 1;
}

/* The share of the probed matmul rate one CPU rank gets. The local probe is one process whose
 * threads cover all the host's cores; the ranks of a host split them (runtime/topology.c binds
 * each to cores / ranks of them and sizes its OpenMP pool alike), and where there are more ranks
 * than cores, or threads, they time-slice the cores they use. A GEMM's rate grows about
 * linearly with its cores, so a rank gets the busy cores' share of the probe, divided by the
 * ranks running on them. */
static int busy_cores(const zoe_plan_config *p, int ranks_per_node) {
    const int ranks = ranks_per_node > 0 ? ranks_per_node : 1;
    const int cores = p->hardware.host_cores > 0 ? p->hardware.host_cores : 1;
    const int threads = host_threads(p, ranks);
    return threads * ranks < cores ? threads * ranks : cores;
}

static double cpu_share(const zoe_plan_config *p, int ranks_per_node) {
    const int ranks = ranks_per_node > 0 ? ranks_per_node : 1;
    const int cores = p->hardware.host_cores > 0 ? p->hardware.host_cores : 1;
    return (double)busy_cores(p, ranks) / cores / ranks;
}

/* NCCL's buffers per communicator of more than one rank: NCCL_BUFFSIZE (4 MiB, NCCL's
 * documented default) for each of the 2 ring neighbours on each of 16 channels (an estimate
 * for NVSwitch boxes; NCCL picks the count at run time). */
static double nccl_bytes(int group) {
    return group > 1 ? 16.0 * 2.0 * 4.0 * 1024 * 1024 : 0.0;
}

/* Streamed weights, the sizes, as the streaming engine holds them (offload/param_stream.h): the
 * units (a layer's parts, zoe_gpt_unit; the embedding, which in GPT is also the LM head; an
 * untied Llama's head) in the compute dtype of the rank's TP shard, and the host's compute-dtype
 * copy of the rank's partition as the optimizer's own sizing allocates it (offload/memory.c decides
 * where the master is those weights, and the copy is then none). */
static void stream_sizes(const zoe_plan_config *p, const zoe_gpt *g, const zoe_plan_optimizer *o,
                         zoe_plan_result *r) {
    if (!streamed(p)) return;
    const double esz = (double)zoe_dtype_size(p->dtype);
    const double layer = (double)zoe_gpt_block_local_numel(g);
    const double rest = (double)zoe_gpt_local_numel(g) - layer * p->model.layers;
    const int untied = p->model.family == ZOE_MODEL_LLAMA && !p->model.tie_embeddings;
    r->stream.layer_bytes = layer * esz;
    r->stream.embedding_bytes = (untied ? rest / 2 : rest) * esz;
    r->stream.head_bytes = untied ? rest / 2 * esz : 0.0;
    /* block 0's parts: units 1 .. ZOE_TP_BLOCK_PARTS (every block's alike) */
    double part = 0.0, last = 0.0;
    for (int u = 1; u <= ZOE_TP_BLOCK_PARTS; u++) {
        int first, n;
        double numel = 0.0;
        zoe_gpt_unit(g, u, &first, &n);
        for (int t = first; t < first + n; t++) numel += (double)zoe_gpt_tensor(g, t)->local_numel;
        part = fmax(part, numel), last = numel;
    }
    r->stream.part_bytes = part * esz;
    r->stream.refetch_bytes = p->recompute ? (layer - last) * esz : 0.0;
    r->stream.host_weights = weights_on_drives(p) ? 0.0 : o->params_host;
}

/* The drive tier, the sizes and the traffic (docs/plan.md, "Drives"), from the optimizer's own
 * sizing: what lives on the drives, the host ring of the step's buckets, and the bytes the
 * drives move per step. grads: the gradient partition is on the drives. After stream_sizes. */
static void drive_sizes(const zoe_plan_config *p, const zoe_plan_optimizer *o, int grads,
                        zoe_plan_result *r) {
    if (!state_on_drives(p)) return;
    const zoe_hardware *hw = &p->hardware;
    const double k = p->grad_accum, ranks = r->ranks_per_node;
    r->drive.grads = grads;
    r->drive.buckets_ahead = DRIVE_BUCKETS_AHEAD;
    /* a master that is the streamed weights stays on the host with them, unless they go to
     * the drives too */
    r->drive.state_bytes = o->state_bytes - (weights_on_drives(p) ? 0.0 : o->pinned_master);
    r->drive.weights_bytes = weights_on_drives(p) ? o->params_host : 0.0;
    r->drive.grads_bytes = grads ? o->grads_bytes : 0.0;
    /* the optimizer's own scratch bytes: its state and, with grads, its gradient regions, with
     * the weights their weights */
    r->drive.per_rank = o->drive_bytes;
    r->drive.total = r->drive.per_rank * ranks;
    r->drive.capacity = hw->drives * hw->drive_bytes;
    r->drive.available = r->drive.capacity * (1.0 - DRIVE_RESERVE);
    r->drive.fits = r->drive.total <= r->drive.available;
    /* the optimizer's host ring of 2k + 1 buckets (with grads, each holding its gradient too,
     * and the accumulation's staging), as it allocates it */
    r->drive.state_ring = o->drive_ring;
    /* The step reads the state and writes it back with the new weights; a gradient on the
     * drives is written by each micro-batch (read back by each after the first, to add) and
     * read by the step. */
    r->drive.step_read_bytes = r->drive.state_bytes + k * r->drive.grads_bytes;
    r->drive.step_write_bytes =
        r->drive.state_bytes + r->drive.weights_bytes + k * r->drive.grads_bytes;
    /* each unit's partition once per forward and once per backward of every micro-batch, and the
     * layers' parts the recomputation fetches again */
    const double per_pass =
        p->model.layers * r->stream.layer_bytes + r->stream.embedding_bytes + r->stream.head_bytes;
    const double refetch = p->model.layers * r->stream.refetch_bytes;
    r->drive.stream_read_bytes =
        weights_on_drives(p) ? k * (2.0 * per_pass + refetch) / p->dp : 0.0;
    r->drive.read_bandwidth = hw->drives * hw->drive_read_bandwidth;
    r->drive.write_bandwidth = hw->drives * hw->drive_write_bandwidth;
    if (!(r->drive.read_bandwidth > 0 && r->drive.write_bandwidth > 0)) return; /* no time */
    r->drive.host_step = ranks * (r->drive.step_read_bytes / r->drive.read_bandwidth +
                                  r->drive.step_write_bytes / r->drive.write_bandwidth);
    r->drive.stream = ranks * r->drive.stream_read_bytes / r->drive.read_bandwidth;
    r->drive.seconds = r->drive.host_step + r->drive.stream;
}

/* The device's buffers of streamed weights: prefetch + 1 of the largest unit the ring cycles
 * through (a layer's part, an untied head), one of the embedding's own (held through a pass: the
 * tied head reads it last), and over DP a staging buffer of every rank's block of the largest unit.
 */
static double stream_ring(const zoe_plan_config *p, const zoe_plan_result *r) {
    const double cycled = fmax(r->stream.part_bytes, r->stream.head_bytes);
    const double largest = fmax(cycled, r->stream.embedding_bytes);
    return (r->stream.prefetch + 1.0) * cycled + r->stream.embedding_bytes +
           (p->dp > 1 ? largest : 0.0);
}

static void memory(const zoe_plan_config *p, const zoe_plan_model *m, const zoe_plan_optimizer *o,
                   zoe_plan_result *r) {
    const zoe_hardware *hw = &p->hardware;
    int cpu = hw->backend == ZOE_BACKEND_CPU;
    r->gpu.weights = streamed(p) ? r->stream.ring : o->device_params;
    r->gpu.grad_ring = o->device_ring;
    r->gpu.optimizer = o->device_other;
    r->gpu.activations = p->recompute ? m->act_recompute : m->act_full;
    r->gpu.activations_recompute = m->act_recompute;
    r->gpu.activations_full = m->act_full;
    r->gpu.workspace = cpu ? 0 : m->workspace;
    r->gpu.comm = cpu ? 0 : nccl_bytes(p->tp) + nccl_bytes(p->dp);
    r->gpu.total = r->gpu.weights + r->gpu.grad_ring + r->gpu.optimizer + r->gpu.activations +
                   r->gpu.workspace + r->gpu.comm;
    r->gpu.capacity = cpu ? 0 : hw->gpu_bytes;

    /* The drive tier takes off the host the state in plain memory, the gradient where it goes
     * too, and with the weights the pinned ones (a master that is the weights, or their copy),
     * and puts there the rings that stream them (docs/plan.md, "Drives"). */
    /* (o->host and o->pinned, from the optimizer's sizing, hold the ring and not what the
     * drives hold) */
    r->host.optimizer_per_rank = o->host;
    /* Besides the optimizer's (with streamed weights, their host copy among them): an evaluation
     * under a stale DPU schedule keeps the parameter buffer it must put back, on the device or
     * the host, in pageable memory (engine/train/trainer.c), and checkpoint files move through one
     * bounded staging buffer (engine/checkpoint/mpi_io.c, sized by zoe_ckpt_round_bytes). */
    int stale = p->dpu && p->dpu_schedule != ZOE_DPU_EXACT;
    double params_buffer =
        streamed(p) ? (double)o->part_numel * zoe_dtype_size(p->dtype) : o->device_params;
    r->host.pinned_per_rank =
        o->pinned + r->drive.weights_ring + (p->checkpoints ? (double)zoe_ckpt_round_bytes() : 0.0);
    /* On the CPU backend the device is host memory, and so are the kernels' workspace, the
     * MPI staging of 16-bit collectives and the packing of those past INT_MAX elements. */
    r->host.other_per_rank =
        hw->rank_base_bytes + m->host_other + (p->evaluates && stale ? params_buffer : 0.0) +
        (cpu ? r->gpu.total + m->workspace + o->comm_staging + o->comm_root + o->comm_pack : 0);
    r->host.per_rank =
        r->host.optimizer_per_rank + r->host.pinned_per_rank + r->host.other_per_rank;
    /* per_rank is the fullest rank, a DP root; the other ranks of the box hold no root
     * temporary. Ranks are placed by node, so the first box holds the tp roots. */
    int roots = p->tp < r->ranks_per_node ? p->tp : r->ranks_per_node;
    r->host.total =
        r->host.per_rank * r->ranks_per_node - o->comm_root * (r->ranks_per_node - roots);
    r->host.capacity = hw->host_bytes;
    r->host.reserve = hw->host_bytes * hw->host_reserve;
    r->host.available = r->host.capacity - r->host.reserve;
    /* the box holds ranks_per_node of the ranks' partitions of the model */
    if (streamed(p) && r->params > 0)
        r->stream.host_bytes_per_param =
            r->host.total / ((double)r->params * r->ranks_per_node / r->ranks);

    /* a capacity of 0 is unknown (zoe-train on a GPU it cannot size): not checked */
    r->fits_gpu = cpu || r->gpu.capacity <= 0 || r->gpu.total <= r->gpu.capacity;
    r->fits_host = r->host.total <= r->host.available;
    const int fits_drives = !state_on_drives(p) || r->drive.fits;
    r->fits = r->fits_gpu && r->fits_host && fits_drives;
    int alike = fabs(r->host.per_rank * r->ranks_per_node - r->host.total) < 1.0;
    if (!r->fits_host)
        snprintf(r->verdict, sizeof r->verdict,
                 "host: %d rank%s x %s%.2f GiB = %.1f GiB > %.1f GiB available (%.1f GiB less "
                 "%.0f%% for the OS)",
                 r->ranks_per_node, r->ranks_per_node == 1 ? "" : "s", alike ? "" : "up to ",
                 r->host.per_rank / GIB, r->host.total / GIB, r->host.available / GIB,
                 r->host.capacity / GIB, 100.0 * hw->host_reserve);
    else if (!r->fits_gpu)
        snprintf(r->verdict, sizeof r->verdict,
                 "GPU: %.1f GiB > %.1f GiB (weights %.1f, gradient ring %.1f, optimizer %.1f, "
                 "activations %.1f GiB)",
                 r->gpu.total / GIB, r->gpu.capacity / GIB, r->gpu.weights / GIB,
                 r->gpu.grad_ring / GIB, r->gpu.optimizer / GIB, r->gpu.activations / GIB);
    else if (!fits_drives)
        snprintf(r->verdict, sizeof r->verdict,
                 "drives: %d rank%s x %.2f TB = %.2f TB > %.2f TB available (%d x %.2f TB less "
                 "%.0f%% for the file system)",
                 r->ranks_per_node, r->ranks_per_node == 1 ? "" : "s", r->drive.per_rank / 1e12,
                 r->drive.total / 1e12, r->drive.available / 1e12, hw->drives,
                 hw->drive_bytes / 1e12, 100.0 * DRIVE_RESERVE);
    else
        snprintf(r->verdict, sizeof r->verdict, "fits");
}

/* Model FLOPs of one token's forward through the layers (matmuls and attention scores, causal
 * attention counted in full as Megatron-LM's formula does), of that the attention scores, and
 * through the LM head. */
static void flops_per_token(const zoe_model_config *m, double *layers, double *attention,
                            double *head) {
    double h = m->hidden, f = m->ffn ? m->ffn : 4.0 * m->hidden, s = m->seq_len;
    *attention = m->layers * 4.0 * s * h;
    *layers = m->layers * 2.0 * (4.0 * h * h + 2.0 * h * f) + *attention;
    *head = 2.0 * h * m->vocab;
}

/* Seconds of one attention call of cost c on hw: tensor-core FLOPs at the share of peak the
 * rest of the step reaches, the GEMM path's score traffic at the device memory's rate, the
 * flash kernels' FLOPs at their share of the fp32 peak. */
static double attention_call_seconds(const zoe_hardware *hw, const zoe_attention_cost *c) {
    double s = c->tensor_flops / (hw->gpu_peak_flops * hw->gpu_fraction);
    if (c->bytes > 0) s += c->bytes / hw->gpu_memory_bandwidth;
    if (c->cuda_flops > 0)
        s += c->cuda_flops /
             (hw->gpu_fp32_flops * zoe_attention_flash_efficiency(c->rows, hw->gpu_cc));
    return s;
}

/* Seconds per step of attention on one rank as the CUDA kernels will run it (the path, tiles
 * and grid kernels/attention_plan.h chooses for this rank's heads on this GPU), forward,
 * backward and the recomputed forward of every layer of every micro-batch; -1 where the box
 * does not say what its GPU is (attention is then priced with the other matmuls). */
static double attention_seconds(const zoe_plan_config *p, char *path, size_t path_len) {
    const zoe_hardware *hw = &p->hardware;
    const zoe_model_config *m = &p->model;
    if (hw->backend != ZOE_BACKEND_CUDA || hw->gpu_cc <= 0 || hw->gpu_fp32_flops <= 0 ||
        hw->gpu_memory_bandwidth <= 0 || m->heads <= 0)
        return -1.0;
    /* this rank's heads: KV heads are split while there are as many as ranks, then replicate */
    const int64_t kv = m->family == ZOE_MODEL_LLAMA && m->kv_heads > 0 ? m->kv_heads : m->heads;
    const int64_t shards = p->tp < kv ? p->tp : kv;
    const zoe_attention_shape shape = {.dt = p->dtype,
                                       .B = p->micro_batch,
                                       .T = m->seq_len,
                                       .NH = m->heads / p->tp,
                                       .NKV = kv / shards,
                                       .HS = m->hidden / m->heads};
    const zoe_attention_gpu gpu = {
        .cc = hw->gpu_cc, .sms = hw->gpu_sms, .smem_optin = (int64_t)hw->gpu_smem_per_block};
    const zoe_attention_cost f = zoe_attention_cost_of(ZOE_ATTN_FORWARD, &shape, &gpu, 0);
    const zoe_attention_cost b = zoe_attention_cost_of(ZOE_ATTN_BACKWARD, &shape, &gpu, 0);
    if (f.path == ZOE_ATTN_PATH_GEMM)
        snprintf(path, path_len, "tensor cores (cuBLAS GEMMs)");
    else
        snprintf(path, path_len, "fp32 flash kernels, %d/%d-row tiles", f.rows, b.rows);
    const double per_layer = attention_call_seconds(hw, &f) * (p->recompute ? 2.0 : 1.0) +
                             attention_call_seconds(hw, &b);
    return per_layer * m->layers * p->grad_accum;
}

/* Streamed weights, the time (docs/plan.md, "Streamed weights"). Each pass of each micro-batch
 * fetches every unit once (with recompute the backward fetches a layer's parts but fc2 twice:
 * refetch_bytes): per unit, the rank's 1/d of its TP shard over the host link (PCIe,
 * shared by the GPUs on it; on the CPU backend a copy at the host's bandwidth, shared by its
 * ranks), then the rest by the DP all-gather. The two links pipeline over units, so a unit's copy
 * paces at the slower of the two and takes both in turn (its latency); with `prefetch` units in
 * flight a layer arrives every max(pace, latency / prefetch) (a unit's latency is in proportion
 * to its bytes, so this holds for parts of a layer as for whole layers). A pass's layer copies hide
 * behind its compute where they arrive faster than the pass consumes them: the forward of a layer
 * (1 of the `passes` shares of its FLOPs) is the tightest, the backward (2, and 1 more recomputed)
 * has room. The embedding opens each pass and is released at its end, so its fetch is exposed
 * in every pass. On the CPU backend the copies run on the compute's cores: none hides. Returns
 * the exposed seconds. */
static double stream_time(const zoe_plan_config *p, double layers_flops, double head_flops,
                          double passes, zoe_plan_result *r) {
    const zoe_hardware *hw = &p->hardware;
    const int cpu = hw->backend == ZOE_BACKEND_CPU, d = p->dp, k = p->grad_accum;
    const int L = p->model.layers;
    int sharing =
        cpu ? r->ranks_per_node
            : (hw->gpus_per_link < r->ranks_per_node ? hw->gpus_per_link : r->ranks_per_node);
    if (sharing < 1) sharing = 1;
    const double link = (cpu ? hw->host_bandwidth : hw->pcie_bandwidth) / sharing;
    const double share = (d - 1.0) / d, gather = hw->nvlink_bandwidth;
    const double lb = r->stream.layer_bytes, eb = r->stream.embedding_bytes,
                 hb = r->stream.head_bytes;
    /* each unit's copy: with the weights on the drives its partition read from them first (the
     * box's drives shared by its ranks), then its partition over the host link, the rest over
     * DP; the three stages pipeline over units */
    const double drive = weights_on_drives(p) ? r->drive.read_bandwidth / r->ranks_per_node : 0.0;
    const double layer_drive = drive > 0 ? lb / d / drive : 0.0;
    const double head_drive = drive > 0 ? hb / d / drive : 0.0;
    const double layer_pcie = lb / d / link, layer_gather = d > 1 ? lb * share / gather : 0.0;
    const double head_pcie = hb / d / link, head_gather = d > 1 ? hb * share / gather : 0.0;
    const double head_copy = fmax(head_drive, fmax(head_pcie, head_gather)),
                 head_latency = head_drive + head_pcie + head_gather;
    const double emb_latency =
        (drive > 0 ? eb / d / drive : 0.0) + eb / d / link + (d > 1 ? eb * share / gather : 0.0);
    r->stream.layer_copy = fmax(layer_drive, fmax(layer_pcie, layer_gather));
    r->stream.layer_latency = layer_drive + layer_pcie + layer_gather;
    /* this rank's compute per micro-batch, split by the model FLOPs' shares: a layer's forward
     * and the LM head's (its backward twice that) */
    const double per_mb = r->time.compute / k, weight = layers_flops * passes + head_flops * 3.0;
    const double layer_fwd = weight > 0 ? per_mb * layers_flops / L / weight : 0.0;
    const double head_fwd = weight > 0 ? per_mb * head_flops / weight : 0.0;
    r->stream.layer_forward = layer_fwd;
    /* the fewest units ahead whose forward compute (or, where the copies are slower, whose
     * copies) covers one layer's latency; on the CPU backend nothing overlaps: one */
    const double cover = fmax(layer_fwd, r->stream.layer_copy);
    int need = cover > 0 && !cpu ? (int)ceil(r->stream.layer_latency / cover - 1e-9) : 1;
    need = need < 1 ? 1 : need > L * ZOE_TP_BLOCK_PARTS ? L * ZOE_TP_BLOCK_PARTS : need;
    r->stream.prefetch_from_plan = p->prefetch_layers <= 0;
    r->stream.prefetch = r->stream.prefetch_from_plan ? need : p->prefetch_layers;
    const double q = r->stream.prefetch;
    const double layer_pace = fmax(r->stream.layer_copy, r->stream.layer_latency / q);
    const double head_pace = fmax(head_copy, head_latency / q);
    const double refetch = lb > 0 ? r->stream.refetch_bytes / lb : 0.0; /* of a layer */
    const double pass_copy = L * layer_pace + head_pace;
    const double bwd_copy = pass_copy + L * layer_pace * refetch;
    const double fwd = L * layer_fwd + head_fwd,
                 bwd = L * layer_fwd * (passes - 1.0) + 2 * head_fwd;
    const double per_pass_bytes = L * lb + eb + hb,
                 step_bytes = 2.0 * per_pass_bytes + L * lb * refetch;
    r->stream.pcie_bytes = k * step_bytes / d;
    r->stream.gather_bytes = k * step_bytes * share;
    r->stream.pcie = r->stream.pcie_bytes / link;
    r->stream.all_gather = d > 1 ? r->stream.gather_bytes / gather : 0.0;
    const double serial = L * r->stream.layer_latency + head_latency + emb_latency;
    r->stream.exposed =
        cpu ? k * (2.0 * serial + L * r->stream.layer_latency * refetch)
            : k * (fmax(0.0, pass_copy - fwd) + fmax(0.0, bwd_copy - bwd) + 2.0 * emb_latency);
    /* copies per micro-batch are fixed and compute grows with it: the forward hides the layers'
     * (and an untied head's) from the micro-batch where it takes as long as they do */
    const double unpaced = L * r->stream.layer_copy + head_copy;
    r->stream.hide_micro_batch =
        cpu || fwd <= 0 ? 0 : (int)ceil(unpaced / (fwd / p->micro_batch) - 1e-9);
    if (r->stream.hide_micro_batch < 1 && !cpu && fwd > 0) r->stream.hide_micro_batch = 1;
    const char *pace = cpu                                              ? "host copies"
                       : layer_pace > r->stream.layer_copy * (1 + 1e-9) ? "latency"
                       : layer_drive >= fmax(layer_pcie, layer_gather)  ? "drives"
                       : layer_pcie >= layer_gather                     ? "pcie"
                                                                        : "dp all-gather";
    snprintf(r->stream.bound, sizeof r->stream.bound, "%s",
             r->stream.exposed > k * 2.0 * emb_latency * (1 + 1e-9) ? pace : "compute");
    return r->stream.exposed;
}

static void step_time(const zoe_plan_config *p, const zoe_plan_optimizer *o, zoe_plan_result *r) {
    const zoe_hardware *hw = &p->hardware;
    if (hw->gpu_peak_flops <= 0 || hw->host_bandwidth <= 0 || hw->gpu_fraction <= 0) {
        snprintf(r->time.bound, sizeof r->time.bound, "not probed");
        return;
    }
    const zoe_model_config *m = &p->model;
    int t = p->tp, d = p->dp, k = p->grad_accum, cpu = hw->backend == ZOE_BACKEND_CPU;
    double esz = (double)zoe_dtype_size(p->dtype);
    double tokens_rank = (double)p->micro_batch * m->seq_len * k;
    double layers, attention, head;
    flops_per_token(m, &layers, &attention, &head);
    /* forward, backward (twice the forward), and the recomputed forward of the layers */
    double passes = 3.0 + (p->recompute ? 1.0 : 0.0);
    r->time.flops_per_gpu = tokens_rank * (layers * passes + head * 3.0) / t;
    const double rate =
        hw->gpu_peak_flops * hw->gpu_fraction * (cpu ? cpu_share(p, r->ranks_per_node) : 1.0);
    r->time.compute = r->time.flops_per_gpu / rate;
    /* Attention as its kernels run, in place of its share of the model FLOPs at the matmuls'
     * rate: the tensor-core path does more than the causal FLOPs and moves its scores through
     * memory, the flash kernels do fewer on the CUDA cores. */
    const double attention_s =
        attention_seconds(p, r->time.attention_path, sizeof r->time.attention_path);
    if (attention_s >= 0) {
        const double attention_flops = tokens_rank * attention * passes / t;
        r->time.compute -= attention_flops / rate;
        r->time.compute += attention_s;
        r->time.attention = attention_s;
    }
    /* TP: per layer two all-reduces of [B*T, hidden] forward, two backward, two more when
     * recomputing; the embedding's forward and the LM head's input gradient. */
    double ar_bytes = (double)p->micro_batch * m->seq_len * m->hidden * esz;
    double n_ar = k * (m->layers * (4.0 + (p->recompute ? 2.0 : 0.0)) + 2.0);
    r->time.tp_comm = t > 1 ? n_ar * ar_bytes * 2.0 * (t - 1) / t / hw->nvlink_bandwidth : 0.0;
    double shard_bytes = (double)r->rank_params * esz;
    r->time.dp_reduce_scatter = d > 1 ? k * shard_bytes * (d - 1) / d / hw->nvlink_bandwidth : 0.0;
    /* streamed weights are fetched from the host for each pass: nothing refreshes the device */
    r->time.dp_all_gather =
        d > 1 && !streamed(p) ? shard_bytes * (d - 1) / d / hw->nvlink_bandwidth : 0.0;
    /* PCIe: the host part of the partition's gradients out (each micro-batch) and its new
     * weights in, each link carrying the ranks that share it. No copies on the CPU backend. */
    int sharing = hw->gpus_per_link < r->ranks_per_node ? hw->gpus_per_link : r->ranks_per_node;
    if (sharing < 1) sharing = 1;
    double host_part = (double)o->host_numel;
    r->time.pcie_out = cpu ? 0.0 : k * host_part * esz * sharing / hw->pcie_bandwidth;
    r->time.pcie_in = cpu || streamed(p) ? 0.0 : host_part * esz * sharing / hw->pcie_bandwidth;
    /* Host Adam: every rank of the box streams its partition at once, sharing the bandwidth;
     * the accumulation of micro-batches beyond the first reads and writes the fp32 sum. And
     * every rank computes its partition on its cores, the box's ranks on their busy cores
     * together: the slower of the two binds (int8 moments on a host whose cores each have much
     * bandwidth). The accumulation's adds are left out of the arithmetic: they stream. */
    double node_params = host_part * r->ranks_per_node;
    double accumulate = (k - 1) * (esz + 8.0);
    r->time.host_adam_memory =
        node_params * (o->adam_bytes_per_param + accumulate) / hw->host_bandwidth;
    r->time.host_adam_ns_per_param = o->adam_ns_per_param;
    r->time.host_adam_cores = busy_cores(p, r->ranks_per_node);
    r->time.host_adam_compute = node_params * o->adam_ns_per_param * 1e-9 / r->time.host_adam_cores;
    const int compute_bound = r->time.host_adam_compute > r->time.host_adam_memory;
    r->time.host_adam = compute_bound ? r->time.host_adam_compute : r->time.host_adam_memory;
    snprintf(r->time.host_adam_bound, sizeof r->time.host_adam_bound, "%s",
             compute_bound ? "compute" : "memory");
    /* with the state on the drives the step streams it bucket by bucket, reads and writes
     * overlapping the update: the slower of the update and the drives' traffic */
    if (state_on_drives(p) && r->drive.host_step > r->time.host_adam) {
        r->time.host_adam = r->drive.host_step;
        snprintf(r->time.host_adam_bound, sizeof r->time.host_adam_bound, "drives");
    }

    double backward_mb = r->time.compute / k * (2.0 / passes);
    double out = fmax(r->time.pcie_out, r->time.dp_reduce_scatter) / k;
    double exposed_out = k * fmax(0.0, out - backward_mb);
    const double stream = streamed(p) ? stream_time(p, layers, head, passes, r) : 0.0;
    double device = r->time.compute + r->time.tp_comm + exposed_out + stream;
    double host = r->time.host_adam + r->time.pcie_in;
    double sync = device + host + r->time.dp_all_gather;
    r->time.host_stall = host;
    r->time.stall_share = sync > 0 ? host / sync : 0.0;
    /* DPU, zoe-train's exact schedule: the host update and the copy back of each bucket run
     * while the backward of the step's last micro-batch goes on, and what is left when it ends
     * during the next forward, in the forward's order; exposed is what outlasts both, and at
     * least the embedding's share (its gradient is final last, and the forward reads it
     * first). On the CPU backend both run on the same cores: it hides nothing. */
    double forward_mb = r->time.compute / k * (1.0 / passes);
    double embedding_share =
        r->rank_params > 0 ? (double)m->vocab * m->hidden / t / (double)r->rank_params : 0.0;
    double exposed_host = fmax(host - backward_mb - forward_mb, host * fmin(1.0, embedding_share));
    double dpu = cpu ? sync : device + exposed_host + r->time.dp_all_gather;
    r->time.step = p->dpu ? dpu : sync;
    r->time.hidden_by_dpu = sync - dpu;
    /* the drives serve the host step and the weights' reads in turn: a step takes at least as
     * long as they are busy, whatever overlaps */
    if (state_on_drives(p)) r->time.step = fmax(r->time.step, r->drive.seconds);
    r->time.tokens = tokens_rank * d;
    r->time.tokens_per_second = r->time.step > 0 ? r->time.tokens / r->time.step : 0.0;
    r->time.tflops_per_gpu = r->time.step > 0 ? r->time.flops_per_gpu / r->time.step / 1e12 : 0.0;
    const double model_flops = tokens_rank * (layers + head) * 3.0 / t;
    r->mfu = r->time.step > 0 ? model_flops / r->time.step / hw->gpu_peak_flops : 0.0;
    /* What binds: the largest term on the critical path. */
    char stream_name[32];
    snprintf(stream_name, sizeof stream_name, "weights in: %.16s", r->stream.bound);
    const char *names[] = {"gpu compute",   "tp all-reduce", "pcie",  "host adam",
                           "dp all-gather", stream_name,     "drives"};
    double exposed_share = host > 0 ? exposed_host / host : 0.0;
    double terms[] = {r->time.compute,
                      r->time.tp_comm,
                      (p->dpu && !cpu ? exposed_share : 1.0) * r->time.pcie_in + exposed_out,
                      (p->dpu && !cpu ? exposed_share : 1.0) * r->time.host_adam,
                      r->time.dp_all_gather,
                      stream,
                      r->drive.seconds};
    if (!strcmp(r->time.host_adam_bound, "drives")) names[3] = "host step: drives";
    int best = 0;
    for (int i = 1; i < 7; i++)
        if (terms[i] > terms[best]) best = i;
    if (cpu && best == 0) names[0] = "cpu compute";
    snprintf(r->time.bound, sizeof r->time.bound, "%s", names[best]);
}

/* grads: the gradient partition on the drives (with the state there). */
static zoe_status plan_once(const zoe_plan_config *p, int grads, zoe_plan_result *r) {
    if (!p || !r) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_plan: NULL argument");
    memset(r, 0, sizeof *r);
    ZOE_TRY(check(p));
    const zoe_hardware *hw = &p->hardware;
    r->ranks = p->tp * p->dp;
    if (p->ranks_per_node > 0) {
        r->ranks_per_node = p->ranks_per_node < r->ranks ? p->ranks_per_node : r->ranks;
        r->nodes = (r->ranks + r->ranks_per_node - 1) / r->ranks_per_node;
    } else if (hw->backend == ZOE_BACKEND_CPU || hw->gpus <= 0) {
        r->ranks_per_node = r->ranks, r->nodes = 1;
    } else {
        r->ranks_per_node = r->ranks < hw->gpus ? r->ranks : hw->gpus;
        r->nodes = (r->ranks + hw->gpus - 1) / hw->gpus;
    }
    r->params = zoe_model_param_count(&p->model);

    zoe_train_config c;
    train_config_of(p, grads, &c);
    zoe_plan_model m = {0};
    zoe_plan_optimizer o = {0};
    zoe_gpt_config gc = zoe_train_gpt_config(&c);
    zoe_gpt *g = NULL;
    ZOE_TRY(zoe_gpt_describe(&gc, p->tp, 0, &g));
    r->rank_params = zoe_gpt_local_numel(g);
    m.workspace = (double)zoe_kernels_workspace_bytes(hw->backend, zoe_gpt_kernel_plan(g),
                                                      host_threads(p, r->ranks_per_node));
    /* the model's own host tables: the loss of every token */
    double tokens = (double)p->micro_batch * p->model.seq_len;
    m.host_other = tokens * sizeof(float);
    /* The CPU backend's TP all-reduces of [B*T, hidden]: Open MPI's temporary as large as the
     * input (see optimizer_footprint.c), and runtime/comm.c's fp32 staging of 16-bit ones. */
    if (hw->backend == ZOE_BACKEND_CPU && p->tp > 1)
        m.host_other += tokens * p->model.hidden * sizeof(float) * (p->dtype == ZOE_F32 ? 1 : 2);
    zoe_status st = zoe_plan_optimizer_of(&c, g, p->dp, &o);
    if (st == ZOE_OK) stream_sizes(p, g, &o, r);
    if (st == ZOE_OK) drive_sizes(p, &o, grads, r);
    zoe_gpt_destroy(g);
    ZOE_TRY(st);
    ZOE_TRY(activation_bytes(&c, 1, &m.act_recompute));
    ZOE_TRY(activation_bytes(&c, 0, &m.act_full));
    r->state_params = (int64_t)o.part_numel;
    /* the time first: with streamed weights it chooses how many units the ring holds */
    step_time(p, &o, r);
    if (streamed(p)) {
        if (r->stream.prefetch <= 0) /* no time model: the given prefetch, or double buffering */
            r->stream.prefetch = p->prefetch_layers > 0 ? p->prefetch_layers : 1;
        r->stream.ring = stream_ring(p, r);
    }
    /* with the weights on the drives, a host ring of the largest unit's partitions, one per
     * device buffer (the trainer's weight stream sizes its host ring with the same count: the
     * cycled units, the farthest of them still being read from the drives, and the held
     * embedding) */
    if (weights_on_drives(p))
        r->drive.weights_ring =
            zoe_param_stream_slots(r->stream.prefetch, 1) *
            fmax(fmax(r->stream.part_bytes, r->stream.head_bytes), r->stream.embedding_bytes) /
            p->dp;
    memory(p, &m, &o, r);
    return ZOE_OK;
}

/* The gradient partition: on the drives where asked, or (auto) where the host cannot hold it
 * with the state on the drives. */
static zoe_status plan_tiers(const zoe_plan_config *p, zoe_plan_result *r) {
    const int asked = state_on_drives(p) ? p->grads_on_drives : 0;
    ZOE_TRY(plan_once(p, asked == 1, r));
    if (asked == ZOE_PLAN_GRADS_AUTO && !r->fits_host) ZOE_TRY(plan_once(p, 1, r));
    return ZOE_OK;
}

zoe_status zoe_plan(const zoe_plan_config *p, zoe_plan_result *r) {
    ZOE_TRY(plan_tiers(p, r));
    /* and whether the run at the micro-batch that hides the copies fits */
    if (streamed(p) && r->stream.hide_micro_batch > 0) {
        zoe_plan_config at = *p;
        at.micro_batch = r->stream.hide_micro_batch;
        zoe_plan_result h;
        r->stream.hide_fits =
            at.micro_batch == p->micro_batch ? r->fits : plan_tiers(&at, &h) == ZOE_OK && h.fits;
    }
    return ZOE_OK;
}

int zoe_plan_dpu_pays(const zoe_plan_result *r) {
    return r->time.stall_share > ZOE_PLAN_DPU_STALL_SHARE && r->time.hidden_by_dpu > 0.0;
}

zoe_status zoe_plan_auto_offload_ratio(const zoe_plan_config *cfg, float *ratio) {
    if (!cfg || !ratio) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "auto offload: NULL argument");
    zoe_plan_config p = *cfg;
    zoe_plan_result r;
    /* The device's share grows as the offloaded share shrinks: the smallest ratio that fits. */
    for (int step = 0; step <= 64; step++) {
        p.offload_ratio = (float)step / 64.0f;
        ZOE_TRY(zoe_plan(&p, &r));
        if (r.fits) {
            *ratio = p.offload_ratio;
            return ZOE_OK;
        }
    }
    return zoe_fail(ZOE_ERR_OUT_OF_MEMORY,
                    "--offload-ratio auto: does not fit even fully offloaded (%s)", r.verdict);
}

void zoe_plan_family_member(const zoe_model_config *base, int layers, zoe_model_config *m) {
    *m = (zoe_model_config){.layers = layers,
                            .hidden = layers * ZOE_PLAN_FAMILY_HEAD_DIM,
                            .heads = layers,
                            .seq_len = base->seq_len,
                            .vocab = base->vocab,
                            .dropout = base->dropout,
                            .source = "GPT-3's family scaled to fit (zoe_plan_max_model)",
                            .family = ZOE_MODEL_GPT};
    snprintf(m->name, sizeof m->name, "scaled");
}

/* Whether p fits; with streamed weights and no prefetch given, at the plan's prefetch or else at
 * the fewest units ahead (one: a smaller ring, its copies paced by their latency). *used is the
 * configuration that fits (or p). */
static zoe_status fits_at_some_prefetch(const zoe_plan_config *p, zoe_plan_config *used,
                                        zoe_plan_result *r, int *fits) {
    *used = *p;
    ZOE_TRY(zoe_plan(p, r));
    *fits = r->fits;
    if (*fits || !streamed(p) || p->prefetch_layers > 0 || r->stream.prefetch <= 1) return ZOE_OK;
    used->prefetch_layers = 1;
    ZOE_TRY(zoe_plan(used, r));
    *fits = r->fits;
    if (!*fits) *used = *p;
    return ZOE_OK;
}

zoe_status zoe_plan_max_model(const zoe_plan_config *cfg, zoe_model_config *best,
                              zoe_plan_result *best_plan) {
    if (!cfg || !best) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "max model: NULL argument");
    zoe_plan_config p = *cfg, used;
    zoe_plan_result r;
    int fits = 0;
    /* L layers and heads, L a multiple of tp (each rank its share of the heads), hidden 128 L up
     * to 65536. Memory grows with L, so a bisection over the multiples of tp finds the largest
     * that fits. */
    const int tp = cfg->tp, most = 65536 / ZOE_PLAN_FAMILY_HEAD_DIM / tp;
    int lo = 0, hi = most;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        zoe_plan_family_member(&cfg->model, mid * tp, &p.model);
        ZOE_TRY(fits_at_some_prefetch(&p, &used, &r, &fits));
        if (fits)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo == 0)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY,
                        "max model: not even %d layers of hidden %d (GPT-3's family) fit on %s", tp,
                        tp * ZOE_PLAN_FAMILY_HEAD_DIM, cfg->hardware.name);
    zoe_plan_family_member(&cfg->model, lo * tp, best);
    if (best_plan) {
        p.model = *best;
        ZOE_TRY(fits_at_some_prefetch(&p, &used, best_plan, &fits));
    }
    return ZOE_OK;
}
