// Internal to kernels/cuda: one element of the fused Adam on the device, and what its kernels
// share (the dtype loads and stores, the run of a position). The arithmetic is the host's
// (kernels/cpu/adam_simd.h, adam_element) operation by operation, with the _rn intrinsics so that
// nvcc contracts nothing beyond the host's own fused multiply-adds: a partition updated on the
// device matches one updated on the host bit for bit. adam.cu (fp32 state) and adam_state.cu
// (compressed state) include it.
//
// Explained in docs/offload.md, "One step".
#ifndef ZOE_KERNELS_CUDA_ADAM_ELEMENT_CUH
#define ZOE_KERNELS_CUDA_ADAM_ELEMENT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
extern "C" {
#include "kernels/adam.h"
#include "runtime/error.h"
}

namespace zoe_adam_device {

constexpr int kThreads = 256;

inline zoe_status check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) return zoe_fail(ZOE_ERR_CUDA, "%s: %s", what, cudaGetErrorString(err));
    return ZOE_OK;
}

inline unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535u * 8u ? (b ? b : 1) : 65535u * 8u);
}

__device__ inline float load_as_f32(const void *p, size_t i, int dt) {
    if (dt == ZOE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (dt == ZOE_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

__device__ inline void store_from_f32(void *p, size_t i, int dt, float x) {
    if (dt == ZOE_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else if (dt == ZOE_F16)
        ((__half *)p)[i] = __float2half_rn(x);
    else
        ((float *)p)[i] = x;
}

/* The update of one element from the fp32 gradient grad: w, m, v in place, in the order of
 * kernels/adam.h. */
__device__ inline void adam_update(const zoe_adam_consts &c, float grad, float &w, float &m,
                                   float &v) {
    float g = __fmul_rn(grad, c.grad_scale);
    if (!c.decoupled) g = __fmaf_rn(c.l2, w, g);
    m = __fmaf_rn(c.beta1, m, __fmul_rn(c.one_minus_beta1, g));
    v = __fmaf_rn(c.beta2, v, __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    if (c.decoupled) w = __fmul_rn(w, c.decay);
    float denom = __fmaf_rn(__fsqrt_rn(v), c.inv_sqrt_bc2, c.eps);
    w = __fmaf_rn(-c.step_size, __fdiv_rn(m, denom), w);
}

/* The last run whose field key (begin: its first position in the runs' concatenation, or
 * offset: in the arrays; both increase along the table) is <= x. */
template <size_t zoe_adam_run_cuda::*key>
__device__ inline int last_run_at_or_below(const zoe_adam_run_cuda *runs, int count, size_t x) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (runs[mid].*key <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The run holding position i of the runs' concatenation. */
__device__ inline int run_of(const zoe_adam_run_cuda *runs, int count, size_t i) {
    return last_run_at_or_below<&zoe_adam_run_cuda::begin>(runs, count, i);
}

} // namespace zoe_adam_device

#endif
