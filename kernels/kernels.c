/* The op table's front: the context, argument validation (once, here, for every backend) and
 * dispatch to the backend's implementation. A backend implements zoe_<backend>_<op>(ctx, <the
 * public op's arguments after k>); DISPATCH picks it. The CUDA half adds its context in the
 * `cuda` slot and a branch to DISPATCH.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <stdlib.h>
#include <string.h>
#include "kernels/attention_plan.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernels.h"
#ifdef ZOE_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif
#include "runtime/clock.h"
#include "runtime/error.h"

struct zoe_kernels {
    zoe_backend backend;
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernel_plan plan;
    zoe_cpu_kernels *cpu;          /* the CPU backend's context and workspace */
    struct zoe_cuda_kernels *cuda; /* the CUDA backend's context (kernels/cuda), when built */
    zoe_kernel_profile profile;
};

#ifdef ZOE_HAVE_CUDA
#define DISPATCH(op, ...)                                                                          \
    (k->backend == ZOE_BACKEND_CUDA ? zoe_cuda_##op(k->cuda, __VA_ARGS__)                          \
                                    : zoe_cpu_##op(k->cpu, __VA_ARGS__))
#else
#define DISPATCH(op, ...) zoe_cpu_##op(k->cpu, __VA_ARGS__)
#endif

/* RUN: the dispatch, timed into the context's profile (a clock read each side: ~50 ns). */
#define RUN(op, ...)                                                                               \
    do {                                                                                           \
        double t0_ = zoe_clock_seconds();                                                          \
        zoe_status st_ = DISPATCH(op, __VA_ARGS__);                                                \
        k->profile.seconds[ZOE_KOP_##op] += zoe_clock_seconds() - t0_;                             \
        k->profile.calls[ZOE_KOP_##op]++;                                                          \
        return st_;                                                                                \
    } while (0)

const char *zoe_kernel_op_name(zoe_kernel_op op) {
    static const char *const names[] = {
#define ZOE_KERNEL_OP_NAME(name, params) #name,
        ZOE_KERNEL_OPS(ZOE_KERNEL_OP_NAME)
#undef ZOE_KERNEL_OP_NAME
    };
    return op >= 0 && op < ZOE_KOP_COUNT ? names[op] : "unknown";
}

void zoe_kernels_profile(const zoe_kernels *k, zoe_kernel_profile *out) {
    *out = k->profile;
}

void zoe_kernels_profile_reset(zoe_kernels *k) {
    memset(&k->profile, 0, sizeof k->profile);
}

/* ---- validation ---- */

static zoe_status check_context(const zoe_kernels *k, const char *op) {
    if (!k) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: kernels context is NULL", op);
    return ZOE_OK;
}

/* A storage dtype this backend computes in. */
static zoe_status check_dtype(const zoe_kernels *k, const char *op, zoe_dtype dt) {
    if (dt != ZOE_F32 && dt != ZOE_BF16 && dt != ZOE_F16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: dtype %d (%s) is not a float storage dtype",
                        op, (int)dt, zoe_dtype_name(dt));
    if (k->backend == ZOE_BACKEND_CPU && dt == ZOE_F16)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "%s: fp16 storage is not supported by the CPU kernels (use fp32 or bf16)",
                        op);
    return ZOE_OK;
}

static zoe_status check_ptr(const char *op, const char *name, const void *p) {
    if (!p) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
    return ZOE_OK;
}

static zoe_status check_size(const char *op, const char *name, int64_t v) {
    if (v < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %s=%lld is negative", op, name,
                        (long long)v);
    return ZOE_OK;
}

/* 0 <= v <= the plan's limit (the workspace was sized for it). */
static zoe_status check_planned(const char *op, const char *name, int64_t v, const char *field,
                                int64_t limit) {
    ZOE_TRY(check_size(op, name, v));
    if (v > limit)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: %s=%lld exceeds the plan's %s=%lld given to zoe_kernels_create", op,
                        name, (long long)v, field, (long long)limit);
    return ZOE_OK;
}

#define TRY_PTR(op, p)            ZOE_TRY(check_ptr(op, #p, p))
#define TRY_SIZE(op, v)           ZOE_TRY(check_size(op, #v, v))
#define TRY_PLANNED(op, v, field) ZOE_TRY(check_planned(op, #v, v, #field, k->plan.field))

/* ---- the context ---- */

zoe_status zoe_kernels_create(zoe_device *dev, zoe_stream *stream, const zoe_kernel_plan *plan,
                              zoe_kernels **out) {
    const char *op = "zoe_kernels_create";
    TRY_PTR(op, out);
    *out = NULL;
    TRY_PTR(op, dev);
    TRY_PTR(op, stream);
    TRY_PTR(op, plan);
    TRY_SIZE(op, plan->max_rows);
    TRY_SIZE(op, plan->max_dim);
    TRY_SIZE(op, plan->max_seq);
    TRY_SIZE(op, plan->max_heads);
    TRY_SIZE(op, plan->max_head_dim);
    const int64_t limits[] = {plan->max_rows, plan->max_dim, plan->max_seq, plan->max_heads,
                              plan->max_head_dim};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++)
        if (limits[i] > INT32_MAX) /* BLAS takes 32-bit sizes and leading dimensions */
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: plan limit %lld exceeds the 32-bit sizes BLAS takes", op,
                            (long long)limits[i]);
    if (zoe_stream_device(stream) != dev)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: the stream belongs to another device", op);
    zoe_backend backend = zoe_device_backend(dev);
