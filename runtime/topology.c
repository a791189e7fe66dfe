/* Thread placement with hwloc. The placement rule is pure arithmetic over "domains" (sets of
 * cores: one per NUMA node, or the whole node), so it is tested on synthetic machines.
 *
 * Explained in docs/gpus.md, "Which GPU does a rank take?". */
#include <hwloc.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "zoe/log.h"
#include "zoe/topology.h"

#define MAX_GPUS 64

struct zoe_topology {
    hwloc_topology_t hw;
    int num_cores, num_numa, num_gpus;
    int *core_numa;         /* NUMA domain of each core (logical order) */
    int gpu_numa[MAX_GPUS]; /* NUMA domain each GPU is attached to */
};

void zoe_topology_destroy(zoe_topology *t) {
    if (!t) return;
    if (t->hw) hwloc_topology_destroy(t->hw);
    free(t->core_numa);
    free(t);
}

/* The domain a CPU-side object belongs to: its NUMA node's logical index, else its package's
 * (machines whose description has no NUMA level still group cores by package), else 0. */
static int domain_of(zoe_topology *t, hwloc_obj_t obj) {
    if (t->num_numa > 1) {
        hwloc_obj_t numa = NULL;
        while ((numa = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, numa)))
            if (hwloc_bitmap_intersects(numa->cpuset, obj->cpuset)) return (int)numa->logical_index;
    }
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t->hw, HWLOC_OBJ_PACKAGE, obj);
    if (pkg && t->num_numa <= 1) return (int)pkg->logical_index;
    return 0;
}

static zoe_status finish_load(zoe_topology *t) {
    t->num_cores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
    if (t->num_cores <= 0) t->num_cores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
    int nnuma = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    int npkg = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
    t->num_numa = nnuma > 1 ? nnuma : (npkg > 1 ? npkg : 1);
    if (t->num_cores <= 0) return zoe_fail(ZOE_ERR_INTERNAL, "topology has no cores");
    t->core_numa = calloc((size_t)t->num_cores, sizeof(int));
    if (!t->core_numa) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "topology core table");
    hwloc_obj_type_t ct =
        hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    if (nnuma > 1) t->num_numa = nnuma;
    for (int i = 0; i < t->num_cores; i++)
        t->core_numa[i] = domain_of(t, hwloc_get_obj_by_type(t->hw, ct, (unsigned)i));
    return ZOE_OK;
}

/* GPUs: NVIDIA PCI display/3D controllers, in PCI order, attached to their CPU-side parent. */
static void find_gpus(zoe_topology *t) {
    hwloc_obj_t pci = NULL;
    while ((pci = hwloc_get_next_pcidev(t->hw, pci)) && t->num_gpus < MAX_GPUS) {
        unsigned cls = pci->attr->pcidev.class_id;
        if (pci->attr->pcidev.vendor_id != 0x10de || (cls != 0x0300 && cls != 0x0302)) continue;
        hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(t->hw, pci);
        t->gpu_numa[t->num_gpus++] = parent ? domain_of(t, parent) : 0;
    }
}

static zoe_status topology_new(zoe_topology **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "topology out pointer is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "topology struct");
    if (hwloc_topology_init(&(*out)->hw) != 0) {
        free(*out);
        *out = NULL;
        return zoe_fail(ZOE_ERR_INTERNAL, "hwloc_topology_init failed");
    }
    return ZOE_OK;
}

static zoe_status load_or_fail(zoe_topology **out, const char *what) {
    if (hwloc_topology_load((*out)->hw) != 0) {
        zoe_topology_destroy(*out);
        *out = NULL;
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "hwloc could not load topology %s", what);
    }
    zoe_status st = finish_load(*out);
    if (st != ZOE_OK) {
        zoe_topology_destroy(*out);
        *out = NULL;
    }
    return st;
}

zoe_status zoe_topology_load_host(zoe_topology **out) {
    ZOE_TRY(topology_new(out));
    hwloc_topology_set_io_types_filter((*out)->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    ZOE_TRY(load_or_fail(out, "of this host"));
    find_gpus(*out);
    return ZOE_OK;
}

zoe_status zoe_topology_load_xml(const char *path, zoe_topology **out) {
    ZOE_TRY(topology_new(out));
    hwloc_topology_set_io_types_filter((*out)->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (!path || hwloc_topology_set_xml((*out)->hw, path) != 0) {
        zoe_topology_destroy(*out);
        *out = NULL;
        return zoe_fail(ZOE_ERR_IO, "cannot read hwloc XML topology '%s'", path ? path : "(null)");
    }
    ZOE_TRY(load_or_fail(out, path));
    find_gpus(*out);
    return ZOE_OK;
}

zoe_status zoe_topology_load_synthetic(const char *description, const int *gpu_numa, int num_gpus,
                                       zoe_topology **out) {
    if (num_gpus < 0 || num_gpus > MAX_GPUS || (num_gpus > 0 && !gpu_numa))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "num_gpus=%d must be in [0, %d] with a table",
                        num_gpus, MAX_GPUS);
    ZOE_TRY(topology_new(out));
    if (!description || hwloc_topology_set_synthetic((*out)->hw, description) != 0) {
        zoe_topology_destroy(*out);
        *out = NULL;
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "invalid synthetic topology '%s'",
                        description ? description : "(null)");
    }
    ZOE_TRY(load_or_fail(out, description));
    for (int i = 0; i < num_gpus; i++) {
        if (gpu_numa[i] < 0 || gpu_numa[i] >= (*out)->num_numa) {
            int n = (*out)->num_numa;
            zoe_topology_destroy(*out);
            *out = NULL;
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPU %d on NUMA node %d, but there are %d", i,
                            gpu_numa[i], n);
        }
        (*out)->gpu_numa[i] = gpu_numa[i];
    }
    (*out)->num_gpus = num_gpus;
    return ZOE_OK;
}

