/* Incremental decoding (models/gpt.h): the forward of a chunk of new tokens of one sequence at
 * positions [pos, pos + n), each block's keys and values appended to a per-layer cache of this
 * rank's heads, attention over the cache (zoe_attention_cached), no dropout. The blocks' own
 * layers and collectives do the rest, so a decode step moves exactly the training forward's
 * all-reduces for n rows: the embedding's, and the two row-parallel ones per block.
 *
 * The caches are laid out so the column-parallel projections write into them directly:
 *   GPT    qkv cache [max_tokens, NH/t, 3, HS]: linear_qkv's output rows (q is kept too; it is
 *          a third of the cache and saves a strided copy per step)
 *   Llama  kv cache  [max_tokens, KV_local, 2, HS]: linear_kv's output rows, keys rotated in
 *          place at their positions.
 *
 * Explained in docs/generate.md, "The key-value cache". */
#include <stdlib.h>
#include <string.h>
#include "models/gpt.h"
#include "models/gpt_impl.h"
#include "runtime/error.h"

struct zoe_gpt_kv_cache {
    zoe_device *dev;
    int64_t max_tokens, max_chunk, length;
    int64_t cache_row; /* elements per position of one layer's cache */
    void *arena;
    void **layers;        /* [L] x [max_tokens, cache_row] */
    int32_t *tokens;      /* device [max_chunk] */
    int32_t *staged;      /* pinned host [max_chunk] */
    void *x, *y, *ln, *h; /* [chunk, C]: block input and output, norm output, attention residual */
    float *mean, *rstd;   /* [chunk] */
    void *q;              /* Llama: [chunk, NH/t, HS] */
    void *attn;           /* [chunk, NH/t, HS] */
    void *fc1, *act;      /* [chunk, F/t or 2 F/t], [chunk, F/t] */
    void *logits;         /* [chunk, vocab.local] */
};

static int64_t cache_row(const zoe_gpt *g) {
    return g->llama ? g->llama_blocks[0].linear_kv.out_local : g->blocks[0].linear_qkv.out_local;
}

/* Sizes (base NULL) or carves the cache's device allocation. */
static size_t layout(const zoe_gpt *g, zoe_gpt_kv_cache *c, char *base) {
    const size_t es = zoe_dtype_size(g->cfg.dtype), n = (size_t)c->max_chunk;
    const size_t C = (size_t)g->C;
    const size_t heads = g->llama ? (size_t)g->llama_blocks[0].linear_q.out_local
                                  : (size_t)(g->blocks[0].local_heads * g->blocks[0].head_dim);
    const size_t ffn =
        g->llama ? (size_t)g->llama_blocks[0].local_ffn : (size_t)g->blocks[0].local_ffn;
    zoe_tp_carver k = {.base = base};
    for (int l = 0; l < g->cfg.shape.layers; l++)
        c->layers[l] = zoe_tp_carve(&k, (size_t)(c->max_tokens * c->cache_row) * es);
    c->tokens = zoe_tp_carve(&k, n * sizeof(int32_t));
    c->x = zoe_tp_carve(&k, n * C * es);
    c->y = zoe_tp_carve(&k, n * C * es);
    c->ln = zoe_tp_carve(&k, n * C * es);
    c->h = zoe_tp_carve(&k, n * C * es);
    c->mean = zoe_tp_carve(&k, n * sizeof(float));
    c->rstd = zoe_tp_carve(&k, n * sizeof(float));
    c->q = g->llama ? zoe_tp_carve(&k, n * heads * es) : NULL;
    c->attn = zoe_tp_carve(&k, n * heads * es);
    c->fc1 = zoe_tp_carve(&k, n * (g->llama ? 2 : 1) * ffn * es);
    c->act = zoe_tp_carve(&k, n * ffn * es);
    c->logits = zoe_tp_carve(&k, n * (size_t)g->emb.vocab.local * es);
    return k.used;
}

