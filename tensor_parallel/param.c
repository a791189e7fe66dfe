/* Parameter descriptors, TP-invariant initialisation and gathering to global layout.
 *
 * Explained in docs/tensor_parallel.md, "Layers" and "Replicated parameters stay identical". */
#include "tensor_parallel/param.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "kernels/philox.h"

/* shards: the distinct blocks of a split (tp_size for a plain split; 1 when replicated). */
static zoe_status describe(zoe_tp_param *p, const char *name, int ndim, int64_t rows, int64_t cols,
                           zoe_tp_split split, int shards, zoe_tp_init_kind init, float init_std,
                           int tp_size, int tp_rank) {
    if (!p || !name) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "param describe: NULL argument");
    if (strlen(name) >= ZOE_TP_NAME_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "param name '%s' longer than %d characters", name,
                        ZOE_TP_NAME_MAX - 1);
    if (rows <= 0 || cols <= 0 || (ndim == 1 && cols != 1) || ndim < 1 || ndim > 2)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: bad shape [%lld, %lld] for ndim=%d", name,
                        (long long)rows, (long long)cols, ndim);
    if (tp_size <= 0 || tp_rank < 0 || tp_rank >= tp_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tp rank %d of size %d", name, tp_rank,
                        tp_size);
    int64_t split_len = split == ZOE_TP_SPLIT_ROWS ? rows : split == ZOE_TP_SPLIT_COLS ? cols : 0;
    if (split != ZOE_TP_REPLICATED && (shards <= 0 || tp_size % shards != 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %d shards do not divide tp=%d", name, shards,
                        tp_size);
    if (split != ZOE_TP_REPLICATED && split_len % shards != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %s=%lld not divisible by %s=%d", name,
                        split == ZOE_TP_SPLIT_ROWS ? "rows" : "cols", (long long)split_len,
                        shards == tp_size ? "tp" : "shards", shards);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->global_shape[0] = p->local_shape[0] = rows;
    p->global_shape[1] = p->local_shape[1] = cols;
    p->replicas = split == ZOE_TP_REPLICATED ? tp_size : tp_size / shards;
    if (split == ZOE_TP_SPLIT_ROWS) {
        p->local_shape[0] = rows / shards;
        p->local_offset[0] = tp_rank / p->replicas * p->local_shape[0];
    } else if (split == ZOE_TP_SPLIT_COLS) {
        p->local_shape[1] = cols / tp_size;
        p->local_offset[1] = tp_rank * p->local_shape[1];
    }
    p->local_numel = p->local_shape[0] * p->local_shape[1];
    p->split = split;
    p->replicated = split == ZOE_TP_REPLICATED;
    p->init = init;
    p->init_std = init_std;
    p->rng_stream = zoe_philox_stream_of_name(name);
    return ZOE_OK;
}

zoe_status zoe_tp_param_describe(zoe_tp_param *p, const char *name, int ndim, int64_t rows,
                                 int64_t cols, zoe_tp_split split, zoe_tp_init_kind init,
                                 float init_std, int tp_size, int tp_rank) {
    return describe(p, name, ndim, rows, cols, split, split == ZOE_TP_REPLICATED ? 1 : tp_size,
                    init, init_std, tp_size, tp_rank);
}

zoe_status zoe_tp_param_describe_sharded(zoe_tp_param *p, const char *name, int ndim, int64_t rows,
                                         int64_t cols, int shards, zoe_tp_init_kind init,
                                         float init_std, int tp_size, int tp_rank) {
    return describe(p, name, ndim, rows, cols, ZOE_TP_SPLIT_ROWS, shards, init, init_std, tp_size,
                    tp_rank);
}

zoe_status zoe_tp_layernorm_describe(zoe_tp_param *weight, zoe_tp_param *bias, const char *name,
                                     int64_t C, int tp_size, int tp_rank) {
    char full[ZOE_TP_NAME_MAX + 8];
    zoe_tp_param w, b;
    snprintf(full, sizeof full, "%s.weight", name);
    ZOE_TRY(zoe_tp_param_describe(&w, full, 1, C, 1, ZOE_TP_REPLICATED, ZOE_TP_INIT_ONES, 0,
                                  tp_size, tp_rank));
    snprintf(full, sizeof full, "%s.bias", name);
    ZOE_TRY(zoe_tp_param_describe(&b, full, 1, C, 1, ZOE_TP_REPLICATED, ZOE_TP_INIT_ZEROS, 0,
                                  tp_size, tp_rank));
    *weight = w, *bias = b;
    return ZOE_OK;
}

int64_t zoe_tp_params_bind_flat(zoe_tp_param *const *params, int n, zoe_dtype dtype, void *data,
                                void *grad) {
    int64_t used = 0;
    size_t es = zoe_dtype_size(dtype);
    for (int i = 0; i < n; i++) {
        params[i]->data = data ? (char *)data + (size_t)used * es : NULL;
        params[i]->grad = grad ? (char *)grad + (size_t)used * es : NULL;
        used += params[i]->local_numel;
    }
    return used;
}

/* Host chunk of the shard, in rows: bounded so that a 70B layer never needs its whole shard
 * twice on the host. */