#ifndef ZOE_HAVE_CUDA
    if (backend != ZOE_BACKEND_CPU)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "%s: CUDA kernels not built (device backend %s has no op table)", op,
                        zoe_backend_name(backend));
#endif
    zoe_kernels *k = calloc(1, sizeof *k);
    if (!k) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s: context allocation failed", op);
    k->backend = backend;
    k->dev = dev;
    k->stream = stream;
    k->plan = *plan;
#ifdef ZOE_HAVE_CUDA
    zoe_status st = backend == ZOE_BACKEND_CUDA
                        ? zoe_cuda_kernels_create(dev, stream, plan, &k->cuda)
                        : zoe_cpu_kernels_create(plan, &k->cpu);
#else
    zoe_status st = zoe_cpu_kernels_create(plan, &k->cpu);
#endif
    if (st != ZOE_OK) {
        zoe_kernels_destroy(k);
        return st;
    }
    *out = k;
    return ZOE_OK;
}

void zoe_kernels_destroy(zoe_kernels *k) {
    if (!k) return;
    zoe_cpu_kernels_destroy(k->cpu);
#ifdef ZOE_HAVE_CUDA
    zoe_cuda_kernels_destroy(k->cuda);
#endif
    free(k);
}

size_t zoe_kernels_workspace_bytes(zoe_backend backend, const zoe_kernel_plan *plan,
                                   int host_threads) {
    if (backend == ZOE_BACKEND_CPU) return zoe_cpu_workspace_bytes(plan, host_threads);
    /* kernels/cuda/context.cu's regions: cuBLAS's 32 MiB, the column-sum partials (64 groups x
     * 2 outputs x max_dim floats), attention's row deltas, its tensor-core scores and its dk/dv
     * partial sums, the embedding sort's keys and cub scratch (bounded by the keys again), the
     * row losses; each region 256-byte aligned. */
    size_t rows = (size_t)plan->max_rows;
    size_t regions[] = {(size_t)32 << 20,
                        64 * 2 * (size_t)plan->max_dim * sizeof(float),
                        rows * (size_t)plan->max_heads * sizeof(float),
                        (size_t)zoe_attention_gemm_scratch_bytes(plan->max_seq, plan->max_heads),
                        (size_t)zoe_attention_dkv_partial_bytes(plan->max_rows, plan->max_heads,
                                                                plan->max_head_dim),
                        4 * rows * sizeof(int32_t),
                        4 * rows * sizeof(int32_t) + ((size_t)1 << 20),
                        2 * rows * sizeof(float)};
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof regions / sizeof regions[0]; i++)
        bytes += (regions[i] + 255) / 256 * 256;
    return bytes;
}

zoe_backend zoe_kernels_backend(const zoe_kernels *k) {
    return k->backend;
}
zoe_stream *zoe_kernels_stream(const zoe_kernels *k) {
    return k->stream;
}

/* ---- ops ---- */