int zoe_topology_num_cores(const zoe_topology *t) {
    return t ? t->num_cores : 0;
}
int zoe_topology_num_numa(const zoe_topology *t) {
    return t ? t->num_numa : 0;
}
int zoe_topology_num_gpus(const zoe_topology *t) {
    return t ? t->num_gpus : 0;
}

zoe_status zoe_topology_place(const zoe_topology *t, int local_rank, int local_size, int gpu,
                              zoe_placement *out) {
    if (!t || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "place: NULL argument");
    if (local_size <= 0 || local_rank < 0 || local_rank >= local_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "local rank %d of %d is not valid", local_rank,
                        local_size);
    if (gpu >= t->num_gpus)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPU %d but the node has %d", gpu, t->num_gpus);
    memset(out, 0, sizeof *out);
    /* The domain: the GPU's NUMA node, or every core. Sharers: the local ranks that map to the
     * same domain, assuming local rank j drives GPU j mod num_gpus (one rank per GPU). */
    int domain = gpu >= 0 ? t->gpu_numa[gpu] : -1;
    int position = 0, sharers = 0;
    for (int j = 0; j < local_size; j++) {
        int dj = gpu >= 0 ? t->gpu_numa[j % t->num_gpus] : -1;
        if (dj != domain) continue;
        if (j < local_rank) position++;
        sharers++;
    }
    int ncores = 0;
    for (int c = 0; c < t->num_cores; c++)
        if (domain < 0 || t->core_numa[c] == domain) ncores++;
    int first, count;
    if (sharers <= ncores) {
        /* Even split; the first (ncores % sharers) ranks take one core more. */
        int base = ncores / sharers, extra = ncores % sharers;
        first = position * base + (position < extra ? position : extra);
        count = base + (position < extra ? 1 : 0);
    } else {
        first = position % ncores;
        count = 1;
    }
    int k = 0;
    for (int c = 0;
         c < t->num_cores && out->num_cores < count && out->num_cores < ZOE_MAX_PLACED_CORES; c++) {
        if (domain >= 0 && t->core_numa[c] != domain) continue;
        if (k++ >= first) out->cores[out->num_cores++] = c;
    }
    out->numa_node = domain >= 0 ? domain : -1;
    if (domain < 0 && out->num_cores > 0) {
        int d = t->core_numa[out->cores[0]];
        out->numa_node = t->core_numa[out->cores[out->num_cores - 1]] == d ? d : -1;
    }
    return ZOE_OK;
}

void zoe_placement_format(const zoe_placement *p, char *buf, int len) {
    if (p->num_cores == 0) {
        snprintf(buf, (size_t)len, "no cores");
        return;
    }
    snprintf(buf, (size_t)len, "cores %d-%d (%d, numa %d)", p->cores[0], p->cores[p->num_cores - 1],
             p->num_cores, p->numa_node);
}

zoe_status zoe_topology_bind(const zoe_topology *t, const zoe_placement *p) {
    if (!t || !p || p->num_cores <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "bind: empty placement");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "hwloc bitmap");
    hwloc_obj_type_t ct =
        hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (int i = 0; i < p->num_cores; i++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(t->hw, ct, (unsigned)p->cores[i]);
        if (core) hwloc_bitmap_or(set, set, core->cpuset);
    }
    int rc = hwloc_set_cpubind(t->hw, set, HWLOC_CPUBIND_PROCESS);
    hwloc_bitmap_free(set);
    char desc[96];
    zoe_placement_format(p, desc, sizeof desc);
    if (rc != 0) {
        zoe_log(ZOE_LOG_WARN, "could not bind to %s; threads left unbound", desc);
    } else {
        zoe_log(ZOE_LOG_DEBUG, "bound to %s, %d OpenMP threads", desc, p->num_cores);
    }
    /* The pool matches the placement, unless the user sized it (OMP_NUM_THREADS). */
    if (!getenv("OMP_NUM_THREADS")) omp_set_num_threads(p->num_cores);
    return ZOE_OK;
}
