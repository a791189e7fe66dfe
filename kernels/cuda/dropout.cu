// Dropout on CUDA: one thread per Philox block of four elements, the mask of kernels/philox.h,
// and the CPU's arithmetic (one fp32 multiply, then the storage rounding), so that masks and
// values equal the CPU backend's bit for bit.
//
// Explained in docs/tensor_parallel.md, "TP-invariant randomness".
#include <math.h>
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/philox.h"

template <typename T>
__global__ void dropout_kernel(T *y, const T *x, int64_t n, uint32_t threshold, float keep_scale,
                               uint64_t seed, uint64_t stream) {
    const int64_t blocks = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t words[4];
        zoe_philox_block_inline(seed, stream, (uint64_t)b, words);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t e = 4 * b + j;
            if (e >= n) break;
            const float v = zoe_dropout_keeps(words[j], threshold)
                                ? __fmul_rn(zoe_to_f32(x[e]), keep_scale)
                                : 0.0f;
            y[e] = zoe_from_f32<T>(v);
        }
    }
}

extern "C" zoe_status zoe_cuda_dropout(zoe_cuda_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                       int64_t n, float p, uint64_t seed, uint64_t stream) {
    if (n == 0) return ZOE_OK;
    /* Threshold and scale computed here, on the host, exactly as the CPU backend does. */
    const uint32_t threshold = (uint32_t)lrint((double)p * 16777216.0);
    const float keep_scale = 1.0f / (1.0f - p);
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        dropout_kernel<T><<<zoe_grid_for(ck, (n + 3) / 4, 256), 256, 0, ck->stream>>>(
            (T *)y, (const T *)x, n, threshold, keep_scale, seed, stream);
        return zoe_cuda_launched("dropout_kernel");
    });
}
