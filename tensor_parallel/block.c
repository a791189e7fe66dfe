/* The tensor-parallel transformer block: forward, backward, activation layout.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include "tensor_parallel/block.h"
#include <stdio.h>
#include "runtime/error.h"
#include "kernels/philox.h"

zoe_status zoe_tp_block_init(zoe_tp_block *blk, const char *prefix, const zoe_tp_block_config *cfg,
                             int tp_size, int tp_rank) {
    if (!blk || !prefix || !cfg)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "block init: NULL argument");
    int64_t C = cfg->hidden, NH = cfg->heads, F = cfg->ffn;
    if (C <= 0 || NH <= 0 || F <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "block: hidden=%lld heads=%lld ffn=%lld must be positive", (long long)C,
                        (long long)NH, (long long)F);
    if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "block: tp rank %d of size %d", tp_rank, tp_size);
    if (C % NH != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "hidden=%lld not divisible by heads=%lld",
                        (long long)C, (long long)NH);
    if (NH % tp_size != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "heads=%lld not divisible by tp=%d",
                        (long long)NH, tp_size);
    if (F % tp_size != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "ffn=%lld not divisible by tp=%d", (long long)F,
                        tp_size);
    if (!(cfg->hidden_dropout >= 0.0f && cfg->hidden_dropout < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "hidden_dropout=%g outside [0, 1)",
                        (double)cfg->hidden_dropout);
    zoe_tp_block b = {
        .cfg = *cfg, .local_heads = NH / tp_size, .head_dim = C / NH, .local_ffn = F / tp_size};
    char name[ZOE_TP_NAME_MAX];
#define BLOCK_NAME(suffix) (snprintf(name, sizeof name, "%s%s", prefix, suffix), name)
    ZOE_TRY(zoe_tp_layernorm_describe(&b.ln_1_weight, &b.ln_1_bias, BLOCK_NAME("ln_1"), C, tp_size,
                                      tp_rank));
    ZOE_TRY(zoe_tp_column_linear_init(&b.linear_qkv, BLOCK_NAME("attn.linear_qkv"), C, 3 * C, true,
                                      false, cfg->init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_row_linear_init(&b.linear_proj, BLOCK_NAME("attn.linear_proj"), C, C, true,
                                   cfg->proj_init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_layernorm_describe(&b.ln_2_weight, &b.ln_2_bias, BLOCK_NAME("ln_2"), C, tp_size,
                                      tp_rank));
    ZOE_TRY(zoe_tp_column_linear_init(&b.linear_fc1, BLOCK_NAME("mlp.linear_fc1"), C, F, true,
                                      false, cfg->init_std, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_row_linear_init(&b.linear_fc2, BLOCK_NAME("mlp.linear_fc2"), F, C, true,
                                   cfg->proj_init_std, tp_size, tp_rank));
    b.dropout_site[0] = zoe_philox_stream_of_name(BLOCK_NAME("attn.hidden_dropout"));
    b.dropout_site[1] = zoe_philox_stream_of_name(BLOCK_NAME("mlp.hidden_dropout"));
#undef BLOCK_NAME
    *blk = b;
    return ZOE_OK;
}

int zoe_tp_block_params(zoe_tp_block *blk, zoe_tp_param *out[ZOE_TP_BLOCK_PARAMS]) {
    zoe_tp_param *list[ZOE_TP_BLOCK_PARAMS] = {
        &blk->ln_1_weight,     &blk->ln_1_bias,          &blk->linear_qkv.weight,
        &blk->linear_qkv.bias, &blk->linear_proj.weight, &blk->linear_proj.bias,
        &blk->ln_2_weight,     &blk->ln_2_bias,          &blk->linear_fc1.weight,
        &blk->linear_fc1.bias, &blk->linear_fc2.weight,  &blk->linear_fc2.bias};
    for (int i = 0; i < ZOE_TP_BLOCK_PARAMS; i++) out[i] = list[i];
    return ZOE_TP_BLOCK_PARAMS;
}

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

void zoe_tp_block_plan(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_kernel_plan *plan) {
    int64_t C = blk->cfg.hidden;
    plan->max_rows = max64(plan->max_rows, B * T);
    plan->max_dim =
        max64(plan->max_dim, max64(max64(C, blk->linear_qkv.out_local), blk->local_ffn));
    plan->max_seq = max64(plan->max_seq, T);
    plan->max_heads = max64(plan->max_heads, blk->local_heads);
    plan->max_head_dim = max64(plan->max_head_dim, blk->head_dim);
}

/* Carves aligned sub-buffers off a base pointer; with base NULL it only adds up the sizes, so
 * the byte count and the binding come from the same code. */
