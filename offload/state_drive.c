/* The host state on drives (zoe_optimizer_config.state_paths, zoe-train --offload nvme): the
 * host arrays the step reads and writes (the master unless it is the parameters, the moments,
 * the int8 scales) live in the drive engine's scratch space (runtime/drive_io.h), bucket by
 * bucket, each bucket's arrays back to back in the bytes of host memory; host memory holds a ring
 * of buckets. Whoever touches the state sees one bucket at a time through the window
 * (zoe_host_state_at): the host step streams the buckets through the ring (read ahead, update,
 * write behind), everything else pages them in one at a time (zoe_state_paged). The drive files
 * are scratch: a checkpoint reads the state through the window, a resume writes it back.
 *
 * Explained in docs/nvme.md, "State and weights on drives". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "offload/optimizer_impl.h"
#include "runtime/clock.h"
#include "runtime/error.h"

enum { SLOT_IDLE = 0, SLOT_READING, SLOT_WRITING };

static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* Bytes of host array a (ZOE_STATE_ARRAYS order) for n elements; 0: the array is not paged. */
static size_t array_bytes(const zoe_state_sizes *z, int a, size_t n) {
    const zoe_adam_state_dtypes *dt = &z->host_dtypes;
    switch (a) {
    case 0: /* the master that is the streamed weights is paged where they are on drives */
        return z->h_master && (!z->params_are_master || z->weights_on_drive)
                   ? n * zoe_adam_state_esize(dt->master)
                   : 0;
    case 1:
        return n * zoe_adam_state_esize(dt->exp_avg);
    case 2:
        return n * zoe_adam_state_esize(dt->exp_avg_sq);
    case 3:
        return dt->exp_avg == ZOE_I8 ? zoe_adam_int8_blocks(n) * sizeof(float) : 0;
    case 4:
        return dt->exp_avg_sq == ZOE_I8 ? zoe_adam_int8_blocks(n) * sizeof(float) : 0;
    default: /* ZOE_STATE_WEIGHTS */
        return n * z->weights_esize;
    }
}

/* Where array a of a bucket of n elements starts in its region (and a = ZOE_STATE_ARRAYS: the
 * region's bytes): the arrays back to back, each at the drive alignment. */
static size_t array_offset(const zoe_state_sizes *z, int a, size_t n) {
    size_t off = 0;
    for (int i = 0; i < a; i++) off += round_up(array_bytes(z, i, n), ZOE_STATE_DRIVE_ALIGN);
    return off;
}

void zoe_state_drive_sizes(zoe_state_sizes *z, const zoe_layout *lay) {
    size_t largest = 0, all = 0;
    for (int b = 0; b < lay->num_buckets; b++) {
        size_t r = array_offset(z, ZOE_STATE_ARRAYS, lay->buckets[b].part);
        largest = r > largest ? r : largest;
        all += r;
    }
    z->drive_slot = largest;
    z->drive_bytes = all;
    if (z->drive_grads) { /* per bucket one region per gradient partition, after the state's */
        size_t gsz = zoe_dtype_size(z->grad_dtype), glargest = 0, gall = 0;
        for (int b = 0; b < lay->num_buckets; b++) {
            size_t r = round_up(lay->buckets[b].part * gsz, ZOE_STATE_DRIVE_ALIGN);
            glargest = r > glargest ? r : glargest;
            gall += r;
        }
        z->drive_grad_slot = glargest;
        z->drive_slot += glargest; /* a ring slot shows the bucket's gradient after its state */
        z->drive_bytes += gall * (size_t)z->h_grads;
        z->drive_stage = (size_t)z->drive_stage_slots * glargest;
    }
    /* 2 ahead + 1 slots, or one per bucket where there are fewer: bucket b always takes slot
     * b % slots, and the slot's last bucket, b - slots, is then never one of this step's */
    z->drive_slots = 2 * z->drive_ahead + 1;
    if (z->drive_slots > lay->num_buckets) z->drive_slots = lay->num_buckets;
    size_t paged = 0; /* the state the drives hold instead of host memory (not the weights) */
    for (int a = 0; a < ZOE_STATE_WEIGHTS; a++) paged += array_bytes(z, a, z->h_numel);
    if (z->drive_grads) paged += z->h_numel * zoe_dtype_size(z->grad_dtype) * (size_t)z->h_grads;
    z->drive_paged = paged;
}

