/* Internal to kernels/cuda/attention*.cu: where the operands of causal attention are, shared by
 * the flash kernels (attention.cu) and the tensor-core GEMM path (attention_gemm.cu).
 *
 * Explained in docs/attention.md. */
#ifndef ZOE_KERNELS_CUDA_ATTENTION_CUH
#define ZOE_KERNELS_CUDA_ATTENTION_CUH

#include "kernels/attention_plan.h"
#include "kernels/cuda/cuda_util.cuh"

/* q of query head h at q + (b T + t) q_ld + h q_hs, k and v of KV head g at
 * kv + (b T + t) kv_ld + g kv_hs (+ k_off or v_off); out and dout [B, T, NH, HS]. Query head h
 * reads KV head h / group. The gradients dq and dkv share q's and kv's layouts. */
struct attn_layout {
    int64_t seq;
    int NH, group, HS;
    int64_t q_ld, q_hs, kv_ld, kv_hs, k_off, v_off;
};

/* GPT's qkv [B, T, NH, 3, HS]. */
static inline attn_layout attn_interleaved_layout(int64_t T, int64_t NH, int64_t HS) {
    const int64_t ld = NH * 3 * HS;
    return {T, (int)NH, 1, (int)HS, ld, 3 * HS, ld, 3 * HS, HS, 2 * HS};
}

/* Llama's q [B, T, NH, HS] beside kv [B, T, NKV, 2, HS]. */
static inline attn_layout attn_grouped_layout(int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    return {T, (int)NH, (int)(NH / NKV), (int)HS, NH * HS, HS, NKV * 2 * HS, 2 * HS, 0, HS};
}

/* The tensor-core passes (attention_gemm.cu), for 16-bit storage. Backward takes delta =
 * rowsum(dout * out) [B, NH, T] already computed; dq or dkv may be NULL. */
zoe_status zoe_cuda_attention_gemm_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                           float *lse, const void *q, const void *kv, int64_t B,
                                           const attn_layout &L);
zoe_status zoe_cuda_attention_gemm_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dq, void *dkv,
                                            const void *dout, const void *q, const void *kv,
                                            const float *lse, const float *delta, int64_t B,
                                            const attn_layout &L);

#endif