static void carve_acts(const zoe_tp_block *blk, zoe_tp_block_acts *a, zoe_tp_carver *c, int64_t B,
                       int64_t T, zoe_dtype dtype) {
    size_t es = zoe_dtype_size(dtype), N = (size_t)(B * T), C = (size_t)blk->cfg.hidden;
    size_t qkv = (size_t)blk->linear_qkv.out_local, ff = (size_t)blk->local_ffn;
    a->B = B, a->T = T;
    a->ln_1 = zoe_tp_carve(c, N * C * es);
    a->ln_1_mean = zoe_tp_carve(c, N * sizeof(float));
    a->ln_1_rstd = zoe_tp_carve(c, N * sizeof(float));
    a->qkv = zoe_tp_carve(c, N * qkv * es);
    a->attn = zoe_tp_carve(c, N * (C / (size_t)blk->cfg.heads * (size_t)blk->local_heads) * es);
    a->attn_lse = zoe_tp_carve(c, N * (size_t)blk->local_heads * sizeof(float));
    a->h = zoe_tp_carve(c, N * C * es);
    a->ln_2 = zoe_tp_carve(c, N * C * es);
    a->ln_2_mean = zoe_tp_carve(c, N * sizeof(float));
    a->ln_2_rstd = zoe_tp_carve(c, N * sizeof(float));
    a->fc1 = zoe_tp_carve(c, N * ff * es);
    a->gelu = zoe_tp_carve(c, N * ff * es);
}

size_t zoe_tp_block_acts_bytes(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_dtype dtype) {
    zoe_tp_block_acts a;
    zoe_tp_carver c = {0};
    carve_acts(blk, &a, &c, B, T, dtype);
    return c.used;
}

zoe_status zoe_tp_block_acts_bind(const zoe_tp_block *blk, zoe_tp_block_acts *acts, void *buffer,
                                  int64_t B, int64_t T, zoe_dtype dtype) {
    if (!acts || !buffer || B <= 0 || T <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "block acts bind: B=%lld T=%lld buffer=%p",
                        (long long)B, (long long)T, buffer);
    zoe_tp_carver c = {.base = buffer};
    carve_acts(blk, acts, &c, B, T, dtype);
    return ZOE_OK;
}

/* Backward scratch: d_ln [N, C] (reused by both LayerNorms and the dropout gradient), and two
 * [N, wide] buffers for the gradients of the split activations. */
typedef struct block_scratch {
    void *d_ln, *wide0, *wide1;
} block_scratch;

static void carve_scratch(const zoe_tp_block *blk, block_scratch *s, zoe_tp_carver *c, int64_t B,
                          int64_t T, zoe_dtype dtype) {
    size_t es = zoe_dtype_size(dtype), N = (size_t)(B * T);
    size_t wide = (size_t)max64(blk->local_ffn, blk->linear_qkv.out_local);
    s->d_ln = zoe_tp_carve(c, N * (size_t)blk->cfg.hidden * es);
    s->wide0 = zoe_tp_carve(c, N * wide * es);
    s->wide1 = zoe_tp_carve(c, N * wide * es);
}

