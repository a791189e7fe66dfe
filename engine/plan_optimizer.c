/* The optimizer's side of a plan. PRE-MERGE STAND-IN: mirrors offload/step.c and grads.c's
 * allocations over the layout until the layout branch's zoe_optimizer_footprint replaces it. */
#include <stdlib.h>
#include "engine/plan_impl.h"
#include "engine/trainer_impl.h"
#include "offload/layout.h"
#include "runtime/error.h"

zoe_status zoe_plan_optimizer_of(const zoe_train_config *c, const zoe_gpt *g, int dp,
                                 zoe_plan_optimizer *out) {
    int n = zoe_gpt_num_tensors(g);
    zoe_param_tensor *tensors = calloc((size_t)n, sizeof *tensors);
    if (!tensors) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "plan: tensor table of %d", n);
    zoe_trainer_param_tensors(g, tensors);
    zoe_optimizer_config oc;
    zoe_trainer_optimizer_config(c, g, &oc);
    size_t esz = zoe_dtype_size(c->dtype);
    zoe_layout lay;
    zoe_status st =
        zoe_layout_build(&lay, tensors, n, oc.bucket_numel, dp, 0, 64 / esz, 1, oc.partial_ratio);
    free(tensors);
    ZOE_TRY(st);
    int cpu = c->backend == ZOE_BACKEND_CPU, bufs = oc.dpu_warmup > 0 ? 2 : 1;
    size_t pd = lay.device_numel, ph = lay.part_numel - lay.device_numel;
    int part_is_params = dp == 1 && oc.dpu_warmup == 0 && lay.part_numel == lay.flat_numel;
    out->device_params = (double)(lay.flat_numel * esz);
    out->device_ring = (double)oc.bucket_ring * dp * lay.max_part * esz;
    out->device_other = (part_is_params ? 0.0 : (double)(lay.part_numel * esz)) +
                        (double)pd * sizeof(float) * (3 + bufs);
    out->host = (double)ph * sizeof(float) * (3 + bufs);
    out->pinned = (double)oc.bucket_ring * lay.max_part * esz + (cpu || !ph ? 0.0 : ph * esz);
    out->comm_staging = dp > 1 ? (double)(dp + 1) * lay.max_part * sizeof(float) : 0.0;
    out->part_numel = lay.part_numel;
    out->host_numel = ph;
    out->adam_bytes_per_param = 24.0 + 4.0 + (double)esz;
    zoe_layout_free(&lay);
    return ZOE_OK;
}
