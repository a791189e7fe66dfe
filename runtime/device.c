/* The device interface and its CPU backend. On CPU a stream executes work as it is submitted,
 * which is a valid in-order stream: every later op sees every earlier one complete.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include "runtime/device_impl.h"
#include "runtime/error.h"
#include "runtime/host_array.h"
#include "zoe/log.h"

const char *zoe_backend_name(zoe_backend backend) {
    return backend == ZOE_BACKEND_CUDA ? "cuda" : backend == ZOE_BACKEND_CPU ? "cpu" : "unknown";
}

zoe_status zoe_backend_parse(const char *name, zoe_backend *out) {
    if (name && strcasecmp(name, "cpu") == 0)
        *out = ZOE_BACKEND_CPU;
    else if (name && strcasecmp(name, "cuda") == 0)
        *out = ZOE_BACKEND_CUDA;
    else
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown backend '%s' (expected cpu or cuda)",
                        name ? name : "(null)");
    return ZOE_OK;
}

int zoe_cuda_device_count(void) {
#ifdef ZOE_HAVE_CUDA
    return zoe_cuda_count();
#else
    return 0;
#endif
}

zoe_status zoe_gpu_info_of(int ordinal, zoe_gpu_info *out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpu_info_of: out is NULL");
#ifdef ZOE_HAVE_CUDA
    int count = zoe_cuda_count();
    if (ordinal < 0 || ordinal >= count)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPU %d does not exist (%d visible)", ordinal,
                        count);
    return zoe_cuda_info(ordinal, out);
#else
    (void)ordinal;
    return zoe_fail(ZOE_ERR_UNSUPPORTED, "this zoe was built without CUDA (ZOE_CUDA=OFF)");
#endif
}

#ifdef ZOE_HAVE_CUDA
static inline int is_cuda(const zoe_device *dev) {
    return dev && dev->backend == ZOE_BACKEND_CUDA;
}
#endif

zoe_status zoe_device_create(zoe_backend backend, int ordinal, zoe_device **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "device out pointer is NULL");
    *out = NULL;
    if (backend != ZOE_BACKEND_CPU && backend != ZOE_BACKEND_CUDA)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)backend);
    size_t memory_total = SIZE_MAX; /* CPU: the device's memory is the host's, not limited */
    if (backend == ZOE_BACKEND_CUDA) {
#ifdef ZOE_HAVE_CUDA
        /* Before anything is allocated: without code for this GPU the run would fail only at
         * its first kernel launch, after minutes of set-up. */
        zoe_gpu_info gpu;
        ZOE_TRY(zoe_gpu_info_of(ordinal, &gpu));
        ZOE_TRY(zoe_gpu_check_build(&gpu));
        ZOE_TRY(zoe_cuda_set_device(ordinal));
        ZOE_TRY(zoe_cuda_memory_total(&memory_total));
#else
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "this zoe was built without CUDA (ZOE_CUDA=OFF)");
#endif
    }
    zoe_device *dev = calloc(1, sizeof *dev);
    if (!dev) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "device struct");
    dev->backend = backend;
    dev->ordinal = backend == ZOE_BACKEND_CUDA ? ordinal : -1;
    dev->memory_limit = dev->memory_total = memory_total;
    dev->pinned_limit = SIZE_MAX;
    if (pthread_mutex_init(&dev->lock, NULL) != 0) {
        free(dev);
        return zoe_fail(ZOE_ERR_INTERNAL, "device accounting lock");
    }
    *out = dev;
    return ZOE_OK;
}

void zoe_device_destroy(zoe_device *dev) {
    if (!dev) return;
    pthread_mutex_destroy(&dev->lock);
    free(dev->live);
    free(dev);
}
zoe_backend zoe_device_backend(const zoe_device *dev) {
    return dev ? dev->backend : ZOE_BACKEND_CPU;
}
int zoe_device_ordinal(const zoe_device *dev) {
    return dev ? dev->ordinal : -1;
}

static zoe_status cpu_alloc(size_t bytes, void **out) {
    *out = zoe_host_array_alloc(bytes);
    if (!*out) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%zu bytes of host memory asked for", bytes);
    return ZOE_OK;
}

/* "100 bytes", "512.0 MiB": a size in a message. */
static void format_bytes(char *buf, size_t n, double bytes) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, n, "%.0f bytes", bytes);
        return;
    }
    int u = 0;
    for (bytes /= 1024; bytes >= 1024 && u < 4; u++) bytes /= 1024;
    snprintf(buf, n, "%.1f %s", bytes, units[u]);
}

