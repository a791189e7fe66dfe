/* Causal attention for bf16/fp16 on the tensor cores, through cuBLAS strided-batched GEMMs, for
 * both layouts (GPT's interleaved qkv and Llama's grouped-query q beside kv).
 *
 * The scores are computed a block at a time, as large as the workspace holds
 * (zoe_attention_gemm_pass_of): `heads` consecutive query heads by `rows` consecutive query
 * rows [i0, i0 + rows) against the keys [0, i0 + rows) causality lets them see. A whole
 * sequence's rows go in one pass where a head's T x T scores fit the workspace (256 MiB:
 * T up to about 4700), else one head and fewer rows per pass, so any sequence runs here.
 *   forward   S = scale Q K^T (fp32)  ->  P = softmax(causal S), lse (one block per row)
 *             O = P V                  (P rounded to the storage dtype, fp32 accumulation)
 *   backward  S = scale Q K^T, dP = dO V^T (fp32)  ->  P = exp(S - lse),
 *             dS = P (dP - delta)      (both rounded to the storage dtype)
 *             dV += P^T dO, dQ += scale dS K, dK += scale dS^T Q
 * Every GEMM has 16-bit inputs and fp32 accumulation (CUBLAS_COMPUTE_32F), so cuBLAS runs it on
 * the tensor cores. A pass's products include the masked upper triangle of its block (up to
 * twice the causal work, still far faster than the CUDA-core kernels for these dtypes).
 *
 * Grouped-query attention: query head h reads KV head h / group. A pass holds query heads of
 * one group, or whole groups. The GEMMs per query head (S, O, dP, dQ) are batched over a run of
 * heads at fixed strides: the pass's heads against their one KV head at stride 0, or, across
 * groups, the j-th head of each group against successive KV heads. dK and dV sum over a group's
 * heads, so their GEMMs are batched only over distinct KV heads (the j-th head of each group),
 * one after another over j with beta = 1: a fixed order, deterministic.
 *
 * cuBLAS is column-major: a row-major [R, C] matrix with row stride ld is its column-major
 * transpose [C, R] (ld), and each product below is written as the product of transposes.
 *
 * Explained in docs/attention.md, "The tensor-core (GEMM) path: `attention_gemm.cu`". */
#include <type_traits>
#include "kernels/cuda/attention.cuh"

/* The pass's scratch: [heads][rows][ld] each. */
struct attn_scratch {
    float *s, *dp;
    void *p, *ds;
    int64_t ld, stride; /* row stride, and elements per head */
};

static attn_scratch scratch_for(const zoe_cuda_kernels *ck, const zoe_attention_gemm_pass &pass) {
    const int64_t stride = pass.rows * pass.ld, heads = pass.heads;
    attn_scratch a;
    a.ld = pass.ld, a.stride = stride;
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

/* Forward softmax of local row blockIdx.x (query i0 + blockIdx.x) of pass head blockIdx.y over
 * `keys` keys: P = exp(S - lse) for keys j <= the query, else 0. */
template <typename T>
__global__ void softmax_rows_kernel(T *p, float *lse, const float *s, int64_t i0, int64_t keys,
                                    int64_t ld, int64_t stride, int64_t lse_head_stride) {
    __shared__ float scratch[32];
    const int64_t i = blockIdx.x, h = blockIdx.y, qi = i0 + i;
    const float *row = s + h * stride + i * ld;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j <= qi; j += blockDim.x) m = fmaxf(m, row[j]);
    m = zoe_block_reduce(m, true, scratch);
    float l = 0.0f;
    for (int64_t j = threadIdx.x; j <= qi; j += blockDim.x) l += expf(row[j] - m);
    l = zoe_block_reduce(l, false, scratch);
    const float row_lse = m + logf(l);
    T *out = p + h * stride + i * ld;
    for (int64_t j = threadIdx.x; j < keys; j += blockDim.x)
        out[j] = zoe_from_f32<T>(j <= qi ? expf(row[j] - row_lse) : 0.0f);
    if (threadIdx.x == 0) lse[h * lse_head_stride + i] = row_lse;
}