zoe_status zoe_gpt_kv_cache_create(zoe_gpt *g, int64_t max_tokens, int64_t max_chunk,
                                   zoe_gpt_kv_cache **out) {
    if (!g || !out || !g->dev)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpt_kv_cache_create: NULL argument or a "
                                                  "described model");
    *out = NULL;
    if (max_tokens <= 0 || max_tokens > g->cfg.shape.seq_len)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "KV cache of %lld tokens: outside [1, %d], the model's context",
                        (long long)max_tokens, g->cfg.shape.seq_len);
    if (max_chunk <= 0 || max_chunk > max_tokens || max_chunk > g->N)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "decode chunk of %lld tokens: outside [1, %lld] (the cache and the "
                        "model's %lld rows per forward)",
                        (long long)max_chunk, (long long)max_tokens, (long long)g->N);
    zoe_gpt_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "KV cache struct");
    c->dev = g->dev;
    c->max_tokens = max_tokens, c->max_chunk = max_chunk, c->cache_row = cache_row(g);
    c->layers = calloc((size_t)g->cfg.shape.layers, sizeof *c->layers);
    zoe_status st = c->layers ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "KV cache table");
    const size_t bytes = st == ZOE_OK ? layout(g, c, NULL) : 0;
    if (st == ZOE_OK) st = zoe_device_alloc_for(g->dev, bytes, "the KV cache", &c->arena);
    if (st == ZOE_OK) layout(g, c, c->arena);
    if (st == ZOE_OK)
        st = zoe_host_alloc_for(g->dev, (size_t)max_chunk * sizeof(int32_t),
                                "the decoder's staged tokens", (void **)&c->staged);
    /* NaN poison, as the model's arena: a read of a position no step wrote shows at once */
    if (st == ZOE_OK) st = zoe_memset_async(c->arena, 0xff, bytes, g->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(g->stream);
    if (st != ZOE_OK) {
        zoe_gpt_kv_cache_destroy(c);
        return st;
    }
    *out = c;
    return ZOE_OK;
}

void zoe_gpt_kv_cache_destroy(zoe_gpt_kv_cache *c) {
    if (!c) return;
    zoe_device_free(c->dev, c->arena);
    zoe_host_free(c->dev, c->staged);
    free(c->layers);
    free(c);
}

int64_t zoe_gpt_kv_cache_length(const zoe_gpt_kv_cache *c) {
    return c ? c->length : -1;
}
void zoe_gpt_kv_cache_reset(zoe_gpt_kv_cache *c) {
    if (c) c->length = 0;
}
const void *zoe_gpt_kv_cache_logits(const zoe_gpt_kv_cache *c) {
    return c ? c->logits : NULL;
}

/* GPT block l on c->x [n, C] into c->y, its new tokens' q, k, v into the layer's cache. */
static zoe_status gpt_block(zoe_gpt *g, zoe_gpt_kv_cache *c, int l, int64_t pos, int64_t n,
                            const zoe_tp_weights *w) {
    const zoe_tp *tp = &g->tp;
    zoe_tp_block *b = &g->blocks[l];
    const zoe_dtype dt = tp->dtype;
    const int64_t C = g->C, NHl = b->local_heads, HS = b->head_dim, row = c->cache_row;
    const size_t es = zoe_dtype_size(dt);
    char *cache = c->layers[l];
    void *qkv = cache + (size_t)(pos * row) * es; /* [n, NH/t, 3, HS] */
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_ATTN_IN, NULL, 0));
    ZOE_TRY(zoe_layernorm_forward(tp->kernels, dt, c->ln, c->mean, c->rstd, c->x,
                                  b->ln_1_weight.data, b->ln_1_bias.data, n, C));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &b->linear_qkv, qkv, c->ln, n, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_attention_cached(tp->kernels, dt, c->attn, qkv, cache + (size_t)HS * es, pos, n,
                                 NHl, NHl, HS, 3 * HS, row, 3 * HS, row));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_ATTN_OUT, NULL, 0));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &b->linear_proj, c->h, c->attn, n));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_residual_forward(tp->kernels, dt, c->h, c->x, c->h, n * C));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_MLP_IN, NULL, 0));
    ZOE_TRY(zoe_layernorm_forward(tp->kernels, dt, c->ln, c->mean, c->rstd, c->h,
                                  b->ln_2_weight.data, b->ln_2_bias.data, n, C));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &b->linear_fc1, c->fc1, c->ln, n, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_gelu_forward(tp->kernels, dt, c->act, c->fc1, n * b->local_ffn));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_MLP_OUT, NULL, 0));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &b->linear_fc2, c->y, c->act, n));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    return zoe_residual_forward(tp->kernels, dt, c->y, c->h, c->y, n * C);
}

/* Llama block l: q [n, NH/t, HS] and the new kv rows [n, KV_local, 2, HS] rotated at their
 * positions, then attention over the layer's cache. */
