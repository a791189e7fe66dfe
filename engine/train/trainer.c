/* The trainer: one configuration in, a grid, a device, the GPT and the offload optimizer out,
 * wired so that backward hands every finished gradient to the optimizer (bucketed
 * reduce-scatter and offload while backward goes on) and each step runs on the DPU schedule.
 *
 * Explained in docs/architecture.md, "One step, following the data"; docs/train.md. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/hf/hf.h"
#include "engine/config/sizing.h"
#include "engine/train/trainer_impl.h"
#include "zoe/checkpoint.h"
#include "models/gpt.h"
#include "offload/param_stream.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/hosts.h"
#include "runtime/mpi_chunk.h"
#include "zoe/gpu.h"
#include "zoe/grid.h"
#include "zoe/log.h"
#include "zoe/optimizer.h"
#include "zoe/topology.h"
#include "zoe/train.h"

struct zoe_trainer {
    zoe_train_config cfg;
    zoe_grid *grid;
    zoe_device *dev;
    int gpu_node_index; /* CUDA: the GPU's place among the node's, hwloc's numbering; -1 on CPU */
    zoe_stream *stream;
    zoe_comm *tp_comm;
    zoe_gpt *gpt;
    zoe_optimizer *opt;
    zoe_param_stream *weights; /* --offload-params cpu: the weights' stream; NULL: resident */
    zoe_watchdog *watchdog;    /* with --stall-timeout or --stop-grace */
    void **weight_ptrs;
    /* since the last step */
    double loss_sum;        /* sum of token losses (micro-batch mean x counted targets) */
    int64_t loss_tokens;    /* targets counted (not ignored) */
    int64_t step_targets;   /* zoe_trainer_begin_step: this rank's declared count, or -1 */
    int64_t global_targets; /* ... and the global batch's */
    int micro_batches;
    double ms_forward, ms_backward, ms_offload;
    double step_started;
    int steps_done;
    double tp_seconds_at_reset;
    /* between zoe_trainer_eval_begin and _end */
    int evaluating, eval_micro_batches;
    int eval_restore; /* under DPU: stale_params goes back, the latest weights' refresh due */
    double eval_loss_sum;
    int64_t eval_targets;
    void *stale_params; /* host copy of the parameter buffer the next forward reads (stale DPU) */
    char *hf_config;    /* zoe_trainer_hf_config */
};

/* Gradient sink: the optimizer's buffers; the time spent handing them back is the offload. */
static zoe_status sink_acquire(void *user, int t, void **grad) {
    zoe_trainer *tr = user;
    return zoe_optimizer_grad_buffer(tr->opt, t, grad);
}

/* The model's weight source. Resident weights: the forward's gate, the exact DPU schedule's
 * settling bucket by bucket (the weights stay where they are bound). Streamed: the unit from the
 * weight stream, which gates its fetch alike. */
static zoe_status source_acquire(void *user, int first, int n, zoe_gpt_pass pass, void **weights) {
    zoe_trainer *tr = user;
    if (!tr->weights)
        return pass == ZOE_GPT_FORWARD ? zoe_optimizer_weights_ready(tr->opt, first, n) : ZOE_OK;
    return zoe_param_stream_acquire(tr->weights, zoe_param_stream_unit_of(tr->weights, first, n),
                                    (int)pass, weights);
}

static zoe_status source_release(void *user, int first, int n) {
    zoe_trainer *tr = user;
    if (!tr->weights) return ZOE_OK;
    return zoe_param_stream_release(tr->weights, zoe_param_stream_unit_of(tr->weights, first, n));
}

static zoe_status sink_release(void *user, int t) {
    zoe_trainer *tr = user;
    double t0 = zoe_clock_ms();
    zoe_status st = zoe_optimizer_grad_ready(tr->opt, t);
    tr->ms_offload += zoe_clock_ms() - t0;
    return st;
}

/* Each rank's host threads on its share of the node's cores, near its GPU if it has one. */
static void bind_threads(const zoe_trainer *tr) {
    zoe_topology *topo = NULL;
    if (zoe_topology_load_host(&topo) != ZOE_OK) {
        zoe_log(ZOE_LOG_WARN, "no topology (%s); threads left unbound", zoe_last_error());
        return;
    }
    zoe_placement p;
    /* Not the CUDA ordinal: with CUDA_VISIBLE_DEVICES set per rank every rank's is 0. */
    int gpu = tr->gpu_node_index;
    if (gpu >= zoe_topology_num_gpus(topo)) gpu = -1;
    if (zoe_topology_place(topo, zoe_grid_local_rank(tr->grid), zoe_grid_local_size(tr->grid), gpu,
                           &p) == ZOE_OK)
        zoe_topology_bind(topo, &p);
    zoe_topology_destroy(topo);
}

