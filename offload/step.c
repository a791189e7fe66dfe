/* The host-side state and the step: global norm, loss scaling, the fused Adam over the
 * partition (device part and host part), the refresh, and the DPU worker thread.
 *
 * Explained in docs/offload.md, "One step" and "Delayed parameter update". */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/device_impl.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* Where the host Adam over partition coordinates [a, ...) of a segment (at flat in the
 * parameter buffer) writes the compute-dtype weights: block_out is the copy-out slot holding
 * partition coordinate block_lo (CUDA with resident weights), else NULL. NULL: none, the master is
 * the weights (CPU, fp32; streamed bf16), or the update's w_out holds them. */
static void *range_output(const zoe_optimizer *opt, size_t a, size_t flat, int in_flight,
                          void *block_out, size_t block_lo) {
    const zoe_state_sizes *z = &opt->sz;
    size_t esz = opt->esz;
    char *snap = opt->h_snap ? (char *)opt->h_snap + (a - z->h_lo) * esz : NULL;
    if (block_out) return (char *)block_out + (a - block_lo) * esz;
    if (in_flight && z->dpu_snapshot) return snap;
    if (!z->master_in_params && !z->params_are_master)
        return zoe_params_at(opt, flat); /* CPU: straight into the rank's slices */
    return NULL;
}

/* The step's constants of a compressed update: the snapshot's for an update in flight that
 * reads it, else the step's. */
static const zoe_step_consts *compressed_consts(const zoe_optimizer *opt, const zoe_step_consts *c,
                                                const zoe_step_consts *snap_c, int in_flight) {
    return in_flight && opt->sz.dpu_snapshot ? snap_c : c;
}

/* Partition coordinates [a, e) of segment sg as a piece of a compressed update whose range
 * starts at partition coordinate x0: the master (a host array, or the fp32 master in the
 * parameters when only the moments are compressed) is updated in place, never into a second
 * array (no dpu_swap). The gradient is the snapshot for an update in flight that reads one (dc
 * replaces it with its compensated fp32 copy: compressed_tile), and the output goes where
 * adam_range's would (the prediction, if any, replaces it afterwards: compressed_tile). */
static zoe_adam_state_piece compressed_piece(const zoe_optimizer *opt, const zoe_step_consts *sc,
                                             const zoe_segment *sg, size_t a, size_t e, size_t x0,
                                             int buf, int in_flight, void *block_out,
                                             size_t block_lo) {
    const zoe_state_sizes *z = &opt->sz;
    size_t h = a - z->h_lo, flat = zoe_weights_index(opt, a, sg->flat + (a - sg->offset));
    int from_snap = in_flight && z->dpu_snapshot;
    return (zoe_adam_state_piece){
        .offset = a - x0,
        .len = e - a,
        .c = zoe_segment_consts(sc, sg),
        .master =
            z->master_in_params ? (float *)zoe_params_at(opt, flat) : zoe_host_state_at(opt, 0, h),
        .grad = from_snap ? (const void *)((char *)opt->h_snap + h * opt->esz)
                          : (const void *)zoe_host_grad_at(opt, buf, h),
        .out = range_output(opt, a, flat, in_flight, block_out, block_lo)};
}

/* The compressed state's moments (and int8 scales) from host coordinate h on. */
static zoe_adam_state compressed_moments(const zoe_optimizer *opt, size_t h) {
    return (zoe_adam_state){.exp_avg = zoe_host_state_at(opt, 1, h),
                            .exp_avg_sq = zoe_host_state_at(opt, 2, h),
                            .exp_avg_scale = zoe_host_scale_at(opt, 1, h),
                            .exp_avg_sq_scale = zoe_host_scale_at(opt, 2, h)};
}

/* The undo of a compressed step on [a, e) of segment sg (ZOE_DPU_EXACT): a starts at a block of
 * int8 moments (tensors, partitions, the host share and tiles do), and the blocks from a hold
 * elements of sg alone (zoe_tensor_align). */
static zoe_status compressed_undo(zoe_optimizer *opt, const zoe_step_consts *c,
                                  const zoe_segment *sg, size_t a, size_t e, int buf,
                                  void *block_out, size_t block_lo) {
    zoe_adam_state_piece pc = compressed_piece(opt, c, sg, a, e, a, buf, 0, block_out, block_lo);
    zoe_adam_state st = compressed_moments(opt, a - opt->sz.h_lo);
    st.master = pc.master;
    return zoe_adam_state_undo_host(pc.c, &opt->sz.host_dtypes, &st, pc.grad, opt->sz.grad_dtype,
                                    pc.out, opt->dtype, e - a);
}

/* Elements of compressed state widened to fp32 at a time, on the stack (three arrays: 12 KiB). */
enum { STATE_CHUNK = 1024 };

/* Host elements [h, h + n) of the master, m and v, n <= STATE_CHUNK, widened to fp32 as stored
 * (bf16 exactly, int8 codes through their blocks' scales). */
static zoe_status widen_state(const zoe_optimizer *opt, size_t h, size_t n, float *w, float *m,
                              float *v) {
    ZOE_TRY(zoe_host_state_read(opt, 0, h, n, w));
    ZOE_TRY(zoe_host_state_read(opt, 1, h, n, m));
    return zoe_host_state_read(opt, 2, h, n, v);
}

/* The weight prediction (ZOE_DPU_PREDICT) over host elements [h, h + n) with constants k, into
 * out (compute dtype), from the state as the step stored it: a compressed state widened to fp32
 * a chunk at a time (the prediction then starts from the rounded master and moments: it is the
 * fp32 state's prediction of those values, not of the unrounded ones). */