/* Shows bucket b's arrays in slot s through the window: zoe_host_state_at(opt, a, h) for h in
 * the bucket's host range addresses the slot. */
static void show(zoe_optimizer *opt, int b, int s) {
    zoe_state_drive *d = opt->drive;
    size_t n = d->numel[b];
    char *slot = d->ring + (size_t)s * d->slot_bytes;
    void **arrays[] = {&opt->h_master,           &opt->h_m,   &opt->h_v, (void **)&opt->h_m_scale,
                       (void **)&opt->h_v_scale, &opt->params};
    for (int a = 0; a < ZOE_STATE_ARRAYS; a++)
        if (array_bytes(&opt->sz, a, n)) *arrays[a] = slot + array_offset(&opt->sz, a, n);
    for (int a = 0; a < 3; a++)
        if (array_bytes(&opt->sz, a, n)) opt->win_lo[a] = d->h0[b];
    if (d->grad_buf >= 0) {
        opt->h_grad[d->grad_buf] = slot + d->grad_at;
        opt->win_grad = d->h0[b];
    }
    if (opt->sz.weights_on_drive) { /* partition coordinates are host ones (no device share) */
        if (opt->sz.params_are_master) opt->params = opt->h_master;
        opt->params_lo = d->h0[b];
    }
    d->shown = b;
}

/* Where bucket b's region of gradient partition buf starts in the scratch space (with one
 * partition, buf 1 is buf 0: a stale schedule's snapshot alternates the index, not the array). */
static size_t grad_region(const zoe_state_drive *d, int b, int buf) {
    return d->grad_offset[b] + (size_t)(buf % d->grad_partitions) * d->grad_span;
}

/* Starts moving bucket b's gradient (of the partition the pass shows) into or out of slot s. */
static zoe_status grad_start(zoe_state_drive *d, int b, int s, int write) {
    char *at = d->ring + (size_t)s * d->slot_bytes + d->grad_at;
    d->grad_pending[s] = 1;
    size_t off = grad_region(d, b, d->grad_buf);
    return write ? zoe_drive_io_write(d->io, off, at, d->grad_bytes[b], &d->grad_ticket[s])
                 : zoe_drive_io_read(d->io, off, at, d->grad_bytes[b], &d->grad_ticket[s]);
}

/* Starts moving bucket b between slot s and the drives. A bucket never written reads as zeros
 * (the scratch files are new): its slot is zeroed instead of read (the initialisation's and a
 * resume's page-ins). */
static zoe_status start(zoe_optimizer *opt, int b, int s, int write) {
    zoe_state_drive *d = opt->drive;
    char *slot = d->ring + (size_t)s * d->slot_bytes;
    d->slot_bucket[s] = b;
    if (!write && !d->written[b]) {
        memset(slot, 0, d->bytes[b]);
        d->slot_state[s] = SLOT_IDLE;
        return ZOE_OK;
    }
    d->slot_state[s] = write ? SLOT_WRITING : SLOT_READING;
    d->written[b] |= write;
    return write ? zoe_drive_io_write(d->io, d->offset[b], slot, d->bytes[b], &d->ticket[s])
                 : zoe_drive_io_read(d->io, d->offset[b], slot, d->bytes[b], &d->ticket[s]);
}

static zoe_status finish(zoe_state_drive *d, int s) {
    zoe_status st = ZOE_OK;
    if (d->slot_state[s] != SLOT_IDLE) {
        d->slot_state[s] = SLOT_IDLE;
        st = zoe_drive_io_wait(d->io, d->ticket[s]);
    }
    if (d->grad_pending && d->grad_pending[s]) {
        d->grad_pending[s] = 0;
        zoe_status w = zoe_drive_io_wait(d->io, d->grad_ticket[s]);
        if (st == ZOE_OK) st = w;
    }
    return st;
}

/* Waits for every request in flight (after a failure too: the buffers must be free). */
static zoe_status drain(zoe_state_drive *d, zoe_status st) {
    for (int s = 0; s < d->slots; s++) {
        zoe_status w = finish(d, s);
        if (st == ZOE_OK) st = w;
    }
    return st;
}