/* Backward: P = exp(S - lse) and dS = P (dP - delta) for keys j <= the query, both 0 beyond. */
template <typename T>
__global__ void softmax_grad_rows_kernel(T *p, T *ds, const float *s, const float *dp,
                                         const float *lse, const float *delta, int64_t i0,
                                         int64_t keys, int64_t ld, int64_t stride,
                                         int64_t stat_head_stride) {
    const int64_t i = blockIdx.x, h = blockIdx.y, qi = i0 + i, off = h * stride + i * ld;
    const float row_lse = lse[h * stat_head_stride + i],
                row_delta = delta[h * stat_head_stride + i];
    for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
        const float pj = j <= qi ? expf(s[off + j] - row_lse) : 0.0f;
        p[off + j] = zoe_from_f32<T>(pj);
        ds[off + j] = zoe_from_f32<T>(pj * (dp[off + j] - row_delta));
    }
}

/* A run of `count` query heads h, h + step, ... for one batched GEMM, their KV heads
 * kv_step apart (0: one KV head for all) and their scratch slots `step` apart from slot
 * h - h0. */
struct head_run {
    int64_t h, count, step, kv_step;
};

/* Calls f(run) for runs covering the pass's query heads [h0, h0 + n): with distinct_kv, runs
 * whose KV heads differ (for the GEMMs that write dK and dV). */
template <typename F>
static zoe_status for_each_run(int64_t h0, int64_t n, int64_t group, bool distinct_kv, F &&f) {
    if (h0 / group == (h0 + n - 1) / group) { /* inside one group */
        if (!distinct_kv) return f(head_run{h0, n, 1, 0});
        for (int64_t j = 0; j < n; j++) ZOE_TRY(f(head_run{h0 + j, 1, 1, 0}));
        return ZOE_OK;
    }
    for (int64_t j = 0; j < group; j++) ZOE_TRY(f(head_run{h0 + j, n / group, group, 1}));
    return ZOE_OK;
}

/* One pass's operands: batch element b, query heads [h0, h0 + heads), query rows
 * [i0, i0 + rows) against keys [0, keys). */
struct pass_block {
    int64_t b, h0, heads, i0, rows, keys;
};

/* Calls f(tag, block) for every pass over B x NH x T, tag naming the 16-bit storage type. */
template <typename F>
static zoe_status for_each_pass(zoe_dtype dt, int64_t B, const attn_layout &L,
                                const zoe_attention_gemm_pass &pass, F &&f) {
    if (pass.heads <= 0 || pass.rows <= 0)
        return zoe_fail(ZOE_ERR_INTERNAL, "GEMM attention: T=%lld does not fit the workspace",
                        (long long)L.seq);
    return zoe_cuda_with_dtype(dt, [&](auto tag) -> zoe_status {
        using E = typename decltype(tag)::type;
        if constexpr (std::is_same_v<E, float>) {
            return zoe_fail(ZOE_ERR_INTERNAL, "GEMM attention is for 16-bit storage");
        } else {
            const int64_t NH = L.NH, group = L.group, T = L.seq;
            for (int64_t b = 0; b < B; b++)
                for (int64_t h0 = 0, n = 0; h0 < NH; h0 += n) {
                    /* whole groups, or what is left of the group h0 is in */
                    const int64_t left = pass.heads >= group ? NH - h0 : group - h0 % group;
                    n = pass.heads < left ? pass.heads : left;
                    for (int64_t i0 = 0; i0 < T; i0 += pass.rows) {
                        const int64_t rows = pass.rows < T - i0 ? pass.rows : T - i0;
                        ZOE_TRY(f(tag, pass_block{b, h0, n, i0, rows, i0 + rows}));
                    }
                }
            return ZOE_OK;
        }
    });
}

/* Where a block's operands start: query head h's rows from i0, KV head g's rows from 0, and
 * out/dout's [B, T, NH, HS] rows of head h from i0. */