static zoe_status create_device(zoe_trainer *tr) {
    int ordinal = 0;
    tr->gpu_node_index = -1;
    if (tr->cfg.backend == ZOE_BACKEND_CUDA) {
        /* Decided over the world, so that every rank stops alike: two ranks on one GPU would
         * fail inside ncclCommInitRank ("duplicate GPU"), a GPU without code at its first kernel
         * launch, bf16 on a GPU without bf16 tensor cores in its first matmul. */
        zoe_gpu_choice gc;
        ZOE_TRY(zoe_gpu_choose(zoe_grid_world_comm(tr->grid), &gc));
        zoe_gpu_spec spec;
        zoe_gpu_spec_of(gc.weakest.capability, gc.weakest.name, &spec);
        char warning[256];
        ZOE_TRY(zoe_gpu_check_dtype(&spec, tr->cfg.dtype, tr->cfg.tf32, warning, sizeof warning));
        if (warning[0] && zoe_grid_rank(tr->grid) == 0) zoe_log(ZOE_LOG_WARN, "%s", warning);
        ordinal = gc.ordinal;
        tr->gpu_node_index = gc.node_index;
    }
    ZOE_TRY(zoe_device_create(tr->cfg.backend, ordinal, &tr->dev));
    ZOE_TRY(zoe_device_set_memory_limit(tr->dev, (size_t)tr->cfg.device_memory));
    ZOE_TRY(zoe_device_set_pinned_limit(tr->dev, (size_t)tr->cfg.pinned_memory));
    return zoe_stream_create(tr->dev, &tr->stream);
}

static zoe_status create_model(zoe_trainer *tr) {
    zoe_gpt_config gc = zoe_train_gpt_config(&tr->cfg);
    ZOE_TRY(zoe_comm_create_for_device(zoe_grid_tp_comm(tr->grid), tr->dev, &tr->tp_comm));
    return zoe_gpt_create(&gc, tr->dev, tr->stream, tr->tp_comm, &tr->gpt);
}

/* The weight stream over the model's units (zoe_gpt_unit: the embedding, each block's parts, the
 * tail) in the passes' orders (zoe_gpt_pass_order), the embedding held through each pass (its
 * tied head is read first and last in both). */
static zoe_status create_weight_stream(zoe_trainer *tr, const zoe_param_tensor *tensors) {
    int nu = zoe_gpt_num_units(tr->gpt), nt = zoe_gpt_num_tensors(tr->gpt);
    int nf = zoe_gpt_pass_order(tr->gpt, ZOE_GPT_FORWARD, NULL);
    int nb = zoe_gpt_pass_order(tr->gpt, ZOE_GPT_BACKWARD, NULL);
    zoe_param_unit *units = calloc((size_t)nu, sizeof *units);
    int *order = calloc((size_t)(nf + nb), sizeof *order);
    size_t *numel = calloc((size_t)nt, sizeof *numel);
    zoe_status st = units && order && numel
                        ? ZOE_OK
                        : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight stream tables of %d units", nu);
    for (int u = 0; st == ZOE_OK && u < nu; u++)
        zoe_gpt_unit(tr->gpt, u, &units[u].first, &units[u].n);
    if (st == ZOE_OK) {
        zoe_gpt_pass_order(tr->gpt, ZOE_GPT_FORWARD, order);
        zoe_gpt_pass_order(tr->gpt, ZOE_GPT_BACKWARD, order + nf);
    }
    for (int t = 0; st == ZOE_OK && t < nt; t++) numel[t] = tensors[t].numel;
    zoe_param_stream_config sc = {.dtype = tr->cfg.dtype,
                                  .numel = numel,
                                  .num_tensors = nt,
                                  .units = units,
                                  .num_units = nu,
                                  .order = {order, order + nf},
                                  .held_unit = 0,
                                  .prefetch =
                                      tr->cfg.prefetch_layers > 0 ? tr->cfg.prefetch_layers : 1,
                                  .order_len = {nf, nb}};
    if (st == ZOE_OK)
        st = zoe_param_stream_create(tr->opt, zoe_grid_dp_comm(tr->grid), tr->dev, tr->stream, &sc,
                                     &tr->weights);
    free(units), free(order), free(numel);
    return st;
}

/* Initial weights (Philox, or the --init-from import), written into the bound tensors. */
static zoe_status init_tensors(zoe_trainer *tr, int first, int n) {
    if (tr->cfg.init_from[0]) return zoe_hf_load_tensors(tr->gpt, tr->cfg.init_from, first, n);
    return zoe_gpt_init_tensors(tr->gpt, first, n);
}

/* Streamed weights: each unit's initial values written into a stream buffer, and this rank's
 * pieces of them stored into the host partition. */