/* The bucket paged into slot 0 goes back to the drive if it was written. */
static zoe_status put_back(zoe_optimizer *opt) {
    zoe_state_drive *d = opt->drive;
    if (d->cached >= 0 && d->dirty) {
        ZOE_TRY(start(opt, d->cached, 0, 1));
        ZOE_TRY(finish(d, 0));
    }
    d->dirty = 0;
    return ZOE_OK;
}

/* Bucket b in slot 0, shown through the window (with_state: its state read unless it is there
 * already; the gradient the pass shows read always). */
static zoe_status page_in(zoe_optimizer *opt, int b, int with_state) {
    zoe_state_drive *d = opt->drive;
    int fresh = with_state && d->cached != b;
    if (fresh) {
        ZOE_TRY(put_back(opt));
        d->cached = -1;
        ZOE_TRY(start(opt, b, 0, 0));
    }
    if (d->grad_buf >= 0) ZOE_TRY(grad_start(d, b, 0, 0));
    ZOE_TRY(finish(d, 0));
    if (fresh) d->cached = b; /* only once its bytes are there */
    show(opt, b, 0);
    return ZOE_OK;
}

/* Which gradient partition the next pass shows (gradients on drives), and whether it goes back
 * to the drive; -1: none. */
static void show_grads(zoe_optimizer *opt, int grad_buf, int grad_write) {
    zoe_state_drive *d = opt->drive;
    d->grad_buf = opt->sz.drive_grads ? grad_buf : -1;
    d->grad_write = d->grad_buf >= 0 && grad_write;
}

/* A pass's request for bucket b in slot s: the state, and the gradient the pass shows (read;
 * written back where the pass writes it). */
static zoe_status start_pass(zoe_optimizer *opt, int b, int s, int write) {
    zoe_state_drive *d = opt->drive;
    ZOE_TRY(start(opt, b, s, write));
    return d->grad_buf >= 0 && (!write || d->grad_write) ? grad_start(d, b, s, write) : ZOE_OK;
}

/* The bucket holding host coordinate h (the last one whose range starts at or before it). */
static int bucket_of(const zoe_state_drive *d, size_t h) {
    int lo = 0, hi = d->num_buckets - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->h0[mid] <= h)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The paged passes: fn over [h0, h1) a bucket at a time, with the bucket's state (with_state)
 * and gradient partition grad_buf (-1: none) shown. */
static zoe_status paged_pass(zoe_optimizer *opt, size_t h0, size_t h1, int write, int grad_buf,
                             int grad_write, int with_state, zoe_span_fn fn, void *ctx) {
    zoe_state_drive *d = opt->drive;
    show_grads(opt, grad_buf, grad_write);
    for (int b = bucket_of(d, h0); b < d->num_buckets && d->h0[b] < h1; b++) {
        size_t a = d->h0[b] > h0 ? d->h0[b] : h0, e = zoe_min_size(d->h0[b] + d->numel[b], h1);
        if (a >= e) continue;
        ZOE_TRY(page_in(opt, b, with_state));
        ZOE_TRY(fn(opt, a, e, ctx));
        d->dirty |= write;
        if (d->grad_write) {
            ZOE_TRY(grad_start(d, b, 0, 1));
            ZOE_TRY(finish(d, 0));
        }
    }
    /* Weights on drives are read from the drive by the weight stream, not through these pages:
     * what was written goes back at once. */
    return opt->sz.weights_on_drive ? put_back(opt) : ZOE_OK;
}

/* A pass never runs inside another's fn: both page through slot 0, and the inner one would show
 * another gradient partition (or none) and put the outer one's bucket back. What needs the
 * weights and a gradient partition at once asks one pass for both (zoe_state_paged_grads). */
static zoe_status paged(zoe_optimizer *opt, size_t h0, size_t h1, int write, int grad_buf,
                        int grad_write, int with_state, zoe_span_fn fn, void *ctx) {
    zoe_state_drive *d = opt->drive;
    if (h0 >= h1) return ZOE_OK;
    if (!d) return fn(opt, h0, h1, ctx);
    if (d->paging)
        return zoe_fail(ZOE_ERR_INTERNAL,
                        "a paged pass over the drives' state [%zu, %zu) inside another", h0, h1);
    d->paging = 1;
    zoe_status st = paged_pass(opt, h0, h1, write, grad_buf, grad_write, with_state, fn, ctx);
    d->paging = 0;
    return st;
}

