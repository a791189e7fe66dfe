/* MPI failures come back as ZOE_ERR_MPI with the MPI library's own words: zoe's communicators
 * (the grid's and each zoe_comm's) return errors instead of aborting the job, and zoe_fail_mpi
 * puts MPI_Error_string of the code into the message. */
#include <string.h>
#include "runtime/comm_impl.h"
#include "runtime/error.h"
#include "testing.h"

static void check_returns_errors(MPI_Comm comm, const char *what) {
    MPI_Errhandler h;
    MPI_Comm_get_errhandler(comm, &h);
    CHECK(h == MPI_ERRORS_RETURN, "%s: errors would abort instead of returning", what);
    if (h != MPI_ERRORS_RETURN) return;
    int size, x = 0;
    MPI_Comm_size(comm, &size);
    int rc = MPI_Bcast(&x, 1, MPI_INT, size + 3, comm); /* a root that does not exist */
    CHECK(rc != MPI_SUCCESS, "%s: MPI_Bcast to root %d succeeded", what, size + 3);
    char want[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(rc, want, &len);
    CHECK(zoe_fail_mpi(rc, "MPI_Bcast of x") == ZOE_ERR_MPI, "%s: status", what);
    CHECK(strncmp(zoe_last_error(), "MPI_Bcast of x failed: ", 23) == 0 &&
              strstr(zoe_last_error(), want) != NULL,
          "%s: message '%s' lacks MPI's '%s'", what, zoe_last_error(), want);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *g = NULL;
    if (!CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &g))) return test_finish("test_mpi_errors");
    check_returns_errors(zoe_grid_world_comm(g), "grid world");
    check_returns_errors(zoe_grid_tp_comm(g), "grid tp");
    check_returns_errors(zoe_grid_dp_comm(g), "grid dp");
    zoe_comm *c = NULL;
    if (CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &c))) {
        /* made from the world (whose handler aborts), it still returns errors */
        check_returns_errors(c->group, "zoe_comm of MPI_COMM_WORLD");
        zoe_comm_destroy(c);
    }
    zoe_grid_destroy(g);
    return test_finish("test_mpi_errors");
}
