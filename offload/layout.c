/* The flat layout: buckets of whole tensors, cut into 64-byte-aligned DP partitions.
 *
 * Explained in docs/offload.md, "Layout". */
#include <stdlib.h>
#include <string.h>
#include "offload/layout.h"
#include "runtime/error.h"

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

void zoe_layout_free(zoe_layout *lay) {
    if (!lay) return;
    for (int t = 0; lay->names && t < lay->num_tensors; t++) free(lay->names[t]);
    free(lay->names), free(lay->numel), free(lay->offset), free(lay->replicated);
    free(lay->no_decay);
    free(lay->bucket_of), free(lay->buckets), free(lay->segments);
    memset(lay, 0, sizeof *lay);
}

/* Appends seg to the segments, merging it into the previous one when it continues it, in the
 * partition and in the parameter buffer, with the same counting and decay (never into a
 * segment below index floor: device and host segments stay apart). */
static void push_segment(zoe_layout *lay, int floor, zoe_segment seg) {
    if (seg.len == 0) return;
    zoe_segment *last = lay->num_segments > floor ? &lay->segments[lay->num_segments - 1] : NULL;
    if (last && last->offset + last->len == seg.offset && last->flat + last->len == seg.flat &&
        last->counted == seg.counted && last->no_decay == seg.no_decay &&
        last->replicated == seg.replicated) {
        last->len += seg.len;
        return;
    }
    lay->segments[lay->num_segments++] = seg;
}

/* The real elements of every bucket partition in [lo, hi) of partition coordinates, split at
 * tensor boundaries where the counting or the decay changes. */
static void add_segments(zoe_layout *lay, size_t lo, size_t hi, int dp_rank,
                         int counted_replicated) {
    int floor = lay->num_segments;
    for (int b = 0; b < lay->num_buckets; b++) {
        const zoe_bucket *bk = &lay->buckets[b];
        size_t rank_start = (size_t)dp_rank * bk->part; /* bucket-local */
        for (int t = bk->first_tensor; t < bk->first_tensor + bk->num_tensors; t++) {
            size_t t_lo = lay->offset[t] - bk->flat_offset, t_hi = t_lo + lay->numel[t];
            size_t a = t_lo > rank_start ? t_lo : rank_start;
            size_t e = t_hi < rank_start + bk->part ? t_hi : rank_start + bk->part;
            if (a >= e) continue;
            size_t p_lo = bk->part_offset + (a - rank_start), p_hi = p_lo + (e - a);
            if (p_lo < lo) p_lo = lo;
            if (p_hi > hi) p_hi = hi;
            if (p_lo >= p_hi) continue;
            push_segment(
                lay, floor,
                (zoe_segment){.offset = p_lo,
                              .len = p_hi - p_lo,
                              .flat = bk->flat_offset + rank_start + (p_lo - bk->part_offset),
                              .counted = !lay->replicated[t] || counted_replicated,
                              .no_decay = lay->no_decay[t],
                              .replicated = lay->replicated[t]});
        }
    }
}

