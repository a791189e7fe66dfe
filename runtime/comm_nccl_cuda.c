/* The NCCL half of the communicator: the unique id travels over the MPI group, then
 * ncclCommInitRank; collectives map one to one, 16-bit types reduced natively by NCCL. */
#include <cuda_runtime.h>
#include <nccl.h>
#include "runtime/comm_impl.h"
#include "runtime/error.h"

#define NCCL_TRY(call)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return zoe_fail(ZOE_ERR_NCCL, "%s failed: %s", #call, ncclGetErrorString(r_));         \
    } while (0)

static ncclDataType_t nccl_type(zoe_dtype d) {
    switch (d) {
    case ZOE_BF16:
        return ncclBfloat16;
    case ZOE_F16:
        return ncclFloat16;
    case ZOE_I32:
        return ncclInt32;
    default:
        return ncclFloat32;
    }
}

static ncclRedOp_t nccl_op(zoe_reduce_op op) {
    return op == ZOE_REDUCE_MAX ? ncclMax : ncclSum;
}

static cudaStream_t native(zoe_stream *s) {
    return (cudaStream_t)zoe_stream_native(s);
}

zoe_status zoe_nccl_init(zoe_comm *c, zoe_device *device) {
    ncclUniqueId id;
    if (c->rank == 0) NCCL_TRY(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->group) != MPI_SUCCESS)
        return zoe_fail(ZOE_ERR_MPI, "broadcast of the NCCL unique id failed");
    if (cudaSetDevice(zoe_device_ordinal(device)) != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "cudaSetDevice(%d) failed", zoe_device_ordinal(device));
    ncclComm_t comm;
    NCCL_TRY(ncclCommInitRank(&comm, c->size, id, c->rank));
    c->nccl = comm;
    return ZOE_OK;
}

void zoe_nccl_destroy(zoe_comm *c) {
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
}

zoe_status zoe_nccl_all_reduce(zoe_comm *c, const void *send, void *recv, size_t count,
                               zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    NCCL_TRY(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), (ncclComm_t)c->nccl,
                           native(stream)));
    return ZOE_OK;
}

zoe_status zoe_nccl_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    NCCL_TRY(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op),
                               (ncclComm_t)c->nccl, native(stream)));
    return ZOE_OK;
}

zoe_status zoe_nccl_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream) {
    NCCL_TRY(ncclAllGather(send, recv, send_count, nccl_type(dtype), (ncclComm_t)c->nccl,
                           native(stream)));
    return ZOE_OK;
}

zoe_status zoe_nccl_broadcast(zoe_comm *c, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream) {
    NCCL_TRY(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, (ncclComm_t)c->nccl,
                           native(stream)));
    return ZOE_OK;
}
