/* Internal to models/: the model's struct, shared by the training path (gpt.c) and the
 * incremental decoding path (gpt_decode.c).
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#ifndef ZOE_MODELS_GPT_IMPL_H
#define ZOE_MODELS_GPT_IMPL_H

#include "models/gpt.h"

#define GPT_MAX_TENSORS_FIXED 4 /* wte, wpe or lm_head, ln_f.weight, ln_f.bias */

struct zoe_gpt {
    zoe_gpt_config cfg;
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernels *kernels;
    zoe_tp tp;
    zoe_tp_embedding emb;
    bool llama;
    zoe_tp_block *blocks;                /* GPT */
    zoe_tp_llama_block *llama_blocks;    /* Llama */
    zoe_comm *kv_comm;                   /* Llama with tp > kv_heads: the KV replica group */
    zoe_tp_param ln_f_weight, ln_f_bias; /* bias: GPT only */
    zoe_tp_param **tensors;              /* the fixed order of zoe_gpt_tensor */
    int num_tensors;
    int block_params; /* tensors per block */
    int first_block, ln_f_tensor,
        ln_f_n;   /* tensor indices: first block's first, ln_f's first, count */
    int head;     /* the untied LM head's tensor, or -1 */
    int64_t N, C; /* tokens per micro-batch, hidden */

    /* activations, carved from one device allocation */
    void *arena;
    size_t arena_bytes;
    zoe_kernel_plan kernel_plan; /* the largest shapes its kernels see (the workspace's plan) */
    int32_t *tokens, *targets;
    void **resid;                        /* [L + 1] x [N, C]: block inputs, then the last output */
    zoe_tp_block_acts *acts;             /* L of them, or 1 shared with recompute (GPT) */
    zoe_tp_llama_block_acts *llama_acts; /* the same, Llama */
    float *inv_freq;                     /* RoPE frequencies [head_dim / 2] (Llama) */
    void *recompute_out;                 /* [N, C], the discarded output of a recomputed block */
    void *block_scratch;
    void *ln_f, *d_ln_f, *dres; /* [N, C] */
    float *ln_f_mean, *ln_f_rstd;
    void *logits; /* [N, vocab.local]; its gradient in place after backward */
    float *xent_stats;
    float *losses;       /* host [N] */
    int32_t *staged_ids; /* pinned host [2, N]: tokens, targets on their way to the device */
    int64_t count;       /* non-ignored tokens of the last forward */
    uint64_t micro_step;
    zoe_gpt_weight_source source; /* acquire NULL: none */
};

/* Unit u's weights for pass (zoe_gpt_weight_source), rebound to where the source puts them; and
 * their release. Shared by the training passes (gpt.c) and decoding (gpt_decode.c). */
zoe_status zoe_gpt_acquire_unit(zoe_gpt *g, int u, zoe_gpt_pass pass);
zoe_status zoe_gpt_release_unit(zoe_gpt *g, int u);

/* The weight source as block l's parts see it (zoe_tp_weights, tensor_parallel/layers.h): part p
 * is unit 1 + l ZOE_TP_BLOCK_PARTS + p. With recomputation the part the forward reads last (fc2)
 * is the one the backward reads first: the recomputing forward keeps it and the backward finds
 * it, one fetch for both (zoe_gpt_pass_order lists it once). */
typedef struct zoe_gpt_block_source {
    zoe_gpt *g;
    int l;
    zoe_gpt_pass pass;
    int keep;  /* the part release leaves acquired (-1: none) */
    int found; /* the part acquire finds acquired already (-1: none) */
} zoe_gpt_block_source;
zoe_tp_weights zoe_gpt_block_weights(zoe_gpt_block_source *src);

#endif
