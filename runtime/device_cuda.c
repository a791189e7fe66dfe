/* The CUDA half of the device layer: plain CUDA runtime calls, errors turned into statuses.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <stdio.h>
#include <cuda_runtime.h>
#include "runtime/device_impl.h"
#include "runtime/error.h"

#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            return zoe_fail(ZOE_ERR_CUDA, "%s failed: %s", #call, cudaGetErrorString(err_));       \
    } while (0)

int zoe_cuda_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no GPU: clear the sticky error */
        return 0;
    }
    return n;
}

zoe_status zoe_cuda_info(int ordinal, zoe_gpu_info *out) {
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal));
    *out = (zoe_gpu_info){.ordinal = ordinal,
                          .capability = 10 * prop.major + prop.minor,
                          .memory_bytes = (double)prop.totalGlobalMem,
                          .multiprocessors = prop.multiProcessorCount};
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    CUDA_TRY(cudaDeviceGetPCIBusId(out->bus_id, (int)sizeof out->bus_id, ordinal));
    return ZOE_OK;
}

zoe_status zoe_cuda_set_device(int ordinal) {
    CUDA_TRY(cudaSetDevice(ordinal));
    return ZOE_OK;
}

zoe_status zoe_cuda_memory_total(size_t *out) {
    size_t free_bytes = 0;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, out));
    return ZOE_OK;
}

zoe_status zoe_cuda_alloc(size_t bytes, void **out) {
    cudaError_t err = cudaMalloc(out, bytes ? bytes : 1);
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes: %s", bytes,
                        cudaGetErrorString(err));
    return ZOE_OK;
}

void zoe_cuda_free(void *ptr) {
    cudaFree(ptr);
}

zoe_status zoe_cuda_host_alloc(size_t bytes, void **out) {
    cudaError_t err = cudaMallocHost(out, bytes ? bytes : 1);
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "cudaMallocHost of %zu bytes: %s", bytes,
                        cudaGetErrorString(err));
    return ZOE_OK;
}

void zoe_cuda_host_free(void *ptr) {
    cudaFreeHost(ptr);
}

zoe_status zoe_cuda_stream_create(void **out) {
    cudaStream_t s;
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *out = s;
    return ZOE_OK;
}

void zoe_cuda_stream_destroy(void *stream) {
    cudaStreamDestroy((cudaStream_t)stream);
}

zoe_status zoe_cuda_stream_synchronize(void *stream) {
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream));
    return ZOE_OK;
}

zoe_status zoe_cuda_event_create(void **out) {
    cudaEvent_t e;
    CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = e;
    return ZOE_OK;
}

void zoe_cuda_event_destroy(void *event) {
    cudaEventDestroy((cudaEvent_t)event);
}

zoe_status zoe_cuda_event_record(void *event, void *stream) {
    CUDA_TRY(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return ZOE_OK;
}

zoe_status zoe_cuda_event_synchronize(void *event) {
    CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event));
    return ZOE_OK;
}

zoe_status zoe_cuda_stream_wait_event(void *stream, void *event) {
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return ZOE_OK;
}

zoe_status zoe_cuda_memcpy_async(void *dst, const void *src, size_t bytes, zoe_copy_kind kind,
                                 void *stream) {
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)stream));
    return ZOE_OK;
}

zoe_status zoe_cuda_memset_async(void *dst, int value, size_t bytes, void *stream) {
    CUDA_TRY(cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream));
    return ZOE_OK;
}

zoe_status zoe_cuda_device_synchronize(void) {
    CUDA_TRY(cudaDeviceSynchronize());
    return ZOE_OK;
}
