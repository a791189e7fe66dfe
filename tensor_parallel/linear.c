/* ColumnParallelLinear and RowParallelLinear.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include <stdio.h>
#include "runtime/error.h"
#include "tensor_parallel/layers.h"

/* shards: the distinct row blocks of a column-parallel weight (tp_size unless sharded). */
static zoe_status describe_linear(zoe_tp_linear *l, const char *name, int64_t in, int64_t out,
                                  bool column, int shards, bool has_bias, float init_std,
                                  int tp_size, int tp_rank) {
    if (!l || !name) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "linear init: NULL argument");
    if (in <= 0 || out <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: in=%lld out=%lld must be positive", name,
                        (long long)in, (long long)out);
    int64_t split = column ? out : in;
    if (tp_size <= 0 || shards <= 0 || tp_size % shards != 0 || split % shards != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %s=%lld not divisible by %s=%d", name,
                        column ? "out" : "in", (long long)split,
                        shards == tp_size ? "tp" : "shards", shards);
    char pname[ZOE_TP_NAME_MAX + 16];
    zoe_tp_linear d = {.in = in, .out = out, .column = column, .has_bias = has_bias};
    d.in_local = column ? in : in / tp_size;
    d.out_local = column ? out / shards : out;
    snprintf(pname, sizeof pname, "%s.weight", name);
    if (column)
        ZOE_TRY(zoe_tp_param_describe_sharded(&d.weight, pname, 2, out, in, shards,
                                              ZOE_TP_INIT_NORMAL, init_std, tp_size, tp_rank));
    else
        ZOE_TRY(zoe_tp_param_describe(&d.weight, pname, 2, out, in, ZOE_TP_SPLIT_COLS,
                                      ZOE_TP_INIT_NORMAL, init_std, tp_size, tp_rank));
    if (has_bias) {
        snprintf(pname, sizeof pname, "%s.bias", name);
        ZOE_TRY(zoe_tp_param_describe(&d.bias, pname, 1, out, 1,
                                      column ? ZOE_TP_SPLIT_ROWS : ZOE_TP_REPLICATED,
                                      ZOE_TP_INIT_ZEROS, 0.0f, tp_size, tp_rank));
    }
    *l = d;
    return ZOE_OK;
}

zoe_status zoe_tp_column_linear_init(zoe_tp_linear *l, const char *name, int64_t in, int64_t out,
                                     bool has_bias, bool gather_output, float init_std, int tp_size,
                                     int tp_rank) {
    ZOE_TRY(describe_linear(l, name, in, out, true, tp_size, has_bias, init_std, tp_size, tp_rank));
    l->gather_output = gather_output;
    return ZOE_OK;
}

zoe_status zoe_tp_column_linear_init_sharded(zoe_tp_linear *l, const char *name, int64_t in,
                                             int64_t out, int shards, float init_std, int tp_size,
                                             int tp_rank) {
    return describe_linear(l, name, in, out, true, shards, false, init_std, tp_size, tp_rank);
}

zoe_status zoe_tp_row_linear_init(zoe_tp_linear *l, const char *name, int64_t in, int64_t out,
                                  bool has_bias, float init_std, int tp_size, int tp_rank) {
    return describe_linear(l, name, in, out, false, tp_size, has_bias, init_std, tp_size, tp_rank);
}

size_t zoe_tp_linear_scratch_bytes(const zoe_tp_linear *l, int64_t rows, zoe_dtype dtype) {
    return l->column && l->gather_output ? (size_t)(rows * l->out) * zoe_dtype_size(dtype) : 0;
}

static const void *bias_of(const zoe_tp_linear *l) {
    return l->has_bias ? l->bias.data : NULL;
}
static void *bias_grad_of(const zoe_tp_linear *l) {
    return l->has_bias ? l->bias.grad : NULL;
}

static zoe_status check_bound(const zoe_tp_linear *l) {
    if (!l->weight.data || (l->has_bias && !l->bias.data))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: parameters not bound", l->weight.name);
    return ZOE_OK;
}

