/* The device layer: memory, streams and events behind one interface. The CPU backend is a
 * complete device (host memory, copies are memcpy, a stream runs its work in order at
 * submission); the CUDA backend uses cudaMalloc, cudaMallocHost, streams and events.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_DEVICE_H
#define ZOE_DEVICE_H

#include <stddef.h>
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zoe_backend {
    ZOE_BACKEND_CPU = 0,
    ZOE_BACKEND_CUDA = 1,
} zoe_backend;

typedef enum zoe_copy_kind {
    ZOE_COPY_HOST_TO_DEVICE = 0,
    ZOE_COPY_DEVICE_TO_HOST = 1,
    ZOE_COPY_DEVICE_TO_DEVICE = 2,
    ZOE_COPY_HOST_TO_HOST = 3,
} zoe_copy_kind;

typedef struct zoe_device zoe_device;
typedef struct zoe_stream zoe_stream;
typedef struct zoe_event zoe_event;

/* "cpu" or "cuda". */
const char *zoe_backend_name(zoe_backend backend);
zoe_status zoe_backend_parse(const char *name, zoe_backend *out);
/* Number of CUDA devices visible (0 without CUDA, in a CPU-only build, or without a GPU). */
int zoe_cuda_device_count(void);

/* ordinal selects the GPU for CUDA; ignored for CPU. */
zoe_status zoe_device_create(zoe_backend backend, int ordinal, zoe_device **out);
void zoe_device_destroy(zoe_device *dev);
/* Pure getters: the backend (CPU for NULL) and the ordinal (-1 for NULL). */
zoe_backend zoe_device_backend(const zoe_device *dev);
int zoe_device_ordinal(const zoe_device *dev);

/* Device memory (64-byte aligned on CPU). free(NULL) is a no-op. zoe_device_alloc_for names
 * what the bytes are for ("the model's arena"), which a refusal at the memory limit quotes;
 * zoe_device_alloc is the same without a name. */
zoe_status zoe_device_alloc(zoe_device *dev, size_t bytes, void **out);
zoe_status zoe_device_alloc_for(zoe_device *dev, size_t bytes, const char *what, void **out);
void zoe_device_free(zoe_device *dev, void *ptr);
/* The device-memory limit (zoe-train's --device-memory): the most bytes dev's device
 * allocations may hold together. An allocation that would pass it fails with
 * ZOE_ERR_OUT_OF_MEMORY and a message naming the limit, the allocation and what it would need;
 * nothing is allocated. bytes 0 sets the default, the device's memory: on CUDA the GPU's total
 * (cudaMemGetInfo), on CPU no limit. On CUDA a limit above the GPU's total is refused (it
 * bounds zoe below the GPU's size: to share a GPU, or to rehearse a smaller one), and on any
 * device a limit below what its allocations hold now. Page-locked host memory (zoe_host_alloc)
 * is host memory and does not count. */
zoe_status zoe_device_set_memory_limit(zoe_device *dev, size_t bytes);
/* The limit in force (SIZE_MAX: none; 0 for NULL). */
size_t zoe_device_memory_limit(const zoe_device *dev);
/* Page-locked host memory that device copies can run from asynchronously; zoe_host_alloc_for
 * names what the bytes are for. Where pinning fails (cudaMallocHost: the host's memory, a
 * container's or RLIMIT_MEMLOCK's limit) or would pass the pin limit, the allocation is pageable
 * host memory instead, with one warning naming it, its size and RLIMIT_MEMLOCK: the run stays
 * correct, its copies to and from the device are slower. Only when no host memory is left does
 * it fail (ZOE_ERR_OUT_OF_MEMORY). */
zoe_status zoe_host_alloc(zoe_device *dev, size_t bytes, void **out);
zoe_status zoe_host_alloc_for(zoe_device *dev, size_t bytes, const char *what, void **out);
void zoe_host_free(zoe_device *dev, void *ptr);
/* The pin limit (zoe-train's --pinned-memory): the most bytes dev's zoe_host_alloc allocations
 * pin together; those past it are pageable. Both backends honour it (on CPU "page-locked" is
 * plain memory, and the limit is how the fall-back is rehearsed). 0: no limit, the default. */
zoe_status zoe_device_set_pinned_limit(zoe_device *dev, size_t bytes);

/* What the device's allocations hold now and held at most since it was created, in bytes as
 * requested: device memory (zoe_device_alloc; on the CPU backend the host memory that stands in
 * for it), page-locked host memory (zoe_host_alloc) and the host memory zoe_host_alloc gave
 * pageable when pinning failed or passed the pin limit. Safe to call, and to allocate and free,
 * from several threads. */
typedef struct zoe_memory_stats {
    size_t device_bytes, device_peak;
    size_t pinned_bytes, pinned_peak;
    size_t pageable_bytes, pageable_peak;
} zoe_memory_stats;
zoe_status zoe_device_memory_stats(const zoe_device *dev, zoe_memory_stats *out);

zoe_status zoe_stream_create(zoe_device *dev, zoe_stream **out);
void zoe_stream_destroy(zoe_stream *stream);
zoe_status zoe_stream_synchronize(zoe_stream *stream);
/* The backend's native handle (cudaStream_t on CUDA, NULL on CPU). */
void *zoe_stream_native(zoe_stream *stream);
zoe_device *zoe_stream_device(zoe_stream *stream);

zoe_status zoe_event_create(zoe_device *dev, zoe_event **out);
void zoe_event_destroy(zoe_event *event);
zoe_status zoe_event_record(zoe_event *event, zoe_stream *stream);
zoe_status zoe_event_synchronize(zoe_event *event);
/* Work submitted to stream after this call waits for the event. */
zoe_status zoe_stream_wait_event(zoe_stream *stream, zoe_event *event);

/* kind names the sides as they are: device memory is what zoe_device_alloc returned, host
 * memory anything else (zoe_host_alloc's page-locked memory included). The CPU backend checks
 * it against its live allocations and refuses a wrong kind (ZOE_ERR_INVALID_ARGUMENT), as a GPU
 * would fail it. */
zoe_status zoe_memcpy_async(void *dst, const void *src, size_t bytes, zoe_copy_kind kind,
                            zoe_stream *stream);
zoe_status zoe_memset_async(void *dst, int value, size_t bytes, zoe_stream *stream);
zoe_status zoe_device_synchronize(zoe_device *dev);

#ifdef __cplusplus
}
#endif
#endif
