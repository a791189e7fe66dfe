/* The state arrays of the memory layout (zoe_state_sizes in optimizer_impl.h): allocation and
 * first touch, the copies between the partition and the device, and the master weights
 * initialised from the parameters and copied back to them.
 *
 * Explained in docs/offload.md, "Memory layout" and "Compressed state". */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/error.h"

size_t zoe_host_block(const zoe_optimizer *opt) {
    return opt->sz.out_ring ? opt->sz.out_ring : opt->sz.h_numel;
}

/* Moments of host coordinates [a, e) := 0, their int8 scales too (a zero block reads zero; a
 * bucket starts at a block boundary). */
static zoe_status clear_moments(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    (void)ctx;
    const zoe_adam_state_dtypes *dt = &opt->sz.host_dtypes;
    memset(zoe_host_state_at(opt, 1, a), 0, (e - a) * zoe_adam_state_esize(dt->exp_avg));
    memset(zoe_host_state_at(opt, 2, a), 0, (e - a) * zoe_adam_state_esize(dt->exp_avg_sq));
    size_t blocks = zoe_adam_int8_blocks(e - a) * sizeof(float);
    if (opt->h_m_scale) memset(zoe_host_scale_at(opt, 1, a), 0, blocks);
    if (opt->h_v_scale) memset(zoe_host_scale_at(opt, 2, a), 0, blocks);
    return ZOE_OK;
}

/* First touch of every host array, block by block and tile by tile, with the schedule of the
 * host step (step.c). */
static void first_touch(zoe_optimizer *opt) {
    size_t n = opt->sz.h_numel, block = zoe_host_block(opt);
    const zoe_adam_state_dtypes *dt = &opt->sz.host_dtypes;
    void *arrays[] = {opt->h_master, opt->h_m, opt->h_v, opt->h_grad[0],
                      opt->h_grad[1] != opt->h_grad[0] ? opt->h_grad[1] : NULL};
    size_t gsz = zoe_dtype_size(opt->sz.grad_dtype);
    size_t esizes[] = {zoe_adam_state_esize(dt->master), zoe_adam_state_esize(dt->exp_avg),
                       zoe_adam_state_esize(dt->exp_avg_sq), gsz, gsz};
    void *snap = opt->h_snap;
    for (size_t b0 = 0; b0 < n; b0 += block) {
        long first = (long)(b0 / ZOE_ADAM_TILE);
        long last = (long)((zoe_min_size(b0 + block, n) + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE);
#pragma omp parallel for schedule(static)
        for (long ch = first; ch < last; ch++) {
            size_t lo = (size_t)ch * ZOE_ADAM_TILE, len = zoe_min_size(lo + ZOE_ADAM_TILE, n) - lo;
            for (int a = 0; a < 5; a++)
                if (arrays[a]) memset((char *)arrays[a] + lo * esizes[a], 0, len * esizes[a]);
            if (snap) memset((char *)snap + lo * opt->esz, 0, len * opt->esz);
        }
    }
    if (!opt->drive) clear_moments(opt, 0, n, NULL); /* the drive's buckets read as zeros */
}

zoe_status zoe_host_state_read(const zoe_optimizer *opt, int which, size_t h, size_t n,
                               float *dst) {
    zoe_dtype dt = zoe_optimizer_state_dtype(opt, (zoe_optimizer_state)which);
    size_t lo = opt->win_lo[which]; /* element 0 of the array (a bucket's, on drives) */
    return zoe_adam_moment_to_f32(dt, which == 2, zoe_host_state_at(opt, which, lo),
                                  zoe_host_scale_at(opt, which, lo), h - lo, n, dst);
}

static zoe_status device_array(zoe_optimizer *opt, size_t bytes, int ring, void **out) {
    ZOE_TRY(zoe_state_device_alloc(opt, bytes, ring, out));
    return zoe_memset_async(*out, 0, bytes, opt->stream);
}

static zoe_status host_arrays(zoe_optimizer *opt) {
    const zoe_state_sizes *z = &opt->sz;
    size_t n = z->h_numel, bytes = n * zoe_dtype_size(z->grad_dtype);
    opt->h_grad[0] = zoe_state_host_alloc(opt, bytes);
    opt->h_grad[1] = z->h_grads > 1 ? zoe_state_host_alloc(opt, bytes) : opt->h_grad[0];
    size_t master_bytes = n * zoe_adam_state_esize(z->host_dtypes.master);
    if (z->params_are_master && !z->weights_on_drive) /* the streamed weights: pinned, for the
                                                       * copies to the device */
        ZOE_TRY(zoe_state_pinned_alloc(opt, master_bytes, 0, "the master weights", &opt->h_master));
    if (!opt->h_grad[0] || !opt->h_grad[1])
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host gradient partition of %zu elements", n);
    if (z->drive) { /* the rest of the state: on the drives, shown a bucket at a time */
        ZOE_TRY(zoe_state_drive_create(opt));
    } else {
        opt->h_m = zoe_state_host_alloc(opt, n * zoe_adam_state_esize(z->host_dtypes.exp_avg));
        opt->h_v = zoe_state_host_alloc(opt, n * zoe_adam_state_esize(z->host_dtypes.exp_avg_sq));
        if (z->h_master && !z->params_are_master)
            opt->h_master = zoe_state_host_alloc(opt, master_bytes);
        int m_int8 = z->host_dtypes.exp_avg == ZOE_I8, v_int8 = z->host_dtypes.exp_avg_sq == ZOE_I8;
        if (m_int8) opt->h_m_scale = zoe_state_host_alloc(opt, z->h_blocks * sizeof(float));
        if (v_int8) opt->h_v_scale = zoe_state_host_alloc(opt, z->h_blocks * sizeof(float));
        if (!opt->h_m || !opt->h_v || (z->h_master && !opt->h_master) ||
            (m_int8 && !opt->h_m_scale) || (v_int8 && !opt->h_v_scale))
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host optimizer state of %zu elements",
                            z->h_numel);
    }
    if (z->snap && !(opt->h_snap = zoe_state_host_alloc(opt, z->snap * opt->esz)))
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "gradient snapshot of %zu elements", z->snap);
    for (int s = 0; s < z->out_slots; s++) {
        ZOE_TRY(zoe_state_pinned_alloc(opt, z->out_ring * opt->esz, 1, "a copy-out ring slot",
                                       &opt->out_ring[s]));
        ZOE_TRY(zoe_event_create(opt->dev, &opt->out_done[s]));
    }
    return ZOE_OK;
}