static zoe_status init_streamed(zoe_trainer *tr) {
    void *w[ZOE_TP_BLOCK_PARAMS + 4];
    for (int u = 0; u < zoe_gpt_num_units(tr->gpt); u++) {
        int first, n;
        zoe_gpt_unit(tr->gpt, u, &first, &n);
        if (n > (int)(sizeof w / sizeof w[0]))
            return zoe_fail(ZOE_ERR_INTERNAL, "unit %d of %d tensors", u, n);
        ZOE_TRY(zoe_param_stream_stage(tr->weights, u, w));
        ZOE_TRY(zoe_gpt_bind_tensors(tr->gpt, first, n, w));
        ZOE_TRY(init_tensors(tr, first, n));
        ZOE_TRY(zoe_param_stream_store(tr->weights, u));
    }
    return ZOE_OK;
}

static zoe_status create_optimizer(zoe_trainer *tr) {
    const zoe_train_config *c = &tr->cfg;
    int n = zoe_gpt_num_tensors(tr->gpt);
    zoe_param_tensor *tensors = calloc((size_t)n, sizeof *tensors);
    tr->weight_ptrs = calloc((size_t)n, sizeof(void *));
    if (!tensors || !tr->weight_ptrs) {
        free(tensors);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor table of %d entries (%zu bytes)", n,
                        (size_t)n * (sizeof *tensors + sizeof(void *)));
    }
    zoe_train_param_tensors(tr->gpt, zoe_grid_tp_rank(tr->grid), tensors);
    zoe_optimizer_config oc;
    zoe_train_optimizer_config(c, tr->gpt, &oc);
    zoe_status st =
        zoe_optimizer_create(tr->grid, tr->dev, tr->stream, c->dtype, tensors, n, &oc, &tr->opt);
    if (st == ZOE_OK && oc.params_on_host) st = create_weight_stream(tr, tensors);
    free(tensors);
    ZOE_TRY(st);
    zoe_gpt_set_weight_source(tr->gpt, &(zoe_gpt_weight_source){
                                           .user = tr,
                                           .acquire = source_acquire,
                                           .release = source_release,
                                       });
    if (tr->weights) {
        ZOE_TRY(init_streamed(tr));
        return zoe_optimizer_init_from_params(tr->opt);
    }
    char *base = zoe_optimizer_params(tr->opt);
    for (int t = 0; t < n; t++) {
        size_t off;
        ZOE_TRY(zoe_optimizer_tensor_offset(tr->opt, t, &off));
        tr->weight_ptrs[t] = base + off * zoe_dtype_size(c->dtype);
    }
    ZOE_TRY(zoe_gpt_bind_weights(tr->gpt, tr->weight_ptrs));
    ZOE_TRY(init_tensors(tr, 0, n));
    return zoe_optimizer_init_from_params(tr->opt);
}

/* The host map on rank 0's log; a warning when mpirun would take long to notice a host cut off
 * (docs/multi-node.md, "A network that splits"); the watchdog, given how long that takes. */
static zoe_status create_watchdog(zoe_trainer *tr) {
    const zoe_train_config *c = &tr->cfg;
    int hosts = 1;
    ZOE_TRY(zoe_hosts_log_map(tr->grid, &hosts));
    double split_s = hosts > 1 ? zoe_launcher_split_seconds() : 0;
    if (split_s > ZOE_LAUNCHER_SPLIT_MAX_S && zoe_grid_rank(tr->grid) == 0)
        zoe_log(ZOE_LOG_WARN,
                "mpirun notices a host that the network cut off only after %.0f s (Open MPI's "
                "oob_tcp_keepalive_time + _probes x _intvl): a job split by the network hangs "
                "that long; zoe's launch/openmpi-mca-params.conf makes it 11 s: mpirun --mca "
                "mca_base_param_files /path/to/zoe/launch/openmpi-mca-params.conf "
                "(docs/multi-node.md, \"A network that splits\")",
                split_s);
    if (c->stall_timeout == 0 && c->stop_grace == 0) return ZOE_OK;
    zoe_watchdog_config wc = {
        .world = zoe_grid_world_comm(tr->grid),
        .stall_timeout_s = c->stall_timeout,
        .stop_grace_s = c->stop_grace,
        .rank = zoe_grid_rank(tr->grid),
        .tp_rank = zoe_grid_tp_rank(tr->grid),
        .dp_rank = zoe_grid_dp_rank(tr->grid),
        .launcher_split_s = split_s <= ZOE_LAUNCHER_SPLIT_MAX_S ? split_s : 0,
    };
    return zoe_watchdog_create(&wc, &tr->watchdog);
}

