/* The model of models/gpt.h, GPT or Llama: composition of the tensor_parallel layers, one planned
 * activation allocation, and the backward that hands each tensor's gradient to the sink as it
 * completes. The two families differ in their blocks, the final norm, positions (learned or
 * rotary) and the LM head (tied, or for Llama optionally its own); the rest is shared.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include "models/gpt.h"
#include "models/gpt_impl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "zoe/comm.h"

/* The activation layout, run twice: with base NULL to size it, then to carve it. */
static size_t layout(zoe_gpt *g, char *base) {
    const zoe_gpt_config *c = &g->cfg;
    size_t es = zoe_dtype_size(c->dtype), NC = (size_t)(g->N * g->C) * es;
    size_t N = (size_t)g->N;
    int L = c->shape.layers, nacts = c->recompute ? 1 : L;
    int64_t B = c->micro_batch, T = c->shape.seq_len;
    zoe_tp_carver k = {.base = base};
    g->tokens = zoe_tp_carve(&k, N * sizeof(int32_t));
    g->targets = zoe_tp_carve(&k, N * sizeof(int32_t));
    for (int l = 0; l <= L; l++) g->resid[l] = zoe_tp_carve(&k, NC);
    size_t acts = g->llama ? zoe_tp_llama_block_acts_bytes(&g->llama_blocks[0], B, T, c->dtype)
                           : zoe_tp_block_acts_bytes(&g->blocks[0], B, T, c->dtype);
    for (int a = 0; a < nacts; a++) {
        void *p = zoe_tp_carve(&k, acts);
        if (base && g->llama)
            zoe_tp_llama_block_acts_bind(&g->llama_blocks[a], &g->llama_acts[a], p, B, T, c->dtype);
        else if (base)
            zoe_tp_block_acts_bind(&g->blocks[a], &g->acts[a], p, B, T, c->dtype);
    }
    if (c->recompute) g->recompute_out = zoe_tp_carve(&k, NC);
    g->block_scratch = zoe_tp_carve(
        &k, g->llama ? zoe_tp_llama_block_scratch_bytes(&g->llama_blocks[0], B, T, c->dtype)
                     : zoe_tp_block_scratch_bytes(&g->blocks[0], B, T, c->dtype));
    if (g->llama)
        g->inv_freq = zoe_tp_carve(&k, (size_t)(g->llama_blocks[0].head_dim / 2) * sizeof(float));
    g->ln_f = zoe_tp_carve(&k, NC);
    g->d_ln_f = zoe_tp_carve(&k, NC);
    g->dres = zoe_tp_carve(&k, NC);
    g->ln_f_mean = zoe_tp_carve(&k, N * sizeof(float));
    g->ln_f_rstd = zoe_tp_carve(&k, N * sizeof(float));
    g->logits = zoe_tp_carve(&k, N * (size_t)g->emb.vocab.local * es);
    g->xent_stats = zoe_tp_carve(&k, zoe_tp_xent_stats_bytes(g->N));
    return k.used;
}

static zoe_status describe_gpt(zoe_gpt *g, int tp_size, int tp_rank) {
    const zoe_model_config *m = &g->cfg.shape;
    ZOE_TRY(zoe_tp_embedding_init(&g->emb, "", m->vocab, g->cfg.pad_multiple, m->hidden,
                                  zoe_model_position_rows(m), 0.02f, tp_size, tp_rank));
    g->tensors[g->num_tensors++] = &g->emb.wte;
    g->tensors[g->num_tensors++] = &g->emb.wpe;
    /* GPT-2's scaled init of the residual projections: 0.02 / sqrt(2 L). */
    zoe_tp_block_config bc = {.hidden = m->hidden,
                              .heads = m->heads,
                              .ffn = m->ffn ? m->ffn : 4 * (int64_t)m->hidden,
                              .hidden_dropout = m->dropout,
                              .init_std = 0.02f,
                              .proj_init_std = 0.02f / sqrtf(2.0f * (float)m->layers)};
    g->first_block = g->num_tensors;
    g->block_params = ZOE_TP_BLOCK_PARAMS;
    for (int l = 0; l < m->layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%d.", l);
        ZOE_TRY(zoe_tp_block_init(&g->blocks[l], prefix, &bc, tp_size, tp_rank));
        g->num_tensors += zoe_tp_block_params(&g->blocks[l], g->tensors + g->num_tensors);
    }
    ZOE_TRY(zoe_tp_param_describe(&g->ln_f_weight, "ln_f.weight", 1, m->hidden, 1,
                                  ZOE_TP_REPLICATED, ZOE_TP_INIT_ONES, 0, tp_size, tp_rank));
    ZOE_TRY(zoe_tp_param_describe(&g->ln_f_bias, "ln_f.bias", 1, m->hidden, 1, ZOE_TP_REPLICATED,
                                  ZOE_TP_INIT_ZEROS, 0, tp_size, tp_rank));
    g->ln_f_tensor = g->num_tensors, g->ln_f_n = 2, g->head = -1;
    g->tensors[g->num_tensors++] = &g->ln_f_weight;
    g->tensors[g->num_tensors++] = &g->ln_f_bias;
    return ZOE_OK;
}