/* The device segments as the kernels' run table: the device step is then one launch. */
static zoe_status create_device_table(zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    int n = lay->num_device_segments;
    zoe_adam_run *runs = calloc(n ? (size_t)n : 1, sizeof *runs);
    if (!runs) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "device run table of %d", n);
    for (int s = 0; s < n; s++)
        runs[s] = (zoe_adam_run){.offset = lay->segments[s].offset,
                                 .len = lay->segments[s].len,
                                 .no_decay = lay->segments[s].no_decay,
                                 .counted = lay->segments[s].counted};
    zoe_status st = zoe_adam_table_create(opt->stream, runs, n, &opt->device_table);
    free(runs);
    return st;
}

zoe_status zoe_state_create(zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    const zoe_state_sizes *z = &opt->sz;
    if (z->host_params) {
        ZOE_TRY(zoe_state_pinned_alloc(opt, z->host_params * opt->esz, 0, "the streamed weights",
                                       &opt->params));
        memset(opt->params, 0, z->host_params * opt->esz);
    } else if (!z->params_are_master && !z->weights_on_drive) { /* else the master is the
                                                                 * parameter buffer, below, or
                                                                 * the drive's pages show it */
        ZOE_TRY(device_array(opt, z->params * opt->esz, 0, &opt->params));
    }
    if (z->part_out) ZOE_TRY(device_array(opt, z->part_out * opt->esz, 0, &opt->part_out));
    if (z->d_state) { /* the device share, in the host's dtypes */
        const zoe_adam_state_dtypes *dt = &z->host_dtypes;
        void **state[] = {&opt->d_master, &opt->d_m, &opt->d_v};
        const zoe_dtype dts[] = {dt->master, dt->exp_avg, dt->exp_avg_sq};
        for (int i = 0; i < 3; i++)
            ZOE_TRY(device_array(opt, z->d_state * zoe_adam_state_esize(dts[i]), 0, state[i]));
        size_t scales = zoe_adam_int8_blocks(z->d_state) * sizeof(float);
        if (dt->exp_avg == ZOE_I8) ZOE_TRY(device_array(opt, scales, 0, (void **)&opt->d_m_scale));
        if (dt->exp_avg_sq == ZOE_I8)
            ZOE_TRY(device_array(opt, scales, 0, (void **)&opt->d_v_scale));
        for (int g = 0; g < z->d_grads; g++)
            ZOE_TRY(device_array(opt, z->d_state * sizeof(float), 0, (void **)&opt->d_grad[g]));
    }
    if (z->h_numel) ZOE_TRY(host_arrays(opt));
    if (z->params_are_master && !z->weights_on_drive) opt->params = opt->h_master;
    if (zoe_device_is_host_memory(opt)) { /* the device share lives in the host arrays */
        /* (in the host dtypes: on the CPU backend only the host step touches them) */
        opt->d_master = opt->h_master, opt->d_m = opt->h_m, opt->d_v = opt->h_v;
        opt->d_grad[0] = opt->h_grad[0], opt->d_grad[1] = opt->h_grad[1];
    }
    /* The tiling of the host step, and the first updated segment reaching into each tile. */
    opt->first_run_segment = zoe_device_is_host_memory(opt) ? 0 : lay->num_device_segments;
    opt->num_chunks = (z->h_numel + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE;
    opt->chunk_segment = calloc(opt->num_chunks + 1, sizeof(int));
    if (!opt->chunk_segment) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "chunk table");
    int s = opt->first_run_segment;
    for (size_t ch = 0; ch < opt->num_chunks; ch++) {
        size_t lo = ch * ZOE_ADAM_TILE;
        while (s < lay->num_segments &&
               lay->segments[s].offset + lay->segments[s].len - z->h_lo <= lo)
            s++;
        opt->chunk_segment[ch] = s;
    }
    if (z->h_numel) first_touch(opt);
    ZOE_TRY(create_device_table(opt));
    return zoe_stream_synchronize(opt->stream);
}