static zoe_status predict_range(const zoe_optimizer *opt, const zoe_adam_consts *k, size_t h,
                                size_t n, void *out) {
    float scale = opt->cfg.dpu_predict_scale;
    if (!opt->sz.compressed)
        return zoe_adam_predict_host(k, scale, (float *)zoe_host_state_at(opt, 0, h),
                                     (float *)zoe_host_state_at(opt, 1, h),
                                     (float *)zoe_host_state_at(opt, 2, h), out, opt->dtype, n);
    float w[STATE_CHUNK], m[STATE_CHUNK], v[STATE_CHUNK];
    for (size_t i = 0; i < n; i += STATE_CHUNK) {
        size_t len = zoe_min_size(n - i, STATE_CHUNK);
        ZOE_TRY(widen_state(opt, h + i, len, w, m, v));
        ZOE_TRY(
            zoe_adam_predict_host(k, scale, w, m, v, (char *)out + i * opt->esz, opt->dtype, len));
    }
    return ZOE_OK;
}

/* The delay compensation (ZOE_DPU_DC) of an update in flight: grad, the fp32 gradient of host
 * elements [h, h + n) of segment sg that the update multiplies by grad_scale, corrected in place
 * for the step the update is late by (flight_prev_consts), from the master and moments as that
 * step stored them, before this one overwrites them. fp32 state is read where it lies (w: the
 * fp32 master, in the parameters or the host array; not read with compressed state); compressed
 * state is widened to fp32 a chunk at a time, so the correction starts from the rounded values,
 * as the prediction does. */
static zoe_status compensate_range(const zoe_optimizer *opt, const zoe_segment *sg,
                                   float grad_scale, const float *w, size_t h, size_t n,
                                   float *grad) {
    const zoe_adam_consts *prev = zoe_segment_consts(&opt->flight_prev_consts, sg);
    float lambda = opt->flight_dc_lambda;
    if (!opt->sz.compressed)
        return zoe_adam_compensate_host(prev, lambda, grad_scale, grad, w,
                                        (float *)zoe_host_state_at(opt, 1, h),
                                        (float *)zoe_host_state_at(opt, 2, h), n);
    float wc[STATE_CHUNK], m[STATE_CHUNK], v[STATE_CHUNK];
    for (size_t i = 0; i < n; i += STATE_CHUNK) {
        size_t len = zoe_min_size(n - i, STATE_CHUNK);
        ZOE_TRY(widen_state(opt, h + i, len, wc, m, v));
        ZOE_TRY(zoe_adam_compensate_host(prev, lambda, grad_scale, grad + i, wc, m, v, len));
    }
    return ZOE_OK;
}

/* dc over the compute-dtype snapshot (sz.dpu_snapshot) of host elements [h, h + n) of segment
 * sg: widened into dc_grad (fp32, n elements) and compensated there, so that the correction is
 * not rounded back to the compute dtype; the update then reads dc_grad as an fp32 gradient. */
static zoe_status compensated_snapshot(const zoe_optimizer *opt, const zoe_segment *sg,
                                       float grad_scale, const float *w, size_t h, size_t n,
                                       float *dc_grad) {
    ZOE_TRY(zoe_convert(dc_grad, ZOE_F32, (const char *)opt->h_snap + h * opt->esz, opt->dtype, n));
    return compensate_range(opt, sg, grad_scale, w, h, n, dc_grad);
}

/* The compressed update of host coordinates [lo, hi) (one tile, or its part in a block): every
 * segment reaching into it as one piece of one call, each block of int8 moments read and
 * requantised once (kernels/adam_state.h; a block holds one tensor: zoe_tensor_align). lo is at a
 * block boundary: tiles and copy-out blocks are whole tiles, and with int8 moments every bucket's
 * partition and the host share start at a block boundary (zoe_partition_align). The rounding is
 * keyed by the element's partition coordinate, so it does not depend on the tiling. dc_grad:
 * for dc in flight, the thread's fp32 tile into which each piece's snapshot is compensated
 * before any piece is stepped (the step overwrites the state the correction reads), else NULL. */