/* Llama: no position table (RoPE), blocks of models' kv_heads, ln_f an RMSNorm weight, and the
 * head tied or its own tensor after ln_f. Hugging Face's initializer_range 0.02 throughout. */
static zoe_status describe_llama(zoe_gpt *g, int tp_size, int tp_rank) {
    const zoe_model_config *m = &g->cfg.shape;
    ZOE_TRY(zoe_tp_embedding_init(&g->emb, "", m->vocab, g->cfg.pad_multiple, m->hidden, 0, 0.02f,
                                  tp_size, tp_rank));
    g->tensors[g->num_tensors++] = &g->emb.wte;
    zoe_tp_llama_block_config bc = {.hidden = m->hidden,
                                    .heads = m->heads,
                                    .kv_heads = m->kv_heads ? m->kv_heads : m->heads,
                                    .ffn = m->ffn ? m->ffn : 4 * (int64_t)m->hidden,
                                    .norm_eps = m->norm_eps > 0 ? m->norm_eps : 1e-5f,
                                    .init_std = 0.02f,
                                    .proj_init_std = 0.02f};
    g->first_block = g->num_tensors;
    g->block_params = ZOE_TP_LLAMA_BLOCK_PARAMS;
    for (int l = 0; l < m->layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%d.", l);
        ZOE_TRY(zoe_tp_llama_block_init(&g->llama_blocks[l], prefix, &bc, tp_size, tp_rank));
        g->num_tensors +=
            zoe_tp_llama_block_params(&g->llama_blocks[l], g->tensors + g->num_tensors);
    }
    ZOE_TRY(zoe_tp_param_describe(&g->ln_f_weight, "ln_f.weight", 1, m->hidden, 1,
                                  ZOE_TP_REPLICATED, ZOE_TP_INIT_ONES, 0, tp_size, tp_rank));
    g->ln_f_tensor = g->num_tensors, g->ln_f_n = 1, g->head = -1;
    g->tensors[g->num_tensors++] = &g->ln_f_weight;
    if (!m->tie_embeddings) {
        ZOE_TRY(zoe_tp_embedding_untie(&g->emb, "lm_head.weight", 0.02f, tp_size, tp_rank));
        g->head = g->num_tensors;
        g->tensors[g->num_tensors++] = &g->emb.head;
    }
    return ZOE_OK;
}

/* Hugging Face's RoPE frequencies: theta^(-2i/HS) in fp32, and with Llama 3 scaling, the low
 * frequencies (wavelength above original / low_freq_factor) divided by factor, the high ones
 * kept, and the band between blended smoothly (transformers' _compute_llama3_parameters). */
static void rope_frequencies(const zoe_model_config *m, int64_t HS, float *out) {
    const double theta = m->rope_theta > 0 ? m->rope_theta : 10000.0;
    const zoe_rope_scaling *rs = &m->rope_scaling;
    for (int64_t i = 0; i < HS / 2; i++) {
        float f = (float)(1.0 / pow(theta, (double)(2 * i) / (double)HS));
        if (rs->factor > 0) {
            const float old = (float)rs->original_max_position;
            const float wavelen = 2.0f * 3.14159265358979323846f / f;
            const float low_wavelen = old / rs->low_freq_factor;
            const float high_wavelen = old / rs->high_freq_factor;
            if (wavelen > low_wavelen) {
                f = f / rs->factor;
            } else if (!(wavelen < high_wavelen)) {
                const float smooth = (old / wavelen - rs->low_freq_factor) /
                                     (rs->high_freq_factor - rs->low_freq_factor);
                f = (1.0f - smooth) * f / rs->factor + smooth * f;
            }
        }
        out[i] = f;
    }
}