template <typename E> struct operands {
    const attn_layout &L;
    int64_t b;
    E *q_at(const void *q, int64_t h, int64_t i0) const {
        return (E *)q + (b * L.seq + i0) * L.q_ld + h * L.q_hs;
    }
    E *kv_at(const void *kv, int64_t g, int64_t off) const {
        return (E *)kv + b * L.seq * L.kv_ld + g * L.kv_hs + off;
    }
    E *out_at(const void *o, int64_t h, int64_t i0) const {
        return (E *)o + ((b * L.seq + i0) * L.NH + h) * L.HS;
    }
};

/* S for the block's query heads: S^T [keys, rows] = K [keys, HS] . Q^T [HS, rows]. */
template <typename E>
static zoe_status block_scores(zoe_cuda_kernels *ck, zoe_dtype dt, const operands<E> &o,
                               const pass_block &pb, const attn_scratch &w, const void *q,
                               const void *kv, float scale) {
    const attn_layout &L = o.L;
    return for_each_run(pb.h0, pb.heads, L.group, false, [&](const head_run &r) {
        return batched(ck, CUBLAS_OP_T, CUBLAS_OP_N, pb.keys, pb.rows, L.HS, scale,
                       o.kv_at(kv, r.h / L.group, L.k_off), blas16(dt), L.kv_ld,
                       r.kv_step * L.kv_hs, o.q_at(q, r.h, pb.i0), blas16(dt), L.q_ld,
                       r.step * L.q_hs, 0.0f, w.s + (r.h - pb.h0) * w.stride, CUDA_R_32F, w.ld,
                       r.step * w.stride, r.count);
    });
}

zoe_status zoe_cuda_attention_gemm_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                           float *lse, const void *q, const void *kv, int64_t B,
                                           const attn_layout &L) {
    const float scale = 1.0f / sqrtf((float)L.HS);
    const zoe_attention_gemm_pass pass =
        zoe_attention_gemm_pass_of(L.seq, L.NH, L.group, ck->attn_gemm_bytes);
    const attn_scratch w = scratch_for(ck, pass);
    const int64_t ld_out = (int64_t)L.NH * L.HS;
    return for_each_pass(dt, B, L, pass, [&](auto tag, const pass_block &pb) {
        using E = typename decltype(tag)::type;
        const operands<E> o{L, pb.b};
        ZOE_TRY(block_scores(ck, dt, o, pb, w, q, kv, scale));
        softmax_rows_kernel<E><<<dim3((unsigned)pb.rows, (unsigned)pb.heads), 256, 0, ck->stream>>>(
            (E *)w.p, lse + (pb.b * L.NH + pb.h0) * L.seq + pb.i0, w.s, pb.i0, pb.keys, w.ld,
            w.stride, L.seq);
        ZOE_TRY(zoe_cuda_launched("softmax_rows_kernel"));
        /* O^T [HS, rows] = V^T [HS, keys] . P^T [keys, rows]. */
        return for_each_run(pb.h0, pb.heads, L.group, false, [&](const head_run &r) {
            return batched(ck, CUBLAS_OP_N, CUBLAS_OP_N, L.HS, pb.rows, pb.keys, 1.0f,
                           o.kv_at(kv, r.h / L.group, L.v_off), blas16(dt), L.kv_ld,
                           r.kv_step * L.kv_hs, (E *)w.p + (r.h - pb.h0) * w.stride, blas16(dt),
                           w.ld, r.step * w.stride, 0.0f, o.out_at(out, r.h, pb.i0), blas16(dt),
                           ld_out, r.step * L.HS, r.count);
        });
    });
}