static zoe_status compressed_tile(zoe_optimizer *opt, const zoe_step_consts *c,
                                  const zoe_step_consts *snap_c, int first_segment, int buf,
                                  int in_flight, size_t lo, size_t hi, void *block_out,
                                  size_t block_lo, float *dc_grad) {
    const zoe_layout *lay = &opt->lay;
    const zoe_state_sizes *z = &opt->sz;
    const zoe_step_consts *sc = compressed_consts(opt, c, snap_c, in_flight);
    enum { ON_STACK = 32 };
    zoe_adam_state_piece stack[ON_STACK], *pieces = stack;
    int count = 0, cap = ON_STACK;
    zoe_status st = ZOE_OK;
    for (int s = first_segment; s < lay->num_segments; s++) {
        const zoe_segment *sg = &lay->segments[s];
        size_t a = sg->offset - z->h_lo, e = a + sg->len;
        if (a >= hi) break;
        a = a < lo ? lo : a, e = e > hi ? hi : e;
        if (e <= a) continue; /* ends before the range */
        if (count == cap) {
            zoe_adam_state_piece *grown =
                malloc((size_t)(2 * cap) * sizeof *grown); /* many small tensors in one tile */
            if (!grown) {
                st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host Adam: %d pieces", 2 * cap);
                break;
            }
            memcpy(grown, pieces, (size_t)count * sizeof *grown);
            if (pieces != stack) free(pieces);
            pieces = grown, cap *= 2;
        }
        zoe_adam_state_piece *pc = &pieces[count++];
        *pc = compressed_piece(opt, sc, sg, a + z->h_lo, e + z->h_lo, lo + z->h_lo, buf, in_flight,
                               block_out, block_lo);
        if (dc_grad) { /* in flight, so from the snapshot: compressed DPU has no dpu_swap */
            st = compensated_snapshot(opt, sg, pc->c->grad_scale, NULL, a, e - a, dc_grad + a - lo);
            if (st != ZOE_OK) break;
            pc->grad = dc_grad + a - lo;
        }
    }
    if (st == ZOE_OK) {
        const zoe_adam_state moments = compressed_moments(opt, lo);
        int from_snap = in_flight && z->dpu_snapshot;
        zoe_dtype grad_dtype = dc_grad ? ZOE_F32 : from_snap ? opt->dtype : z->grad_dtype;
        st = zoe_adam_state_host_pieces(&sc->rounding, &z->host_dtypes, &moments, lo + z->h_lo,
                                        pieces, count, grad_dtype, opt->dtype, hi - lo);
    }
    /* The prediction replaces the weights the step wrote, piece by piece (the snapshot). */
    for (int p = 0; st == ZOE_OK && in_flight && opt->flight_predict && p < count; p++)
        st = predict_range(opt, pieces[p].c, lo + pieces[p].offset, pieces[p].len, pieces[p].out);
    if (pieces != stack) free(pieces);
    return st;
}

/* One host Adam call on partition coordinates [a, e) of segment sg; block_out is the copy-out
 * slot holding partition coordinate block_lo (CUDA without DPU), else NULL. Where each array
 * lives is the memory layout's choice (zoe_state_sizes). dc_grad: for dc in flight over the
 * snapshot, the thread's fp32 tile (host_update), else NULL. */
static zoe_status adam_range(zoe_optimizer *opt, const zoe_step_consts *c,
                             const zoe_step_consts *snap_c, const zoe_segment *sg, size_t a,
                             size_t e, int buf, int in_flight, void *block_out, size_t block_lo,
                             int undo, float *dc_grad) {
    const zoe_state_sizes *z = &opt->sz;
    size_t h = a - z->h_lo, flat = zoe_weights_index(opt, a, sg->flat + (a - sg->offset));
    size_t esz = opt->esz;
    if (z->compressed) /* only its undo comes here: the step goes a tile at a time */
        return compressed_undo(opt, c, sg, a, e, buf, block_out, block_lo);
    float *w_in = z->master_in_params ? (float *)zoe_params_at(opt, flat)
                                      : (float *)zoe_host_state_at(opt, 0, h);
    float *w_out = in_flight && z->dpu_swap ? zoe_host_grad_f32(opt, buf, h) : w_in;
    int from_snap = in_flight && z->dpu_snapshot;
    char *snap = opt->h_snap ? (char *)opt->h_snap + h * esz : NULL;
    const void *grad = from_snap ? (const void *)snap : (const void *)zoe_host_grad_at(opt, buf, h);
    zoe_dtype grad_dtype = from_snap ? opt->dtype : z->grad_dtype;
    void *out = range_output(opt, a, flat, in_flight, block_out, block_lo);
    const zoe_adam_consts *k = zoe_segment_consts(from_snap ? snap_c : c, sg);
    if (undo) /* ZOE_DPU_EXACT, whose layout is that of no DPU: the master and fp32 gradient */
        return zoe_adam_undo_host(k, w_in, (float *)zoe_host_state_at(opt, 1, h),
                                  (float *)zoe_host_state_at(opt, 2, h),
                                  zoe_host_grad_f32(opt, buf, h), out, opt->dtype, e - a);
    int predict = in_flight && opt->flight_predict;
    if (in_flight && opt->flight_dc && from_snap) { /* into the thread's fp32 tile */
        ZOE_TRY(compensated_snapshot(opt, sg, k->grad_scale, w_in, h, e - a, dc_grad));
        grad = dc_grad, grad_dtype = ZOE_F32;
    } else if (in_flight && opt->flight_dc) /* the fp32 gradient partition (dpu_swap), in place */
        ZOE_TRY(compensate_range(opt, sg, k->grad_scale, w_in, h, e - a,
                                 zoe_host_grad_f32(opt, buf, h)));
    ZOE_TRY(zoe_adam_host_to(k, w_in, w_out, (float *)zoe_host_state_at(opt, 1, h),
                             (float *)zoe_host_state_at(opt, 2, h), grad, grad_dtype,
                             predict ? NULL : out, opt->dtype, e - a));
    /* The prediction replaces the compute-dtype copy, over the tile the step has just touched. */
    return predict ? zoe_adam_predict_host(k, opt->cfg.dpu_predict_scale, w_out,
                                           (float *)zoe_host_state_at(opt, 1, h),
                                           (float *)zoe_host_state_at(opt, 2, h), out, opt->dtype,
                                           e - a)
                   : ZOE_OK;
}

/* The host Adam over host coordinates [b0, b1) (a block): OpenMP over its tiles, each thread
 * on the tiles it first-touched. dc over the snapshot compensates a widened fp32 copy of the
 * gradient (a compute-dtype snapshot could not hold the correction): each thread owns one tile
 * of it for the update, on the heap (64 KiB, too much for a worker thread's stack). */
