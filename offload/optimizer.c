/* The optimizer's life cycle: configuration checks, creation on a grid, accessors and the
 * checkpoint view of the partition's state.
 *
 * Explained in docs/offload.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/error.h"

zoe_status zoe_optimizer_config_default_for(zoe_optimizer_config *cfg, size_t struct_size,
                                            int api_version) {
    if (!cfg) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_optimizer_config_default: NULL");
    ZOE_TRY(
        zoe_check_struct_version("zoe_optimizer_config", struct_size, api_version, sizeof *cfg));
    *cfg = (zoe_optimizer_config){
        .struct_size = sizeof *cfg,
        .api_version = ZOE_API_VERSION,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.0f,
        .adamw = 1,
        .clip_norm = 1.0f,
        .dynamic_loss_scale = 0,
        .loss_scale = 1.0f,
        .loss_scale_window = 1000,
        .min_loss_scale = 1.0f,
        .bucket_numel = (size_t)1 << 24,
        .bucket_ring = 2,
        .grad_mode = ZOE_GRAD_BUCKETS,
        .dpu_warmup = 0,
        .partial_ratio = 0.0f,
        .copy_out_numel = (size_t)1 << 22,
        .dpu_schedule = ZOE_DPU_PLAIN,
        .dpu_dc_kappa = 1.0f,
        .dpu_predict_scale = 1.5f,
    };
    return ZOE_OK;
}

zoe_status zoe_config_check(const zoe_optimizer_config *c) {
#define BAD(...) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    ZOE_TRY(zoe_check_struct_version("zoe_optimizer_config", c->struct_size, c->api_version,
                                     sizeof *c));
    if (!(c->beta1 >= 0 && c->beta1 < 1)) BAD("beta1 %g outside [0, 1)", (double)c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1)) BAD("beta2 %g outside [0, 1)", (double)c->beta2);
    if (!(c->eps > 0) || !isfinite(c->eps)) BAD("eps %g is not a finite value > 0", (double)c->eps);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        BAD("weight_decay %g is not a finite value >= 0", (double)c->weight_decay);
    if (isnan(c->clip_norm)) BAD("clip_norm is NaN");
    if (!(c->loss_scale > 0) || !isfinite(c->loss_scale))
        BAD("loss_scale %g is not a finite value > 0", (double)c->loss_scale);
    if (c->dynamic_loss_scale && c->loss_scale_window < 1)
        BAD("loss_scale_window %d must be >= 1", c->loss_scale_window);
    if (c->dynamic_loss_scale && !(c->min_loss_scale > 0 && c->min_loss_scale <= c->loss_scale))
        BAD("min_loss_scale %g outside (0, loss_scale %g]", (double)c->min_loss_scale,
            (double)c->loss_scale);
    if (c->bucket_numel == 0) BAD("bucket_numel 0 must be positive");
    if (c->bucket_ring < 1) BAD("bucket_ring %d must be >= 1", c->bucket_ring);
    if (c->grad_mode != ZOE_GRAD_BUCKETS && c->grad_mode != ZOE_GRAD_FULL_BUFFER)
        BAD("unknown gradient mode %d", (int)c->grad_mode);
    if (c->dpu_warmup < 0) BAD("dpu_warmup %d must be >= 0 (0 disables DPU)", c->dpu_warmup);
    if (c->copy_out_numel == 0) BAD("copy_out_numel 0 must be positive");
    if (!(c->partial_ratio >= 0 && c->partial_ratio <= 1))
        BAD("partial offload ratio %g outside [0, 1]", (double)c->partial_ratio);
    if (c->params_on_host && c->partial_ratio > 0)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "params_on_host with partial offload %g: the device share's Adam writes "
                        "weights into a device buffer, and streamed weights keep none",
                        (double)c->partial_ratio);
    if (c->dpu_schedule < ZOE_DPU_PLAIN || c->dpu_schedule > ZOE_DPU_EXACT)
        BAD("unknown DPU schedule %d", (int)c->dpu_schedule);
    if (c->dpu_schedule == ZOE_DPU_EXACT && c->dpu_warmup > 0 && !(c->beta1 > 0 && c->beta2 > 0))
        BAD("DPU schedule exact undoes a step from the moments it left: beta1 %g and beta2 %g must "
            "be > 0",
            (double)c->beta1, (double)c->beta2);
    if (!(c->dpu_dc_kappa >= 0) || !isfinite(c->dpu_dc_kappa))
        BAD("dpu_dc_kappa %g is not a finite value >= 0", (double)c->dpu_dc_kappa);
    if (c->dpu_schedule == ZOE_DPU_PREDICT &&
        (!(c->dpu_predict_scale > 0) || !isfinite(c->dpu_predict_scale)))
        BAD("dpu_predict_scale %g is not a finite value > 0 (DPU schedule predict)",
            (double)c->dpu_predict_scale);
    if (c->state_ahead < 0) BAD("state_ahead %d is negative", c->state_ahead);
    if (c->grads_on_drives != 0 && c->grads_on_drives != 1)
        BAD("grads_on_drives %d is not 0 or 1", c->grads_on_drives);
    if (c->micro_batches < 0) BAD("micro_batches %d is negative (0: not known)", c->micro_batches);
    if (c->grads_on_drives && !(c->state_paths && c->state_paths[0]))
        BAD("grads_on_drives without state_paths: the gradient goes to the state's drives");
    if (c->params_on_drive && !(c->params_on_host && c->state_paths && c->state_paths[0]))
        BAD("params_on_drive without %s: the weights on drives are the host partition of "
            "streamed weights, in the state's scratch space",
            c->params_on_host ? "state_paths" : "params_on_host");
    if (c->state_paths && c->state_paths[0] && c->partial_ratio > 0)
        BAD("state_paths with partial_ratio %g: the drives hold the whole partition's state "
            "(partial_ratio 0)",
            (double)c->partial_ratio);
    const zoe_dtype states[] = {c->main_params_dtype, c->exp_avg_dtype, c->exp_avg_sq_dtype};
    const char *state_names[] = {"main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"};
    for (int i = 0; i < 3; i++) {
        if (states[i] != ZOE_F32 && states[i] != ZOE_BF16 && (i == 0 || states[i] != ZOE_I8))
            BAD("%s %s: the %s is held in %s", state_names[i], zoe_dtype_name(states[i]),
                i == 0 ? "master" : "moment", i == 0 ? "fp32 or bf16" : "fp32, bf16 or int8");
    }
    zoe_dtype g = c->main_grads_dtype;
    if (g != ZOE_F32 && g != ZOE_BF16 && g != ZOE_F16)
        BAD("main_grads_dtype %s: the gradient partition is fp32, bf16 or fp16", zoe_dtype_name(g));
    return ZOE_OK;
#undef BAD
}

static zoe_status check_tensors(const zoe_param_tensor *tensors, int n) {
    if (n <= 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "num_tensors %d must be positive", n);
    if (!tensors) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor list is NULL");
    for (int t = 0; t < n; t++) {
        if (!tensors[t].name) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor %d has no name", t);
        if (tensors[t].numel == 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor %d ('%s') has numel 0", t,
                            tensors[t].name);
    }
    return ZOE_OK;
}

static zoe_status create(zoe_optimizer *opt, const zoe_param_tensor *tensors, int n) {
    ZOE_TRY(zoe_comm_create_for_device(zoe_grid_dp_comm(opt->grid), opt->dev, &opt->dp));
    ZOE_TRY(zoe_stream_create(opt->dev, &opt->copy_stream));
    ZOE_TRY(zoe_stream_create(opt->dev, &opt->update_stream));
    ZOE_TRY(zoe_event_create(opt->dev, &opt->grads_written));
    ZOE_TRY(zoe_event_create(opt->dev, &opt->grads_reduced));
    ZOE_TRY(zoe_event_create(opt->dev, &opt->refreshed));
    ZOE_TRY(zoe_layout_build(&opt->lay, tensors, n, opt->cfg.bucket_numel, opt->dp_size,
                             opt->dp_rank, zoe_partition_align(&opt->cfg, opt->dtype),
                             zoe_tensor_align(&opt->cfg), zoe_grid_tp_rank(opt->grid) == 0,
                             opt->cfg.partial_ratio));
    ZOE_TRY(zoe_grads_dtype_check(&opt->cfg, zoe_device_backend(opt->dev), opt->dtype, &opt->lay));
    zoe_state_sizes_of(zoe_device_backend(opt->dev), opt->dtype, &opt->lay, opt->dp_size, &opt->cfg,
                       &opt->sz);
    /* The stale schedules' variants run in the host update only (step.c): the device Adam of a
     * GPU's device share neither predicts nor compensates. */
    zoe_dpu_schedule sched = opt->cfg.dpu_schedule;
    if (opt->cfg.dpu_warmup > 0 && (sched == ZOE_DPU_PREDICT || sched == ZOE_DPU_DC) &&
        opt->sz.d_state)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "DPU schedule %s with a device share (partial offload %g on a GPU): the "
                        "device Adam does not %s (not built)",
                        sched == ZOE_DPU_DC ? "dc" : "predict", (double)opt->cfg.partial_ratio,
                        sched == ZOE_DPU_DC ? "compensate" : "predict");
    ZOE_TRY(zoe_state_create(opt));
    ZOE_TRY(zoe_grads_create(opt));
    /* A speculated step that turns out wrong is undone from the state it left and the gradient
     * it read (in any state dtype: kernels/adam_state.h says within what). */
    if (opt->cfg.dpu_warmup > 0 && opt->cfg.dpu_schedule == ZOE_DPU_EXACT &&
        opt->cfg.grad_mode == ZOE_GRAD_BUCKETS)
        ZOE_TRY(zoe_spec_create(opt));
    opt->loss_scale = opt->cfg.loss_scale;
    opt->stats.loss_scale = opt->loss_scale;
    opt->stats.clip_coef = 1.0;
    return ZOE_OK;
}

