/* The memory layout as a pure function of the configuration, the counted allocations that
 * follow it, and the footprint queries (docs/offload.md, "Memory layout"). */
#include <stdlib.h>
#include "offload/optimizer_impl.h"
#include "runtime/error.h"
#include "runtime/host_array.h"

void zoe_state_sizes_of(zoe_backend backend, zoe_dtype dtype, const zoe_layout *lay, int dp_size,
                        const zoe_optimizer_config *cfg, zoe_state_sizes *out) {
    /* The exact schedule's update is never in flight past its step: the layout of no DPU. */
    int cpu = backend == ZOE_BACKEND_CPU,
        dpu = cfg->dpu_warmup > 0 && cfg->dpu_schedule != ZOE_DPU_EXACT;
    /* Streamed weights: the host partition is the parameter buffer and the host step writes
     * there, as on the CPU backend: no partition buffer, no copy-out ring, a plain snapshot. */
    int streamed = cfg->params_on_host;
    size_t part = lay->part_numel, pd = lay->device_numel;
    zoe_state_sizes z = {0};
    z.host_dtypes = (zoe_adam_state_dtypes){.master = cfg->main_params_dtype,
                                            .exp_avg = cfg->exp_avg_dtype,
                                            .exp_avg_sq = cfg->exp_avg_sq_dtype};
    z.compressed = cfg->main_params_dtype != ZOE_F32 || cfg->exp_avg_dtype != ZOE_F32 ||
                   cfg->exp_avg_sq_dtype != ZOE_F32;
    /* The weight prediction leaves its prediction, not the master, in the parameters; an fp32
     * master only; and a stale update with compressed state writes its weights over the snapshot
     * (the compressed step updates its master in place, never into a second array). */
    z.master_in_params = cpu && dtype == ZOE_F32 && cfg->main_params_dtype == ZOE_F32 &&
                         !(dpu && (cfg->dpu_schedule == ZOE_DPU_PREDICT || z.compressed));
    z.dpu_swap = dpu && z.master_in_params;
    z.dpu_snapshot = dpu && !z.dpu_swap;
    z.h_lo = cpu ? 0 : pd;
    z.h_numel = part - z.h_lo;
    z.h_master = z.h_numel && !z.master_in_params;
    z.h_blocks = zoe_adam_int8_blocks(z.h_numel);
    z.h_grads = !z.h_numel ? 0 : z.dpu_swap ? 2 : 1;
    z.grad_dtype = cfg->main_grads_dtype == ZOE_F32 ? ZOE_F32 : dtype;
    z.snap = z.dpu_snapshot ? z.h_numel : 0;
    /* A bf16 master computing in fp16 serves too: its values convert to fp16 exactly (in fp16's
     * range; kernels/adam_state.h) where the weight stream lands them on the device. */
    z.params_are_master = streamed && (dtype == ZOE_BF16 || dtype == ZOE_F16) &&
                          cfg->main_params_dtype == ZOE_BF16 && !dpu && z.h_master;
    z.drive = cfg->state_paths && cfg->state_paths[0] && z.h_numel;
    z.weights_on_drive = z.drive && streamed && cfg->params_on_drive;
    z.weights_esize = z.weights_on_drive && !z.params_are_master ? zoe_dtype_size(dtype) : 0;
    if (z.drive) {
        z.drive_grads = cfg->grads_on_drives;
        /* one micro-batch a step reads nothing back: no slot to read ahead into */
        z.drive_stage_slots = cfg->micro_batches == 1 ? ZOE_GRAD_STAGE_SLOTS - ZOE_GRAD_STAGE_AHEAD
                                                      : ZOE_GRAD_STAGE_SLOTS;
        z.drive_ahead = cfg->state_ahead > 0 ? cfg->state_ahead : ZOE_STATE_AHEAD_DEFAULT;
        zoe_state_drive_sizes(&z, lay);
    }
    z.params = streamed ? 0 : lay->flat_numel;
    z.host_params = streamed && !z.params_are_master && !z.weights_on_drive ? part : 0;
    z.part_out = !cpu && !streamed && (dpu || pd) ? part : 0;
    z.d_state = cpu ? 0 : pd;
    z.d_grads = !z.d_state ? 0 : dpu ? 2 : 1;
    /* The host step's new weights reach the device through a pinned ring of whole tiles: the
     * DPU snapshot (a whole copy of the host share) stays pageable, as on the CPU backend. */
    if (!cpu && !streamed && z.h_numel) {
        size_t tiles = (cfg->copy_out_numel + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE;
        z.out_ring = zoe_min_size(z.h_numel, tiles * ZOE_ADAM_TILE); /* blocks of whole tiles */
        z.out_slots = 2;
    }
    if (cfg->grad_mode == ZOE_GRAD_FULL_BUFFER) {
        z.full_grad = lay->flat_numel;
        z.full_pinned = cpu ? 0 : z.h_numel; /* the CPU backend reads the buffer in place */
    } else if (cfg->bucket_ring_window > 0) {
        z.slots = lay->num_buckets;
        z.ring_device = zoe_layout_ring_places(lay, dp_size, cfg->bucket_ring_window, NULL);
        z.ring_pinned = cpu ? 0 : z.ring_device / (size_t)dp_size;
    } else {
        /* a slot beyond the number of buckets would never hold one */
        z.slots = cfg->bucket_ring < lay->num_buckets ? cfg->bucket_ring : lay->num_buckets;
        z.slot_device = (size_t)dp_size * lay->max_part;
        z.slot_pinned = cpu ? 0 : lay->max_part; /* the CPU backend reads buckets in place */
    }
    *out = z;
}

void zoe_state_sizes_bytes(const zoe_state_sizes *z, const zoe_layout *lay, zoe_dtype dtype,
                           zoe_optimizer_footprint *out) {
    size_t esz = zoe_dtype_size(dtype), f = sizeof(float), gsz = zoe_dtype_size(z->grad_dtype);
    size_t snap = z->snap * esz;
    size_t slots_device = ((size_t)z->slots * z->slot_device + z->ring_device) * esz;
    size_t slots_pinned = ((size_t)z->slots * z->slot_pinned + z->ring_pinned) * esz;
    size_t ring = (size_t)z->out_slots * z->out_ring * esz;
    size_t master_bytes = z->h_master ? zoe_adam_state_esize(z->host_dtypes.master) : 0;
    size_t state_bytes = zoe_adam_state_esize(z->host_dtypes.exp_avg) +
                         zoe_adam_state_esize(z->host_dtypes.exp_avg_sq) + master_bytes;
    /* the master that is the streamed weights is pinned, not plain host memory */
    size_t pinned_master =
        z->params_are_master && !z->weights_on_drive ? z->h_numel * master_bytes : 0;
    size_t int8_moments =
        (z->host_dtypes.exp_avg == ZOE_I8) + (z->host_dtypes.exp_avg_sq == ZOE_I8);
    size_t scales = int8_moments * z->h_blocks * f;
    /* The device share holds the host's dtypes, its int8 scales by blocks from its element 0. */
    size_t d_state_bytes = zoe_adam_state_esize(z->host_dtypes.master) +
                           zoe_adam_state_esize(z->host_dtypes.exp_avg) +
                           zoe_adam_state_esize(z->host_dtypes.exp_avg_sq);
    size_t d_scales = int8_moments * zoe_adam_int8_blocks(z->d_state) * f;
    *out = (zoe_optimizer_footprint){
        .host_bytes = z->h_numel * (state_bytes + gsz * (size_t)z->h_grads) + scales + snap -
                      pinned_master - z->drive_paged + (size_t)z->drive_slots * z->drive_slot +
                      z->drive_stage,
        .pinned_bytes =
            slots_pinned + ring + z->full_pinned * esz + z->host_params * esz + pinned_master,
        .device_bytes = (z->params + z->part_out + z->full_grad) * esz + slots_device +
                        z->d_state * (d_state_bytes + f * (size_t)z->d_grads) + d_scales,
        .pinned_ring_bytes = slots_pinned + ring,
        .device_ring_bytes = slots_device,
        .params_numel = z->params,
        .partition_numel = lay->part_numel,
        .step_bytes_per_element = 2 * (state_bytes + (z->master_in_params ? f : 0)) + gsz +
                                  (z->master_in_params || z->params_are_master ? 0 : esz),
        /* where the master is in the parameters, the partition on the host is the master */
        .params_host_bytes = z->master_in_params ? 0 : z->host_params * esz,
        .state_bytes = z->h_numel * state_bytes + scales,
        .pinned_master_bytes = pinned_master,
        .grads_bytes = z->h_numel * gsz * (size_t)z->h_grads,
        .bucket_part_numel = lay->max_part,
        .drive_bytes = z->drive_bytes,
        .drive_ring_bytes = (size_t)z->drive_slots * z->drive_slot + z->drive_stage,
    };
}

zoe_status zoe_grads_dtype_check(const zoe_optimizer_config *cfg, zoe_backend backend,
                                 zoe_dtype dtype, const zoe_layout *lay) {
    zoe_dtype g = cfg->main_grads_dtype;
    if (g == ZOE_F32) return ZOE_OK;
    if (g != dtype || zoe_dtype_size(g) != 2)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "main_grads_dtype %s with compute dtype %s: the gradient partition is "
                        "fp32 or the compute dtype when that is bf16 or fp16",
                        zoe_dtype_name(g), zoe_dtype_name(dtype));
    if (backend == ZOE_BACKEND_CPU && lay->device_numel > 0)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "main_grads_dtype %s with partial offload %g on the CPU backend: its "
                        "device share accumulates in fp32 (not built)",
                        zoe_dtype_name(g), (double)cfg->partial_ratio);
    return ZOE_OK;
}