/* The RoPE table on the device and, with KV replicas, their communicator; bound to every block. */
static zoe_status bind_llama_context(zoe_gpt *g) {
    const zoe_tp_llama_block *b0 = &g->llama_blocks[0];
    const int64_t half = b0->head_dim / 2;
    float *host = malloc((size_t)half * sizeof(float));
    if (!host) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "RoPE table");
    rope_frequencies(&g->cfg.shape, b0->head_dim, host);
    zoe_status st = zoe_memcpy_async(g->inv_freq, host, (size_t)half * sizeof(float),
                                     ZOE_COPY_HOST_TO_DEVICE, g->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(g->stream);
    free(host);
    ZOE_TRY(st);
    if (b0->kv_replicas > 1)
        ZOE_TRY(zoe_comm_split(g->tp.comm, zoe_tp_llama_block_kv_color(b0, g->tp.rank), g->dev,
                               &g->kv_comm));
    for (int l = 0; l < g->cfg.shape.layers; l++)
        zoe_tp_llama_block_bind_context(&g->llama_blocks[l], g->inv_freq, g->kv_comm);
    return ZOE_OK;
}

static zoe_status check_config(const zoe_gpt_config *c) {
    const zoe_model_config *m = &c->shape;
    if (m->layers <= 0 || m->hidden <= 0 || m->heads <= 0 || m->seq_len <= 0 || m->vocab <= 1 ||
        c->micro_batch <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "GPT shape: layers=%d hidden=%d heads=%d seq_len=%d vocab=%d batch=%lld "
                        "must be positive",
                        m->layers, m->hidden, m->heads, m->seq_len, m->vocab,
                        (long long)c->micro_batch);
    if (m->family == ZOE_MODEL_GPT && m->max_positions != 0 && m->max_positions < m->seq_len)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "GPT shape: seq_len=%d is longer than the position table's %d rows "
                        "(max_positions, Hugging Face's n_positions)",
                        m->seq_len, m->max_positions);
    if (m->dropout < 0 || m->dropout >= 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dropout=%g outside [0, 1)", (double)m->dropout);
    return ZOE_OK;
}

/* The description: tables, the tensors and the activation layout's size, nothing on the
 * device. zoe_gpt_create builds on it; the plan sizes a run with it alone. */
static zoe_status describe_model(const zoe_gpt_config *cfg, int tp_size, int tp_rank,
                                 zoe_gpt **out) {
    *out = NULL;
    ZOE_TRY(check_config(cfg));
    if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "GPT: tp rank %d of size %d", tp_rank, tp_size);
    zoe_gpt *g = calloc(1, sizeof *g);
    if (!g) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "GPT struct");
    int L = cfg->shape.layers;
    g->cfg = *cfg;
    g->N = cfg->micro_batch * cfg->shape.seq_len;
    g->C = cfg->shape.hidden;
    g->llama = cfg->shape.family == ZOE_MODEL_LLAMA;
    if (g->llama) {
        g->llama_blocks = calloc((size_t)L, sizeof *g->llama_blocks);
        g->llama_acts = calloc((size_t)L, sizeof *g->llama_acts);
    } else {
        g->blocks = calloc((size_t)L, sizeof *g->blocks);
        g->acts = calloc((size_t)L, sizeof *g->acts);
    }
    g->tensors = calloc((size_t)(L * ZOE_TP_BLOCK_PARAMS + GPT_MAX_TENSORS_FIXED), sizeof(void *));
    g->resid = calloc((size_t)L + 1, sizeof(void *));
    zoe_status st =
        (g->blocks || g->llama_blocks) && (g->acts || g->llama_acts) && g->tensors && g->resid
            ? ZOE_OK
            : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "model tables for %d layers", L);
    if (st == ZOE_OK)
        st = g->llama ? describe_llama(g, tp_size, tp_rank) : describe_gpt(g, tp_size, tp_rank);
    g->kernel_plan = (zoe_kernel_plan){.max_dim = g->emb.vocab.local, .tf32 = cfg->tf32};
    for (int l = 0; st == ZOE_OK && l < L; l++) {
        if (g->llama)
            zoe_tp_llama_block_plan(&g->llama_blocks[l], cfg->micro_batch, cfg->shape.seq_len,
                                    &g->kernel_plan);
        else
            zoe_tp_block_plan(&g->blocks[l], cfg->micro_batch, cfg->shape.seq_len, &g->kernel_plan);
    }
    if (g->kernel_plan.max_rows < g->N) g->kernel_plan.max_rows = g->N;
    if (g->kernel_plan.max_dim < g->C) g->kernel_plan.max_dim = g->C;
    if (st == ZOE_OK) g->arena_bytes = layout(g, NULL);
    if (st != ZOE_OK) {
        zoe_gpt_destroy(g);
        return st;
    }
    *out = g;
    return ZOE_OK;
}