zoe_status zoe_matmul_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, const void *w,
                              const void *b, int64_t M, int64_t K, int64_t N) {
    const char *op = "zoe_matmul_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, x);
    TRY_PTR(op, w);
    TRY_PLANNED(op, M, max_rows);
    TRY_PLANNED(op, K, max_dim);
    TRY_PLANNED(op, N, max_dim);
    RUN(matmul_forward, dt, y, x, w, b, M, K, N);
}

zoe_status zoe_matmul_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dw, void *db,
                               const void *dy, const void *x, const void *w, int64_t M, int64_t K,
                               int64_t N) {
    const char *op = "zoe_matmul_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    if (dx) TRY_PTR(op, w);
    if (dw) TRY_PTR(op, x);
    TRY_PLANNED(op, M, max_rows);
    TRY_PLANNED(op, K, max_dim);
    TRY_PLANNED(op, N, max_dim);
    RUN(matmul_backward, dt, dx, dw, db, dy, x, w, M, K, N);
}

zoe_status zoe_layernorm_forward(zoe_kernels *k, zoe_dtype dt, void *y, float *mean, float *rstd,
                                 const void *x, const void *gamma, const void *beta, int64_t rows,
                                 int64_t C) {
    const char *op = "zoe_layernorm_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, mean);
    TRY_PTR(op, rstd);
    TRY_PTR(op, x);
    TRY_PTR(op, gamma);
    TRY_PTR(op, beta);
    TRY_PLANNED(op, rows, max_rows);
    TRY_PLANNED(op, C, max_dim);
    RUN(layernorm_forward, dt, y, mean, rstd, x, gamma, beta, rows, C);
}

zoe_status zoe_layernorm_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dgamma, void *dbeta,
                                  const void *dy, const void *x, const void *gamma,
                                  const float *mean, const float *rstd, int64_t rows, int64_t C) {
    const char *op = "zoe_layernorm_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    TRY_PTR(op, x);
    TRY_PTR(op, gamma);
    TRY_PTR(op, mean);
    TRY_PTR(op, rstd);
    TRY_PLANNED(op, rows, max_rows);
    TRY_PLANNED(op, C, max_dim);
    RUN(layernorm_backward, dt, dx, dgamma, dbeta, dy, x, gamma, mean, rstd, rows, C);
}

zoe_status zoe_gelu_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n) {
    const char *op = "zoe_gelu_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, x);
    TRY_SIZE(op, n);
    RUN(gelu_forward, dt, y, x, n);
}

zoe_status zoe_gelu_backward(zoe_kernels *k, zoe_dtype dt, void *dx, const void *dy, const void *x,
                             int64_t n) {
    const char *op = "zoe_gelu_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    TRY_PTR(op, x);
    TRY_SIZE(op, n);
    if (!dx) return ZOE_OK;
    RUN(gelu_backward, dt, dx, dy, x, n);
}

static zoe_status check_attention_shape(const zoe_kernels *k, const char *op, int64_t B, int64_t T,
                                        int64_t NH, int64_t HS) {
    TRY_SIZE(op, B);
    TRY_PLANNED(op, T, max_seq);
    TRY_PLANNED(op, NH, max_heads);
    TRY_PLANNED(op, HS, max_head_dim);
    int64_t rows = B * T;
    if (rows > k->plan.max_rows)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: B*T=%lld*%lld exceeds the plan's max_rows=%lld", op, (long long)B,
                        (long long)T, (long long)k->plan.max_rows);
    return ZOE_OK;
}

zoe_status zoe_attention_forward(zoe_kernels *k, zoe_dtype dt, void *out, float *lse,
                                 const void *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    const char *op = "zoe_attention_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, out);
    TRY_PTR(op, lse);
    TRY_PTR(op, qkv);
    ZOE_TRY(check_attention_shape(k, op, B, T, NH, HS));
    RUN(attention_forward, dt, out, lse, qkv, B, T, NH, HS);
}

zoe_status zoe_attention_backward(zoe_kernels *k, zoe_dtype dt, void *dqkv, const void *dout,
                                  const void *qkv, const void *out, const float *lse, int64_t B,
                                  int64_t T, int64_t NH, int64_t HS) {
    const char *op = "zoe_attention_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dout);
    TRY_PTR(op, qkv);
    TRY_PTR(op, out);
    TRY_PTR(op, lse);
    ZOE_TRY(check_attention_shape(k, op, B, T, NH, HS));
    RUN(attention_backward, dt, dqkv, dout, qkv, out, lse, B, T, NH, HS);
}

