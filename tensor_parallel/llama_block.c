/* The tensor-parallel Llama block: forward, backward, activation layout.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include "tensor_parallel/llama_block.h"
#include <stdio.h>
#include "runtime/error.h"

zoe_status zoe_tp_llama_block_init(zoe_tp_llama_block *blk, const char *prefix,
                                   const zoe_tp_llama_block_config *cfg, int tp_size, int tp_rank) {
    if (!blk || !prefix || !cfg)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "llama block init: NULL argument");
    const int64_t C = cfg->hidden, NH = cfg->heads, NKV = cfg->kv_heads, F = cfg->ffn;
    if (C <= 0 || NH <= 0 || NKV <= 0 || F <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "llama block: hidden=%lld heads=%lld kv_heads=%lld ffn=%lld must be "
                        "positive",
                        (long long)C, (long long)NH, (long long)NKV, (long long)F);
    if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "llama block: tp rank %d of size %d", tp_rank,
                        tp_size);
    if (C % NH != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "hidden=%lld not divisible by heads=%lld",
                        (long long)C, (long long)NH);
    if (NH % NKV != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "heads=%lld not divisible by kv_heads=%lld",
                        (long long)NH, (long long)NKV);
    if (NH % tp_size != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "heads=%lld not divisible by tp=%d",
                        (long long)NH, tp_size);
    if (NKV % tp_size != 0 && tp_size % NKV != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "kv_heads=%lld and tp=%d: neither divides the other", (long long)NKV,
                        tp_size);
    if (F % tp_size != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "ffn=%lld not divisible by tp=%d", (long long)F,
                        tp_size);
    if (!(cfg->norm_eps > 0.0f && cfg->norm_eps < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "norm_eps=%g outside (0, 1)",
                        (double)cfg->norm_eps);
    const int shards = tp_size <= NKV ? tp_size : (int)NKV;
    const int64_t HS = C / NH;
    zoe_tp_llama_block b = {.cfg = *cfg,
                            .local_heads = NH / tp_size,
                            .local_kv_heads = NKV / shards,
                            .head_dim = HS,
                            .local_ffn = F / tp_size,
                            .kv_replicas = tp_size / shards};
    if (HS % 2 != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "head_dim=%lld is odd (RoPE pairs dimensions)",
                        (long long)HS);
    char name[ZOE_TP_NAME_MAX];
#define BLOCK_NAME(suffix) (snprintf(name, sizeof name, "%s%s", prefix, suffix), name)
    ZOE_TRY(zoe_tp_param_describe(&b.ln_1_weight, BLOCK_NAME("ln_1.weight"), 1, C, 1,
                                  ZOE_TP_REPLICATED, ZOE_TP_INIT_ONES, 0, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_column_linear_init(&b.linear_q, BLOCK_NAME("attn.linear_q"), C, NH * HS, false,
                                      false, cfg->init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_column_linear_init_sharded(&b.linear_kv, BLOCK_NAME("attn.linear_kv"), C,
                                              NKV * 2 * HS, shards, cfg->init_std, tp_size,
                                              tp_rank));
    ZOE_TRY(zoe_tp_row_linear_init(&b.linear_proj, BLOCK_NAME("attn.linear_proj"), NH * HS, C,
                                   false, cfg->proj_init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_param_describe(&b.ln_2_weight, BLOCK_NAME("ln_2.weight"), 1, C, 1,
                                  ZOE_TP_REPLICATED, ZOE_TP_INIT_ONES, 0, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_column_linear_init(&b.linear_fc1, BLOCK_NAME("mlp.linear_fc1"), C, 2 * F, false,
                                      false, cfg->init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_row_linear_init(&b.linear_fc2, BLOCK_NAME("mlp.linear_fc2"), F, C, false,
                                   cfg->proj_init_std, tp_size, tp_rank));
#undef BLOCK_NAME
    *blk = b;
    return ZOE_OK;
}

int zoe_tp_llama_block_kv_color(const zoe_tp_llama_block *blk, int tp_rank) {
    return tp_rank / blk->kv_replicas;
}

void zoe_tp_llama_block_bind_context(zoe_tp_llama_block *blk, const float *inv_freq,
                                     zoe_comm *kv_comm) {
    blk->inv_freq = inv_freq;
    blk->kv_comm = kv_comm;
}

int zoe_tp_llama_block_params(zoe_tp_llama_block *blk,
                              zoe_tp_param *out[ZOE_TP_LLAMA_BLOCK_PARAMS]) {
    zoe_tp_param *list[ZOE_TP_LLAMA_BLOCK_PARAMS] = {
        &blk->ln_1_weight,        &blk->linear_q.weight, &blk->linear_kv.weight,
        &blk->linear_proj.weight, &blk->ln_2_weight,     &blk->linear_fc1.weight,
        &blk->linear_fc2.weight};
    for (int i = 0; i < ZOE_TP_LLAMA_BLOCK_PARAMS; i++) out[i] = list[i];
    return ZOE_TP_LLAMA_BLOCK_PARAMS;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void zoe_tp_llama_block_plan(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                             zoe_kernel_plan *plan) {
    const int64_t C = blk->cfg.hidden;
    plan->max_rows = max64(plan->max_rows, B * T);
    plan->max_dim =
        max64(plan->max_dim, max64(max64(C, blk->linear_q.out_local),
                                   max64(blk->linear_kv.out_local, 2 * blk->local_ffn)));
    plan->max_seq = max64(plan->max_seq, T);
    plan->max_heads = max64(plan->max_heads, blk->local_heads);
    plan->max_head_dim = max64(plan->max_head_dim, blk->head_dim);
}

static void carve_acts(const zoe_tp_llama_block *blk, zoe_tp_llama_block_acts *a, zoe_tp_carver *c,
                       int64_t B, int64_t T, zoe_dtype dtype) {
    const size_t es = zoe_dtype_size(dtype), N = (size_t)(B * T), C = (size_t)blk->cfg.hidden;
    const size_t q = (size_t)blk->linear_q.out_local, kv = (size_t)blk->linear_kv.out_local;
    const size_t ff = (size_t)blk->local_ffn;
    a->B = B, a->T = T;
    a->ln_1 = zoe_tp_carve(c, N * C * es);
    a->ln_1_rstd = zoe_tp_carve(c, N * sizeof(float));
    a->q = zoe_tp_carve(c, N * q * es);
    a->kv = zoe_tp_carve(c, N * kv * es);
    a->attn = zoe_tp_carve(c, N * q * es);
    a->attn_lse = zoe_tp_carve(c, N * (size_t)blk->local_heads * sizeof(float));
    a->h = zoe_tp_carve(c, N * C * es);
    a->ln_2 = zoe_tp_carve(c, N * C * es);
    a->ln_2_rstd = zoe_tp_carve(c, N * sizeof(float));
    a->fc1 = zoe_tp_carve(c, N * 2 * ff * es);
    a->swiglu = zoe_tp_carve(c, N * ff * es);
}

size_t zoe_tp_llama_block_acts_bytes(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                                     zoe_dtype dtype) {
    zoe_tp_llama_block_acts a;
    zoe_tp_carver c = {0};
    carve_acts(blk, &a, &c, B, T, dtype);
    return c.used;
}

zoe_status zoe_tp_llama_block_acts_bind(const zoe_tp_llama_block *blk,
                                        zoe_tp_llama_block_acts *acts, void *buffer, int64_t B,
                                        int64_t T, zoe_dtype dtype) {
    if (!acts || !buffer || B <= 0 || T <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "llama block acts bind: B=%lld T=%lld",
                        (long long)B, (long long)T);
    zoe_tp_carver c = {.base = buffer};
    carve_acts(blk, acts, &c, B, T, dtype);
    return ZOE_OK;
}

/* Backward scratch: d_ln [N, C] (both norms' input gradients), the MLP's and attention's split
 * gradients in wide0 / wide1, and d_kv. */
