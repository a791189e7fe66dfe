/* Internal: the CUDA backend of the op table. kernels.c validates every argument once and then
 * calls zoe_cuda_<op>(ck, <the public op's arguments after the context>); the functions here
 * assume valid arguments (sizes within the plan, required pointers non-NULL, device pointers
 * for every tensor). Work is enqueued on the context's stream and returns without waiting,
 * except zoe_cuda_xent_loss, which returns host values and so waits for its stream.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CUDA_OPS_H
#define ZOE_KERNELS_CUDA_OPS_H

#include "kernels/kernels.h"
#include "kernels/op_list.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zoe_cuda_kernels zoe_cuda_kernels;

/* Binds the device's current GPU, creates the cuBLAS handle on the stream's native stream and
 * allocates once the workspace planned from plan (cuBLAS workspace, reduction partials,
 * attention statistics, the embedding sort buffers, the staging for host-side losses). */
zoe_status zoe_cuda_kernels_create(zoe_device *dev, zoe_stream *stream, const zoe_kernel_plan *plan,
                                   zoe_cuda_kernels **out);
void zoe_cuda_kernels_destroy(zoe_cuda_kernels *ck);

/* zoe_cuda_<op>(ck, <the op's parameters>) for every row of kernels/op_list.h. */
#define ZOE_CUDA_OP_DECLARATION(name, params)                                                      \
    zoe_status zoe_cuda_##name(zoe_cuda_kernels *ck, ZOE_KERNEL_PARAMS params);
ZOE_KERNEL_OPS(ZOE_CUDA_OP_DECLARATION)
#undef ZOE_CUDA_OP_DECLARATION

#ifdef __cplusplus
}
#endif
#endif