zoe_status zoe_gpt_describe(const zoe_gpt_config *cfg, int tp_size, int tp_rank, zoe_gpt **out) {
    if (!out || !cfg) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpt_describe: NULL argument");
    return describe_model(cfg, tp_size, tp_rank, out);
}

zoe_status zoe_gpt_create(const zoe_gpt_config *cfg, zoe_device *dev, zoe_stream *stream,
                          zoe_comm *tp_comm, zoe_gpt **out) {
    if (!out || !cfg || !dev || !stream || !tp_comm)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_gpt_create: NULL argument");
    zoe_gpt *g = NULL;
    ZOE_TRY(describe_model(cfg, zoe_comm_size(tp_comm), zoe_comm_rank(tp_comm), &g));
    g->dev = dev;
    g->stream = stream;
    g->losses = malloc((size_t)g->N * sizeof(float));
    zoe_status st = g->losses ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "GPT loss table");
    if (st == ZOE_OK) st = zoe_kernels_create(dev, stream, &g->kernel_plan, &g->kernels);
    if (st == ZOE_OK) st = zoe_tp_init(&g->tp, g->kernels, tp_comm, cfg->dtype, cfg->seed);
    if (st == ZOE_OK)
        st = zoe_device_alloc_for(dev, g->arena_bytes, "the model's activations", &g->arena);
    if (st == ZOE_OK) layout(g, g->arena);
    if (st == ZOE_OK)
        st = zoe_host_alloc_for(dev, 2 * (size_t)g->N * sizeof(int32_t), "the staged token ids",
                                (void **)&g->staged_ids);
    /* poison: 0xff bytes are NaN in every float dtype, so a read of an activation no op wrote
     * shows in the loss instead of passing as stale zeros */
    if (st == ZOE_OK) st = zoe_memset_async(g->arena, 0xff, g->arena_bytes, stream);
    if (st == ZOE_OK && g->llama) st = bind_llama_context(g);
    if (st != ZOE_OK) {
        zoe_gpt_destroy(g);
        return st;
    }
    *out = g;
    return ZOE_OK;
}

void zoe_gpt_destroy(zoe_gpt *g) {
    if (!g) return;
    if (g->dev) zoe_device_free(g->dev, g->arena);
    if (g->dev) zoe_host_free(g->dev, g->staged_ids);
    zoe_kernels_destroy(g->kernels);
    zoe_comm_destroy(g->kv_comm);
    free(g->blocks), free(g->tensors), free(g->resid), free(g->acts), free(g->losses);
    free(g->llama_blocks), free(g->llama_acts);
    free(g);
}

