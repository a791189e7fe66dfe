/* Internal to kernels/cuda: deterministic column sums, shared by matmul (db), LayerNorm
 * (dgamma, dbeta) and embedding (dwpe).
 *
 * out_k[c] += sum over rows r of value_k(r, c), k < V::outputs, summed in fp32 and stored in
 * T. Rows are split into `groups` contiguous ranges chosen from the shape and the plan alone.
 * A 32 x 8 block sums 32 columns of one range: each warp reads 32 consecutive columns of a
 * row (coalesced), its 8 rows-strided threads keep private sums that are then added in thread
 * order. With one group the block adds into out directly; otherwise each group writes its
 * sums to ck->partials and a second kernel adds the groups in order. No atomics anywhere, so
 * the result is the same on every run.
 *
 * The functor V has `static constexpr int outputs` (1 or 2) and
 * `__device__ void operator()(int64_t r, int64_t c, float (&v)[outputs]) const`.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CUDA_COLSUM_CUH
#define ZOE_KERNELS_CUDA_COLSUM_CUH

#include "kernels/cuda/cuda_util.cuh"

enum {
    ZOE_COLSUM_COLS = 32,           /* columns per block, one per lane */
    ZOE_COLSUM_ROW_THREADS = 8,     /* row-strided threads per column */
    ZOE_COLSUM_MAX_GROUPS = 64,     /* row groups at most (partials planned for this many) */
    ZOE_COLSUM_ROWS_PER_GROUP = 64, /* fewer rows than this per group are not worth a group */
    ZOE_COLSUM_MAX_OUTPUTS = 2,
};

/* Output columns; p[k] NULL drops output k (it is still summed). */
template <typename T> struct zoe_colsum_out { T *p[ZOE_COLSUM_MAX_OUTPUTS]; };

/* The plain column sums of a row-major matrix m[rows, ld]. */
template <typename T> struct zoe_colsum_rows {
    static constexpr int outputs = 1;
    const T *m;
    int64_t ld;
    __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
        v[0] = zoe_to_f32(m[r * ld + c]);
    }
};

template <typename T>
static __device__ __forceinline__ void zoe_colsum_add(T *out, int64_t c, float s) {
    if (out) out[c] = zoe_from_f32<T>(zoe_to_f32(out[c]) + s);
}

template <typename T, typename V>
__global__ void zoe_colsum_kernel(V value, zoe_colsum_out<T> out, float *partials, int64_t rows,
                                  int64_t cols, int groups) {
    constexpr int K = V::outputs;
    __shared__ float sums[K][ZOE_COLSUM_ROW_THREADS][ZOE_COLSUM_COLS + 1];
    const int64_t c = (int64_t)blockIdx.x * ZOE_COLSUM_COLS + threadIdx.x;
    const int g = blockIdx.y;
    const int64_t r0 = rows * g / groups, r1 = rows * (g + 1) / groups;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; k++) acc[k] = 0.0f;
    if (c < cols) {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += ZOE_COLSUM_ROW_THREADS) {
            float v[K];
            value(r, c, v);
#pragma unroll
            for (int k = 0; k < K; k++) acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) sums[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y != 0 || c >= cols) return;
#pragma unroll
    for (int k = 0; k < K; k++) {
        float s = 0.0f;
#pragma unroll
        for (int t = 0; t < ZOE_COLSUM_ROW_THREADS; t++) s += sums[k][t][threadIdx.x];
        if (groups == 1)
            zoe_colsum_add(out.p[k], c, s);
        else
            partials[((int64_t)g * K + k) * cols + c] = s;
    }
}

/* out_k[c] += the groups' partial sums, in group order. */
template <typename T, int K>
__global__ void zoe_colsum_finish_kernel(zoe_colsum_out<T> out, const float *partials, int64_t cols,
                                         int groups) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            float s = 0.0f;
            for (int g = 0; g < groups; g++) s += partials[((int64_t)g * K + k) * cols + c];
            zoe_colsum_add(out.p[k], c, s);
        }
    }
}

/* The number of row groups: about ROWS_PER_GROUP rows each, at most MAX_GROUPS, and no more
 * than the partials buffer holds. Depends on the shape and the plan only. */
static inline int zoe_colsum_groups(const zoe_cuda_kernels *ck, int64_t rows, int64_t cols,
                                    int outputs) {
    int64_t g = (rows + ZOE_COLSUM_ROWS_PER_GROUP - 1) / ZOE_COLSUM_ROWS_PER_GROUP;
    if (g > ZOE_COLSUM_MAX_GROUPS) g = ZOE_COLSUM_MAX_GROUPS;
    const int64_t fit = (int64_t)(ck->partial_floats / (size_t)(outputs * (cols > 0 ? cols : 1)));
    if (g > fit) g = fit;
    return g > 1 ? (int)g : 1;
}

template <typename T, typename V>
static zoe_status zoe_cuda_column_sums(zoe_cuda_kernels *ck, V value, zoe_colsum_out<T> out,
                                       int64_t rows, int64_t cols) {
    constexpr int K = V::outputs;
    static_assert(K >= 1 && K <= ZOE_COLSUM_MAX_OUTPUTS, "column sums: 1 or 2 outputs");
    if (rows == 0 || cols == 0) return ZOE_OK;
    const int groups = zoe_colsum_groups(ck, rows, cols, K);
    const dim3 block(ZOE_COLSUM_COLS, ZOE_COLSUM_ROW_THREADS);
    const dim3 grid((unsigned)((cols + ZOE_COLSUM_COLS - 1) / ZOE_COLSUM_COLS), (unsigned)groups);
    zoe_colsum_kernel<T, V>
        <<<grid, block, 0, ck->stream>>>(value, out, ck->partials, rows, cols, groups);
    ZOE_TRY(zoe_cuda_launched("zoe_colsum_kernel"));
    if (groups == 1) return ZOE_OK;
    zoe_colsum_finish_kernel<T, K>
        <<<zoe_grid_for(ck, cols, 256), 256, 0, ck->stream>>>(out, ck->partials, cols, groups);
    return zoe_cuda_launched("zoe_colsum_finish_kernel");
}

#endif
