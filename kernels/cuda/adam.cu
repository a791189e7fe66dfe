// The device Adam for partial offload, and the gradient accumulation, norm and casts that feed
// it on a CUDA stream. The arithmetic is the host's (kernels/adam.h) operation by operation,
// with the _rn intrinsics so that nvcc contracts nothing into an FMA: a partition updated on
// the device matches one updated on the host bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" {
#include "kernels/adam.h"
#include "runtime/error.h"
}

namespace {

constexpr int kThreads = 256;

zoe_status check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) return zoe_fail(ZOE_ERR_CUDA, "%s: %s", what, cudaGetErrorString(err));
    return ZOE_OK;
}

unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535u * 8u ? (b ? b : 1) : 65535u * 8u);
}

__device__ float load_as_f32(const void *p, size_t i, int dt) {
    if (dt == ZOE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == ZOE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ void store_from_f32(void *p, size_t i, int dt, float x) {
    if (dt == ZOE_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else if (dt == ZOE_F16)
        ((__half *)p)[i] = __float2half_rn(x);
    else
        ((float *)p)[i] = x;
}

__global__ void adam_kernel(zoe_adam_consts c, float *master, float *m, float *v, const float *grad,
                            void *out, int odt, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float w = master[i];
        float g = __fmul_rn(grad[i], c.grad_scale);
        if (!c.decoupled) g = __fadd_rn(g, __fmul_rn(c.l2, w));
        float mm = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(c.one_minus_beta1, g));
        float vv =
            __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
        if (c.decoupled) w = __fmul_rn(w, c.decay);
        float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vv), c.inv_sqrt_bc2), c.eps);
        w = __fsub_rn(w, __fmul_rn(c.step_size, __fdiv_rn(mm, denom)));
        master[i] = w, m[i] = mm, v[i] = vv;
        if (out) store_from_f32(out, i, odt, w);
    }
}

__global__ void accumulate_kernel(float *dst, const void *src, int sdt, float scale, int assign,
                                  size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __fmul_rn(load_as_f32(src, i, sdt), scale);
        dst[i] = assign ? x : __fadd_rn(dst[i], x);
    }
}

__global__ void sumsq_kernel(const float *x, size_t n, double *sum) {
    __shared__ double part[kThreads];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = kThreads / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, part[0]);
}

__global__ void convert_kernel(void *dst, int ddt, const void *src, int sdt, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(dst, i, ddt, load_as_f32(src, i, sdt));
}

bool is_float(zoe_dtype dt) {
    return dt == ZOE_F32 || dt == ZOE_BF16 || dt == ZOE_F16;
}

} // namespace

extern "C" zoe_status zoe_adam_cuda(void *stream, const zoe_adam_consts *c, float *master, float *m,
                                    float *v, const float *grad, void *out, zoe_dtype out_dtype,
                                    size_t n) {
    if (out && !is_float(out_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam: output dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(out_dtype));
    if (n == 0) return ZOE_OK;
    adam_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(*c, master, m, v, grad, out,
                                                                      (int)out_dtype, n);
    return check(cudaGetLastError(), "adam kernel launch");
}

extern "C" zoe_status zoe_grad_accumulate_cuda(void *stream, float *dst, const void *src,
                                               zoe_dtype src_dtype, float scale, int assign,
                                               size_t n) {
    if (!is_float(src_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "accumulate: gradient dtype %s is not float",
                        zoe_dtype_name(src_dtype));
    if (n == 0) return ZOE_OK;
    accumulate_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, src, src_dtype,
                                                                            scale, assign, n);
    return check(cudaGetLastError(), "accumulate kernel launch");
}

extern "C" zoe_status zoe_sumsq_cuda(void *stream, const float *x, size_t n, double *host_sumsq) {
    if (n == 0) return ZOE_OK;
    cudaStream_t s = (cudaStream_t)stream;
    double *sum = nullptr, result = 0;
    ZOE_TRY(check(cudaMallocAsync((void **)&sum, sizeof(double), s), "cudaMallocAsync"));
    zoe_status st = check(cudaMemsetAsync(sum, 0, sizeof(double), s), "cudaMemsetAsync");
    if (st == ZOE_OK) {
        unsigned blocks = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
        sumsq_kernel<<<blocks, kThreads, 0, s>>>(x, n, sum);
        st = check(cudaGetLastError(), "sumsq kernel launch");
    }
    if (st == ZOE_OK)
        st = check(cudaMemcpyAsync(&result, sum, sizeof(double), cudaMemcpyDeviceToHost, s),
                   "sumsq copy");
    cudaFreeAsync(sum, s);
    if (st == ZOE_OK) st = check(cudaStreamSynchronize(s), "sumsq synchronize");
    if (st == ZOE_OK) *host_sumsq += result;
    return st;
}

extern "C" zoe_status zoe_convert_cuda(void *stream, void *dst, zoe_dtype dst_dtype,
                                       const void *src, zoe_dtype src_dtype, size_t n) {
    if (!is_float(dst_dtype) || !is_float(src_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "convert: %s to %s is not a float conversion",
                        zoe_dtype_name(src_dtype), zoe_dtype_name(dst_dtype));
    if (n == 0) return ZOE_OK;
    convert_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, dst_dtype, src,
                                                                         src_dtype, n);
    return check(cudaGetLastError(), "convert kernel launch");
}