static zoe_status host_update(zoe_optimizer *opt, const zoe_step_consts *c,
                              const zoe_step_consts *snap_c, int buf, int in_flight, size_t b0,
                              size_t b1, void *block_out, int undo) {
    const zoe_layout *lay = &opt->lay;
    size_t h_lo = opt->sz.h_lo;
    long first = (long)(b0 / ZOE_ADAM_TILE),
         last = (long)((b1 + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE);
    int dc_copy = in_flight && opt->flight_dc && opt->sz.dpu_snapshot && !undo;
    zoe_worker_error err = {ZOE_OK, ""};
#pragma omp parallel if (last - first > 1) /* one tile: no team */
    {
        float *dc_grad = dc_copy ? malloc(ZOE_ADAM_TILE * sizeof *dc_grad) : NULL;
        if (dc_copy && !dc_grad)
            zoe_worker_error_record(
                &err,
                zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dc: a tile of %zu fp32 gradients", ZOE_ADAM_TILE));
#pragma omp for schedule(static) /* the first touch's: the same tiles on the same threads */
        for (long ch = first; ch < last; ch++) {
            if (dc_copy && !dc_grad) continue; /* failed above; the team still runs the loop */
            size_t lo = (size_t)ch * ZOE_ADAM_TILE, hi = zoe_min_size(lo + ZOE_ADAM_TILE, b1);
            lo = lo < b0 ? b0 : lo;
            if (opt->sz.compressed && !undo) {
                zoe_worker_error_record(
                    &err, compressed_tile(opt, c, snap_c, opt->chunk_segment[ch], buf, in_flight,
                                          lo, hi, block_out, b0 + h_lo, dc_grad));
                continue;
            }
            for (int s = opt->chunk_segment[ch]; s < lay->num_segments; s++) {
                const zoe_segment *sg = &lay->segments[s];
                size_t a = sg->offset - h_lo, e = a + sg->len;
                if (a >= hi) break;
                a = a < lo ? lo : a, e = e > hi ? hi : e;
                if (e <= a) continue; /* ends before a range that starts inside the tile */
                zoe_worker_error_record(&err,
                                        adam_range(opt, c, snap_c, sg, a + h_lo, e + h_lo, buf,
                                                   in_flight, block_out, b0 + h_lo, undo, dc_grad));
            }
        }
        free(dc_grad);
    }
    return zoe_worker_error_raise(&err, "host Adam");
}

/* What an update over a span of the host state takes (zoe_span_fn's ctx). */
typedef struct update_span {
    const zoe_step_consts *c, *snap_c;
    int buf, in_flight, undo;
} update_span;

/* The host Adam over host coordinates [b0, b1) of the state shown (the whole host range, or a
 * bucket's on drives) and, on CUDA without DPU, the copy of the new weights to the device
 * through the copy-out ring. */
static zoe_status span_update(zoe_optimizer *opt, size_t b0, size_t b1, void *ctx) {
    const update_span *u = ctx;
    const zoe_state_sizes *z = &opt->sz;
    const zoe_step_consts *c = u->c;
    int buf = u->buf, undo = u->undo;
    if (!z->out_ring) return host_update(opt, c, u->snap_c, buf, u->in_flight, b0, b1, NULL, undo);
    for (size_t x = b0; x < b1;) {
        size_t next = zoe_min_size(x + z->out_ring, b1);
        int k = opt->out_next;
        opt->out_next ^= 1;
        ZOE_TRY(zoe_event_synchronize(opt->out_done[k])); /* its previous copy is done */
        ZOE_TRY(host_update(opt, c, u->snap_c, buf, u->in_flight, x, next, opt->out_ring[k], undo));
        ZOE_TRY(
            zoe_partition_upload(opt, z->h_lo + x, opt->out_ring[k], next - x, opt->update_stream));
        ZOE_TRY(zoe_event_record(opt->out_done[k], opt->update_stream));
        x = next;
    }
    return ZOE_OK;
}

zoe_status zoe_host_range_update(zoe_optimizer *opt, const zoe_step_consts *c, int buf, size_t b0,
                                 size_t b1, int undo) {
    update_span u = {.c = c, .snap_c = c, .buf = buf, .undo = undo};
    return zoe_state_paged_grads(opt, b0, b1, 1, buf, 0, span_update, &u);
}

/* The host share of an update and, on CUDA, its way to the device: through the copy-out ring
 * block by block (without DPU), or from the snapshot the update wrote into (DPU). */
static zoe_status host_part_update(zoe_optimizer *opt, const zoe_step_consts *c,
                                   const zoe_step_consts *snap_c, int buf, int in_flight) {
    const zoe_state_sizes *z = &opt->sz;
    if (!z->h_numel) return ZOE_OK;
    update_span u = {.c = c, .snap_c = snap_c, .buf = buf, .in_flight = in_flight};
    /* The gradient is read with the state unless the update reads the snapshot; the update in
     * flight over an fp32 master in the parameters writes its new weights over it (dpu_swap). */
    int reads_grad = !(in_flight && z->dpu_snapshot), writes_grad = in_flight && z->dpu_swap;
    return zoe_state_streamed(opt, reads_grad ? buf : -1, writes_grad, span_update, &u);
}

/* The start of an update: the update stream waits for the gradients and the last refresh, and
 * the device part (CUDA; on the CPU backend the device share is updated with the host share). */
static zoe_status update_start(zoe_optimizer *opt, const zoe_step_consts *c, int buf,
                               int in_flight) {
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->grads_reduced));
    ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->refreshed));
    if (!in_flight && !opt->part_out) { /* the update writes the parameters: compute is done */
        ZOE_TRY(zoe_event_record(opt->grads_written, opt->stream));
        ZOE_TRY(zoe_stream_wait_event(opt->update_stream, opt->grads_written));
    }
    if (zoe_device_is_host_memory(opt)) return ZOE_OK; /* the host step covers it */
    if (opt->sz.compressed) { /* rounded as the host would round it: the same bits */
        const zoe_adam_state st = {.master = opt->d_master,
                                   .exp_avg = opt->d_m,
                                   .exp_avg_sq = opt->d_v,
                                   .exp_avg_scale = opt->d_m_scale,
                                   .exp_avg_sq_scale = opt->d_v_scale};
        return zoe_adam_table_step_state(opt->update_stream, opt->device_table, &c->decayed,
                                         &c->exempt, &c->rounding, &opt->sz.host_dtypes, &st,
                                         opt->sz.d_state, opt->d_grad[buf], opt->part_out,
                                         opt->dtype);
    }
    return zoe_adam_table_step(opt->update_stream, opt->device_table, &c->decayed, &c->exempt,
                               opt->d_master, opt->d_m, opt->d_v, opt->d_grad[buf], opt->part_out,
                               opt->dtype);
}