zoe_status zoe_layout_build(zoe_layout *lay, const zoe_param_tensor *tensors, int num_tensors,
                            size_t bucket_numel, int dp_size, int dp_rank, size_t align,
                            size_t tensor_align, int counted_replicated, double partial_ratio) {
    memset(lay, 0, sizeof *lay);
    int n = num_tensors;
    lay->num_tensors = n;
    lay->names = calloc((size_t)n, sizeof(char *));
    lay->numel = calloc((size_t)n, sizeof(size_t));
    lay->offset = calloc((size_t)n, sizeof(size_t));
    lay->replicated = calloc((size_t)n, sizeof(int));
    lay->no_decay = calloc((size_t)n, sizeof(int));
    lay->bucket_of = calloc((size_t)n, sizeof(int));
    lay->buckets = calloc((size_t)n, sizeof(zoe_bucket)); /* at most one bucket per tensor */
    /* Segments: each tensor can be split once at the device/host boundary. */
    lay->segments = calloc(2 * (size_t)n + 2, sizeof(zoe_segment));
    if (!lay->names || !lay->numel || !lay->offset || !lay->replicated || !lay->no_decay ||
        !lay->bucket_of || !lay->buckets || !lay->segments) {
        zoe_layout_free(lay);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "layout tables for %d tensors", n);
    }
    for (int t = 0; t < n; t++) {
        lay->names[t] = copy_string(tensors[t].name);
        if (!lay->names[t]) {
            zoe_layout_free(lay);
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor name");
        }
        lay->numel[t] = tensors[t].numel;
        lay->replicated[t] = tensors[t].tp_replicated != 0;
        lay->no_decay[t] = tensors[t].no_weight_decay != 0;
    }
    /* Buckets: consecutive tensors while the total stays within bucket_numel. */
    size_t flat = 0, part = 0;
    for (int t = 0; t < n;) {
        zoe_bucket *bk = &lay->buckets[lay->num_buckets];
        bk->first_tensor = t;
        while (t < n && (bk->num_tensors == 0 ||
                         round_up(bk->numel, tensor_align) + lay->numel[t] <= bucket_numel)) {
            size_t at =
                round_up(bk->numel, tensor_align); /* the padding before it is no tensor's */
            lay->offset[t] = flat + at;
            lay->bucket_of[t] = lay->num_buckets;
            bk->numel = at + lay->numel[t];
            bk->num_tensors++, t++;
        }
        bk->part = round_up((bk->numel + (size_t)dp_size - 1) / (size_t)dp_size, align);
        bk->flat_offset = flat;
        bk->part_offset = part;
        size_t start = (size_t)dp_rank * bk->part;
        bk->real =
            bk->numel > start ? (bk->numel - start < bk->part ? bk->numel - start : bk->part) : 0;
        flat += (size_t)dp_size * bk->part;
        part += bk->part;
        if (bk->part > lay->max_part) lay->max_part = bk->part;
        lay->num_buckets++;
    }
    lay->flat_numel = flat;
    lay->part_numel = part;
    /* Partial offload: the first ratio of the partition, whole 64-byte units, on the device. */
    lay->device_numel = (size_t)(partial_ratio * (double)(part / align)) * align;
    if (partial_ratio >= 1.0) lay->device_numel = part;
    add_segments(lay, 0, lay->device_numel, dp_rank, counted_replicated);
    lay->num_device_segments = lay->num_segments;
    add_segments(lay, lay->device_numel, part, dp_rank, counted_replicated);
    return ZOE_OK;
}

size_t zoe_layout_ring_places(const zoe_layout *lay, int dp_size, size_t window, size_t *places) {
    const int nb = lay->num_buckets;
    const size_t d = (size_t)dp_size;
    if (nb == 0) return 0;
    /* The run that a window starting in bucket b touches: b, the buckets after it whose tensors
     * all fit in the window, and the one it ends in. */
    size_t run = 0, largest = 0;
    for (int b = 1; b < nb; b++) {
        size_t span = d * lay->buckets[b].part, inside = 0;
        int e = b + 1;
        for (; e < nb; e++) {
            const zoe_bucket *bk = &lay->buckets[e];
            size_t tensors = 0;
            for (int t = bk->first_tensor; t < bk->first_tensor + bk->num_tensors; t++)
                tensors += lay->numel[t];
            if (inside + tensors > window) break;
            inside += tensors;
            span += d * bk->part;
        }
        if (e < nb) span += d * lay->buckets[e].part;
        if (span > run) run = span;
        if (d * lay->buckets[b].part > largest) largest = d * lay->buckets[b].part;
    }
    const size_t first = d * lay->buckets[0].part, ring = run + largest;
    if (places) {
        places[0] = 0;
        size_t top = ring; /* the place of the bucket placed last, in the ring */
        for (int b = nb - 1; b >= 1; b--) {
            size_t size = d * lay->buckets[b].part;
            if (top < size) top = ring;
            top -= size;
            places[b] = first + top;
        }
    }
    return first + ring;
}