void zoe_state_destroy(zoe_optimizer *opt) {
    if (opt->sz.host_params)
        zoe_host_free(opt->dev, opt->params);
    else if (!opt->sz.params_are_master && !opt->sz.weights_on_drive) /* else h_master or a
                                                                       * drive ring slot */
        zoe_device_free(opt->dev, opt->params);
    zoe_device_free(opt->dev, opt->part_out);
    if (opt->sz.d_state) {
        zoe_device_free(opt->dev, opt->d_master);
        zoe_device_free(opt->dev, opt->d_m);
        zoe_device_free(opt->dev, opt->d_v);
        zoe_device_free(opt->dev, opt->d_m_scale);
        zoe_device_free(opt->dev, opt->d_v_scale);
        zoe_device_free(opt->dev, opt->d_grad[0]);
        zoe_device_free(opt->dev, opt->d_grad[1]);
    }
    if (opt->h_grad[1] != opt->h_grad[0]) free(opt->h_grad[1]);
    free(opt->h_grad[0]);
    if (opt->sz.params_are_master && !opt->sz.weights_on_drive)
        zoe_host_free(opt->dev, opt->h_master);
    else if (!opt->drive)
        free(opt->h_master);
    if (!opt->drive) { /* else they show a slot of the drive's ring */
        free(opt->h_m), free(opt->h_v);
        free(opt->h_m_scale), free(opt->h_v_scale);
    }
    zoe_state_drive_destroy(opt);
    free(opt->h_snap);
    for (int s = 0; s < 2; s++) {
        zoe_host_free(opt->dev, opt->out_ring[s]);
        zoe_event_destroy(opt->out_done[s]);
    }
    free(opt->chunk_segment);
    zoe_adam_table_destroy(opt->device_table);
}

zoe_status zoe_partition_upload(zoe_optimizer *opt, size_t x0, const void *src, size_t n,
                                zoe_stream *stream) {
    if (opt->part_out)
        return zoe_memcpy_async((char *)opt->part_out + x0 * opt->esz, src, n * opt->esz,
                                ZOE_COPY_HOST_TO_DEVICE, stream);
    if (opt->cfg.params_on_host) /* host to host, now: no stream orders the weight stream */
        return zoe_optimizer_params_copy(opt, x0, n, (void *)src, 1);
    for (zoe_slices it = zoe_slices_of(&opt->lay, opt->dp_rank, x0, n); zoe_slices_next(&it);)
        ZOE_TRY(zoe_memcpy_async((char *)opt->params + it.flat * opt->esz,
                                 (const char *)src + (it.x - x0) * opt->esz, it.len * opt->esz,
                                 ZOE_COPY_HOST_TO_DEVICE, stream));
    return ZOE_OK;
}