static zoe_status check_gqa_heads(const char *op, int64_t NH, int64_t NKV) {
    TRY_SIZE(op, NKV);
    if (NKV == 0 || NH % NKV != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: NH=%lld query heads not divisible by NKV=%lld", op, (long long)NH,
                        (long long)NKV);
    return ZOE_OK;
}

zoe_status zoe_attention_gqa_forward(zoe_kernels *k, zoe_dtype dt, void *out, float *lse,
                                     const void *q, const void *kv, int64_t B, int64_t T,
                                     int64_t NH, int64_t NKV, int64_t HS) {
    const char *op = "zoe_attention_gqa_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, out);
    TRY_PTR(op, lse);
    TRY_PTR(op, q);
    TRY_PTR(op, kv);
    ZOE_TRY(check_attention_shape(k, op, B, T, NH, HS));
    ZOE_TRY(check_gqa_heads(op, NH, NKV));
    RUN(attention_gqa_forward, dt, out, lse, q, kv, B, T, NH, NKV, HS);
}

zoe_status zoe_attention_gqa_backward(zoe_kernels *k, zoe_dtype dt, void *dq, void *dkv,
                                      const void *dout, const void *q, const void *kv,
                                      const void *out, const float *lse, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t HS) {
    const char *op = "zoe_attention_gqa_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dout);
    TRY_PTR(op, q);
    TRY_PTR(op, kv);
    TRY_PTR(op, out);
    TRY_PTR(op, lse);
    ZOE_TRY(check_attention_shape(k, op, B, T, NH, HS));
    ZOE_TRY(check_gqa_heads(op, NH, NKV));
    RUN(attention_gqa_backward, dt, dq, dkv, dout, q, kv, out, lse, B, T, NH, NKV, HS);
}

zoe_status zoe_rmsnorm_forward(zoe_kernels *k, zoe_dtype dt, void *y, float *rstd, const void *x,
                               const void *gamma, int64_t rows, int64_t C, float eps) {
    const char *op = "zoe_rmsnorm_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, rstd);
    TRY_PTR(op, x);
    TRY_PTR(op, gamma);
    TRY_PLANNED(op, rows, max_rows);
    TRY_PLANNED(op, C, max_dim);
    if (!(eps > 0.0f && eps < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: eps=%g outside (0, 1)", op, (double)eps);
    RUN(rmsnorm_forward, dt, y, rstd, x, gamma, rows, C, eps);
}

zoe_status zoe_rmsnorm_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dgamma,
                                const void *dy, const void *x, const void *gamma, const float *rstd,
                                int64_t rows, int64_t C) {
    const char *op = "zoe_rmsnorm_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    TRY_PTR(op, x);
    TRY_PTR(op, gamma);
    TRY_PTR(op, rstd);
    TRY_PLANNED(op, rows, max_rows);
    TRY_PLANNED(op, C, max_dim);
    RUN(rmsnorm_backward, dt, dx, dgamma, dy, x, gamma, rstd, rows, C);
}

/* B*T rows within the plan; every rotated vector inside its row, heads apart. */
static zoe_status check_rope_shape(const zoe_kernels *k, const char *op, int64_t B, int64_t T,
                                   int64_t heads, int64_t HS, int64_t head_stride,
                                   int64_t row_stride) {
    TRY_SIZE(op, B);
    TRY_SIZE(op, T);
    TRY_SIZE(op, heads);
    TRY_PLANNED(op, HS, max_head_dim);
    if (B * T > k->plan.max_rows)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: B*T=%lld exceeds the plan's max_rows=%lld",
                        op, (long long)(B * T), (long long)k->plan.max_rows);
    if (HS % 2 != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: HS=%lld is odd", op, (long long)HS);
    if (heads > 0 && (head_stride < HS || (heads - 1) * head_stride + HS > row_stride))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: %lld heads of HS=%lld at head_stride=%lld do not fit row_stride=%lld",
                        op, (long long)heads, (long long)HS, (long long)head_stride,
                        (long long)row_stride);
    return ZOE_OK;
}