zoe_status zoe_state_paged_grads(zoe_optimizer *opt, size_t h0, size_t h1, int write, int grad_buf,
                                 int grad_write, zoe_span_fn fn, void *ctx) {
    return paged(opt, h0, h1, write, grad_buf, grad_write, 1, fn, ctx);
}

zoe_status zoe_state_paged(zoe_optimizer *opt, size_t h0, size_t h1, int write, zoe_span_fn fn,
                           void *ctx) {
    return paged(opt, h0, h1, write, -1, 0, 1, fn, ctx);
}

zoe_status zoe_grads_paged(zoe_optimizer *opt, size_t h0, size_t h1, int buf, int write,
                           zoe_span_fn fn, void *ctx) {
    return paged(opt, h0, h1, 0, buf, write, 0, fn, ctx);
}

zoe_status zoe_state_streamed(zoe_optimizer *opt, int grad_buf, int grad_write, zoe_span_fn fn,
                              void *ctx) {
    zoe_state_drive *d = opt->drive;
    if (!d) return fn(opt, 0, opt->sz.h_numel, ctx);
    show_grads(opt, grad_buf, grad_write);
    ZOE_TRY(put_back(opt)); /* the ring's slot 0 is the stream's now */
    d->cached = -1;
    const int nb = d->num_buckets, k = d->ahead, r = d->slots;
    zoe_status st = ZOE_OK;
    double waited = 0, t0; /* ms blocked on the drives */
    for (int b = 0; b < k && b < nb && st == ZOE_OK; b++) st = start_pass(opt, b, b % r, 0);
    for (int b = 0; b < nb && st == ZOE_OK; b++) {
        int next = b + k, s = b % r;
        if (next < nb) { /* its slot last held bucket next - r, written k + 1 buckets ago */
            t0 = zoe_clock_ms();
            st = finish(d, next % r);
            waited += zoe_clock_ms() - t0;
            if (st == ZOE_OK) st = start_pass(opt, next, next % r, 0);
        }
        t0 = zoe_clock_ms();
        if (st == ZOE_OK) st = finish(d, s);
        waited += zoe_clock_ms() - t0;
        if (st != ZOE_OK) break;
        show(opt, b, s);
        st = fn(opt, d->h0[b], d->h0[b] + d->numel[b], ctx);
        if (st == ZOE_OK) st = start_pass(opt, b, s, 1);
    }
    t0 = zoe_clock_ms();
    st = drain(d, st);
    d->ms_wait = waited + zoe_clock_ms() - t0;
    return st;
}

/* The accumulation's staging. A slot is free (the write of its last bucket maybe still in
 * flight), read ahead (bucket stage_bucket[s] of partition stage_buf[s], its read in flight or
 * landed) or open (being summed). Buckets complete in the backward's order, the same every
 * micro-batch, so the order the last micro-batch staged them in predicts this one's: when a
 * bucket is staged, the next ZOE_GRAD_STAGE_AHEAD of the prediction are read ahead, and their
 * reads land during the backward's compute and the sums and writes of the buckets before them.
 * A bucket not read ahead (the order changed, or its read ahead was of the other partition) is
 * read at its turn, as without the read ahead.
 *
 * No read ahead races a write of its region: it is only started for a bucket not staged yet in
 * this micro-batch, whose region was last written in an earlier one, and every micro-batch ends
 * with zoe_grad_stage_drain, which waits for its writes. What is read ahead and not taken by
 * then is dropped there (the next micro-batch rewrites the region). */

/* Waits for staging slot s's request, if any (the accumulation's wait for the drives). */
static zoe_status stage_wait(zoe_state_drive *d, int s) {
    if (!d->stage_busy[s]) return ZOE_OK;
    d->stage_busy[s] = 0;
    double t0 = zoe_clock_ms();
    zoe_status st = zoe_drive_io_wait(d->io, d->stage_ticket[s]);
    d->ms_stage_wait += zoe_clock_ms() - t0;
    return st;
}