static zoe_status llama_block(zoe_gpt *g, zoe_gpt_kv_cache *c, int l, int64_t pos, int64_t n,
                              const zoe_tp_weights *w) {
    const zoe_tp *tp = &g->tp;
    zoe_tp_llama_block *b = &g->llama_blocks[l];
    const zoe_dtype dt = tp->dtype;
    const int64_t C = g->C, NHl = b->local_heads, KVl = b->local_kv_heads, HS = b->head_dim;
    const int64_t row = c->cache_row;
    const float eps = b->cfg.norm_eps;
    char *cache = c->layers[l];
    void *kv = cache + (size_t)(pos * row) * zoe_dtype_size(dt);
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_ATTN_IN, NULL, 0));
    ZOE_TRY(
        zoe_rmsnorm_forward(tp->kernels, dt, c->ln, c->rstd, c->x, b->ln_1_weight.data, n, C, eps));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &b->linear_q, c->q, c->ln, n, NULL));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &b->linear_kv, kv, c->ln, n, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_IN));
    ZOE_TRY(zoe_rope_forward_at(tp->kernels, dt, c->q, b->inv_freq, pos, n, NHl, HS, HS, NHl * HS));
    ZOE_TRY(zoe_rope_forward_at(tp->kernels, dt, kv, b->inv_freq, pos, n, KVl, HS, 2 * HS, row));
    ZOE_TRY(zoe_attention_cached(tp->kernels, dt, c->attn, c->q, cache, pos, n, NHl, KVl, HS, HS,
                                 NHl * HS, 2 * HS, row));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_ATTN_OUT, NULL, 0));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &b->linear_proj, c->h, c->attn, n));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_ATTN_OUT));
    ZOE_TRY(zoe_residual_forward(tp->kernels, dt, c->h, c->x, c->h, n * C));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_MLP_IN, NULL, 0));
    ZOE_TRY(
        zoe_rmsnorm_forward(tp->kernels, dt, c->ln, c->rstd, c->h, b->ln_2_weight.data, n, C, eps));
    ZOE_TRY(zoe_tp_column_linear_forward(tp, &b->linear_fc1, c->fc1, c->ln, n, NULL));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_IN));
    ZOE_TRY(zoe_swiglu_forward(tp->kernels, dt, c->act, c->fc1, n, b->local_ffn));
    ZOE_TRY(zoe_tp_weights_acquire(w, ZOE_TP_PART_MLP_OUT, NULL, 0));
    ZOE_TRY(zoe_tp_row_linear_forward(tp, &b->linear_fc2, c->y, c->act, n));
    ZOE_TRY(zoe_tp_weights_release(w, ZOE_TP_PART_MLP_OUT));
    return zoe_residual_forward(tp->kernels, dt, c->y, c->h, c->y, n * C);
}

zoe_status zoe_gpt_decode(zoe_gpt *g, zoe_gpt_kv_cache *c, const int32_t *tokens, int64_t n) {
    if (!g || !c || !tokens)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpt_decode: NULL argument");
    const int64_t pos = c->length;
    if (n <= 0 || n > c->max_chunk)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "decode of %lld tokens: outside [1, %lld]",
                        (long long)n, (long long)c->max_chunk);
    if (pos + n > c->max_tokens)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "decode: %lld tokens after %lld overflow the KV cache of %lld",
                        (long long)n, (long long)pos, (long long)c->max_tokens);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->cfg.shape.vocab)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "token %d at position %lld outside [0, %d)",
                            tokens[i], (long long)(pos + i), g->cfg.shape.vocab);
    memcpy(c->staged, tokens, (size_t)n * sizeof(int32_t));
    ZOE_TRY(zoe_memcpy_async(c->tokens, c->staged, (size_t)n * sizeof(int32_t),
                             ZOE_COPY_HOST_TO_DEVICE, g->stream));
    /* the units of the weight source */
    const int L = g->cfg.shape.layers, tail = zoe_gpt_num_units(g) - 1;
    ZOE_TRY(zoe_gpt_acquire_unit(g, 0, ZOE_GPT_FORWARD));
    ZOE_TRY(zoe_tp_embedding_forward_at(&g->tp, &g->emb, c->x, c->tokens, n, pos));
    for (int l = 0; l < L; l++) {
        zoe_gpt_block_source src = {
            .g = g, .l = l, .pass = ZOE_GPT_FORWARD, .keep = -1, .found = -1};
        const zoe_tp_weights w = zoe_gpt_block_weights(&src);
        ZOE_TRY(g->llama ? llama_block(g, c, l, pos, n, &w) : gpt_block(g, c, l, pos, n, &w));
        void *t = c->x; /* the output is the next block's input */
        c->x = c->y, c->y = t;
    }
    ZOE_TRY(zoe_gpt_acquire_unit(g, tail, ZOE_GPT_FORWARD));
    if (g->llama)
        ZOE_TRY(zoe_rmsnorm_forward(g->kernels, g->cfg.dtype, c->ln, c->rstd, c->x,
                                    g->ln_f_weight.data, n, g->C, g->llama_blocks[0].cfg.norm_eps));
    else
        ZOE_TRY(zoe_layernorm_forward(g->kernels, g->cfg.dtype, c->ln, c->mean, c->rstd, c->x,
                                      g->ln_f_weight.data, g->ln_f_bias.data, n, g->C));
    ZOE_TRY(zoe_tp_lm_head_forward(&g->tp, &g->emb, c->logits, c->ln, n));
    ZOE_TRY(zoe_gpt_release_unit(g, tail));
    ZOE_TRY(zoe_gpt_release_unit(g, 0));
    ZOE_TRY(zoe_stream_synchronize(g->stream));
    c->length = pos + n;
    return ZOE_OK;
}