zoe_status zoe_rope_forward(zoe_kernels *k, zoe_dtype dt, void *x, const float *inv_freq, int64_t B,
                            int64_t T, int64_t heads, int64_t HS, int64_t head_stride,
                            int64_t row_stride) {
    const char *op = "zoe_rope_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, x);
    TRY_PTR(op, inv_freq);
    ZOE_TRY(check_rope_shape(k, op, B, T, heads, HS, head_stride, row_stride));
    RUN(rope_forward, dt, x, inv_freq, B, T, heads, HS, head_stride, row_stride);
}

zoe_status zoe_rope_backward(zoe_kernels *k, zoe_dtype dt, void *dx, const float *inv_freq,
                             int64_t B, int64_t T, int64_t heads, int64_t HS, int64_t head_stride,
                             int64_t row_stride) {
    const char *op = "zoe_rope_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dx);
    TRY_PTR(op, inv_freq);
    ZOE_TRY(check_rope_shape(k, op, B, T, heads, HS, head_stride, row_stride));
    RUN(rope_backward, dt, dx, inv_freq, B, T, heads, HS, head_stride, row_stride);
}

zoe_status zoe_rope_forward_at(zoe_kernels *k, zoe_dtype dt, void *x, const float *inv_freq,
                               int64_t pos0, int64_t rows, int64_t heads, int64_t HS,
                               int64_t head_stride, int64_t row_stride) {
    const char *op = "zoe_rope_forward_at";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, x);
    TRY_PTR(op, inv_freq);
    TRY_SIZE(op, pos0);
    ZOE_TRY(check_rope_shape(k, op, 1, rows, heads, HS, head_stride, row_stride));
    RUN(rope_forward_at, dt, x, inv_freq, pos0, rows, heads, HS, head_stride, row_stride);
}

/* Every head inside its row at both operands, the cache within the plan's sequence. */
static zoe_status check_cached_shape(const zoe_kernels *k, const char *op, int64_t pos, int64_t n,
                                     int64_t NH, int64_t NKV, int64_t HS, int64_t q_head_stride,
                                     int64_t q_row_stride, int64_t kv_head_stride,
                                     int64_t kv_row_stride) {
    TRY_SIZE(op, pos);
    TRY_PLANNED(op, n, max_rows);
    TRY_PLANNED(op, NH, max_heads);
    TRY_PLANNED(op, HS, max_head_dim);
    ZOE_TRY(check_gqa_heads(op, NH, NKV));
    if (pos + n > k->plan.max_seq)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: pos + n = %lld + %lld exceeds the plan's max_seq=%lld", op,
                        (long long)pos, (long long)n, (long long)k->plan.max_seq);
    if (NH > 0 && (q_head_stride < HS || (NH - 1) * q_head_stride + HS > q_row_stride))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: %lld query heads of HS=%lld at stride %lld do not fit row stride %lld",
                        op, (long long)NH, (long long)HS, (long long)q_head_stride,
                        (long long)q_row_stride);
    if (NKV > 0 && (kv_head_stride < 2 * HS || (NKV - 1) * kv_head_stride + 2 * HS > kv_row_stride))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: %lld KV heads of 2 x HS=%lld at stride %lld do not fit row stride "
                        "%lld",
                        op, (long long)NKV, (long long)HS, (long long)kv_head_stride,
                        (long long)kv_row_stride);
    return ZOE_OK;
}

zoe_status zoe_attention_cached(zoe_kernels *k, zoe_dtype dt, void *out, const void *q,
                                const void *kv, int64_t pos, int64_t n, int64_t NH, int64_t NKV,
                                int64_t HS, int64_t q_head_stride, int64_t q_row_stride,
                                int64_t kv_head_stride, int64_t kv_row_stride) {
    const char *op = "zoe_attention_cached";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, out);
    TRY_PTR(op, q);
    TRY_PTR(op, kv);
    ZOE_TRY(check_cached_shape(k, op, pos, n, NH, NKV, HS, q_head_stride, q_row_stride,
                               kv_head_stride, kv_row_stride));
    RUN(attention_cached, dt, out, q, kv, pos, n, NH, NKV, HS, q_head_stride, q_row_stride,
        kv_head_stride, kv_row_stride);
}

