/* The TP context and the region mappings. The column slicing of scatter_to / gather_from is a
 * strided copy issued as one device copy per (row, rank) block: the mappings are off the
 * training hot path (a GPT keeps activations split and uses the vocab-parallel loss), so this
 * stays on the generic device interface instead of needing a dedicated kernel.
 *
 * Explained in docs/tensor_parallel.md, "Region mappings". */
#include "tensor_parallel/tp.h"
#include "tensor_parallel/layers.h"
#include "runtime/error.h"

zoe_status zoe_tp_init(zoe_tp *tp, zoe_kernels *kernels, zoe_comm *comm, zoe_dtype dtype,
                       uint64_t seed) {
    if (!tp || !kernels || !comm)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_tp_init: NULL tp, kernels or comm");
    if (dtype != ZOE_F32 && dtype != ZOE_BF16 && dtype != ZOE_F16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "tensor parallel dtype %s is not a float type (fp32, bf16, fp16)",
                        zoe_dtype_name(dtype));
    tp->kernels = kernels;
    tp->comm = comm;
    tp->stream = zoe_kernels_stream(kernels);
    tp->device = zoe_stream_device(tp->stream);
    tp->dtype = dtype;
    tp->seed = seed;
    tp->size = zoe_comm_size(comm);
    tp->rank = zoe_comm_rank(comm);
    return ZOE_OK;
}

static size_t esize(const zoe_tp *tp) {
    return zoe_dtype_size(tp->dtype);
}

static zoe_status copy_if_distinct(const zoe_tp *tp, void *dst, const void *src, int64_t count) {
    if (dst == src || count == 0) return ZOE_OK;
    return zoe_memcpy_async(dst, src, (size_t)count * esize(tp), ZOE_COPY_DEVICE_TO_DEVICE,
                            tp->stream);
}

zoe_status zoe_tp_all_reduce(const zoe_tp *tp, void *recv, const void *send, int64_t count,
                             uint64_t *bytes) {
    if (count < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "all_reduce count=%lld", (long long)count);
    if (tp->size == 1) return copy_if_distinct(tp, recv, send, count);
    uint64_t before = zoe_comm_bytes(tp->comm);
    ZOE_TRY(zoe_comm_all_reduce(tp->comm, send, recv, (size_t)count, tp->dtype, ZOE_REDUCE_SUM,
                                tp->stream));
    if (bytes) *bytes += zoe_comm_bytes(tp->comm) - before;
    return ZOE_OK;
}

zoe_status zoe_tp_copy_to_forward(const zoe_tp *tp, void *y, const void *x, int64_t count) {
    return copy_if_distinct(tp, y, x, count);
}
zoe_status zoe_tp_copy_to_backward(const zoe_tp *tp, void *dx, const void *dy, int64_t count) {
    return zoe_tp_all_reduce(tp, dx, dy, count, NULL);
}
zoe_status zoe_tp_reduce_from_forward(const zoe_tp *tp, void *y, const void *x, int64_t count) {
    return zoe_tp_all_reduce(tp, y, x, count, NULL);
}
zoe_status zoe_tp_reduce_from_backward(const zoe_tp *tp, void *dx, const void *dy, int64_t count) {
    return copy_if_distinct(tp, dx, dy, count);
}

static zoe_status check_split(const zoe_tp *tp, int64_t rows, int64_t cols, const char *what) {
    if (rows < 0 || cols <= 0 || cols % tp->size != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: rows=%lld cols=%lld not divisible by tp=%d",
                        what, (long long)rows, (long long)cols, tp->size);
    return ZOE_OK;
}

/* dst[r, dst_col0 + j] = src[r, src_col0 + j] for j < width, as one copy per row. */
static zoe_status copy_columns(const zoe_tp *tp, void *dst, int64_t dst_ld, int64_t dst_col0,
                               const void *src, int64_t src_ld, int64_t src_col0, int64_t rows,
                               int64_t width) {
    size_t es = esize(tp);
    for (int64_t r = 0; r < rows; r++)
        ZOE_TRY(zoe_memcpy_async((char *)dst + (size_t)(r * dst_ld + dst_col0) * es,
                                 (const char *)src + (size_t)(r * src_ld + src_col0) * es,
                                 (size_t)width * es, ZOE_COPY_DEVICE_TO_DEVICE, tp->stream));
    return ZOE_OK;
}

zoe_status zoe_tp_scatter_to_forward(const zoe_tp *tp, void *y_local, const void *x_full,
                                     int64_t rows, int64_t cols) {
    ZOE_TRY(check_split(tp, rows, cols, "scatter_to"));
    int64_t w = cols / tp->size;
    return copy_columns(tp, y_local, w, 0, x_full, cols, tp->rank * w, rows, w);
}

/* All ranks' [rows, w] blocks gathered into scratch as [t][rows][w], then interleaved into
 * full [rows][t * w]. */
static zoe_status gather_columns(const zoe_tp *tp, void *full, const void *local, int64_t rows,
                                 int64_t cols, void *scratch) {
    int64_t w = cols / tp->size;
    if (tp->size == 1) return copy_if_distinct(tp, full, local, rows * cols);
    ZOE_TRY(
        zoe_comm_all_gather(tp->comm, local, scratch, (size_t)(rows * w), tp->dtype, tp->stream));
    size_t es = esize(tp);
    for (int r = 0; r < tp->size; r++)
        ZOE_TRY(copy_columns(tp, full, cols, r * w, (char *)scratch + (size_t)(r * rows * w) * es,
                             w, 0, rows, w));
    return ZOE_OK;
}

zoe_status zoe_tp_scatter_to_backward(const zoe_tp *tp, void *dx_full, const void *dy_local,
                                      int64_t rows, int64_t cols, void *scratch) {
    ZOE_TRY(check_split(tp, rows, cols, "scatter_to backward"));
    return gather_columns(tp, dx_full, dy_local, rows, cols, scratch);
}

zoe_status zoe_tp_gather_from_forward(const zoe_tp *tp, void *y_full, const void *x_local,
                                      int64_t rows, int64_t cols, void *scratch) {
    ZOE_TRY(check_split(tp, rows, cols, "gather_from"));
    return gather_columns(tp, y_full, x_local, rows, cols, scratch);
}

zoe_status zoe_tp_gather_from_backward(const zoe_tp *tp, void *dx_local, const void *dy_full,
                                       int64_t rows, int64_t cols) {
    return zoe_tp_scatter_to_forward(tp, dx_local, dy_full, rows, cols);
}

zoe_status zoe_tp_weights_acquire(const zoe_tp_weights *w, int part, zoe_tp_param *const *params,
                                  int n) {
    if (w && w->acquire) ZOE_TRY(w->acquire(w->user, part));
    for (int i = 0; i < n; i++)
        if (!params[i]->data)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: not bound", params[i]->name);
    return ZOE_OK;
}

zoe_status zoe_tp_weights_release(const zoe_tp_weights *w, int part) {
    return w && w->release ? w->release(w->user, part) : ZOE_OK;
}