typedef struct llama_scratch {
    void *d_ln, *wide0, *wide1, *d_kv;
} llama_scratch;

static void carve_scratch(const zoe_tp_llama_block *blk, llama_scratch *s, zoe_tp_carver *c,
                          int64_t B, int64_t T, zoe_dtype dtype) {
    const size_t es = zoe_dtype_size(dtype), N = (size_t)(B * T);
    const int64_t q = blk->linear_q.out_local, ff = blk->local_ffn;
    s->d_ln = zoe_tp_carve(c, N * (size_t)blk->cfg.hidden * es);
    s->wide0 = zoe_tp_carve(c, N * (size_t)max64(2 * ff, q) * es);
    s->wide1 = zoe_tp_carve(c, N * (size_t)max64(ff, q) * es);
    s->d_kv = zoe_tp_carve(c, N * (size_t)blk->linear_kv.out_local * es);
}

size_t zoe_tp_llama_block_scratch_bytes(const zoe_tp_llama_block *blk, int64_t B, int64_t T,
                                        zoe_dtype dtype) {
    llama_scratch s;
    zoe_tp_carver c = {0};
    carve_scratch(blk, &s, &c, B, T, dtype);
    return c.used;
}

void zoe_tp_llama_block_part(int part, int *first, int *n) {
    /* ln_1, q, kv | proj | ln_2, fc1 | fc2 */
    static const int start[ZOE_TP_BLOCK_PARTS + 1] = {0, 3, 4, 6, ZOE_TP_LLAMA_BLOCK_PARAMS};
    *first = start[part], *n = start[part + 1] - start[part];
}