zoe_status zoe_swiglu_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *gu, int64_t rows,
                              int64_t F) {
    const char *op = "zoe_swiglu_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, gu);
    TRY_SIZE(op, rows);
    TRY_SIZE(op, F);
    RUN(swiglu_forward, dt, y, gu, rows, F);
}

zoe_status zoe_swiglu_backward(zoe_kernels *k, zoe_dtype dt, void *dgu, const void *dy,
                               const void *gu, int64_t rows, int64_t F) {
    const char *op = "zoe_swiglu_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    TRY_PTR(op, gu);
    TRY_SIZE(op, rows);
    TRY_SIZE(op, F);
    if (!dgu) return ZOE_OK;
    RUN(swiglu_backward, dt, dgu, dy, gu, rows, F);
}

zoe_status zoe_residual_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *a, const void *b,
                                int64_t n) {
    const char *op = "zoe_residual_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, a);
    TRY_PTR(op, b);
    TRY_SIZE(op, n);
    RUN(residual_forward, dt, y, a, b, n);
}

zoe_status zoe_add(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n) {
    const char *op = "zoe_add";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, x);
    TRY_SIZE(op, n);
    RUN(add, dt, y, x, n);
}

zoe_status zoe_scale(zoe_kernels *k, zoe_dtype dt, void *y, float s, int64_t n) {
    const char *op = "zoe_scale";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_SIZE(op, n);
    RUN(scale, dt, y, s, n);
}

zoe_status zoe_dropout(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n, float p,
                       uint64_t seed, uint64_t stream) {
    const char *op = "zoe_dropout";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, x);
    TRY_SIZE(op, n);
    if (!(p >= 0.0f && p < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: p=%g outside [0, 1)", op, (double)p);
    RUN(dropout, dt, y, x, n, p, seed, stream);
}

static zoe_status check_vocab_range(const zoe_kernels *k, const char *op, int64_t vocab_start,
                                    int64_t vocab_rows) {
    TRY_SIZE(op, vocab_start);
    TRY_PLANNED(op, vocab_rows, max_dim);
    if (vocab_start + vocab_rows > INT32_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: vocab range [%lld, %lld) does not fit int32 token ids", op,
                        (long long)vocab_start, (long long)(vocab_start + vocab_rows));
    return ZOE_OK;
}

/* B, T and C within the plan (B*T tokens are rows), and a valid vocabulary range. */
static zoe_status check_embedding_shape(const zoe_kernels *k, const char *op, int64_t B, int64_t T,
                                        int64_t C, int64_t vocab_start, int64_t vocab_rows) {
    TRY_SIZE(op, B);
    TRY_SIZE(op, T);
    TRY_PLANNED(op, C, max_dim);
    ZOE_TRY(check_vocab_range(k, op, vocab_start, vocab_rows));
    if (B * T > k->plan.max_rows)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: B*T=%lld exceeds the plan's max_rows=%lld",
                        op, (long long)(B * T), (long long)k->plan.max_rows);
    return ZOE_OK;
}

zoe_status zoe_embedding_forward(zoe_kernels *k, zoe_dtype dt, void *y, const int32_t *tokens,
                                 const void *wte, const void *wpe, int64_t B, int64_t T, int64_t C,
                                 int64_t vocab_start, int64_t vocab_rows) {
    const char *op = "zoe_embedding_forward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, y);
    TRY_PTR(op, tokens);
    TRY_PTR(op, wte);
    ZOE_TRY(check_embedding_shape(k, op, B, T, C, vocab_start, vocab_rows));
    RUN(embedding_forward, dt, y, tokens, wte, wpe, B, T, C, vocab_start, vocab_rows);
}

zoe_status zoe_embedding_backward(zoe_kernels *k, zoe_dtype dt, void *dwte, void *dwpe,
                                  const void *dy, const int32_t *tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t vocab_start, int64_t vocab_rows) {
    const char *op = "zoe_embedding_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dy);
    TRY_PTR(op, tokens);
    ZOE_TRY(check_embedding_shape(k, op, B, T, C, vocab_start, vocab_rows));
    RUN(embedding_backward, dt, dwte, dwpe, dy, tokens, B, T, C, vocab_start, vocab_rows);
}