zoe_status zoe_optimizer_create(zoe_grid *grid, zoe_device *device, zoe_stream *stream,
                                zoe_dtype compute_dtype, const zoe_param_tensor *tensors,
                                int num_tensors, const zoe_optimizer_config *cfg,
                                zoe_optimizer **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "optimizer out pointer is NULL");
    *out = NULL;
    if (!grid || !device || !stream || !cfg)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "optimizer create: grid, device, stream and "
                                                  "config must not be NULL");
    if (compute_dtype != ZOE_F32 && compute_dtype != ZOE_BF16 && compute_dtype != ZOE_F16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "compute dtype %s is not fp32, bf16 or fp16",
                        zoe_dtype_name(compute_dtype));
    ZOE_TRY(zoe_config_check(cfg));
    ZOE_TRY(check_tensors(tensors, num_tensors));
    zoe_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "optimizer struct");
    if (pthread_mutex_init(&opt->release_lock, NULL) != 0) {
        free(opt);
        return zoe_fail(ZOE_ERR_INTERNAL, "optimizer lock");
    }
    if (pthread_cond_init(&opt->released, NULL) != 0) {
        pthread_mutex_destroy(&opt->release_lock);
        free(opt);
        return zoe_fail(ZOE_ERR_INTERNAL, "optimizer condition variable");
    }
    opt->cfg = *cfg;
    opt->grid = grid, opt->dev = device, opt->stream = stream;
    opt->dp_size = zoe_grid_dp_size(grid), opt->dp_rank = zoe_grid_dp_rank(grid);
    opt->dtype = compute_dtype;
    opt->esz = zoe_dtype_size(compute_dtype);
    /* Each rank's partition coordinates start at 0: its DP rank makes its rounding bits its own.
     * Not its TP rank: a TP-replicated tensor sits at the same partition coordinates on every TP
     * rank of a DP rank, and its copies must round alike to stay one tensor (the shards of a split
     * tensor then share bits at equal coordinates: their errors are correlated, still unbiased). */
    uint32_t coords = zoe_hash32((uint32_t)opt->dp_rank * 0x9e3779b9U + 1);
    opt->rounding_seed = cfg->rounding_seed ^ ((uint64_t)coords << 32 | coords);
    zoe_status st = create(opt, tensors, num_tensors);
    if (st != ZOE_OK) {
        zoe_optimizer_destroy(opt);
        return st;
    }
    *out = opt;
    return ZOE_OK;
}

