/* The host-side state and the step: global norm, loss scaling, the fused Adam over the
 * partition (device part and host part), the refresh, and the DPU worker thread. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/device_impl.h"
#include "runtime/clock.h"
#include "runtime/error.h"

static float *host_array(size_t n) {
    /* Untouched pages: the first write, by the thread that will update them, places them. */
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static size_t min_size(size_t a, size_t b) {
    return a < b ? a : b;
}

/* First touch of every host array, chunk by chunk, with the schedule of host_update(). */
static void first_touch(zoe_optimizer *opt) {
    size_t n = opt->host_numel;
#pragma omp parallel for schedule(static)
    for (long ch = 0; ch < (long)opt->num_chunks; ch++) {
        size_t lo = (size_t)ch * ZOE_ADAM_TILE, len = min_size(lo + ZOE_ADAM_TILE, n) - lo;
        memset(opt->h_master + lo, 0, len * sizeof(float));
        memset(opt->h_m + lo, 0, len * sizeof(float));
        memset(opt->h_v + lo, 0, len * sizeof(float));
        for (int b = 0; b < 2; b++)
            if (opt->h_grad[b]) memset(opt->h_grad[b] + lo, 0, len * sizeof(float));
        memset((char *)opt->h_out + lo * opt->esz, 0, len * opt->esz);
    }
}

/* With one DP rank and no delayed update, the rank's partition has the parameter buffer's
 * layout and nothing reads the parameters while the step writes them: the update then writes
 * the new weights in place and the refresh (an all-gather over one rank) has nothing to move.
 * Under DPU the next iteration reads the parameters while the update runs, so it keeps its own
 * partition buffer. */
static int partition_is_params(const zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    if (opt->dp_size != 1 || opt->cfg.dpu_warmup > 0 || lay->part_numel != lay->flat_numel)
        return 0;
    for (int b = 0; b < lay->num_buckets; b++)
        if (lay->buckets[b].part_offset != lay->buckets[b].flat_offset) return 0;
    return 1;
}

zoe_status zoe_state_create(zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    int buffers = opt->cfg.dpu_warmup > 0 ? 2 : 1;
    size_t pd = lay->device_numel, ph = opt->host_numel;
    ZOE_TRY(zoe_device_alloc(opt->dev, lay->flat_numel * opt->esz, &opt->params));
    ZOE_TRY(zoe_memset_async(opt->params, 0, lay->flat_numel * opt->esz, opt->stream));
    if (partition_is_params(opt)) {
        opt->part_out = opt->params;
    } else {
        ZOE_TRY(zoe_device_alloc(opt->dev, lay->part_numel * opt->esz, &opt->part_out));
        ZOE_TRY(zoe_memset_async(opt->part_out, 0, lay->part_numel * opt->esz, opt->stream));
    }
    if (pd) {
        float **dev_arrays[] = {&opt->d_master, &opt->d_m, &opt->d_v, &opt->d_grad[0],
                                buffers > 1 ? &opt->d_grad[1] : NULL};
        for (int i = 0; i < 5 && dev_arrays[i]; i++) {
            ZOE_TRY(zoe_device_alloc(opt->dev, pd * sizeof(float), (void **)dev_arrays[i]));
            ZOE_TRY(zoe_memset_async(*dev_arrays[i], 0, pd * sizeof(float), opt->stream));
        }
    }
    if (ph) {
        opt->h_master = host_array(ph), opt->h_m = host_array(ph), opt->h_v = host_array(ph);
        opt->h_grad[0] = host_array(ph);
        if (buffers > 1) opt->h_grad[1] = host_array(ph);
        if (!opt->h_master || !opt->h_m || !opt->h_v || !opt->h_grad[0] ||
            (buffers > 1 && !opt->h_grad[1]))
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host optimizer state of %zu elements", ph);
        if (zoe_device_is_host_memory(opt))
            opt->h_out = (char *)opt->part_out + pd * opt->esz; /* copies to it become no-ops */
        else
            ZOE_TRY(zoe_host_alloc(opt->dev, ph * opt->esz, &opt->h_out));
    }
    /* The tiling of the host step, and the first host segment reaching into each tile. */
    opt->num_chunks = (ph + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE;
    opt->chunk_segment = calloc(opt->num_chunks + 1, sizeof(int));
    if (!opt->chunk_segment) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "chunk table");
    int s = lay->num_device_segments;
    for (size_t ch = 0; ch < opt->num_chunks; ch++) {
        size_t lo = ch * ZOE_ADAM_TILE;
        while (s < lay->num_segments && lay->segments[s].offset + lay->segments[s].len - pd <= lo)
            s++;
        opt->chunk_segment[ch] = s;
    }
    if (ph) first_touch(opt);
    return zoe_stream_synchronize(opt->stream);
}

