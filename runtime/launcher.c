/* What the launcher does when the network between hosts splits. Open MPI's mpirun keeps a TCP
 * connection to a daemon on each host and learns of a host that no longer answers only from TCP
 * keepalive, whose default probes (oob_tcp_keepalive_time 300 s, then 9 probes 20 s apart) take
 * 8 minutes; until then a split job hangs. The ranks see the same MCA parameters as mpirun (its
 * command line, environment and parameter files reach them), so they can tell.
 *
 * Explained in docs/multi-node.md, "A network that splits". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "runtime/hosts.h"

/* An integer MCA parameter through MPI_T (with_t: initialised), else from the environment, else
 * fallback (Open MPI's default). */
static int mca_int(int with_t, const char *name, int fallback) {
    int index = 0, count = 0, value = fallback, verbosity, bind, scope;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    if (with_t && MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
        MPI_T_cvar_get_info(index, NULL, NULL, &verbosity, &type, &enumtype, NULL, NULL, &bind,
                            &scope) == MPI_SUCCESS &&
        type == MPI_INT && MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) == MPI_SUCCESS) {
        int read = count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS;
        MPI_T_cvar_handle_free(&handle);
        if (read) return value;
    }
    char env[128];
    snprintf(env, sizeof env, "OMPI_MCA_%s", name);
    const char *s = getenv(env);
    return s && *s ? atoi(s) : fallback;
}

double zoe_launcher_split_seconds(void) {
    /* Processes that an mpirun started (through its daemons) know its address. */
    if (!getenv("OMPI_MCA_orte_hnp_uri")) return 0;
    int provided = 0;
    int with_t = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
    int idle = mca_int(with_t, "oob_tcp_keepalive_time", 300),
        gap = mca_int(with_t, "oob_tcp_keepalive_intvl", 20),
        probes = mca_int(with_t, "oob_tcp_keepalive_probes", 9);
    if (with_t) MPI_T_finalize();
    return (double)idle + (double)gap * probes;
}