size_t zoe_tp_block_scratch_bytes(const zoe_tp_block *blk, int64_t B, int64_t T, zoe_dtype dtype) {
    block_scratch s;
    zoe_tp_carver c = {0};
    carve_scratch(blk, &s, &c, B, T, dtype);
    return c.used;
}

void zoe_tp_block_part(int part, int *first, int *n) {
    /* ln_1 w/b, qkv w/b | proj w/b | ln_2 w/b, fc1 w/b | fc2 w/b */
    static const int start[ZOE_TP_BLOCK_PARTS + 1] = {0, 4, 6, 10, ZOE_TP_BLOCK_PARAMS};
    *first = start[part], *n = start[part + 1] - start[part];
}

/* Part `part` of the block's weights from w (NULL: as bound). */
static zoe_status take(const zoe_tp_weights *w, zoe_tp_block *blk, int part) {
    zoe_tp_param *ps[ZOE_TP_BLOCK_PARAMS];
    zoe_tp_block_params(blk, ps);
    int first, n;
    zoe_tp_block_part(part, &first, &n);
    return zoe_tp_weights_acquire(w, part, ps + first, n);
}

/* y = residual + drop(y) in place on y (y holds the all-reduced branch output). */
static zoe_status dropout_residual(const zoe_tp *tp, const zoe_tp_block *blk, int site, void *y,
                                   const void *residual, int64_t n, uint64_t step) {
    if (blk->cfg.hidden_dropout > 0.0f && step != ZOE_TP_NO_DROPOUT)
        ZOE_TRY(zoe_tp_dropout_forward(tp, y, y, n, blk->cfg.hidden_dropout,
                                       blk->dropout_site[site], step));
    return zoe_residual_forward(tp->kernels, tp->dtype, y, residual, y, n);
}

zoe_status zoe_tp_block_forward(const zoe_tp *tp, zoe_tp_block *blk, zoe_tp_block_acts *a,
                                void *out, const void *x, uint64_t step, const zoe_tp_weights *w) {
    zoe_kernels *k = tp->kernels;
    zoe_dtype dt = tp->dtype;
    int64_t B = a->B, T = a->T, N = B * T, C = blk->cfg.hidden;
    uint64_t before = zoe_comm_bytes(tp->comm);
    a->step = step;
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_layernorm_forward(k, dt, a->ln_1, a->ln_1_mean, a->ln_1_rstd, x,
                                  blk->ln_1_weight.data, blk->ln_1_bias.data, N, C));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &blk->linear_qkv, a->qkv, a->ln_1, N, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_attention_forward(k, dt, a->attn, a->attn_lse, a->qkv, B, T, blk->local_heads,
                                  blk->head_dim));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &blk->linear_proj, a->h, a->attn, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(dropout_residual(tp, blk, 0, a->h, x, N * C, step));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_layernorm_forward(k, dt, a->ln_2, a->ln_2_mean, a->ln_2_rstd, a->h,
                                  blk->ln_2_weight.data, blk->ln_2_bias.data, N, C));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &blk->linear_fc1, a->fc1, a->ln_2, N, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_gelu_forward(k, dt, a->gelu, a->fc1, N * blk->local_ffn));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &blk->linear_fc2, out, a->gelu, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(dropout_residual(tp, blk, 1, out, a->h, N * C, step));
    blk->traffic.forward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

/* The gradient entering a row-parallel branch: dres itself, or dres through the dropout mask
 * (into d_ln, free at that point). */
static const void *branch_grad(const zoe_tp *tp, const zoe_tp_block *blk, int site,
                               const void *dres, void *d_ln, int64_t n, uint64_t step,
                               zoe_status *st) {
    *st = ZOE_OK;
    if (blk->cfg.hidden_dropout <= 0.0f) return dres;
    *st = zoe_tp_dropout_backward(tp, d_ln, dres, n, blk->cfg.hidden_dropout,
                                  blk->dropout_site[site], step);
    return d_ln;
}

