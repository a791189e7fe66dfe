/* The optimizer's side of a plan: zoe_optimizer_footprint_of, the code that sizes the
 * optimizer's allocations, asked about the tensors and configuration the trainer would give
 * zoe_optimizer_create.
 *
 * Explained in docs/plan.md, "Memory: from the code that allocates". */
#include <limits.h>
#include <stdlib.h>
#include "engine/config/sizing.h"
#include "engine/plan/plan_impl.h"
#include "runtime/error.h"
#include "runtime/mpi_chunk.h"

zoe_status zoe_plan_optimizer_of(const zoe_train_config *c, const zoe_gpt *g, int dp,
                                 zoe_plan_optimizer *out) {
    int n = zoe_gpt_num_tensors(g);
    zoe_param_tensor *tensors = calloc((size_t)n, sizeof *tensors);
    size_t *numel = calloc((size_t)n, sizeof *numel);
    if (!tensors || !numel) {
        free(tensors), free(numel);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "plan: tensor table of %d", n);
    }
    zoe_train_param_tensors(g, 0, tensors);
    size_t largest = 0; /* the largest tensor's TP shard */
    for (int t = 0; t < n; t++) {
        numel[t] = tensors[t].numel;
        if (numel[t] > largest) largest = numel[t];
    }
    free(tensors);
    zoe_optimizer_config oc;
    zoe_train_optimizer_config(c, g, &oc);
    zoe_optimizer_footprint f;
    zoe_optimizer_footprint_args args = {.backend = c->backend,
                                         .compute_dtype = c->dtype,
                                         .numel = numel,
                                         .num_tensors = n,
                                         .dp_size = dp,
                                         .config = &oc};
    zoe_status st = zoe_optimizer_footprint_of(&args, &f);
    /* one ring slot: dp x the largest bucket partition, as the same sizing code says */
    zoe_optimizer_config one_slot = oc;
    one_slot.bucket_ring = 1;
    one_slot.bucket_ring_window = 0;
    args.config = &one_slot;
    zoe_optimizer_footprint slot;
    if (st == ZOE_OK) st = zoe_optimizer_footprint_of(&args, &slot);
    /* the weights on drives: what they would take in pinned host memory */
    zoe_optimizer_config weights_on_host = oc;
    weights_on_host.params_on_drive = 0;
    args.config = &weights_on_host;
    zoe_optimizer_footprint on_host = f;
    if (st == ZOE_OK && oc.params_on_drive) st = zoe_optimizer_footprint_of(&args, &on_host);
    free(numel);
    ZOE_TRY(st);
    size_t esz = zoe_dtype_size(c->dtype);
    int cpu = c->backend == ZOE_BACKEND_CPU;
    out->device_params = (double)(f.params_numel * esz);
    out->device_ring = (double)f.device_ring_bytes;
    out->device_other = (double)f.device_bytes - out->device_params - out->device_ring;
    out->host = (double)f.host_bytes;
    out->pinned = (double)f.pinned_bytes;
    out->params_host = (double)on_host.params_host_bytes;
    out->state_bytes = (double)f.state_bytes;
    out->pinned_master = (double)on_host.pinned_master_bytes;
    out->grads_bytes = (double)f.grads_bytes;
    out->bucket_part_numel = f.bucket_part_numel;
    out->drive_bytes = (double)f.drive_bytes;
    out->drive_ring = (double)f.drive_ring_bytes;
    /* The CPU backend's reduce-scatter of a bucket runs in place, so runtime/comm.c stages it
     * in fp32: the whole bucket and the rank's partition of it. Open MPI reduces to DP rank 0
     * and scatters, and that rank holds an fp32 temporary of the whole bucket besides
     * (measured: the DP root of a 2-rank gpt2-350m run peaks that much above the other rank). */
    double bucket = (double)slot.device_ring_bytes / (double)esz, part = bucket / dp;
    out->comm_staging = cpu && dp > 1 ? (bucket + part) * sizeof(float) : 0.0;
    out->comm_root = cpu && dp > 1 ? bucket * sizeof(float) : 0.0;
    /* A collective of more than INT_MAX elements in all is cut into MPI calls packed through a
     * buffer of at most ZOE_MPI_PACK_BYTES (runtime/comm.c): the DP group's for a bucket that
     * large (one tensor of that many elements is a bucket of its own), the TP group's for such a
     * tensor gathered whole (checkpoints, export). */
    int dp_packs = dp > 1 && part > (double)(INT_MAX / dp);
    int tp_packs = c->tp > 1 && (double)largest * c->tp > (double)INT_MAX;
    out->comm_pack = cpu ? (dp_packs + tp_packs) * (double)ZOE_MPI_PACK_BYTES : 0.0;
    out->part_numel = f.partition_numel;
    /* On CPU the whole partition is the host's; on a GPU the device keeps partial_ratio. */
    out->host_numel =
        cpu ? f.partition_numel : (size_t)((double)f.partition_numel * (1.0 - oc.partial_ratio));
    /* The host Adam reads and writes master, m and v in their dtypes, reads the fp32 gradient
     * and writes the compute-dtype weights (offload/memory.c says which arrays exist). */
    out->adam_bytes_per_param = (double)f.step_bytes_per_element;
    /* and computes: a 16-bit compute dtype always has a weight copy apart from the master */
    out->adam_ns_per_param = zoe_plan_adam_ns_per_param(oc.main_params_dtype, oc.exp_avg_dtype,
                                                        oc.exp_avg_sq_dtype, esz == 2);
    return ZOE_OK;
}
