/* The Adam ops on a device stream: the CPU backend's device memory is host memory, so its
 * "device Adam" is the host path; a CUDA stream gets the kernels of kernels/cuda/adam.cu.
 *
 * Explained in docs/offload.md, "One step". */
#include <stdlib.h>
#include <string.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
#include "runtime/error.h"

static int on_cuda(zoe_stream *stream) {
    return stream && zoe_device_backend(zoe_stream_device(stream)) == ZOE_BACKEND_CUDA;
}

zoe_status zoe_adam_stream(zoe_stream *stream, const zoe_adam_consts *c, float *master, float *m,
                           float *v, const float *grad, void *out, zoe_dtype out_dtype, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_adam_cuda(zoe_stream_native(stream), c, master, m, v, grad, out, out_dtype, n);
#endif
    (void)on_cuda;
    return zoe_adam_host(c, master, m, v, grad, ZOE_F32, out, out_dtype, n);
}

zoe_status zoe_grad_accumulate_stream(zoe_stream *stream, float *dst, const void *src,
                                      zoe_dtype src_dtype, float scale, int assign, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_grad_accumulate_cuda(zoe_stream_native(stream), dst, src, src_dtype, scale,
                                        assign, n);
#endif
    return zoe_grad_accumulate_host(dst, src, src_dtype, scale, assign, n, NULL);
}

/* The CPU backend walks host_runs; a CUDA device gets the device table and the norm's scratch. */
struct zoe_adam_table {
    zoe_device *dev;
    int count;
    size_t total;
    zoe_adam_run *host_runs;
#ifdef ZOE_HAVE_CUDA
    zoe_adam_run_cuda *device_runs; /* device memory */
    double *partials;               /* device, ZOE_SUMSQ_MAX_BLOCKS + 1: partials, then the sum */
    double *pinned_sum;             /* page-locked copy of the sum */
#endif
};

zoe_status zoe_adam_table_create(zoe_stream *stream, const zoe_adam_run *runs, int count,
                                 zoe_adam_table **out) {
    if (!stream || !out || count < 0 || (count && !runs))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam table: bad argument (count %d)", count);
    *out = NULL;
    zoe_adam_table *t = calloc(1, sizeof *t);
    if (!t) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "adam table");
    t->dev = zoe_stream_device(stream);
    t->count = count;
    t->host_runs = malloc((count ? (size_t)count : 1) * sizeof *runs);
    if (!t->host_runs) {
        free(t);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "adam table of %d runs", count);
    }
    if (count) memcpy(t->host_runs, runs, (size_t)count * sizeof *runs);
    for (int r = 0; r < count; r++) t->total += runs[r].len;
    *out = t;
#ifdef ZOE_HAVE_CUDA
    if (!on_cuda(stream)) return ZOE_OK;
    zoe_adam_run_cuda *staged = malloc((count ? (size_t)count : 1) * sizeof *staged);
    if (!staged) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "adam table staging");
    for (int r = 0; r < count; r++) {
        staged[r] = (zoe_adam_run_cuda){.offset = runs[r].offset,
                                        .len = runs[r].len,
                                        .begin = r ? staged[r - 1].begin + staged[r - 1].len : 0,
                                        .no_decay = runs[r].no_decay,
                                        .counted = runs[r].counted};
    }
    size_t bytes = (count ? (size_t)count : 1) * sizeof *staged;
    zoe_status st = zoe_device_alloc_for(t->dev, bytes, "the device Adam's run table",
                                         (void **)&t->device_runs);
    if (st == ZOE_OK)
        st = zoe_device_alloc_for(t->dev, (ZOE_SUMSQ_MAX_BLOCKS + 1) * sizeof(double),
                                  "the device Adam's partial sums", (void **)&t->partials);
    if (st == ZOE_OK)
        st = zoe_host_alloc_for(t->dev, sizeof(double), "the gradient norm's sum",
                                (void **)&t->pinned_sum);
    if (st == ZOE_OK)
        st = zoe_memcpy_async(t->device_runs, staged, bytes, ZOE_COPY_HOST_TO_DEVICE, stream);
    if (st == ZOE_OK) st = zoe_stream_synchronize(stream);
    free(staged);
    if (st != ZOE_OK) {
        zoe_adam_table_destroy(t);
        *out = NULL;
    }
    return st;
#else
    return ZOE_OK;
#endif
}

void zoe_adam_table_destroy(zoe_adam_table *t) {
    if (!t) return;
#ifdef ZOE_HAVE_CUDA
    zoe_device_free(t->dev, t->device_runs);
    zoe_device_free(t->dev, t->partials);
    zoe_host_free(t->dev, t->pinned_sum);
#endif
    free(t->host_runs);
    free(t);
}

