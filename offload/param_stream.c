/* The weight stream of offload/param_stream.h: a ring of device buffers, one unit each, filled
 * from the host partition on a copy stream and gathered over DP.
 *
 * A unit's buffer holds its tensors one after the other (each at a 64-byte boundary), each as a
 * whole TP shard. Rank r owns the piece [first_r, first_r + count_r) of each tensor (the
 * optimizer's DP partition); a fetch packs this rank's pieces of the unit into its block of a
 * staging buffer (host to device), all-gathers the blocks over DP in place, and unpacks every
 * rank's pieces into the unit's buffer. With one DP rank the pieces are the tensors: they go
 * straight into the buffer.
 *
 * Explained in docs/offload.md, "Streamed weights". */
#include "offload/param_stream.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/adam.h"
#include "offload/optimizer_impl.h" /* zoe_weights_drive_io, zoe_weights_drive_offset */
#include "runtime/agree.h"
#include "runtime/error.h"
#include "zoe/comm.h"
#include "zoe/grid.h"

/* READING: the unit's drive reads are in flight into the slot's host buffer (weights on drives);
 * its copy to the device is not queued yet. */
typedef enum { SLOT_EMPTY = 0, SLOT_READING, SLOT_FETCHED, SLOT_IN_USE } stream_slot_state;

/* One device buffer and the unit it holds. */
typedef struct stream_slot {
    void *data;
    int unit; /* -1: none */
    stream_slot_state state;
    int reads;           /* drive reads in flight (SLOT_READING) */
    zoe_status failed;   /* the fetch's start failed (SLOT_READING): said when it ends */
    zoe_event *fetched;  /* on the copy stream, after the unit landed */
    zoe_event *released; /* on the compute stream, after the unit's last read */
} stream_slot;

/* Where tensor t's piece of DP rank r lies: [first, first + count) of the tensor, at pack in the
 * rank's block of the staging buffer. */
typedef struct stream_piece {
    size_t first, count, pack;
} stream_piece;

/* One aligned read of the drive: scratch bytes [lo, lo + bytes) into a slot's host buffer at pos.
 * A unit's pieces that lie near each other on the drive (consecutive tensors of a bucket) share
 * one. */
typedef struct drive_run {
    size_t lo, bytes, pos;
} drive_run;

struct zoe_param_stream {
    zoe_param_stream_config cfg; /* units, order and numel point at the copies below */
    zoe_optimizer *opt;
    zoe_device *dev;
    zoe_stream *compute, *copy;
    zoe_comm *dp;
    int dp_size, dp_rank;
    size_t esz;
    /* The host partition's dtype (zoe_optimizer_params_dtype): the compute dtype, or a bf16
     * master's that the weights are computed from in fp16; then a fetch converts the unit in
     * place on the device after it landed, and a store converts back before it leaves. */
    zoe_dtype host_dtype;
    size_t *numel;         /* [num_tensors] */
    size_t *offset;        /* [num_tensors]: element offset in its unit's buffer */
    size_t *host;          /* [num_tensors]: partition offset of this rank's piece */
    stream_piece *pieces;  /* [num_tensors * dp_size], rank-major per tensor */
    zoe_param_unit *units; /* [num_units] */
    size_t *unit_numel;    /* [num_units]: its buffer's elements */
    size_t *unit_block;    /* [num_units]: elements of each rank's block in the staging */
    int *order[ZOE_PARAM_STREAM_PASSES]; /* [order_len[p]] each */
    int order_len[ZOE_PARAM_STREAM_PASSES];
    int cursor[ZOE_PARAM_STREAM_PASSES]; /* where pass p's last acquire stands in its order */
    stream_slot *slots;                  /* ring slots, then the held unit's */
    int num_slots;                       /* prefetch + 1, + 1 with a held unit */
    void *staging;                       /* dp_size x the largest block (DP > 1) */
    /* Weights on drives (zoe_weights_drive_io; NULL: the host partition is in host memory): each
     * slot has a host buffer that its unit's pieces are read into before they go to the device. */
    zoe_drive_io *io;
    size_t *host_pos;             /* [num_tensors]: byte position of this rank's piece */
    drive_run *runs;              /* [num_tensors]: every unit's reads, unit after unit */
    int *unit_runs;               /* [num_units + 1]: unit u's are [unit_runs[u], unit_runs[u+1]) */
    int max_runs;                 /* the most of one unit */
    size_t host_slot;             /* bytes of a slot's host buffer */
    void *host_block;             /* zoe_host_alloc's: the ring and up to an alignment before it */
    char *host_ring;              /* num_slots * host_slot, aligned for the drive, in host_block */
    zoe_drive_io_ticket *tickets; /* [num_slots * max_runs] */
    /* The optimizer's grid's world (MPI_COMM_NULL: one rank): before a fetch's copies and gather,
     * every rank learns whether any rank's reads failed, so that they all fail the same fetch, not
     * the failing rank alone with its peers waiting in the gather or, over TP, in the forward's
     * collectives. Every rank acquires the same units in the same order. */
    MPI_Comm agree;
};

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