zoe_status zoe_trainer_create(MPI_Comm world, const zoe_train_config *cfg, zoe_trainer **out) {
    if (!out || !cfg)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_create: NULL argument");
    *out = NULL;
    if (world == MPI_COMM_NULL)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_create: world is MPI_COMM_NULL");
    int world_size = 0, rc = MPI_Comm_size(world, &world_size);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "zoe_trainer_create: MPI_Comm_size of world");
    ZOE_TRY(zoe_train_config_validate(cfg, world_size));
    if (cfg->dpu == ZOE_DPU_AUTO || cfg->offload_ratio == ZOE_OFFLOAD_RATIO_AUTO)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_create: --dpu auto and --offload-ratio auto are the plan's to "
                        "resolve first (zoe_plan_dpu_pays, zoe_plan_auto_offload_ratio)");
    zoe_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "trainer struct");
    tr->cfg = *cfg;
    if (tr->cfg.dpu == ZOE_DPU_OFF) tr->cfg.dpu_warmup = 0;
    zoe_status st = zoe_grid_create(world, cfg->tp, &tr->grid);
    if (st == ZOE_OK && cfg->init_from[0]) st = zoe_hf_config_text(cfg->init_from, &tr->hf_config);
    if (st == ZOE_OK) st = create_device(tr);
    if (st == ZOE_OK) bind_threads(tr);
    if (st == ZOE_OK) st = create_model(tr);
    if (st == ZOE_OK) st = create_optimizer(tr);
    if (st == ZOE_OK) st = create_watchdog(tr);
    if (st != ZOE_OK) {
        zoe_trainer_destroy(tr);
        return st;
    }
    tr->step_started = zoe_clock_ms();
    tr->step_targets = -1;
    *out = tr;
    return ZOE_OK;
}

int zoe_trainer_stop_requested(zoe_trainer *tr, int *signo) {
    if (!tr) {
        zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_stop_requested: NULL trainer");
        return 0;
    }
    zoe_watchdog_at(tr->watchdog, tr->steps_done, 0, ZOE_PHASE_STOP_CHECK);
    int stop = zoe_stop_requested(zoe_grid_world_comm(tr->grid), signo);
    zoe_watchdog_at(tr->watchdog, tr->steps_done, 0, ZOE_PHASE_BETWEEN);
    if (stop) zoe_watchdog_stop_settled(tr->watchdog);
    return stop;
}

void zoe_trainer_caller_phase(zoe_trainer *tr, const char *what) {
    if (tr) zoe_watchdog_caller_phase(tr->watchdog, what);
}

void zoe_trainer_watch(zoe_trainer *tr, zoe_step_phase phase) {
    zoe_watchdog_at(tr->watchdog, tr->steps_done, 0, phase);
    if (phase == ZOE_PHASE_SAVE) zoe_watchdog_stop_settled(tr->watchdog);
}

zoe_status zoe_trainer_finalize(zoe_trainer *tr) {
    if (!tr) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_finalize: NULL trainer");
    return zoe_optimizer_flush(tr->opt);
}

/* Local: the optimizer's destroy only joins a delayed update still in flight (its refresh, the
 * collective part, is finalize's), so a rank on an error path never waits for the others. */
void zoe_trainer_destroy(zoe_trainer *tr) {
    if (!tr) return;
    zoe_watchdog_destroy(tr->watchdog);
    zoe_param_stream_destroy(tr->weights);
    zoe_optimizer_destroy(tr->opt);
    zoe_gpt_destroy(tr->gpt);
    zoe_comm_destroy(tr->tp_comm);
    free(tr->stale_params);
    zoe_stream_destroy(tr->stream);
    zoe_device_destroy(tr->dev);
    zoe_grid_destroy(tr->grid);
    free(tr->weight_ptrs);
    free(tr->hf_config);
    free(tr);
}

int64_t zoe_trainer_param_count(const zoe_trainer *tr) {
    return tr ? zoe_gpt_global_numel(tr->gpt) : -1;
}
zoe_optimizer *zoe_trainer_optimizer(zoe_trainer *tr) {
    return tr ? tr->opt : NULL;
}
zoe_device *zoe_trainer_device(zoe_trainer *tr) {
    return tr->dev;
}
zoe_gpt *zoe_trainer_gpt(zoe_trainer *tr) {
    return tr->gpt;
}
zoe_grid *zoe_trainer_grid(zoe_trainer *tr) {
    return tr->grid;
}
zoe_stream *zoe_trainer_stream(zoe_trainer *tr) {
    return tr->stream;
}
const zoe_train_config *zoe_trainer_config(const zoe_trainer *tr) {
    return &tr->cfg;
}
int zoe_trainer_steps_done(const zoe_trainer *tr) {
    return tr->steps_done;
}
void zoe_trainer_set_steps_done(zoe_trainer *tr, int steps) {
    tr->steps_done = steps;
}
const char *zoe_trainer_hf_config(const zoe_trainer *tr) {
    return tr->hf_config;
}
zoe_status zoe_trainer_set_hf_config(zoe_trainer *tr, const char *json) {
    char *copy = json ? strdup(json) : NULL;
    if (json && !copy) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "the Hugging Face config");
    free(tr->hf_config);
    tr->hf_config = copy;
    return ZOE_OK;
}
int zoe_trainer_rank(const zoe_trainer *tr) {
    return tr ? zoe_grid_rank(tr->grid) : -1;
}
int zoe_trainer_dp_rank(const zoe_trainer *tr) {
    return tr ? zoe_grid_dp_rank(tr->grid) : -1;
}
int zoe_trainer_dp_size(const zoe_trainer *tr) {
    return tr ? zoe_grid_dp_size(tr->grid) : -1;
}

