/* The gradient path: bucket buffers handed to the model, reduce-scatter over DP as buckets
 * complete, device-to-host copy of the rank's partition, fp32 accumulation on the host.
 *
 * Explained in docs/offload.md, "One step". */
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/error.h"

/* The ring by bytes (cfg.bucket_ring_window): slot b holds bucket b, at its place in one device
 * buffer and one pinned buffer (offload/layout.h, zoe_layout_ring_places). */
static zoe_status create_ring(zoe_optimizer *opt) {
    const zoe_state_sizes *z = &opt->sz;
    const zoe_layout *lay = &opt->lay;
    size_t *places = calloc((size_t)lay->num_buckets, sizeof *places);
    if (!places) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "gradient ring places");
    zoe_layout_ring_places(lay, opt->dp_size, opt->cfg.bucket_ring_window, places);
    zoe_status st = zoe_state_device_alloc(opt, z->ring_device * opt->esz, 1, &opt->ring_device);
    if (st == ZOE_OK && z->ring_pinned)
        st = zoe_state_pinned_alloc(opt, z->ring_pinned * opt->esz, 1,
                                    "the gradient ring's staging", &opt->ring_pinned);
    for (int b = 0; st == ZOE_OK && b < z->slots; b++) {
        grad_slot *slot = &opt->slots[b];
        slot->bucket = -1;
        slot->device = (char *)opt->ring_device + places[b] * opt->esz;
        if (opt->ring_pinned)
            slot->pinned = (char *)opt->ring_pinned + places[b] / (size_t)opt->dp_size * opt->esz;
        st = zoe_event_create(opt->dev, &slot->done);
    }
    free(places);
    return st;
}

zoe_status zoe_grads_create(zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    opt->progress = calloc((size_t)lay->num_buckets, sizeof *opt->progress);
    opt->tensor_ready = calloc((size_t)lay->num_tensors, 1);
    if (!opt->progress || !opt->tensor_ready)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "gradient bookkeeping");
    for (int b = 0; b < lay->num_buckets; b++) opt->progress[b].slot = -1;
    const zoe_state_sizes *z = &opt->sz;
    if (opt->cfg.grad_mode == ZOE_GRAD_FULL_BUFFER) {
        ZOE_TRY(zoe_state_device_alloc(opt, z->full_grad * opt->esz, 0, &opt->full_grad));
        ZOE_TRY(zoe_memset_async(opt->full_grad, 0, z->full_grad * opt->esz, opt->stream));
        if (z->full_pinned)
            ZOE_TRY(zoe_state_pinned_alloc(opt, z->full_pinned * opt->esz, 0,
                                           "the gradient staging buffer", &opt->full_pinned));
        return ZOE_OK;
    }
    opt->slots = calloc((size_t)z->slots, sizeof *opt->slots);
    if (!opt->slots) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "bucket ring");
    if (z->ring_device) return create_ring(opt);
    for (int s = 0; s < z->slots; s++) {
        grad_slot *slot = &opt->slots[s];
        slot->bucket = -1;
        ZOE_TRY(zoe_state_device_alloc(opt, z->slot_device * opt->esz, 1, &slot->device));
        if (z->slot_pinned)
            ZOE_TRY(zoe_state_pinned_alloc(opt, z->slot_pinned * opt->esz, 1,
                                           "a gradient bucket's staging slot", &slot->pinned));
        ZOE_TRY(zoe_event_create(opt->dev, &slot->done));
    }
    return ZOE_OK;
}

void zoe_grads_destroy(zoe_optimizer *opt) {
    for (int s = 0; opt->slots && s < opt->sz.slots; s++) {
        if (!opt->sz.ring_device) { /* else they point into the ring's buffers */
            zoe_device_free(opt->dev, opt->slots[s].device);
            zoe_host_free(opt->dev, opt->slots[s].pinned);
        }
        zoe_event_destroy(opt->slots[s].done);
    }
    free(opt->slots);
    zoe_device_free(opt->dev, opt->ring_device);
    zoe_host_free(opt->dev, opt->ring_pinned);
    zoe_device_free(opt->dev, opt->full_grad);
    zoe_host_free(opt->dev, opt->full_pinned);
    free(opt->progress);
    free(opt->tensor_ready);
}

void zoe_grads_wait_released(zoe_optimizer *opt) {
    if (!opt->in_flight) return;
    pthread_mutex_lock(&opt->release_lock);
    while (opt->grad_held) pthread_cond_wait(&opt->released, &opt->release_lock);
    pthread_mutex_unlock(&opt->release_lock);
}