int zoe_gpt_num_tensors(const zoe_gpt *g) {
    return g->num_tensors;
}
const zoe_tp_param *zoe_gpt_tensor(const zoe_gpt *g, int t) {
    return t >= 0 && t < g->num_tensors ? g->tensors[t] : NULL;
}
size_t zoe_gpt_activation_bytes(const zoe_gpt *g) {
    return g->arena_bytes;
}
const zoe_kernel_plan *zoe_gpt_kernel_plan(const zoe_gpt *g) {
    return &g->kernel_plan;
}
zoe_tp *zoe_gpt_tp(zoe_gpt *g) {
    return &g->tp;
}
void zoe_gpt_kernel_profile(zoe_gpt *g, zoe_kernel_profile *out, int reset) {
    zoe_kernels_profile(g->tp.kernels, out);
    if (reset) zoe_kernels_profile_reset(g->tp.kernels);
}
const zoe_tp_embedding *zoe_gpt_embedding(const zoe_gpt *g) {
    return &g->emb;
}
const zoe_tp_block *zoe_gpt_block(const zoe_gpt *g, int l) {
    return !g->llama && l >= 0 && l < g->cfg.shape.layers ? &g->blocks[l] : NULL;
}
const zoe_tp_llama_block *zoe_gpt_llama_block(const zoe_gpt *g, int l) {
    return g->llama && l >= 0 && l < g->cfg.shape.layers ? &g->llama_blocks[l] : NULL;
}
const zoe_model_config *zoe_gpt_shape(const zoe_gpt *g) {
    return &g->cfg.shape;
}
const void *zoe_gpt_logits(const zoe_gpt *g) {
    return g->logits;
}
int64_t zoe_gpt_loss_count(const zoe_gpt *g) {
    return g->count;
}

uint64_t zoe_gpt_forward_count(const zoe_gpt *g) {
    return g->micro_step;
}
void zoe_gpt_set_forward_count(zoe_gpt *g, uint64_t count) {
    g->micro_step = count;
}

int64_t zoe_gpt_local_numel(const zoe_gpt *g) {
    int64_t n = 0;
    for (int t = 0; t < g->num_tensors; t++) n += g->tensors[t]->local_numel;
    return n;
}

int64_t zoe_gpt_global_numel(const zoe_gpt *g) {
    int64_t n = 0;
    for (int t = 0; t < g->num_tensors; t++)
        n += g->tensors[t]->global_shape[0] * g->tensors[t]->global_shape[1];
    return n;
}

int64_t zoe_gpt_block_local_numel(const zoe_gpt *g) {
    int64_t n = 0;
    for (int t = g->first_block; t < g->first_block + g->block_params && t < g->num_tensors; t++)
        n += g->tensors[t]->local_numel;
    return n;
}

zoe_status zoe_gpt_bind_tensors(zoe_gpt *g, int first, int n, void *const *ptrs) {
    if (first < 0 || n < 0 || first > g->num_tensors - n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "binding of tensors [%d, %d) outside [0, %d)",
                        first, first + n, g->num_tensors);
    for (int i = 0; i < n; i++)
        if (!ptrs[i])
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weights of %s: NULL pointer",
                            g->tensors[first + i]->name);
    for (int i = 0; i < n; i++) g->tensors[first + i]->data = ptrs[i];
    return ZOE_OK;
}

zoe_status zoe_gpt_bind_weights(zoe_gpt *g, void *const *ptrs) {
    return zoe_gpt_bind_tensors(g, 0, g->num_tensors, ptrs);
}

zoe_status zoe_gpt_init_tensors(zoe_gpt *g, int first, int n) {
    if (first < 0 || n < 0 || first > g->num_tensors - n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "init of tensors [%d, %d) outside [0, %d)", first,
                        first + n, g->num_tensors);
    for (int t = first; t < first + n; t++) ZOE_TRY(zoe_tp_param_init(&g->tp, g->tensors[t]));
    return zoe_stream_synchronize(g->stream);
}

zoe_status zoe_gpt_init_weights(zoe_gpt *g) {
    return zoe_gpt_init_tensors(g, 0, g->num_tensors);
}

int zoe_gpt_num_units(const zoe_gpt *g) {
    return g->cfg.shape.layers * ZOE_TP_BLOCK_PARTS + 2;
}

/* Block part `part`'s tensors within the block (zoe_tp_block_part, zoe_tp_llama_block_part). */
static void block_part(const zoe_gpt *g, int part, int *first, int *n) {
    if (g->llama)
        zoe_tp_llama_block_part(part, first, n);
    else
        zoe_tp_block_part(part, first, n);
}

static int block_unit(int l, int part) {
    return 1 + l * ZOE_TP_BLOCK_PARTS + part;
}

void zoe_gpt_unit(const zoe_gpt *g, int u, int *first, int *n) {
    const int tail = zoe_gpt_num_units(g) - 1;
    if (u == 0) {
        *first = 0, *n = g->first_block;
    } else if (u == tail) {
        *first = g->ln_f_tensor, *n = g->num_tensors - g->ln_f_tensor;
    } else {
        int l = (u - 1) / ZOE_TP_BLOCK_PARTS, in_block;
        block_part(g, (u - 1) % ZOE_TP_BLOCK_PARTS, &in_block, n);
        *first = g->first_block + l * g->block_params + in_block;
    }
}

