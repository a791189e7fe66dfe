/* The agreement of runtime/agree.h: an all-reduce of the lowest failing rank, then that rank's
 * status and message broadcast (only when one failed).
 *
 * Explained in docs/architecture.md, "Where errors go". */
#include "runtime/agree.h"
#include <limits.h>
#include <stdio.h>
#include "runtime/error.h"

zoe_status zoe_agree(MPI_Comm comm, zoe_status st) {
    int rank, first = INT_MAX;
    MPI_Comm_rank(comm, &rank);
    int mine = st != ZOE_OK ? rank : INT_MAX;
    int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of a failure");
    if (first == INT_MAX) return ZOE_OK;
    char msg[1024] = "";
    int code = (int)st;
    if (rank == first) snprintf(msg, sizeof msg, "%s", zoe_last_error());
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, comm);
    return rank == first ? st : zoe_fail((zoe_status)code, "%s", msg);
}