void zoe_optimizer_destroy(zoe_optimizer *opt) {
    if (!opt) return;
    if (opt->in_flight) pthread_join(opt->worker, NULL);
    zoe_spec_destroy(opt);
    if (opt->update_stream) zoe_stream_synchronize(opt->update_stream);
    if (opt->copy_stream) zoe_stream_synchronize(opt->copy_stream);
    if (opt->progress) zoe_grads_destroy(opt);
    zoe_state_destroy(opt);
    zoe_layout_free(&opt->lay);
    zoe_event_destroy(opt->grads_written);
    zoe_event_destroy(opt->grads_reduced);
    zoe_event_destroy(opt->refreshed);
    zoe_stream_destroy(opt->copy_stream);
    zoe_stream_destroy(opt->update_stream);
    zoe_comm_destroy(opt->dp);
    pthread_cond_destroy(&opt->released);
    pthread_mutex_destroy(&opt->release_lock);
    free(opt);
}

void *zoe_optimizer_params(zoe_optimizer *opt) {
    return opt && !opt->sz.weights_on_drive ? opt->params : NULL;
}

/* zoe_optimizer_params_copy's span: partition coordinates [a, e) (host coordinates: streamed
 * weights keep no device share) between the caller's buffer and the weights. */
typedef struct params_span {
    char *buf;
    size_t x0;
    int write;
} params_span;