static zoe_status check_config(const zoe_param_stream_config *c) {
    if (c->num_tensors <= 0 || c->num_units <= 0 || !c->numel || !c->units)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream of %d tensors in %d units",
                        c->num_tensors, c->num_units);
    if (c->prefetch < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: prefetch %d must be >= 0",
                        c->prefetch);
    if (c->held_unit < -1 || c->held_unit >= c->num_units)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: held unit %d outside [-1, %d)",
                        c->held_unit, c->num_units);
    int next = 0;
    for (int u = 0; u < c->num_units; u++) {
        if (c->units[u].first != next || c->units[u].n <= 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "weight stream: unit %d is tensors [%d, %d), not a run from %d", u,
                            c->units[u].first, c->units[u].first + c->units[u].n, next);
        next += c->units[u].n;
    }
    if (next != c->num_tensors)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: units cover %d of %d tensors",
                        next, c->num_tensors);
    for (int p = 0; p < ZOE_PARAM_STREAM_PASSES; p++) {
        if (!c->order[p])
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: no order for pass %d", p);
        if (c->order_len[p] < 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: pass %d's order of %d", p,
                            c->order_len[p]);
        for (int i = 0; i < (c->order_len[p] ? c->order_len[p] : c->num_units); i++)
            if (c->order[p][i] < 0 || c->order[p][i] >= c->num_units)
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                "weight stream: pass %d's order names unit %d of %d", p,
                                c->order[p][i], c->num_units);
    }
    return ZOE_OK;
}

/* The tables: every rank's piece of every tensor (exchanged over DP), each tensor's place in its
 * unit's buffer, each unit's buffer and staging block. */
static zoe_status build_tables(zoe_param_stream *ps, MPI_Comm dp_group) {
    const zoe_param_stream_config *c = &ps->cfg;
    int nt = c->num_tensors, d = ps->dp_size;
    uint64_t *mine = calloc((size_t)nt * 2, sizeof *mine);
    uint64_t *all = calloc((size_t)nt * 2 * (size_t)d, sizeof *all);
    zoe_status st = mine && all ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "piece tables");
    for (int t = 0; st == ZOE_OK && t < nt; t++) {
        size_t first, count;
        st = zoe_optimizer_tensor_shard(ps->opt, t, &first, &count, &ps->host[t]);
        mine[2 * t] = first, mine[2 * t + 1] = count;
    }
    if (st == ZOE_OK && MPI_Allgather(mine, 2 * nt, MPI_UINT64_T, all, 2 * nt, MPI_UINT64_T,
                                      dp_group) != MPI_SUCCESS)
        st = zoe_fail(ZOE_ERR_MPI, "weight stream: all-gather of the piece tables over DP");
    size_t align = max_size(1, 64 / ps->esz);
    for (int u = 0; st == ZOE_OK && u < c->num_units; u++) {
        const zoe_param_unit *un = &ps->units[u];
        size_t at = 0, block = 0;
        for (int r = 0; r < d; r++) {
            size_t pack = 0;
            for (int t = un->first; t < un->first + un->n; t++) {
                const uint64_t *rt = all + ((size_t)r * (size_t)nt + (size_t)t) * 2;
                stream_piece *pc = &ps->pieces[(size_t)t * (size_t)d + (size_t)r];
                *pc = (stream_piece){.first = rt[0], .count = rt[1], .pack = pack};
                if (pc->first + pc->count > ps->numel[t])
                    st = zoe_fail(ZOE_ERR_INTERNAL,
                                  "weight stream: tensor %d's piece on DP rank "
                                  "%d ends past its %zu elements",
                                  t, r, ps->numel[t]);
                pack += pc->count;
            }
            block = max_size(block, pack);
        }
        for (int t = un->first; t < un->first + un->n; t++) {
            ps->offset[t] = at;
            at += (ps->numel[t] + align - 1) / align * align;
        }
        ps->unit_numel[u] = at;
        ps->unit_block[u] = block;
    }
    free(mine), free(all);
    return st;
}

