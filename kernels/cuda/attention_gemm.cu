/* Causal attention for bf16/fp16 on the tensor cores, through cuBLAS strided-batched GEMMs.
 *
 * For each batch element and each pass over a group of heads (as many as the workspace holds):
 *   forward   S = scale Q K^T (fp32)  ->  P = softmax(causal S), lse (one block per row)
 *             O = P V                  (P rounded to the storage dtype, fp32 accumulation)
 *   backward  S = scale Q K^T, dP = dO V^T (fp32)  ->  P = exp(S - lse),
 *             dS = P (dP - delta)      (both rounded to the storage dtype)
 *             dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q
 * Every GEMM has 16-bit inputs and fp32 accumulation (CUBLAS_COMPUTE_32F), so cuBLAS runs it on
 * the tensor cores; the T x T scores of the group live in the workspace. The group's T x T
 * products include the masked upper triangle (twice the causal work, still far faster than the
 * CUDA-core kernel for these dtypes). Used where the workspace holds one head's scores
 * (zoe_cuda_attention_gemm_heads); longer sequences use the flash kernel of attention.cu.
 *
 * cuBLAS is column-major: a row-major [R, C] matrix with row stride ld is its column-major
 * transpose [C, R] (ld), and each product below is written as the product of transposes. */
#include <type_traits>
#include "kernels/cuda/cuda_util.cuh"

/* Bytes of workspace per head: S and dP in fp32, P and dS in the 16-bit storage dtype. */
static size_t bytes_per_head(int64_t T) {
    const int64_t ld = (T + 7) / 8 * 8;
    return (size_t)T * (size_t)ld * (2 * sizeof(float) + 2 * sizeof(uint16_t));
}

/* The workspace the GEMM path gets at most; beyond it attention uses the flash kernel. */
static const size_t GEMM_ATTENTION_BUDGET = (size_t)256 << 20;

extern "C" int64_t zoe_cuda_attention_gemm_heads(const zoe_kernel_plan *plan) {
    if (plan->max_seq <= 0 || plan->max_heads <= 0) return 0;
    int64_t heads = (int64_t)(GEMM_ATTENTION_BUDGET / bytes_per_head(plan->max_seq));
    return heads < plan->max_heads ? heads : plan->max_heads;
}

extern "C" size_t zoe_cuda_attention_gemm_bytes(const zoe_kernel_plan *plan) {
    return (size_t)zoe_cuda_attention_gemm_heads(plan) * bytes_per_head(plan->max_seq);
}

/* The group's scratch: [heads][T][ld] each. */
struct attn_scratch {
    float *s, *dp;
    void *p, *ds;
    int64_t ld, stride; /* row stride, and elements per head */
};

static attn_scratch scratch_for(const zoe_cuda_kernels *ck, int64_t T) {
    const int64_t ld = (T + 7) / 8 * 8, stride = T * ld, heads = ck->attn_gemm_heads;
    attn_scratch a;
    a.ld = ld, a.stride = stride;
    a.s = (float *)ck->attn_gemm;
    a.dp = a.s + heads * stride;
    a.p = a.dp + heads * stride;
    a.ds = (uint16_t *)a.p + heads * stride;
    return a;
}

