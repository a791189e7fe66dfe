/* Token + position embedding on CUDA.
 *
 * Forward: a grid-stride loop over (position, 16-byte pack of channels).
 * Backward, deterministically and without float atomics:
 *  - dwte: each position gets the key (token - vocab_start), or vocab_rows when the token is
 *    outside this rank's range; a stable radix sort (CUB) of (key, position) pairs puts the
 *    positions of each vocabulary row next to each other, in position order. One block per
 *    sorted index then does work only when it starts a run of equal keys: it sums that run's
 *    dy rows in fp32, in position order, over its slice of channels, and adds the sum into
 *    dwte once. The order of every sum is fixed by the data, not by scheduling. A token that
 *    fills much of the batch makes one long serial run (it is still correct, only slower).
 *  - dwpe: dwpe[t, c] sums dy over the batch: the column sums (colsum.cuh) of dy viewed as
 *    [B, T * C].
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include <cub/device/device_radix_sort.cuh>
#include "kernels/cuda/colsum.cuh"

enum { THREADS = 128 };

template <int N, typename T>
__global__ void embedding_forward_kernel(T *y, const int32_t *tokens, const T *wte, const T *wpe,
                                         int64_t rows, int64_t seq, int64_t C, int64_t vocab_start,
                                         int64_t vocab_rows) {
    const int64_t per_row = C / N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * per_row;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bt = i / per_row, c = i % per_row * N;
        const int64_t v = (int64_t)tokens[bt] - vocab_start;
        float out[N];
        if (v >= 0 && v < vocab_rows) {
            zoe_load<N>(out, wte + v * C + c);
        } else {
#pragma unroll
            for (int j = 0; j < N; j++) out[j] = 0.0f;
        }
        if (wpe) {
            float p[N];
            zoe_load<N>(p, wpe + bt % seq * C + c);
#pragma unroll
            for (int j = 0; j < N; j++) out[j] += p[j];
        }
        zoe_store<N>(y + bt * C + c, out);
    }
}

/* key[p] = the vocabulary row of position p, or vocab_rows outside the range; pos[p] = p. */
__global__ void embedding_keys_kernel(int32_t *key, int32_t *pos, const int32_t *tokens, int64_t n,
                                      int64_t vocab_start, int64_t vocab_rows) {
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t v = (int64_t)tokens[p] - vocab_start;
        key[p] = (int32_t)(v >= 0 && v < vocab_rows ? v : vocab_rows);
        pos[p] = (int32_t)p;
    }
}

/* Block (i, slice): when sorted index i starts a run of equal in-range keys, dwte[key] +=
 * sum of dy over the run's positions, for the block's slice of THREADS * N channels. */
template <int N, typename T>
__global__ void embedding_dwte_kernel(T *dwte, const T *dy, const int32_t *key, const int32_t *pos,
                                      int64_t n, int64_t C, int64_t vocab_rows) {
    const int64_t i = blockIdx.x;
    const int32_t v = key[i];
    if (v == vocab_rows || (i > 0 && key[i - 1] == v)) return;
    const int64_t c = ((int64_t)blockIdx.y * THREADS + threadIdx.x) * N;
    if (c >= C) return;
    float acc[N];
#pragma unroll
    for (int j = 0; j < N; j++) acc[j] = 0.0f;
    for (int64_t s = i; s < n && key[s] == v; s++) {
        float d[N];
        zoe_load<N>(d, dy + (int64_t)pos[s] * C + c);
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] += d[j];
    }
    float out[N];
    zoe_load<N>(out, dwte + (int64_t)v * C + c);
#pragma unroll
    for (int j = 0; j < N; j++) out[j] += acc[j];
    zoe_store<N>(dwte + (int64_t)v * C + c, out);
}

/* Bits that hold keys 0 ..= vocab_rows (the out-of-range key included). */
static int key_bits(int64_t vocab_rows) {
    int bits = 1;
    while (bits < 32 && (vocab_rows >> bits) != 0) bits++;
    return bits;
}

static zoe_status sort_temp_bytes(int64_t n, int bits, size_t *bytes) {
    *bytes = 0;
    ZOE_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, *bytes, (const int32_t *)NULL,
                                                 (int32_t *)NULL, (const int32_t *)NULL,
                                                 (int32_t *)NULL, (int)n, 0, bits));
    return ZOE_OK;
}