/* rows and V within the plan, 0 <= v_valid <= V. */
static zoe_status check_logits_shape(const zoe_kernels *k, const char *op, int64_t rows, int64_t V,
                                     int64_t v_valid) {
    TRY_PLANNED(op, rows, max_rows);
    TRY_PLANNED(op, V, max_dim);
    TRY_SIZE(op, v_valid);
    if (v_valid > V)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: v_valid=%lld exceeds V=%lld", op,
                        (long long)v_valid, (long long)V);
    return ZOE_OK;
}

zoe_status zoe_xent_row_max(zoe_kernels *k, zoe_dtype dt, float *row_max, const void *logits,
                            int64_t rows, int64_t V, int64_t v_valid) {
    const char *op = "zoe_xent_row_max";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, row_max);
    TRY_PTR(op, logits);
    ZOE_TRY(check_logits_shape(k, op, rows, V, v_valid));
    RUN(xent_row_max, dt, row_max, logits, rows, V, v_valid);
}

zoe_status zoe_xent_row_sums(zoe_kernels *k, zoe_dtype dt, float *sum_exp, float *target_logit,
                             const void *logits, const float *row_max, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t v_valid, int64_t vocab_start,
                             int32_t ignore_index) {
    const char *op = "zoe_xent_row_sums";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, sum_exp);
    TRY_PTR(op, target_logit);
    TRY_PTR(op, logits);
    TRY_PTR(op, row_max);
    TRY_PTR(op, targets);
    ZOE_TRY(check_logits_shape(k, op, rows, V, v_valid));
    TRY_SIZE(op, vocab_start);
    RUN(xent_row_sums, dt, sum_exp, target_logit, logits, row_max, targets, rows, V, v_valid,
        vocab_start, ignore_index);
}

zoe_status zoe_xent_loss(zoe_kernels *k, float *losses, float *mean_loss, int64_t *count,
                         const float *row_max, const float *sum_exp, const float *target_logit,
                         const int32_t *targets, int64_t rows, int32_t ignore_index) {
    const char *op = "zoe_xent_loss";
    ZOE_TRY(check_context(k, op));
    TRY_PTR(op, row_max);
    TRY_PTR(op, sum_exp);
    TRY_PTR(op, target_logit);
    TRY_PTR(op, targets);
    TRY_PLANNED(op, rows, max_rows);
    RUN(xent_loss, losses, mean_loss, count, row_max, sum_exp, target_logit, targets, rows,
        ignore_index);
}

zoe_status zoe_xent_backward(zoe_kernels *k, zoe_dtype dt, void *dlogits, const void *logits,
                             const float *row_max, const float *sum_exp, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t v_valid, int64_t vocab_start,
                             int32_t ignore_index, float scale) {
    const char *op = "zoe_xent_backward";
    ZOE_TRY(check_context(k, op));
    ZOE_TRY(check_dtype(k, op, dt));
    TRY_PTR(op, dlogits);
    TRY_PTR(op, logits);
    TRY_PTR(op, row_max);
    TRY_PTR(op, sum_exp);
    TRY_PTR(op, targets);
    ZOE_TRY(check_logits_shape(k, op, rows, V, v_valid));
    TRY_SIZE(op, vocab_start);
    RUN(xent_backward, dt, dlogits, logits, row_max, sum_exp, targets, rows, V, v_valid,
        vocab_start, ignore_index, scale);
}

zoe_status zoe_cast(zoe_kernels *k, void *dst, zoe_dtype dst_dt, const void *src, zoe_dtype src_dt,
                    int64_t n) {
    const char *op = "zoe_cast";
    ZOE_TRY(check_context(k, op));
    TRY_PTR(op, dst);
    TRY_PTR(op, src);
    TRY_SIZE(op, n);
    /* Casts are storage conversions: fp16 is fine on every backend. */
    if ((dst_dt != ZOE_F32 && dst_dt != ZOE_BF16 && dst_dt != ZOE_F16) ||
        (src_dt != ZOE_F32 && src_dt != ZOE_BF16 && src_dt != ZOE_F16))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: cannot cast %s (%d) to %s (%d)", op,
                        zoe_dtype_name(src_dt), (int)src_dt, zoe_dtype_name(dst_dt), (int)dst_dt);
    RUN(cast, dst, dst_dt, src, src_dt, n);
}
