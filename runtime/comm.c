/* The communicator and its MPI backend.
 *
 * bf16 and fp16 reductions are staged through fp32 rather than reduced by a user-defined
 * MPI_Op on 16-bit data: a user op would round to 16 bits after every pairwise combination
 * (error growing with the number of ranks, and depending on MPI's reduction order), while
 * staging rounds once, after an fp32 sum, so a reduction over d ranks equals the serial fp32
 * sum rounded once. It doubles the bytes on the wire, which the CPU backend (tests, small
 * grids) can afford; the NCCL backend reduces 16-bit data natively (the bound on the difference
 * is stated in comm.h and tested by test_comm_bounds).
 *
 * Counts: NCCL takes size_t counts and gets them unchanged. MPI takes int counts, so the MPI
 * paths run a call whose count (or total count, size x count, for reduce-scatter and
 * all-gather, whose implementations add up the blocks in int) is above the limit in chunks of
 * at most max_count elements; tests lower the limit with zoe_comm_set_max_count. The chunks of
 * a reduce-scatter or all-gather are packed through one buffer bounded to ZOE_MPI_PACK_BYTES
 * (runtime/mpi_chunk.h), so that the largest collective costs a fixed 64 MiB on the rank.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_impl.h"
#include "runtime/mpi_chunk.h"
#include "runtime/device_impl.h"
#include "runtime/clock.h"
#include "runtime/error.h"

#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int mpi_code_ = (call);                                                                    \
        if (mpi_code_ != MPI_SUCCESS) return zoe_fail_mpi(mpi_code_, what);                        \
    } while (0)

static zoe_status comm_new(MPI_Comm group, zoe_comm_kind kind, zoe_comm **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "comm out pointer is NULL");
    *out = NULL;
    if (group == MPI_COMM_NULL) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "group is MPI_COMM_NULL");
    zoe_comm *c = calloc(1, sizeof *c);
    if (!c) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "comm struct");
    c->kind = kind;
    int rc = MPI_Comm_dup(group, &c->group);
    if (rc != MPI_SUCCESS) {
        free(c);
        return zoe_fail_mpi(rc, "MPI_Comm_dup of the group");
    }
    /* Errors come back to zoe, which names the call with MPI_Error_string (runtime/grid.c). */
    if ((rc = MPI_Comm_set_errhandler(c->group, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
        (rc = MPI_Comm_rank(c->group, &c->rank)) != MPI_SUCCESS ||
        (rc = MPI_Comm_size(c->group, &c->size)) != MPI_SUCCESS) {
        zoe_comm_destroy(c);
        return zoe_fail_mpi(rc, "MPI_Comm_rank/size of the group");
    }
    c->max_count = INT_MAX;
    *out = c;
    return ZOE_OK;
}

zoe_nccl_order zoe_nccl_order_choose(int nccl_version, const char *launch_order_implicit) {
    enum { FIRST_IMPLICIT_ORDER = 22600 }; /* NCCL 2.26 introduced NCCL_LAUNCH_ORDER_IMPLICIT */
    if (nccl_version < FIRST_IMPLICIT_ORDER) return ZOE_NCCL_ORDER_SERIAL;
    if (!launch_order_implicit || !*launch_order_implicit) return ZOE_NCCL_ORDER_BY_LAUNCH;
    return atoi(launch_order_implicit) != 0 ? ZOE_NCCL_ORDER_BY_LAUNCH : ZOE_NCCL_ORDER_SERIAL;
}

const char *zoe_nccl_order_name(zoe_nccl_order order) {
    return order == ZOE_NCCL_ORDER_BY_LAUNCH ? "by launch (NCCL_LAUNCH_ORDER_IMPLICIT)"
                                             : "serial (one collective at a time per GPU)";
}

zoe_status zoe_comm_create_mpi(MPI_Comm group, zoe_comm **out) {
    return comm_new(group, ZOE_COMM_MPI, out);
}

zoe_status zoe_comm_create_nccl(MPI_Comm group, zoe_device *device, zoe_comm **out) {
    if (out) *out = NULL;
#ifdef ZOE_HAVE_CUDA
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "comm out pointer is NULL");
    if (!device || zoe_device_backend(device) != ZOE_BACKEND_CUDA)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "an NCCL communicator needs a CUDA device");
    ZOE_TRY(comm_new(group, ZOE_COMM_NCCL, out));
    zoe_status st = zoe_nccl_init(*out, device);
    if (st != ZOE_OK) {
        zoe_comm_destroy(*out);
        *out = NULL;
    }
    return st;
