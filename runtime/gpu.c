/* Whether this build runs on a GPU, which GPU each rank of a node takes, and the two decided
 * for a whole job.
 *
 * Explained in docs/gpus.md, "Does this build run on the GPU?" and "Which GPU does a rank take?".
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "zoe/device.h"
#include "zoe/gpu.h"

/* CMake's CUDA architectures, ';' made ',' (runtime/CMakeLists.txt). */
#ifndef ZOE_CUDA_BUILT_ARCHS
#define ZOE_CUDA_BUILT_ARCHS ""
#endif

const char *zoe_gpu_built_archs(void) {
    return ZOE_CUDA_BUILT_ARCHS;
}

/* One entry of an architecture list: "90", "90-real", "90-virtual", "90a-real". */
typedef struct arch_entry {
    int capability;
    int sass, ptx;   /* machine code, PTX */
    int exact_only;  /* 'a' code: features of that capability alone */
    int family_only; /* 'f' code: of its major's later minors */
} arch_entry;

/* 0 when the text is not a capability (CMake's "all", "all-major", "native"). */
static int parse_entry(const char *t, size_t len, arch_entry *e) {
    size_t i = 0;
    int cap = 0;
    while (i < len && isdigit((unsigned char)t[i]) && cap < 10000) cap = 10 * cap + (t[i++] - '0');
    if (i == 0) return 0;
    *e = (arch_entry){.capability = cap, .sass = 1, .ptx = 1};
    if (i < len && t[i] == 'a') e->exact_only = 1, i++;
    if (i < len && t[i] == 'f') e->family_only = 1, i++;
    if (len - i == 5 && strncmp(t + i, "-real", 5) == 0)
        e->ptx = 0;
    else if (len - i == 8 && strncmp(t + i, "-virtual", 8) == 0)
        e->sass = 0;
    else if (i != len)
        return 0;
    return 1;
}

static int entry_runs(const arch_entry *e, int cap) {
    const int same_major = e->capability / 10 == cap / 10 && e->capability <= cap;
    if (e->exact_only) return e->capability == cap;
    if (e->family_only) return same_major;
    /* machine code runs on its major's later minors; PTX is compiled for any later GPU */
    return (e->sass && same_major) || (e->ptx && e->capability <= cap);
}

int zoe_gpu_code_check(int capability, const char *built, char *why, size_t n) {
    char sass[256] = "", ptx[256] = "";
    int entries = 0;
    for (const char *t = built ? built : ""; *t;) {
        size_t len = strcspn(t, ",; ");
        arch_entry e;
        if (len > 0) {
            if (!parse_entry(t, len, &e)) return 1; /* a list nvcc resolves: not ours to judge */
            if (entry_runs(&e, capability)) return 1;
            entries++;
            char *list = e.sass ? sass : ptx;
            size_t used = strlen(list);
            snprintf(list + used, sizeof sass - used, "%s%s_%.*s", used ? ", " : "",
                     e.sass ? "sm" : "compute", (int)strcspn(t, "-,; "), t);
            if (e.sass && e.ptx) {
                used = strlen(ptx);
                snprintf(ptx + used, sizeof ptx - used, "%scompute_%.*s", used ? ", " : "",
                         (int)strcspn(t, "-,; "), t);
            }
        }
        t += len;
        t += strspn(t, ",; ");
    }
    if (entries == 0) return 1;
    if (n)
        snprintf(why, n,
                 "this zoe has machine code for %s%s%s%s (CUDA architectures %s), none of which "
                 "runs on sm_%d: rebuild with -DZOE_CUDA_ARCHS=%d (or a list, \"%d;90\") %s%d%s",
                 sass[0] ? sass : "no GPU", ptx[0] ? " and PTX for " : "", ptx,
                 ptx[0] ? "" : " (no PTX)", built, capability, capability, capability,
                 capability < 75 ? "using a CUDA 12 toolkit (CUDA 13 dropped sm_"
                                 : "using a CUDA toolkit whose nvcc --list-gpu-arch names compute_",
                 capability, capability < 75 ? ")" : "");
    return 0;
}

zoe_status zoe_gpu_check_build(const zoe_gpu_info *gpu) {
    char why[768];
    if (zoe_gpu_code_check(gpu->capability, zoe_gpu_built_archs(), why, sizeof why)) return ZOE_OK;
    return zoe_fail(ZOE_ERR_UNSUPPORTED, "GPU %d (%s, PCI %s) is sm_%d: %s", gpu->ordinal,
                    gpu->name, gpu->bus_id, gpu->capability, why);
}