static char *stage_slot(const zoe_optimizer *opt, int s) {
    return opt->drive->stage + (size_t)s * opt->sz.drive_grad_slot;
}

/* A free slot, its last write landed, in *slot: slots are taken in turn, so the first free one
 * from stage_next holds the oldest write. -1 when none is free. */
static zoe_status stage_take(zoe_state_drive *d, int *slot) {
    *slot = -1;
    for (int i = 0; i < d->stage_slots; i++) {
        int s = (d->stage_next + i) % d->stage_slots;
        if (d->stage_state[s] != ZOE_STAGE_FREE) continue;
        d->stage_next = (s + 1) % d->stage_slots;
        *slot = s;
        return stage_wait(d, s);
    }
    return ZOE_OK;
}

/* Starts the read of bucket b's region of partition buf into a free slot, unless b is staged in
 * this micro-batch already, is read ahead already, or ZOE_GRAD_STAGE_AHEAD buckets are (or the
 * staging has no slots to read ahead into: one micro-batch a step). */
static zoe_status read_ahead(zoe_optimizer *opt, int b, int buf) {
    zoe_state_drive *d = opt->drive;
    if (d->stage_done[b] || d->stage_slots < ZOE_GRAD_STAGE_SLOTS) return ZOE_OK;
    int ahead = 0, s;
    for (s = 0; s < d->stage_slots; s++) {
        if (d->stage_state[s] != ZOE_STAGE_AHEAD) continue;
        if (d->stage_bucket[s] == b) return ZOE_OK;
        ahead++;
    }
    if (ahead >= ZOE_GRAD_STAGE_AHEAD) return ZOE_OK;
    ZOE_TRY(stage_take(d, &s));
    if (s < 0) return ZOE_OK;
    ZOE_TRY(zoe_drive_io_read(d->io, grad_region(d, b, buf), stage_slot(opt, s), d->grad_bytes[b],
                              &d->stage_ticket[s]));
    d->stage_busy[s] = 1;
    d->stage_state[s] = ZOE_STAGE_AHEAD;
    d->stage_bucket[s] = b;
    d->stage_buf[s] = buf;
    return ZOE_OK;
}

zoe_status zoe_grad_stage_micro_batch(zoe_optimizer *opt, int buf, int reads) {
    zoe_state_drive *d = opt->drive;
    if (!d || !d->stage) return ZOE_OK;
    ZOE_TRY(zoe_grad_stage_drain(opt)); /* nothing of an earlier micro-batch is in flight */
    if (d->stage_count > 0) {           /* the last micro-batch's order is the prediction */
        int *last = d->stage_order;
        d->stage_order = d->stage_now;
        d->stage_now = last;
        d->stage_order_count = d->stage_count;
        for (int b = 0; b < d->num_buckets; b++) d->stage_rank[b] = -1;
        for (int i = 0; i < d->stage_order_count; i++) d->stage_rank[d->stage_order[i]] = i;
    }
    d->stage_count = 0;
    memset(d->stage_done, 0, (size_t)d->num_buckets);
    if (!reads) { /* a step's accumulation begins */
        d->ms_stage_wait = 0;
        d->stage_hits = d->stage_misses = 0;
    }
    for (int i = 0; reads && i < ZOE_GRAD_STAGE_AHEAD && i < d->stage_order_count; i++)
        ZOE_TRY(read_ahead(opt, d->stage_order[i], buf));
    return ZOE_OK;
}

