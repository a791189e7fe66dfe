/* What a run's configuration makes, below both the trainer that builds it and the plan that
 * sizes it (sizing.h).
 *
 * Explained in docs/architecture.md, "engine/ inside"; docs/plan.md. */
#include <stdlib.h>
#include "engine/config/sizing.h"

/* One round's staging buffer of checkpoint I/O (engine/checkpoint/mpi_io.c). */
#define DEFAULT_ROUND_BYTES ((size_t)64 << 20)

zoe_gpt_config zoe_train_gpt_config(const zoe_train_config *c) {
    return (zoe_gpt_config){.shape = c->model,
                            .micro_batch = c->micro_batch,
                            .dtype = c->dtype,
                            .seed = c->seed,
                            .recompute = c->recompute,
                            .tf32 = c->tf32};
}

void zoe_train_param_tensors(const zoe_gpt *g, int tp_rank, zoe_param_tensor *tensors) {
    const zoe_model_config *shape = zoe_gpt_shape(g);
    for (int t = 0; t < zoe_gpt_num_tensors(g); t++) {
        const zoe_tp_param *p = zoe_gpt_tensor(g, t);
        /* A position table longer than the trained context (an imported GPT-2 at a shorter
         * --seq-len) takes no weight decay: its rows past seq_len get no gradient, and decay
         * alone would still shrink them; without it Adam leaves them bit-for-bit as loaded. */
        const bool longer_positions =
            p == &zoe_gpt_embedding(g)->wpe && p->global_shape[0] > shape->seq_len;
        /* GPT practice: biases and LayerNorm weights (the 1-D tensors) take no weight decay.
         * The norm counts a tensor held by several TP ranks once: replicated ones on TP rank 0
         * (tp_replicated), a sharded block on the first of its replicas, so the others mark
         * theirs replicated too (tp_rank % replicas != 0 is never rank 0). */
        tensors[t] =
            (zoe_param_tensor){.name = p->name,
                               .numel = (size_t)p->local_numel,
                               .tp_replicated = p->replicated || tp_rank % p->replicas != 0,
                               .no_weight_decay = p->ndim == 1 || longer_positions};
    }
}

zoe_dtype zoe_train_state_dtype_of(int state_dtype) {
    return state_dtype == ZOE_STATE_BF16   ? ZOE_BF16
           : state_dtype == ZOE_STATE_INT8 ? ZOE_I8
                                           : ZOE_F32;
}

float zoe_train_offload_ratio(const zoe_train_config *c) {
    return c->offload == ZOE_OFFLOAD_NONE ? 0.0f : c->offload_ratio;
}

void zoe_train_optimizer_config(const zoe_train_config *c, const zoe_gpt *g,
                                zoe_optimizer_config *oc) {
    zoe_optimizer_config_default(oc);
    oc->beta1 = c->beta1, oc->beta2 = c->beta2, oc->eps = c->eps;
    oc->weight_decay = c->weight_decay;
    oc->adamw = 1;
    oc->clip_norm = c->clip_grad;
    oc->dynamic_loss_scale = c->dtype == ZOE_F16;
    oc->loss_scale = c->dtype == ZOE_F16 ? c->loss_scale : 1.0f;
    oc->bucket_numel = (size_t)c->bucket_mb * (1u << 20) / zoe_dtype_size(c->dtype);
    size_t block = (size_t)zoe_gpt_block_local_numel(g), largest = 0;
    for (int t = 0; t < zoe_gpt_num_tensors(g); t++)
        if ((size_t)zoe_gpt_tensor(g, t)->local_numel > largest)
            largest = (size_t)zoe_gpt_tensor(g, t)->local_numel;
    if (c->offload_params != ZOE_OFFLOAD_PARAMS_NONE) {
        /* Streamed weights, where the device holds rings: the gradient ring by bytes
         * (docs/offload.md, "The gradient ring"). Open at once during backward besides wte's
         * bucket 0 (tied: LM head first, lookup last): one block's gradients, or an untied
         * head's; each bucket takes its own size, so --bucket-mb stays as given. */
        oc->bucket_ring_window = block > largest ? block : largest;
    } else {
        /* Every ring slot is as large as the largest bucket, and a tensor is never split, so
         * buckets smaller than the largest tensor (wte) only add slots: --bucket-mb is a floor.
         * (On the 10b preset 16 MiB buckets made a ring of 27 wte-sized slots, 10.8 GiB.) */
        if (largest > oc->bucket_numel) oc->bucket_numel = largest;
        /* Open at once during backward: wte's bucket, the buckets of one block, and the one it
         * shares with the block before. */
        oc->bucket_ring = 3 + (int)((block + oc->bucket_numel - 1) / oc->bucket_numel);
    }
    oc->dpu_warmup = c->dpu_warmup;
    oc->dpu_schedule = (zoe_dpu_schedule)c->dpu_schedule;
    /* The device Adam of a GPU's device share neither predicts nor compensates (not built;
     * zoe_optimizer_create refuses both there): the paper's schedule there instead. */
    if ((oc->dpu_schedule == ZOE_DPU_PREDICT || oc->dpu_schedule == ZOE_DPU_DC) &&
        c->backend == ZOE_BACKEND_CUDA && zoe_train_offload_ratio(c) < 1.0f)
        oc->dpu_schedule = ZOE_DPU_PLAIN;
    oc->dpu_dc_kappa = c->dpu_dc_kappa;
    oc->dpu_predict_scale = c->dpu_predict_scale;
    oc->gated_forward = 1; /* the model's forward calls the gate (gate_ready) */
    /* the optimizer keeps partial_ratio of the state on the device; the rest is offloaded */
    oc->partial_ratio = 1.0f - zoe_train_offload_ratio(c);
    oc->main_params_dtype = zoe_train_state_dtype_of(c->main_params_dtype);
    oc->exp_avg_dtype = zoe_train_state_dtype_of(c->exp_avg_dtype);
    oc->exp_avg_sq_dtype = zoe_train_state_dtype_of(c->exp_avg_sq_dtype);
    oc->main_grads_dtype = c->main_grads_dtype;
    oc->rounding_seed = c->seed;
    oc->params_on_host = c->offload_params != ZOE_OFFLOAD_PARAMS_NONE;
    oc->params_on_drive = c->offload_params == ZOE_OFFLOAD_PARAMS_NVME;
    if (c->offload == ZOE_OFFLOAD_NVME) {
        oc->state_paths = c->nvme_path;
        oc->state_ahead = c->nvme_ahead;
        oc->grads_on_drives = c->offload_grads == ZOE_OFFLOAD_GRADS_NVME;
        oc->micro_batches = c->grad_accum;
    }
}

size_t zoe_ckpt_round_bytes(void) {
    const char *v = getenv("ZOE_CKPT_TEST_ROUND_BYTES");
    long long n = v ? atoll(v) : 0;
    return n >= 64 ? (size_t)n : DEFAULT_ROUND_BYTES;
}