#else
    (void)group, (void)device;
    return zoe_fail(ZOE_ERR_UNSUPPORTED, "this zoe was built without CUDA, so without NCCL");
#endif
}

zoe_status zoe_comm_create_for_device(MPI_Comm group, zoe_device *device, zoe_comm **out) {
    if (device && zoe_device_backend(device) == ZOE_BACKEND_CUDA)
        return zoe_comm_create_nccl(group, device, out);
    return zoe_comm_create_mpi(group, out);
}

zoe_status zoe_comm_split(const zoe_comm *c, int color, zoe_device *device, zoe_comm **out) {
    if (!c || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_comm_split: NULL argument");
    *out = NULL;
    if (color < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_comm_split: color=%d is negative", color);
    MPI_Comm sub;
    MPI_TRY(MPI_Comm_split(c->group, color, c->rank, &sub), "MPI_Comm_split");
    zoe_status st = c->kind == ZOE_COMM_NCCL ? zoe_comm_create_nccl(sub, device, out)
                                             : zoe_comm_create_mpi(sub, out);
    MPI_Comm_free(&sub);
    return st;
}

void zoe_comm_destroy(zoe_comm *c) {
    if (!c) return;
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL) zoe_nccl_destroy(c);
#endif
    if (c->group != MPI_COMM_NULL) MPI_Comm_free(&c->group);
    free(c->stage);
    free(c->pack);
    free(c);
}

zoe_status zoe_comm_set_max_count(zoe_comm *c, size_t max_count) {
    if (!c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "set_max_count: communicator is NULL");
    if (max_count < (size_t)c->size || max_count > INT_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "set_max_count: %zu is not within [group size %d, INT_MAX]", max_count,
                        c->size);
    c->max_count = max_count;
    return ZOE_OK;
}

int zoe_comm_rank(const zoe_comm *c) {
    return c ? c->rank : -1;
}
int zoe_comm_size(const zoe_comm *c) {
    return c ? c->size : -1;
}
const char *zoe_comm_backend_name(const zoe_comm *c) {
    return !c ? "none" : c->kind == ZOE_COMM_NCCL ? "nccl" : "mpi";
}
uint64_t zoe_comm_bytes(const zoe_comm *c) {
    return c ? c->bytes : 0;
}
void zoe_comm_reset_bytes(zoe_comm *c) {
    if (c) c->bytes = 0;
}

static zoe_status check_args(const zoe_comm *c, const void *send, const void *recv, size_t count,
                             zoe_dtype dtype, const char *what) {
    if (!c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: communicator is NULL", what);
    if (zoe_dtype_size(dtype) == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", what, (int)dtype);
    /* The types below are the ones both backends carry as themselves; any other would travel as
     * another type's bytes (an int8 buffer read as fp32 would overrun it). */
    if (dtype != ZOE_F32 && dtype != ZOE_BF16 && dtype != ZOE_F16 && dtype != ZOE_I32)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: dtype %s is not one the communicators carry (fp32, bf16, fp16, int32)",
                        what, zoe_dtype_name(dtype));
    if (count > SIZE_MAX / zoe_dtype_size(dtype) / (size_t)c->size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: count %zu overflows a byte size", what,
                        count);
    if (count && (!send || !recv))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: NULL buffer for %zu elements", what, count);
    return ZOE_OK;
}

static zoe_status check_op(zoe_reduce_op op, zoe_dtype dtype, const char *what) {
    if (op != ZOE_REDUCE_SUM && op != ZOE_REDUCE_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: unknown reduce op %d", what, (int)op);
    (void)dtype;
    return ZOE_OK;
}

/* A group of one rank: every collective is the identity, a copy unless it is in place. */
static zoe_status local_copy(void *recv, const void *send, size_t bytes) {
    if (recv != send) memmove(recv, send, bytes);
    return ZOE_OK;
}

static MPI_Op mpi_op(zoe_reduce_op op) {
    return op == ZOE_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

static int is_half(zoe_dtype d) {
    return d == ZOE_BF16 || d == ZOE_F16;
}

static zoe_status stage_reserve(zoe_comm *c, size_t count) {
    if (count <= c->stage_count) return ZOE_OK;
    float *p = realloc(c->stage, count * sizeof(float));
    if (!p) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "comm staging of %zu floats", count);
    c->stage = p;
    c->stage_count = count;
    return ZOE_OK;
}

static zoe_status pack_reserve(zoe_comm *c, size_t bytes) {
    if (bytes <= c->pack_bytes) return ZOE_OK;
    void *p = realloc(c->pack, bytes);
    if (!p) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "comm chunk packing of %zu bytes", bytes);
    c->pack = p;
    c->pack_bytes = bytes;
    return ZOE_OK;
}

static size_t min_count(size_t a, size_t b) {
    return a < b ? a : b;
}

/* ---- MPI calls with size_t counts: chunked where the count passes the limit ---- */

/* Elements of each rank's block in one chunked call: within the call's count limit, and the
 * [size][chunk] packing within ZOE_MPI_PACK_BYTES. */
static size_t block_chunk(const zoe_comm *c, size_t esz) {
    return zoe_mpi_chunk_rows(1, (size_t)c->size, esz, c->max_count, ZOE_MPI_PACK_BYTES);
}

static zoe_status mpi_all_reduce(zoe_comm *c, const void *send, void *recv, size_t count,
                                 MPI_Datatype t, size_t esz, MPI_Op op) {
    for (size_t lo = 0; lo < count; lo += c->max_count) {
        size_t len = min_count(c->max_count, count - lo);
        const void *in = send == recv ? MPI_IN_PLACE : (const char *)send + lo * esz;
        MPI_TRY(MPI_Allreduce(in, (char *)recv + lo * esz, (int)len, t, op, c->group),
                "MPI_Allreduce");
    }
    return ZOE_OK;
}

/* send [size][recv_count] must not overlap recv. A chunk [lo, lo + len) of every block is packed
 * into [size][len] so that each call is an ordinary reduce-scatter of len per rank. */
static zoe_status mpi_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                     MPI_Datatype t, size_t esz, MPI_Op op) {
    const size_t size = (size_t)c->size, chunk = block_chunk(c, esz);
    if (recv_count <= c->max_count / size) {
        MPI_TRY(MPI_Reduce_scatter_block(send, recv, (int)recv_count, t, op, c->group),
                "MPI_Reduce_scatter_block");
        return ZOE_OK;
    }
    ZOE_TRY(pack_reserve(c, size * chunk * esz));
    for (size_t lo = 0; lo < recv_count; lo += chunk) {
        size_t len = min_count(chunk, recv_count - lo);
        for (size_t r = 0; r < size; r++)
            memcpy((char *)c->pack + r * len * esz,
                   (const char *)send + (r * recv_count + lo) * esz, len * esz);
        MPI_TRY(
            MPI_Reduce_scatter_block(c->pack, (char *)recv + lo * esz, (int)len, t, op, c->group),
            "MPI_Reduce_scatter_block");
    }
    return ZOE_OK;
}

/* Chunks gather into [size][len] and are unpacked into their blocks of recv. */
static zoe_status mpi_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                                 MPI_Datatype t, size_t esz) {
    const size_t size = (size_t)c->size, chunk = block_chunk(c, esz);
    int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * send_count * esz;
    if (send_count <= c->max_count / size) {
        MPI_TRY(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)send_count, t, recv,
                              (int)send_count, t, c->group),
                "MPI_Allgather");
        return ZOE_OK;
    }
    ZOE_TRY(pack_reserve(c, size * chunk * esz));
    for (size_t lo = 0; lo < send_count; lo += chunk) {
        size_t len = min_count(chunk, send_count - lo);
        MPI_TRY(MPI_Allgather((const char *)send + lo * esz, (int)len, t, c->pack, (int)len, t,
                              c->group),
                "MPI_Allgather");
        for (size_t r = 0; r < size; r++)
            memcpy((char *)recv + (r * send_count + lo) * esz, (char *)c->pack + r * len * esz,
                   len * esz);
    }
    return ZOE_OK;
}