void zoe_state_destroy(zoe_optimizer *opt) {
    zoe_device_free(opt->dev, opt->params);
    if (opt->part_out != opt->params) zoe_device_free(opt->dev, opt->part_out);
    zoe_device_free(opt->dev, opt->d_master);
    zoe_device_free(opt->dev, opt->d_m);
    zoe_device_free(opt->dev, opt->d_v);
    zoe_device_free(opt->dev, opt->d_grad[0]);
    zoe_device_free(opt->dev, opt->d_grad[1]);
    free(opt->h_master), free(opt->h_m), free(opt->h_v), free(opt->h_grad[0]);
    free(opt->h_grad[1]);
    if (!zoe_device_is_host_memory(opt)) zoe_host_free(opt->dev, opt->h_out);
    free(opt->chunk_segment);
}

/* The host part of the update: OpenMP over tiles, each thread on the tiles it first-touched. */
static zoe_status host_update(zoe_optimizer *opt, const zoe_step_consts *c, int buf) {
    const zoe_layout *lay = &opt->lay;
    size_t pd = lay->device_numel, n = opt->host_numel;
    const float *grad = opt->h_grad[buf];
    int failed = 0;
#pragma omp parallel for schedule(static) reduction(| : failed)
    for (long ch = 0; ch < (long)opt->num_chunks; ch++) {
        size_t lo = (size_t)ch * ZOE_ADAM_TILE, hi = min_size(lo + ZOE_ADAM_TILE, n);
        for (int s = opt->chunk_segment[ch]; s < lay->num_segments; s++) {
            size_t a = lay->segments[s].offset - pd, e = a + lay->segments[s].len;
            if (a >= hi) break;
            a = a < lo ? lo : a, e = e > hi ? hi : e;
            failed |= zoe_adam_host(zoe_segment_consts(c, &lay->segments[s]), opt->h_master + a,
                                    opt->h_m + a, opt->h_v + a, grad + a, ZOE_F32,
                                    (char *)opt->h_out + a * opt->esz, opt->dtype, e - a) != ZOE_OK;
        }
    }
    if (failed) return zoe_fail(ZOE_ERR_INTERNAL, "host Adam failed on a tile");
    return ZOE_OK;
}

/* One update: device part on the update stream, host part on the host threads, the host
 * part's new weights copied into the device partition buffer; returns when all is done. */
static zoe_status run_update(zoe_optimizer *opt, const zoe_step_consts *c, int buf) {
    const zoe_layout *lay = &opt->lay;
    double t0 = zoe_clock_ms();
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->grads_reduced));
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->refreshed));
    for (int s = 0; s < lay->num_device_segments; s++) {
        size_t a = lay->segments[s].offset, n = lay->segments[s].len;
        ZOE_TRY(zoe_adam_stream(opt->update_stream, zoe_segment_consts(c, &lay->segments[s]),
                                opt->d_master + a, opt->d_m + a, opt->d_v + a, opt->d_grad[buf] + a,
                                (char *)opt->part_out + a * opt->esz, opt->dtype, n));
    }
    if (opt->host_numel) {
        ZOE_TRY(host_update(opt, c, buf));
        ZOE_TRY(zoe_memcpy_async((char *)opt->part_out + lay->device_numel * opt->esz, opt->h_out,
                                 opt->host_numel * opt->esz, ZOE_COPY_HOST_TO_DEVICE,
                                 opt->update_stream));
    }
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    opt->stats.ms_update = zoe_clock_ms() - t0;
    return ZOE_OK;
}

/* The refresh: every rank's updated partition of every bucket, all-gathered over DP into the
 * parameter buffer, on the compute stream. */
static zoe_status refresh(zoe_optimizer *opt) {
    double t0 = zoe_clock_ms();
    for (int b = 0; b < opt->lay.num_buckets; b++) {
        const zoe_bucket *bk = &opt->lay.buckets[b];
        ZOE_TRY(zoe_comm_all_gather(opt->dp, (char *)opt->part_out + bk->part_offset * opt->esz,
                                    (char *)opt->params + bk->flat_offset * opt->esz, bk->part,
                                    opt->dtype, opt->stream));
    }
    opt->stats.ms_refresh = zoe_clock_ms() - t0;
    return zoe_event_record(opt->refreshed, opt->stream);
}

static void *update_worker(void *arg) {
    zoe_optimizer *opt = arg;
    opt->flight_status = ZOE_OK;
#ifdef ZOE_HAVE_CUDA
    /* The current GPU is per thread: this one starts on GPU 0. */
    if (zoe_device_backend(opt->dev) == ZOE_BACKEND_CUDA)
        opt->flight_status = zoe_cuda_set_device(zoe_device_ordinal(opt->dev));
#endif
    if (opt->flight_status == ZOE_OK)
        opt->flight_status = run_update(opt, &opt->flight_consts, opt->flight_buf);
    if (opt->flight_status != ZOE_OK)
        snprintf(opt->flight_error, sizeof opt->flight_error, "%s", zoe_last_error());
    return NULL;
}

