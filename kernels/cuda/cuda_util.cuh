/* Internal to kernels/cuda: the CUDA context and its workspace, error handling, storage-dtype
 * dispatch, fp32 views of fp32/bf16/fp16 elements (single and 16-byte packs), warp and block
 * reductions.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CUDA_UTIL_CUH
#define ZOE_KERNELS_CUDA_UTIL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <initializer_list>
#include "kernels/attention_plan.h"
#include "kernels/cuda/cuda_ops.h"

extern "C" {
#include "runtime/error.h"
}

/* ---- the context ---- */

struct zoe_cuda_kernels {
    zoe_kernel_plan plan;
    cudaStream_t stream; /* every op runs here; never the default stream */
    cublasHandle_t blas;
    int sms;                    /* multiprocessors, to size grid-stride launches */
    zoe_attention_gpu attn_gpu; /* what attention's choices read of the GPU */
    /* One device allocation (counted against the device's memory limit) carved into disjoint
     * regions, so ops never share scratch. */
    zoe_device *dev;
    void *workspace;
    void *blas_ws; /* handed to cuBLAS with cublasSetWorkspace */
    size_t blas_ws_bytes;
    float *partials; /* column-sum partials [groups, outputs, cols] */
    size_t partial_floats;
    float *attn_delta;       /* attention backward: rowsum(dout * out) [B, NH, T] */
    void *attn_gemm;         /* tensor-core attention: the scores of one pass */
    int64_t attn_gemm_bytes; /* zoe_attention_gemm_scratch_bytes of the plan */
    float *attn_dkv;         /* flash dk/dv: the slices' partial sums */
    int64_t attn_dkv_bytes;  /* zoe_attention_dkv_partial_bytes of the plan */
    int32_t *sort_keys;      /* embedding backward: 4 x max_rows ids, then CUB's temp storage */
    void *sort_temp;
    size_t sort_temp_bytes;
    float *row_loss;  /* cross-entropy: per-row loss and counted flag [2, max_rows] */
    float *host_loss; /* page-locked copy of row_loss that zoe_xent_loss reads */
};

/* ---- errors ---- */

#define ZOE_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t zoe_cuda_err_ = (call);                                                        \
        if (zoe_cuda_err_ != cudaSuccess)                                                          \
            return zoe_fail(ZOE_ERR_CUDA, "%s failed: %s", #call,                                  \
                            cudaGetErrorString(zoe_cuda_err_));                                    \
    } while (0)

#define ZOE_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t zoe_blas_st_ = (call);                                                      \
        if (zoe_blas_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return zoe_fail(ZOE_ERR_CUDA, "%s failed: %s", #call,                                  \
                            cublasGetStatusString(zoe_blas_st_));                                  \
    } while (0)

/* After a kernel launch: turns a launch error (bad configuration, no device) into a status. */
static inline zoe_status zoe_cuda_launched(const char *kernel) {
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "launch of %s failed: %s", kernel, cudaGetErrorString(err));
    return ZOE_OK;
}

/* ---- storage dtypes ---- */

template <typename T> struct zoe_type_tag { using type = T; };

/* Calls f(zoe_type_tag<T>{}) with T the device type of storage dtype dt. */
template <typename F> static zoe_status zoe_cuda_with_dtype(zoe_dtype dt, F &&f) {
    switch (dt) {
    case ZOE_F32:
        return f(zoe_type_tag<float>{});
    case ZOE_BF16:
        return f(zoe_type_tag<__nv_bfloat16>{});
    case ZOE_F16:
        return f(zoe_type_tag<__half>{});
    default:
        return zoe_fail(ZOE_ERR_INTERNAL, "CUDA kernels: dtype %d reached a kernel", (int)dt);
    }
}

static __device__ __forceinline__ float zoe_to_f32(float x) {
    return x;
}
static __device__ __forceinline__ float zoe_to_f32(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
static __device__ __forceinline__ float zoe_to_f32(__half x) {
    return __half2float(x);
}

/* Round to nearest even, like include/zoe/dtype.h on the host. */
template <typename T> static __device__ __forceinline__ T zoe_from_f32(float x);
template <> __device__ __forceinline__ float zoe_from_f32<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ __nv_bfloat16 zoe_from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half zoe_from_f32<__half>(float x) {
    return __float2half_rn(x);
}

/* N consecutive elements moved as one access (16 bytes when N = 16 / sizeof(T)). */
template <typename T, int N> struct alignas(sizeof(T) * N) zoe_pack { T v[N]; };

template <int N, typename T>
static __device__ __forceinline__ void zoe_load(float (&out)[N], const T *p) {
    const zoe_pack<T, N> pk = *reinterpret_cast<const zoe_pack<T, N> *>(p);
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = zoe_to_f32(pk.v[i]);
}

template <int N, typename T>
static __device__ __forceinline__ void zoe_store(T *p, const float (&in)[N]) {
    zoe_pack<T, N> pk;
#pragma unroll
    for (int i = 0; i < N; i++) pk.v[i] = zoe_from_f32<T>(in[i]);
    *reinterpret_cast<zoe_pack<T, N> *>(p) = pk;
}

/* Elements per 16-byte access. */
template <typename T> constexpr int zoe_vec_width() {
    return 16 / (int)sizeof(T);
}

/* Whether p may be accessed `bytes` at a time (a power of two). NULL counts as aligned. */
static inline bool zoe_aligned(const void *p, size_t bytes) {
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* Whether `count` elements per row at each pointer can be moved in packs of N elements:
 * count a multiple of N and every pointer aligned for a pack. */
template <typename T, int N>
static bool zoe_packable(int64_t count, std::initializer_list<const void *> ptrs) {
    if (count % N != 0) return false;
    for (const void *p : ptrs)
        if (!zoe_aligned(p, N * sizeof(T))) return false;
    return true;
}

/* ---- reductions ---- */

static __device__ __forceinline__ float zoe_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float zoe_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (is_max false) or max over the block, returned to every thread; blockDim.x a multiple
 * of 32, at most 1024; scratch holds 32 floats. The order is fixed: deterministic. */
static __device__ float zoe_block_reduce(float v, bool is_max, float *scratch) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? zoe_warp_max(v) : zoe_warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? zoe_warp_max(w) : zoe_warp_sum(w);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    return scratch[0];
}

/* Blocks for a grid-stride loop over `items` with `threads` per block: enough to fill the GPU
 * a few times over, never zero. */
static inline unsigned zoe_grid_for(const zoe_cuda_kernels *ck, int64_t items, int threads) {
    int64_t blocks = (items + threads - 1) / threads, cap = (int64_t)ck->sms * 16;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

/* The workspace each op family needs, for zoe_cuda_kernels_create. */
zoe_status zoe_cuda_embedding_sort_bytes(const zoe_kernel_plan *plan, size_t *bytes);

#endif
