// The device Adam for partial offload over fp32 state (one launch over a table of runs; the
// element is adam_element.cuh's, bit for bit the host's), and the gradient accumulation, the
// fixed-order norm and the casts that feed it on a CUDA stream.
//
// Explained in docs/offload.md, "One step".
#include "kernels/cuda/adam_element.cuh"

namespace {

using namespace zoe_adam_device;

/* The step of element i of fp32 state. */
__device__ void adam_element(const zoe_adam_consts &c, float *master, float *m, float *v,
                             const float *grad, void *out, int odt, size_t i) {
    float w = master[i], mm = m[i], vv = v[i];
    adam_update(c, grad[i], w, mm, vv);
    master[i] = w, m[i] = mm, v[i] = vv;
    if (out) store_from_f32(out, i, odt, w);
}

__global__ void adam_kernel(zoe_adam_consts c, float *master, float *m, float *v, const float *grad,
                            void *out, int odt, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adam_element(c, master, m, v, grad, out, odt, i);
}

/* Every run of the table in one launch: thread positions walk the concatenation of the runs. */
__global__ void adam_runs_kernel(zoe_adam_consts decayed, zoe_adam_consts exempt,
                                 const zoe_adam_run_cuda *runs, int count, size_t total,
                                 float *master, float *m, float *v, const float *grad, void *out,
                                 int odt) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const zoe_adam_run_cuda &run = runs[run_of(runs, count, i)];
        adam_element(run.no_decay ? exempt : decayed, master, m, v, grad, out, odt,
                     run.offset + (i - run.begin));
    }
}

/* Sum of the block's values in a fixed tree order; the result in part[0]. */
__device__ void block_sum_fixed(double *part) {
    __syncthreads();
    for (int k = kThreads / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
}

/* Pass 1 of the norm: block b sums the squares of positions b*kThreads + t + j*grid*kThreads
 * (j = 0, 1, ...) thread by thread, then the block in a fixed tree; partials[b] the result.
 * The grid is a function of the total alone, so the order never depends on the GPU. */
__global__ void sumsq_runs_kernel(const zoe_adam_run_cuda *runs, int count, size_t total,
                                  const float *grad, double *partials) {
    __shared__ double part[kThreads];
    double s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const zoe_adam_run_cuda &run = runs[run_of(runs, count, i)];
        if (run.counted) {
            double x = grad[run.offset + (i - run.begin)];
            s += x * x;
        }
    }
    part[threadIdx.x] = s;
    block_sum_fixed(part);
    if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

/* Pass 2: one block adds the partials, each thread a fixed strided subset, then the tree. */
__global__ void sum_partials_kernel(const double *partials, int n, double *result) {
    __shared__ double part[kThreads];
    double s = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) s += partials[i];
    part[threadIdx.x] = s;
    block_sum_fixed(part);
    if (threadIdx.x == 0) *result = part[0];
}

__global__ void accumulate_kernel(float *dst, const void *src, int sdt, float scale, int assign,
                                  size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __fmul_rn(load_as_f32(src, i, sdt), scale);
        dst[i] = assign ? x : __fadd_rn(dst[i], x);
    }
}

__global__ void convert_kernel(void *dst, int ddt, const void *src, int sdt, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(dst, i, ddt, load_as_f32(src, i, sdt));
}

} // namespace

extern "C" zoe_status zoe_adam_cuda(void *stream, const zoe_adam_consts *c, float *master, float *m,
                                    float *v, const float *grad, void *out, zoe_dtype out_dtype,
                                    size_t n) {
    if (out && !zoe_dtype_is_float(out_dtype))
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
    if (!zoe_dtype_is_float(src_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "accumulate: gradient dtype %s is not float",
                        zoe_dtype_name(src_dtype));
    if (n == 0) return ZOE_OK;
    accumulate_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, src, src_dtype,
                                                                            scale, assign, n);
    return check(cudaGetLastError(), "accumulate kernel launch");
}

extern "C" zoe_status zoe_adam_runs_cuda(void *stream, const zoe_adam_consts *decayed,
                                         const zoe_adam_consts *exempt,
                                         const zoe_adam_run_cuda *runs, int count, size_t total,
                                         float *master, float *m, float *v, const float *grad,
                                         void *out, zoe_dtype out_dtype) {
    if (out && !zoe_dtype_is_float(out_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam: output dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(out_dtype));
    if (total == 0) return ZOE_OK;
    adam_runs_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        *decayed, *exempt, runs, count, total, master, m, v, grad, out, (int)out_dtype);
    return check(cudaGetLastError(), "adam runs kernel launch");
}

extern "C" zoe_status zoe_sumsq_runs_cuda(void *stream, const zoe_adam_run_cuda *runs, int count,
                                          size_t total, const float *grad, double *partials,
                                          double *result) {
    cudaStream_t s = (cudaStream_t)stream;
    const size_t per_block = (size_t)kThreads * 16;
    size_t blocks = (total + per_block - 1) / per_block;
    if (blocks > ZOE_SUMSQ_MAX_BLOCKS) blocks = ZOE_SUMSQ_MAX_BLOCKS;
    if (blocks == 0) blocks = 1;
    sumsq_runs_kernel<<<(unsigned)blocks, kThreads, 0, s>>>(runs, count, total, grad, partials);
    ZOE_TRY(check(cudaGetLastError(), "sumsq kernel launch"));
    sum_partials_kernel<<<1, kThreads, 0, s>>>(partials, (int)blocks, result);
    return check(cudaGetLastError(), "sum of partials launch");
}

extern "C" zoe_status zoe_convert_cuda(void *stream, void *dst, zoe_dtype dst_dtype,
                                       const void *src, zoe_dtype src_dtype, size_t n) {
    if (!zoe_dtype_is_float(dst_dtype) || !zoe_dtype_is_float(src_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "convert: %s to %s is not a float conversion",
                        zoe_dtype_name(src_dtype), zoe_dtype_name(dst_dtype));
    if (n == 0) return ZOE_OK;
    convert_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(dst, dst_dtype, src,
                                                                         src_dtype, n);
    return check(cudaGetLastError(), "convert kernel launch");
}
