#include "stack.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double stack_load(zoe_dtype dt, const void *p, size_t i) {
    if (dt == ZOE_F32) return ((const float *)p)[i];
    if (dt == ZOE_BF16) return zoe_bf16_to_f32(((const uint16_t *)p)[i]);
    return zoe_f16_to_f32(((const uint16_t *)p)[i]);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        zoe_status st_ = (call);                                                                   \
        if (st_ != ZOE_OK) return st_;                                                             \
    } while (0)

static zoe_status dalloc(stack *s, size_t bytes, void **out) {
    TRY(zoe_device_alloc(s->dev, bytes, out));
    /* poison: NaN in every float dtype (0xff bytes) so unwritten outputs show */
    return zoe_memset_async(*out, 0xff, bytes, s->stream);
}

static zoe_status describe(stack *s) {
    const stack_config *c = &s->cfg;
    int t = s->tp.size, r = s->tp.rank;
    TRY(zoe_tp_embedding_init(&s->emb, "", c->vocab, c->pad_multiple, c->hidden, c->T, 0.02f, t,
                              r));
    s->params[s->nparams++] = &s->emb.wte;
    s->params[s->nparams++] = &s->emb.wpe;
    zoe_tp_block_config bc = {.hidden = c->hidden,
                              .heads = c->heads,
                              .ffn = c->ffn,
                              .hidden_dropout = c->dropout,
                              .init_std = 0.02f,
                              .proj_init_std = 0.02f / 2.0f};
    for (int l = 0; l < c->layers; l++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%d.", l);
        TRY(zoe_tp_block_init(&s->blocks[l], prefix, &bc, t, r));
        s->nparams += zoe_tp_block_params(&s->blocks[l], s->params + s->nparams);
    }
    TRY(zoe_tp_layernorm_describe(&s->ln_f_weight, &s->ln_f_bias, "ln_f", c->hidden, t, r));
    s->params[s->nparams++] = &s->ln_f_weight;
    s->params[s->nparams++] = &s->ln_f_bias;
    return ZOE_OK;
}

static zoe_status allocate(stack *s) {
    const stack_config *c = &s->cfg;
    zoe_dtype dt = c->dtype;
    size_t es = zoe_dtype_size(dt), N = (size_t)(c->B * c->T), C = (size_t)c->hidden;
    s->numel = zoe_tp_params_bind_flat(s->params, s->nparams, dt, NULL, NULL);
    TRY(dalloc(s, (size_t)s->numel * es, &s->weights));
    TRY(dalloc(s, (size_t)s->numel * es, &s->grads));
    zoe_tp_params_bind_flat(s->params, s->nparams, dt, s->weights, s->grads);
    for (int l = 0; l <= c->layers; l++) TRY(dalloc(s, N * C * es, &s->resid[l]));
    size_t per_layer = zoe_tp_block_acts_bytes(&s->blocks[0], c->B, c->T, dt), scratch = 0;
    TRY(dalloc(s, per_layer * (size_t)c->layers, &s->acts_buf));
    for (int l = 0; l < c->layers; l++) {
        TRY(zoe_tp_block_acts_bind(&s->blocks[l], &s->acts[l],
                                   (char *)s->acts_buf + per_layer * (size_t)l, c->B, c->T, dt));
        size_t b = zoe_tp_block_scratch_bytes(&s->blocks[l], c->B, c->T, dt);
        scratch = b > scratch ? b : scratch;
    }
    TRY(dalloc(s, scratch, &s->scratch));
    TRY(dalloc(s, N * C * es, &s->ln_f));
    TRY(dalloc(s, N * C * es, &s->d_ln_f));
    TRY(dalloc(s, N * C * es, &s->dres));
    TRY(dalloc(s, N * sizeof(float), (void **)&s->ln_f_mean));
    TRY(dalloc(s, N * sizeof(float), (void **)&s->ln_f_rstd));
    TRY(dalloc(s, N * (size_t)s->emb.vocab.local * es, &s->logits));
    TRY(dalloc(s, zoe_tp_xent_stats_bytes((int64_t)N), (void **)&s->stats));
    TRY(dalloc(s, N * sizeof(int32_t), (void **)&s->tokens));
    TRY(dalloc(s, N * sizeof(int32_t), (void **)&s->targets));
    s->losses = malloc(N * sizeof(float));
    return s->losses ? ZOE_OK : ZOE_ERR_OUT_OF_MEMORY;
}