int zoe_gpt_pass_order(const zoe_gpt *g, zoe_gpt_pass pass, int *order) {
    const int L = g->cfg.shape.layers, P = ZOE_TP_BLOCK_PARTS, tail = zoe_gpt_num_units(g) - 1;
    int n = 0;
#define PUT(unit) (order ? order[n] = (unit) : 0, n++)
    PUT(0); /* the embedding (and a tied head), first in both */
    if (pass == ZOE_GPT_FORWARD) {
        for (int u = 1; u <= tail; u++) PUT(u);
        return n;
    }
    PUT(tail);
    for (int l = L - 1; l >= 0; l--) {
        /* the recomputing forward's parts; its last is kept for the backward (block_source) */
        for (int p = 0; g->cfg.recompute && p < P; p++) PUT(block_unit(l, p));
        for (int p = g->cfg.recompute ? P - 2 : P - 1; p >= 0; p--) PUT(block_unit(l, p));
    }
#undef PUT
    return n;
}

zoe_status zoe_gpt_acquire_unit(zoe_gpt *g, int u, zoe_gpt_pass pass) {
    if (!g->source.acquire) return ZOE_OK;
    int first, n;
    zoe_gpt_unit(g, u, &first, &n);
    void *weights[ZOE_TP_BLOCK_PARAMS > GPT_MAX_TENSORS_FIXED ? ZOE_TP_BLOCK_PARAMS
                                                              : GPT_MAX_TENSORS_FIXED];
    for (int i = 0; i < n; i++) weights[i] = g->tensors[first + i]->data;
    ZOE_TRY(g->source.acquire(g->source.user, first, n, pass, weights));
    for (int i = 0; i < n; i++) g->tensors[first + i]->data = weights[i];
    return ZOE_OK;
}

zoe_status zoe_gpt_release_unit(zoe_gpt *g, int u) {
    if (!g->source.release) return ZOE_OK;
    int first, n;
    zoe_gpt_unit(g, u, &first, &n);
    return g->source.release(g->source.user, first, n);
}

static float llama_eps(const zoe_gpt *g) {
    return g->llama_blocks[0].cfg.norm_eps;
}

static zoe_status part_acquire(void *user, int part) {
    zoe_gpt_block_source *s = user;
    if (part == s->found) return ZOE_OK;
    return zoe_gpt_acquire_unit(s->g, block_unit(s->l, part), s->pass);
}

static zoe_status part_release(void *user, int part) {
    zoe_gpt_block_source *s = user;
    if (part == s->keep) return ZOE_OK;
    return zoe_gpt_release_unit(s->g, block_unit(s->l, part));
}

zoe_tp_weights zoe_gpt_block_weights(zoe_gpt_block_source *src) {
    return (zoe_tp_weights){.user = src, .acquire = part_acquire, .release = part_release};
}

/* Block l's forward from resid[l] into out (resid[l + 1], or the recompute buffer), with the
 * activations of its slot and its weights from src. */
static zoe_status block_forward(zoe_gpt *g, int l, void *out, uint64_t step,
                                zoe_gpt_block_source *src) {
    const int slot = g->cfg.recompute ? 0 : l;
    const zoe_tp_weights w = zoe_gpt_block_weights(src);
    if (g->llama)
        return zoe_tp_llama_block_forward(&g->tp, &g->llama_blocks[l], &g->llama_acts[slot], out,
                                          g->resid[l], &w);
    return zoe_tp_block_forward(&g->tp, &g->blocks[l], &g->acts[slot], out, g->resid[l], step, &w);
}