/* The reads of each unit's pieces from the drive, and where each piece lands in a slot's host
 * buffer: runs aligned for the drive, a piece joining the previous run where its aligned start
 * falls inside or right after it. */
static zoe_status build_drive_plan(zoe_param_stream *ps) {
    const zoe_param_stream_config *c = &ps->cfg;
    int nt = c->num_tensors, nu = c->num_units, d = ps->dp_size, me = ps->dp_rank;
    ps->host_pos = calloc((size_t)nt, sizeof *ps->host_pos);
    ps->runs = calloc((size_t)nt, sizeof *ps->runs);
    ps->unit_runs = calloc((size_t)nu + 1, sizeof *ps->unit_runs);
    if (!ps->host_pos || !ps->runs || !ps->unit_runs)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight stream's drive reads of %d tensors", nt);
    size_t align = zoe_drive_io_alignment(ps->io);
    int n = 0;
    for (int u = 0; u < nu; u++) {
        const zoe_param_unit *un = &ps->units[u];
        size_t end = 0; /* of the unit's host buffer so far */
        ps->unit_runs[u] = n;
        for (int t = un->first; t < un->first + un->n; t++) {
            const stream_piece *pc = &ps->pieces[(size_t)t * (size_t)d + (size_t)me];
            if (!pc->count) continue;
            size_t off, contiguous;
            ZOE_TRY(zoe_weights_drive_offset(ps->opt, ps->host[t], &off, &contiguous));
            if (contiguous < pc->count)
                return zoe_fail(ZOE_ERR_INTERNAL,
                                "weight stream: tensor %d's piece of %zu elements crosses a bucket",
                                t, pc->count);
            size_t lo = off / align * align;
            size_t hi = (off + pc->count * ps->esz + align - 1) / align * align;
            drive_run *last = n > ps->unit_runs[u] ? &ps->runs[n - 1] : NULL;
            if (last && lo >= last->lo && lo <= last->lo + last->bytes) {
                if (hi > last->lo + last->bytes) last->bytes = hi - last->lo;
            } else {
                last = &ps->runs[n++];
                *last = (drive_run){.lo = lo, .bytes = hi - lo, .pos = end};
            }
            ps->host_pos[t] = last->pos + (off - last->lo);
            end = last->pos + last->bytes;
        }
        ps->host_slot = max_size(ps->host_slot, end);
        if (n - ps->unit_runs[u] > ps->max_runs) ps->max_runs = n - ps->unit_runs[u];
    }
    ps->unit_runs[nu] = n;
    ps->host_slot = max_size(ps->host_slot, align);
    ps->tickets = calloc((size_t)ps->num_slots * (size_t)max_size((size_t)ps->max_runs, 1),
                         sizeof *ps->tickets);
    if (!ps->tickets)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight stream's drive reads of %d units", nu);
    /* Page-locked (zoe_host_alloc), as the plan counts it: on CUDA a copy to the device from
     * pageable memory goes through the driver's own pinned bounce buffer, synchronously and at a
     * fraction of the link's bandwidth, and the stream would not overlap. On the CPU backend the
     * same call gives plain memory, counted as pinned there too. O_DIRECT wants the buffers
     * aligned to the drive's alignment, which the allocation does not promise (cudaMallocHost's
     * pages are, its pageable fall-back past the pin limit and the CPU backend's memory below
     * 4 MiB are 64-byte aligned): the ring is asked one alignment more and starts at the first
     * aligned byte inside it. */
    const size_t ring = (size_t)ps->num_slots * ps->host_slot;
    ZOE_TRY(zoe_host_alloc_for(ps->dev, ring + align, "the weight stream's host ring",
                               &ps->host_block));
    ps->host_ring = (char *)ps->host_block + (align - (uintptr_t)ps->host_block % align) % align;
    zoe_log(ZOE_LOG_DEBUG, "weight stream: weights on drives, a host ring of %d units of %zu bytes",
            ps->num_slots, ps->host_slot);
    return ZOE_OK;
}

