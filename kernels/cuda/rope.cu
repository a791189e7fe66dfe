/* Rotary position embedding on CUDA, in place: one thread per rotated pair (i, i + HS/2) of
 * one head of one row, grid-stride. The angle is the fp32 product t * inv_freq[i], as on the
 * CPU and in Hugging Face; its cos and sin are taken in double and rounded to float, so both
 * backends rotate by the same correctly rounded values. Backward negates the sine.
 *
 * Explained in docs/hf.md. */
#include "kernels/cuda/cuda_util.cuh"

template <typename T>
__global__ void rope_kernel(T *x, const float *inv_freq, int64_t pos0, int64_t rows, int64_t T_len,
                            int64_t heads, int64_t half, int64_t head_stride, int64_t row_stride,
                            float sign) {
    const int64_t n = rows * heads * half, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const int64_t i = e % half, h = (e / half) % heads, r = e / (half * heads);
        const float angle = (float)(pos0 + r % T_len) * inv_freq[i];
        double sd, cd;
        sincos((double)angle, &sd, &cd);
        const float c = (float)cd, s = sign * (float)sd;
        T *v = x + r * row_stride + h * head_stride;
        const float a = zoe_to_f32(v[i]), b = zoe_to_f32(v[i + half]);
        v[i] = zoe_from_f32<T>(a * c - b * s);
        v[i + half] = zoe_from_f32<T>(b * c + a * s);
    }
}

/* Row r of the B*T rows is position pos0 + r % T. */
static zoe_status rope(zoe_cuda_kernels *ck, zoe_dtype dt, void *x, const float *inv_freq,
                       int64_t pos0, int64_t B, int64_t T, int64_t heads, int64_t HS,
                       int64_t head_stride, int64_t row_stride, float sign) {
    const int64_t n = B * T * heads * (HS / 2);
    if (n == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const int threads = 256;
        rope_kernel<E><<<zoe_grid_for(ck, n, threads), threads, 0, ck->stream>>>(
            (E *)x, inv_freq, pos0, B * T, T, heads, HS / 2, head_stride, row_stride, sign);
        return zoe_cuda_launched("rope_kernel");
    });
}

extern "C" zoe_status zoe_cuda_rope_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *x,
                                            const float *inv_freq, int64_t B, int64_t T,
                                            int64_t heads, int64_t HS, int64_t head_stride,
                                            int64_t row_stride) {
    return rope(ck, dt, x, inv_freq, 0, B, T, heads, HS, head_stride, row_stride, 1.0f);
}

extern "C" zoe_status zoe_cuda_rope_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dx,
                                             const float *inv_freq, int64_t B, int64_t T,
                                             int64_t heads, int64_t HS, int64_t head_stride,
                                             int64_t row_stride) {
    return rope(ck, dt, dx, inv_freq, 0, B, T, heads, HS, head_stride, row_stride, -1.0f);
}

extern "C" zoe_status zoe_cuda_rope_forward_at(zoe_cuda_kernels *ck, zoe_dtype dt, void *x,
                                               const float *inv_freq, int64_t pos0, int64_t rows,
                                               int64_t heads, int64_t HS, int64_t head_stride,
                                               int64_t row_stride) {
    return rope(ck, dt, x, inv_freq, pos0, 1, rows, heads, HS, head_stride, row_stride, 1.0f);
}
