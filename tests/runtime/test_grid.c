/* The grid for every valid tp at this world size: coordinates, group membership (checked by
 * gathering world ranks over each sub-communicator) and the errors for bad tp. */
#include <stdio.h>
#include <stdlib.h>
#include "testing.h"

static void check_grid(int tp) {
    int world = test_world_size(), rank = test_rank();
    zoe_grid *g = NULL;
    if (!CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, tp, &g))) return;
    int dp = world / tp;
    CHECK(zoe_grid_tp_size(g) == tp && zoe_grid_dp_size(g) == dp, "tp %d dp %d", tp, dp);
    CHECK(zoe_grid_rank(g) == rank && zoe_grid_world_size(g) == world, "rank and size");
    CHECK(zoe_grid_tp_rank(g) == rank % tp, "tp=%d: tp_rank %d of rank %d", tp, zoe_grid_tp_rank(g),
          rank);
    CHECK(zoe_grid_dp_rank(g) == rank / tp, "tp=%d: dp_rank %d of rank %d", tp, zoe_grid_dp_rank(g),
          rank);
    CHECK(rank == zoe_grid_tp_rank(g) + tp * zoe_grid_dp_rank(g), "rank = tp_rank + tp*dp_rank");
    /* TP group: consecutive ranks dp_rank*tp .. +tp-1, ordered by tp_rank. */
    int *members = malloc(sizeof(int) * (size_t)world);
    MPI_Comm tpc = zoe_grid_tp_comm(g), dpc = zoe_grid_dp_comm(g);
    int n, r;
    MPI_Comm_size(tpc, &n);
    MPI_Comm_rank(tpc, &r);
    CHECK(n == tp && r == zoe_grid_tp_rank(g), "tp comm size %d rank %d", n, r);
    MPI_Allgather(&rank, 1, MPI_INT, members, 1, MPI_INT, tpc);
    for (int i = 0; i < tp; i++)
        CHECK(members[i] == zoe_grid_dp_rank(g) * tp + i, "tp=%d: tp group member %d is rank %d",
              tp, i, members[i]);
    MPI_Comm_size(dpc, &n);
    MPI_Comm_rank(dpc, &r);
    CHECK(n == dp && r == zoe_grid_dp_rank(g), "dp comm size %d rank %d", n, r);
    MPI_Allgather(&rank, 1, MPI_INT, members, 1, MPI_INT, dpc);
    for (int i = 0; i < dp; i++)
        CHECK(members[i] == zoe_grid_tp_rank(g) + tp * i, "tp=%d: dp group member %d is rank %d",
              tp, i, members[i]);
    CHECK(zoe_grid_local_size(g) >= 1 && zoe_grid_local_rank(g) < zoe_grid_local_size(g),
          "local rank");
    free(members);
    zoe_grid_destroy(g);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int world = test_world_size();
    for (int tp = 1; tp <= world; tp++)
        if (world % tp == 0) check_grid(tp);

    zoe_grid *g = (zoe_grid *)0x1;
    CHECK(zoe_grid_create(MPI_COMM_WORLD, 0, &g) == ZOE_ERR_INVALID_ARGUMENT && g == NULL,
          "tp=0 rejected");
    CHECK(strstr(zoe_last_error(), "tp=0") != NULL, "message names tp=0: '%s'", zoe_last_error());
    CHECK(zoe_grid_create(MPI_COMM_WORLD, -2, &g) == ZOE_ERR_INVALID_ARGUMENT, "tp=-2 rejected");
    int bad = world == 8 ? 3 : world + 1;
    CHECK(zoe_grid_create(MPI_COMM_WORLD, bad, &g) == ZOE_ERR_INVALID_ARGUMENT, "tp=%d rejected",
          bad);
    char want[96];
    snprintf(want, sizeof want, "tp=%d does not divide world size %d", bad, world);
    CHECK(strstr(zoe_last_error(), want) != NULL, "message '%s' contains '%s'", zoe_last_error(),
          want);
    return test_finish("test_grid");
}
