/* LayerNorm and RMSNorm (LayerNorm without the mean and the bias) on CUDA. Forward and the dx half
 * of backward run one warp per row (8 rows per 256-thread block): lanes stride over the row in
 * 16-byte packs when C and the pointers allow it, reductions are warp shuffles, and the statistics
 * take two passes over the row (mean, then the centred sum of squares: no cancellation), the second
 * one mostly from L1. dgamma and dbeta are deterministic column sums (colsum.cuh) of dy * xhat and
 * dy, recomputing xhat from the saved mean and rstd.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include "kernels/cuda/colsum.cuh"

#define LN_EPS 1e-5f

enum { ROWS_PER_BLOCK = 8 };

/* The calling warp's row, or -1 past the end. */
static __device__ __forceinline__ int64_t warp_row(int64_t rows) {
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    return r < rows ? r : -1;
}

static unsigned row_blocks(int64_t rows) {
    return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

template <int N, typename T>
__global__ void layernorm_forward_kernel(T *y, float *mean, float *rstd, const T *x, const T *gamma,
                                         const T *beta, int64_t rows, int64_t C) {
    const int64_t r = warp_row(rows);
    if (r < 0) return;
    const int lane = threadIdx.x % 32;
    const T *xr = x + r * C;
    T *yr = y + r * C;
    const int64_t packs = C / N;
    float sum = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N];
        zoe_load<N>(v, xr + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) sum += v[i];
    }
    const float mu = zoe_warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N];
        zoe_load<N>(v, xr + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) var += (v[i] - mu) * (v[i] - mu);
    }
    const float rs = rsqrtf(zoe_warp_sum(var) / (float)C + LN_EPS);
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], g[N], b[N], out[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(g, gamma + p * N);
        zoe_load<N>(b, beta + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) out[i] = (v[i] - mu) * rs * g[i] + b[i];
        zoe_store<N>(yr + p * N, out);
    }
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/* dx += rstd (dy g - mean(dy g) - xhat mean(dy g xhat)). */
template <int N, typename T>
__global__ void layernorm_backward_dx_kernel(T *dx, const T *dy, const T *x, const T *gamma,
                                             const float *mean, const float *rstd, int64_t rows,
                                             int64_t C) {
    const int64_t r = warp_row(rows);
    if (r < 0) return;
    const int lane = threadIdx.x % 32;
    const T *xr = x + r * C, *dyr = dy + r * C;
    T *dxr = dx + r * C;
    const float mu = mean[r], rs = rstd[r];
    const int64_t packs = C / N;
    float s_dn = 0.0f, s_dnx = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], d[N], g[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(d, dyr + p * N);
        zoe_load<N>(g, gamma + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const float dn = d[i] * g[i];
            s_dn += dn;
            s_dnx += dn * (v[i] - mu) * rs;
        }
    }
    s_dn = zoe_warp_sum(s_dn) / (float)C;
    s_dnx = zoe_warp_sum(s_dnx) / (float)C;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], d[N], g[N], o[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(d, dyr + p * N);
        zoe_load<N>(g, gamma + p * N);
        zoe_load<N>(o, dxr + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) o[i] += rs * (d[i] * g[i] - s_dn - (v[i] - mu) * rs * s_dnx);
        zoe_store<N>(dxr + p * N, o);
    }
}

/* dgamma[c] += dy xhat, dbeta[c] += dy, over rows. */
template <typename T> struct layernorm_param_grads {
    static constexpr int outputs = 2;
    const T *dy, *x;
    const float *mean, *rstd;
    int64_t C;
    __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
        const float d = zoe_to_f32(dy[r * C + c]);
        v[0] = d * (zoe_to_f32(x[r * C + c]) - mean[r]) * rstd[r];
        v[1] = d;
    }
};

extern "C" zoe_status zoe_cuda_layernorm_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                                 float *mean, float *rstd, const void *x,
                                                 const void *gamma, const void *beta, int64_t rows,
                                                 int64_t C) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        const unsigned blocks = row_blocks(rows), threads = 32 * ROWS_PER_BLOCK;
        if (zoe_packable<T, N>(C, {y, x, gamma, beta}))
            layernorm_forward_kernel<N><<<blocks, threads, 0, ck->stream>>>(
                (T *)y, mean, rstd, (const T *)x, (const T *)gamma, (const T *)beta, rows, C);
        else
            layernorm_forward_kernel<1><<<blocks, threads, 0, ck->stream>>>(
                (T *)y, mean, rstd, (const T *)x, (const T *)gamma, (const T *)beta, rows, C);
        return zoe_cuda_launched("layernorm_forward_kernel");
    });
}