static zoe_status params_span_copy(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const params_span *sp = ctx;
    char *w = zoe_params_at(opt, a), *u = sp->buf + (a - sp->x0) * opt->esz;
    memcpy(sp->write ? w : u, sp->write ? u : w, (e - a) * opt->esz);
    return ZOE_OK;
}

zoe_status zoe_optimizer_params_copy(zoe_optimizer *opt, size_t x, size_t n, void *buf, int write) {
    if (!opt || (!buf && n))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_optimizer_params_copy: NULL argument");
    if (!opt->cfg.params_on_host)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_optimizer_params_copy: the weights are on the device (no "
                        "params_on_host)");
    if (x > opt->lay.part_numel || n > opt->lay.part_numel - x)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_optimizer_params_copy: [%zu, %zu) outside the partition's %zu "
                        "elements",
                        x, x + n, opt->lay.part_numel);
    params_span sp = {.buf = buf, .x0 = x, .write = write};
    return zoe_state_paged(opt, x, x + n, write, params_span_copy, &sp);
}
size_t zoe_optimizer_params_numel(const zoe_optimizer *opt) {
    return !opt ? 0 : opt->cfg.params_on_host ? opt->lay.part_numel : opt->lay.flat_numel;
}
zoe_dtype zoe_optimizer_params_dtype(const zoe_optimizer *opt) {
    return !opt ? ZOE_F32 : opt->sz.params_are_master ? opt->sz.host_dtypes.master : opt->dtype;
}
int zoe_optimizer_params_on_host(const zoe_optimizer *opt) {
    return opt && opt->cfg.params_on_host;
}
size_t zoe_optimizer_partition_numel(const zoe_optimizer *opt) {
    return opt ? opt->lay.part_numel : 0;
}

static zoe_status check_index(const zoe_optimizer *opt, int t, const char *what) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", what);
    if (t < 0 || t >= opt->lay.num_tensors)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor index %d outside [0, %d)", what, t,
                        opt->lay.num_tensors);
    return ZOE_OK;
}

zoe_status zoe_optimizer_tensor_offset(const zoe_optimizer *opt, int t, size_t *offset) {
    ZOE_TRY(check_index(opt, t, "tensor_offset"));
    if (!offset) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor_offset: out pointer is NULL");
    *offset = opt->lay.offset[t];
    return ZOE_OK;
}

zoe_status zoe_optimizer_tensor_shard(const zoe_optimizer *opt, int t, size_t *first, size_t *count,
                                      size_t *partition_offset) {
    ZOE_TRY(check_index(opt, t, "tensor_shard"));
    if (!first || !count || !partition_offset)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor_shard: out pointer is NULL");
    const zoe_bucket *bk = &opt->lay.buckets[opt->lay.bucket_of[t]];
    size_t lo = opt->lay.offset[t] - bk->flat_offset, hi = lo + opt->lay.numel[t];
    size_t mine = (size_t)opt->dp_rank * bk->part, a = lo > mine ? lo : mine;
    size_t e = hi < mine + bk->part ? hi : mine + bk->part;
    *first = a < e ? a - lo : 0;
    *count = a < e ? e - a : 0;
    *partition_offset = a < e ? bk->part_offset + (a - mine) : 0;
    return ZOE_OK;
}

zoe_status zoe_optimizer_stats_get(const zoe_optimizer *opt, zoe_optimizer_stats *out) {
    if (!opt || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "stats: NULL argument");
    *out = opt->stats;
    out->ms_drive_wait = opt->drive ? opt->drive->ms_wait : 0;
    out->ms_grad_wait = opt->drive ? opt->drive->ms_stage_wait : 0;
    return ZOE_OK;
}

zoe_status zoe_optimizer_set_step(zoe_optimizer *opt, long step) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "set_step: optimizer is NULL");
    if (step < 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "step count %ld is negative", step);
    opt->stats.step = step;
    return ZOE_OK;
}

zoe_status zoe_optimizer_progress_get(const zoe_optimizer *opt, zoe_optimizer_progress *out) {
    if (!opt || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "progress_get: NULL argument");
    *out = (zoe_optimizer_progress){.iteration = opt->iteration,
                                    .step = opt->stats.step,
                                    .skipped_total = opt->stats.skipped_total,
                                    .loss_scale = opt->loss_scale,
                                    .clean_steps = opt->clean_steps,
                                    .last_lr = opt->last_lr};
    return ZOE_OK;
}