int64_t zoe_count_targets(const int32_t *targets, size_t n) {
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += targets[i] != ZOE_GPT_IGNORE_INDEX;
    return count;
}

zoe_status zoe_trainer_begin_step(zoe_trainer *tr, int64_t counted_targets) {
    if (!tr || counted_targets < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_begin_step: %s",
                        tr ? "negative target count" : "NULL trainer");
    if (tr->micro_batches > 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_begin_step after %d micro-batches of the step",
                        tr->micro_batches);
    int64_t global = counted_targets;
    int rc =
        MPI_Allreduce(MPI_IN_PLACE, &global, 1, MPI_INT64_T, MPI_SUM, zoe_grid_dp_comm(tr->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the step's counted targets");
    tr->step_targets = counted_targets;
    tr->global_targets = global;
    return ZOE_OK;
}

/* The factor on the gradient of a micro-batch's summed token losses. The optimizer averages
 * the micro-batches of a step and the DP ranks, so the per-token mean over the global batch
 * (N targets) takes grad_accum x dp / N; without a declared count, each micro-batch's own
 * mean (1 / its count). */
static float token_scale(const zoe_trainer *tr, float loss_scale, int64_t count) {
    if (tr->step_targets < 0) return count > 0 ? loss_scale / (float)count : 0.0f;
    if (tr->global_targets == 0) return 0.0f;
    double k = (double)tr->cfg.grad_accum * (double)zoe_grid_dp_size(tr->grid);
    return (float)((double)loss_scale * k / (double)tr->global_targets);
}

/* A caller's batch against the model's vocabulary [0, vocab) (targets may also be -1): no TP
 * rank's vocabulary shard holds a token outside it, so the vocab-parallel embedding and loss
 * would take it silently as a zero embedding and a zero target logit (or, below the padded
 * vocabulary, as a padding row): it is refused before the forward, naming its position. targets may
 * be NULL (logits). Every rank of a TP group checks the same batch and so fails alike. */
static zoe_status check_batch(const zoe_trainer *tr, const int32_t *tokens, const int32_t *targets,
                              const char *what) {
    const int32_t vocab = tr->cfg.model.vocab, seq = tr->cfg.model.seq_len;
    const size_t n = (size_t)tr->cfg.micro_batch * (size_t)seq;
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: token %d at [%zu, %zu] is outside the vocabulary [0, %d)", what,
                            tokens[i], i / (size_t)seq, i % (size_t)seq, vocab);
        if (targets && (targets[i] < -1 || targets[i] >= vocab))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: target %d at [%zu, %zu] is outside the vocabulary [0, %d) (-1: "
                            "ignored)",
                            what, targets[i], i / (size_t)seq, i % (size_t)seq, vocab);
    }
    return ZOE_OK;
}

