/* Placement of each rank's host threads with hwloc: the cores (and NUMA node) nearest its GPU
 * when it has one, otherwise an even share of the node's cores among the ranks on the node.
 *
 * Explained in docs/gpus.md, "Which GPU does a rank take?". */
#ifndef ZOE_TOPOLOGY_H
#define ZOE_TOPOLOGY_H

#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zoe_topology zoe_topology;

/* The machine this process runs on. */
zoe_status zoe_topology_load_host(zoe_topology **out);
/* A synthetic machine in hwloc's synthetic syntax ("package:2 core:24 pu:1"), for tests and
 * planning. gpu_numa[i] names the NUMA node (or, without NUMA nodes, the package) that GPU i
 * is attached to; num_gpus may be 0. */
zoe_status zoe_topology_load_synthetic(const char *description, const int *gpu_numa, int num_gpus,
                                       zoe_topology **out);
/* An hwloc XML export (hwloc-gather-topology / lstopo foo.xml); GPUs found in it as OS devices. */
zoe_status zoe_topology_load_xml(const char *path, zoe_topology **out);
void zoe_topology_destroy(zoe_topology *topo);

/* Pure getters: 0 for a NULL topology. */
int zoe_topology_num_cores(const zoe_topology *topo);
int zoe_topology_num_numa(const zoe_topology *topo);
int zoe_topology_num_gpus(const zoe_topology *topo);

/* Where one rank's host threads go. cores lists logical core indexes (hwloc's order). */
#define ZOE_MAX_PLACED_CORES 1024
typedef struct zoe_placement {
    int numa_node; /* -1 when the share spans NUMA nodes */
    int num_cores;
    int cores[ZOE_MAX_PLACED_CORES];
} zoe_placement;

/* The share of local rank local_rank among local_size ranks of the node; gpu is the rank's GPU
 * index on the node, or -1 for none. Ranks sharing a NUMA node split its cores evenly; with
 * more ranks than cores, ranks share cores round-robin. */
zoe_status zoe_topology_place(const zoe_topology *topo, int local_rank, int local_size, int gpu,
                              zoe_placement *out);
/* Binds the calling process to the placement's cores and sizes the OpenMP pool to it (unless
 * OMP_NUM_THREADS is set: then the user's count stands).
 * Reports the binding at debug level. */
zoe_status zoe_topology_bind(const zoe_topology *topo, const zoe_placement *placement);
/* "cores 0-23 (numa 0)" into buf. */
void zoe_placement_format(const zoe_placement *placement, char *buf, int len);

#ifdef __cplusplus
}
#endif
#endif