/* dst := src * scale in the compute dtype (a gradient partition of main_grads_dtype), n <=
 * ZOE_ADAM_TILE: the fp32 values zoe_grad_accumulate_host assigns, with its sum of squares over
 * the same range (so the norm is the fp32 partition's, bit for bit), then rounded to the dtype.
 * With a power-of-two scale the rounding is exact unless the scaling leaves the dtype's normal
 * range, and the partition holds the fp32 partition's values. */
static zoe_status assign_compute_dtype(const zoe_optimizer *opt, void *dst, const void *src,
                                       float scale, size_t n, double *sumsq) {
    float f[ZOE_ADAM_TILE];
    if (n > ZOE_ADAM_TILE)
        return zoe_fail(ZOE_ERR_INTERNAL, "gradient assignment of %zu > %zu elements", n,
                        (size_t)ZOE_ADAM_TILE);
    ZOE_TRY(zoe_grad_accumulate_host(f, src, opt->dtype, scale, 1, n, sumsq));
    return zoe_convert(dst, opt->dtype, f, ZOE_F32, n);
}

/* Adds (or, for the first micro-batch of a step, assigns) the host part of bucket b's
 * partition, held in pinned from partition offset pinned_start, into the host gradient
 * partition, segment by segment, with the norm's sum of squares of the result (and in
 * *all_sumsq, when not NULL, that of every segment, counted or not). Large segments are split
 * over the OpenMP threads. With the gradient on drives the bucket's partition is summed in a
 * staging slot (read from its region first unless assigned, ahead where the staging predicted
 * the bucket: offload/state_drive.c) and written back to the region:
 * the same kernel on the same values, so the same bits and the same norm; under the exact
 * schedule the write lands before the bucket is offered (the speculation reads it there). */
static zoe_status accumulate_host_part(zoe_optimizer *opt, int b, const void *pinned,
                                       size_t pinned_start, int assign, double *all_sumsq) {
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    const zoe_layout *lay = &opt->lay;
    zoe_grads_wait_released(opt);
    const float scale = 1.0f / (float)opt->dp_size;
    if (opt->sz.grad_dtype != ZOE_F32 && !assign)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "a second micro-batch in one step: the %s gradient partition "
                        "(main_grads_dtype) holds one; accumulate in fp32",
                        zoe_dtype_name(opt->sz.grad_dtype));
    char *stage = NULL; /* gradients on drives: the bucket's host partition, from its h0 */
    size_t stage_h0 = lay->buckets[b].part_offset - opt->sz.h_lo,
           gsz = zoe_dtype_size(opt->sz.grad_dtype);
    if (opt->sz.drive_grads)
        ZOE_TRY(zoe_grad_stage_begin(opt, b, opt->grad_buf, assign, (void **)&stage));
    for (int s = lay->num_device_segments; s < lay->num_segments; s++) {
        const zoe_segment *seg = &lay->segments[s];
        size_t a = seg->offset > mid ? seg->offset : mid;
        size_t e = seg->offset + seg->len < hi ? seg->offset + seg->len : hi;
        if (a >= e) continue;
        long tiles = (long)((e - a + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE);
        double sumsq = 0;
        zoe_worker_error err = {ZOE_OK, ""};
#pragma omp parallel for schedule(static) reduction(+ : sumsq) if (tiles > 4)
        for (long t = 0; t < tiles; t++) {
            size_t x = a + (size_t)t * ZOE_ADAM_TILE,
                   n = e - x < ZOE_ADAM_TILE ? e - x : ZOE_ADAM_TILE;
            double part = 0;
            const char *src = (const char *)pinned + (x - pinned_start) * opt->esz;
            void *dst = stage ? stage + (x - opt->sz.h_lo - stage_h0) * gsz
                              : zoe_host_grad_at(opt, opt->grad_buf, x - opt->sz.h_lo);
            zoe_worker_error_record(
                &err, opt->sz.grad_dtype == ZOE_F32
                          ? zoe_grad_accumulate_host(dst, src, opt->dtype, scale, assign, n, &part)
                          : assign_compute_dtype(opt, dst, src, scale, n, &part));
            sumsq += part;
        }
        ZOE_TRY(zoe_worker_error_raise(&err, "gradient accumulation"));
        if (seg->counted) opt->host_sumsq += sumsq;
        if (all_sumsq) *all_sumsq += sumsq;
    }
    return stage ? zoe_grad_stage_end(opt, b, opt->grad_buf, opt->spec.expected) : ZOE_OK;
}