zoe_status zoe_cuda_embedding_sort_bytes(const zoe_kernel_plan *plan, size_t *bytes) {
    return sort_temp_bytes(plan->max_rows, 32, bytes);
}

extern "C" zoe_status zoe_cuda_embedding_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                                 const int32_t *tokens, const void *wte,
                                                 const void *wpe, int64_t B, int64_t T, int64_t C,
                                                 int64_t vocab_start, int64_t vocab_rows) {
    if (B * T == 0 || C == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        constexpr int N = zoe_vec_width<E>();
        const int64_t rows = B * T;
        if (zoe_packable<E, N>(C, {y, wte, wpe}))
            embedding_forward_kernel<N>
                <<<zoe_grid_for(ck, rows * C / N, 256), 256, 0, ck->stream>>>(
                    (E *)y, tokens, (const E *)wte, (const E *)wpe, rows, T, C, vocab_start,
                    vocab_rows);
        else
            embedding_forward_kernel<1><<<zoe_grid_for(ck, rows * C, 256), 256, 0, ck->stream>>>(
                (E *)y, tokens, (const E *)wte, (const E *)wpe, rows, T, C, vocab_start,
                vocab_rows);
        return zoe_cuda_launched("embedding_forward_kernel");
    });
}

template <typename E>
static zoe_status dwte_backward(zoe_cuda_kernels *ck, E *dwte, const E *dy, const int32_t *tokens,
                                int64_t n, int64_t C, int64_t vocab_start, int64_t vocab_rows) {
    int32_t *keys = ck->sort_keys, *pos = keys + n, *keys_sorted = pos + n,
            *pos_sorted = keys_sorted + n;
    const int bits = key_bits(vocab_rows);
    size_t temp = 0;
    ZOE_TRY(sort_temp_bytes(n, bits, &temp));
    if (temp > ck->sort_temp_bytes)
        return zoe_fail(ZOE_ERR_INTERNAL,
                        "embedding backward: the sort needs %zu bytes of scratch, %zu planned",
                        temp, ck->sort_temp_bytes);
    embedding_keys_kernel<<<zoe_grid_for(ck, n, 256), 256, 0, ck->stream>>>(
        keys, pos, tokens, n, vocab_start, vocab_rows);
    ZOE_TRY(zoe_cuda_launched("embedding_keys_kernel"));
    ZOE_CUDA_TRY(cub::DeviceRadixSort::SortPairs(ck->sort_temp, temp, keys, keys_sorted, pos,
                                                 pos_sorted, (int)n, 0, bits, ck->stream));
    constexpr int N = zoe_vec_width<E>();
    const bool packed = zoe_packable<E, N>(C, {dwte, dy});
    const int64_t per_block = THREADS * (packed ? N : 1);
    const dim3 grid((unsigned)n, (unsigned)((C + per_block - 1) / per_block));
    if (packed)
        embedding_dwte_kernel<N>
            <<<grid, THREADS, 0, ck->stream>>>(dwte, dy, keys_sorted, pos_sorted, n, C, vocab_rows);
    else
        embedding_dwte_kernel<1>
            <<<grid, THREADS, 0, ck->stream>>>(dwte, dy, keys_sorted, pos_sorted, n, C, vocab_rows);
    return zoe_cuda_launched("embedding_dwte_kernel");
}

extern "C" zoe_status zoe_cuda_embedding_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dwte,
                                                  void *dwpe, const void *dy, const int32_t *tokens,
                                                  int64_t B, int64_t T, int64_t C,
                                                  int64_t vocab_start, int64_t vocab_rows) {
    if (B * T == 0 || C == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        if (dwte && vocab_rows > 0)
            ZOE_TRY(dwte_backward(ck, (E *)dwte, (const E *)dy, tokens, B * T, C, vocab_start,
                                  vocab_rows));
        if (!dwpe) return ZOE_OK;
        const zoe_colsum_out<E> out = {{(E *)dwpe, NULL}};
        return zoe_cuda_column_sums(ck, zoe_colsum_rows<E>{(const E *)dy, T * C}, out, B, T * C);
    });
}