static zoe_status join_update(zoe_optimizer *opt) {
    if (!opt->in_flight) return ZOE_OK;
    pthread_join(opt->worker, NULL);
    opt->in_flight = 0;
    if (opt->flight_status != ZOE_OK)
        return zoe_fail(opt->flight_status, "delayed update failed: %s", opt->flight_error);
    return ZOE_OK;
}

zoe_status zoe_update_wait(zoe_optimizer *opt) {
    opt->stats.ms_wait = 0;
    if (!opt->in_flight && !opt->refresh_due) return ZOE_OK;
    double t0 = zoe_clock_ms();
    ZOE_TRY(join_update(opt));
    opt->stats.ms_wait = zoe_clock_ms() - t0;
    opt->refresh_due = 0;
    return refresh(opt);
}

zoe_status zoe_optimizer_settle(zoe_optimizer *opt, int *refresh_due) {
    if (!opt || !refresh_due) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "settle: NULL argument");
    if (opt->in_flight) {
        ZOE_TRY(join_update(opt));
        opt->refresh_due = 1;
    }
    *refresh_due = opt->refresh_due;
    return ZOE_OK;
}

zoe_status zoe_optimizer_defer_refresh(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "defer_refresh: optimizer is NULL");
    ZOE_TRY(join_update(opt));
    opt->refresh_due = 1;
    return ZOE_OK;
}

/* This rank's counted sum of squares, summed over the whole grid (DP partitions and TP
 * shards; TP-replicated tensors were counted on tp_rank 0 only). */
static zoe_status global_sumsq(zoe_optimizer *opt, int buf, double *out) {
    double local = opt->host_sumsq;
    const zoe_layout *lay = &opt->lay;
    for (int s = 0; s < lay->num_device_segments; s++)
        if (lay->segments[s].counted)
            ZOE_TRY(zoe_sumsq_stream(opt->copy_stream, opt->d_grad[buf] + lay->segments[s].offset,
                                     lay->segments[s].len, &local));
    if (MPI_Allreduce(&local, out, 1, MPI_DOUBLE, MPI_SUM, zoe_grid_world_comm(opt->grid)) !=
        MPI_SUCCESS)
        return zoe_fail(ZOE_ERR_MPI, "MPI_Allreduce of the gradient norm failed");
    return ZOE_OK;
}

/* Loss-scale bookkeeping after a step (overflow: halve, else double after a clean window). */
static void update_loss_scale(zoe_optimizer *opt, int overflow) {
    if (!opt->cfg.dynamic_loss_scale) return;
    if (overflow) {
        opt->loss_scale = fmaxf(opt->loss_scale * 0.5f, opt->cfg.min_loss_scale);
        opt->clean_steps = 0;
    } else if (++opt->clean_steps >= opt->cfg.loss_scale_window) {
        opt->loss_scale *= 2.0f;
        opt->clean_steps = 0;
    }
}

zoe_status zoe_optimizer_step(zoe_optimizer *opt, float lr) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "step: optimizer is NULL");
    if (!(lr >= 0.0f) || !isfinite(lr))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "step: learning rate %g is not a finite value >= 0", (double)lr);
    if (opt->in_micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "step inside a micro-batch: end it first");
    if (opt->micro_batches == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "step without gradients: no micro-batch ended");
    if (opt->cfg.grad_mode == ZOE_GRAD_FULL_BUFFER) ZOE_TRY(zoe_grads_reduce_full(opt));
    int buf = opt->grad_buf, k = opt->micro_batches;
    double sumsq = 0;
    ZOE_TRY(global_sumsq(opt, buf, &sumsq));
    ZOE_TRY(zoe_event_record(opt->grads_reduced, opt->copy_stream));
    opt->micro_batches = 0;
    opt->iteration++;
    /* The previous update (DPU) lands before anything writes the partition buffer again. */
    ZOE_TRY(zoe_update_wait(opt));

    zoe_optimizer_stats *st = &opt->stats;
    double unscale = 1.0 / ((double)k * opt->loss_scale);
    st->grad_norm = sqrt(sumsq) * unscale;
    int overflow = !isfinite(sumsq);
    update_loss_scale(opt, overflow);
    if (overflow) {
        st->skipped = 1, st->skipped_total++, st->clip_coef = 0;
        st->loss_scale = opt->loss_scale;
        zoe_log(ZOE_LOG_INFO, "step skipped: non-finite gradient; loss scale now %g",
                (double)opt->loss_scale);
        return ZOE_OK;
    }
    st->clip_coef = 1.0;
    if (opt->cfg.clip_norm > 0 && st->grad_norm > opt->cfg.clip_norm)
        st->clip_coef = opt->cfg.clip_norm / (st->grad_norm + 1e-6);
    st->skipped = 0;
    st->step++;
    st->loss_scale = opt->loss_scale;
    zoe_adam_hparams h = {.lr = lr,
                          .beta1 = opt->cfg.beta1,
                          .beta2 = opt->cfg.beta2,
                          .eps = opt->cfg.eps,
                          .weight_decay = opt->cfg.weight_decay,
                          .decoupled = opt->cfg.adamw,
                          .grad_scale = (float)(st->clip_coef * unscale),
                          .step = st->step};
    zoe_step_consts c;
    zoe_adam_consts_init(&c.decayed, &h);
    h.weight_decay = 0;
    zoe_adam_consts_init(&c.exempt, &h);
    if (opt->cfg.dpu_warmup > 0 && opt->iteration > opt->cfg.dpu_warmup) {
        opt->flight_consts = c;
        opt->flight_buf = buf;
        if (pthread_create(&opt->worker, NULL, update_worker, opt) != 0)
            return zoe_fail(ZOE_ERR_INTERNAL, "could not start the delayed-update thread");
        opt->in_flight = 1;
        opt->grad_buf ^= 1; /* the next iteration's gradients go to the other partition */
        return ZOE_OK;
    }
    ZOE_TRY(run_update(opt, &c, buf));
    return refresh(opt);
}