int zoe_param_stream_slots(int prefetch, int held) {
    return prefetch + 1 + (held ? 1 : 0);
}

static zoe_status device_buffer(zoe_param_stream *ps, size_t numel, void **out) {
    size_t bytes = max_size(numel, 1) * ps->esz;
    return zoe_device_alloc(ps->dev, bytes, out);
}

static zoe_status create(zoe_param_stream *ps, MPI_Comm dp_group) {
    const zoe_param_stream_config *c = &ps->cfg;
    int nt = c->num_tensors, nu = c->num_units, d = ps->dp_size;
    ps->numel = calloc((size_t)nt, sizeof *ps->numel);
    ps->offset = calloc((size_t)nt, sizeof *ps->offset);
    ps->host = calloc((size_t)nt, sizeof *ps->host);
    ps->pieces = calloc((size_t)nt * (size_t)d, sizeof *ps->pieces);
    ps->units = calloc((size_t)nu, sizeof *ps->units);
    ps->unit_numel = calloc((size_t)nu, sizeof *ps->unit_numel);
    ps->unit_block = calloc((size_t)nu, sizeof *ps->unit_block);
    int orders = 1;
    for (int p = 0; p < ZOE_PARAM_STREAM_PASSES; p++) {
        ps->order_len[p] = c->order_len[p] ? c->order_len[p] : nu;
        ps->order[p] = calloc((size_t)ps->order_len[p], sizeof *ps->order[p]);
        ps->cursor[p] = -1;
        orders = orders && ps->order[p];
    }
    ps->num_slots = zoe_param_stream_slots(c->prefetch, c->held_unit >= 0);
    ps->slots = calloc((size_t)ps->num_slots, sizeof *ps->slots);
    if (!ps->numel || !ps->offset || !ps->host || !ps->pieces || !ps->units || !ps->unit_numel ||
        !ps->unit_block || !orders || !ps->slots)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight stream tables of %d tensors", nt);
    memcpy(ps->numel, c->numel, (size_t)nt * sizeof *ps->numel);
    memcpy(ps->units, c->units, (size_t)nu * sizeof *ps->units);
    for (int p = 0; p < ZOE_PARAM_STREAM_PASSES; p++) {
        memcpy(ps->order[p], c->order[p], (size_t)ps->order_len[p] * sizeof *ps->order[p]);
        ps->cfg.order[p] = ps->order[p];
        ps->cfg.order_len[p] = ps->order_len[p];
    }
    ps->cfg.numel = ps->numel, ps->cfg.units = ps->units;
    ZOE_TRY(build_tables(ps, dp_group));
    ZOE_TRY(zoe_comm_create_for_device(dp_group, ps->dev, &ps->dp));
    ZOE_TRY(zoe_stream_create(ps->dev, &ps->copy));
    size_t ring = 0, block = 0;
    for (int u = 0; u < nu; u++) {
        if (u != c->held_unit) ring = max_size(ring, ps->unit_numel[u]);
        block = max_size(block, ps->unit_block[u]);
    }
    for (int s = 0; s < ps->num_slots; s++) {
        stream_slot *sl = &ps->slots[s];
        sl->unit = -1;
        int held = c->held_unit >= 0 && s == ps->num_slots - 1;
        ZOE_TRY(device_buffer(ps, held ? ps->unit_numel[c->held_unit] : ring, &sl->data));
        ZOE_TRY(zoe_event_create(ps->dev, &sl->fetched));
        ZOE_TRY(zoe_event_create(ps->dev, &sl->released));
        ZOE_TRY(zoe_event_record(sl->released, ps->compute));
    }
    if (d > 1) ZOE_TRY(device_buffer(ps, (size_t)d * block, &ps->staging));
    ps->io = zoe_weights_drive_io(ps->opt);
    if (!ps->io) return ZOE_OK;
    MPI_Comm world = zoe_grid_world_comm(ps->opt->grid);
    int ranks;
    MPI_Comm_size(world, &ranks);
    if (ranks > 1) ps->agree = world;
    ZOE_TRY(build_drive_plan(ps));
    return ZOE_OK;
}

