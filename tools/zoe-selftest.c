/* zoe-selftest: builds the TP x DP grid, prints it, and checks every collective of the
 * communicator over the TP and DP groups against values each rank can predict.
 * Usage: mpirun -np N zoe-selftest [--tp T]
 *
 * Explained in docs/multi-node.md, "Across nodes". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/zoe.h"

static int failures;

static void report(int ok, const char *group, const char *what) {
    if (!ok) failures++;
    zoe_log(ok ? ZOE_LOG_DEBUG : ZOE_LOG_ERROR, "%s %s: %s", group, what, ok ? "ok" : "WRONG");
}

/* Checks one group's collectives; rank r's data are (r+1)*(i+1) (exact in bf16 for small i). */
static void check_group(zoe_comm *c, zoe_stream *s, const char *name) {
    int r = zoe_comm_rank(c), n = zoe_comm_size(c);
    enum { N = 64 };
    float x[N], g[N * 16];
    uint16_t h[N];
    for (int i = 0; i < N; i++) x[i] = (float)((r + 1) * (i % 8 + 1));
    int ok = zoe_comm_all_reduce(c, x, x, N, ZOE_F32, ZOE_REDUCE_SUM, s) == ZOE_OK;
    for (int i = 0; i < N; i++) ok &= x[i] == (float)(n * (n + 1) / 2 * (i % 8 + 1));
    report(ok, name, "all_reduce fp32 sum");
    for (int i = 0; i < N; i++) h[i] = zoe_f32_to_bf16((float)((r + 1) * (i % 8 + 1)));
    ok = zoe_comm_all_reduce(c, h, h, N, ZOE_BF16, ZOE_REDUCE_MAX, s) == ZOE_OK;
    for (int i = 0; i < N; i++) ok &= zoe_bf16_to_f32(h[i]) == (float)(n * (i % 8 + 1));
    report(ok, name, "all_reduce bf16 max");
    for (int i = 0; i < N; i++) x[i] = (float)(r + i);
    ok = n <= 16 && zoe_comm_all_gather(c, x, g, N, ZOE_F32, s) == ZOE_OK;
    for (int q = 0; ok && q < n; q++)
        for (int i = 0; i < N; i++) ok &= g[q * N + i] == (float)(q + i);
    report(ok, name, "all_gather fp32");
    if (n <= 16) {
        for (int i = 0; i < N * n; i++) g[i] = 1.0f;
        ok = zoe_comm_reduce_scatter(c, g, x, N, ZOE_F32, ZOE_REDUCE_SUM, s) == ZOE_OK;
        for (int i = 0; i < N; i++) ok &= x[i] == (float)n;
        report(ok, name, "reduce_scatter fp32");
    }
    int32_t v = r == n - 1 ? 12345 : -1;
    ok = zoe_comm_broadcast(c, &v, 1, ZOE_I32, n - 1, s) == ZOE_OK && v == 12345;
    report(ok, name, "broadcast int32");
    report(zoe_comm_barrier(c, s) == ZOE_OK, name, "barrier");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int tp = 1, rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tp") == 0 && i + 1 < argc) {
            char *end;
            tp = (int)strtol(argv[++i], &end, 10);
            if (*end) tp = 0;
        } else {
            if (rank == 0)
                fprintf(stderr,
                        "zoe-selftest: unknown option '%s' (usage: zoe-selftest [--tp T])\n",
                        argv[i]);
            MPI_Finalize();
            return 2;
        }
    }
    zoe_grid *grid = NULL;
    if (zoe_grid_create(MPI_COMM_WORLD, tp, &grid) != ZOE_OK) {
        if (rank == 0) fprintf(stderr, "zoe-selftest: %s\n", zoe_last_error());
        MPI_Finalize();
        return 2;
    }
    if (rank == 0)
        printf("zoe self-test: %d ranks = tp %d x dp %d (rank = tp_rank + %d * dp_rank)\n", world,
               tp, world / tp, tp);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Rank 0 prints the whole grid so the layout reads in one place. */
    int coords[2] = {zoe_grid_tp_rank(grid), zoe_grid_dp_rank(grid)};
    int *all = rank == 0 ? malloc(sizeof(int) * 2 * (size_t)world) : NULL;
    MPI_Gather(coords, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int d = 0; d < world / tp; d++) {
            printf("  dp %d: TP group ranks", d);
            for (int r = 0; r < world; r++)
                if (all[2 * r + 1] == d) printf(" %d(tp%d)", r, all[2 * r]);
            printf("\n");
        }
        free(all);
    }
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    zoe_comm *tpc = NULL, *dpc = NULL, *wc = NULL;
    if (zoe_device_create(ZOE_BACKEND_CPU, 0, &dev) || zoe_stream_create(dev, &s) ||
        zoe_comm_create_mpi(zoe_grid_tp_comm(grid), &tpc) ||
        zoe_comm_create_mpi(zoe_grid_dp_comm(grid), &dpc) ||
        zoe_comm_create_mpi(zoe_grid_world_comm(grid), &wc)) {
        fprintf(stderr, "zoe-selftest: %s\n", zoe_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    check_group(tpc, s, "tp");
    check_group(dpc, s, "dp");
    check_group(wc, s, "world");
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(
            "collectives over tp, dp and world groups (all-reduce sum/max fp32/bf16, all-gather, "
            "reduce-scatter, broadcast, barrier): %s\n",
            total == 0 ? "all correct" : "FAILURES");
    zoe_comm_destroy(tpc), zoe_comm_destroy(dpc), zoe_comm_destroy(wc);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    zoe_grid_destroy(grid);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