static zoe_status mpi_broadcast(zoe_comm *c, void *buf, size_t count, MPI_Datatype t, size_t esz,
                                int root) {
    for (size_t lo = 0; lo < count; lo += c->max_count)
        MPI_TRY(MPI_Bcast((char *)buf + lo * esz, (int)min_count(c->max_count, count - lo), t, root,
                          c->group),
                "MPI_Bcast");
    return ZOE_OK;
}

static zoe_status comm_all_reduce(zoe_comm *c, const void *send, void *recv, size_t count,
                                  zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    ZOE_TRY(check_args(c, send, recv, count, dtype, "all_reduce"));
    ZOE_TRY(check_op(op, dtype, "all_reduce"));
    c->bytes += count * zoe_dtype_size(dtype);
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL)
        return zoe_nccl_all_reduce(c, send, recv, count, dtype, op, stream);
#endif
    (void)stream;
    if (count == 0) return ZOE_OK;
    if (c->size == 1) return local_copy(recv, send, count * zoe_dtype_size(dtype));
    if (is_half(dtype)) {
        ZOE_TRY(stage_reserve(c, count));
        ZOE_TRY(zoe_convert(c->stage, ZOE_F32, send, dtype, count));
        ZOE_TRY(mpi_all_reduce(c, c->stage, c->stage, count, MPI_FLOAT, sizeof(float), mpi_op(op)));
        return zoe_convert(recv, dtype, c->stage, ZOE_F32, count);
    }
    MPI_Datatype t = dtype == ZOE_I32 ? MPI_INT : MPI_FLOAT;
    return mpi_all_reduce(c, send, recv, count, t, zoe_dtype_size(dtype), mpi_op(op));
}

