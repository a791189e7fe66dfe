/* The NCCL half of the communicator: the unique id travels over the MPI group, then
 * ncclCommInitRank; collectives map one to one, 16-bit types reduced natively by NCCL.
 *
 * Two communicators on one GPU (TP all-reduces on the compute stream, DP reduce-scatters on
 * the copy stream) could deadlock: NCCL kernels spin until their peers arrive, and if GPU A
 * runs its TP collective while its DP collective cannot get onto the GPU behind it, and GPU B
 * the other way round, each waits for a peer that waits for it (NCCL's documentation warns of
 * exactly this). What prevents it is one order of the collectives' kernels on every GPU, the
 * order the host issued them in, which is the same on every rank: zoe is SPMD, every rank issues
 * the same sequence of collective calls, each on its own TP or DP group, from one host thread
 * per GPU (the trainer's main thread; the DPU worker issues none), and the DP reduce-scatter of a
 * bucket is issued at the same point of backward on every rank.
 *
 * Two ways to keep that order (zoe_nccl_order, chosen once per GPU at its first communicator):
 * - By launch (NCCL 2.26 and later): zoe sets NCCL_LAUNCH_ORDER_IMPLICIT=1 unless the user set
 *   it, and NCCL makes each of its kernels on the GPU wait until the previous one has launched
 *   (all its blocks on the GPU; with a CUDA driver older than 12.3 NCCL waits for it to finish
 *   instead). A DP reduce-scatter then runs while the TP all-reduces and the compute after it go
 *   on: the overlap the plan assumes.
 * - Serial (older NCCL, or NCCL_LAUNCH_ORDER_IMPLICIT=0): every collective waits, on its stream,
 *   for an event recorded after the previous one; the GPU runs its collectives one at a time, so
 *   a TP all-reduce waits for the DP reduce-scatter issued before it. Said once in a warning.
 *
 * Why either order cannot deadlock. Number the collectives by the common sequence; of those not
 * yet finished, take the lowest-numbered one, k. Everything a member GPU of k's group was given
 * before k is a compute kernel or copy, which finishes, or a collective numbered below k, which
 * has finished; so k's stream reaches k, and since no later collective can launch before k does
 * (by launch) or start before k ends (serial), nothing of a later collective holds the GPU
 * before k launches. So every member runs k, and k finishes. (A host that waits, on an event or
 * in an MPI call such as the norm's all-reduce, waits only for work issued before that point,
 * all of which finishes, so it goes on to issue k.) By induction every collective finishes.
 *
 * Explained in docs/gpus.md, "Collectives and host copies". */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include "zoe/log.h"
#include "runtime/comm_impl.h"
#include "runtime/device_impl.h"
#include "runtime/error.h"

#define NCCL_TRY(call)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            return zoe_fail(ZOE_ERR_NCCL, "%s failed: %s", #call, ncclGetErrorString(r_));         \
    } while (0)

/* The NCCL type of a dtype the communicators carry (comm.c's check_args refuses the others
 * first); anything else is refused here too, never sent as another type's bytes. */
static zoe_status nccl_type(zoe_dtype d, ncclDataType_t *out) {
    *out = ncclNumTypes; /* no type: what NCCL refuses, should a caller ignore the status */
    switch (d) {
    case ZOE_F32:
        *out = ncclFloat32;
        return ZOE_OK;
    case ZOE_BF16:
        *out = ncclBfloat16;
        return ZOE_OK;
    case ZOE_F16:
        *out = ncclFloat16;
        return ZOE_OK;
    case ZOE_I32:
        *out = ncclInt32;
        return ZOE_OK;
    default:
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "NCCL: no NCCL type for dtype %s (%d)",
                        zoe_dtype_name(d), (int)d);
    }
}

static ncclRedOp_t nccl_op(zoe_reduce_op op) {
    return op == ZOE_REDUCE_MAX ? ncclMax : ncclSum;
}

static cudaStream_t native(zoe_stream *s) {
    return (cudaStream_t)zoe_stream_native(s);
}

/* The order of this GPU's collectives, decided at its first communicator: before any NCCL call
 * of the process reads NCCL_LAUNCH_ORDER_IMPLICIT (NCCL reads its parameters once). */