/* Block l's backward (its forward first, with recomputation), dres in place. */
static zoe_status block_backward(zoe_gpt *g, int l) {
    const int slot = g->cfg.recompute ? 0 : l, last = ZOE_TP_BLOCK_PARTS - 1;
    zoe_gpt_block_source src = {.g = g, .l = l, .pass = ZOE_GPT_BACKWARD, .keep = -1, .found = -1};
    if (g->cfg.recompute) {
        /* same micro step, so the same dropout masks */
        src.keep = last;
        ZOE_TRY(block_forward(g, l, g->recompute_out, g->llama ? 0 : g->acts[slot].step, &src));
        src.keep = -1, src.found = last;
    }
    const zoe_tp_weights w = zoe_gpt_block_weights(&src);
    if (g->llama)
        return zoe_tp_llama_block_backward(&g->tp, &g->llama_blocks[l], &g->llama_acts[slot],
                                           g->dres, g->resid[l], g->block_scratch, &w);
    return zoe_tp_block_backward(&g->tp, &g->blocks[l], &g->acts[slot], g->dres, g->resid[l],
                                 g->block_scratch, &w);
}

void zoe_gpt_set_weight_source(zoe_gpt *g, const zoe_gpt_weight_source *source) {
    if (g) g->source = source ? *source : (zoe_gpt_weight_source){0};
}

/* The forward with dropout masks keyed by step (ZOE_TP_NO_DROPOUT: none). */
static zoe_status forward_at(zoe_gpt *g, const int32_t *tokens, const int32_t *targets, float *loss,
                             uint64_t step) {
    const zoe_gpt_config *c = &g->cfg;
    int L = c->shape.layers;
    int64_t B = c->micro_batch, T = c->shape.seq_len;
    for (int64_t i = 0; i < g->N; i++)
        if (tokens[i] < 0 || tokens[i] >= c->shape.vocab)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "token %d at position %lld outside [0, %d)",
                            tokens[i], (long long)i, c->shape.vocab);
    /* Through pinned memory, so the copies are true DMA without a pageable bounce. The previous
     * forward's copies from staged_ids are done: its loss (zoe_xent_loss) waited for the stream. */
    size_t ids = (size_t)g->N * sizeof(int32_t);
    memcpy(g->staged_ids, tokens, ids);
    memcpy(g->staged_ids + g->N, targets, ids);
    ZOE_TRY(zoe_memcpy_async(g->tokens, g->staged_ids, ids, ZOE_COPY_HOST_TO_DEVICE, g->stream));
    ZOE_TRY(zoe_memcpy_async(g->targets, g->staged_ids + g->N, ids, ZOE_COPY_HOST_TO_DEVICE,
                             g->stream));
    const int tail = zoe_gpt_num_units(g) - 1;            /* units: zoe_gpt_unit */
    ZOE_TRY(zoe_gpt_acquire_unit(g, 0, ZOE_GPT_FORWARD)); /* wte (and the tied head), wpe */
    ZOE_TRY(zoe_tp_embedding_forward(&g->tp, &g->emb, g->resid[0], g->tokens, B, T));
    for (int l = 0; l < L; l++) {
        zoe_gpt_block_source src = {
            .g = g, .l = l, .pass = ZOE_GPT_FORWARD, .keep = -1, .found = -1};
        ZOE_TRY(block_forward(g, l, g->resid[l + 1], step, &src));
    }
    ZOE_TRY(zoe_gpt_acquire_unit(g, tail, ZOE_GPT_FORWARD));
    if (g->llama)
        ZOE_TRY(zoe_rmsnorm_forward(g->kernels, c->dtype, g->ln_f, g->ln_f_rstd, g->resid[L],
                                    g->ln_f_weight.data, g->N, g->C, llama_eps(g)));
    else
        ZOE_TRY(zoe_layernorm_forward(g->kernels, c->dtype, g->ln_f, g->ln_f_mean, g->ln_f_rstd,
                                      g->resid[L], g->ln_f_weight.data, g->ln_f_bias.data, g->N,
                                      g->C));
    ZOE_TRY(zoe_tp_lm_head_forward(&g->tp, &g->emb, g->logits, g->ln_f, g->N));
    ZOE_TRY(zoe_gpt_release_unit(g, tail));
    ZOE_TRY(zoe_gpt_release_unit(g, 0));
    return zoe_tp_xent_forward(&g->tp, &g->emb, g->xent_stats, g->logits, g->targets, g->N,
                               ZOE_GPT_IGNORE_INDEX, g->losses, loss, &g->count);
}

zoe_status zoe_gpt_forward(zoe_gpt *g, const int32_t *tokens, const int32_t *targets, float *loss) {
    return forward_at(g, tokens, targets, loss, ++g->micro_step);
}