static zoe_status comm_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                      zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    ZOE_TRY(check_args(c, send, recv, recv_count, dtype, "reduce_scatter"));
    ZOE_TRY(check_op(op, dtype, "reduce_scatter"));
    size_t total = recv_count * (size_t)c->size, esz = zoe_dtype_size(dtype);
    c->bytes += total * esz;
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL)
        return zoe_nccl_reduce_scatter(c, send, recv, recv_count, dtype, op, stream);
#endif
    (void)stream;
    if (recv_count == 0) return ZOE_OK;
    if (c->size == 1) return local_copy(recv, send, recv_count * esz);
    const char *s = send;
    int overlaps =
        (const char *)recv < s + total * esz && s < (const char *)recv + recv_count * esz;
    if (is_half(dtype) || overlaps) {
        /* Staged: fp32 copy of the whole input, reduced into the tail of the staging area. */
        ZOE_TRY(stage_reserve(c, total + recv_count));
        float *in = c->stage, *out = c->stage + total;
        if (dtype == ZOE_I32 || dtype == ZOE_F32)
            memcpy(in, send, total * esz);
        else
            ZOE_TRY(zoe_convert(in, ZOE_F32, send, dtype, total));
        MPI_Datatype t = dtype == ZOE_I32 ? MPI_INT : MPI_FLOAT;
        ZOE_TRY(mpi_reduce_scatter(c, in, out, recv_count, t, sizeof(float), mpi_op(op)));
        if (dtype == ZOE_I32 || dtype == ZOE_F32)
            memcpy(recv, out, recv_count * esz);
        else
            ZOE_TRY(zoe_convert(recv, dtype, out, ZOE_F32, recv_count));
        return ZOE_OK;
    }
    MPI_Datatype t = dtype == ZOE_I32 ? MPI_INT : MPI_FLOAT;
    return mpi_reduce_scatter(c, send, recv, recv_count, t, esz, mpi_op(op));
}

/* Moving data without arithmetic: 16-bit types travel as raw 16-bit words, exactly. */
static MPI_Datatype raw_type(zoe_dtype dtype) {
    return zoe_dtype_size(dtype) == 2 ? MPI_UINT16_T : dtype == ZOE_I32 ? MPI_INT : MPI_FLOAT;
}