/* Part `part` of the block's weights from w (NULL: as bound). */
static zoe_status take(const zoe_tp_weights *w, zoe_tp_llama_block *blk, int part) {
    zoe_tp_param *ps[ZOE_TP_LLAMA_BLOCK_PARAMS];
    zoe_tp_llama_block_params(blk, ps);
    int first, n;
    zoe_tp_llama_block_part(part, &first, &n);
    return zoe_tp_weights_acquire(w, part, ps + first, n);
}

static zoe_status check_context(const zoe_tp_llama_block *blk) {
    if (!blk->inv_freq || (blk->kv_replicas > 1 && !blk->kv_comm))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: RoPE table or KV replica communicator not bound",
                        blk->ln_1_weight.name);
    return ZOE_OK;
}

/* RoPE over the query heads of q [N, heads, HS] and the k halves of kv [N, kv_heads, 2, HS]
 * (forward), or back over their gradients. */
static zoe_status rotate(const zoe_tp *tp, const zoe_tp_llama_block *blk, void *q, void *kv,
                         int64_t B, int64_t T, bool backward) {
    const int64_t HS = blk->head_dim, NHl = blk->local_heads, KVl = blk->local_kv_heads;
    zoe_status (*op)(zoe_kernels *, zoe_dtype, void *, const float *, int64_t, int64_t, int64_t,
                     int64_t, int64_t, int64_t) = backward ? zoe_rope_backward : zoe_rope_forward;
    ZOE_TRY(op(tp->kernels, tp->dtype, q, blk->inv_freq, B, T, NHl, HS, HS, NHl * HS));
    return op(tp->kernels, tp->dtype, kv, blk->inv_freq, B, T, KVl, HS, 2 * HS, KVl * 2 * HS);
}

zoe_status zoe_tp_llama_block_forward(const zoe_tp *tp, zoe_tp_llama_block *blk,
                                      zoe_tp_llama_block_acts *a, void *out, const void *x,
                                      const zoe_tp_weights *w) {
    ZOE_TRY(check_context(blk));
    zoe_kernels *k = tp->kernels;
    const zoe_dtype dt = tp->dtype;
    const int64_t B = a->B, T = a->T, N = B * T, C = blk->cfg.hidden;
    const uint64_t before = zoe_comm_bytes(tp->comm);
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_rmsnorm_forward(k, dt, a->ln_1, a->ln_1_rstd, x, blk->ln_1_weight.data, N, C,
                                blk->cfg.norm_eps));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &blk->linear_q, a->q, a->ln_1, N, NULL));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &blk->linear_kv, a->kv, a->ln_1, N, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(rotate(tp, blk, a->q, a->kv, B, T, false));
    ZOE_TRY(zoe_attention_gqa_forward(k, dt, a->attn, a->attn_lse, a->q, a->kv, B, T,
                                      blk->local_heads, blk->local_kv_heads, blk->head_dim));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &blk->linear_proj, a->h, a->attn, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_residual_forward(k, dt, a->h, x, a->h, N * C));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_rmsnorm_forward(k, dt, a->ln_2, a->ln_2_rstd, a->h, blk->ln_2_weight.data, N, C,
                                blk->cfg.norm_eps));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &blk->linear_fc1, a->fc1, a->ln_2, N, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_swiglu_forward(k, dt, a->swiglu, a->fc1, N, blk->local_ffn));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &blk->linear_fc2, out, a->swiglu, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zoe_residual_forward(k, dt, out, a->h, out, N * C));
    blk->traffic.forward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