zoe_status zoe_cuda_attention_gemm_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dq, void *dkv,
                                            const void *dout, const void *q, const void *kv,
                                            const float *lse, const float *delta, int64_t B,
                                            const attn_layout &L) {
    const float scale = 1.0f / sqrtf((float)L.HS);
    const zoe_attention_gemm_pass pass =
        zoe_attention_gemm_pass_of(L.seq, L.NH, L.group, ck->attn_gemm_bytes);
    const attn_scratch w = scratch_for(ck, pass);
    const int64_t ld_out = (int64_t)L.NH * L.HS;
    const cudaDataType_t t16 = blas16(dt);
    return for_each_pass(dt, B, L, pass, [&](auto tag, const pass_block &pb) {
        using E = typename decltype(tag)::type;
        const operands<E> o{L, pb.b};
        ZOE_TRY(block_scores(ck, dt, o, pb, w, q, kv, scale));
        /* dP^T [keys, rows] = V [keys, HS] . dO^T [HS, rows]. */
        ZOE_TRY(for_each_run(pb.h0, pb.heads, L.group, false, [&](const head_run &r) {
            return batched(ck, CUBLAS_OP_T, CUBLAS_OP_N, pb.keys, pb.rows, L.HS, 1.0f,
                           o.kv_at(kv, r.h / L.group, L.v_off), t16, L.kv_ld, r.kv_step * L.kv_hs,
                           o.out_at(dout, r.h, pb.i0), t16, ld_out, r.step * L.HS, 0.0f,
                           w.dp + (r.h - pb.h0) * w.stride, CUDA_R_32F, w.ld, r.step * w.stride,
                           r.count);
        }));
        const int64_t stats = (pb.b * L.NH + pb.h0) * L.seq + pb.i0;
        softmax_grad_rows_kernel<E>
            <<<dim3((unsigned)pb.rows, (unsigned)pb.heads), 256, 0, ck->stream>>>(
                (E *)w.p, (E *)w.ds, w.s, w.dp, lse + stats, delta + stats, pb.i0, pb.keys, w.ld,
                w.stride, L.seq);
        ZOE_TRY(zoe_cuda_launched("softmax_grad_rows_kernel"));
        if (dq) /* dQ^T [HS, rows] += scale K^T [HS, keys] . dS^T [keys, rows]. */
            ZOE_TRY(for_each_run(pb.h0, pb.heads, L.group, false, [&](const head_run &r) {
                return batched(ck, CUBLAS_OP_N, CUBLAS_OP_N, L.HS, pb.rows, pb.keys, scale,
                               o.kv_at(kv, r.h / L.group, L.k_off), t16, L.kv_ld,
                               r.kv_step * L.kv_hs, (E *)w.ds + (r.h - pb.h0) * w.stride, t16, w.ld,
                               r.step * w.stride, 1.0f, o.q_at(dq, r.h, pb.i0), t16, L.q_ld,
                               r.step * L.q_hs, r.count);
            }));
        if (!dkv) return ZOE_OK;
        return for_each_run(pb.h0, pb.heads, L.group, true, [&](const head_run &r) {
            const E *p = (E *)w.p + (r.h - pb.h0) * w.stride,
                    *ds = (E *)w.ds + (r.h - pb.h0) * w.stride;
            /* dV^T [HS, keys] += dO^T [HS, rows] . P [rows, keys] (P^T stored: op T). */
            ZOE_TRY(batched(ck, CUBLAS_OP_N, CUBLAS_OP_T, L.HS, pb.keys, pb.rows, 1.0f,
                            o.out_at(dout, r.h, pb.i0), t16, ld_out, r.step * L.HS, p, t16, w.ld,
                            r.step * w.stride, 1.0f, o.kv_at(dkv, r.h / L.group, L.v_off), t16,
                            L.kv_ld, r.kv_step * L.kv_hs, r.count));
            /* dK^T [HS, keys] += scale Q^T [HS, rows] . dS [rows, keys] (dS^T stored). */
            return batched(ck, CUBLAS_OP_N, CUBLAS_OP_T, L.HS, pb.keys, pb.rows, scale,
                           o.q_at(q, r.h, pb.i0), t16, L.q_ld, r.step * L.q_hs, ds, t16, w.ld,
                           r.step * w.stride, 1.0f, o.kv_at(dkv, r.h / L.group, L.k_off), t16,
                           L.kv_ld, r.kv_step * L.kv_hs, r.count);
        });
    });
}
