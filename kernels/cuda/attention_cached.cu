/* Attention of new tokens over a key-value cache on CUDA (incremental decoding): one warp per
 * (new token, query head). The warp streams the token's keys once, each lane holding HS / 32 of
 * the query's and the accumulator's dimensions; a score is a warp sum, and an online softmax
 * (running max and sum, the accumulator rescaled when the max grows) keeps no score row, as on
 * the CPU. Decoding reads the whole cache per token, so it is bound by memory bandwidth, which
 * this layout reads in 32-element coalesced runs.
 *
 * Explained in docs/attention.md, "Decoding". */
#include "kernels/cuda/cuda_util.cuh"

enum { CACHED_MAX_HS = 256, CACHED_PER_LANE = CACHED_MAX_HS / 32, CACHED_WARPS = 4 };

template <typename T>
__global__ void attention_cached_kernel(T *out, const T *q, const T *kv, int64_t pos, int64_t n,
                                        int64_t NH, int64_t group, int64_t HS, int64_t qh,
                                        int64_t qr, int64_t kvh, int64_t kvr, float scale) {
    const int64_t pair = (int64_t)blockIdx.x * CACHED_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (pair >= n * NH) return; /* whole warps leave together: the shuffles stay full */
    const int64_t i = pair / NH, h = pair % NH, g = h / group;
    float qv[CACHED_PER_LANE], acc[CACHED_PER_LANE];
#pragma unroll
    for (int j = 0; j < CACHED_PER_LANE; j++) {
        const int64_t d = lane + 32 * j;
        qv[j] = d < HS ? zoe_to_f32(q[i * qr + h * qh + d]) : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t t = 0; t <= pos + i; t++) {
        const T *key = kv + t * kvr + g * kvh, *value = key + HS;
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < CACHED_PER_LANE; j++) {
            const int64_t d = lane + 32 * j;
            if (d < HS) s += qv[j] * zoe_to_f32(key[d]);
        }
        s = scale * zoe_warp_sum(s);
        if (s > m) {
            const float c = expf(m - s);
            l *= c;
#pragma unroll
            for (int j = 0; j < CACHED_PER_LANE; j++) acc[j] *= c;
            m = s;
        }
        const float w = expf(s - m);
        l += w;
#pragma unroll
        for (int j = 0; j < CACHED_PER_LANE; j++) {
            const int64_t d = lane + 32 * j;
            if (d < HS) acc[j] += w * zoe_to_f32(value[d]);
        }
    }
#pragma unroll
    for (int j = 0; j < CACHED_PER_LANE; j++) {
        const int64_t d = lane + 32 * j;
        if (d < HS) out[pair * HS + d] = zoe_from_f32<T>(acc[j] / l);
    }
}

extern "C" zoe_status zoe_cuda_attention_cached(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                                const void *q, const void *kv, int64_t pos,
                                                int64_t n, int64_t NH, int64_t NKV, int64_t HS,
                                                int64_t q_head_stride, int64_t q_row_stride,
                                                int64_t kv_head_stride, int64_t kv_row_stride) {
    if (HS > CACHED_MAX_HS)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "zoe_attention_cached: HS=%lld above CUDA's %d",
                        (long long)HS, (int)CACHED_MAX_HS);
    const int64_t pairs = n * NH;
    if (pairs == 0) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const unsigned blocks = (unsigned)((pairs + CACHED_WARPS - 1) / CACHED_WARPS);
        attention_cached_kernel<E><<<blocks, 32 * CACHED_WARPS, 0, ck->stream>>>(
            (E *)out, (const E *)q, (const E *)kv, pos, n, NH, NH / NKV, HS, q_head_stride,
            q_row_stride, kv_head_stride, kv_row_stride, 1.0f / sqrtf((float)HS));
        return zoe_cuda_launched("attention_cached_kernel");
    });
}
