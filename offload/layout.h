/* Internal: the flat layout (tensors -> buckets -> DP partitions) and the rank's view of it.
 * Pure arithmetic, no memory beyond its own tables.
 *
 * Explained in docs/offload.md, "Layout". */
#ifndef ZOE_OFFLOAD_LAYOUT_H
#define ZOE_OFFLOAD_LAYOUT_H

#include <stddef.h>
#include "zoe/optimizer.h"

typedef struct zoe_bucket {
    int first_tensor, num_tensors;
    size_t numel;       /* real elements */
    size_t part;        /* elements per DP partition, rounded up to 64 bytes */
    size_t flat_offset; /* start in the padded parameter buffer; the bucket spans d * part */
    size_t part_offset; /* start of this rank's partition of the bucket in partition coords */
    size_t real;        /* real (non-padding) elements in this rank's partition */
} zoe_bucket;

/* A run of real elements of the partition, all updated in one place (device or host), all
 * counted in the norm or none, and all weight-decayed or none. Partition coordinates. */
typedef struct zoe_segment {
    size_t offset, len;
    size_t flat; /* where offset sits in the parameter buffer (the segment is contiguous there) */
    int counted;
    int no_decay;   /* 1: its tensors are exempt from weight decay */
    int replicated; /* 1: its tensors are the same on every TP rank */
} zoe_segment;

typedef struct zoe_layout {
    int num_tensors;
    char **names;
    size_t *numel;   /* per tensor */
    size_t *offset;  /* per tensor, in the parameter buffer */
    int *replicated; /* per tensor */
    int *no_decay;   /* per tensor */
    int *bucket_of;  /* per tensor */
    int num_buckets;
    zoe_bucket *buckets;
    size_t flat_numel;   /* the padded parameter buffer */
    size_t part_numel;   /* this rank's partition, padding included */
    size_t max_part;     /* the largest bucket partition */
    size_t device_numel; /* the first device_numel of the partition live on the device */
    int num_segments;    /* device segments first, then host segments, each in order */
    int num_device_segments;
    zoe_segment *segments;
} zoe_layout;

/* The device ring of a byte budget (zoe_optimizer_config.bucket_ring_window; docs/offload.md,
 * "The gradient ring"): one buffer, bucket 0 (a tied embedding's, open through the whole
 * backward) at its start in a place of its own, then a ring where every other bucket has a fixed
 * place, from the last bucket down (the order backward opens them), each just below the one
 * before and wrapping to the ring's top where it would cross the bottom. A bucket's place holds
 * its d * part elements. The ring holds the largest run of buckets that `window` elements of
 * tensors open at once can touch, plus one largest bucket (what a wrap may leave unused), so the
 * buckets of such a run never overlap. Returns the buffer's elements (0 for no bucket); places
 * (NULL: not wanted; num_buckets entries) gets each bucket's element offset in it. */
size_t zoe_layout_ring_places(const zoe_layout *lay, int dp_size, size_t window, size_t *places);

/* Partition coordinates of bucket b's partition split at the device/host boundary:
 * [lo, mid) lives on the device, [mid, hi) on the host. */
static inline void zoe_bucket_split(const zoe_layout *lay, int b, size_t *lo, size_t *mid,
                                    size_t *hi) {
    const zoe_bucket *bk = &lay->buckets[b];
    size_t dev_end = lay->device_numel;
    *lo = bk->part_offset;
    *hi = bk->part_offset + bk->part;
    *mid = dev_end < *lo ? *lo : dev_end > *hi ? *hi : dev_end;
}

/* Where partition coordinate x of bucket b (part_offset <= x < part_offset + part) sits in the
 * parameter buffer of DP rank dp_rank. */
static inline size_t zoe_partition_flat(const zoe_layout *lay, int b, int dp_rank, size_t x) {
    const zoe_bucket *bk = &lay->buckets[b];
    return bk->flat_offset + (size_t)dp_rank * bk->part + (x - bk->part_offset);
}

/* The pieces of partition range [x, end) that lie in one bucket each, in order, with where they
 * sit in DP rank rank's slices of the parameter buffer:
 *     for (zoe_slices it = zoe_slices_of(lay, rank, x, n); zoe_slices_next(&it);)
 *         use it.x, it.flat, it.len */
typedef struct zoe_slices {
    const zoe_layout *lay;
    int rank, bucket;
    size_t next, end;
    size_t x, flat, len; /* the current piece */
} zoe_slices;

static inline zoe_slices zoe_slices_of(const zoe_layout *lay, int rank, size_t x, size_t n) {
    return (zoe_slices){.lay = lay, .rank = rank, .bucket = 0, .next = x, .end = x + n};
}

static inline int zoe_slices_next(zoe_slices *it) {
    const zoe_layout *lay = it->lay;
    while (it->next < it->end && it->bucket < lay->num_buckets) {
        const zoe_bucket *bk = &lay->buckets[it->bucket];
        size_t bk_end = bk->part_offset + bk->part;
        if (it->next >= bk_end) {
            it->bucket++;
            continue;
        }
        it->x = it->next;
        it->len = (bk_end < it->end ? bk_end : it->end) - it->x;
        it->flat = zoe_partition_flat(lay, it->bucket, it->rank, it->x);
        it->next += it->len;
        return 1;
    }
    return 0;
}

/* Builds the layout of the tensors for DP rank dp_rank of dp_size (tensors already checked).
 * align is the partition alignment in elements; tensor_align that of each tensor's first element
 * within its bucket (1: packed; a multiple of align leaves padding between tensors);
 * counted_replicated says whether this rank counts TP-replicated tensors in the norm
 * (tp_rank 0). */
zoe_status zoe_layout_build(zoe_layout *lay, const zoe_param_tensor *tensors, int num_tensors,
                            size_t bucket_numel, int dp_size, int dp_rank, size_t align,
                            size_t tensor_align, int counted_replicated, double partial_ratio);
void zoe_layout_free(zoe_layout *lay);

#endif
