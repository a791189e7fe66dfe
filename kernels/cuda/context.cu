/* The CUDA context: the cuBLAS handle bound to the context's stream, and the workspace planned
 * once from zoe_kernel_plan and carved into one region per op family, so that no op allocates
 * and no two ops share scratch. */
#include <stdlib.h>
#include "kernels/cuda/colsum.cuh"

/* cuBLAS's own scratch: NVIDIA recommends 32 MiB on Hopper for its best kernels. */
static const size_t BLAS_WORKSPACE_BYTES = (size_t)32 << 20;
static const size_t REGION_ALIGN = 256;

static size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

/* Hands out consecutive aligned regions of one allocation; with base NULL it only measures. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->used : NULL;
    c->used += round_up(bytes ? bytes : 1, REGION_ALIGN);
    return p;
}

/* Lays the regions out over base (or measures them when base is NULL). */
static size_t layout(zoe_cuda_kernels *ck, void *base) {
    const zoe_kernel_plan *p = &ck->plan;
    carver c = {(char *)base, 0};
    ck->blas_ws = carve(&c, ck->blas_ws_bytes);
    ck->partials = (float *)carve(&c, ck->partial_floats * sizeof(float));
    ck->attn_delta = (float *)carve(&c, (size_t)(p->max_rows * p->max_heads) * sizeof(float));
    ck->attn_gemm = carve(&c, zoe_cuda_attention_gemm_bytes(p));
    ck->sort_keys = (int32_t *)carve(&c, 4 * (size_t)p->max_rows * sizeof(int32_t));
    ck->sort_temp = carve(&c, ck->sort_temp_bytes);
    ck->row_loss = (float *)carve(&c, 2 * (size_t)p->max_rows * sizeof(float));
    return c.used;
}

extern "C" zoe_status zoe_cuda_kernels_create(zoe_device *dev, zoe_stream *stream,
                                              const zoe_kernel_plan *plan, zoe_cuda_kernels **out) {
    *out = NULL;
    ZOE_CUDA_TRY(cudaSetDevice(zoe_device_ordinal(dev)));
    zoe_cuda_kernels *ck = (zoe_cuda_kernels *)calloc(1, sizeof *ck);
    if (!ck) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "zoe_kernels: CUDA context allocation failed");
    ck->plan = *plan;
    ck->stream = (cudaStream_t)zoe_stream_native(stream);
    ck->blas_ws_bytes = BLAS_WORKSPACE_BYTES;
    ck->attn_gemm_heads = zoe_cuda_attention_gemm_heads(plan);
    ck->partial_floats =
        (size_t)ZOE_COLSUM_MAX_GROUPS * ZOE_COLSUM_MAX_OUTPUTS * (size_t)plan->max_dim;

    zoe_status st = ZOE_OK;
    cudaError_t err =
        cudaDeviceGetAttribute(&ck->sms, cudaDevAttrMultiProcessorCount, zoe_device_ordinal(dev));
    if (err != cudaSuccess) {
        st = zoe_fail(ZOE_ERR_CUDA, "cudaDeviceGetAttribute(multiprocessors): %s",
                      cudaGetErrorString(err));
        goto fail;
    }
    st = zoe_cuda_embedding_sort_bytes(plan, &ck->sort_temp_bytes);
    if (st != ZOE_OK) goto fail;
    {
        const size_t bytes = layout(ck, NULL);
        err = cudaMalloc(&ck->workspace, bytes);
        if (err != cudaSuccess) {
            ck->workspace = NULL;
            st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "zoe_kernels: CUDA workspace of %zu bytes: %s",
                          bytes, cudaGetErrorString(err));
            goto fail;
        }
        layout(ck, ck->workspace);
    }
    err = cudaMallocHost((void **)&ck->host_loss,
                         2 * (size_t)(plan->max_rows ? plan->max_rows : 1) * sizeof(float));
    if (err != cudaSuccess) {
        ck->host_loss = NULL;
        st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "zoe_kernels: pinned loss staging: %s",
                      cudaGetErrorString(err));
        goto fail;
    }
    {
        cublasStatus_t bs = cublasCreate(&ck->blas);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(ck->blas, ck->stream);
        /* After cublasSetStream, which resets the workspace to cuBLAS's default pool. */
        if (bs == CUBLAS_STATUS_SUCCESS)
            bs = cublasSetWorkspace(ck->blas, ck->blas_ws, ck->blas_ws_bytes);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            st = zoe_fail(ZOE_ERR_CUDA, "zoe_kernels: cuBLAS set-up failed: %s",
                          cublasGetStatusString(bs));
            goto fail;
        }
    }
    *out = ck;
    return ZOE_OK;
fail:
    zoe_cuda_kernels_destroy(ck);
    return st;
}

extern "C" void zoe_cuda_kernels_destroy(zoe_cuda_kernels *ck) {
    if (!ck) return;
    if (ck->blas) cublasDestroy(ck->blas);
    cudaFreeHost(ck->host_loss);
    cudaFree(ck->workspace);
    free(ck);
}
