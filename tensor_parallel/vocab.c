/* VocabParallelEmbedding, the tied LM head and the vocab-parallel cross-entropy.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include <stdio.h>
#include "runtime/error.h"
#include "tensor_parallel/layers.h"

zoe_status zoe_tp_vocab_init(zoe_tp_vocab *v, int64_t vocab, int64_t pad_multiple, int tp_size,
                             int tp_rank) {
    if (vocab <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "vocab=%lld must be positive", (long long)vocab);
    if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "vocab: tp rank %d of size %d", tp_rank, tp_size);
    if (pad_multiple <= 0) pad_multiple = ZOE_TP_VOCAB_PAD_MULTIPLE;
    int64_t m = tp_size * ((pad_multiple + tp_size - 1) / tp_size);
    zoe_tp_vocab d = {.vocab = vocab, .padded = (vocab + m - 1) / m * m};
    if (d.padded % tp_size != 0) /* cannot happen with m a multiple of t; kept as the check */
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "padded vocab=%lld not divisible by tp=%d",
                        (long long)d.padded, tp_size);
    d.local = d.padded / tp_size;
    d.start = tp_rank * d.local;
    int64_t valid = vocab - d.start;
    d.valid_local = valid < 0 ? 0 : valid > d.local ? d.local : valid;
    *v = d;
    return ZOE_OK;
}

zoe_status zoe_tp_embedding_init(zoe_tp_embedding *e, const char *prefix, int64_t vocab,
                                 int64_t pad_multiple, int64_t hidden, int64_t max_seq,
                                 float init_std, int tp_size, int tp_rank) {
    if (!e || !prefix) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "embedding init: NULL argument");
    if (hidden <= 0 || max_seq < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "embedding: hidden=%lld max_seq=%lld",
                        (long long)hidden, (long long)max_seq);
    zoe_tp_embedding d = {.hidden = hidden, .max_seq = max_seq};
    ZOE_TRY(zoe_tp_vocab_init(&d.vocab, vocab, pad_multiple, tp_size, tp_rank));
    char name[ZOE_TP_NAME_MAX + 8];
    snprintf(name, sizeof name, "%swte", prefix);
    ZOE_TRY(zoe_tp_param_describe(&d.wte, name, 2, d.vocab.padded, hidden, ZOE_TP_SPLIT_ROWS,
                                  ZOE_TP_INIT_NORMAL, init_std, tp_size, tp_rank));
    if (max_seq > 0) {
        snprintf(name, sizeof name, "%swpe", prefix);
        ZOE_TRY(zoe_tp_param_describe(&d.wpe, name, 2, max_seq, hidden, ZOE_TP_REPLICATED,
                                      ZOE_TP_INIT_NORMAL, init_std, tp_size, tp_rank));
    }
    *e = d;
    return ZOE_OK;
}

zoe_status zoe_tp_embedding_untie(zoe_tp_embedding *e, const char *name, float init_std,
                                  int tp_size, int tp_rank) {
    if (!e || !name) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "embedding untie: NULL argument");
    ZOE_TRY(zoe_tp_param_describe(&e->head, name, 2, e->vocab.padded, e->hidden, ZOE_TP_SPLIT_ROWS,
                                  ZOE_TP_INIT_NORMAL, init_std, tp_size, tp_rank));
    e->untied = true;
    return ZOE_OK;
}

/* The LM head's weight. */
static zoe_tp_param *head_of(zoe_tp_embedding *e) {
    return e->untied ? &e->head : &e->wte;
}

/* need_grad: whether the call writes the lookup's gradients (the head checks its own weight,
 * so a caller may bind wpe's gradient later, when the lookup's backward comes). */
enum { NEED_NO_GRAD = 0, NEED_ALL_GRADS = 1 };

static zoe_status check_embedding(const zoe_tp_embedding *e, int need_grad, int64_t T) {
    bool need_wpe = need_grad == NEED_ALL_GRADS && e->max_seq > 0;
    if (!e->wte.data || (e->max_seq > 0 && !e->wpe.data) || (need_grad && !e->wte.grad) ||
        (need_wpe && !e->wpe.grad))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: parameters not bound", e->wte.name);
    if (e->max_seq > 0 && T > e->max_seq)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "sequence T=%lld longer than max_seq=%lld",
                        (long long)T, (long long)e->max_seq);
    return ZOE_OK;
}

