/* Softmax cross-entropy on CUDA, in the stages of the public header. The row stages run one
 * 256-thread block per row: threads stride over the valid columns in 16-byte packs when the
 * rows allow it, and a fixed-order block reduction (warp shuffles, then one warp) combines
 * them. The loss stage computes each row's loss on the device, copies losses and counted flags
 * to page-locked memory, waits for the stream and takes the mean on the host in row order, so
 * it is reproducible. Backward rewrites the logits in place: each element is read and written
 * by the same thread.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include "kernels/cuda/cuda_util.cuh"

enum { ROW_THREADS = 256 };

/* Column of the target in this rank's valid range, or -1. */
static __device__ __forceinline__ int64_t target_column(int32_t target, int64_t vocab_start,
                                                        int64_t v_valid, int32_t ignore_index) {
    if (target == ignore_index) return -1;
    const int64_t col = (int64_t)target - vocab_start;
    return col >= 0 && col < v_valid ? col : -1;
}

/* Reduces f(logit) over the valid columns of row r: sum, or max when is_max. */
template <int N, typename T, typename F>
static __device__ float reduce_row(const T *row, int64_t v_valid, bool is_max, F f,
                                   float *scratch) {
    float acc = is_max ? -INFINITY : 0.0f;
    const int64_t packs = v_valid / N;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        float v[N];
        zoe_load<N>(v, row + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) acc = is_max ? fmaxf(acc, f(v[i])) : acc + f(v[i]);
    }
    for (int64_t c = packs * N + threadIdx.x; c < v_valid; c += blockDim.x) {
        const float v = f(zoe_to_f32(row[c]));
        acc = is_max ? fmaxf(acc, v) : acc + v;
    }
    return zoe_block_reduce(acc, is_max, scratch);
}

struct identity {
    __device__ float operator()(float x) const { return x; }
};

struct exp_shifted {
    float m;
    __device__ float operator()(float x) const { return expf(x - m); }
};

template <int N, typename T>
__global__ void row_max_kernel(float *row_max, const T *logits, int64_t V, int64_t v_valid) {
    __shared__ float scratch[32];
    const int64_t r = blockIdx.x;
    const float m = reduce_row<N>(logits + r * V, v_valid, true, identity{}, scratch);
    if (threadIdx.x == 0) row_max[r] = m;
}

template <int N, typename T>
__global__ void row_sums_kernel(float *sum_exp, float *target_logit, const T *logits,
                                const float *row_max, const int32_t *targets, int64_t V,
                                int64_t v_valid, int64_t vocab_start, int32_t ignore_index) {
    __shared__ float scratch[32];
    const int64_t r = blockIdx.x;
    const T *row = logits + r * V;
    const float s = reduce_row<N>(row, v_valid, false, exp_shifted{row_max[r]}, scratch);
    if (threadIdx.x == 0) {
        sum_exp[r] = s;
        const int64_t col = target_column(targets[r], vocab_start, v_valid, ignore_index);
        target_logit[r] = col >= 0 ? zoe_to_f32(row[col]) : 0.0f;
    }
}

/* loss[r] = log(sum_exp) + row_max - target_logit, counted[r] = 1; both 0 for ignored rows. */
__global__ void row_loss_kernel(float *loss, float *counted, const float *row_max,
                                const float *sum_exp, const float *target_logit,
                                const int32_t *targets, int64_t rows, int32_t ignore_index) {
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        const bool use = targets[r] != ignore_index;
        loss[r] = use ? logf(sum_exp[r]) + row_max[r] - target_logit[r] : 0.0f;
        counted[r] = use ? 1.0f : 0.0f;
    }
}

/* dlogits = (softmax - onehot) * scale on valid columns, 0 on padding and ignored rows. */
template <int N, typename T>
__global__ void xent_backward_kernel(T *dlogits, const T *logits, const float *row_max,
                                     const float *sum_exp, const int32_t *targets, int64_t V,
                                     int64_t v_valid, int64_t vocab_start, int32_t ignore_index,
                                     float scale) {
    const int64_t r = blockIdx.x;
    const bool ignored = targets[r] == ignore_index;
    const int64_t col = target_column(targets[r], vocab_start, v_valid, ignore_index);
    const float m = row_max[r], k = scale / sum_exp[r];
    const T *in = logits + r * V;
    T *out = dlogits + r * V;
    for (int64_t p = threadIdx.x; p < V / N; p += blockDim.x) {
        float v[N];
        zoe_load<N>(v, in + p * N);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int64_t c = p * N + i;
            v[i] = ignored || c >= v_valid ? 0.0f : expf(v[i] - m) * k - (c == col ? scale : 0.0f);
        }
        zoe_store<N>(out + p * N, v);
    }
}