/* One update: device part on the update stream, host part on the host threads; returns when all
 * is done. */
static zoe_status run_update(zoe_optimizer *opt, const zoe_step_consts *c,
                             const zoe_step_consts *snap_c, int buf, int in_flight,
                             double *ms_update) {
    double t0 = zoe_clock_ms();
    ZOE_TRY(update_start(opt, c, buf, in_flight));
    ZOE_TRY(host_part_update(opt, c, snap_c, buf, in_flight));
    ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    *ms_update = zoe_clock_ms() - t0;
    return ZOE_OK;
}

/* The refresh: every rank's updated partition of every bucket, all-gathered over DP into the
 * parameter buffer, on the compute stream; in place when the partition was updated in the
 * rank's own slices (no partition buffer). */
zoe_status zoe_refresh_bucket(zoe_optimizer *opt, int b) {
    if (opt->cfg.params_on_host) return ZOE_OK; /* the weight stream gathers where it reads */
    const zoe_bucket *bk = &opt->lay.buckets[b];
    const char *mine =
        opt->part_out
            ? (char *)opt->part_out + bk->part_offset * opt->esz
            : (char *)opt->params +
                  zoe_partition_flat(&opt->lay, b, opt->dp_rank, bk->part_offset) * opt->esz;
    return zoe_comm_all_gather(opt->dp, mine, (char *)opt->params + bk->flat_offset * opt->esz,
                               bk->part, opt->dtype, opt->stream);
}

zoe_status zoe_refresh(zoe_optimizer *opt) {
    double t0 = zoe_clock_ms();
    ZOE_TRY(zoe_comm_group_start(opt->dp, opt->stream)); /* one NCCL launch for all buckets */
    for (int b = 0; b < opt->lay.num_buckets; b++) ZOE_TRY(zoe_refresh_bucket(opt, b));
    ZOE_TRY(zoe_comm_group_end(opt->dp, opt->stream));
    opt->stats.ms_refresh = zoe_clock_ms() - t0;
    return zoe_event_record(opt->refreshed, opt->stream);
}

typedef struct snapshot_span_ctx {
    int buf, copy;
    float scale;
} snapshot_span_ctx;

/* The snapshot of host coordinates [a, e) (the whole host range, or a bucket's with the
 * gradient on drives), tile by tile: element by element, so the bits do not depend on the
 * ranges. */