static zoe_status zero(const zoe_tp *tp, void *p, int64_t n) {
    return zoe_memset_async(p, 0, (size_t)n * zoe_dtype_size(tp->dtype), tp->stream);
}

zoe_status zoe_tp_llama_block_backward(const zoe_tp *tp, zoe_tp_llama_block *blk,
                                       const zoe_tp_llama_block_acts *a, void *dres, const void *x,
                                       void *scratch, const zoe_tp_weights *w) {
    ZOE_TRY(check_context(blk));
    if (!scratch) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "llama block backward: NULL scratch");
    zoe_kernels *k = tp->kernels;
    const zoe_dtype dt = tp->dtype;
    const int64_t B = a->B, T = a->T, N = B * T, C = blk->cfg.hidden, F = blk->local_ffn;
    const int64_t Q = blk->linear_q.out_local, KV = blk->linear_kv.out_local;
    llama_scratch s;
    zoe_tp_carver c = {.base = scratch};
    carve_scratch(blk, &s, &c, B, T, dt);
    const uint64_t before = zoe_comm_bytes(tp->comm);

    /* MLP branch: out = h + fc2(swiglu(fc1(rms_2(h)))); dres is d(out), the residual part of
     * d(h). */
    void *d_swiglu = s.wide1, *d_fc1 = s.wide0;
    ZOE_TRY(zero(tp, d_swiglu, N * F));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zoe_tp_row_linear_backward(tp, &blk->linear_fc2, d_swiglu, dres, a->swiglu, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zero(tp, d_fc1, N * 2 * F));
    ZOE_TRY(zoe_swiglu_backward(k, dt, d_fc1, d_swiglu, a->fc1, N, F));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_tp_column_linear_backward(tp, &blk->linear_fc1, s.d_ln, d_fc1, a->ln_2, N, NULL));
    ZOE_TRY(zoe_rmsnorm_backward(k, dt, dres, blk->ln_2_weight.grad, s.d_ln, a->h,
                                 blk->ln_2_weight.data, a->ln_2_rstd, N, C));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));

    /* Attention branch: h = x + proj(attn(rope(q), rope(kv))); dres is now d(h). */
    void *d_attn = s.wide1, *d_q = s.wide0;
    ZOE_TRY(zero(tp, d_attn, N * Q));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_tp_row_linear_backward(tp, &blk->linear_proj, d_attn, dres, a->attn, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zero(tp, d_q, N * Q));
    ZOE_TRY(zero(tp, s.d_kv, N * KV));
    ZOE_TRY(zoe_attention_gqa_backward(k, dt, d_q, s.d_kv, d_attn, a->q, a->kv, a->attn,
                                       a->attn_lse, B, T, blk->local_heads, blk->local_kv_heads,
                                       blk->head_dim));
    ZOE_TRY(rotate(tp, blk, d_q, s.d_kv, B, T, true));
    /* A KV head held by several ranks: each saw only its own query heads' share of d_kv. The
     * sum over the replicas is the full gradient; every replica then forms the identical KV
     * weight gradient, and only the first adds the KV path's input gradient, which the TP
     * all-reduce below would otherwise count once per replica. */
    const bool first_replica = tp->rank % blk->kv_replicas == 0;
    if (blk->kv_replicas > 1)
        ZOE_TRY(zoe_comm_all_reduce(blk->kv_comm, s.d_kv, s.d_kv, (size_t)(N * KV), dt,
                                    ZOE_REDUCE_SUM, tp->stream));
    ZOE_TRY(zero(tp, s.d_ln, N * C));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_matmul_backward(k, dt, s.d_ln, blk->linear_q.weight.grad, NULL, d_q, a->ln_1,
                                blk->linear_q.weight.data, N, C, Q));
    ZOE_TRY(zoe_matmul_backward(k, dt, first_replica ? s.d_ln : NULL, blk->linear_kv.weight.grad,
                                NULL, s.d_kv, a->ln_1, blk->linear_kv.weight.data, N, C, KV));
    ZOE_TRY(zoe_tp_copy_to_backward(tp, s.d_ln, s.d_ln, N * C));
    ZOE_TRY(zoe_rmsnorm_backward(k, dt, dres, blk->ln_1_weight.grad, s.d_ln, x,
                                 blk->ln_1_weight.data, a->ln_1_rstd, N, C));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    blk->traffic.backward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}