extern "C" zoe_status zoe_cuda_layernorm_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dx,
                                                  void *dgamma, void *dbeta, const void *dy,
                                                  const void *x, const void *gamma,
                                                  const float *mean, const float *rstd,
                                                  int64_t rows, int64_t C) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        if (dx) {
            const unsigned blocks = row_blocks(rows), threads = 32 * ROWS_PER_BLOCK;
            if (zoe_packable<T, N>(C, {dx, dy, x, gamma}))
                layernorm_backward_dx_kernel<N><<<blocks, threads, 0, ck->stream>>>(
                    (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma, mean, rstd, rows, C);
            else
                layernorm_backward_dx_kernel<1><<<blocks, threads, 0, ck->stream>>>(
                    (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma, mean, rstd, rows, C);
            ZOE_TRY(zoe_cuda_launched("layernorm_backward_dx_kernel"));
        }
        if (!dgamma && !dbeta) return ZOE_OK;
        const zoe_colsum_out<T> out = {{(T *)dgamma, (T *)dbeta}};
        const layernorm_param_grads<T> value = {(const T *)dy, (const T *)x, mean, rstd, C};
        return zoe_cuda_column_sums(ck, value, out, rows, C);
    });
}

/* ---- RMSNorm ---- */

template <int N, typename T>
__global__ void rmsnorm_forward_kernel(T *y, float *rstd, const T *x, const T *gamma, int64_t rows,
                                       int64_t C, float eps) {
    const int64_t r = warp_row(rows);
    if (r < 0) return;
    const int lane = threadIdx.x % 32;
    const T *xr = x + r * C;
    T *yr = y + r * C;
    const int64_t packs = C / N;
    float ss = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N];
        zoe_load<N>(v, xr + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) ss += v[i] * v[i];
    }
    const float rs = rsqrtf(zoe_warp_sum(ss) / (float)C + eps);
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], g[N], out[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(g, gamma + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) out[i] = v[i] * rs * g[i];
        zoe_store<N>(yr + p * N, out);
    }
    if (lane == 0) rstd[r] = rs;
}

/* dx += rstd (dy g - xhat mean(dy g xhat)). */
template <int N, typename T>
__global__ void rmsnorm_backward_dx_kernel(T *dx, const T *dy, const T *x, const T *gamma,
                                           const float *rstd, int64_t rows, int64_t C) {
    const int64_t r = warp_row(rows);
    if (r < 0) return;
    const int lane = threadIdx.x % 32;
    const T *xr = x + r * C, *dyr = dy + r * C;
    T *dxr = dx + r * C;
    const float rs = rstd[r];
    const int64_t packs = C / N;
    float s_dnx = 0.0f;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], d[N], g[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(d, dyr + p * N);
        zoe_load<N>(g, gamma + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) s_dnx += d[i] * g[i] * v[i] * rs;
    }
    s_dnx = zoe_warp_sum(s_dnx) / (float)C;
    for (int64_t p = lane; p < packs; p += 32) {
        float v[N], d[N], g[N], o[N];
        zoe_load<N>(v, xr + p * N);
        zoe_load<N>(d, dyr + p * N);
        zoe_load<N>(g, gamma + p * N);
        zoe_load<N>(o, dxr + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) o[i] += rs * (d[i] * g[i] - v[i] * rs * s_dnx);
        zoe_store<N>(dxr + p * N, o);
    }
}

/* dgamma[c] += dy xhat over rows. */
template <typename T> struct rmsnorm_param_grad {
    static constexpr int outputs = 1;
    const T *dy, *x;
    const float *rstd;
    int64_t C;
    __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
        v[0] = zoe_to_f32(dy[r * C + c]) * zoe_to_f32(x[r * C + c]) * rstd[r];
    }
};

extern "C" zoe_status zoe_cuda_rmsnorm_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                               float *rstd, const void *x, const void *gamma,
                                               int64_t rows, int64_t C, float eps) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        const unsigned blocks = row_blocks(rows), threads = 32 * ROWS_PER_BLOCK;
        if (zoe_packable<T, N>(C, {y, x, gamma}))
            rmsnorm_forward_kernel<N><<<blocks, threads, 0, ck->stream>>>(
                (T *)y, rstd, (const T *)x, (const T *)gamma, rows, C, eps);
        else
            rmsnorm_forward_kernel<1><<<blocks, threads, 0, ck->stream>>>(
                (T *)y, rstd, (const T *)x, (const T *)gamma, rows, C, eps);
        return zoe_cuda_launched("rmsnorm_forward_kernel");
    });
}

extern "C" zoe_status zoe_cuda_rmsnorm_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dx,
                                                void *dgamma, const void *dy, const void *x,
                                                const void *gamma, const float *rstd, int64_t rows,
                                                int64_t C) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        if (dx) {
            const unsigned blocks = row_blocks(rows), threads = 32 * ROWS_PER_BLOCK;
            if (zoe_packable<T, N>(C, {dx, dy, x, gamma}))
                rmsnorm_backward_dx_kernel<N><<<blocks, threads, 0, ck->stream>>>(
                    (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma, rstd, rows, C);
            else
                rmsnorm_backward_dx_kernel<1><<<blocks, threads, 0, ck->stream>>>(
                    (T *)dx, (const T *)dy, (const T *)x, (const T *)gamma, rstd, rows, C);
            ZOE_TRY(zoe_cuda_launched("rmsnorm_backward_dx_kernel"));
        }
        if (!dgamma) return ZOE_OK;
        const zoe_colsum_out<T> out = {{(T *)dgamma}};
        const rmsnorm_param_grad<T> value = {(const T *)dy, (const T *)x, rstd, C};
        return zoe_cuda_column_sums(ck, value, out, rows, C);
    });
}