/* The host share's master weights from (to_master) or to the parameter buffer, over host
 * coordinates [a, e). On the CPU backend they are converted in place of the slices; on CUDA they
 * pass, block by block, through the first copy-out slot. */
static zoe_status master_span_copy(zoe_optimizer *opt, size_t a, size_t e, void *to_master_p) {
    const zoe_state_sizes *z = &opt->sz;
    const int to_master = *(const int *)to_master_p;
    zoe_dtype mdt = z->host_dtypes.master;
    if (zoe_params_in_host_memory(opt)) {
        for (zoe_slices it = zoe_slices_of(&opt->lay, opt->dp_rank, z->h_lo + a, e - a);
             zoe_slices_next(&it);) {
            void *master = zoe_host_state_at(opt, 0, it.x - z->h_lo);
            char *w = zoe_params_at(opt, zoe_weights_index(opt, it.x, it.flat));
            ZOE_TRY(to_master ? zoe_convert(master, mdt, w, opt->dtype, it.len)
                              : zoe_convert(w, opt->dtype, master, mdt, it.len));
        }
        return ZOE_OK;
    }
    /* a copy-out slot, free once the copies queued before are done */
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    void *stage = opt->out_ring[0];
    size_t block = z->out_ring;
    for (size_t b0 = a; b0 < e; b0 += block) {
        size_t n = zoe_min_size(block, e - b0);
        void *master = zoe_host_state_at(opt, 0, b0);
        if (to_master) {
            for (zoe_slices it = zoe_slices_of(&opt->lay, opt->dp_rank, z->h_lo + b0, n);
                 zoe_slices_next(&it);)
                ZOE_TRY(zoe_memcpy_async((char *)stage + (it.x - z->h_lo - b0) * opt->esz,
                                         (const char *)opt->params + it.flat * opt->esz,
                                         it.len * opt->esz, ZOE_COPY_DEVICE_TO_HOST,
                                         opt->update_stream));
            ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
            ZOE_TRY(zoe_convert(master, mdt, stage, opt->dtype, n));
        } else {
            ZOE_TRY(zoe_convert(stage, opt->dtype, master, mdt, n));
            ZOE_TRY(zoe_partition_upload(opt, z->h_lo + b0, stage, n, opt->update_stream));
            ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
        }
    }
    return ZOE_OK;
}

static zoe_status host_master_copy(zoe_optimizer *opt, int to_master) {
    const zoe_state_sizes *z = &opt->sz;
    if (z->master_in_params || z->params_are_master || !z->h_numel) return ZOE_OK;
    return zoe_state_paged(opt, 0, z->h_numel, to_master, master_span_copy, &to_master);
}

/* fp16 weights from a bf16 master are the master's values, converted (kernels/adam_state.h, "fp16
 * weights from a bf16 master"): every step writes them so, and so do the initial ones, which the
 * caller wrote in fp16 and the master rounded to bf16. Streamed weights whose host partition is
 * the master have no other copy to write. */
static int weights_from_master(const zoe_optimizer *opt) {
    return opt->dtype == ZOE_F16 && opt->sz.host_dtypes.master == ZOE_BF16 &&
           !opt->sz.params_are_master;
}

/* The initial bf16 master against fp16's range where the weights are computed in fp16 from it:
 * an initial fp16 weight of magnitude 65280 or more rounds to a bf16 master of 65536, which
 * would be an infinite fp16 weight. Refused here, once; no step brings a weight there (docs/
 * offload.md, "Streamed weights"). The host share; a device share's master (partial offload,
 * resident weights only) is converted on the device and not checked. */
typedef struct fp16_range_count {
    unsigned long long bad;
    size_t first;
    float first_value;
} fp16_range_count;

/* Master weights of host coordinates [a, e) beyond fp16's range, counted (a bucket at a time
 * where the state is on drives). */
static zoe_status count_beyond_fp16(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    fp16_range_count *c = ctx;
    const zoe_bf16 *master = zoe_host_state_at(opt, 0, a);
    for (size_t h = a; master && h < e; h++) {
        unsigned mag = master[h - a] & 0x7fffu; /* above 0x477f: 65536 or more, inf (not NaN) */
        if (mag > 0x477fu && mag <= 0x7f80u && !c->bad++) {
            c->first = h;
            c->first_value = zoe_bf16_to_f32(master[h - a]);
        }
    }
    return ZOE_OK;
}