static cudaDataType_t blas16(zoe_dtype dt) {
    return dt == ZOE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* Column-major C[m, n] = alpha op(A) op(B) + beta C for `count` matrices at fixed strides. */
static zoe_status batched(zoe_cuda_kernels *ck, cublasOperation_t ta, cublasOperation_t tb,
                          int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                          cudaDataType_t at, int64_t lda, int64_t sa, const void *B,
                          cudaDataType_t bt, int64_t ldb, int64_t sb, float beta, void *C,
                          cudaDataType_t ct, int64_t ldc, int64_t sc, int64_t count) {
    ZOE_CUBLAS_TRY(cublasGemmStridedBatchedEx(
        ck->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, A, at, (int)lda, sa, B, bt, (int)ldb, sb,
        &beta, C, ct, (int)ldc, sc, (int)count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return ZOE_OK;
}

/* S[h][i][j] = scale q_i . k_j for the group's heads (all i, j; the mask is applied later). */
template <typename T>
static zoe_status scores(zoe_cuda_kernels *ck, zoe_dtype dt, const T *q, const T *k, int64_t seq,
                         int64_t ld_qkv, int64_t HS, float scale, float *s, int64_t ld,
                         int64_t stride, int64_t heads) {
    /* S^T [T_k, T_q] = K [T_k, HS] . Q^T [HS, T_q]: K stored as K^T (HS x T, ld_qkv), so op T. */
    return batched(ck, CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, HS, scale, k, blas16(dt), ld_qkv, 3 * HS,
                   q, blas16(dt), ld_qkv, 3 * HS, 0.0f, s, CUDA_R_32F, ld, stride, heads);
}

/* Forward softmax of row (blockIdx.x) of head (blockIdx.y): P = exp(S - lse) for j <= i, else 0. */
template <typename T>
__global__ void softmax_rows_kernel(T *p, float *lse, const float *s, int64_t seq, int64_t ld,
                                    int64_t stride, int64_t lse_head_stride) {
    __shared__ float scratch[32];
    const int64_t i = blockIdx.x, h = blockIdx.y;
    const float *row = s + h * stride + i * ld;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, row[j]);
    m = zoe_block_reduce(m, true, scratch);
    float l = 0.0f;
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) l += expf(row[j] - m);
    l = zoe_block_reduce(l, false, scratch);
    const float row_lse = m + logf(l);
    T *out = p + h * stride + i * ld;
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x)
        out[j] = zoe_from_f32<T>(j <= i ? expf(row[j] - row_lse) : 0.0f);
    if (threadIdx.x == 0) lse[h * lse_head_stride + i] = row_lse;
}

/* Backward: P = exp(S - lse) and dS = P (dP - delta) for j <= i, both 0 above the diagonal. */
template <typename T>
__global__ void softmax_grad_rows_kernel(T *p, T *ds, const float *s, const float *dp,
                                         const float *lse, const float *delta, int64_t seq,
                                         int64_t ld, int64_t stride, int64_t stat_head_stride) {
    const int64_t i = blockIdx.x, h = blockIdx.y, off = h * stride + i * ld;
    const float row_lse = lse[h * stat_head_stride + i],
                row_delta = delta[h * stat_head_stride + i];
    for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
        const float pj = j <= i ? expf(s[off + j] - row_lse) : 0.0f;
        p[off + j] = zoe_from_f32<T>(pj);
        ds[off + j] = zoe_from_f32<T>(pj * (dp[off + j] - row_delta));
    }
}

/* Calls f(tag, b, h0, heads) for every batch element b and every group [h0, h0 + heads) of heads
 * the workspace holds, tag naming the 16-bit storage type. */
template <typename F>
static zoe_status for_each_pass(const zoe_cuda_kernels *ck, zoe_dtype dt, int64_t B, int64_t NH,
                                F &&f) {
    return zoe_cuda_with_dtype(dt, [&](auto tag) -> zoe_status {
        using E = typename decltype(tag)::type;
        if constexpr (std::is_same_v<E, float>) {
            return zoe_fail(ZOE_ERR_INTERNAL, "GEMM attention is for 16-bit storage");
        } else {
            for (int64_t b = 0; b < B; b++)
                for (int64_t h0 = 0; h0 < NH; h0 += ck->attn_gemm_heads) {
                    const int64_t left = NH - h0;
                    ZOE_TRY(f(tag, b, h0, left < ck->attn_gemm_heads ? left : ck->attn_gemm_heads));
                }
            return ZOE_OK;
        }
    });
}