/* B sequences of T tokens at positions [pos0, pos0 + T). */
static zoe_status lookup(const zoe_tp *tp, zoe_tp_embedding *e, void *y, const int32_t *tokens,
                         int64_t B, int64_t T, int64_t pos0) {
    ZOE_TRY(check_embedding(e, NEED_NO_GRAD, pos0 + T));
    uint64_t before = zoe_comm_bytes(tp->comm);
    /* Rows outside this rank's range are zero; rank 0 alone adds the positions, so the sum
     * over ranks is wte[token] + wpe[t] with every other term an exact zero. */
    const void *wpe =
        e->max_seq > 0 && tp->rank == 0
            ? (const char *)e->wpe.data + (size_t)(pos0 * e->hidden) * zoe_dtype_size(tp->dtype)
            : NULL;
    ZOE_TRY(zoe_embedding_forward(tp->kernels, tp->dtype, y, tokens, e->wte.data, wpe, B, T,
                                  e->hidden, e->vocab.start, e->vocab.local));
    ZOE_TRY(zoe_tp_reduce_from_forward(tp, y, y, B * T * e->hidden));
    e->traffic.forward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_embedding_forward(const zoe_tp *tp, zoe_tp_embedding *e, void *y,
                                    const int32_t *tokens, int64_t B, int64_t T) {
    return lookup(tp, e, y, tokens, B, T, 0);
}

zoe_status zoe_tp_embedding_forward_at(const zoe_tp *tp, zoe_tp_embedding *e, void *y,
                                       const int32_t *tokens, int64_t n, int64_t pos0) {
    if (pos0 < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: position %lld is negative", e->wte.name,
                        (long long)pos0);
    return lookup(tp, e, y, tokens, 1, n, pos0);
}

zoe_status zoe_tp_embedding_backward(const zoe_tp *tp, zoe_tp_embedding *e, const void *dy,
                                     const int32_t *tokens, int64_t B, int64_t T) {
    ZOE_TRY(check_embedding(e, NEED_ALL_GRADS, T));
    ZOE_TRY(zoe_embedding_backward(tp->kernels, tp->dtype, e->wte.grad,
                                   e->max_seq > 0 ? e->wpe.grad : NULL, dy, tokens, B, T, e->hidden,
                                   e->vocab.start, e->vocab.local));
    e->traffic.backward = 0;
    return ZOE_OK;
}

/* The head's weight bound (and its gradient, when backward needs it). */
static zoe_status check_head(zoe_tp_embedding *e, bool need_grad) {
    const zoe_tp_param *w = head_of(e);
    if (!w->data || (need_grad && !w->grad))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: parameters not bound", w->name);
    return ZOE_OK;
}

zoe_status zoe_tp_lm_head_forward(const zoe_tp *tp, zoe_tp_embedding *e, void *logits,
                                  const void *x, int64_t rows) {
    ZOE_TRY(check_head(e, false));
    e->head_traffic.forward = 0;
    return zoe_matmul_forward(tp->kernels, tp->dtype, logits, x, head_of(e)->data, NULL, rows,
                              e->hidden, e->vocab.local);
}

zoe_status zoe_tp_lm_head_backward(const zoe_tp *tp, zoe_tp_embedding *e, void *dx,
                                   const void *dlogits, const void *x, int64_t rows) {
    ZOE_TRY(check_head(e, true));
    uint64_t before = zoe_comm_bytes(tp->comm);
    ZOE_TRY(zoe_memset_async(dx, 0, (size_t)(rows * e->hidden) * zoe_dtype_size(tp->dtype),
                             tp->stream));
    const zoe_tp_param *w = head_of(e);
    ZOE_TRY(zoe_matmul_backward(tp->kernels, tp->dtype, dx, w->grad, NULL, dlogits, x, w->data,
                                rows, e->hidden, e->vocab.local));
    ZOE_TRY(zoe_tp_copy_to_backward(tp, dx, dx, rows * e->hidden));
    e->head_traffic.backward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

/* stats: [row_max | sum_exp | target_logit], each rows floats; the last two adjacent so that
 * one all-reduce sums both. */
size_t zoe_tp_xent_stats_bytes(int64_t rows) {
    return zoe_tp_align((size_t)(3 * rows) * sizeof(float));
}

static zoe_status all_reduce_f32(const zoe_tp *tp, float *buf, int64_t count, zoe_reduce_op op) {
    if (tp->size == 1) return ZOE_OK;
    return zoe_comm_all_reduce(tp->comm, buf, buf, (size_t)count, ZOE_F32, op, tp->stream);
}

zoe_status zoe_tp_xent_forward(const zoe_tp *tp, zoe_tp_embedding *e, float *stats,
                               const void *logits, const int32_t *targets, int64_t rows,
                               int32_t ignore_index, float *losses, float *mean_loss,
                               int64_t *count) {
    const zoe_tp_vocab *v = &e->vocab;
    float *row_max = stats, *sum_exp = stats + rows, *target_logit = stats + 2 * rows;
    uint64_t before = zoe_comm_bytes(tp->comm);
    ZOE_TRY(
        zoe_xent_row_max(tp->kernels, tp->dtype, row_max, logits, rows, v->local, v->valid_local));
    ZOE_TRY(all_reduce_f32(tp, row_max, rows, ZOE_REDUCE_MAX));
    ZOE_TRY(zoe_xent_row_sums(tp->kernels, tp->dtype, sum_exp, target_logit, logits, row_max,
                              targets, rows, v->local, v->valid_local, v->start, ignore_index));
    ZOE_TRY(all_reduce_f32(tp, sum_exp, 2 * rows, ZOE_REDUCE_SUM));
    ZOE_TRY(zoe_xent_loss(tp->kernels, losses, mean_loss, count, row_max, sum_exp, target_logit,
                          targets, rows, ignore_index));
    e->head_traffic.forward += zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_xent_backward(const zoe_tp *tp, const zoe_tp_embedding *e, void *dlogits,
                                const void *logits, const float *stats, const int32_t *targets,
                                int64_t rows, int32_t ignore_index, float scale) {
    const zoe_tp_vocab *v = &e->vocab;
    return zoe_xent_backward(tp->kernels, tp->dtype, dlogits, logits, stats, stats + rows, targets,
                             rows, v->local, v->valid_local, v->start, ignore_index, scale);
}
