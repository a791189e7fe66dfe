/* Internal to kernels/cuda: element-wise maps y[i] = op(a[i], b[i], c[i]) over up to three
 * inputs of one storage type, arithmetic in fp32. Each thread moves 16-byte packs (8 bf16/fp16
 * or 4 fp32 elements) when every pointer is aligned for them, in a grid-stride loop, and the
 * last n % N elements one by one. y may alias an input: each element is read before it is
 * written, by the same thread.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CUDA_MAP_CUH
#define ZOE_KERNELS_CUDA_MAP_CUH

#include "kernels/cuda/cuda_util.cuh"

/* Elements [i, i + N) of the map. */
template <int N, int ARITY, typename TY, typename TX, typename Op>
static __device__ __forceinline__ void zoe_map_apply(const Op &op, TY *y, const TX *a, const TX *b,
                                                     const TX *c, int64_t i) {
    float va[N], vb[N], vc[N], out[N];
    zoe_load<N>(va, a + i);
#pragma unroll
    for (int j = 0; j < N; j++) vb[j] = vc[j] = 0.0f;
    if constexpr (ARITY > 1) zoe_load<N>(vb, b + i);
    if constexpr (ARITY > 2) zoe_load<N>(vc, c + i);
#pragma unroll
    for (int j = 0; j < N; j++) out[j] = op(va[j], vb[j], vc[j]);
    zoe_store<N>(y + i, out);
}

template <int N, int ARITY, typename TY, typename TX, typename Op>
__global__ void zoe_map_kernel(Op op, TY *y, const TX *a, const TX *b, const TX *c, int64_t n) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, packs = n / N;
    for (int64_t p = first; p < packs; p += stride) zoe_map_apply<N, ARITY>(op, y, a, b, c, p * N);
    for (int64_t i = packs * N + first; i < n; i += stride)
        zoe_map_apply<1, ARITY>(op, y, a, b, c, i);
}

/* Launches the map on the context's stream; b and c are read only when ARITY says so. */
template <int ARITY, typename TY, typename TX, typename Op>
static zoe_status zoe_cuda_map(zoe_cuda_kernels *ck, const char *name, Op op, TY *y, const TX *a,
                               const TX *b, const TX *c, int64_t n) {
    if (n == 0) return ZOE_OK;
    constexpr int wy = zoe_vec_width<TY>(), wx = zoe_vec_width<TX>();
    constexpr int N = wy < wx ? wy : wx;
    const size_t xb = N * sizeof(TX);
    const bool packed = zoe_aligned(y, N * sizeof(TY)) && zoe_aligned(a, xb) &&
                        (ARITY < 2 || zoe_aligned(b, xb)) && (ARITY < 3 || zoe_aligned(c, xb));
    const int threads = 256;
    if (packed)
        zoe_map_kernel<N, ARITY>
            <<<zoe_grid_for(ck, n / N + 1, threads), threads, 0, ck->stream>>>(op, y, a, b, c, n);
    else
        zoe_map_kernel<1, ARITY>
            <<<zoe_grid_for(ck, n, threads), threads, 0, ck->stream>>>(op, y, a, b, c, n);
    return zoe_cuda_launched(name);
}

#endif