/* Counts bytes as held in *now (and its peak) unless they would pass limit, under the lock so
 * that two threads cannot both pass it: 1 when counted. *held: what *now held before. */
static int take(zoe_device *dev, size_t *now, size_t *peak, size_t limit, size_t bytes,
                size_t *held) {
    pthread_mutex_lock(&dev->lock);
    *held = *now;
    const int fits = bytes <= limit && *held <= limit - bytes;
    if (fits) {
        *now += bytes;
        if (*now > *peak) *peak = *now;
    }
    pthread_mutex_unlock(&dev->lock);
    return fits;
}

/* The counter an allocation of this kind is held in (zoe_memory_stats). */
static size_t *held_in(zoe_memory_stats *m, int pinned, int pageable) {
    return pageable ? &m->pageable_bytes : pinned ? &m->pinned_bytes : &m->device_bytes;
}

static void release(zoe_device *dev, size_t bytes, int pinned, int pageable) {
    pthread_mutex_lock(&dev->lock);
    *held_in(&dev->stats, pinned, pageable) -= bytes;
    pthread_mutex_unlock(&dev->lock);
}

/* Reserves device bytes, refusing those that would pass the memory limit. The peaks count what
 * was asked for at once (an allocation that the backend then fails included: the run stops there
 * anyway). */
static zoe_status reserve_device(zoe_device *dev, size_t bytes, const char *what) {
    size_t held;
    const size_t limit = dev->memory_limit;
    if (take(dev, &dev->stats.device_bytes, &dev->stats.device_peak, limit, bytes, &held))
        return ZOE_OK;
    char cap[32], asked[32], need[32], have[32];
    format_bytes(cap, sizeof cap, (double)limit);
    format_bytes(asked, sizeof asked, (double)bytes);
    format_bytes(need, sizeof need, (double)held + (double)bytes);
    format_bytes(have, sizeof have, (double)held);
    return zoe_fail(ZOE_ERR_OUT_OF_MEMORY,
                    "device memory cap %s (%zu bytes): allocating %s for %s would need %s (%.0f "
                    "bytes) with the %s held",
                    cap, limit, asked, what && what[0] ? what : "a device buffer", need,
                    (double)held + (double)bytes, have);
}

/* Every live allocation with its size, so that a free knows what it returns. */
static zoe_status track(zoe_device *dev, zoe_allocation a) {
    zoe_status st = ZOE_OK;
    pthread_mutex_lock(&dev->lock);
    if (dev->num_live == dev->cap_live) {
        size_t cap = dev->cap_live ? 2 * dev->cap_live : 64;
        zoe_allocation *grown = realloc(dev->live, cap * sizeof *grown);
        if (grown)
            dev->live = grown, dev->cap_live = cap;
        else
            st = ZOE_ERR_OUT_OF_MEMORY;
    }
    if (st == ZOE_OK) dev->live[dev->num_live++] = a;
    pthread_mutex_unlock(&dev->lock);
    return st == ZOE_OK ? ZOE_OK : zoe_fail(st, "allocation table of %zu entries", dev->num_live);
}

/* Forgets ptr's allocation and returns it ({0} for a pointer not allocated here). */
static zoe_allocation untrack(zoe_device *dev, void *ptr) {
    zoe_allocation found = {0};
    pthread_mutex_lock(&dev->lock);
    for (size_t i = dev->num_live; i-- > 0;) { /* frees tend to come in reverse order */
        zoe_allocation a = dev->live[i];
        if (a.ptr != ptr) continue;
        *held_in(&dev->stats, a.pinned, a.pageable) -= a.bytes;
        dev->live[i] = dev->live[--dev->num_live];
        found = a;
        break;
    }
    pthread_mutex_unlock(&dev->lock);
    return found;
}

zoe_status zoe_device_set_memory_limit(zoe_device *dev, size_t bytes) {
    if (!dev) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "device memory limit: NULL device");
    const size_t limit = bytes ? bytes : dev->memory_total;
    char want[32], other[32];
    format_bytes(want, sizeof want, (double)limit);
    if (limit > dev->memory_total) {
        format_bytes(other, sizeof other, (double)dev->memory_total);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "device memory cap %s (%zu bytes) is more than GPU %d's %s", want, limit,
                        dev->ordinal, other);
    }
    pthread_mutex_lock(&dev->lock);
    const size_t held = dev->stats.device_bytes;
    if (limit >= held) dev->memory_limit = limit;
    pthread_mutex_unlock(&dev->lock);
    if (limit >= held) return ZOE_OK;
    format_bytes(other, sizeof other, (double)held);
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "device memory cap %s (%zu bytes) is below the %s the device's allocations "
                    "hold now",
                    want, limit, other);
}

