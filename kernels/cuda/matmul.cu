/* Matmul forward and backward on CUDA: every product is one cublasGemmEx with fp32 accumulation
 * (CUBLAS_COMPUTE_32F: tensor cores for bf16/fp16 storage, plain fp32 for fp32 storage unless
 * the plan allows TF32). cuBLAS is column-major: a row-major [R, C] matrix is its column-major
 * transpose, so each row-major product below is written as the product of the transposes. The bias
 * is broadcast into y first and the product added onto it (beta = 1); db is a deterministic column
 * sum of dy (colsum.cuh).
 *
 * Explained in docs/gpus.md, "The dtype". */
#include "kernels/cuda/colsum.cuh"

/* y[M, N] = b[N] on every row. */
template <typename T>
__global__ void broadcast_rows_kernel(T *y, const T *b, int64_t M, int64_t N) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = b[i % N];
}

static cudaDataType_t blas_type(zoe_dtype dt) {
    return dt == ZOE_F32 ? CUDA_R_32F : dt == ZOE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* Column-major C[m, n] (ldc) = op(A)[m, k] . op(B)[k, n] + beta C, all in storage dtype dt. */
static zoe_status gemm(zoe_cuda_kernels *ck, zoe_dtype dt, cublasOperation_t ta,
                       cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc) {
    const float alpha = 1.0f;
    const cudaDataType_t t = blas_type(dt);
    const cublasComputeType_t compute =
        dt == ZOE_F32 && ck->plan.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    ZOE_CUBLAS_TRY(cublasGemmEx(ck->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, A, t, (int)lda, B,
                                t, (int)ldb, &beta, C, t, (int)ldc, compute, CUBLAS_GEMM_DEFAULT));
    return ZOE_OK;
}

extern "C" zoe_status zoe_cuda_matmul_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *y,
                                              const void *x, const void *w, const void *b,
                                              int64_t M, int64_t K, int64_t N) {
    if (M == 0 || N == 0) return ZOE_OK;
    const size_t esize = zoe_dtype_size(dt);
    if (b) {
        ZOE_TRY(zoe_cuda_with_dtype(dt, [&](auto tag) {
            using T = typename decltype(tag)::type;
            broadcast_rows_kernel<T>
                <<<zoe_grid_for(ck, M * N, 256), 256, 0, ck->stream>>>((T *)y, (const T *)b, M, N);
            return zoe_cuda_launched("broadcast_rows_kernel");
        }));
    } else if (K == 0) {
        ZOE_CUDA_TRY(cudaMemsetAsync(y, 0, (size_t)(M * N) * esize, ck->stream));
    }
    if (K == 0) return ZOE_OK; /* an empty product adds nothing */
    /* y^T[N, M] = w[N, K] . x^T[K, M]: w is stored as w^T (K x N, ld K), x as x^T (K x M). */
    return gemm(ck, dt, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w, K, x, K, b ? 1.0f : 0.0f, y, N);
}

extern "C" zoe_status zoe_cuda_matmul_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dx,
                                               void *dw, void *db, const void *dy, const void *x,
                                               const void *w, int64_t M, int64_t K, int64_t N) {
    /* dx^T[K, M] += w^T[K, N] . dy^T[N, M]: w stored as w^T (K x N, ld K), dy as dy^T (N x M). */
    if (dx && M > 0 && K > 0 && N > 0)
        ZOE_TRY(gemm(ck, dt, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, w, K, dy, N, 1.0f, dx, K));
    /* dw^T[K, N] += x^T[K, M] . dy[M, N]: x stored as x^T (K x M), dy as dy^T, transposed. */
    if (dw && M > 0 && K > 0 && N > 0)
        ZOE_TRY(gemm(ck, dt, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, x, K, dy, N, 1.0f, dw, K));
    if (!db) return ZOE_OK;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const zoe_colsum_out<T> out = {{(T *)db, NULL}};
        return zoe_cuda_column_sums(ck, zoe_colsum_rows<T>{(const T *)dy, N}, out, M, N);
    });
}
