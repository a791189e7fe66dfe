/* The device interface and its CPU backend. On CPU a stream executes work as it is submitted,
 * which is a valid in-order stream: every later op sees every earlier one complete. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "runtime/device_impl.h"
#include "runtime/error.h"

#define ZOE_CPU_ALIGN 64

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
    if (backend == ZOE_BACKEND_CUDA) {
#ifdef ZOE_HAVE_CUDA
        int count = zoe_cuda_count();
        if (ordinal < 0 || ordinal >= count)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPU %d does not exist (%d visible)", ordinal,
                            count);
        ZOE_TRY(zoe_cuda_set_device(ordinal));
#else
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "this zoe was built without CUDA (ZOE_CUDA=OFF)");
#endif
    }
    zoe_device *dev = calloc(1, sizeof *dev);
    if (!dev) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "device struct");
    dev->backend = backend;
    dev->ordinal = backend == ZOE_BACKEND_CUDA ? ordinal : -1;
    *out = dev;
    return ZOE_OK;
}

void zoe_device_destroy(zoe_device *dev) {
    free(dev);
}
zoe_backend zoe_device_backend(const zoe_device *dev) {
    return dev ? dev->backend : ZOE_BACKEND_CPU;
}
int zoe_device_ordinal(const zoe_device *dev) {
    return dev ? dev->ordinal : -1;
}

static zoe_status cpu_alloc(size_t bytes, void **out) {
    size_t rounded = (bytes + ZOE_CPU_ALIGN - 1) / ZOE_CPU_ALIGN * ZOE_CPU_ALIGN;
    *out = aligned_alloc(ZOE_CPU_ALIGN, rounded ? rounded : ZOE_CPU_ALIGN);
    if (!*out) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%zu bytes of host memory asked for", bytes);
    return ZOE_OK;
}

zoe_status zoe_device_alloc(zoe_device *dev, size_t bytes, void **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "device alloc: NULL argument");
    *out = NULL;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) return zoe_cuda_alloc(bytes, out);
#endif
    return cpu_alloc(bytes, out);
}

void zoe_device_free(zoe_device *dev, void *ptr) {
    if (!ptr) return;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) return zoe_cuda_free(ptr);
#endif
    free(ptr);
}

zoe_status zoe_host_alloc(zoe_device *dev, size_t bytes, void **out) {
    if (!dev || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "host alloc: NULL argument");
    *out = NULL;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) return zoe_cuda_host_alloc(bytes, out);
#endif
    return cpu_alloc(bytes, out);
}

void zoe_host_free(zoe_device *dev, void *ptr) {
    if (!ptr) return;
#ifdef ZOE_HAVE_CUDA
    if (is_cuda(dev)) return zoe_cuda_host_free(ptr);
#endif
    free(ptr);
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

zoe_status zoe_memcpy_async(void *dst, const void *src, size_t bytes, zoe_copy_kind kind,
                            zoe_stream *stream) {
    if (bytes && (!dst || !src))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "memcpy of %zu bytes with a NULL pointer", bytes);
#ifdef ZOE_HAVE_CUDA
    if (stream && is_cuda(stream->dev))
        return zoe_cuda_memcpy_async(dst, src, bytes, kind, stream->native);
#endif
    (void)kind;
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
