/* Internal: the device structs and the CUDA half's entry points (device_cuda.c).
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_RUNTIME_DEVICE_IMPL_H
#define ZOE_RUNTIME_DEVICE_IMPL_H

#include <pthread.h>
#include "zoe/device.h"
#include "zoe/gpu.h"

/* One live allocation, for the accounting (zoe_device_memory_stats). */
typedef struct zoe_allocation {
    void *ptr;
    size_t bytes;
    int pinned;   /* host memory asked for as page-locked (zoe_host_alloc) */
    int pageable; /* ... that fell back to pageable memory (not pinned) */
} zoe_allocation;

struct zoe_device {
    zoe_backend backend;
    int ordinal;
    pthread_mutex_t lock; /* guards the accounting: a DPU worker may allocate */
    zoe_allocation *live; /* the allocations not yet freed, in allocation order */
    size_t num_live, cap_live;
    zoe_memory_stats stats;
    /* The most device bytes the allocations may hold together (zoe_device_set_memory_limit),
     * and the device's own memory, the default: the GPU's total, SIZE_MAX on CPU (no limit). */
    size_t memory_limit, memory_total;
    /* The most bytes zoe_host_alloc pins together (zoe_device_set_pinned_limit); SIZE_MAX: no
     * limit. Past it host allocations are pageable. */
    size_t pinned_limit;
    /* What fell back to pageable memory and was warned about: one line per name, not one per
     * staging buffer of each weight. */
    char fell_back[16][64];
    int num_fell_back;
    /* CUDA: the NCCL collectives of every communicator on this GPU keep the order the host
     * issued them in (comm_nccl_cuda.c), by NCCL's launch order or, when nccl_serial, one after
     * another: then the event marks the last one. The communicators count themselves (the last
     * one out destroys the event). */
    void *nccl_order; /* cudaEvent_t, when nccl_serial */
    int nccl_serial;
    int nccl_comms;
};

struct zoe_stream {
    zoe_device *dev;
    void *native; /* cudaStream_t; NULL on CPU */
};

struct zoe_event {
    zoe_device *dev;
    void *native; /* cudaEvent_t; NULL on CPU */
};

#ifdef ZOE_HAVE_CUDA
int zoe_cuda_count(void);
zoe_status zoe_cuda_info(int ordinal, zoe_gpu_info *out);
zoe_status zoe_cuda_set_device(int ordinal);
/* The current GPU's memory in bytes, as cudaMemGetInfo reports its total. */
zoe_status zoe_cuda_memory_total(size_t *out);
zoe_status zoe_cuda_alloc(size_t bytes, void **out);
void zoe_cuda_free(void *ptr);
zoe_status zoe_cuda_host_alloc(size_t bytes, void **out);
void zoe_cuda_host_free(void *ptr);
zoe_status zoe_cuda_stream_create(void **out);
void zoe_cuda_stream_destroy(void *stream);
zoe_status zoe_cuda_stream_synchronize(void *stream);
zoe_status zoe_cuda_event_create(void **out);
void zoe_cuda_event_destroy(void *event);
zoe_status zoe_cuda_event_record(void *event, void *stream);
zoe_status zoe_cuda_event_synchronize(void *event);
zoe_status zoe_cuda_stream_wait_event(void *stream, void *event);
zoe_status zoe_cuda_memcpy_async(void *dst, const void *src, size_t bytes, zoe_copy_kind kind,
                                 void *stream);
zoe_status zoe_cuda_memset_async(void *dst, int value, size_t bytes, void *stream);
zoe_status zoe_cuda_device_synchronize(void);
#endif

#endif
