/* The host map: which ranks run on which host, and which TP groups, on rank 0's log at start. A
 * node is what MPI calls one (MPI_COMM_TYPE_SHARED), named by MPI_Get_processor_name.
 *
 * Explained in docs/multi-node.md, "Which rank runs where". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "runtime/hosts.h"
#include "zoe/log.h"

enum { NAME_BYTES = 64, HOSTS_LISTED = 16 };

/* Appends "a-b" or "a" (after ", " when not first) to out; a run of consecutive numbers is one
 * range. n numbers, ascending. */
static void append_ranges(const int *v, int n, char *out, size_t cap) {
    size_t len = strlen(out);
    for (int i = 0; i < n && len < cap; i++) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1) j++;
        len +=
            (size_t)(j > i ? snprintf(out + len, cap - len, "%s%d-%d", len ? "," : "", v[i], v[j])
                           : snprintf(out + len, cap - len, "%s%d", len ? "," : "", v[i]));
        i = j;
    }
}

/* Rank 0: one line per host (the first HOSTS_LISTED), in the order of their first ranks. node
 * holds each rank's host (its smallest world rank), names each rank's host name; buf has room
 * for 2 x world numbers. */
static void log_map(const int *node, const char *names, int world, int tp, int hosts, int *buf) {
    zoe_log(ZOE_LOG_INFO,
            "host map: %d ranks on %d host%s, TP %d x DP %d (rank = tp_rank + %d x dp_rank)", world,
            hosts, hosts == 1 ? "" : "s", tp, world / tp, tp);
    int listed = 0;
    for (int h = 0; h < world && listed < HOSTS_LISTED; h++) {
        if (node[h] != h) continue; /* h is the first rank of its host */
        int n = 0, groups = 0, spanning = 0;
        for (int r = 0; r < world; r++)
            if (node[r] == h) buf[n++] = r;
        char ranks[384] = "", whole[256] = "", split[256] = "";
        append_ranges(buf, n, ranks, sizeof ranks);
        /* TP groups by dp index: wholly on this host, or split between it and others */
        const int dp = world / tp;
        int *split_groups = buf + dp;
        for (int d = 0; d < dp; d++) {
            int here = 0;
            for (int t = 0; t < tp; t++) here += node[d * tp + t] == h;
            if (here == tp) buf[groups++] = d;
            if (here > 0 && here < tp) split_groups[spanning++] = d;
        }
        append_ranges(buf, groups, whole, sizeof whole);
        append_ranges(split_groups, spanning, split, sizeof split);
        zoe_log(ZOE_LOG_INFO, "  %s: %d rank%s %s; TP groups (dp) %s%s%s%s",
                names + (size_t)h * NAME_BYTES, n, n == 1 ? "" : "s", ranks,
                groups ? whole : "none", spanning ? "; part of " : "", spanning ? split : "",
                spanning ? " (spanning hosts)" : "");
        listed++;
    }
    if (hosts > listed) zoe_log(ZOE_LOG_INFO, "  ... and %d more hosts", hosts - listed);
}

zoe_status zoe_hosts_log_map(const zoe_grid *grid, int *hosts) {
    MPI_Comm world = zoe_grid_world_comm(grid), node = MPI_COMM_NULL;
    int rank = zoe_grid_rank(grid), size = zoe_grid_world_size(grid);
    int rc = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "host map: MPI_Comm_split_type into nodes");
    int first = rank, local_rank = 0;
    rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    int leads = local_rank == 0;
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&leads, hosts, 1, MPI_INT, MPI_SUM, world);
    char name[MPI_MAX_PROCESSOR_NAME] = "", mine[NAME_BYTES] = "";
    int len = 0;
    if (rc == MPI_SUCCESS) rc = MPI_Get_processor_name(name, &len);
    snprintf(mine, sizeof mine, "%s", name);
    /* rank 0: every rank's host and host name; and room to list one host's ranks and groups */
    int *node_of = rank == 0 ? malloc((size_t)size * 3 * sizeof(int)) : NULL;
    char *names = rank == 0 ? malloc((size_t)size * NAME_BYTES) : NULL;
    int ok = rank != 0 || (node_of && names);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, world);
    if (rc == MPI_SUCCESS && ok) rc = MPI_Gather(&first, 1, MPI_INT, node_of, 1, MPI_INT, 0, world);
    if (rc == MPI_SUCCESS && ok)
        rc = MPI_Gather(mine, NAME_BYTES, MPI_CHAR, names, NAME_BYTES, MPI_CHAR, 0, world);
    if (rc == MPI_SUCCESS && ok && rank == 0 && zoe_log_get_level() <= ZOE_LOG_INFO)
        log_map(node_of, names, size, zoe_grid_tp_size(grid), *hosts, node_of + size);
    free(node_of);
    free(names);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "host map: gathering the ranks' hosts");
    if (!ok) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "host map of %d ranks on rank 0", size);
    return ZOE_OK;
}