static zoe_status check_fp16_range(zoe_optimizer *opt) {
    if (opt->dtype != ZOE_F16 || opt->sz.host_dtypes.master != ZOE_BF16) return ZOE_OK;
    fp16_range_count c = {0};
    unsigned long long bad, everywhere = 0;
    ZOE_TRY(zoe_state_paged(opt, 0, opt->sz.h_numel, 0, count_beyond_fp16, &c));
    bad = c.bad;
    /* every rank refuses together (one holding none of them would go on into the refresh) */
    int rc = MPI_Allreduce(&bad, &everywhere, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                           zoe_grid_world_comm(opt->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the weights beyond fp16");
    if (!everywhere) return ZOE_OK;
    if (!bad)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%llu initial weights on other ranks are beyond fp16's range as a bf16 "
                        "master: fp16 compute would read them as infinite",
                        everywhere);
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "%llu initial weights (%llu here, the first at partition element %zu: %g) are "
                    "beyond fp16's range as a bf16 master: fp16 compute would read them as "
                    "infinite",
                    everywhere, bad, opt->sz.h_lo + c.first, (double)c.first_value);
}

zoe_status zoe_optimizer_init_from_params(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "init_from_params: optimizer is NULL");
    ZOE_TRY(zoe_update_join(opt));
    const zoe_layout *lay = &opt->lay;
    const zoe_adam_state_dtypes *dt = &opt->sz.host_dtypes;
    size_t pd = opt->sz.d_state;
    ZOE_TRY(zoe_event_record(opt->grads_written, opt->stream));
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->grads_written));
    for (int b = 0; pd && b < lay->num_buckets; b++) {
        const char *mine =
            (const char *)opt->params +
            zoe_partition_flat(lay, b, opt->dp_rank, lay->buckets[b].part_offset) * opt->esz;
        size_t lo, mid, hi;
        zoe_bucket_split(lay, b, &lo, &mid, &hi);
        if (mid > lo)
            ZOE_TRY(zoe_convert_stream(
                opt->update_stream, (char *)opt->d_master + lo * zoe_adam_state_esize(dt->master),
                dt->master, mine, opt->dtype, mid - lo));
    }
    if (pd) {
        size_t scales = zoe_adam_int8_blocks(pd) * sizeof(float);
        ZOE_TRY(zoe_memset_async(opt->d_m, 0, pd * zoe_adam_state_esize(dt->exp_avg),
                                 opt->update_stream));
        ZOE_TRY(zoe_memset_async(opt->d_v, 0, pd * zoe_adam_state_esize(dt->exp_avg_sq),
                                 opt->update_stream));
        if (opt->d_m_scale)
            ZOE_TRY(zoe_memset_async(opt->d_m_scale, 0, scales, opt->update_stream));
        if (opt->d_v_scale)
            ZOE_TRY(zoe_memset_async(opt->d_v_scale, 0, scales, opt->update_stream));
    }
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    ZOE_TRY(host_master_copy(opt, 1));
    ZOE_TRY(zoe_state_paged(opt, 0, opt->sz.h_numel, 1, clear_moments, NULL));
    ZOE_TRY(check_fp16_range(opt));
    opt->iteration = 0;
    opt->refresh_due = 0;
    opt->micro_batches = 0;
    opt->grad_buf = 0;
    opt->loss_scale = opt->cfg.loss_scale;
    opt->clean_steps = 0;
    memset(&opt->stats, 0, sizeof opt->stats);
    opt->stats.loss_scale = opt->loss_scale;
    opt->stats.clip_coef = 1.0;
    return weights_from_master(opt) ? zoe_optimizer_refresh_params(opt) : ZOE_OK;
}

zoe_status zoe_optimizer_refresh_params(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "refresh_params: optimizer is NULL");
    ZOE_TRY(zoe_update_join(opt));
    size_t pd = opt->sz.d_state;
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->refreshed));
    if (pd)
        ZOE_TRY(zoe_convert_stream(opt->update_stream, opt->part_out, opt->dtype, opt->d_master,
                                   opt->sz.host_dtypes.master, pd));
    ZOE_TRY(host_master_copy(opt, 0));
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    opt->refresh_due = 0;
    return zoe_refresh(opt);
}