/* Launches kernel<N or 1> with one block per row: packs when every row start is aligned. */
#define LAUNCH_ROWS(kernel, T, N, packed, ...)                                                     \
    do {                                                                                           \
        if (packed)                                                                                \
            kernel<N, T><<<(unsigned)rows, ROW_THREADS, 0, ck->stream>>>(__VA_ARGS__);             \
        else                                                                                       \
            kernel<1, T><<<(unsigned)rows, ROW_THREADS, 0, ck->stream>>>(__VA_ARGS__);             \
    } while (0)

extern "C" zoe_status zoe_cuda_xent_row_max(zoe_cuda_kernels *ck, zoe_dtype dt, float *row_max,
                                            const void *logits, int64_t rows, int64_t V,
                                            int64_t v_valid) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        LAUNCH_ROWS(row_max_kernel, T, N, (zoe_packable<T, N>(V, {logits})), row_max,
                    (const T *)logits, V, v_valid);
        return zoe_cuda_launched("row_max_kernel");
    });
}

extern "C" zoe_status zoe_cuda_xent_row_sums(zoe_cuda_kernels *ck, zoe_dtype dt, float *sum_exp,
                                             float *target_logit, const void *logits,
                                             const float *row_max, const int32_t *targets,
                                             int64_t rows, int64_t V, int64_t v_valid,
                                             int64_t vocab_start, int32_t ignore_index) {
    if (rows == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        LAUNCH_ROWS(row_sums_kernel, T, N, (zoe_packable<T, N>(V, {logits})), sum_exp, target_logit,
                    (const T *)logits, row_max, targets, V, v_valid, vocab_start, ignore_index);
        return zoe_cuda_launched("row_sums_kernel");
    });
}

extern "C" zoe_status zoe_cuda_xent_loss(zoe_cuda_kernels *ck, float *losses, float *mean_loss,
                                         int64_t *count, const float *row_max, const float *sum_exp,
                                         const float *target_logit, const int32_t *targets,
                                         int64_t rows, int32_t ignore_index) {
    if (rows > 0) {
        float *loss = ck->row_loss, *counted = ck->row_loss + rows;
        row_loss_kernel<<<zoe_grid_for(ck, rows, 256), 256, 0, ck->stream>>>(
            loss, counted, row_max, sum_exp, target_logit, targets, rows, ignore_index);
        ZOE_TRY(zoe_cuda_launched("row_loss_kernel"));
        ZOE_CUDA_TRY(cudaMemcpyAsync(ck->host_loss, ck->row_loss, 2 * (size_t)rows * sizeof(float),
                                     cudaMemcpyDeviceToHost, ck->stream));
        ZOE_CUDA_TRY(cudaStreamSynchronize(ck->stream)); /* the values are returned on the host */
    }
    double total = 0.0; /* serial, in row order: the mean is reproducible */
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        const bool use = ck->host_loss[rows + r] != 0.0f;
        if (use) total += ck->host_loss[r], counted++;
        if (losses) losses[r] = ck->host_loss[r];
    }
    if (mean_loss) *mean_loss = counted ? (float)(total / (double)counted) : 0.0f;
    if (count) *count = counted;
    return ZOE_OK;
}

extern "C" zoe_status zoe_cuda_xent_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dlogits,
                                             const void *logits, const float *row_max,
                                             const float *sum_exp, const int32_t *targets,
                                             int64_t rows, int64_t V, int64_t v_valid,
                                             int64_t vocab_start, int32_t ignore_index,
                                             float scale) {
    if (rows == 0 || V == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<T>();
        LAUNCH_ROWS(xent_backward_kernel, T, N, (zoe_packable<T, N>(V, {dlogits, logits})),
                    (T *)dlogits, (const T *)logits, row_max, sum_exp, targets, V, v_valid,
                    vocab_start, ignore_index, scale);
        return zoe_cuda_launched("xent_backward_kernel");
    });
}
