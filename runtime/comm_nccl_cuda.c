/* The NCCL half of the communicator: the unique id travels over the MPI group, then
 * ncclCommInitRank; collectives map one to one, 16-bit types reduced natively by NCCL.
 *
 * Two communicators on one GPU (TP all-reduces on the compute stream, DP reduce-scatters on
 * the copy stream) could deadlock: NCCL kernels block until their peers arrive, and if GPU A
 * runs its TP collective while its DP collective waits behind it, and GPU B the other way
 * round, each waits for a peer that waits for it (NCCL's documentation warns of exactly this).
 * So every collective on a GPU waits, on its stream, for the event recorded after the
 * previous collective on that GPU, whichever communicator and stream it used: the GPU runs its
 * collectives one at a time, in the order the host issued them (compute kernels still overlap
 * them). That cannot deadlock, because every rank issues the same sequence of collective
 * calls, each on its own TP or DP group: zoe is SPMD, and the DP reduce-scatter of a bucket is
 * issued at the same point of backward on every rank. Number the collectives by that common
 * sequence; of the collectives not yet finished, take the lowest-numbered one, k. Every member of
 * k's group has finished every collective before k, so each has reached k and runs it (nothing else
 * can run first on its GPU), and k finishes. (A host that waits, on an event or in an MPI call such
 * as the norm's all-reduce, waits only for work issued before that point, all of which finishes, so
 * it goes on to issue k.) By induction every collective finishes. The rule needs one host thread
 * issuing all collectives of a GPU (the trainer's main thread; the DPU worker issues none). */
#include <cuda_runtime.h>
#include <nccl.h>
#include "runtime/comm_impl.h"
#include "runtime/device_impl.h"
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
    if (!device->nccl_order) {
        cudaEvent_t order;
        cudaError_t err = cudaEventCreateWithFlags(&order, cudaEventDisableTiming);
        if (err != cudaSuccess)
            return zoe_fail(ZOE_ERR_CUDA, "the NCCL order event: %s", cudaGetErrorString(err));
        device->nccl_order = order;
    }
    device->nccl_comms++;
    c->dev = device;
    return ZOE_OK;
}

void zoe_nccl_destroy(zoe_comm *c) {
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
    if (c->dev && --c->dev->nccl_comms == 0) {
        cudaEventDestroy((cudaEvent_t)c->dev->nccl_order);
        c->dev->nccl_order = NULL;
    }
    c->dev = NULL;
}

/* The order of the GPU's collectives (see the top): wait for the previous one before, mark this
 * one after. Inside a group the kernels launch only at ncclGroupEnd, so the group waits once at
 * its start and marks once at its end. */
static zoe_status order_before(zoe_comm *c, zoe_stream *stream) {
    if (c->group_depth) return ZOE_OK;
    cudaError_t err = cudaStreamWaitEvent(native(stream), (cudaEvent_t)c->dev->nccl_order, 0);
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "ordering NCCL collectives: %s", cudaGetErrorString(err));
    return ZOE_OK;
}

static zoe_status order_after(zoe_comm *c, zoe_stream *stream) {
    if (c->group_depth) return ZOE_OK;
    cudaError_t err = cudaEventRecord((cudaEvent_t)c->dev->nccl_order, native(stream));
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "ordering NCCL collectives: %s", cudaGetErrorString(err));
    return ZOE_OK;
}

zoe_status zoe_nccl_group_start(zoe_comm *c, zoe_stream *stream) {
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclGroupStart());
    c->group_depth++;
    return ZOE_OK;
}

zoe_status zoe_nccl_group_end(zoe_comm *c, zoe_stream *stream) {
    c->group_depth--;
    NCCL_TRY(ncclGroupEnd());
    return order_after(c, stream);
}

zoe_status zoe_nccl_all_reduce(zoe_comm *c, const void *send, void *recv, size_t count,
                               zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), (ncclComm_t)c->nccl,
                           native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclReduceScatter(send, recv, recv_count, nccl_type(dtype), nccl_op(op),
                               (ncclComm_t)c->nccl, native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream) {
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclAllGather(send, recv, send_count, nccl_type(dtype), (ncclComm_t)c->nccl,
                           native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_broadcast(zoe_comm *c, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream) {
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, (ncclComm_t)c->nccl,
                           native(stream)));
    return order_after(c, stream);
}
