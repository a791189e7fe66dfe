/* Internal: the communicator struct and the NCCL half's entry points (comm_nccl_cuda.c).
 *
 * Explained in docs/gpus.md, "Collectives and host copies". */
#ifndef ZOE_RUNTIME_COMM_IMPL_H
#define ZOE_RUNTIME_COMM_IMPL_H

#include "zoe/comm.h"

typedef enum { ZOE_COMM_MPI, ZOE_COMM_NCCL } zoe_comm_kind;

struct zoe_comm {
    zoe_comm_kind kind;
    MPI_Comm group; /* our duplicate: collectives of zoe never match a caller's messages */
    int rank, size;
    uint64_t bytes;
    double seconds; /* spent inside collective calls */
    /* MPI backend: fp32 staging for bf16/fp16 reductions, grown once to the largest call. */
    float *stage;
    size_t stage_count;
    /* MPI backend: the largest count of one MPI call (INT_MAX; lowered by tests), and the
     * buffer that chunked reduce-scatters and all-gathers pack their blocks into
     * (at most ZOE_MPI_PACK_BYTES: runtime/mpi_chunk.h). */
    size_t max_count;
    void *pack;
    size_t pack_bytes;
    void *nccl;      /* ncclComm_t */
    zoe_device *dev; /* NCCL: the GPU, whose nccl_order chains the collectives when serial */
    int group_depth; /* inside zoe_comm_group_start/end */
};

/* Test knob: MPI calls of the backend take at most max_count elements each (at least the group
 * size, at most INT_MAX), so that tests reach the chunked paths with small buffers. */
zoe_status zoe_comm_set_max_count(zoe_comm *comm, size_t max_count);

/* How the NCCL collectives of one GPU keep one order across its communicators (the argument is
 * at the top of comm_nccl_cuda.c). BY_LAUNCH: NCCL itself (2.26 and later, with
 * NCCL_LAUNCH_ORDER_IMPLICIT=1) starts each collective's kernel only once the previous one's
 * has launched, so collectives of different communicators run at the same time. SERIAL: zoe
 * chains them with an event, each waiting for the previous one to finish: safe with any NCCL,
 * but a TP all-reduce then waits for the DP reduce-scatter before it. */
typedef enum { ZOE_NCCL_ORDER_BY_LAUNCH, ZOE_NCCL_ORDER_SERIAL } zoe_nccl_order;

/* The order for an NCCL library of version code nccl_version (ncclGetVersion: 22800 for 2.28.0)
 * given the value of NCCL_LAUNCH_ORDER_IMPLICIT in the environment (NULL when unset, which zoe
 * then sets to 1). A user's explicit 0 is kept, and zoe orders the collectives itself. */
zoe_nccl_order zoe_nccl_order_choose(int nccl_version, const char *launch_order_implicit);
const char *zoe_nccl_order_name(zoe_nccl_order order);

#ifdef ZOE_HAVE_CUDA
zoe_status zoe_nccl_init(zoe_comm *comm, zoe_device *device);
void zoe_nccl_destroy(zoe_comm *comm);
zoe_status zoe_nccl_all_reduce(zoe_comm *comm, const void *send, void *recv, size_t count,
                               zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream);
zoe_status zoe_nccl_reduce_scatter(zoe_comm *comm, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream);
zoe_status zoe_nccl_all_gather(zoe_comm *comm, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream);
zoe_status zoe_nccl_group_start(zoe_comm *comm, zoe_stream *stream);
zoe_status zoe_nccl_group_end(zoe_comm *comm, zoe_stream *stream);
zoe_status zoe_nccl_broadcast(zoe_comm *comm, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream);
#endif

#endif