zoe_status stack_create(const stack_config *cfg, MPI_Comm group, stack **out) {
    stack *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return ZOE_ERR_OUT_OF_MEMORY;
    s->cfg = *cfg;
    TRY(zoe_device_create(ZOE_BACKEND_CPU, 0, &s->dev));
    TRY(zoe_stream_create(s->dev, &s->stream));
    TRY(zoe_comm_create_for_device(group, s->dev, &s->comm));
    int t = zoe_comm_size(s->comm);
    /* the kernels see at most these shapes */
    zoe_kernel_plan plan = {0};
    zoe_tp_vocab v;
    TRY(zoe_tp_vocab_init(&v, cfg->vocab, cfg->pad_multiple, t, zoe_comm_rank(s->comm)));
    plan.max_dim = v.local;
    s->tp.size = t, s->tp.rank = zoe_comm_rank(s->comm);
    TRY(describe(s));
    for (int l = 0; l < cfg->layers; l++) zoe_tp_block_plan(&s->blocks[l], cfg->B, cfg->T, &plan);
    TRY(zoe_kernels_create(s->dev, s->stream, &plan, &s->kernels));
    TRY(zoe_tp_init(&s->tp, s->kernels, s->comm, cfg->dtype, cfg->seed));
    TRY(allocate(s));
    for (int i = 0; i < s->nparams; i++) TRY(zoe_tp_param_init(&s->tp, s->params[i]));
    return stack_zero_grads(s);
}

void stack_destroy(stack *s) {
    if (!s) return;
    void *bufs[] = {s->weights, s->grads, s->acts_buf,  s->scratch,   s->ln_f,   s->d_ln_f, s->dres,
                    s->logits,  s->stats, s->ln_f_mean, s->ln_f_rstd, s->tokens, s->targets};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zoe_device_free(s->dev, bufs[i]);
    for (int l = 0; l <= s->cfg.layers; l++) zoe_device_free(s->dev, s->resid[l]);
    free(s->losses);
    zoe_kernels_destroy(s->kernels);
    zoe_comm_destroy(s->comm);
    zoe_stream_destroy(s->stream);
    zoe_device_destroy(s->dev);
    free(s);
}

zoe_status stack_forward(stack *s, const int32_t *tokens, const int32_t *targets, uint64_t step) {
    const stack_config *c = &s->cfg;
    int64_t N = c->B * c->T;
    zoe_tp *tp = &s->tp;
    TRY(zoe_memcpy_async(s->tokens, tokens, (size_t)N * 4, ZOE_COPY_HOST_TO_DEVICE, s->stream));
    TRY(zoe_memcpy_async(s->targets, targets, (size_t)N * 4, ZOE_COPY_HOST_TO_DEVICE, s->stream));
    TRY(zoe_tp_embedding_forward(tp, &s->emb, s->resid[0], s->tokens, c->B, c->T));
    for (int l = 0; l < c->layers; l++)
        TRY(zoe_tp_block_forward(tp, &s->blocks[l], &s->acts[l], s->resid[l + 1], s->resid[l],
                                 step));
    TRY(zoe_layernorm_forward(s->kernels, c->dtype, s->ln_f, s->ln_f_mean, s->ln_f_rstd,
                              s->resid[c->layers], s->ln_f_weight.data, s->ln_f_bias.data, N,
                              c->hidden));
    TRY(zoe_tp_lm_head_forward(tp, &s->emb, s->logits, s->ln_f, N));
    return zoe_tp_xent_forward(tp, &s->emb, s->stats, s->logits, s->targets, N, STACK_IGNORE,
                               s->losses, &s->loss, &s->count);
}

zoe_status stack_backward(stack *s) {
    const stack_config *c = &s->cfg;
    int64_t N = c->B * c->T;
    zoe_tp *tp = &s->tp;
    TRY(zoe_tp_xent_backward(tp, &s->emb, s->logits, s->logits, s->stats, s->targets, N,
                             STACK_IGNORE, 1.0f / (float)s->count));
    TRY(zoe_tp_lm_head_backward(tp, &s->emb, s->d_ln_f, s->logits, s->ln_f, N));
    TRY(zoe_memset_async(s->dres, 0, (size_t)(N * c->hidden) * zoe_dtype_size(c->dtype),
                         s->stream));
    TRY(zoe_layernorm_backward(s->kernels, c->dtype, s->dres, s->ln_f_weight.grad,
                               s->ln_f_bias.grad, s->d_ln_f, s->resid[c->layers],
                               s->ln_f_weight.data, s->ln_f_mean, s->ln_f_rstd, N, c->hidden));
    for (int l = (int)c->layers - 1; l >= 0; l--)
        TRY(zoe_tp_block_backward(tp, &s->blocks[l], &s->acts[l], s->dres, s->resid[l],
                                  s->scratch));
    return zoe_tp_embedding_backward(tp, &s->emb, s->dres, s->tokens, c->B, c->T);
}

