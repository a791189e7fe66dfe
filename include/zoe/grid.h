/* The TP x DP process grid. rank = tp_rank + tp * dp_rank: a TP group is a run of consecutive
 * ranks, so with ranks placed by node it stays inside one node.
 *
 * Explained in docs/architecture.md, "The grid". */
#ifndef ZOE_GRID_H
#define ZOE_GRID_H

#include <mpi.h>
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zoe_grid zoe_grid;

/* tp must be positive and divide the size of world; dp = size / tp. Collective over world. */
zoe_status zoe_grid_create(MPI_Comm world, int tp, zoe_grid **out);
void zoe_grid_destroy(zoe_grid *grid);

/* Pure getters, which cannot fail: -1 (MPI_COMM_NULL for the communicators) for a NULL grid. */
int zoe_grid_rank(const zoe_grid *grid);
int zoe_grid_world_size(const zoe_grid *grid);
int zoe_grid_tp_size(const zoe_grid *grid);
int zoe_grid_dp_size(const zoe_grid *grid);
int zoe_grid_tp_rank(const zoe_grid *grid);
int zoe_grid_dp_rank(const zoe_grid *grid);
/* Ranks on this node and this rank's index among them (from MPI_COMM_TYPE_SHARED). */
int zoe_grid_local_rank(const zoe_grid *grid);
int zoe_grid_local_size(const zoe_grid *grid);
/* The communicators the grid owns (duplicated from world; valid until destroy). */
MPI_Comm zoe_grid_world_comm(const zoe_grid *grid);
MPI_Comm zoe_grid_tp_comm(const zoe_grid *grid);
MPI_Comm zoe_grid_dp_comm(const zoe_grid *grid);

#ifdef __cplusplus
}
#endif
#endif