zoe_status zoe_state_device_alloc(zoe_optimizer *opt, size_t bytes, int ring, void **out) {
    ZOE_TRY(zoe_device_alloc_for(opt->dev, bytes,
                                 ring ? "a gradient bucket of the ring"
                                      : "the optimizer's device arrays (weights, gradients, state)",
                                 out));
    opt->mem.device_bytes += bytes;
    if (ring) opt->mem.device_ring_bytes += bytes;
    return ZOE_OK;
}

zoe_status zoe_state_pinned_alloc(zoe_optimizer *opt, size_t bytes, int ring, const char *what,
                                  void **out) {
    ZOE_TRY(zoe_host_alloc_for(opt->dev, bytes, what, out));
    opt->mem.pinned_bytes += bytes;
    if (ring) opt->mem.pinned_ring_bytes += bytes;
    return ZOE_OK;
}

void *zoe_state_host_alloc(zoe_optimizer *opt, size_t bytes) {
    /* Untouched pages: the first write, by the thread that will update them, places them. */
    void *p = zoe_host_array_alloc(bytes);
    if (p) opt->mem.host_bytes += bytes;
    return p;
}

zoe_status zoe_optimizer_memory(const zoe_optimizer *opt, zoe_optimizer_footprint *out) {
    if (!opt || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "optimizer memory: NULL argument");
    *out = opt->mem;
    out->params_numel = opt->sz.params;
    out->partition_numel = opt->lay.part_numel;
    zoe_optimizer_footprint sized;
    zoe_state_sizes_bytes(&opt->sz, &opt->lay, opt->dtype, &sized);
    out->step_bytes_per_element = sized.step_bytes_per_element;
    out->params_host_bytes = sized.params_host_bytes;
    out->state_bytes = sized.state_bytes;
    out->pinned_master_bytes = sized.pinned_master_bytes;
    out->grads_bytes = sized.grads_bytes;
    out->bucket_part_numel = sized.bucket_part_numel;
    return ZOE_OK;
}