/* Reduce-scatters bucket b held in device buffer `grads` (its padded d*part elements) on the
 * copy stream, adds the device part of the rank's partition into the device gradient partition
 * and starts the copy of the host part into pinned (at partition offset pinned_start). */
static zoe_status reduce_bucket(zoe_optimizer *opt, int b, void *grads, void *pinned,
                                size_t pinned_start, int assign, int copy_host_part) {
    const zoe_bucket *bk = &opt->lay.buckets[b];
    char *mine = (char *)grads + (size_t)opt->dp_rank * bk->part * opt->esz;
    ZOE_TRY(zoe_event_record(opt->grads_written, opt->stream));
    ZOE_TRY(zoe_stream_wait_event(opt->copy_stream, opt->grads_written));
    ZOE_TRY(zoe_comm_reduce_scatter(opt->dp, grads, mine, bk->part, opt->dtype, ZOE_REDUCE_SUM,
                                    opt->copy_stream));
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    if (mid > lo && zoe_device_is_host_memory(opt)) zoe_grads_wait_released(opt); /* aliases */
    if (mid > lo)
        ZOE_TRY(zoe_grad_accumulate_stream(opt->copy_stream, opt->d_grad[opt->grad_buf] + lo, mine,
                                           opt->dtype, 1.0f / (float)opt->dp_size, assign,
                                           mid - lo));
    if (hi > mid && copy_host_part)
        ZOE_TRY(zoe_memcpy_async((char *)pinned + (mid - pinned_start) * opt->esz,
                                 mine + (mid - lo) * opt->esz, (hi - mid) * opt->esz,
                                 ZOE_COPY_DEVICE_TO_HOST, opt->copy_stream));
    return ZOE_OK;
}

/* Waits for the copy of the slot's bucket and folds it into the host gradient partition. */
static zoe_status drain_slot(zoe_optimizer *opt, int s) {
    grad_slot *slot = &opt->slots[s];
    ZOE_TRY(zoe_event_synchronize(slot->done));
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, slot->bucket, &lo, &mid, &hi);
    const void *host_part = slot->pinned;
    if (zoe_device_is_host_memory(opt))
        host_part =
            (const char *)slot->device +
            ((size_t)opt->dp_rank * opt->lay.buckets[slot->bucket].part + (mid - lo)) * opt->esz;
    double all_sumsq = 0;
    ZOE_TRY(accumulate_host_part(opt, slot->bucket, host_part, mid, opt->micro_batches == 0,
                                 &all_sumsq));
    ZOE_TRY(zoe_spec_offer(opt, slot->bucket, all_sumsq)); /* ZOE_DPU_EXACT: final for the step */
    opt->progress[slot->bucket].slot = -1;
    slot->bucket = -1;
    slot->state = SLOT_FREE;
    return ZOE_OK;
}

/* The slot in flight the longest, or -1. */
static int oldest_in_flight(const zoe_optimizer *opt) {
    int oldest = -1;
    for (int s = 0; s < opt->sz.slots; s++) {
        const grad_slot *slot = &opt->slots[s];
        if (slot->state == SLOT_IN_FLIGHT &&
            (oldest < 0 || slot->sequence < opt->slots[oldest].sequence))
            oldest = s;
    }
    return oldest;
}

/* Drains the slots in flight in the order their buckets completed, through sequence `last`: the
 * norm's sum of squares then adds up in one order whatever the ring (the bits of the step). */
static zoe_status drain_through(zoe_optimizer *opt, long last) {
    for (int s; (s = oldest_in_flight(opt)) >= 0 && opt->slots[s].sequence <= last;)
        ZOE_TRY(drain_slot(opt, s));
    return ZOE_OK;
}

/* A free slot, else the one in flight the longest, else -1 (all hold open buckets). */
static int pick_slot(const zoe_optimizer *opt) {
    for (int s = 0; s < opt->sz.slots; s++)
        if (opt->slots[s].state == SLOT_FREE) return s;
    return oldest_in_flight(opt);
}

static int places_overlap(const zoe_optimizer *opt, int a, int b) {
    const char *pa = opt->slots[a].device, *pb = opt->slots[b].device;
    size_t na = (size_t)opt->dp_size * opt->lay.buckets[a].part * opt->esz,
           nb = (size_t)opt->dp_size * opt->lay.buckets[b].part * opt->esz;
    return pa < pb + nb && pb < pa + na;
}

/* The ring by bytes: bucket b's place, after draining the buckets in flight that overlap it (and
 * every one that completed before them); *pick -1 when an open bucket overlaps it. */
