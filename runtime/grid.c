/* The TP x DP process grid: rank = tp_rank + tp * dp_rank, the TP, DP and node communicators
 * split from the world one.
 *
 * Explained in docs/architecture.md, "The grid". */
#include <stdlib.h>
#include "runtime/error.h"
#include "zoe/grid.h"
#include "zoe/log.h"

struct zoe_grid {
    int rank, world_size, tp, dp, tp_rank, dp_rank, local_rank, local_size;
    MPI_Comm world, tp_comm, dp_comm;
};

static void free_comm(MPI_Comm *c) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void zoe_grid_destroy(zoe_grid *g) {
    if (!g) return;
    free_comm(&g->tp_comm);
    free_comm(&g->dp_comm);
    free_comm(&g->world);
    free(g);
}

/* The rank's node (local rank and size), and a warning (on every rank of the group, once per
 * node) when a TP group crosses a node boundary: its all-reduces would then run over the
 * network on every layer. */
static zoe_status find_node(zoe_grid *g) {
    MPI_Comm node = MPI_COMM_NULL;
    int rc = MPI_Comm_split_type(g->world, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Comm_split_type into nodes");
    /* Label each node by its smallest world rank; a TP group is on one node iff all agree. */
    int node_id = g->rank, lo = 0, hi = 0;
    if ((rc = MPI_Comm_rank(node, &g->local_rank)) == MPI_SUCCESS &&
        (rc = MPI_Comm_size(node, &g->local_size)) == MPI_SUCCESS &&
        (rc = MPI_Allreduce(MPI_IN_PLACE, &node_id, 1, MPI_INT, MPI_MIN, node)) == MPI_SUCCESS &&
        (rc = MPI_Allreduce(&node_id, &lo, 1, MPI_INT, MPI_MIN, g->tp_comm)) == MPI_SUCCESS)
        rc = MPI_Allreduce(&node_id, &hi, 1, MPI_INT, MPI_MAX, g->tp_comm);
    MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "finding the node of each rank");
    if (lo != hi && g->tp_rank == 0)
        zoe_log(ZOE_LOG_WARN,
                "TP group of dp=%d spans nodes: its all-reduces cross the network on every layer; "
                "place %d consecutive ranks per node",
                g->dp_rank, g->tp);
    return ZOE_OK;
}

zoe_status zoe_grid_create(MPI_Comm world, int tp, zoe_grid **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "grid out pointer is NULL");
    *out = NULL;
    int size, rank;
    if (MPI_Comm_size(world, &size) != MPI_SUCCESS || MPI_Comm_rank(world, &rank) != MPI_SUCCESS)
        return zoe_fail(ZOE_ERR_MPI, "world communicator is not valid");
    if (tp <= 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tp=%d must be positive", tp);
    if (size % tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "tp=%d does not divide world size %d", tp, size);
    zoe_grid *g = calloc(1, sizeof *g);
    if (!g) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "grid struct");
    g->world = g->tp_comm = g->dp_comm = MPI_COMM_NULL;
    g->rank = rank;
    g->world_size = size;
    g->tp = tp;
    g->dp = size / tp;
    g->tp_rank = rank % tp;
    g->dp_rank = rank / tp;
    /* Keys order the sub-communicators so their ranks are the grid coordinates. */
    /* zoe's communicators return MPI errors to zoe, which names the failed call with the MPI
     * library's own message (MPI_Error_string), instead of the default handler aborting the
     * job from inside MPI. The split communicators inherit the handler. */
    int rc = MPI_Comm_dup(world, &g->world);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(g->world, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_split(g->world, g->dp_rank, g->tp_rank, &g->tp_comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_split(g->world, g->tp_rank, g->dp_rank, &g->dp_comm);
    if (rc != MPI_SUCCESS) {
        zoe_grid_destroy(g);
        return zoe_fail_mpi(rc, "splitting the ranks into tp groups");
    }
    zoe_status st = find_node(g);
    if (st != ZOE_OK) {
        zoe_grid_destroy(g);
        return st;
    }
    zoe_log_set_rank(rank, g->tp_rank, g->dp_rank);
    zoe_log(ZOE_LOG_DEBUG, "grid %d = tp %d x dp %d; node-local rank %d of %d", size, tp, g->dp,
            g->local_rank, g->local_size);
    *out = g;
    return ZOE_OK;
}

int zoe_grid_rank(const zoe_grid *g) {
    return g ? g->rank : -1;
}
int zoe_grid_world_size(const zoe_grid *g) {
    return g ? g->world_size : -1;
}
int zoe_grid_tp_size(const zoe_grid *g) {
    return g ? g->tp : -1;
}
int zoe_grid_dp_size(const zoe_grid *g) {
    return g ? g->dp : -1;
}
int zoe_grid_tp_rank(const zoe_grid *g) {
    return g ? g->tp_rank : -1;
}
int zoe_grid_dp_rank(const zoe_grid *g) {
    return g ? g->dp_rank : -1;
}
int zoe_grid_local_rank(const zoe_grid *g) {
    return g ? g->local_rank : -1;
}
int zoe_grid_local_size(const zoe_grid *g) {
    return g ? g->local_size : -1;
}
MPI_Comm zoe_grid_world_comm(const zoe_grid *g) {
    return g ? g->world : MPI_COMM_NULL;
}
MPI_Comm zoe_grid_tp_comm(const zoe_grid *g) {
    return g ? g->tp_comm : MPI_COMM_NULL;
}
MPI_Comm zoe_grid_dp_comm(const zoe_grid *g) {
    return g ? g->dp_comm : MPI_COMM_NULL;
}