size_t zoe_device_memory_limit(const zoe_device *dev) {
    if (!dev) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&dev->lock);
    size_t limit = dev->memory_limit;
    pthread_mutex_unlock((pthread_mutex_t *)&dev->lock);
    return limit;
}

zoe_status zoe_device_set_pinned_limit(zoe_device *dev, size_t bytes) {
    if (!dev) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "pinned memory limit: NULL device");
    pthread_mutex_lock(&dev->lock);
    dev->pinned_limit = bytes ? bytes : SIZE_MAX;
    pthread_mutex_unlock(&dev->lock);
    return ZOE_OK;
}

zoe_status zoe_device_memory_stats(const zoe_device *dev, zoe_memory_stats *out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memory stats: NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&dev->lock);
    *out = dev->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&dev->lock);
    return ZOE_OK;
}

static zoe_status raw_alloc(zoe_device *dev, size_t bytes, int pinned, void **out) {
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) return pinned ? zoe_cuda_host_alloc(bytes, out) : zoe_cuda_alloc(bytes, out);
#endif
    (void)dev, (void)pinned;
    return cpu_alloc(bytes, out);
}

static void raw_free(zoe_device *dev, zoe_allocation a) {
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev) && !a.pageable) {
        if (a.pinned)
            zoe_cuda_host_free(a.ptr);
        else
            zoe_cuda_free(a.ptr);
        return;
    }
#endif
    (void)dev;
    free(a.ptr);
}

/* Allocates and tracks bytes already counted in their counter, which a failure gives back. */
static zoe_status place(zoe_device *dev, size_t bytes, int pinned, int pageable, void **out) {
    zoe_status st = pageable ? cpu_alloc(bytes, out) : raw_alloc(dev, bytes, pinned, out);
    zoe_allocation a = {.ptr = *out, .bytes = bytes, .pinned = pinned, .pageable = pageable};
    if (st == ZOE_OK) st = track(dev, a);
    if (st != ZOE_OK) {
        if (*out) raw_free(dev, a);
        *out = NULL;
        release(dev, bytes, pinned, pageable);
    }
    return st;
}

/* The soft RLIMIT_MEMLOCK in a message: "unlimited" or a size. */
static void format_memlock(char *buf, size_t n) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        snprintf(buf, n, "unknown");
    else if (rl.rlim_cur == RLIM_INFINITY)
        snprintf(buf, n, "unlimited");
    else
        format_bytes(buf, n, (double)rl.rlim_cur);
}

/* 1 the first time allocations named what fall back to pageable memory (and for names past the
 * first 16), 0 after. */
static int first_fall_back(zoe_device *dev, const char *what) {
    int first = 1;
    pthread_mutex_lock(&dev->lock);
    for (int i = 0; i < dev->num_fell_back && first; i++)
        first = strncmp(dev->fell_back[i], what, sizeof dev->fell_back[i] - 1) != 0;
    if (first && dev->num_fell_back < (int)(sizeof dev->fell_back / sizeof dev->fell_back[0]))
        snprintf(dev->fell_back[dev->num_fell_back++], sizeof dev->fell_back[0], "%s", what);
    pthread_mutex_unlock(&dev->lock);
    return first;
}

/* Page-locked host memory, or pageable memory with one warning (the first time for a name) when
 * pinning fails or would pass the pin limit: the run stays correct, its copies slower. On the CPU
 * backend a failure to allocate is the host's memory running out, which pageable memory would not
 * change. */