zoe_status zoe_grad_stage_begin(zoe_optimizer *opt, int b, int buf, int assign, void **stage) {
    zoe_state_drive *d = opt->drive;
    if (d->stage_open >= 0)
        d->stage_state[d->stage_open] = ZOE_STAGE_FREE; /* one left by a failure */
    d->stage_open = -1;
    int s = -1;
    for (int i = 0; i < d->stage_slots; i++)
        if (d->stage_state[i] == ZOE_STAGE_AHEAD && d->stage_bucket[i] == b) s = i;
    if (s >= 0 && (assign || d->stage_buf[s] != buf)) { /* not the bytes it needs: dropped */
        ZOE_TRY(stage_wait(d, s));
        d->stage_state[s] = ZOE_STAGE_FREE;
        s = -1;
    }
    const int ahead = s >= 0;
    if (!ahead) ZOE_TRY(stage_take(d, &s));
    if (s < 0) return zoe_fail(ZOE_ERR_INTERNAL, "gradient staging: no free slot for bucket %d", b);
    char *at = stage_slot(opt, s);
    d->stage_state[s] = ZOE_STAGE_OPEN;
    d->stage_bucket[s] = b;
    d->stage_buf[s] = buf;
    d->stage_open = s;
    d->stage_done[b] = 1;
    if (d->stage_count < d->num_buckets) d->stage_now[d->stage_count++] = b;
    if (assign) { /* the padding between tensors too: no stale bytes go to the drive */
        memset(at, 0, d->grad_bytes[b]);
        *stage = at;
        return ZOE_OK;
    }
    /* read, add, write: the micro-batches before this one's sums */
    if (!ahead) {
        ZOE_TRY(zoe_drive_io_read(d->io, grad_region(d, b, buf), at, d->grad_bytes[b],
                                  &d->stage_ticket[s]));
        d->stage_busy[s] = 1;
    }
    d->stage_hits += ahead;
    d->stage_misses += !ahead;
    /* the buckets the prediction puts next, while b's read lands (none where it has not seen b) */
    const int seen = d->stage_rank[b];
    for (int i = seen + 1; seen >= 0 && i <= seen + ZOE_GRAD_STAGE_AHEAD; i++)
        if (i < d->stage_order_count) ZOE_TRY(read_ahead(opt, d->stage_order[i], buf));
    ZOE_TRY(stage_wait(d, s));
    *stage = at;
    return ZOE_OK;
}

zoe_status zoe_grad_stage_end(zoe_optimizer *opt, int b, int buf, int wait) {
    zoe_state_drive *d = opt->drive;
    int s = d->stage_open;
    if (s < 0 || d->stage_bucket[s] != b)
        return zoe_fail(ZOE_ERR_INTERNAL, "gradient staging: bucket %d ended, %d staged", b,
                        s < 0 ? -1 : d->stage_bucket[s]);
    d->stage_open = -1;
    d->stage_state[s] = ZOE_STAGE_FREE;
    ZOE_TRY(zoe_drive_io_write(d->io, grad_region(d, b, buf), stage_slot(opt, s), d->grad_bytes[b],
                               &d->stage_ticket[s]));
    d->stage_busy[s] = 1;
    return wait ? stage_wait(d, s) : ZOE_OK;
}

zoe_status zoe_grad_stage_drain(zoe_optimizer *opt) {
    zoe_state_drive *d = opt->drive;
    zoe_status st = ZOE_OK;
    for (int s = 0; d && d->stage && s < d->stage_slots; s++) {
        zoe_status w = stage_wait(d, s);
        if (st == ZOE_OK) st = w;
        if (d->stage_state[s] == ZOE_STAGE_AHEAD)
            d->stage_state[s] = ZOE_STAGE_FREE; /* not taken */
    }
    return st;
}