zoe_status zoe_optimizer_progress_set(zoe_optimizer *opt, const zoe_optimizer_progress *in) {
    if (!opt || !in) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "progress_set: NULL argument");
    if (in->iteration < 0 || in->step < 0 || in->step > in->iteration || in->skipped_total < 0 ||
        !(in->loss_scale > 0) || !isfinite(in->loss_scale) || in->clean_steps < 0 ||
        !(in->last_lr >= 0) || !isfinite(in->last_lr))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "optimizer progress: iteration %ld, step %ld, skipped %ld, loss scale %g, "
                        "clean steps %d, last lr %g (need 0 <= step <= iteration, a finite "
                        "scale > 0, a finite lr >= 0)",
                        in->iteration, in->step, in->skipped_total, (double)in->loss_scale,
                        in->clean_steps, (double)in->last_lr);
    opt->iteration = in->iteration;
    opt->stats.step = in->step;
    opt->stats.skipped_total = in->skipped_total;
    opt->loss_scale = in->loss_scale;
    opt->stats.loss_scale = in->loss_scale;
    opt->clean_steps = in->clean_steps;
    opt->last_lr = in->last_lr;
    return ZOE_OK;
}

/* Host elements [h0, h1) of int8 moment which (1 exp_avg, 2 exp_avg_sq) to or from host, of
 * dtype dt, a block at a time: read back, and written by reading the block back, replacing the
 * range and requantising the whole block to nearest (v's floor at code 1 kept). A block
 * requantised from its own values gets its codes and scale back, so a block written whole, or
 * written twice over (docs/offload.md: a checkpoint's load), holds exactly the values written
 * when they are an int8 block's values. */
static zoe_status int8_state_copy(zoe_optimizer *opt, int which, size_t h0, size_t h1, char *host,
                                  zoe_dtype dt, int write) {
    const size_t bs = ZOE_ADAM_INT8_BLOCK, esz = zoe_dtype_size(dt);
    float x[ZOE_ADAM_INT8_BLOCK];
    for (size_t b0 = h0 / bs * bs; b0 < h1; b0 += bs) {
        size_t len = opt->sz.h_numel - b0 < bs ? opt->sz.h_numel - b0 : bs;
        size_t a = b0 > h0 ? b0 : h0, e = b0 + len < h1 ? b0 + len : h1;
        ZOE_TRY(zoe_host_state_read(opt, which, b0, len, x));
        char *u = host + (a - h0) * esz;
        if (!write) {
            ZOE_TRY(zoe_convert(u, dt, x + (a - b0), ZOE_F32, e - a));
            continue;
        }
        ZOE_TRY(zoe_convert(x + (a - b0), ZOE_F32, u, dt, e - a));
        size_t lo = opt->win_lo[which]; /* element 0 of the array (a bucket's, on drives) */
        ZOE_TRY(zoe_adam_moment_from_f32(ZOE_I8, which == 2, x, b0 - lo, len,
                                         zoe_host_state_at(opt, which, lo),
                                         zoe_host_scale_at(opt, which, lo)));
    }
    return ZOE_OK;
}

/* Partition coordinates [a, e) of state array which in the device share (CUDA with partial
 * offload: [0, sz.h_lo), held in the host's dtypes) to or from host, of dtype dt, through host
 * staging a chunk at a time: read back as fp32, and written by reading back, replacing the range
 * and storing again, an int8 moment by whole blocks requantised to nearest as int8_state_copy
 * does (a block's untouched values requantise to their own codes). */