static zoe_status snapshot_span(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const snapshot_span_ctx *k = ctx;
    long first = (long)(a / ZOE_ADAM_TILE), last = (long)((e + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE);
    zoe_worker_error err = {ZOE_OK, ""};
#pragma omp parallel for schedule(static)
    for (long ch = first; ch < last; ch++) {
        size_t lo = (size_t)ch * ZOE_ADAM_TILE, hi = zoe_min_size(lo + ZOE_ADAM_TILE, e);
        lo = lo < a ? a : lo;
        char *dst = (char *)opt->h_snap + lo * opt->esz;
        if (k->copy)
            memcpy(dst, zoe_host_grad_at(opt, k->buf, lo), (hi - lo) * opt->esz);
        else
            zoe_worker_error_record(&err, zoe_grad_snapshot_host(dst, opt->dtype,
                                                                 zoe_host_grad_f32(opt, k->buf, lo),
                                                                 k->scale, hi - lo));
    }
    return zoe_worker_error_raise(&err, "gradient snapshot");
}

/* The DPU snapshot: the host gradient partition buf times scale, in the compute dtype, with the
 * host step's schedule. A partition in the compute dtype holds one micro-batch (scale 1): a
 * copy. */
static zoe_status snapshot_grads(zoe_optimizer *opt, int buf, float scale) {
    snapshot_span_ctx k = {.buf = buf, .copy = opt->sz.grad_dtype != ZOE_F32, .scale = scale};
    if (k.copy && scale != 1.0f)
        return zoe_fail(ZOE_ERR_INTERNAL, "snapshot of a %s gradient partition scaled by %g",
                        zoe_dtype_name(opt->sz.grad_dtype), (double)scale);
    return zoe_grads_paged(opt, 0, opt->sz.h_numel, buf, 0, snapshot_span, &k);
}

static void release_grads(zoe_optimizer *opt) {
    pthread_mutex_lock(&opt->release_lock);
    opt->grad_held = 0;
    pthread_cond_broadcast(&opt->released);
    pthread_mutex_unlock(&opt->release_lock);
}

zoe_status zoe_worker_device(const zoe_optimizer *opt) {
#ifdef ZOE_HAVE_CUDA
    /* The current GPU is per thread: a new one starts on GPU 0. */
    if (zoe_device_backend(opt->dev) == ZOE_BACKEND_CUDA)
        return zoe_cuda_set_device(zoe_device_ordinal(opt->dev));
#endif
    (void)opt;
    return ZOE_OK;
}

static void *update_worker(void *arg) {
    zoe_optimizer *opt = arg;
    opt->flight_status = zoe_worker_device(opt);
    if (opt->flight_status == ZOE_OK && opt->sz.dpu_snapshot)
        opt->flight_status = snapshot_grads(opt, opt->flight_buf, opt->flight_snap_scale);
    if (opt->sz.dpu_snapshot) release_grads(opt); /* also on failure: nothing may wait forever */
    if (opt->flight_status == ZOE_OK)
        opt->flight_status = run_update(opt, &opt->flight_consts, &opt->flight_snap_consts,
                                        opt->flight_buf, 1, &opt->flight_ms_update);
    if (opt->flight_status != ZOE_OK)
        snprintf(opt->flight_error, sizeof opt->flight_error, "%s", zoe_last_error());
    return NULL;
}

zoe_status zoe_update_join(zoe_optimizer *opt) {
    ZOE_TRY(zoe_spec_cancel(opt)); /* a state access between expect_step and step */
    if (!opt->in_flight) return ZOE_OK;
    pthread_join(opt->worker, NULL);
    opt->in_flight = 0;
    opt->stats.ms_update = opt->flight_ms_update; /* the worker's figure, read after the join */
    if (opt->flight_status != ZOE_OK)
        return zoe_fail(opt->flight_status, "delayed update failed: %s", opt->flight_error);
    return ZOE_OK;
}

/* dpu_swap (the CPU backend): host coordinates [a, e) of the new weights the update in flight
 * wrote over the gradient partition it read, into the parameters (host coordinates are partition
 * coordinates there: no device share). */
static zoe_status upload_swapped(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    (void)ctx;
    return zoe_partition_upload(opt, a, zoe_host_grad_at(opt, opt->flight_buf, a), e - a,
                                opt->stream);
}

/* The same where the weights are on drives: the pass shows the bucket's weights beside its
 * gradient (a copy into the parameters would page them in a second pass, inside this one). */
static zoe_status swapped_into_weights(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    (void)ctx;
    memcpy(zoe_params_at(opt, a), zoe_host_grad_at(opt, opt->flight_buf, a), (e - a) * opt->esz);
    return ZOE_OK;
}

zoe_status zoe_update_wait(zoe_optimizer *opt) {
    ZOE_TRY(zoe_spec_cancel(opt)); /* ZOE_DPU_EXACT: nothing of a step half done */
    opt->stats.ms_wait = 0;
    if (!opt->in_flight && !opt->refresh_due) return ZOE_OK;
    double t0 = zoe_clock_ms();
    ZOE_TRY(zoe_update_join(opt));
    opt->stats.ms_wait = zoe_clock_ms() - t0;
    /* On the CPU backend the update left the new weights where it read the gradient (the
     * snapshot, or the fp32 gradient partition); the forward that read the old ones is done. */
    if (zoe_params_in_host_memory(opt) && opt->sz.dpu_swap && opt->sz.weights_on_drive)
        ZOE_TRY(zoe_state_paged_grads(opt, 0, opt->sz.h_numel, 1, opt->flight_buf, 0,
                                      swapped_into_weights, NULL));
    else if (zoe_params_in_host_memory(opt) && opt->sz.dpu_swap)
        ZOE_TRY(zoe_grads_paged(opt, 0, opt->sz.h_numel, opt->flight_buf, 0, upload_swapped, NULL));
    else if (zoe_params_in_host_memory(opt))
        ZOE_TRY(zoe_partition_upload(opt, 0, opt->h_snap, opt->lay.part_numel, opt->stream));
    opt->refresh_due = 0;
    return zoe_refresh(opt);
}

zoe_status zoe_optimizer_settle(zoe_optimizer *opt, int *refresh_due) {
    if (!opt || !refresh_due) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "settle: NULL argument");
    if (opt->in_flight) {
        ZOE_TRY(zoe_update_join(opt));
        opt->refresh_due = 1;
    }
    *refresh_due = opt->refresh_due;
    return ZOE_OK;
}

/* The Adam constants of a step with learning rate lr and gradient scale grad_scale, taken as
 * the step-th applied one: the configured weight decay, and none for exempt segments. */
void zoe_step_consts_of(const zoe_optimizer *opt, float lr, float grad_scale, long step,
                        zoe_step_consts *c) {
    zoe_adam_hparams h = {.lr = lr,
                          .beta1 = opt->cfg.beta1,
                          .beta2 = opt->cfg.beta2,
                          .eps = opt->cfg.eps,
                          .weight_decay = opt->cfg.weight_decay,
                          .decoupled = opt->cfg.adamw,
                          .grad_scale = grad_scale,
                          .step = step};
    zoe_adam_consts_init(&c->decayed, &h);
    h.weight_decay = 0;
    zoe_adam_consts_init(&c->exempt, &h);
    c->rounding = (zoe_adam_rounding){.seed = opt->rounding_seed, .step = (uint64_t)step};
}