static zoe_status clear_place(zoe_optimizer *opt, int b, int *pick) {
    long last = -1;
    *pick = -1;
    for (int s = 0; s < opt->sz.slots; s++) {
        if (s == b || opt->slots[s].state == SLOT_FREE || !places_overlap(opt, s, b)) continue;
        if (opt->slots[s].state == SLOT_OPEN) return ZOE_OK;
        if (opt->slots[s].sequence > last) last = opt->slots[s].sequence;
    }
    *pick = b;
    return drain_through(opt, last);
}

/* A zeroed ring buffer for bucket b: a free slot, else the oldest one in flight, drained (the
 * ring by bytes: its place, cleared). */
static zoe_status acquire_slot(zoe_optimizer *opt, int b) {
    /* ZOE_DPU_EXACT: gradients are about to land in the accumulator the last step's settling
     * reads; the forward normally finished it (zoe_optimizer_weights_ready). */
    ZOE_TRY(zoe_spec_complete(opt));
    int pick = -1;
    if (opt->sz.ring_device)
        ZOE_TRY(clear_place(opt, b, &pick));
    else
        pick = pick_slot(opt);
    if (pick < 0 && opt->sz.ring_device)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "gradient ring of %zu elements: bucket %d (tensor '%s') overlaps a bucket "
                        "still open; raise bucket_ring_window to the gradients held open at once",
                        opt->sz.ring_device, b, opt->lay.names[opt->lay.buckets[b].first_tensor]);
    if (pick < 0)
        return zoe_fail(
            ZOE_ERR_INVALID_ARGUMENT,
            "bucket ring of %d full: all hold incomplete buckets when bucket %d (tensor "
            "'%s') was requested; raise bucket_ring or complete buckets in order",
            opt->sz.slots, b, opt->lay.names[opt->lay.buckets[b].first_tensor]);
    grad_slot *slot = &opt->slots[pick];
    if (slot->state == SLOT_IN_FLIGHT) ZOE_TRY(drain_slot(opt, pick));
    /* The compute stream may reuse the buffer once the copy stream has read it. */
    ZOE_TRY(zoe_stream_wait_event(opt->stream, slot->done));
    const zoe_bucket *bk = &opt->lay.buckets[b];
    ZOE_TRY(
        zoe_memset_async(slot->device, 0, (size_t)opt->dp_size * bk->part * opt->esz, opt->stream));
    slot->state = SLOT_OPEN;
    slot->bucket = b;
    opt->progress[b].slot = pick;
    return ZOE_OK;
}

static zoe_status complete_bucket(zoe_optimizer *opt, int b) {
    bucket_progress *p = &opt->progress[b];
    p->reduced = 1;
    if (opt->cfg.grad_mode == ZOE_GRAD_FULL_BUFFER) return ZOE_OK; /* reduced in the step */
    if (p->slot < 0) ZOE_TRY(acquire_slot(opt, b));
    grad_slot *slot = &opt->slots[p->slot];
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    ZOE_TRY(reduce_bucket(opt, b, slot->device, slot->pinned, mid, opt->micro_batches == 0,
                          !zoe_device_is_host_memory(opt)));
    ZOE_TRY(zoe_event_record(slot->done, opt->copy_stream));
    slot->state = SLOT_IN_FLIGHT;
    slot->sequence = opt->sequence++;
    return ZOE_OK;
}

static zoe_status check_tensor(const zoe_optimizer *opt, int t, const char *what) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: optimizer is NULL", what);
    if (!opt->in_micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s outside a micro-batch: call zoe_optimizer_begin_micro_batch first",
                        what);
    if (t < 0 || t >= opt->lay.num_tensors)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor index %d outside [0, %d)", what, t,
                        opt->lay.num_tensors);
    if (opt->tensor_ready[t])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: tensor %d ('%s') was already marked ready in this micro-batch", what,
                        t, opt->lay.names[t]);
    return ZOE_OK;
}

zoe_status zoe_optimizer_begin_micro_batch(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "begin_micro_batch: optimizer is NULL");
    if (opt->in_micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "begin_micro_batch: micro-batch %d was not ended",
                        opt->micro_batches);
    memset(opt->tensor_ready, 0, (size_t)opt->lay.num_tensors);
    for (int b = 0; b < opt->lay.num_buckets; b++)
        opt->progress[b] = (bucket_progress){.ready = 0, .slot = -1, .reduced = 0};
    opt->host_sumsq = 0; /* the last micro-batch's passes see the final sums */
    /* gradients on drives: after the step's first micro-batch, the buckets due first are read
     * ahead while the forward runs */
    if (opt->cfg.grad_mode != ZOE_GRAD_FULL_BUFFER)
        ZOE_TRY(zoe_grad_stage_micro_batch(opt, opt->grad_buf, opt->micro_batches > 0));
    opt->in_micro_batch = 1;
    return ZOE_OK;
}