static zoe_status zero(const zoe_tp *tp, void *p, int64_t n) {
    return zoe_memset_async(p, 0, (size_t)n * zoe_dtype_size(tp->dtype), tp->stream);
}

zoe_status zoe_tp_block_backward(const zoe_tp *tp, zoe_tp_block *blk, const zoe_tp_block_acts *a,
                                 void *dres, const void *x, void *scratch,
                                 const zoe_tp_weights *w) {
    if (!scratch) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "block backward: NULL scratch");
    zoe_kernels *k = tp->kernels;
    zoe_dtype dt = tp->dtype;
    int64_t B = a->B, T = a->T, N = B * T, C = blk->cfg.hidden, F = blk->local_ffn;
    block_scratch s;
    zoe_tp_carver c = {.base = scratch};
    carve_scratch(blk, &s, &c, B, T, dt);
    uint64_t before = zoe_comm_bytes(tp->comm);
    zoe_status st;

    /* MLP branch: out = h + drop(fc2(gelu(fc1(ln_2(h))))). dres is d(out) = the residual part
     * of d(h). */
    const void *d_fc2 = branch_grad(tp, blk, 1, dres, s.d_ln, N * C, a->step, &st);
    ZOE_TRY(st);
    void *d_gelu = s.wide0, *d_fc1 = s.wide1;
    ZOE_TRY(zero(tp, d_gelu, N * F));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zoe_tp_row_linear_backward(tp, &blk->linear_fc2, d_gelu, d_fc2, a->gelu, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    ZOE_TRY(zero(tp, d_fc1, N * F));
    ZOE_TRY(zoe_gelu_backward(k, dt, d_fc1, d_gelu, a->fc1, N * F));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_tp_column_linear_backward(tp, &blk->linear_fc1, s.d_ln, d_fc1, a->ln_2, N, NULL));
    ZOE_TRY(zoe_layernorm_backward(k, dt, dres, blk->ln_2_weight.grad, blk->ln_2_bias.grad, s.d_ln,
                                   a->h, blk->ln_2_weight.data, a->ln_2_mean, a->ln_2_rstd, N, C));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));

    /* Attention branch: h = x + drop(proj(attn(qkv(ln_1(x))))); dres is now d(h). */
    const void *d_proj = branch_grad(tp, blk, 0, dres, s.d_ln, N * C, a->step, &st);
    ZOE_TRY(st);
    int64_t C_local = blk->local_heads * blk->head_dim;
    void *d_attn = s.wide1, *d_qkv = s.wide0;
    ZOE_TRY(zero(tp, d_attn, N * C_local));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_tp_row_linear_backward(tp, &blk->linear_proj, d_attn, d_proj, a->attn, N));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zero(tp, d_qkv, N * blk->linear_qkv.out_local));
    ZOE_TRY(zoe_attention_backward(k, dt, d_qkv, d_attn, a->qkv, a->attn, a->attn_lse, B, T,
                                   blk->local_heads, blk->head_dim));
    ZOE_TRY(take(w, blk, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_tp_column_linear_backward(tp, &blk->linear_qkv, s.d_ln, d_qkv, a->ln_1, N, NULL));
    ZOE_TRY(zoe_layernorm_backward(k, dt, dres, blk->ln_1_weight.grad, blk->ln_1_bias.grad, s.d_ln,
                                   x, blk->ln_1_weight.data, a->ln_1_mean, a->ln_1_rstd, N, C));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    blk->traffic.backward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

uint64_t zoe_tp_block_comm_bytes_formula(const zoe_tp_block *blk, int64_t B, int64_t T,
                                         zoe_dtype dtype, int tp_size) {
    if (tp_size <= 1) return 0;
    return 2u * (uint64_t)(B * T * blk->cfg.hidden) * zoe_dtype_size(dtype);
}
