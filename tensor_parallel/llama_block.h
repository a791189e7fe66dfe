/* The Llama block (pre-RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP, no
 * biases) with tensor-parallel attention and MLP, built from the same layers as the GPT block:
 *
 *   h   = x + linear_proj(attn(rope(linear_q(n1)), rope_k(linear_kv(n1))))   n1 = rms_1(x)
 *   out = h + linear_fc2(swiglu(linear_fc1(rms_2(h))))
 *
 * linear_q and linear_fc1 are column-parallel, linear_proj and linear_fc2 row-parallel: 2
 * all-reduces of [B*T, hidden] forward and 2 backward, as in the GPT block. linear_q's rows are
 * the query heads in order [heads][head_dim]; linear_kv's rows are [kv_heads][2][head_dim] (each
 * KV head's k then v). TP splits both by heads so that each rank holds whole groups: with
 * t <= kv_heads, rank r holds query heads [r H/t, (r+1) H/t) and the kv_heads / t KV heads they
 * use; with t > kv_heads (Llama-70B's 8 KV heads at TP=16), each KV head is held by the
 * t / kv_heads consecutive ranks whose query heads use it (a sharded split, param.h), and
 * backward sums the KV activation gradient over exactly those ranks (kv_comm) before the KV
 * weight gradient is formed, so each replica's weight gradient is the full one. linear_fc1's
 * rows interleave gate and up per feature ([ffn][2]), so a row shard is whole features.
 *
 * Parameter names, with the caller's prefix (e.g. "h.0."): ln_1.weight, attn.linear_q.weight,
 * attn.linear_kv.weight, attn.linear_proj.weight, ln_2.weight, mlp.linear_fc1.weight,
 * mlp.linear_fc2.weight. Replicated: the two RMSNorm weights.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#ifndef ZOE_TP_LLAMA_BLOCK_H
#define ZOE_TP_LLAMA_BLOCK_H

#include "tensor_parallel/layers.h"

typedef struct zoe_tp_llama_block_config {
    int64_t hidden, heads, kv_heads, ffn; /* global sizes */
    float norm_eps;                       /* RMSNorm epsilon */
    float init_std;                       /* N(0, std^2) for q, kv and fc1 */
    float proj_init_std;                  /* for proj and fc2 */
} zoe_tp_llama_block_config;

#define ZOE_TP_LLAMA_BLOCK_PARAMS 7

typedef struct zoe_tp_llama_block {
    zoe_tp_llama_block_config cfg;
    int64_t local_heads, local_kv_heads, head_dim, local_ffn;
    int kv_replicas; /* TP ranks sharing each local KV head (1 unless tp > kv_heads) */
    zoe_tp_param ln_1_weight, ln_2_weight;
    zoe_tp_linear linear_q, linear_kv, linear_proj, linear_fc1, linear_fc2;
    const float *inv_freq; /* RoPE frequencies [head_dim / 2], device, the model's */
    zoe_comm *kv_comm;     /* the kv_replicas ranks sharing this rank's KV heads (borrowed) */
    zoe_tp_traffic traffic;
} zoe_tp_llama_block;

/* Fails naming the value when heads, kv_heads, hidden or ffn don't divide ("heads=32 not
 * divisible by tp=5", "kv_heads=8 and tp=12: neither divides the other"). */
zoe_status zoe_tp_llama_block_init(zoe_tp_llama_block *blk, const char *prefix,
                                   const zoe_tp_llama_block_config *cfg, int tp_size, int tp_rank);
/* The ranks of one KV replica group share a color: tp_rank / kv_replicas. A caller splits the TP
 * communicator by it (zoe_comm_split) and binds the result, with the RoPE table, before use. */
int zoe_tp_llama_block_kv_color(const zoe_tp_llama_block *blk, int tp_rank);
void zoe_tp_llama_block_bind_context(zoe_tp_llama_block *blk, const float *inv_freq,
                                     zoe_comm *kv_comm);
/* In the order ln_1, q, kv, proj, ln_2, fc1, fc2; returns ZOE_TP_LLAMA_BLOCK_PARAMS. */
int zoe_tp_llama_block_params(zoe_tp_llama_block *blk,
                              zoe_tp_param *out[ZOE_TP_LLAMA_BLOCK_PARAMS]);
/* Part `part` (ZOE_TP_PART_*, layers.h) of that list: [first, first + n). */
void zoe_tp_llama_block_part(int part, int *first, int *n);
void zoe_tp_llama_block_plan(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                             zoe_kernel_plan *plan);

/* What forward saves for backward. N = B*T. */
typedef struct zoe_tp_llama_block_acts {
    int64_t B, T;
    void *ln_1;       /* [N, hidden] */
    float *ln_1_rstd; /* [N] */
    void *q;          /* [N, heads / t, head_dim], rotated */
    void *kv;         /* [N, local kv heads, 2, head_dim], k rotated */
    void *attn;       /* [N, heads / t * head_dim] */
    float *attn_lse;  /* [B, heads / t, T] */
    void *h;          /* [N, hidden] */
    void *ln_2;       /* [N, hidden] */
    float *ln_2_rstd;
    void *fc1;    /* [N, ffn / t, 2], gate and up */
    void *swiglu; /* [N, ffn / t] */
} zoe_tp_llama_block_acts;

size_t zoe_tp_llama_block_acts_bytes(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                                     zoe_dtype dtype);
zoe_status zoe_tp_llama_block_acts_bind(const zoe_tp_llama_block *blk,
                                        zoe_tp_llama_block_acts *acts, void *buffer, int64_t B,
                                        int64_t T, zoe_dtype dtype);
size_t zoe_tp_llama_block_scratch_bytes(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                                        zoe_dtype dtype);

/* As zoe_tp_block_forward / _backward (no dropout: Llama trains without it). */
zoe_status zoe_tp_llama_block_forward(const zoe_tp *tp, zoe_tp_llama_block *blk,
                                      zoe_tp_llama_block_acts *acts, void *out, const void *x,
                                      const zoe_tp_weights *w);
zoe_status zoe_tp_llama_block_backward(const zoe_tp *tp, zoe_tp_llama_block *blk,
                                       const zoe_tp_llama_block_acts *acts, void *dres,
                                       const void *x, void *scratch, const zoe_tp_weights *w);

#endif
