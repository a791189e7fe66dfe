/* The communicator: collectives over one group of ranks, on a stream. The MPI backend serves
 * the CPU device; the NCCL backend serves CUDA devices. Counts are elements, not bytes.
 *
 * Explained in docs/gpus.md, "Collectives and host copies". */
#ifndef ZOE_COMM_H
#define ZOE_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zoe_reduce_op {
    ZOE_REDUCE_SUM = 0,
    ZOE_REDUCE_MAX = 1,
} zoe_reduce_op;

typedef struct zoe_comm zoe_comm;

/* A communicator over the ranks of group (which the caller keeps alive). */
zoe_status zoe_comm_create_mpi(MPI_Comm group, zoe_comm **out);
/* NCCL over the same ranks: the unique id is broadcast over group, then ncclCommInitRank.
 * The caller has made device current (ZOE_ERR_UNSUPPORTED in a CPU-only build). */
zoe_status zoe_comm_create_nccl(MPI_Comm group, zoe_device *device, zoe_comm **out);
/* The backend that fits the device: MPI for CPU, NCCL for CUDA. */
zoe_status zoe_comm_create_for_device(MPI_Comm group, zoe_device *device, zoe_comm **out);
void zoe_comm_destroy(zoe_comm *comm);
/* The ranks of comm that pass the same color (>= 0), ordered by their rank in comm, as a
 * communicator of comm's backend (device: the CUDA device for NCCL, else unused). Collective
 * over comm. */
zoe_status zoe_comm_split(const zoe_comm *comm, int color, zoe_device *device, zoe_comm **out);

/* Pure getters, which cannot fail: -1, 0 or "none" for a NULL comm. */
int zoe_comm_rank(const zoe_comm *comm);
int zoe_comm_size(const zoe_comm *comm);
const char *zoe_comm_backend_name(const zoe_comm *comm);
/* Bytes this rank has handed to collectives so far (the payload, counted as
 * count x element size per call, whatever the algorithm); for comparing with formulas. */
uint64_t zoe_comm_bytes(const zoe_comm *comm);
void zoe_comm_reset_bytes(zoe_comm *comm);
/* Seconds spent inside this communicator's collective calls so far: the collectives' own time
 * with MPI (they complete in the call); with NCCL only the time to enqueue them. */
double zoe_comm_seconds(const zoe_comm *comm);

/* Bound on 16-bit sums. MPI sums bf16/fp16 in fp32 and rounds once: |error| <= u |sum| (u the
 * 16-bit unit roundoff, 2^-8 for bf16, 2^-11 for fp16) plus fp32 rounding. NCCL rounds to 16 bits
 * at every hop of its ring, d - 1 roundings of partial sums over d ranks:
 *     |nccl - exact| <= (d - 1) u sum|x_r|   (first order; tested by test_comm_bounds at d = 16)
 * so for gradients reduced over DP the two can differ by up to d u sum|x| (about 6% of the sum
 * of magnitudes for bf16 at d = 16). */

/* The collectives carry fp32, bf16, fp16 and int32, as themselves on both backends; another
 * dtype (int8) is refused with ZOE_ERR_INVALID_ARGUMENT naming it, on MPI and on NCCL alike. */

/* recv[i] = op over ranks of send[i]; send == recv is in-place. */
zoe_status zoe_comm_all_reduce(zoe_comm *comm, const void *send, void *recv, size_t count,
                               zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream);
/* send holds size*recv_count elements; rank r receives the reduction of block r.
 * In-place when send + r*recv_count*elem == recv. */
zoe_status zoe_comm_reduce_scatter(zoe_comm *comm, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream);
/* recv holds size*send_count elements, block r from rank r. In-place when
 * send == recv + r*send_count*elem. */
zoe_status zoe_comm_all_gather(zoe_comm *comm, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream);
zoe_status zoe_comm_broadcast(zoe_comm *comm, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream);
zoe_status zoe_comm_barrier(zoe_comm *comm, zoe_stream *stream);

/* Collectives between group_start and group_end (all on this communicator and this stream)
 * are launched together at group_end, as one NCCL group (ncclGroupStart/End); with MPI each
 * completes as it is called and the pair does nothing. */
zoe_status zoe_comm_group_start(zoe_comm *comm, zoe_stream *stream);
zoe_status zoe_comm_group_end(zoe_comm *comm, zoe_stream *stream);

/* NCCL communicators on one GPU (one zoe_device) keep their collectives in the order the host
 * issued them, so that two communicators on one GPU cannot deadlock provided every rank issues
 * the same sequence of collectives from one host thread (the argument is in
 * runtime/comm_nccl_cuda.c). With NCCL 2.26 or later NCCL keeps that order by launch
 * (NCCL_LAUNCH_ORDER_IMPLICIT, which zoe sets to 1 before the process's first NCCL call of its
 * own) and the collectives of different communicators overlap; otherwise, or with the variable
 * set to 0, zoe runs them one at a time. NCCL reads its variables once: a program that runs NCCL
 * collectives of its own before it creates zoe's first NCCL communicator must set
 * NCCL_LAUNCH_ORDER_IMPLICIT itself, to 1 (overlap) or 0 (zoe's serial order). */

#ifdef __cplusplus
}
#endif
#endif