/* A run id every rank shares: world rank 0's process id and clock, broadcast. */
static zoe_status run_id(zoe_optimizer *opt, char id[32]) {
    unsigned long long v[1] = {((unsigned long long)getpid() << 32) ^
                               (unsigned long long)time(NULL)};
    int rc = MPI_Bcast(v, 1, MPI_UNSIGNED_LONG_LONG, 0, zoe_grid_world_comm(opt->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Bcast of the scratch files' run id");
    snprintf(id, 32, "%llx", v[0]);
    return ZOE_OK;
}

/* Splits the comma-separated directories into paths (pointers into text, which it edits). */
static int split_paths(char *text, const char **paths, int max) {
    int n = 0;
    for (char *p = strtok(text, ","); p && n < max; p = strtok(NULL, ",")) paths[n++] = p;
    return n;
}

zoe_status zoe_state_drive_create(zoe_optimizer *opt) {
    const zoe_layout *lay = &opt->lay;
    zoe_state_drive *d = calloc(1, sizeof *d);
    if (!d) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "state drive struct");
    opt->drive = d;
    d->cached = d->shown = d->grad_buf = -1;
    d->ahead = opt->sz.drive_ahead;
    d->slots = opt->sz.drive_slots;
    d->slot_bytes = opt->sz.drive_slot;
    d->num_buckets = lay->num_buckets;
    int nb = d->num_buckets;
    d->h0 = calloc((size_t)nb, sizeof *d->h0);
    d->numel = calloc((size_t)nb, sizeof *d->numel);
    d->offset = calloc((size_t)nb, sizeof *d->offset);
    d->bytes = calloc((size_t)nb, sizeof *d->bytes);
    d->slot_state = calloc((size_t)d->slots, sizeof *d->slot_state);
    d->slot_bucket = calloc((size_t)d->slots, sizeof *d->slot_bucket);
    d->ticket = calloc((size_t)d->slots, sizeof *d->ticket);
    d->grad_offset = calloc((size_t)nb, sizeof *d->grad_offset);
    d->grad_bytes = calloc((size_t)nb, sizeof *d->grad_bytes);
    d->grad_pending = calloc((size_t)d->slots, sizeof *d->grad_pending);
    d->grad_ticket = calloc((size_t)d->slots, sizeof *d->grad_ticket);
    d->written = calloc((size_t)nb, sizeof *d->written);
    d->stage_order = calloc((size_t)nb, sizeof *d->stage_order);
    d->stage_rank = calloc((size_t)nb, sizeof *d->stage_rank);
    d->stage_now = calloc((size_t)nb, sizeof *d->stage_now);
    d->stage_done = calloc((size_t)nb, sizeof *d->stage_done);
    d->stage_open = -1;
    d->stage_slots = opt->sz.drive_stage_slots;
    d->paths_text = strdup(opt->cfg.state_paths);
    d->paths_given = strdup(opt->cfg.state_paths);
    opt->cfg.state_paths = d->paths_given; /* the caller's string may go */
    if (!d->paths_given || !d->h0 || !d->numel || !d->offset || !d->bytes || !d->slot_state ||
        !d->slot_bucket || !d->ticket || !d->written || !d->paths_text || !d->grad_offset ||
        !d->grad_bytes || !d->grad_pending || !d->grad_ticket || !d->stage_order ||
        !d->stage_rank || !d->stage_now || !d->stage_done)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "state drive tables of %d buckets", nb);
    size_t at = 0;
    for (int b = 0; b < nb; b++) {
        d->stage_rank[b] = -1; /* no staging order seen yet */
        d->h0[b] = lay->buckets[b].part_offset - opt->sz.h_lo;
        d->numel[b] = lay->buckets[b].part;
        d->offset[b] = at;
        d->bytes[b] = array_offset(&opt->sz, ZOE_STATE_ARRAYS, d->numel[b]);
        at += d->bytes[b];
    }
    const zoe_state_sizes *z = &opt->sz;
    if (z->drive_grads) { /* then the gradient regions: partition 0's buckets, partition 1's */
        d->grad_at = z->drive_slot - z->drive_grad_slot;
        size_t g0 = at;
        for (int b = 0; b < nb; b++) {
            d->grad_offset[b] = at;
            d->grad_bytes[b] =
                round_up(d->numel[b] * zoe_dtype_size(z->grad_dtype), ZOE_STATE_DRIVE_ALIGN);
            at += d->grad_bytes[b];
        }
        d->grad_span = at - g0;
        d->grad_partitions = z->h_grads;
        at += d->grad_span * (size_t)(z->h_grads - 1);
    }
    const char *paths[ZOE_STATE_MAX_PATHS];
    int num_paths = split_paths(d->paths_text, paths, ZOE_STATE_MAX_PATHS);
    if (num_paths == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "state_paths '%s' names no directory",
                        opt->cfg.state_paths);
    char id[32];
    ZOE_TRY(run_id(opt, id));
    int world_rank = 0;
    MPI_Comm_rank(zoe_grid_world_comm(opt->grid), &world_rank);
    zoe_drive_io_config dc = zoe_drive_io_config_init();
    dc.paths = paths;
    dc.num_paths = num_paths;
    dc.bytes = at;
    dc.rank = world_rank;
    dc.run_id = id;
    /* Every rank opens its files or none goes on (one without room fails alone otherwise). */
    zoe_status opened = zoe_drive_io_open(&dc, &d->io);
    int worst = (int)opened;
    int rc =
        MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, zoe_grid_world_comm(opt->grid));
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the scratch files' opening");
    if (opened != ZOE_OK) return opened;
    if (worst != ZOE_OK)
        return zoe_fail((zoe_status)worst, "another rank could not open its scratch files");
    size_t align = zoe_drive_io_alignment(d->io);
    if (align == 0 || ZOE_STATE_DRIVE_ALIGN % align != 0)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "the drives' alignment %zu does not divide the state's %d bytes", align,
                        ZOE_STATE_DRIVE_ALIGN);
    d->ring = zoe_drive_io_buffer_alloc((size_t)d->slots * d->slot_bytes);
    if (!d->ring)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "state ring of %d buckets of %zu bytes", d->slots,
                        d->slot_bytes);
    opt->mem.host_bytes += (size_t)d->slots * d->slot_bytes;
    opt->mem.drive_ring_bytes += (size_t)d->slots * d->slot_bytes;
    opt->mem.drive_bytes += at;
    if (z->drive_grads) {
        d->stage = zoe_drive_io_buffer_alloc(z->drive_stage);
        if (!d->stage)
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "gradient staging of %zu bytes", z->drive_stage);
        opt->mem.host_bytes += z->drive_stage;
        opt->mem.drive_ring_bytes += z->drive_stage;
    }
    /* No pass of zeros over the drives: the files are new (O_EXCL) and preallocated, so every
     * byte reads as zero until written (unwritten extents, a tmpfs's zeroed pages), and nothing
     * reads what a file held before. The ring's pages are touched now, not in the first step. */
    memset(d->ring, 0, (size_t)d->slots * d->slot_bytes);
    zoe_log(ZOE_LOG_INFO,
            "optimizer state%s on drives (%s): %zu bytes in %d buckets over %d path(s); a ring "
            "of %d buckets (%zu bytes) in host memory, %d read ahead",
            z->drive_grads             ? " and gradient partition"
            : opt->sz.weights_on_drive ? " and weights"
                                       : "",
            zoe_drive_io_engine_name(d->io), at, nb, num_paths, d->slots,
            (size_t)d->slots * d->slot_bytes, d->ahead);
    return ZOE_OK;
}