zoe_status zoe_trainer_micro_batch(zoe_trainer *tr, const int32_t *tokens, const int32_t *targets,
                                   float *loss) {
    if (!tr || !tokens || !targets)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_micro_batch: NULL argument");
    ZOE_TRY(check_batch(tr, tokens, targets, "zoe_trainer_micro_batch"));
    zoe_optimizer_stats os;
    ZOE_TRY(zoe_optimizer_stats_get(tr->opt, &os));
    ZOE_TRY(zoe_optimizer_begin_micro_batch(tr->opt));
    /* The step's last micro-batch: under the exact DPU schedule the host update of each bucket
     * starts during its backward, with the schedule's learning rate (a caller's other lr is
     * redone, still exact). */
    if (tr->micro_batches + 1 == tr->cfg.grad_accum)
        ZOE_TRY(zoe_optimizer_expect_step(tr->opt, zoe_train_lr_at(&tr->cfg, tr->steps_done)));
    double t0 = zoe_clock_ms();
    float l = 0;
    zoe_watchdog_at(tr->watchdog, tr->steps_done, tr->micro_batches, ZOE_PHASE_FORWARD);
    ZOE_TRY(zoe_gpt_forward(tr->gpt, tokens, targets, &l));
    zoe_watchdog_at(tr->watchdog, tr->steps_done, tr->micro_batches, ZOE_PHASE_BACKWARD);
    double t1 = zoe_clock_ms(), offload_before = tr->ms_offload;
    zoe_gpt_grad_sink sink = {tr, sink_acquire, sink_release};
    int64_t count = zoe_gpt_loss_count(tr->gpt);
    ZOE_TRY(zoe_gpt_backward_scaled(tr->gpt, token_scale(tr, (float)os.loss_scale, count), &sink));
    double t2 = zoe_clock_ms();
    ZOE_TRY(zoe_optimizer_end_micro_batch(tr->opt));
    double t3 = zoe_clock_ms();
    zoe_watchdog_at(tr->watchdog, tr->steps_done, tr->micro_batches + 1, ZOE_PHASE_BETWEEN);
    tr->ms_forward += t1 - t0;
    tr->ms_backward += (t2 - t1) - (tr->ms_offload - offload_before);
    tr->ms_offload += t3 - t2;
    tr->loss_sum += (double)l * (double)count;
    tr->loss_tokens += count;
    tr->micro_batches++;
    if (loss) *loss = l;
    return ZOE_OK;
}