zoe_status zoe_param_stream_create(zoe_optimizer *opt, MPI_Comm dp_group, zoe_device *dev,
                                   zoe_stream *compute, const zoe_param_stream_config *cfg,
                                   zoe_param_stream **out) {
    if (!out || !opt || !dev || !compute || !cfg || dp_group == MPI_COMM_NULL)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_param_stream_create: NULL argument");
    *out = NULL;
    ZOE_TRY(check_config(cfg));
    zoe_optimizer_footprint held;
    ZOE_TRY(zoe_optimizer_memory(opt, &held));
    if (held.params_numel != 0) /* a device parameter buffer */
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "weight stream: the optimizer keeps its weights on the device "
                        "(create it with params_on_host)");
    zoe_dtype host_dtype = zoe_optimizer_params_dtype(opt);
    if (zoe_dtype_size(host_dtype) != zoe_dtype_size(cfg->dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "weight stream of %s weights from a %s host partition: the conversion "
                        "on the device is in place, between dtypes of one size",
                        zoe_dtype_name(cfg->dtype), zoe_dtype_name(host_dtype));
    zoe_param_stream *ps = calloc(1, sizeof *ps);
    if (!ps) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight stream");
    ps->agree = MPI_COMM_NULL;
    ps->cfg = *cfg;
    ps->opt = opt, ps->dev = dev, ps->compute = compute;
    ps->esz = zoe_dtype_size(cfg->dtype);
    ps->host_dtype = host_dtype;
    MPI_Comm_size(dp_group, &ps->dp_size);
    MPI_Comm_rank(dp_group, &ps->dp_rank);
    zoe_status st = create(ps, dp_group);
    if (st != ZOE_OK) {
        zoe_param_stream_destroy(ps);
        return st;
    }
    *out = ps;
    return ZOE_OK;
}

static zoe_status wait_reads(zoe_param_stream *ps, stream_slot *sl, zoe_status st);

void zoe_param_stream_destroy(zoe_param_stream *ps) {
    if (!ps) return;
    for (int s = 0; ps->slots && s < ps->num_slots; s++) wait_reads(ps, &ps->slots[s], ZOE_OK);
    if (ps->copy) zoe_stream_synchronize(ps->copy);
    for (int s = 0; ps->slots && s < ps->num_slots; s++) {
        zoe_device_free(ps->dev, ps->slots[s].data);
        zoe_event_destroy(ps->slots[s].fetched);
        zoe_event_destroy(ps->slots[s].released);
    }
    zoe_device_free(ps->dev, ps->staging);
    zoe_stream_destroy(ps->copy);
    zoe_comm_destroy(ps->dp);
    free(ps->numel), free(ps->offset), free(ps->host), free(ps->pieces), free(ps->units);
    free(ps->unit_numel), free(ps->unit_block), free(ps->order[0]), free(ps->order[1]);
    free(ps->slots);
    free(ps->host_pos), free(ps->runs), free(ps->unit_runs), free(ps->tickets);
    zoe_host_free(ps->dev, ps->host_block);
    free(ps);
}

int zoe_param_stream_unit_of(const zoe_param_stream *ps, int first, int n) {
    for (int u = 0; ps && u < ps->cfg.num_units; u++)
        if (ps->units[u].first == first && ps->units[u].n == n) return u;
    return -1;
}

static char *at(const zoe_param_stream *ps, void *base, size_t element) {
    return (char *)base + element * ps->esz;
}

static char *host_buffer(const zoe_param_stream *ps, const stream_slot *sl) {
    return ps->host_ring + (size_t)(sl - ps->slots) * ps->host_slot;
}

/* Waits for the slot's drive reads (every one, after a failure too: they write its buffer);
 * st, or the first failure. */
static zoe_status wait_reads(zoe_param_stream *ps, stream_slot *sl, zoe_status st) {
    if (!sl->reads) return st;
    const zoe_drive_io_ticket *tk = ps->tickets + (size_t)(sl - ps->slots) * (size_t)ps->max_runs;
    for (int i = 0; i < sl->reads; i++) {
        zoe_status w = zoe_drive_io_wait(ps->io, tk[i]);
        if (st == ZOE_OK) st = w;
    }
    sl->reads = 0;
    return st;
}