static zoe_status device_state_copy(zoe_optimizer *opt, int which, size_t a, size_t e, char *host,
                                    zoe_dtype dt, int write) {
    enum { BLOCK = ZOE_ADAM_INT8_BLOCK, CHUNK = 64 * ZOE_ADAM_INT8_BLOCK };
    void *arrays[] = {opt->d_master, opt->d_m, opt->d_v};
    float *scale_arrays[] = {NULL, opt->d_m_scale, opt->d_v_scale};
    const zoe_dtype held = zoe_optimizer_state_dtype(opt, (zoe_optimizer_state)which);
    const size_t hsz = zoe_adam_state_esize(held), esz = zoe_dtype_size(dt), pd = opt->sz.h_lo;
    const int int8 = held == ZOE_I8;
    float *x = malloc(CHUNK * sizeof(float)), scales[CHUNK / BLOCK];
    void *raw = malloc(CHUNK * hsz);
    zoe_status st =
        x && raw ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "state copy staging of %d", CHUNK);
    for (size_t c0 = a / CHUNK * CHUNK; st == ZOE_OK && c0 < e; c0 += CHUNK) {
        size_t lo = a > c0 ? a : c0, hi = zoe_min_size(e, c0 + CHUNK);
        /* what moves: the range, or the whole blocks holding it */
        size_t s0 = int8 ? lo / BLOCK * BLOCK : lo,
               s1 = int8 ? zoe_min_size((hi + BLOCK - 1) / BLOCK * BLOCK, pd) : hi, n = s1 - s0;
        char *dev = (char *)arrays[which] + s0 * hsz;
        float *dev_scales = int8 ? scale_arrays[which] + s0 / BLOCK : NULL;
        size_t nb = zoe_adam_int8_blocks(n);
        st = zoe_memcpy_async(raw, dev, n * hsz, ZOE_COPY_DEVICE_TO_HOST, opt->update_stream);
        if (st == ZOE_OK && int8)
            st = zoe_memcpy_async(scales, dev_scales, nb * sizeof(float), ZOE_COPY_DEVICE_TO_HOST,
                                  opt->update_stream);
        if (st == ZOE_OK) st = zoe_stream_synchronize(opt->update_stream);
        if (st != ZOE_OK) break;
        if ((st = zoe_adam_moment_to_f32(held, which == 2, raw, scales, 0, n, x)) != ZOE_OK) break;
        char *u = host + (lo - a) * esz;
        if (!write) {
            st = zoe_convert(u, dt, x + (lo - s0), ZOE_F32, hi - lo);
            continue;
        }
        if ((st = zoe_convert(x + (lo - s0), ZOE_F32, u, dt, hi - lo)) != ZOE_OK) break;
        if ((st = zoe_adam_moment_from_f32(held, which == 2, x, 0, n, raw, scales)) != ZOE_OK)
            break;
        st = zoe_memcpy_async(dev, raw, n * hsz, ZOE_COPY_HOST_TO_DEVICE, opt->update_stream);
        if (st == ZOE_OK && int8)
            st = zoe_memcpy_async(dev_scales, scales, nb * sizeof(float), ZOE_COPY_HOST_TO_DEVICE,
                                  opt->update_stream);
        if (st == ZOE_OK) st = zoe_stream_synchronize(opt->update_stream);
    }
    free(x);
    free(raw);
    return st;
}

/* The checks of every access to a state array: a known array, [offset, offset + count) within
 * the limit (elements or blocks of the partition), and nothing of a step half done. */
static zoe_status state_access_check(zoe_optimizer *opt, zoe_optimizer_state which,
                                     const char *what, size_t offset, size_t count, size_t limit,
                                     const void *buf) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", what);
    if (which < ZOE_STATE_MASTER || which > ZOE_STATE_EXP_AVG_SQ)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: unknown state %d", what, (int)which);
    if (offset > limit || count > limit - offset)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: range [%zu, %zu) outside the partition of %zu", what, offset,
                        offset + count, limit);
    if (count && !buf) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
    ZOE_TRY(zoe_spec_cancel(opt)); /* ZOE_DPU_EXACT: nothing of a step half done */
    if (opt->in_flight)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s while a delayed update is in flight: call zoe_optimizer_flush first",
                        what);
    return ZOE_OK;
}

/* The host part of a state copy (zoe_span_fn's ctx): buf holds host coordinates from h0 on. */
typedef struct state_span {
    int which;
    char *buf;
    size_t h0;
    zoe_dtype dt;
    int write;
} state_span;

static zoe_status state_span_copy(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const state_span *sp = ctx;
    char *u = sp->buf + (a - sp->h0) * zoe_dtype_size(sp->dt);
    zoe_dtype held = zoe_optimizer_state_dtype(opt, (zoe_optimizer_state)sp->which);
    if (held == ZOE_I8) return int8_state_copy(opt, sp->which, a, e, u, sp->dt, sp->write);
    /* A bf16 state reads back exactly (widened) and is written with round-to-nearest-even:
     * what it read back is written back unchanged. */
    void *h = zoe_host_state_at(opt, sp->which, a);
    return sp->write ? zoe_convert(h, held, u, sp->dt, e - a)
                     : zoe_convert(u, sp->dt, h, held, e - a);
}

