/* The pre-LayerNorm transformer block with tensor-parallel attention and MLP:
 *
 *   h   = x + drop(linear_proj(attn(linear_qkv(ln_1(x)))))
 *   out = h + drop(linear_fc2(gelu(linear_fc1(ln_2(h)))))
 *
 * linear_qkv and linear_fc1 are column-parallel, linear_proj and linear_fc2 row-parallel, so a
 * block does 2 all-reduces of [B*T, hidden] forward (after proj and fc2) and 2 backward (the
 * input gradients of ln_1's and ln_2's outputs). The global QKV weight's rows are ordered
 * [heads][3][head_dim] (the kernels' qkv layout), so a contiguous row shard is heads / t whole
 * heads. Hidden dropout (optional) uses the same Philox mask on every rank.
 *
 * Parameter names, with the caller's prefix (e.g. "h.0."): ln_1.weight, ln_1.bias,
 * attn.linear_qkv.weight/.bias, attn.linear_proj.weight/.bias, ln_2.weight, ln_2.bias,
 * mlp.linear_fc1.weight/.bias, mlp.linear_fc2.weight/.bias. Replicated: the LayerNorms and the
 * biases of linear_proj and linear_fc2.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#ifndef ZOE_TP_BLOCK_H
#define ZOE_TP_BLOCK_H

#include "tensor_parallel/layers.h"

typedef struct zoe_tp_block_config {
    int64_t hidden, heads, ffn; /* global sizes; ffn is usually 4 * hidden */
    float hidden_dropout;       /* p of the dropouts after proj and fc2; 0 disables them */
    float init_std;             /* N(0, std^2) for qkv and fc1 (GPT-2: 0.02) */
    float proj_init_std;        /* for proj and fc2 (GPT-2: 0.02 / sqrt(2 * layers)) */
} zoe_tp_block_config;

#define ZOE_TP_BLOCK_PARAMS 12

typedef struct zoe_tp_block {
    zoe_tp_block_config cfg;
    int64_t local_heads, head_dim, local_ffn;
    zoe_tp_param ln_1_weight, ln_1_bias, ln_2_weight, ln_2_bias;
    zoe_tp_linear linear_qkv, linear_proj, linear_fc1, linear_fc2;
    uint64_t dropout_site[2]; /* Philox sites of the dropouts after proj and fc2 */
    zoe_tp_traffic traffic;   /* bytes of the last forward / backward */
} zoe_tp_block;

/* Describes the block; fails naming the value when heads, hidden or ffn don't divide
 * ("heads=12 not divisible by tp=5", "hidden=100 not divisible by heads=12"). */
zoe_status zoe_tp_block_init(zoe_tp_block *blk, const char *prefix, const zoe_tp_block_config *cfg,
                             int tp_size, int tp_rank);
/* The block's parameters in a fixed order (ln_1 w/b, qkv w/b, proj w/b, ln_2 w/b, fc1 w/b,
 * fc2 w/b); returns ZOE_TP_BLOCK_PARAMS. */
int zoe_tp_block_params(zoe_tp_block *blk, zoe_tp_param *out[ZOE_TP_BLOCK_PARAMS]);
/* Part `part` (ZOE_TP_PART_*, layers.h) of that list: [first, first + n). */
void zoe_tp_block_part(int part, int *first, int *n);
/* Widens plan (max with what it holds) to the shapes the block's kernels see. */
void zoe_tp_block_plan(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_kernel_plan *plan);

/* What forward saves for backward, carved from one caller buffer of
 * zoe_tp_block_acts_bytes. N = B*T. */
typedef struct zoe_tp_block_acts {
    int64_t B, T;
    uint64_t step;                /* dropout step of the forward that filled them */
    void *ln_1;                   /* [N, hidden] */
    float *ln_1_mean, *ln_1_rstd; /* [N] */
    void *qkv;                    /* [N, 3 * hidden / t] */
    void *attn;                   /* [N, hidden / t] */
    float *attn_lse;              /* [B, heads / t, T] */
    void *h;                      /* [N, hidden], the residual after attention */
    void *ln_2;                   /* [N, hidden] */
    float *ln_2_mean, *ln_2_rstd;
    void *fc1;  /* [N, ffn / t], before GELU */
    void *gelu; /* [N, ffn / t] */
} zoe_tp_block_acts;

size_t zoe_tp_block_acts_bytes(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_dtype dtype);
zoe_status zoe_tp_block_acts_bind(const zoe_tp_block *blk, zoe_tp_block_acts *acts, void *buffer,
                                  int64_t B, int64_t T, zoe_dtype dtype);
/* Backward's scratch: [N, hidden] + 2 x [N, max(ffn, 3 * hidden) / t] elements. */
size_t zoe_tp_block_scratch_bytes(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_dtype dtype);

/* out [N, hidden] from x [N, hidden] (both replicated; they may not alias). step keys the
 * dropout masks (advance it every micro-batch, from 1); ZOE_TP_NO_DROPOUT (0) applies none,
 * for evaluation. w: where the parts' weights come from (NULL: as bound; layers.h). */
#define ZOE_TP_NO_DROPOUT 0u
zoe_status zoe_tp_block_forward(const zoe_tp *tp, zoe_tp_block *blk, zoe_tp_block_acts *acts,
                                void *out, const void *x, uint64_t step, const zoe_tp_weights *w);
/* dres [N, hidden] holds dL/d(out) on entry and dL/d(x) on return (in place, so a stack passes
 * one residual-gradient buffer down). Parameter gradients accumulate. x is forward's input. */
zoe_status zoe_tp_block_backward(const zoe_tp *tp, zoe_tp_block *blk, const zoe_tp_block_acts *acts,
                                 void *dres, const void *x, void *scratch, const zoe_tp_weights *w);

/* The bytes zoe_comm_bytes counts for one forward and one backward at TP size t: 2 all-reduces
 * of B*T*hidden elements each way when t > 1, none at t == 1. */
uint64_t zoe_tp_block_comm_bytes_formula(const zoe_tp_block *blk, int64_t B, int64_t T,
                                         zoe_dtype dtype, int tp_size);

#endif