extern "C" zoe_status zoe_cuda_attention_gemm_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                                      float *lse, const void *qkv, int64_t B,
                                                      int64_t T, int64_t NH, int64_t HS) {
    const float scale = 1.0f / sqrtf((float)HS);
    const attn_scratch w = scratch_for(ck, T);
    const int64_t ld_qkv = NH * 3 * HS, ld_out = NH * HS;
    return for_each_pass(ck, dt, B, NH, [&](auto tag, int64_t b, int64_t h0, int64_t heads) {
        using E = typename decltype(tag)::type;
        const E *q = (const E *)qkv + b * T * ld_qkv + h0 * 3 * HS;
        ZOE_TRY(scores(ck, dt, q, q + HS, T, ld_qkv, HS, scale, w.s, w.ld, w.stride, heads));
        softmax_rows_kernel<E><<<dim3((unsigned)T, (unsigned)heads), 256, 0, ck->stream>>>(
            (E *)w.p, lse + (b * NH + h0) * T, w.s, T, w.ld, w.stride, T);
        ZOE_TRY(zoe_cuda_launched("softmax_rows_kernel"));
        /* O^T [HS, T_q] = V^T [HS, T_k] . P^T [T_k, T_q]. */
        E *o = (E *)out + b * T * ld_out + h0 * HS;
        ZOE_TRY(batched(ck, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f, q + 2 * HS, blas16(dt),
                        ld_qkv, 3 * HS, w.p, blas16(dt), w.ld, w.stride, 0.0f, o, blas16(dt),
                        ld_out, HS, heads));
        return ZOE_OK;
    });
}

extern "C" zoe_status zoe_cuda_attention_gemm_backward(zoe_cuda_kernels *ck, zoe_dtype dt,
                                                       void *dqkv, const void *dout,
                                                       const void *qkv, const float *lse,
                                                       const float *delta, int64_t B, int64_t T,
                                                       int64_t NH, int64_t HS) {
    const float scale = 1.0f / sqrtf((float)HS);
    const attn_scratch w = scratch_for(ck, T);
    const int64_t ld_qkv = NH * 3 * HS, ld_out = NH * HS;
    const cudaDataType_t t16 = blas16(dt);
    return for_each_pass(ck, dt, B, NH, [&](auto tag, int64_t b, int64_t h0, int64_t heads) {
        using E = typename decltype(tag)::type;
        const E *q = (const E *)qkv + b * T * ld_qkv + h0 * 3 * HS, *k = q + HS, *v = q + 2 * HS;
        const E *go = (const E *)dout + b * T * ld_out + h0 * HS;
        E *dq = (E *)dqkv + b * T * ld_qkv + h0 * 3 * HS, *dk = dq + HS, *dv = dq + 2 * HS;
        ZOE_TRY(scores(ck, dt, q, k, T, ld_qkv, HS, scale, w.s, w.ld, w.stride, heads));
        /* dP^T [T_k, T_q] = V [T_k, HS] . dO^T [HS, T_q]. */
        ZOE_TRY(batched(ck, CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.0f, v, t16, ld_qkv, 3 * HS, go,
                        t16, ld_out, HS, 0.0f, w.dp, CUDA_R_32F, w.ld, w.stride, heads));
        const int64_t stats = (b * NH + h0) * T;
        softmax_grad_rows_kernel<E><<<dim3((unsigned)T, (unsigned)heads), 256, 0, ck->stream>>>(
            (E *)w.p, (E *)w.ds, w.s, w.dp, lse + stats, delta + stats, T, w.ld, w.stride, T);
        ZOE_TRY(zoe_cuda_launched("softmax_grad_rows_kernel"));
        /* dV^T [HS, T_k] += dO^T [HS, T_q] . P [T_q, T_k] (P^T stored: op T). */
        ZOE_TRY(batched(ck, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, go, t16, ld_out, HS, w.p, t16,
                        w.ld, w.stride, 1.0f, dv, t16, ld_qkv, 3 * HS, heads));
        /* dQ^T [HS, T_q] += scale K^T [HS, T_k] . dS^T [T_k, T_q]. */
        ZOE_TRY(batched(ck, CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, scale, k, t16, ld_qkv, 3 * HS, w.ds,
                        t16, w.ld, w.stride, 1.0f, dq, t16, ld_qkv, 3 * HS, heads));
        /* dK^T [HS, T_k] += scale Q^T [HS, T_q] . dS [T_q, T_k] (dS^T stored). */
        ZOE_TRY(batched(ck, CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, scale, q, t16, ld_qkv, 3 * HS, w.ds,
                        t16, w.ld, w.stride, 1.0f, dk, t16, ld_qkv, 3 * HS, heads));
        return ZOE_OK;
    });
}