/* The start of unit u's fetch into slot sl: its weights settled, and with the weights on drives
 * its pieces' reads into the slot's host buffer started (a failure of either kept for the end,
 * which every rank reaches). */
static zoe_status begin_fetch(zoe_param_stream *ps, int u, stream_slot *sl) {
    const zoe_param_unit *un = &ps->units[u];
    /* The exact DPU schedule's settling: the unit's buckets hold their updated weights (and,
     * on drives, have been written back there). */
    zoe_status st = zoe_optimizer_weights_ready(ps->opt, un->first, un->n);
    if (st != ZOE_OK && !ps->io) return st;
    sl->unit = u;
    sl->state = SLOT_READING;
    if (!ps->io) return ZOE_OK;
    zoe_drive_io_ticket *tk = ps->tickets + (size_t)(sl - ps->slots) * (size_t)ps->max_runs;
    for (int r = ps->unit_runs[u]; st == ZOE_OK && r < ps->unit_runs[u + 1]; r++) {
        const drive_run *run = &ps->runs[r];
        st = zoe_drive_io_read(ps->io, run->lo, host_buffer(ps, sl) + run->pos, run->bytes,
                               &tk[sl->reads]);
        if (st == ZOE_OK) sl->reads++;
    }
    /* a failure is the fetch's: its end says it, on every rank at once */
    sl->failed = st;
    return ZOE_OK;
}

/* The rest of the fetch of slot sl's unit, on the copy stream: from the host partition (or the
 * slot's host buffer, once its reads landed) to the device, gathered over DP. With the weights on
 * drives the fetch fails on every rank or on none (ps->agree). */
static zoe_status end_fetch(zoe_param_stream *ps, stream_slot *sl) {
    const int u = sl->unit;
    const zoe_param_unit *un = &ps->units[u];
    const int d = ps->dp_size, me = ps->dp_rank;
    if (ps->io) {
        zoe_status st = wait_reads(ps, sl, sl->failed);
        sl->failed = ZOE_OK;
        if (ps->agree != MPI_COMM_NULL) st = zoe_agree(ps->agree, st);
        if (st != ZOE_OK) {
            sl->unit = -1, sl->state = SLOT_EMPTY;
            return st;
        }
    }
    /* After the compute stream's last read of the slot's previous unit; not after the rest of
     * its queue: the partition is written by the host, in host order (zoe_partition_upload), so
     * the copy may run ahead of the compute it prefetches for. */
    ZOE_TRY(zoe_stream_wait_event(ps->copy, sl->released));
    void *host = zoe_optimizer_params(ps->opt);
    size_t block = ps->unit_block[u];
    for (int t = un->first; t < un->first + un->n; t++) {
        const stream_piece *pc = &ps->pieces[(size_t)t * (size_t)d + (size_t)me];
        if (!pc->count) continue;
        void *dst = d == 1 ? at(ps, sl->data, ps->offset[t] + pc->first)
                           : at(ps, ps->staging, (size_t)me * block + pc->pack);
        const void *src = ps->io ? (const void *)(host_buffer(ps, sl) + ps->host_pos[t])
                                 : at(ps, host, ps->host[t]);
        ZOE_TRY(zoe_memcpy_async(dst, src, pc->count * ps->esz, ZOE_COPY_HOST_TO_DEVICE, ps->copy));
    }
    if (d > 1) {
        ZOE_TRY(zoe_comm_all_gather(ps->dp, at(ps, ps->staging, (size_t)me * block), ps->staging,
                                    block, ps->host_dtype, ps->copy)); /* still the host's */
        for (int r = 0; r < d; r++)
            for (int t = un->first; t < un->first + un->n; t++) {
                const stream_piece *pc = &ps->pieces[(size_t)t * (size_t)d + (size_t)r];
                if (pc->count)
                    ZOE_TRY(zoe_memcpy_async(at(ps, sl->data, ps->offset[t] + pc->first),
                                             at(ps, ps->staging, (size_t)r * block + pc->pack),
                                             pc->count * ps->esz, ZOE_COPY_DEVICE_TO_DEVICE,
                                             ps->copy));
            }
    }
    /* bf16 -> fp16 (a V100 has no bf16): exact for every value in fp16's normal range
     * (kernels/adam_state.h, "fp16 weights from a bf16 master"); the padding between tensors
     * converts too, unread. */
    if (ps->host_dtype != ps->cfg.dtype)
        ZOE_TRY(zoe_convert_stream(ps->copy, sl->data, ps->cfg.dtype, sl->data, ps->host_dtype,
                                   ps->unit_numel[u]));
    ZOE_TRY(zoe_event_record(sl->fetched, ps->copy));
    sl->state = SLOT_FETCHED;
    return ZOE_OK;
}