/* With gather_output the local product goes to this rank's block of scratch, where the
 * gather's all-gather finds it in place. */
static void *gather_block(const zoe_tp *tp, const zoe_tp_linear *l, void *scratch, int64_t rows) {
    return (char *)scratch + (size_t)(tp->rank * rows * l->out_local) * zoe_dtype_size(tp->dtype);
}

static bool gathers(const zoe_tp *tp, const zoe_tp_linear *l) {
    return l->gather_output && tp->size > 1;
}

zoe_status zoe_tp_column_linear_forward(const zoe_tp *tp, zoe_tp_linear *l, void *y, const void *x,
                                        int64_t rows, void *scratch) {
    ZOE_TRY(check_bound(l));
    if (gathers(tp, l) && !scratch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: gather_output needs scratch",
                        l->weight.name);
    uint64_t before = zoe_comm_bytes(tp->comm);
    /* copy_to's forward is the identity: x is read where it is. */
    void *local = gathers(tp, l) ? gather_block(tp, l, scratch, rows) : y;
    ZOE_TRY(zoe_matmul_forward(tp->kernels, tp->dtype, local, x, l->weight.data, bias_of(l), rows,
                               l->in, l->out_local));
    if (gathers(tp, l)) ZOE_TRY(zoe_tp_gather_from_forward(tp, y, local, rows, l->out, scratch));
    l->traffic.forward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_column_linear_backward(const zoe_tp *tp, zoe_tp_linear *l, void *dx,
                                         const void *dy, const void *x, int64_t rows,
                                         void *scratch) {
    ZOE_TRY(check_bound(l));
    if (gathers(tp, l) && !scratch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: gather_output needs scratch",
                        l->weight.name);
    uint64_t before = zoe_comm_bytes(tp->comm);
    const void *dy_local = dy;
    if (gathers(tp, l)) {
        /* gather_from's backward: keep this rank's columns of the full gradient. */
        ZOE_TRY(zoe_tp_gather_from_backward(tp, scratch, dy, rows, l->out));
        dy_local = scratch;
    }
    size_t dx_bytes = (size_t)(rows * l->in) * zoe_dtype_size(tp->dtype);
    if (dx) ZOE_TRY(zoe_memset_async(dx, 0, dx_bytes, tp->stream));
    ZOE_TRY(zoe_matmul_backward(tp->kernels, tp->dtype, dx, l->weight.grad, bias_grad_of(l),
                                dy_local, x, l->weight.data, rows, l->in, l->out_local));
    /* copy_to's backward: the input gradient is the sum of every rank's partial product. */
    if (dx) ZOE_TRY(zoe_tp_copy_to_backward(tp, dx, dx, rows * l->in));
    l->traffic.backward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_row_linear_forward(const zoe_tp *tp, zoe_tp_linear *l, void *y, const void *x,
                                     int64_t rows) {
    ZOE_TRY(check_bound(l));
    uint64_t before = zoe_comm_bytes(tp->comm);
    /* Only rank 0 adds the replicated bias, so the sum over ranks holds it once. */
    const void *bias = tp->rank == 0 ? bias_of(l) : NULL;
    ZOE_TRY(zoe_matmul_forward(tp->kernels, tp->dtype, y, x, l->weight.data, bias, rows,
                               l->in_local, l->out));
    ZOE_TRY(zoe_tp_reduce_from_forward(tp, y, y, rows * l->out));
    l->traffic.forward = zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_row_linear_backward(const zoe_tp *tp, zoe_tp_linear *l, void *dx, const void *dy,
                                      const void *x, int64_t rows) {
    ZOE_TRY(check_bound(l));
    /* reduce_from's backward is the identity: dy is already the full, replicated gradient. */
    ZOE_TRY(zoe_matmul_backward(tp->kernels, tp->dtype, dx, l->weight.grad, bias_grad_of(l), dy, x,
                                l->weight.data, rows, l->in_local, l->out));
    l->traffic.backward = 0;
    return ZOE_OK;
}