/* The master a settled delayed update left in the fp32 gradient partition flight_buf (dpu_swap:
 * the CPU backend, where host coordinates are partition coordinates). */
static zoe_status swapped_copy(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const state_span *sp = ctx;
    char *u = sp->buf + (a - sp->h0) * zoe_dtype_size(sp->dt);
    float *staged = zoe_host_grad_f32(opt, opt->flight_buf, a);
    return sp->write ? zoe_convert(staged, ZOE_F32, u, sp->dt, e - a)
                     : zoe_convert(u, sp->dt, staged, ZOE_F32, e - a);
}

/* The fp32 master in the parameters (master_in_params) over host coordinates [a, e) (a
 * state_span whose which is unused): the rank's weight slices, converted to and from the caller's
 * buffer. */
static zoe_status master_slices_copy(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const state_span *sp = ctx;
    size_t esz = zoe_dtype_size(sp->dt);
    for (zoe_slices it = zoe_slices_of(&opt->lay, opt->dp_rank, a, e - a); zoe_slices_next(&it);) {
        float *w = zoe_params_at(opt, zoe_weights_index(opt, it.x, it.flat));
        char *u = sp->buf + (it.x - sp->h0) * esz;
        ZOE_TRY(sp->write ? zoe_convert(w, ZOE_F32, u, sp->dt, it.len)
                          : zoe_convert(u, sp->dt, w, ZOE_F32, it.len));
    }
    return ZOE_OK;
}

/* Copies [offset, offset + count) of one state array between the caller's host buffer, of
 * dtype dt (fp32 or bf16), and the partition, whose first sz.h_lo elements live in device memory
 * (CUDA with partial offload, in the host's dtypes). Into bf16 the values round to nearest even;
 * a state held in bf16 and read into bf16 or fp32 moves exactly. */
static zoe_status state_copy(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                             size_t count, void *host, zoe_dtype dt, int write) {
    const char *what = write ? "write_state" : "read_state";
    ZOE_TRY(
        state_access_check(opt, which, what, offset, count, opt ? opt->lay.part_numel : 0, host));
    if (dt != ZOE_F32 && dt != ZOE_BF16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: a buffer of %s (fp32 or bf16)", what,
                        zoe_dtype_name(dt));
    size_t end = offset + count, esz = zoe_dtype_size(dt);
    char *buf = host;
    if (which == ZOE_STATE_MASTER && opt->refresh_due && opt->sz.dpu_swap &&
        opt->sz.master_in_params) {
        /* A settled delayed update (zoe_optimizer_settle) left the new master weights in the
         * gradient partition it read; the rank's weight slices hold the previous ones until the
         * due refresh. */
        state_span span = {.buf = buf, .h0 = offset, .dt = dt, .write = write};
        return zoe_grads_paged(opt, offset, end, opt->flight_buf, write, swapped_copy, &span);
    }
    if (which == ZOE_STATE_MASTER && opt->sz.master_in_params) { /* the rank's weight slices */
        /* (the CPU backend: partition coordinates are host coordinates; on drives a bucket's
         * weights at a time) */
        state_span sp = {.buf = buf, .h0 = offset, .dt = dt, .write = write};
        return zoe_state_paged(opt, offset, end, write, master_slices_copy, &sp);
    }
    size_t pd = opt->sz.h_lo; /* the device arrays hold [0, h_lo), the host arrays the rest */
    if (offset < pd)
        ZOE_TRY(device_state_copy(opt, (int)which, offset, zoe_min_size(end, pd), buf, dt, write));
    if (end <= pd) return ZOE_OK;
    size_t a = offset > pd ? offset : pd;
    state_span span = {.which = (int)which,
                       .buf = buf + (a - offset) * esz,
                       .h0 = a - pd,
                       .dt = dt,
                       .write = write};
    return zoe_state_paged(opt, a - pd, end - pd, write, state_span_copy, &span);
}

zoe_status zoe_optimizer_read_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                    size_t count, float *dst) {
    return state_copy(opt, which, offset, count, dst, ZOE_F32, 0);
}

zoe_status zoe_optimizer_write_state(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                     size_t count, const float *src) {
    return state_copy(opt, which, offset, count, (void *)src, ZOE_F32, 1);
}

zoe_status zoe_optimizer_read_state_as(zoe_optimizer *opt, zoe_optimizer_state which, size_t offset,
                                       size_t count, zoe_dtype dtype, void *dst) {
    return state_copy(opt, which, offset, count, dst, dtype, 0);
}