zoe_drive_io *zoe_weights_drive_io(const zoe_optimizer *opt) {
    return opt->sz.weights_on_drive && opt->drive ? opt->drive->io : NULL;
}

zoe_status zoe_weights_drive_offset(const zoe_optimizer *opt, size_t x, size_t *offset,
                                    size_t *contiguous) {
    const zoe_state_drive *d = opt->drive;
    if (!opt->sz.weights_on_drive || !d || x >= opt->sz.h_numel)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "weights on drives: no weight at partition element %zu", x);
    int b = bucket_of(d, x);
    int a = opt->sz.params_are_master ? 0 : ZOE_STATE_WEIGHTS;
    size_t esz = a ? opt->sz.weights_esize : zoe_adam_state_esize(opt->sz.host_dtypes.master);
    *offset = d->offset[b] + array_offset(&opt->sz, a, d->numel[b]) + (x - d->h0[b]) * esz;
    *contiguous = d->h0[b] + d->numel[b] - x;
    return ZOE_OK;
}

void zoe_state_drive_destroy(zoe_optimizer *opt) {
    zoe_state_drive *d = opt->drive;
    if (!d) return;
    if (d->io && d->slot_state) drain(d, ZOE_OK);
    if (d->io) zoe_grad_stage_drain(opt);
    zoe_drive_io_destroy(d->io);
    zoe_drive_io_buffer_free(d->ring);
    zoe_drive_io_buffer_free(d->stage);
    free(d->grad_offset), free(d->grad_bytes), free(d->grad_pending), free(d->grad_ticket);
    free(d->h0), free(d->numel), free(d->offset), free(d->bytes);
    free(d->slot_state), free(d->slot_bucket), free(d->ticket), free(d->written);
    free(d->stage_order), free(d->stage_rank), free(d->stage_now), free(d->stage_done);
    free(d->paths_text), free(d->paths_given);
    free(d);
    opt->drive = NULL;
}