/* ZOE_DPU_PREDICT on resume: the prediction the saving run's update in flight wrote into the
 * snapshot, recomputed from the restored state and the last step's learning rate (the same
 * kernel on the same inputs: the same bits), and staged for the due refresh. */
static zoe_status predict_span(zoe_optimizer *opt, size_t a, size_t e, void *ctx) {
    const zoe_step_consts *c = ctx;
    const zoe_state_sizes *z = &opt->sz;
    for (int s = opt->first_run_segment; s < opt->lay.num_segments; s++) {
        const zoe_segment *sg = &opt->lay.segments[s];
        size_t h0 = sg->offset - z->h_lo, h1 = h0 + sg->len;
        h0 = h0 > a ? h0 : a, h1 = zoe_min_size(h1, e);
        if (h0 < h1)
            ZOE_TRY(predict_range(opt, zoe_segment_consts(c, sg), h0, h1 - h0,
                                  (char *)opt->h_snap + h0 * opt->esz));
    }
    return ZOE_OK;
}

static zoe_status stage_prediction(zoe_optimizer *opt) {
    const zoe_state_sizes *z = &opt->sz;
    zoe_step_consts c;
    zoe_step_consts_of(opt, opt->last_lr, 1.0f, opt->stats.step, &c);
    ZOE_TRY(zoe_state_paged(opt, 0, z->h_numel, 0, predict_span, &c));
    if (zoe_params_in_host_memory(opt)) return ZOE_OK; /* the due refresh copies the snapshot */
    ZOE_TRY(zoe_partition_upload(opt, z->h_lo, opt->h_snap, z->h_numel, opt->update_stream));
    return zoe_stream_synchronize(opt->update_stream);
}

/* Partition coordinates [a, e) of the parameter buffer's weights (shown from a where they are
 * on drives) into where the due refresh reads them: staged (the snapshot), or NULL: the gradient
 * partition flight_buf (dpu_swap), shown from a on drives. */
static zoe_status stage_params(zoe_optimizer *opt, size_t a, size_t e, void *staged) {
    for (zoe_slices it = zoe_slices_of(&opt->lay, opt->dp_rank, a, e - a); zoe_slices_next(&it);) {
        char *to = staged ? (char *)staged + it.x * opt->esz
                          : (char *)zoe_host_grad_at(opt, opt->flight_buf, it.x);
        memcpy(to, zoe_params_at(opt, zoe_weights_index(opt, it.x, it.flat)), it.len * opt->esz);
    }
    return ZOE_OK;
}

zoe_status zoe_optimizer_defer_refresh(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "defer_refresh: optimizer is NULL");
    ZOE_TRY(zoe_update_join(opt));
    /* The due refresh reads the new weights from where a delayed update leaves them: on CUDA the
     * partition buffer (which zoe_optimizer_refresh_params just filled); on the CPU backend the
     * fp32 gradient partition the update wrote over (fp32) or the compute-dtype snapshot. The
     * parameter buffer still holds them (refresh_params), so they are staged from there. */
    const zoe_state_sizes *z = &opt->sz;
    /* Weights on drives are read from the drives' pages: one pass shows a bucket's weights and
     * its gradient partition, in host memory or on drives, and writes the latter back. */
    if (zoe_params_in_host_memory(opt) && z->h_numel && z->dpu_swap) {
        opt->flight_buf = opt->grad_buf ^ 1; /* never the one gradients fill */
        if (z->weights_on_drive)
            ZOE_TRY(zoe_state_paged_grads(opt, 0, z->h_numel, 0, opt->flight_buf, 1, stage_params,
                                          NULL));
        else
            ZOE_TRY(zoe_grads_paged(opt, 0, z->h_numel, opt->flight_buf, 1, stage_params, NULL));
    } else if (zoe_params_in_host_memory(opt) && z->h_numel && opt->h_snap) {
        if (z->weights_on_drive)
            ZOE_TRY(zoe_optimizer_params_copy(opt, 0, opt->lay.part_numel, opt->h_snap, 0));
        else
            ZOE_TRY(stage_params(opt, 0, opt->lay.part_numel, opt->h_snap));
    }
    if (opt->cfg.dpu_schedule == ZOE_DPU_PREDICT && opt->sz.dpu_snapshot && z->h_numel)
        ZOE_TRY(stage_prediction(opt));
    opt->refresh_due = 1;
    return ZOE_OK;
}

/* This rank's counted sum of squares, summed over the whole grid (DP partitions and TP
 * shards; TP-replicated tensors were counted on tp_rank 0 only). */