zoe_status zoe_adam_table_step(zoe_stream *stream, const zoe_adam_table *t,
                               const zoe_adam_consts *decayed, const zoe_adam_consts *exempt,
                               float *master, float *m, float *v, const float *grad, void *out,
                               zoe_dtype out_dtype) {
    if (!t || !decayed || !exempt)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam table step: NULL argument");
    if (t->total == 0) return ZOE_OK;
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_adam_runs_cuda(zoe_stream_native(stream), decayed, exempt, t->device_runs,
                                  t->count, t->total, master, m, v, grad, out, out_dtype);
#endif
    const size_t esz = zoe_dtype_size(out_dtype);
    for (int r = 0; r < t->count; r++) {
        const zoe_adam_run *run = &t->host_runs[r];
        size_t a = run->offset;
        ZOE_TRY(zoe_adam_host(run->no_decay ? exempt : decayed, master + a, m + a, v + a, grad + a,
                              ZOE_F32, out ? (char *)out + a * esz : NULL, out_dtype, run->len));
    }
    return ZOE_OK;
}

zoe_status zoe_adam_table_step_state(zoe_stream *stream, const zoe_adam_table *t,
                                     const zoe_adam_consts *decayed, const zoe_adam_consts *exempt,
                                     const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                     const zoe_adam_state *st, size_t n, const float *grad,
                                     void *out, zoe_dtype out_dtype) {
    if (!t || !decayed || !exempt || !r || !dt || !st)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam table step (state): NULL argument");
    ZOE_TRY(zoe_adam_state_dtypes_check(dt));
    for (int i = 0; i < t->count; i++) {
        const zoe_adam_run *run = &t->host_runs[i];
        size_t end_before = i ? t->host_runs[i - 1].offset + t->host_runs[i - 1].len : 0;
        if (run->offset < end_before || run->offset > n || run->len > n - run->offset)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "adam table step (state): run %d [%zu, %zu) overlaps the one before "
                            "or leaves the %zu elements",
                            i, run->offset, run->offset + run->len, n);
    }
    if (t->total == 0 && !zoe_adam_state_has_int8(dt)) return ZOE_OK;
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_adam_state_runs_cuda(zoe_stream_native(stream), decayed, exempt, r, dt, st,
                                        t->device_runs, t->count, n, grad, out, out_dtype);
#endif
    zoe_adam_state_piece *pieces = malloc((t->count ? (size_t)t->count : 1) * sizeof *pieces);
    if (!pieces) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "adam table step: %d pieces", t->count);
    const size_t wsz = zoe_adam_state_esize(dt->master), osz = zoe_dtype_size(out_dtype);
    for (int i = 0; i < t->count; i++) {
        const zoe_adam_run *run = &t->host_runs[i];
        pieces[i] = (zoe_adam_state_piece){.offset = run->offset,
                                           .len = run->len,
                                           .c = run->no_decay ? exempt : decayed,
                                           .master = (char *)st->master + run->offset * wsz,
                                           .grad = grad + run->offset,
                                           .out = out ? (char *)out + run->offset * osz : NULL};
    }
    zoe_status status =
        zoe_adam_state_host_pieces(r, dt, st, 0, pieces, t->count, ZOE_F32, out_dtype, n);
    free(pieces);
    return status;
}

zoe_status zoe_adam_table_sumsq(zoe_stream *stream, zoe_adam_table *t, const float *grad,
                                double *host_sumsq) {
    if (!t || !host_sumsq)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam table sumsq: NULL argument");
    if (t->total == 0) return ZOE_OK;
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream)) {
        void *s = zoe_stream_native(stream);
        ZOE_TRY(zoe_sumsq_runs_cuda(s, t->device_runs, t->count, t->total, grad, t->partials,
                                    t->partials + ZOE_SUMSQ_MAX_BLOCKS));
        ZOE_TRY(zoe_memcpy_async(t->pinned_sum, t->partials + ZOE_SUMSQ_MAX_BLOCKS, sizeof(double),
                                 ZOE_COPY_DEVICE_TO_HOST, stream));
        ZOE_TRY(zoe_stream_synchronize(stream));
        *host_sumsq += *t->pinned_sum;
        return ZOE_OK;
    }
#endif
    for (int r = 0; r < t->count; r++)
        if (t->host_runs[r].counted)
            *host_sumsq += zoe_sumsq_host(grad + t->host_runs[r].offset, t->host_runs[r].len);
    return ZOE_OK;
}

zoe_status zoe_convert_stream(zoe_stream *stream, void *dst, zoe_dtype dst_dtype, const void *src,
                              zoe_dtype src_dtype, size_t n) {
#ifdef ZOE_HAVE_CUDA
    if (on_cuda(stream))
        return zoe_convert_cuda(zoe_stream_native(stream), dst, dst_dtype, src, src_dtype, n);
#endif
    return zoe_convert(dst, dst_dtype, src, src_dtype, n);
}