zoe_status zoe_optimizer_flush(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "flush: optimizer is NULL");
    return zoe_update_wait(opt);
}

zoe_status zoe_optimizer_init_from_params(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "init_from_params: optimizer is NULL");
    ZOE_TRY(join_update(opt));
    const zoe_layout *lay = &opt->lay;
    size_t pd = lay->device_numel;
    ZOE_TRY(zoe_event_record(opt->grads_written, opt->stream));
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->grads_written));
    for (int b = 0; b < lay->num_buckets; b++) {
        const zoe_bucket *bk = &lay->buckets[b];
        const char *mine = (const char *)opt->params +
                           (bk->flat_offset + (size_t)opt->dp_rank * bk->part) * opt->esz;
        size_t lo, mid, hi;
        zoe_bucket_split(lay, b, &lo, &mid, &hi);
        if (mid > lo)
            ZOE_TRY(zoe_convert_stream(opt->update_stream, opt->d_master + lo, ZOE_F32, mine,
                                       opt->dtype, mid - lo));
        if (hi > mid)
            ZOE_TRY(zoe_memcpy_async((char *)opt->h_out + (mid - pd) * opt->esz,
                                     mine + (mid - lo) * opt->esz, (hi - mid) * opt->esz,
                                     ZOE_COPY_DEVICE_TO_HOST, opt->update_stream));
    }
    if (pd) {
        ZOE_TRY(zoe_memset_async(opt->d_m, 0, pd * sizeof(float), opt->update_stream));
        ZOE_TRY(zoe_memset_async(opt->d_v, 0, pd * sizeof(float), opt->update_stream));
    }
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    if (opt->host_numel) {
        ZOE_TRY(zoe_convert(opt->h_master, ZOE_F32, opt->h_out, opt->dtype, opt->host_numel));
        memset(opt->h_m, 0, opt->host_numel * sizeof(float));
        memset(opt->h_v, 0, opt->host_numel * sizeof(float));
    }
    opt->iteration = 0;
    opt->refresh_due = 0;
    opt->micro_batches = 0;
    opt->grad_buf = 0;
    opt->loss_scale = opt->cfg.loss_scale;
    opt->clean_steps = 0;
    memset(&opt->stats, 0, sizeof opt->stats);
    opt->stats.loss_scale = opt->loss_scale;
    opt->stats.clip_coef = 1.0;
    return ZOE_OK;
}

zoe_status zoe_optimizer_refresh_params(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "refresh_params: optimizer is NULL");
    ZOE_TRY(join_update(opt));
    opt->refresh_due = 0;
    size_t pd = opt->lay.device_numel;
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->refreshed));
    if (pd)
        ZOE_TRY(zoe_convert_stream(opt->update_stream, opt->part_out, opt->dtype, opt->d_master,
                                   ZOE_F32, pd));
    if (opt->host_numel) {
        ZOE_TRY(zoe_convert(opt->h_out, opt->dtype, opt->h_master, ZOE_F32, opt->host_numel));
        ZOE_TRY(zoe_memcpy_async((char *)opt->part_out + pd * opt->esz, opt->h_out,
                                 opt->host_numel * opt->esz, ZOE_COPY_HOST_TO_DEVICE,
                                 opt->update_stream));
    }
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    return refresh(opt);
}