zoe_status zoe_optimizer_write_state_as(zoe_optimizer *opt, zoe_optimizer_state which,
                                        size_t offset, size_t count, zoe_dtype dtype,
                                        const void *src) {
    return state_copy(opt, which, offset, count, (void *)src, dtype, 1);
}

_Static_assert(ZOE_OPTIMIZER_INT8_BLOCK == ZOE_ADAM_INT8_BLOCK, "the public block is the kernels'");

/* The host part of a held copy (zoe_span_fn's ctx): buf holds codes or scales from host
 * element or block first on. */
typedef struct held_span {
    int which, scales;
    char *buf;
    size_t first;
    int write;
} held_span;

static zoe_status held_span_copy(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const held_span *sp = ctx;
    size_t unit = sp->scales ? ZOE_ADAM_INT8_BLOCK : 1, esz = sp->scales ? sizeof(float) : 1;
    size_t x0 = a / unit, x1 = (e + unit - 1) / unit; /* a bucket starts at a whole block */
    char *h = sp->scales ? (char *)zoe_host_scale_at(opt, sp->which, a)
                         : (char *)zoe_host_state_at(opt, sp->which, a);
    char *u = sp->buf + (x0 - sp->first) * esz;
    memcpy(sp->write ? h : u, sp->write ? u : h, (x1 - x0) * esz);
    return ZOE_OK;
}

/* The codes or the scales of an int8 moment moved as they are: the device share holds partition
 * elements [0, sz.h_lo) and their blocks (h_lo is whole blocks, zoe_partition_align), the host
 * arrays the rest. */
static zoe_status held_copy(zoe_optimizer *opt, zoe_optimizer_state which,
                            zoe_optimizer_held_part part, size_t offset, size_t count, char *buf,
                            int write) {
    const char *what = write ? "write_held" : "read_held";
    const int scales = part == ZOE_STATE_SCALES;
    size_t unit = scales ? ZOE_ADAM_INT8_BLOCK : 1, esz = scales ? sizeof(float) : 1;
    size_t limit = opt ? (opt->lay.part_numel + unit - 1) / unit : 0;
    ZOE_TRY(state_access_check(opt, which, what, offset, count, limit, buf));
    if (zoe_optimizer_state_dtype(opt, which) != ZOE_I8)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: the state is held in %s, not int8", what,
                        zoe_dtype_name(zoe_optimizer_state_dtype(opt, which)));
    size_t pd = opt->sz.h_lo / unit, end = offset + count;
    if (offset < pd) {
        void *dev_arrays[] = {NULL, scales ? (void *)opt->d_m_scale : opt->d_m,
                              scales ? (void *)opt->d_v_scale : opt->d_v};
        char *dev = (char *)dev_arrays[which] + offset * esz;
        size_t bytes = (zoe_min_size(end, pd) - offset) * esz;
        ZOE_TRY(zoe_memcpy_async(write ? dev : buf, write ? buf : dev, bytes,
                                 write ? ZOE_COPY_HOST_TO_DEVICE : ZOE_COPY_DEVICE_TO_HOST,
                                 opt->update_stream));
        ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    }
    if (end <= pd) return ZOE_OK;
    size_t a = offset > pd ? offset : pd;
    held_span span = {.which = (int)which,
                      .scales = scales,
                      .buf = buf + (a - offset) * esz,
                      .first = a - pd,
                      .write = write};
    /* in elements of the host arrays: a block's scale goes with its elements */
    return zoe_state_paged(opt, (a - pd) * unit, zoe_min_size((end - pd) * unit, opt->sz.h_numel),
                           write, held_span_copy, &span);
}

zoe_status zoe_optimizer_read_held(zoe_optimizer *opt, zoe_optimizer_state which,
                                   zoe_optimizer_held_part part, size_t offset, size_t count,
                                   void *dst) {
    return held_copy(opt, which, part, offset, count, dst, 0);
}

zoe_status zoe_optimizer_write_held(zoe_optimizer *opt, zoe_optimizer_state which,
                                    zoe_optimizer_held_part part, size_t offset, size_t count,
                                    const void *src) {
    return held_copy(opt, which, part, offset, count, (void *)src, 1);
}

zoe_dtype zoe_optimizer_state_dtype(const zoe_optimizer *opt, zoe_optimizer_state which) {
    if (!opt) return ZOE_F32;
    return which == ZOE_STATE_MASTER    ? opt->sz.host_dtypes.master
           : which == ZOE_STATE_EXP_AVG ? opt->sz.host_dtypes.exp_avg
                                        : opt->sz.host_dtypes.exp_avg_sq;
}