/* Unit u into slot sl, now. */
static zoe_status fetch(zoe_param_stream *ps, int u, stream_slot *sl) {
    ZOE_TRY(begin_fetch(ps, u, sl));
    return end_fetch(ps, sl);
}

static stream_slot *slot_of(zoe_param_stream *ps, int u) {
    for (int s = 0; s < ps->num_slots; s++)
        if (ps->slots[s].unit == u) return &ps->slots[s];
    return NULL;
}

/* An empty slot for unit u: the held unit's own, or one of the ring; NULL when all are taken. */
static stream_slot *free_slot(zoe_param_stream *ps, int u) {
    int held = ps->cfg.held_unit >= 0, ring = ps->num_slots - held;
    if (held && u == ps->cfg.held_unit) {
        stream_slot *sl = &ps->slots[ring];
        return sl->state == SLOT_EMPTY ? sl : NULL;
    }
    for (int s = 0; s < ring; s++)
        if (ps->slots[s].state == SLOT_EMPTY) return &ps->slots[s];
    return NULL;
}

static zoe_status check_unit(const zoe_param_stream *ps, int u, const char *what) {
    if (u < 0 || u >= ps->cfg.num_units)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream %s: unit %d outside [0, %d)", what,
                        u, ps->cfg.num_units);
    return ZOE_OK;
}

static void addresses(const zoe_param_stream *ps, int u, const stream_slot *sl, void **weights) {
    const zoe_param_unit *un = &ps->units[u];
    for (int i = 0; i < un->n; i++) weights[i] = at(ps, sl->data, ps->offset[un->first + i]);
}

/* Unit u's next place in pass p's order after the previous acquire's, or its first (a pass
 * that starts over); -1 where it has none. The pass's cursor moves there. */
static int place(zoe_param_stream *ps, int u, int p) {
    const int *order = ps->order[p], n = ps->order_len[p];
    for (int i = ps->cursor[p] + 1; i < n; i++)
        if (order[i] == u) return ps->cursor[p] = i;
    for (int i = 0; i <= ps->cursor[p] && i < n; i++)
        if (order[i] == u) return ps->cursor[p] = i;
    return -1;
}

/* The next units of pass p after u, up to prefetch of them, into empty ring slots. With the
 * weights on drives the farthest one's reads stay in flight (its copy goes out when the next
 * unit is acquired, or when it is); the nearer ones', started by earlier acquires, have had a
 * unit's compute to land, and their copies go out now. */
static zoe_status prefetch(zoe_param_stream *ps, int u, int p) {
    const int *order = ps->order[p], n = ps->order_len[p], k = ps->cfg.prefetch;
    int pos = place(ps, u, p);
    if (pos < 0) return ZOE_OK; /* not in p's order: nothing to follow */
    for (int i = pos + 1; i < n && i <= pos + k; i++) {
        int v = order[i];
        if (v == ps->cfg.held_unit || slot_of(ps, v)) continue;
        stream_slot *sl = free_slot(ps, v);
        if (!sl) break;
        ZOE_TRY(ps->io ? begin_fetch(ps, v, sl) : fetch(ps, v, sl));
    }
    for (int i = pos + 1; ps->io && i < n && i < pos + k; i++) {
        stream_slot *sl = slot_of(ps, order[i]);
        if (sl && sl->state == SLOT_READING) ZOE_TRY(end_fetch(ps, sl));
    }
    return ZOE_OK;
}