static zoe_status comm_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                                  zoe_dtype dtype, zoe_stream *stream) {
    ZOE_TRY(check_args(c, send, recv, send_count, dtype, "all_gather"));
    size_t esz = zoe_dtype_size(dtype);
    c->bytes += send_count * (size_t)c->size * esz;
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL)
        return zoe_nccl_all_gather(c, send, recv, send_count, dtype, stream);
#endif
    (void)stream;
    if (send_count == 0) return ZOE_OK;
    if (c->size == 1) return local_copy(recv, send, send_count * esz);
    return mpi_all_gather(c, send, recv, send_count, raw_type(dtype), esz);
}

static zoe_status comm_broadcast(zoe_comm *c, void *buf, size_t count, zoe_dtype dtype, int root,
                                 zoe_stream *stream) {
    ZOE_TRY(check_args(c, buf, buf, count, dtype, "broadcast"));
    if (root < 0 || root >= c->size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "broadcast root %d outside group of %d", root,
                        c->size);
    c->bytes += count * zoe_dtype_size(dtype);
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL) return zoe_nccl_broadcast(c, buf, count, dtype, root, stream);
#endif
    (void)stream;
    if (count == 0) return ZOE_OK;
    return mpi_broadcast(c, buf, count, raw_type(dtype), zoe_dtype_size(dtype), root);
}

static zoe_status comm_barrier(zoe_comm *c, zoe_stream *stream) {
    if (!c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "barrier: communicator is NULL");
    /* Work queued on the stream is part of "before the barrier". */
    ZOE_TRY(zoe_stream_synchronize(stream));
    MPI_TRY(MPI_Barrier(c->group), "MPI_Barrier");
    return ZOE_OK;
}

static zoe_status comm_group(zoe_comm *c, zoe_stream *stream, int start) {
    if (!c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "group: communicator is NULL");
#ifdef ZOE_HAVE_CUDA
    if (c->kind == ZOE_COMM_NCCL)
        return start ? zoe_nccl_group_start(c, stream) : zoe_nccl_group_end(c, stream);
#endif
    (void)stream, (void)start;
    return ZOE_OK;
}

/* ---- the public collectives: the backends above, timed ---- */

#define TIMED(c, call)                                                                             \
    do {                                                                                           \
        double t0_ = zoe_clock_seconds();                                                          \
        zoe_status st_ = (call);                                                                   \
        if (c) (c)->seconds += zoe_clock_seconds() - t0_;                                          \
        return st_;                                                                                \
    } while (0)

zoe_status zoe_comm_all_reduce(zoe_comm *c, const void *send, void *recv, size_t count,
                               zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    TIMED(c, comm_all_reduce(c, send, recv, count, dtype, op, stream));
}

zoe_status zoe_comm_reduce_scatter(zoe_comm *c, const void *send, void *recv, size_t recv_count,
                                   zoe_dtype dtype, zoe_reduce_op op, zoe_stream *stream) {
    TIMED(c, comm_reduce_scatter(c, send, recv, recv_count, dtype, op, stream));
}

zoe_status zoe_comm_all_gather(zoe_comm *c, const void *send, void *recv, size_t send_count,
                               zoe_dtype dtype, zoe_stream *stream) {
    TIMED(c, comm_all_gather(c, send, recv, send_count, dtype, stream));
}

zoe_status zoe_comm_broadcast(zoe_comm *c, void *buf, size_t count, zoe_dtype dtype, int root,
                              zoe_stream *stream) {
    TIMED(c, comm_broadcast(c, buf, count, dtype, root, stream));
}

zoe_status zoe_comm_barrier(zoe_comm *c, zoe_stream *stream) {
    TIMED(c, comm_barrier(c, stream));
}

zoe_status zoe_comm_group_start(zoe_comm *c, zoe_stream *stream) {
    TIMED(c, comm_group(c, stream, 1));
}

zoe_status zoe_comm_group_end(zoe_comm *c, zoe_stream *stream) {
    TIMED(c, comm_group(c, stream, 0));
}

double zoe_comm_seconds(const zoe_comm *c) {
    return c ? c->seconds : 0.0;
}