static zoe_status host_alloc(zoe_device *dev, size_t bytes, const char *what, void **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "host alloc: NULL argument");
    *out = NULL;
    zoe_memory_stats *m = &dev->stats;
    char why[384], asked[32], limit[32], held_text[32], memlock[32];
    size_t held;
    if (take(dev, &m->pinned_bytes, &m->pinned_peak, dev->pinned_limit, bytes, &held)) {
        zoe_status st = place(dev, bytes, 1, 0, out);
        if (st == ZOE_OK || dev->backend == ZOE_BACKEND_CPU) return st;
        snprintf(why, sizeof why, "pinning failed (%s)", zoe_last_error());
    } else {
        format_bytes(limit, sizeof limit, (double)dev->pinned_limit);
        format_bytes(held_text, sizeof held_text, (double)held);
        snprintf(why, sizeof why, "the pin limit %s would be passed (%s pinned already)", limit,
                 held_text);
    }
    format_bytes(asked, sizeof asked, (double)bytes);
    format_memlock(memlock, sizeof memlock);
    if (first_fall_back(dev, what && what[0] ? what : "a page-locked host buffer"))
        zoe_log(ZOE_LOG_WARN,
                "%s for %s (%zu bytes): %s; RLIMIT_MEMLOCK %s. Using pageable host memory instead: "
                "correct, but its copies to and from the device are slower and do not overlap",
                asked, what && what[0] ? what : "a page-locked host buffer", bytes, why, memlock);
    take(dev, &m->pageable_bytes, &m->pageable_peak, SIZE_MAX, bytes, &held);
    return place(dev, bytes, 1, 1, out);
}

static zoe_status device_alloc(zoe_device *dev, size_t bytes, const char *what, void **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "device alloc: NULL argument");
    *out = NULL;
    ZOE_TRY(reserve_device(dev, bytes, what));
    return place(dev, bytes, 0, 0, out);
}

static void tracked_free(zoe_device *dev, void *ptr, int pinned) {
    if (!ptr) return;
    zoe_allocation a = untrack(dev, ptr);
    if (!a.ptr) a = (zoe_allocation){.ptr = ptr, .pinned = pinned}; /* not tracked: as asked */
    raw_free(dev, a);
}

zoe_status zoe_device_alloc(zoe_device *dev, size_t bytes, void **out) {
    return device_alloc(dev, bytes, NULL, out);
}
zoe_status zoe_device_alloc_for(zoe_device *dev, size_t bytes, const char *what, void **out) {
    return device_alloc(dev, bytes, what, out);
}
void zoe_device_free(zoe_device *dev, void *ptr) {
    tracked_free(dev, ptr, 0);
}
zoe_status zoe_host_alloc(zoe_device *dev, size_t bytes, void **out) {
    return host_alloc(dev, bytes, NULL, out);
}
zoe_status zoe_host_alloc_for(zoe_device *dev, size_t bytes, const char *what, void **out) {
    return host_alloc(dev, bytes, what, out);
}
void zoe_host_free(zoe_device *dev, void *ptr) {
    tracked_free(dev, ptr, 1);
}

zoe_status zoe_stream_create(zoe_device *dev, zoe_stream **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "stream create: NULL argument");
    zoe_stream *s = calloc(1, sizeof *s);
    if (!s) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "stream struct");
    s->dev = dev;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) {
        zoe_status st = zoe_cuda_stream_create(&s->native);
        if (st != ZOE_OK) {
            free(s);
            return st;
        }
    }
#endif
    *out = s;
    return ZOE_OK;
}

void zoe_stream_destroy(zoe_stream *stream) {
    if (!stream) return;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(stream->dev)) zoe_cuda_stream_destroy(stream->native);
#endif
    free(stream);
}

zoe_status zoe_stream_synchronize(zoe_stream *stream) {
#ifdef ZOE_HAVE_CUDA
    if (stream && is_cuda(stream->dev)) return zoe_cuda_stream_synchronize(stream->native);
#endif
    (void)stream;
    return ZOE_OK;
}

void *zoe_stream_native(zoe_stream *stream) {
    return stream ? stream->native : NULL;
}
zoe_device *zoe_stream_device(zoe_stream *stream) {
    return stream ? stream->dev : NULL;
}

zoe_status zoe_event_create(zoe_device *dev, zoe_event **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "event create: NULL argument");
    zoe_event *e = calloc(1, sizeof *e);
    if (!e) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "event struct");
    e->dev = dev;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) {
        zoe_status st = zoe_cuda_event_create(&e->native);
        if (st != ZOE_OK) {
            free(e);
            return st;
        }
    }
#endif
    *out = e;
    return ZOE_OK;
}

void zoe_event_destroy(zoe_event *event) {
    if (!event) return;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(event->dev)) zoe_cuda_event_destroy(event->native);
#endif
    free(event);
}