zoe_status zoe_gpt_forward_eval(zoe_gpt *g, const int32_t *tokens, const int32_t *targets,
                                float *loss) {
    return forward_at(g, tokens, targets, loss, ZOE_TP_NO_DROPOUT);
}

/* Acquires, or releases, the tensors [first, first + n). */
static zoe_status acquire_range(zoe_gpt *g, const zoe_gpt_grad_sink *s, int first, int n) {
    for (int t = first; t < first + n; t++) ZOE_TRY(s->acquire(s->user, t, &g->tensors[t]->grad));
    return ZOE_OK;
}

static zoe_status release_range(const zoe_gpt_grad_sink *s, int first, int n) {
    for (int t = first + n - 1; t >= first; t--) ZOE_TRY(s->release(s->user, t));
    return ZOE_OK;
}

zoe_status zoe_gpt_backward(zoe_gpt *g, float loss_scale, const zoe_gpt_grad_sink *sink) {
    /* Every token ignored: zero gradients, but the sink still sees every tensor. */
    return zoe_gpt_backward_scaled(g, g->count > 0 ? loss_scale / (float)g->count : 0.0f, sink);
}

zoe_status zoe_gpt_backward_scaled(zoe_gpt *g, float scale, const zoe_gpt_grad_sink *sink) {
    const zoe_gpt_config *c = &g->cfg;
    int L = c->shape.layers;
    int64_t B = c->micro_batch, T = c->shape.seq_len;
    /* A tied wte's gradient is open from the LM head here to the lookup at the end; an untied
     * head is the last tensor, so it comes first. */
    const int head = g->head >= 0 ? g->head : 0, tail = zoe_gpt_num_units(g) - 1;
    ZOE_TRY(zoe_gpt_acquire_unit(g, 0, ZOE_GPT_BACKWARD));    /* the tied head's weights */
    ZOE_TRY(zoe_gpt_acquire_unit(g, tail, ZOE_GPT_BACKWARD)); /* ln_f's, an untied head's */
    ZOE_TRY(acquire_range(g, sink, head, 1));
    ZOE_TRY(zoe_tp_xent_backward(&g->tp, &g->emb, g->logits, g->logits, g->xent_stats, g->targets,
                                 g->N, ZOE_GPT_IGNORE_INDEX, scale));
    ZOE_TRY(zoe_tp_lm_head_backward(&g->tp, &g->emb, g->d_ln_f, g->logits, g->ln_f, g->N));
    if (g->head >= 0) ZOE_TRY(release_range(sink, g->head, 1));
    ZOE_TRY(acquire_range(g, sink, g->ln_f_tensor, g->ln_f_n));
    ZOE_TRY(
        zoe_memset_async(g->dres, 0, (size_t)(g->N * g->C) * zoe_dtype_size(c->dtype), g->stream));
    if (g->llama)
        ZOE_TRY(zoe_rmsnorm_backward(g->kernels, c->dtype, g->dres, g->ln_f_weight.grad, g->d_ln_f,
                                     g->resid[L], g->ln_f_weight.data, g->ln_f_rstd, g->N, g->C));
    else
        ZOE_TRY(zoe_layernorm_backward(
            g->kernels, c->dtype, g->dres, g->ln_f_weight.grad, g->ln_f_bias.grad, g->d_ln_f,
            g->resid[L], g->ln_f_weight.data, g->ln_f_mean, g->ln_f_rstd, g->N, g->C));
    ZOE_TRY(release_range(sink, g->ln_f_tensor, g->ln_f_n));
    ZOE_TRY(zoe_gpt_release_unit(g, tail));
    for (int l = L - 1; l >= 0; l--) {
        int first = g->first_block + l * g->block_params;
        ZOE_TRY(acquire_range(g, sink, first, g->block_params));
        ZOE_TRY(block_backward(g, l));
        ZOE_TRY(release_range(sink, first, g->block_params));
    }
    /* wte, and GPT's wpe after it; wte is already open when tied. */
    if (g->head >= 0) ZOE_TRY(acquire_range(g, sink, 0, 1));
    if (!g->llama) ZOE_TRY(acquire_range(g, sink, 1, 1));
    ZOE_TRY(zoe_tp_embedding_backward(&g->tp, &g->emb, g->dres, g->tokens, B, T));
    ZOE_TRY(release_range(sink, 0, g->first_block));
    return zoe_gpt_release_unit(g, 0);
}