static zoe_status global_sumsq(zoe_optimizer *opt, int buf, double *out) {
    double local = opt->host_sumsq;
    ZOE_TRY(zoe_adam_table_sumsq(opt->copy_stream, opt->device_table, opt->d_grad[buf], &local));
    int rc = MPI_Allreduce(&local, out, 1, MPI_DOUBLE, MPI_SUM, zoe_grid_world_comm(opt->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the gradient norm");
    return ZOE_OK;
}

/* ZOE_DPU_EXACT: the step's update from what the worker did during backward (c NULL: the step
 * is skipped and that is undone); its time is the worker's and this settling's. */
static zoe_status speculated_update(zoe_optimizer *opt, const zoe_step_consts *c, int buf,
                                    int *deferred) {
    double t0 = zoe_clock_ms();
    if (c) ZOE_TRY(update_start(opt, c, buf, 0));
    int redone = 0;
    *deferred = opt->cfg.gated_forward;
    ZOE_TRY(zoe_spec_finish(opt, c, buf, *deferred, &redone));
    opt->stats.deferred = *deferred;
    if (!*deferred) ZOE_TRY(zoe_stream_synchronize(opt->update_stream));
    opt->stats.redone = redone;
    opt->stats.redone_total += redone;
    /* deferred: the worker's time is the settling's, reported with the next step */
    opt->stats.ms_update += (*deferred ? 0 : opt->spec.ms_update) + (zoe_clock_ms() - t0);
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
    /* ZOE_DPU_EXACT: the last step's settling ends (normally the forward has ended it); its
     * figures are reported with this step. */
    ZOE_TRY(zoe_spec_complete(opt));
    zoe_speculation *sp = &opt->spec;
    double settled_ms = sp->ms_settle, gated_ms = sp->ms_gated;
    sp->ms_settle = sp->ms_gated = 0;
    if (opt->cfg.grad_mode == ZOE_GRAD_FULL_BUFFER) ZOE_TRY(zoe_grads_reduce_full(opt));
    int buf = opt->grad_buf, k = opt->micro_batches;
    double sumsq = 0;
    ZOE_TRY(global_sumsq(opt, buf, &sumsq));
    ZOE_TRY(zoe_event_record(opt->grads_reduced, opt->copy_stream));
    opt->micro_batches = 0;
    opt->iteration++;
    /* ZOE_DPU_EXACT: the buckets speculated on are settled below, not cancelled. */
    int speculated = opt->spec.expected;
    opt->spec.expected = 0; /* settled below, not cancelled */
    /* The previous update (DPU) lands before anything writes the partition buffer again; the
     * gradient of this iteration was taken before it did. */
    int stale = opt->in_flight || opt->refresh_due;
    ZOE_TRY(zoe_update_wait(opt));
    opt->stats.redone = opt->stats.speculated = opt->stats.deferred = 0;
    if (speculated) {
        double t0 = zoe_clock_ms();
        /* gated: the speculation's last buckets go on under the next forward (the settling
         * takes them over); otherwise the step waits for them */
        if (!opt->cfg.gated_forward) ZOE_TRY(zoe_spec_join(opt));
        opt->stats.ms_wait = zoe_clock_ms() - t0;
        opt->stats.ms_update = 0;
    }
    opt->stats.ms_wait += gated_ms;
    if (settled_ms > 0) opt->stats.ms_update = settled_ms;

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
        int deferred = 0;
        if (speculated) ZOE_TRY(speculated_update(opt, NULL, buf, &deferred));
        return ZOE_OK;
    }
    st->clip_coef = 1.0;
    if (opt->cfg.clip_norm > 0 && st->grad_norm > opt->cfg.clip_norm)
        st->clip_coef = opt->cfg.clip_norm / (st->grad_norm + 1e-6);
    st->skipped = 0;
    st->step++;
    st->loss_scale = opt->loss_scale;
    zoe_step_consts c;
    zoe_step_consts_of(opt, lr, (float)(st->clip_coef * unscale), st->step, &c);
    float prev_lr = opt->last_lr;
    opt->last_lr = lr;
    if (opt->cfg.dpu_warmup > 0 && opt->iteration > opt->cfg.dpu_warmup &&
        opt->cfg.dpu_schedule != ZOE_DPU_EXACT) {
        opt->flight_consts = c;
        opt->flight_buf = buf;
        opt->flight_predict = opt->cfg.dpu_schedule == ZOE_DPU_PREDICT;
        /* Compensate only a gradient that is late: one taken before the previous step landed
         * (after a synchronous, skipped or flushed step it is not). */
        opt->flight_dc = opt->cfg.dpu_schedule == ZOE_DPU_DC && stale && prev_lr > 0;
        if (opt->flight_dc) {
            zoe_step_consts_of(opt, prev_lr, 1.0f, st->step - 1, &opt->flight_prev_consts);
            opt->flight_dc_lambda = opt->cfg.dpu_dc_kappa / prev_lr;
        }
        if (opt->sz.dpu_snapshot) { /* the snapshot holds the mean over micro-batches */
            opt->flight_snap_scale = 1.0f / (float)k;
            opt->grad_held = 1; /* before the worker exists: no lock needed */
            zoe_step_consts_of(opt, lr, (float)(st->clip_coef / opt->loss_scale), st->step,
                               &opt->flight_snap_consts);
        }
        if (pthread_create(&opt->worker, NULL, update_worker, opt) != 0) {
            opt->grad_held = 0;
            return zoe_fail(ZOE_ERR_INTERNAL, "could not start the delayed-update thread");
        }
        opt->in_flight = 1;
        opt->grad_buf ^= 1; /* the next iteration's gradients go to the other partition */
        return ZOE_OK;
    }
    int deferred = 0;
    if (speculated)
        ZOE_TRY(speculated_update(opt, &c, buf, &deferred));
    else
        ZOE_TRY(run_update(opt, &c, &c, buf, 0, &st->ms_update));
    /* deferred: the next forward refreshes bucket by bucket (zoe_optimizer_weights_ready) */
    return deferred ? ZOE_OK : zoe_refresh(opt);
}

zoe_status zoe_optimizer_flush(zoe_optimizer *opt) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "flush: optimizer is NULL");
    int predicted = (opt->in_flight || opt->refresh_due) &&
                    opt->cfg.dpu_schedule == ZOE_DPU_PREDICT && opt->sz.dpu_snapshot;
    ZOE_TRY(zoe_update_wait(opt));
    /* The refresh brought the prediction; the parameters are to hold the master's weights. */
    return predicted ? zoe_optimizer_refresh_params(opt) : ZOE_OK;
}