zoe_status zoe_trainer_step(zoe_trainer *tr, float lr, zoe_step_stats *stats) {
    if (!tr) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_step: NULL trainer");
    if (tr->micro_batches == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_step before any micro-batch");
    if (tr->step_targets >= 0 &&
        (tr->step_targets != tr->loss_tokens || tr->micro_batches != tr->cfg.grad_accum))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_step: the step declared %lld targets over %d micro-batches, "
                        "but its micro-batches held %lld over %d",
                        (long long)tr->step_targets, tr->cfg.grad_accum, (long long)tr->loss_tokens,
                        tr->micro_batches);
    double t0 = zoe_clock_ms();
    zoe_watchdog_at(tr->watchdog, tr->steps_done, tr->micro_batches, ZOE_PHASE_OPTIMIZER);
    ZOE_TRY(zoe_optimizer_step(tr->opt, lr));
    double t1 = zoe_clock_ms();
    zoe_optimizer_stats os;
    ZOE_TRY(zoe_optimizer_stats_get(tr->opt, &os));
    /* Every TP rank has the same loss; the mean over the global batch's counted targets. */
    double sums[3] = {tr->loss_sum, (double)tr->micro_batches, (double)tr->loss_tokens};
    int rc = MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, zoe_grid_dp_comm(tr->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the step's loss over DP");
    zoe_memory_stats ms;
    ZOE_TRY(zoe_device_memory_stats(tr->dev, &ms));
    long long device_peak = (long long)ms.device_peak;
    rc = MPI_Allreduce(MPI_IN_PLACE, &device_peak, 1, MPI_LONG_LONG, MPI_MAX,
                       zoe_grid_world_comm(tr->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the device peak");
    if (stats) {
        const zoe_train_config *c = &tr->cfg;
        memset(stats, 0, sizeof *stats);
        stats->step = tr->steps_done;
        stats->loss = sums[2] > 0 ? (float)(sums[0] / sums[2]) : 0.0f;
        stats->lr = lr;
        stats->grad_norm = (float)os.grad_norm;
        stats->loss_scale = (float)os.loss_scale;
        stats->skipped = os.skipped;
        stats->tokens = (int64_t)sums[1] * c->micro_batch * c->model.seq_len;
        stats->ms_forward = tr->ms_forward;
        stats->ms_backward = tr->ms_backward;
        stats->ms_offload = tr->ms_offload;
        /* Under DPU the host update ran overlapped: the step only waited for it. */
        stats->ms_host_step = os.ms_update;
        stats->ms_refresh = os.ms_refresh;
        stats->ms_optimizer = t1 - t0;
        stats->overlapped = c->dpu_warmup > 0 && tr->steps_done >= c->dpu_warmup && !os.skipped;
        if (c->dpu_schedule == ZOE_DPU_EXACT) stats->overlapped = os.speculated || os.deferred;
        stats->redone = os.redone;
        stats->device_peak_bytes = device_peak;
        stats->ms_grad_wait = os.ms_grad_wait;
        stats->ms_total = t1 - tr->step_started;
    }
    tr->steps_done++;
    zoe_watchdog_step_done(tr->watchdog, tr->steps_done);
    tr->loss_sum = 0;
    tr->loss_tokens = 0;
    tr->step_targets = -1;
    tr->micro_batches = 0;
    tr->ms_forward = tr->ms_backward = tr->ms_offload = 0;
    tr->step_started = zoe_clock_ms();
    return ZOE_OK;
}

static size_t param_bytes(const zoe_trainer *tr) {
    return zoe_optimizer_params_numel(tr->opt) * zoe_dtype_size(tr->cfg.dtype);
}

/* Under DPU an update may be in flight: the latest weights, the ones to evaluate, are not all in
 * the parameter buffer yet, so the update lands (flush) first. With the exact schedule the next
 * forward reads those latest weights anyway, so nothing more is needed. With a stale schedule
 * the next forward reads the buffer as it was (one step stale): those weights are kept in a
 * host copy, made once and reused (pageable: a whole copy of the weights pinned would compete
 * with the optimizer's memory, and its two copies an evaluation are no step's critical path), and
 * eval_end puts things back as zoe_trainer_load does for a checkpoint saved in this state: the
 * latest weights staged for the due refresh, the stale ones in the buffer. (The plan counts that
 * copy: engine/plan/plan.c, the host's eval copy.) */
/* The stale weights of an evaluation under a delayed update: the parameter buffer into
 * tr->stale_params (restore 0) or back; with streamed weights the host partition, wherever it
 * lives. */
static zoe_status copy_params(zoe_trainer *tr, int restore) {
    if (tr->weights)
        return zoe_optimizer_params_copy(tr->opt, 0, zoe_optimizer_params_numel(tr->opt),
                                         tr->stale_params, restore);
    void *params = zoe_optimizer_params(tr->opt);
    ZOE_TRY(zoe_memcpy_async(
        restore ? params : tr->stale_params, restore ? tr->stale_params : params, param_bytes(tr),
        restore ? ZOE_COPY_HOST_TO_DEVICE : ZOE_COPY_DEVICE_TO_HOST, tr->stream));
    return zoe_stream_synchronize(tr->stream);
}

zoe_status zoe_trainer_eval_begin(zoe_trainer *tr) {
    if (!tr) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_eval_begin: NULL trainer");
    if (tr->evaluating || tr->micro_batches > 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_eval_begin %s: evaluate between steps",
                        tr->evaluating ? "twice" : "inside a step");
    zoe_watchdog_at(tr->watchdog, tr->steps_done - 1, 0, ZOE_PHASE_EVALUATION);
    int due = 0, stale = tr->cfg.dpu_schedule != ZOE_DPU_EXACT;
    ZOE_TRY(zoe_optimizer_settle(tr->opt, &due));
    if (due && stale) {
        if (!tr->stale_params && !(tr->stale_params = malloc(param_bytes(tr))))
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host copy of the stale weights (%zu bytes)",
                            param_bytes(tr));
        ZOE_TRY(copy_params(tr, 0));
    }
    if (due) ZOE_TRY(zoe_optimizer_flush(tr->opt));
    tr->evaluating = 1;
    tr->eval_restore = due && stale;
    tr->eval_micro_batches = 0;
    tr->eval_loss_sum = 0;
    tr->eval_targets = 0;
    return ZOE_OK;
}

zoe_status zoe_trainer_eval_micro_batch(zoe_trainer *tr, const int32_t *tokens,
                                        const int32_t *targets) {
    if (!tr || !tokens || !targets)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_eval_micro_batch: NULL argument");
    if (!tr->evaluating)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_eval_micro_batch without zoe_trainer_eval_begin");
    ZOE_TRY(check_batch(tr, tokens, targets, "zoe_trainer_eval_micro_batch"));
    zoe_watchdog_at(tr->watchdog, tr->steps_done - 1, tr->eval_micro_batches, ZOE_PHASE_EVALUATION);
    float loss = 0;
    ZOE_TRY(zoe_gpt_forward_eval(tr->gpt, tokens, targets, &loss));
    int64_t count = zoe_gpt_loss_count(tr->gpt);
    tr->eval_loss_sum += (double)loss * (double)count;
    tr->eval_targets += count;
    tr->eval_micro_batches++;
    return ZOE_OK;
}

zoe_status zoe_trainer_eval_end(zoe_trainer *tr, float *loss) {
    if (!tr || !loss)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_eval_end: NULL argument");
    if (!tr->evaluating)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_trainer_eval_end without zoe_trainer_eval_begin");
    tr->evaluating = 0;
    /* Every TP rank of a DP group holds the same sums. */
    double sums[2] = {tr->eval_loss_sum, (double)tr->eval_targets};
    int rc = MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, zoe_grid_dp_comm(tr->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the validation loss over DP");
    *loss = sums[1] > 0 ? (float)(sums[0] / sums[1]) : 0.0f;
    if (tr->eval_restore) {
        ZOE_TRY(zoe_optimizer_defer_refresh(tr->opt));
        ZOE_TRY(copy_params(tr, 1));
    }
    /* An evaluation is progress: the stall timer starts again; and it is no part of the next
     * step's time. */
    zoe_watchdog_step_done(tr->watchdog, tr->steps_done);
    tr->step_started = zoe_clock_ms();
    return ZOE_OK;
}

zoe_status zoe_trainer_logits(zoe_trainer *tr, const int32_t *tokens, float *logits) {
    if (!tr || !tokens || !logits)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_logits: NULL argument");
    ZOE_TRY(check_batch(tr, tokens, NULL, "zoe_trainer_logits"));
    const zoe_tp_embedding *e = zoe_gpt_embedding(tr->gpt);
    size_t n = (size_t)tr->cfg.micro_batch * (size_t)tr->cfg.model.seq_len;
    size_t local = (size_t)e->vocab.local, vocab = (size_t)e->vocab.vocab;
    int tp = zoe_grid_tp_size(tr->grid);
    size_t es = zoe_dtype_size(tr->cfg.dtype);
    /* The gather moves whole rows of tokens, as many per MPI call as fit its int count and a
     * bounded buffer (runtime/mpi_chunk.h): micro-batch x seq x vocab passes 2^31 at real
     * shapes (4 x 8192 x 128256 at TP=1, Llama 3's vocabulary and context, is 4.3e9). */
    const size_t rows =
        zoe_mpi_chunk_rows(local, (size_t)tp, sizeof(float), INT_MAX, ZOE_MPI_PACK_BYTES);
    const size_t chunk = rows < n ? rows : n;
    void *raw = malloc(n * local * es);
    float *mine = malloc(n * local * sizeof(float));
    float *all = malloc(chunk * local * (size_t)tp * sizeof(float));
    zoe_status st =
        raw && mine && all ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "logits of %zu tokens", n);
    uint64_t count = zoe_gpt_forward_count(tr->gpt);
    float loss;
    /* the tokens as targets: any valid ones do, the loss is not used */
    if (st == ZOE_OK) st = zoe_gpt_forward(tr->gpt, tokens, tokens, &loss);
    zoe_gpt_set_forward_count(tr->gpt, count);
    if (st == ZOE_OK)
        st = zoe_memcpy_async(raw, zoe_gpt_logits(tr->gpt), n * local * es, ZOE_COPY_DEVICE_TO_HOST,
                              tr->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(tr->stream);
    if (st == ZOE_OK) st = zoe_convert(mine, ZOE_F32, raw, tr->cfg.dtype, n * local);
    /* Rank r of the TP group holds vocabulary rows [r * local, (r + 1) * local); the tokens
     * [lo, lo + len) of every rank arrive as [tp][len][local]. */
    for (size_t lo = 0; st == ZOE_OK && lo < n; lo += chunk) {
        const size_t len = chunk < n - lo ? chunk : n - lo;
        if (MPI_Allgather(mine + lo * local, (int)(len * local), MPI_FLOAT, all, (int)(len * local),
                          MPI_FLOAT, zoe_grid_tp_comm(tr->grid)) != MPI_SUCCESS)
            st = zoe_fail(ZOE_ERR_MPI, "all-gather of the logits of tokens %zu-%zu failed", lo,
                          lo + len);
        for (size_t i = 0; st == ZOE_OK && i < len; i++)
            for (size_t c = 0; c < vocab; c++)
                logits[(lo + i) * vocab + c] =
                    all[(c / local) * len * local + i * local + c % local];
    }
    free(raw), free(mine), free(all);
    return st;
}

zoe_status zoe_trainer_flush(zoe_trainer *tr) {
    if (!tr) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_flush: NULL trainer");
    return zoe_optimizer_flush(tr->opt);
}

zoe_status zoe_trainer_profile(zoe_trainer *tr, zoe_profile *out, int reset) {
    if (!tr || !out)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_trainer_profile: NULL argument");
    zoe_kernel_profile kp;
    zoe_gpt_kernel_profile(tr->gpt, &kp, reset);
    memset(out, 0, sizeof *out);
    for (int op = 0; op < ZOE_KOP_COUNT && out->count < ZOE_PROFILE_MAX - 1; op++) {
        if (!kp.calls[op]) continue;
        snprintf(out->entries[out->count].name, sizeof out->entries[0].name, "%s",
                 zoe_kernel_op_name((zoe_kernel_op)op));
        out->entries[out->count].ms = kp.seconds[op] * 1e3;
        out->entries[out->count++].calls = kp.calls[op];
    }
    double tp_seconds = zoe_comm_seconds(tr->tp_comm);
    snprintf(out->entries[out->count].name, sizeof out->entries[0].name, "tp_collectives");
    out->entries[out->count++].ms = (tp_seconds - tr->tp_seconds_at_reset) * 1e3;
    if (reset) tr->tp_seconds_at_reset = tp_seconds;
    return ZOE_OK;
}