zoe_status stack_zero_grads(stack *s) {
    TRY(zoe_memset_async(s->grads, 0, (size_t)s->numel * zoe_dtype_size(s->cfg.dtype), s->stream));
    return zoe_stream_synchronize(s->stream);
}

zoe_status stack_sgd(stack *s, float lr) {
    size_t n = (size_t)s->numel, es = zoe_dtype_size(s->cfg.dtype);
    char *w = malloc(n * es), *g = malloc(n * es);
    float *wf = malloc(n * sizeof(float)), *gf = malloc(n * sizeof(float));
    zoe_status st = w && g && wf && gf ? ZOE_OK : ZOE_ERR_OUT_OF_MEMORY;
    if (st == ZOE_OK)
        st = zoe_memcpy_async(w, s->weights, n * es, ZOE_COPY_DEVICE_TO_HOST, s->stream);
    if (st == ZOE_OK)
        st = zoe_memcpy_async(g, s->grads, n * es, ZOE_COPY_DEVICE_TO_HOST, s->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(s->stream);
    if (st == ZOE_OK) st = zoe_convert(wf, ZOE_F32, w, s->cfg.dtype, n);
    if (st == ZOE_OK) st = zoe_convert(gf, ZOE_F32, g, s->cfg.dtype, n);
    for (size_t i = 0; st == ZOE_OK && i < n; i++) wf[i] -= lr * gf[i];
    if (st == ZOE_OK) st = zoe_convert(w, s->cfg.dtype, wf, ZOE_F32, n);
    if (st == ZOE_OK)
        st = zoe_memcpy_async(s->weights, w, n * es, ZOE_COPY_HOST_TO_DEVICE, s->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(s->stream);
    free(w), free(g), free(wf), free(gf);
    return st;
}

static zoe_status to_double(stack *s, const void *dev_src, size_t n, double *out) {
    size_t es = zoe_dtype_size(s->cfg.dtype);
    void *h = malloc(n * es);
    if (!h) return ZOE_ERR_OUT_OF_MEMORY;
    zoe_status st = zoe_memcpy_async(h, dev_src, n * es, ZOE_COPY_DEVICE_TO_HOST, s->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(s->stream);
    for (size_t i = 0; st == ZOE_OK && i < n; i++) out[i] = stack_load(s->cfg.dtype, h, i);
    free(h);
    return st;
}

zoe_status stack_logits(stack *s, double *out) {
    int64_t N = s->cfg.B * s->cfg.T, V = s->emb.vocab.padded;
    size_t bytes = (size_t)(N * V) * zoe_dtype_size(s->cfg.dtype);
    void *full = NULL, *scratch = NULL;
    zoe_status st = zoe_device_alloc(s->dev, bytes, &full);
    if (st == ZOE_OK) st = zoe_device_alloc(s->dev, bytes, &scratch);
    if (st == ZOE_OK) st = zoe_tp_gather_from_forward(&s->tp, full, s->logits, N, V, scratch);
    if (st == ZOE_OK) st = to_double(s, full, (size_t)(N * V), out);
    zoe_device_free(s->dev, full);
    zoe_device_free(s->dev, scratch);
    return st;
}

zoe_status stack_param_global(stack *s, int i, bool of_grad, double *out) {
    const zoe_tp_param *p = s->params[i];
    size_t n = (size_t)(p->global_shape[0] * p->global_shape[1]), es = zoe_dtype_size(s->cfg.dtype);
    void *h = malloc(n * es);
    if (!h) return ZOE_ERR_OUT_OF_MEMORY;
    zoe_status st = zoe_tp_param_gather(&s->tp, p, of_grad, h);
    for (size_t j = 0; st == ZOE_OK && j < n; j++) out[j] = stack_load(s->cfg.dtype, h, j);
    free(h);
    return st;
}
