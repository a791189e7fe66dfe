/* SwiGLU on CUDA: one thread per feature (a gate, up pair), grid-stride, expf in fp32.
 *
 * Explained in docs/hf.md. */
#include "kernels/cuda/cuda_util.cuh"

template <typename T> __global__ void swiglu_forward_kernel(T *y, const T *gu, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = zoe_to_f32(gu[2 * i]), u = zoe_to_f32(gu[2 * i + 1]);
        y[i] = zoe_from_f32<T>(g / (1.0f + expf(-g)) * u);
    }
}

/* dgate += dy u silu'(g), silu'(g) = s (1 + g (1 - s)); dup += dy silu(g). */
template <typename T>
__global__ void swiglu_backward_kernel(T *dgu, const T *dy, const T *gu, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float g = zoe_to_f32(gu[2 * i]), u = zoe_to_f32(gu[2 * i + 1]);
        const float d = zoe_to_f32(dy[i]), s = 1.0f / (1.0f + expf(-g));
        dgu[2 * i] = zoe_from_f32<T>(zoe_to_f32(dgu[2 * i]) + d * u * s * (1.0f + g * (1.0f - s)));
        dgu[2 * i + 1] = zoe_from_f32<T>(zoe_to_f32(dgu[2 * i + 1]) + d * g * s);
    }
}

extern "C" zoe_status zoe_cuda_swiglu_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                              const void *gu, int64_t rows, int64_t F) {
    const int64_t n = rows * F;
    if (n == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const int threads = 256;
        swiglu_forward_kernel<E>
            <<<zoe_grid_for(ck, n, threads), threads, 0, ck->stream>>>((E *)y, (const E *)gu, n);
        return zoe_cuda_launched("swiglu_forward_kernel");
    });
}

extern "C" zoe_status zoe_cuda_swiglu_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dgu,
                                               const void *dy, const void *gu, int64_t rows,
                                               int64_t F) {
    const int64_t n = rows * F;
    if (n == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const int threads = 256;
        swiglu_backward_kernel<E><<<zoe_grid_for(ck, n, threads), threads, 0, ck->stream>>>(
            (E *)dgu, (const E *)dy, (const E *)gu, n);
        return zoe_cuda_launched("swiglu_backward_kernel");
    });
}