zoe_status zoe_optimizer_footprint_of(const zoe_optimizer_footprint_args *args,
                                      zoe_optimizer_footprint *out) {
    if (!args || !out || !args->config)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "optimizer footprint: NULL argument");
    zoe_dtype dt = args->compute_dtype;
    if (dt != ZOE_F32 && dt != ZOE_BF16 && dt != ZOE_F16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "compute dtype %s is not fp32, bf16 or fp16",
                        zoe_dtype_name(dt));
    if (args->backend != ZOE_BACKEND_CPU && args->backend != ZOE_BACKEND_CUDA)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)args->backend);
    if (args->dp_size < 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dp_size %d must be >= 1", args->dp_size);
    if (args->num_tensors <= 0 || !args->numel)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "footprint of %d tensors (numel %s)",
                        args->num_tensors, args->numel ? "given" : "NULL");
    ZOE_TRY(zoe_config_check(args->config));
    zoe_param_tensor *tensors = calloc((size_t)args->num_tensors, sizeof *tensors);
    if (!tensors) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor list of %d", args->num_tensors);
    for (int t = 0; t < args->num_tensors; t++) {
        tensors[t] = (zoe_param_tensor){.name = "", .numel = args->numel[t]};
        if (args->numel[t] == 0) {
            free(tensors);
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tensor %d has numel 0", t);
        }
    }
    zoe_layout lay;
    size_t align = zoe_partition_align(args->config, dt);
    zoe_status st = zoe_layout_build(&lay, tensors, args->num_tensors, args->config->bucket_numel,
                                     args->dp_size, 0, align, zoe_tensor_align(args->config), 1,
                                     args->config->partial_ratio);
    free(tensors);
    ZOE_TRY(st);
    st = zoe_grads_dtype_check(args->config, args->backend, dt, &lay);
    if (st != ZOE_OK) {
        zoe_layout_free(&lay);
        return st;
    }
    zoe_state_sizes z;
    zoe_state_sizes_of(args->backend, dt, &lay, args->dp_size, args->config, &z);
    zoe_state_sizes_bytes(&z, &lay, dt, out);
    zoe_layout_free(&lay);
    return ZOE_OK;
}