#define INIT_CHUNK_ELEMS ((int64_t)1 << 20)

/* Shard rows [r0, r0 + nrows) as fp32 values, row by row: each row of the shard is one run of
 * consecutive global indices, so Philox fills it in one call. */
static void shard_values(const zoe_tp_param *p, uint64_t seed, int64_t r0, int64_t nrows,
                         float *out) {
    int64_t lc = p->local_shape[1], gc = p->global_shape[1];
    /* Rows are independent draws (Philox is counter-based): threads change no value, and a
     * multi-billion-parameter model initialises in seconds rather than minutes. */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nrows; i++) {
        float *row = out + i * lc;
        if (p->init == ZOE_TP_INIT_NORMAL) {
            uint64_t first = (uint64_t)((p->local_offset[0] + r0 + i) * gc + p->local_offset[1]);
            zoe_philox_normal_fill(row, (size_t)lc, p->init_std, seed, p->rng_stream, first);
        } else {
            float v = p->init == ZOE_TP_INIT_ONES ? 1.0f : 0.0f;
            for (int64_t j = 0; j < lc; j++) row[j] = v;
        }
    }
}

zoe_status zoe_tp_param_init(const zoe_tp *tp, const zoe_tp_param *p) {
    if (!p->data) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: init before bind", p->name);
    int64_t lc = p->local_shape[1], rows_per_chunk = INIT_CHUNK_ELEMS / lc;
    if (rows_per_chunk < 1) rows_per_chunk = 1;
    if (rows_per_chunk > p->local_shape[0]) rows_per_chunk = p->local_shape[0];
    size_t es = zoe_dtype_size(tp->dtype), chunk = (size_t)(rows_per_chunk * lc);
    float *vals = malloc(chunk * sizeof(float));
    void *stage = NULL;
    zoe_status st =
        vals ? zoe_host_alloc_for(tp->device, chunk * es, "the weights' staging buffer", &stage)
             : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s: init staging", p->name);
    for (int64_t r0 = 0; st == ZOE_OK && r0 < p->local_shape[0]; r0 += rows_per_chunk) {
        int64_t nrows =
            p->local_shape[0] - r0 < rows_per_chunk ? p->local_shape[0] - r0 : rows_per_chunk;
        shard_values(p, tp->seed, r0, nrows, vals);
        st = zoe_convert(stage, tp->dtype, vals, ZOE_F32, (size_t)(nrows * lc));
        if (st == ZOE_OK)
            st = zoe_memcpy_async((char *)p->data + (size_t)(r0 * lc) * es, stage,
                                  (size_t)(nrows * lc) * es, ZOE_COPY_HOST_TO_DEVICE, tp->stream);
        if (st == ZOE_OK) st = zoe_stream_synchronize(tp->stream); /* before stage is reused */
    }
    zoe_host_free(tp->device, stage);
    free(vals);
    return st;
}

zoe_status zoe_tp_param_gather(const zoe_tp *tp, const zoe_tp_param *p, bool of_grad,
                               void *host_out) {
    const void *src = of_grad ? p->grad : p->data;
    if (!src || !host_out)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: gather of an unbound %s", p->name,
                        of_grad ? "gradient" : "weight");
    size_t es = zoe_dtype_size(tp->dtype), local = (size_t)p->local_numel;
    int64_t rows = p->global_shape[0], cols = p->global_shape[1];
    if (p->replicated || tp->size == 1) {
        ZOE_TRY(zoe_memcpy_async(host_out, src, local * es, ZOE_COPY_DEVICE_TO_HOST, tp->stream));
        return zoe_stream_synchronize(tp->stream);
    }
    void *blocks = NULL;
    ZOE_TRY(zoe_device_alloc_for(tp->device, local * (size_t)tp->size * es,
                                 "a tensor gathered over TP", &blocks));
    zoe_status st = zoe_comm_all_gather(tp->comm, src, blocks, local, tp->dtype, tp->stream);
    /* Row shards gathered in rank order are the global tensor (one copy of each sharded
     * block: the first of its replicas); column shards arrive as [t][rows][cols / t] and are
     * interleaved row by row on the host. */
    if (st == ZOE_OK && p->split == ZOE_TP_SPLIT_ROWS) {
        for (int r = 0; st == ZOE_OK && r < tp->size; r += p->replicas)
            st = zoe_memcpy_async((char *)host_out + (size_t)(r / p->replicas) * local * es,
                                  (char *)blocks + (size_t)r * local * es, local * es,
                                  ZOE_COPY_DEVICE_TO_HOST, tp->stream);
    } else if (st == ZOE_OK) {
        int64_t w = cols / tp->size;
        for (int r = 0; st == ZOE_OK && r < tp->size; r++)
            for (int64_t i = 0; st == ZOE_OK && i < rows; i++)
                st = zoe_memcpy_async((char *)host_out + (size_t)(i * cols + r * w) * es,
                                      (char *)blocks + ((size_t)r * local + (size_t)(i * w)) * es,
                                      (size_t)w * es, ZOE_COPY_DEVICE_TO_HOST, tp->stream);
    }
    if (st == ZOE_OK) st = zoe_stream_synchronize(tp->stream);
    zoe_device_free(tp->device, blocks);
    return st;
}
