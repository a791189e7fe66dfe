/* Internal: the hosts a job runs on, and what its launcher does when the network splits them.
 *
 * Explained in docs/multi-node.md, "Which rank runs where" and "A network that splits". */
#ifndef ZOE_RUNTIME_HOSTS_H
#define ZOE_RUNTIME_HOSTS_H

#include "zoe/grid.h"

/* Collective over the grid's world. Rank 0 logs the host map (info): each host's name, its
 * ranks and the TP groups on it, a group that spans hosts marked. *hosts: how many hosts, on
 * every rank. */
zoe_status zoe_hosts_log_map(const zoe_grid *grid, int *hosts);

/* Local. Under Open MPI's mpirun: the seconds its keepalive takes to find a host that no longer
 * answers (oob_tcp_keepalive_time + _probes x _intvl, as MPI_T reads them in this process);
 * 0 where mpirun did not start the job (srun, a singleton). */
double zoe_launcher_split_seconds(void);

/* The most seconds of zoe_launcher_split_seconds that keep a split job's end within
 * --stall-timeout + 15 s (the watchdog waits 2 s more; launch/openmpi-mca-params.conf gives 11). */
#define ZOE_LAUNCHER_SPLIT_MAX_S 12.0

#endif
