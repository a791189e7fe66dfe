/* GELU (tanh approximation) on CUDA: the packed element-wise map of map.cuh with tanhf.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include "kernels/cuda/map.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

struct gelu_op {
    __device__ float operator()(float x, float, float) const {
        const float t = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
        return 0.5f * x * (1.0f + t);
    }
};

/* dx + dy * gelu'(x), gelu'(x) = (1 + t) / 2 + x (1 - t^2) s (1 + 3 c x^2) / 2. */
struct gelu_backward_op {
    __device__ float operator()(float dx, float dy, float x) const {
        const float t = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
        const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        return dx + dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
};

extern "C" zoe_status zoe_cuda_gelu_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                            const void *x, int64_t n) {
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return zoe_cuda_map<1>(ck, "gelu_forward", gelu_op{}, (T *)y, (const T *)x, (const T *)NULL,
                               (const T *)NULL, n);
    });
}

extern "C" zoe_status zoe_cuda_gelu_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dx,
                                             const void *dy, const void *x, int64_t n) {
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return zoe_cuda_map<3>(ck, "gelu_backward", gelu_backward_op{}, (T *)dx, (const T *)dx,
                               (const T *)dy, (const T *)x, n);
    });
}