static zoe_status choose_order(zoe_comm *c, zoe_device *device) {
    if (device->nccl_comms > 0) return ZOE_OK;
    int version = 0;
    NCCL_TRY(ncclGetVersion(&version));
    zoe_nccl_order order = zoe_nccl_order_choose(version, getenv("NCCL_LAUNCH_ORDER_IMPLICIT"));
    if (order == ZOE_NCCL_ORDER_BY_LAUNCH && setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0) != 0)
        order = ZOE_NCCL_ORDER_SERIAL;
    device->nccl_serial = order == ZOE_NCCL_ORDER_SERIAL;
    if (device->nccl_serial) {
        cudaEvent_t event;
        cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
        if (err != cudaSuccess)
            return zoe_fail(ZOE_ERR_CUDA, "the NCCL order event: %s", cudaGetErrorString(err));
        device->nccl_order = event;
        if (c->rank == 0)
            zoe_log(ZOE_LOG_WARN,
                    "NCCL %d.%d.%d with NCCL_LAUNCH_ORDER_IMPLICIT=%s: each GPU runs its "
                    "collectives one at a time, so TP all-reduces wait for DP reduce-scatters "
                    "(NCCL 2.26 or later, with the variable unset or 1, overlaps them)",
                    version / 10000, version / 100 % 100, version % 100,
                    getenv("NCCL_LAUNCH_ORDER_IMPLICIT") ? getenv("NCCL_LAUNCH_ORDER_IMPLICIT")
                                                         : "unsupported");
    }
    zoe_log(ZOE_LOG_DEBUG, "NCCL collectives on GPU %d: ordered %s", zoe_device_ordinal(device),
            zoe_nccl_order_name(order));
    return ZOE_OK;
}

zoe_status zoe_nccl_init(zoe_comm *c, zoe_device *device) {
    ZOE_TRY(choose_order(c, device));
    ncclUniqueId id;
    if (c->rank == 0) NCCL_TRY(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c->group) != MPI_SUCCESS)
        return zoe_fail(ZOE_ERR_MPI, "broadcast of the NCCL unique id failed");
    if (cudaSetDevice(zoe_device_ordinal(device)) != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "cudaSetDevice(%d) failed", zoe_device_ordinal(device));
    ncclComm_t comm;
    NCCL_TRY(ncclCommInitRank(&comm, c->size, id, c->rank));
    c->nccl = comm;
    device->nccl_comms++;
    c->dev = device;
    return ZOE_OK;
}

void zoe_nccl_destroy(zoe_comm *c) {
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
    if (c->dev && --c->dev->nccl_comms == 0 && c->dev->nccl_order) {
        cudaEventDestroy((cudaEvent_t)c->dev->nccl_order);
        c->dev->nccl_order = NULL;
    }
    c->dev = NULL;
}

/* The serial order of the GPU's collectives (see the top): wait for the previous one before,
 * mark this one after. Inside a group the kernels launch only at ncclGroupEnd, so the group waits
 * once at its start and marks once at its end. By launch, NCCL orders them and these do nothing. */
static zoe_status order_before(zoe_comm *c, zoe_stream *stream) {
    if (c->group_depth || !c->dev->nccl_serial) return ZOE_OK;
    cudaError_t err = cudaStreamWaitEvent(native(stream), (cudaEvent_t)c->dev->nccl_order, 0);
    if (err != cudaSuccess)
        return zoe_fail(ZOE_ERR_CUDA, "ordering NCCL collectives: %s", cudaGetErrorString(err));
    return ZOE_OK;
}

static zoe_status order_after(zoe_comm *c, zoe_stream *stream) {
    if (c->group_depth || !c->dev->nccl_serial) return ZOE_OK;
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
    ncclDataType_t type;
    ZOE_TRY(nccl_type(dtype, &type));
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(
        ncclAllReduce(send, recv, count, type, nccl_op(op), (ncclComm_t)c->nccl, native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    ncclDataType_t type;
    ZOE_TRY(nccl_type(dtype, &type));
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclReduceScatter(send, recv, recv_count, type, nccl_op(op), (ncclComm_t)c->nccl,
                               native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream) {
    ncclDataType_t type;
    ZOE_TRY(nccl_type(dtype, &type));
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclAllGather(send, recv, send_count, type, (ncclComm_t)c->nccl, native(stream)));
    return order_after(c, stream);
}

zoe_status zoe_nccl_broadcast(zoe_comm *c, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream) {
    ncclDataType_t type;
    ZOE_TRY(nccl_type(dtype, &type));
    ZOE_TRY(order_before(c, stream));
    NCCL_TRY(ncclBroadcast(buf, buf, count, type, root, (ncclComm_t)c->nccl, native(stream)));
    return order_after(c, stream);
}