/* CPU: work is complete when submitted, so recording, waiting and synchronising are no-ops. */
zoe_status zoe_event_record(zoe_event *event, zoe_stream *stream) {
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(event->dev)) return zoe_cuda_event_record(event->native, stream->native);
#endif
    (void)event, (void)stream;
    return ZOE_OK;
}

zoe_status zoe_event_synchronize(zoe_event *event) {
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(event->dev)) return zoe_cuda_event_synchronize(event->native);
#endif
    (void)event;
    return ZOE_OK;
}

zoe_status zoe_stream_wait_event(zoe_stream *stream, zoe_event *event) {
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(stream->dev)) return zoe_cuda_stream_wait_event(stream->native, event->native);
#endif
    (void)stream, (void)event;
    return ZOE_OK;
}

/* 1 where [p, p + bytes) lies in one live device allocation (not a pinned one), 0 where p lies
 * in none, -1 where it starts in one and runs past its end. */
static int device_range(zoe_device *dev, const void *p, size_t bytes) {
    const char *c = p;
    int in = 0;
    pthread_mutex_lock(&dev->lock);
    for (size_t i = 0; i < dev->num_live && !in; i++) {
        const zoe_allocation *a = &dev->live[i];
        const char *lo = a->ptr;
        if (a->pinned || c < lo || c >= lo + a->bytes) continue;
        in = (size_t)(lo + a->bytes - c) >= bytes ? 1 : -1;
    }
    pthread_mutex_unlock(&dev->lock);
    return in;
}

/* The CPU backend's "device" is host memory, so a copy of the wrong kind would work here and
 * fail on a GPU (or read the wrong memory): each side named device must lie in a live device
 * allocation of the stream's device, each side named host in none. */
static zoe_status check_copy_kind(zoe_device *dev, void *dst, const void *src, size_t bytes,
                                  zoe_copy_kind kind) {
    static const char *const names[] = {"host to device", "device to host", "device to device",
                                        "host to host"};
    if (kind < ZOE_COPY_HOST_TO_DEVICE || kind > ZOE_COPY_HOST_TO_HOST)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memcpy of unknown kind %d", (int)kind);
    const int src_device = kind == ZOE_COPY_DEVICE_TO_HOST || kind == ZOE_COPY_DEVICE_TO_DEVICE;
    const int dst_device = kind == ZOE_COPY_HOST_TO_DEVICE || kind == ZOE_COPY_DEVICE_TO_DEVICE;
    const int src_in = device_range(dev, src, bytes), dst_in = device_range(dev, dst, bytes);
    const char *bad = src_in != src_device ? "source" : dst_in != dst_device ? "destination" : NULL;
    if (!bad) return ZOE_OK;
    int in = bad[0] == 's' ? src_in : dst_in;
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memcpy %s of %zu bytes: the %s %p is %s",
                    names[kind], bytes, bad, bad[0] == 's' ? src : (const void *)dst,
                    in == 1    ? "device memory"
                    : in == -1 ? "partly device memory (it runs past its allocation)"
                               : "not device memory");
}

zoe_status zoe_memcpy_async(void *dst, const void *src, size_t bytes, zoe_copy_kind kind,
                            zoe_stream *stream) {
    if (bytes && (!dst || !src))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memcpy of %zu bytes with a NULL pointer", bytes);
#ifdef ZOE_HAVE_CUDA
    if (stream && is_cuda(stream->dev))
        return zoe_cuda_memcpy_async(dst, src, bytes, kind, stream->native);
#endif
    if (bytes && stream) ZOE_TRY(check_copy_kind(stream->dev, dst, src, bytes, kind));
    if (bytes && dst != src) memmove(dst, src, bytes);
    return ZOE_OK;
}

zoe_status zoe_memset_async(void *dst, int value, size_t bytes, zoe_stream *stream) {
    if (bytes && !dst) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memset of NULL");
#ifdef ZOE_HAVE_CUDA
    if (stream && is_cuda(stream->dev))
        return zoe_cuda_memset_async(dst, value, bytes, stream->native);
#endif
    if (bytes) memset(dst, value, bytes);
    return ZOE_OK;
}

zoe_status zoe_device_synchronize(zoe_device *dev) {
    if (!dev) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_device_synchronize: NULL device");
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) {
        ZOE_TRY(zoe_cuda_set_device(dev->ordinal));
        return zoe_cuda_device_synchronize();
    }
#endif
    (void)dev;
    return ZOE_OK;
}