/* ---- which GPU each rank takes ---- */

static int same_devices(const zoe_gpu_rank_view *a, const zoe_gpu_rank_view *b) {
    if (a->visible != b->visible) return 0;
    for (int i = 0; i < a->visible; i++)
        if (strcmp(a->bus_ids[i], b->bus_ids[i]) != 0) return 0;
    return 1;
}

/* The ordinal local rank q takes: its place among the ranks that see what it sees. */
static int ordinal_of(const zoe_gpu_rank_view *views, int q) {
    int place = 0;
    for (int p = 0; p < q; p++) place += same_devices(&views[p], &views[q]);
    return place % views[q].visible;
}

int zoe_gpu_count_distinct(const zoe_gpu_rank_view *views, int local_size) {
    int count = 0;
    for (int q = 0; q < local_size; q++)
        for (int i = 0; i < views[q].visible; i++) {
            int seen = 0;
            for (int p = 0; p <= q && !seen; p++)
                for (int j = 0; j < (p == q ? i : views[p].visible) && !seen; j++)
                    seen = strcmp(views[p].bus_ids[j], views[q].bus_ids[i]) == 0;
            count += !seen;
        }
    return count;
}

zoe_status zoe_gpu_assign(const zoe_gpu_rank_view *views, int local_size, int local_rank,
                          const char *node, int *ordinal) {
    if (!views || !ordinal || local_size <= 0 || local_rank < 0 || local_rank >= local_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPU assignment: local rank %d of %d", local_rank,
                        local_size);
    *ordinal = -1;
    node = node ? node : "this node";
    for (int q = 0; q < local_size; q++)
        if (views[q].visible <= 0)
            return zoe_fail(ZOE_ERR_UNSUPPORTED,
                            "--backend=cuda: rank %d on %s sees no GPU (no driver, no device, or "
                            "CUDA_VISIBLE_DEVICES / the launcher's GPU binding hides them all)",
                            views[q].rank, node);
    /* Compared by bus id: ordinals are per process, and with per-rank CUDA_VISIBLE_DEVICES
     * every rank's GPU is its device 0. */
    for (int q = 1; q < local_size; q++) {
        const char *mine = views[q].bus_ids[ordinal_of(views, q)];
        for (int p = 0; p < q; p++) {
            if (strcmp(views[p].bus_ids[ordinal_of(views, p)], mine) != 0) continue;
            int gpus = zoe_gpu_count_distinct(views, local_size);
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--backend=cuda: ranks %d and %d on %s would share the GPU at PCI %s "
                            "(they see %d and %d GPU(s), %d on the node in all); each rank "
                            "needs its own GPU: launch at most %d rank(s) on %s, or give each "
                            "rank its own (CUDA_VISIBLE_DEVICES per rank, srun --gpus-per-task=1)",
                            views[p].rank, views[q].rank, node, mine, views[p].visible,
                            views[q].visible, gpus, gpus, node);
        }
    }
    *ordinal = ordinal_of(views, local_rank);
    return ZOE_OK;
}

/* ---- the job's decision ---- */

/* Every rank returns the status of the lowest rank whose st failed, with its message. */
static zoe_status agree(MPI_Comm world, int rank, zoe_status st) {
    int mine = st != ZOE_OK ? rank : INT_MAX, first = INT_MAX;
    int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Allreduce of the GPU choice");
    if (first == INT_MAX) return ZOE_OK;
    struct {
        int status;
        char message[1024];
    } verdict = {.status = (int)st};
    if (rank == first) snprintf(verdict.message, sizeof verdict.message, "%s", zoe_last_error());
    rc = MPI_Bcast(&verdict, (int)sizeof verdict, MPI_BYTE, first, world);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "MPI_Bcast of the GPU choice");
    return zoe_fail((zoe_status)verdict.status, "%s", verdict.message);
}