zoe_status zoe_optimizer_grad_buffer(zoe_optimizer *opt, int t, void **grad) {
    ZOE_TRY(check_tensor(opt, t, "grad_buffer"));
    if (!grad) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "grad_buffer: out pointer is NULL");
    *grad = NULL;
    int b = opt->lay.bucket_of[t];
    const zoe_bucket *bk = &opt->lay.buckets[b];
    if (opt->cfg.grad_mode == ZOE_GRAD_FULL_BUFFER) {
        *grad = (char *)opt->full_grad + opt->lay.offset[t] * opt->esz;
        return ZOE_OK;
    }
    if (opt->progress[b].slot < 0) ZOE_TRY(acquire_slot(opt, b));
    *grad = (char *)opt->slots[opt->progress[b].slot].device +
            (opt->lay.offset[t] - bk->flat_offset) * opt->esz;
    return ZOE_OK;
}

zoe_status zoe_optimizer_grad_ready(zoe_optimizer *opt, int t) {
    ZOE_TRY(check_tensor(opt, t, "grad_ready"));
    opt->tensor_ready[t] = 1;
    int b = opt->lay.bucket_of[t];
    if (++opt->progress[b].ready == opt->lay.buckets[b].num_tensors)
        ZOE_TRY(complete_bucket(opt, b));
    return ZOE_OK;
}

zoe_status zoe_optimizer_end_micro_batch(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "end_micro_batch: optimizer is NULL");
    if (!opt->in_micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "end_micro_batch without begin_micro_batch");
    /* Buckets with tensors never marked ready: open ones first (they hold slots), then the
     * untouched ones, in bucket order on every rank so the collectives match. */
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < opt->lay.num_buckets; b++)
            if (!opt->progress[b].reduced && (opt->progress[b].slot >= 0) == (pass == 0))
                ZOE_TRY(complete_bucket(opt, b));
    if (opt->slots) ZOE_TRY(drain_through(opt, opt->sequence));
    ZOE_TRY(zoe_grad_stage_drain(opt)); /* gradients on drives: every bucket's write landed */
    opt->in_micro_batch = 0;
    opt->micro_batches++;
    return ZOE_OK;
}

zoe_status zoe_grads_reduce_full(zoe_optimizer *opt) {
    ZOE_TRY(zoe_spec_complete(opt));
    /* All buckets reduced back to back, then one wait: the sums of k micro-batches at once,
     * assigned into the gradient partitions. */
    opt->host_sumsq = 0;
    ZOE_TRY(zoe_grad_stage_micro_batch(opt, opt->grad_buf, 0)); /* assigned: nothing to read */
    int in_place = zoe_device_is_host_memory(opt);
    for (int b = 0; b < opt->lay.num_buckets; b++) {
        char *grads = (char *)opt->full_grad + opt->lay.buckets[b].flat_offset * opt->esz;
        ZOE_TRY(
            reduce_bucket(opt, b, grads, opt->full_pinned, opt->lay.device_numel, 1, !in_place));
    }
    ZOE_TRY(zoe_stream_synchronize(opt->copy_stream));
    for (int b = 0; b < opt->lay.num_buckets; b++) {
        /* On the CPU backend the rank's reduced partition is read where it lies. */
        const zoe_bucket *bk = &opt->lay.buckets[b];
        const void *host_part =
            in_place
                ? (const char *)opt->full_grad +
                      zoe_partition_flat(&opt->lay, b, opt->dp_rank, bk->part_offset) * opt->esz
                : opt->full_pinned;
        ZOE_TRY(accumulate_host_part(opt, b, host_part,
                                     in_place ? bk->part_offset : opt->lay.device_numel, 1, NULL));
    }
    ZOE_TRY(zoe_grad_stage_drain(opt));
    ZOE_TRY(zoe_event_record(opt->grads_written, opt->copy_stream));
    ZOE_TRY(zoe_stream_wait_event(opt->stream, opt->grads_written));
    return zoe_memset_async(opt->full_grad, 0, opt->lay.flat_numel * opt->esz, opt->stream);
}
