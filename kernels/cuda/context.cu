/* The CUDA context: the cuBLAS handle bound to the context's stream, and the workspace planned
 * once from zoe_kernel_plan and carved into one region per op family, so that no op allocates
 * and no two ops share scratch.
 *
 * Explained in docs/gpus.md. */
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
    ck->attn_gemm = carve(&c, (size_t)ck->attn_gemm_bytes);
    ck->attn_dkv = (float *)carve(&c, (size_t)ck->attn_dkv_bytes);
    ck->sort_keys = (int32_t *)carve(&c, 4 * (size_t)p->max_rows * sizeof(int32_t));
    ck->sort_temp = carve(&c, ck->sort_temp_bytes);
    ck->row_loss = (float *)carve(&c, 2 * (size_t)p->max_rows * sizeof(float));
    return c.used;
}

/* What attention's choices read of GPU `ordinal`. */
static zoe_status query_gpu(int ordinal, zoe_attention_gpu *gpu) {
    int major = 0, minor = 0, sms = 0, smem = 0;
    const cudaDeviceAttr attrs[] = {
        cudaDevAttrComputeCapabilityMajor, cudaDevAttrComputeCapabilityMinor,
        cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerBlockOptin};
    int *values[] = {&major, &minor, &sms, &smem};
    for (int i = 0; i < 4; i++) {
        const cudaError_t err = cudaDeviceGetAttribute(values[i], attrs[i], ordinal);
        if (err != cudaSuccess)
            return zoe_fail(ZOE_ERR_CUDA, "cudaDeviceGetAttribute(%d) of GPU %d: %s", (int)attrs[i],
                            ordinal, cudaGetErrorString(err));
    }
    *gpu = (zoe_attention_gpu){.cc = major * 10 + minor, .sms = sms, .smem_optin = smem};
    return ZOE_OK;
}

/* The flash kernels serve fp32 whatever the plan, so the plan's head size must fit their
 * tiles on this GPU: refused here, before the workspace is allocated, rather than at the first
 * launch. No GPU zoe is built for refuses a head size config validation accepts (every one up
 * to 256 fits 96 KiB with 8-row tiles); a smaller one (sm_75: 64 KiB) may. */
static zoe_status check_attention_fits(int ordinal, const zoe_kernel_plan *plan,
                                       const zoe_attention_gpu *gpu) {
    const int64_t HS = plan->max_head_dim;
    if (HS <= 0 || HS > ZOE_ATTN_MAX_HEAD_DIM) return ZOE_OK; /* refused per call, by size */
    const zoe_attention_pass passes[] = {ZOE_ATTN_FORWARD, ZOE_ATTN_BACKWARD};
    for (int i = 0; i < 2; i++)
        if (zoe_attention_flash_rows(passes[i], HS, gpu->smem_optin) == 0)
            return zoe_fail(
                ZOE_ERR_UNSUPPORTED,
                "attention: head size %lld needs %lld bytes of shared memory per block "
                "(%s, 8-row tiles) but GPU %d (sm_%d) allows %lld; at most head size "
                "%lld runs there",
                (long long)HS, (long long)zoe_attention_flash_smem(passes[i], HS, ZOE_ATTN_WARPS),
                i == 0 ? "forward" : "backward", ordinal, gpu->cc, (long long)gpu->smem_optin,
                (long long)zoe_attention_flash_max_head_dim(gpu->smem_optin));
    return ZOE_OK;
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
    ck->attn_gemm_bytes = zoe_attention_gemm_scratch_bytes(plan->max_seq, plan->max_heads);
    ck->attn_dkv_bytes =
        zoe_attention_dkv_partial_bytes(plan->max_rows, plan->max_heads, plan->max_head_dim);
    ck->partial_floats =
        (size_t)ZOE_COLSUM_MAX_GROUPS * ZOE_COLSUM_MAX_OUTPUTS * (size_t)plan->max_dim;

    zoe_status st = ZOE_OK;
    cudaError_t err = cudaSuccess;
    st = query_gpu(zoe_device_ordinal(dev), &ck->attn_gpu);
    if (st != ZOE_OK) goto fail;
    ck->sms = ck->attn_gpu.sms;
    if (plan->attention_smem_limit > 0 && plan->attention_smem_limit < ck->attn_gpu.smem_optin)
        ck->attn_gpu.smem_optin = plan->attention_smem_limit;
    st = check_attention_fits(zoe_device_ordinal(dev), plan, &ck->attn_gpu);
    if (st != ZOE_OK) goto fail;
    st = zoe_cuda_embedding_sort_bytes(plan, &ck->sort_temp_bytes);
    if (st != ZOE_OK) goto fail;
    {
        const size_t bytes = layout(ck, NULL);
        st = zoe_device_alloc_for(dev, bytes, "the CUDA kernels' workspace", &ck->workspace);
        if (st != ZOE_OK) goto fail;
        ck->dev = dev;
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
    zoe_device_free(ck->dev, ck->workspace);
    free(ck);
}