zoe_status zoe_param_stream_acquire(zoe_param_stream *ps, int u, int pass, void **weights) {
    if (!ps || !weights) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream acquire: NULL");
    ZOE_TRY(check_unit(ps, u, "acquire"));
    if (pass < 0 || pass >= ZOE_PARAM_STREAM_PASSES)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream acquire: pass %d", pass);
    stream_slot *sl = slot_of(ps, u);
    if (sl && sl->state == SLOT_IN_USE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: unit %d acquired twice", u);
    if (!sl) {
        sl = free_slot(ps, u);
        if (!sl)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "weight stream: no free buffer for unit %d (%d held or prefetched)", u,
                            ps->num_slots);
        ZOE_TRY(fetch(ps, u, sl));
    } else if (sl->state == SLOT_READING) {
        ZOE_TRY(end_fetch(ps, sl));
    }
    sl->state = SLOT_IN_USE;
    /* The host waits for the unit's copies (not for compute): once its tensors' gradients are
     * final the host step may write their pieces of the partition (the exact schedule's
     * speculation, during this very backward), which a copy still in flight would read. */
    ZOE_TRY(zoe_event_synchronize(sl->fetched));
    ZOE_TRY(zoe_stream_wait_event(ps->compute, sl->fetched));
    addresses(ps, u, sl, weights);
    return prefetch(ps, u, pass);
}

zoe_status zoe_param_stream_release(zoe_param_stream *ps, int u) {
    if (!ps) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream release: NULL");
    ZOE_TRY(check_unit(ps, u, "release"));
    stream_slot *sl = slot_of(ps, u);
    if (!sl || sl->state != SLOT_IN_USE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: unit %d released unacquired", u);
    ZOE_TRY(zoe_event_record(sl->released, ps->compute));
    sl->unit = -1;
    sl->state = SLOT_EMPTY;
    return ZOE_OK;
}

zoe_status zoe_param_stream_stage(zoe_param_stream *ps, int u, void **weights) {
    if (!ps || !weights) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream stage: NULL");
    ZOE_TRY(check_unit(ps, u, "stage"));
    stream_slot *sl = slot_of(ps, u);
    if (sl && sl->state == SLOT_IN_USE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: unit %d staged while in use", u);
    if (!sl && !(sl = free_slot(ps, u)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: no free buffer to stage unit %d",
                        u);
    if (sl->state == SLOT_READING) ZOE_TRY(end_fetch(ps, sl)); /* a prefetch, now overwritten */
    ZOE_TRY(zoe_stream_wait_event(ps->compute, sl->released));
    sl->unit = u;
    sl->state = SLOT_IN_USE;
    addresses(ps, u, sl, weights);
    return ZOE_OK;
}

zoe_status zoe_param_stream_store(zoe_param_stream *ps, int u) {
    if (!ps) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream store: NULL");
    ZOE_TRY(check_unit(ps, u, "store"));
    stream_slot *sl = slot_of(ps, u);
    if (!sl || sl->state != SLOT_IN_USE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weight stream: unit %d stored unstaged", u);
    const zoe_param_unit *un = &ps->units[u];
    void *host = zoe_optimizer_params(ps->opt);
    /* fp16 weights into a bf16 master: to nearest even, as the resident path's
     * zoe_optimizer_init_from_params rounds them */
    if (ps->host_dtype != ps->cfg.dtype)
        ZOE_TRY(zoe_convert_stream(ps->compute, sl->data, ps->host_dtype, sl->data, ps->cfg.dtype,
                                   ps->unit_numel[u]));
    /* (with the weights on drives through the slot's host buffer, written through to them) */
    for (int t = un->first; t < un->first + un->n; t++) {
        const stream_piece *pc = &ps->pieces[(size_t)t * (size_t)ps->dp_size + (size_t)ps->dp_rank];
        void *dst =
            ps->io ? (void *)(host_buffer(ps, sl) + ps->host_pos[t]) : at(ps, host, ps->host[t]);
        if (pc->count)
            ZOE_TRY(zoe_memcpy_async(dst, at(ps, sl->data, ps->offset[t] + pc->first),
                                     pc->count * ps->esz, ZOE_COPY_DEVICE_TO_HOST, ps->compute));
    }
    ZOE_TRY(zoe_stream_synchronize(ps->compute));
    for (int t = un->first; ps->io && t < un->first + un->n; t++) {
        const stream_piece *pc = &ps->pieces[(size_t)t * (size_t)ps->dp_size + (size_t)ps->dp_rank];
        if (pc->count)
            ZOE_TRY(zoe_optimizer_params_copy(ps->opt, ps->host[t], pc->count,
                                              host_buffer(ps, sl) + ps->host_pos[t], 1));
    }
    return zoe_param_stream_release(ps, u);
}
