/* The Adam ops on a device stream: the CPU backend's device memory is host memory, so its
 * "device Adam" is the host path; a CUDA stream gets the kernels of kernels/cuda/adam.cu. */
#include "kernels/adam.h"
#include "runtime/error.h"

static int on_cuda(zoe_stream *stream) {
    return stream && zoe_device_backend(zoe_stream_device(stream)) == ZOE_BACKEND_CUDA;
}

zoe_status zoe_adam_stream(zoe_stream *stream, const zoe_adam_consts *c, float *master, float *m,
                           float *v, const float *grad, void *out, zoe_dtype out_dtype, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_adam_cuda(zoe_stream_native(stream), c, master, m, v, grad, out, out_dtype, n);
#endif
    (void)on_cuda;
    return zoe_adam_host(c, master, m, v, grad, ZOE_F32, out, out_dtype, n);
}

zoe_status zoe_grad_accumulate_stream(zoe_stream *stream, float *dst, const void *src,
                                      zoe_dtype src_dtype, float scale, int assign, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_grad_accumulate_cuda(zoe_stream_native(stream), dst, src, src_dtype, scale,
                                        assign, n);
#endif
    return zoe_grad_accumulate_host(dst, src, src_dtype, scale, assign, n, NULL);
}

zoe_status zoe_sumsq_stream(zoe_stream *stream, const float *x, size_t n, double *host_sumsq) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream)) return zoe_sumsq_cuda(zoe_stream_native(stream), x, n, host_sumsq);
#endif
    *host_sumsq += zoe_sumsq_host(x, n);
    return ZOE_OK;
}

zoe_status zoe_convert_stream(zoe_stream *stream, void *dst, zoe_dtype dst_dtype, const void *src,
                              zoe_dtype src_dtype, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_convert_cuda(zoe_stream_native(stream), dst, dst_dtype, src, src_dtype, n);
#endif
    return zoe_convert(dst, dst_dtype, src, src_dtype, n);
}