/* This rank's GPU on its node; every rank of the node takes part, whatever st says. */
static zoe_status assign_on_node(MPI_Comm world, zoe_gpu_rank_view *mine, int *ordinal,
                                 int *node_gpus, int *node_index) {
    zoe_status st = ZOE_OK;
    int visible = zoe_cuda_device_count();
    mine->visible = visible < ZOE_GPU_MAX_VISIBLE ? visible : ZOE_GPU_MAX_VISIBLE;
    for (int i = 0; i < mine->visible && st == ZOE_OK; i++) {
        zoe_gpu_info info;
        st = zoe_gpu_info_of(i, &info);
        if (st == ZOE_OK) snprintf(mine->bus_ids[i], ZOE_GPU_BUS_ID_SIZE, "%s", info.bus_id);
    }
    if (st != ZOE_OK) mine->visible = 0;
    MPI_Comm node = MPI_COMM_NULL;
    int local_rank = 0, local_size = 0, len = 0;
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int rc = MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, mine->rank, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(node, &local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &local_size);
    if (rc == MPI_SUCCESS) rc = MPI_Get_processor_name(name, &len);
    zoe_gpu_rank_view *views = NULL;
    if (rc == MPI_SUCCESS) {
        views = calloc((size_t)local_size, sizeof *views);
        if (!views) {
            if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "the GPU views of %d ranks", local_size);
        }
        rc = MPI_Allgather(mine, (int)sizeof *mine, MPI_BYTE, views, (int)sizeof *mine, MPI_BYTE,
                           node);
    }
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) {
        free(views);
        return zoe_fail_mpi(rc, "gathering the GPUs each rank of the node sees");
    }
    /* A rank that could not list its devices keeps its own message; the others see it as a
     * rank without GPUs. */
    if (st == ZOE_OK) st = zoe_gpu_assign(views, local_size, local_rank, name, ordinal);
    *node_gpus = zoe_gpu_count_distinct(views, local_size);
    /* The node's GPUs in PCI order are hwloc's numbering (runtime/topology.c): this rank's
     * GPU's place among them is the bus ids before its own. */
    *node_index = -1;
    if (st == ZOE_OK) {
        const char *own = mine->bus_ids[*ordinal];
        zoe_gpu_rank_view *before = calloc(1, sizeof *before);
        for (int q = 0; before && q < local_size; q++)
            for (int i = 0; i < views[q].visible; i++)
                if (strcmp(views[q].bus_ids[i], own) < 0 && before->visible < ZOE_GPU_MAX_VISIBLE)
                    snprintf(before->bus_ids[before->visible++], ZOE_GPU_BUS_ID_SIZE, "%s",
                             views[q].bus_ids[i]);
        if (before) *node_index = zoe_gpu_count_distinct(before, 1);
        free(before);
    }
    free(views);
    return st;
}

zoe_status zoe_gpu_choose(MPI_Comm world, zoe_gpu_choice *out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpu_choose: out is NULL");
    *out = (zoe_gpu_choice){.ordinal = -1};
#ifndef ZOE_HAVE_CUDA
    (void)world; /* every rank runs this binary: all stop alike without a word */
    return zoe_fail(ZOE_ERR_UNSUPPORTED, "--backend=cuda: this zoe was built without CUDA "
                                         "(ZOE_CUDA=OFF, or no CUDA toolkit at configure time)");
#endif
    int rank = 0;
    int rc = MPI_Comm_rank(world, &rank);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "zoe_gpu_choose: MPI_Comm_rank");
    zoe_gpu_rank_view *mine = calloc(1, sizeof *mine);
    if (!mine) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "a rank's GPU view");
    mine->rank = rank;
    int node_gpus = 0;
    zoe_status st = assign_on_node(world, mine, &out->ordinal, &node_gpus, &out->node_index);
    free(mine);
    if (st == ZOE_OK) st = zoe_gpu_info_of(out->ordinal, &out->gpu);
    if (st == ZOE_OK && zoe_gpu_check_build(&out->gpu) != ZOE_OK)
        st = zoe_fail(ZOE_ERR_UNSUPPORTED, "rank %d: %s", rank, zoe_last_error());
    ZOE_TRY(agree(world, rank, st));
    struct {
        int capability, rank;
    } weakest = {out->gpu.capability, rank};
    rc = MPI_Allreduce(MPI_IN_PLACE, &node_gpus, 1, MPI_INT, MPI_MAX, world);
    if (rc == MPI_SUCCESS)
        rc = MPI_Allreduce(MPI_IN_PLACE, &weakest, 1, MPI_2INT, MPI_MINLOC, world);
    out->weakest = out->gpu;
    if (rc == MPI_SUCCESS)
        rc = MPI_Bcast(&out->weakest, (int)sizeof out->weakest, MPI_BYTE, weakest.rank, world);
    if (rc != MPI_SUCCESS) return zoe_fail_mpi(rc, "sharing what the GPUs of the job are");
    out->node_gpus = node_gpus;
    return ZOE_OK;
}
