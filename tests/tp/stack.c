#include "stack.h"
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

static size_t elem_size(const stack *s) {
    return zoe_dtype_size(s->cfg.dtype);
}

static zoe_status dalloc(stack *s, size_t bytes, void **out) {
    TRY(zoe_device_alloc(s->dev, bytes, out));
    /* poison: NaN in every float dtype (0xff bytes) so unwritten outputs show */
    return zoe_memset_async(*out, 0xff, bytes, s->stream);
}

/* The sink: tensor t's gradient is its slice of the flat buffer, final once written. */
static zoe_status sink_acquire(void *user, int t, void **grad) {
    stack *s = user;
    *grad = (char *)s->grads + (size_t)s->offset[t] * elem_size(s);
    return ZOE_OK;
}

static zoe_status sink_release(void *user, int t) {
    (void)user, (void)t;
    return ZOE_OK;
}

/* Binds every tensor's weights to its slice of a fresh flat buffer, back to back. */
static zoe_status bind(stack *s) {
    s->ntensors = zoe_gpt_num_tensors(s->gpt);
    s->offset = malloc((size_t)s->ntensors * sizeof *s->offset);
    void **ptrs = malloc((size_t)s->ntensors * sizeof *ptrs);
    zoe_status st = s->offset && ptrs ? ZOE_OK : ZOE_ERR_OUT_OF_MEMORY;
    for (int t = 0; st == ZOE_OK && t < s->ntensors; t++)
        s->offset[t] = s->numel, s->numel += zoe_gpt_tensor(s->gpt, t)->local_numel;
    if (st == ZOE_OK) st = dalloc(s, (size_t)s->numel * elem_size(s), &s->weights);
    if (st == ZOE_OK) st = dalloc(s, (size_t)s->numel * elem_size(s), &s->grads);
    for (int t = 0; st == ZOE_OK && t < s->ntensors; t++)
        ptrs[t] = (char *)s->weights + (size_t)s->offset[t] * elem_size(s);
    if (st == ZOE_OK) st = zoe_gpt_bind_weights(s->gpt, ptrs);
    free(ptrs);
    return st;
}

zoe_status stack_create(const zoe_gpt_config *cfg, MPI_Comm group, stack **out) {
    stack *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return ZOE_ERR_OUT_OF_MEMORY;
    s->cfg = *cfg;
    TRY(zoe_device_create(ZOE_BACKEND_CPU, 0, &s->dev));
    TRY(zoe_stream_create(s->dev, &s->stream));
    TRY(zoe_comm_create_for_device(group, s->dev, &s->comm));
    TRY(zoe_gpt_create(cfg, s->dev, s->stream, s->comm, &s->gpt));
    s->tp = zoe_gpt_tp(s->gpt);
    TRY(bind(s));
    TRY(zoe_gpt_init_weights(s->gpt));
    return stack_zero_grads(s);
}

void stack_destroy(stack *s) {
    if (!s) return;
    zoe_device_free(s->dev, s->weights);
    zoe_device_free(s->dev, s->grads);
    free(s->offset);
    zoe_gpt_destroy(s->gpt);
    zoe_comm_destroy(s->comm);
    zoe_stream_destroy(s->stream);
    zoe_device_destroy(s->dev);
    free(s);
}

zoe_status stack_forward(stack *s, const int32_t *tokens, const int32_t *targets) {
    return zoe_gpt_forward(s->gpt, tokens, targets, &s->loss);
}

zoe_status stack_backward(stack *s) {
    zoe_gpt_grad_sink sink = {.user = s, .acquire = sink_acquire, .release = sink_release};
    return zoe_gpt_backward(s->gpt, 1.0f, &sink);
}

zoe_status stack_zero_grads(stack *s) {
    TRY(zoe_memset_async(s->grads, 0, (size_t)s->numel * elem_size(s), s->stream));
    return zoe_stream_synchronize(s->stream);
}

zoe_status stack_sgd(stack *s, float lr) {
    size_t n = (size_t)s->numel, es = elem_size(s);
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
    size_t es = elem_size(s);
    void *h = malloc(n * es);
    if (!h) return ZOE_ERR_OUT_OF_MEMORY;
    zoe_status st = zoe_memcpy_async(h, dev_src, n * es, ZOE_COPY_DEVICE_TO_HOST, s->stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(s->stream);
    for (size_t i = 0; st == ZOE_OK && i < n; i++) out[i] = stack_load(s->cfg.dtype, h, i);
    free(h);
    return st;
}

zoe_status stack_logits(stack *s, double *out) {
    int64_t N = s->cfg.micro_batch * s->cfg.shape.seq_len;
    int64_t V = zoe_gpt_embedding(s->gpt)->vocab.padded;
    size_t bytes = (size_t)(N * V) * elem_size(s);
    void *full = NULL, *scratch = NULL;
    zoe_status st = zoe_device_alloc(s->dev, bytes, &full);
    if (st == ZOE_OK) st = zoe_device_alloc(s->dev, bytes, &scratch);
    if (st == ZOE_OK)
        st = zoe_tp_gather_from_forward(s->tp, full, zoe_gpt_logits(s->gpt), N, V, scratch);
    if (st == ZOE_OK) st = to_double(s, full, (size_t)(N * V), out);
    zoe_device_free(s->dev, full);
    zoe_device_free(s->dev, scratch);
    return st;
}

zoe_status stack_param_global(stack *s, int t, bool of_grad, double *out) {
    const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, t);
    size_t n = (size_t)(p->global_shape[0] * p->global_shape[1]);
    void *h = malloc(n * elem_size(s));
    if (!h) return ZOE_ERR_OUT_OF_MEMORY;
    zoe_status st = zoe_tp_param_gather(s->tp, p, of_grad, h);
    for (size_t j = 0; st == ZOE_OK && j < n; j++) out[j] = stack_load(s->cfg.dtype, h, j);
    free(h);
    return st;
}
