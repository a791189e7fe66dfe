/* Element-wise ops on CUDA: residual (y = a + b), add (y += x), scale (y *= s) and casts, all
 * through the packed map of map.cuh.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include "kernels/cuda/map.cuh"

struct sum_op {
    __device__ float operator()(float a, float b, float) const { return a + b; }
};

struct scale_op {
    float s;
    __device__ float operator()(float a, float, float) const { return a * s; }
};

struct copy_op {
    __device__ float operator()(float a, float, float) const { return a; }
};

extern "C" zoe_status zoe_cuda_residual_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                                const void *a, const void *b, int64_t n) {
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return zoe_cuda_map<2>(ck, "residual", sum_op{}, (T *)y, (const T *)a, (const T *)b,
                               (const T *)NULL, n);
    });
}

extern "C" zoe_status zoe_cuda_add(zoe_cuda_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                   int64_t n) {
    return zoe_cuda_residual_forward(ck, dt, y, y, x, n);
}

extern "C" zoe_status zoe_cuda_scale(zoe_cuda_kernels *ck, zoe_dtype dt, void *y, float s,
                                     int64_t n) {
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return zoe_cuda_map<1>(ck, "scale", scale_op{s}, (T *)y, (const T *)y, (const T *)NULL,
                               (const T *)NULL, n);
    });
}

extern "C" zoe_status zoe_cuda_cast(zoe_cuda_kernels *ck, void *dst, zoe_dtype dst_dt,
                                    const void *src, zoe_dtype src_dt, int64_t n) {
    if (dst_dt == src_dt) {
        ZOE_CUDA_TRY(cudaMemcpyAsync(dst, src, (size_t)n * zoe_dtype_size(dst_dt),
                                     cudaMemcpyDeviceToDevice, ck->stream));
        return ZOE_OK;
    }
    return zoe_cuda_with_dtype(dst_dt, [&](auto dtag) {
        using TY = typename decltype(dtag)::type;
        return zoe_cuda_with_dtype(src_dt, [&](auto stag) {
            using TX = typename decltype(stag)::type;
            return zoe_cuda_map<1>(ck, "cast", copy_op{}, (TY *)dst, (const TX *)src,
                                   (const TX *)NULL, (const TX *)NULL, n);
        });
    });
}
