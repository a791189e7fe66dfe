/* The fused Adam/AdamW step and the gradient accumulation that feeds it.
 *
 * One pass per element reads the gradient (fp32, bf16 or fp16), the fp32 master weight and the
 * two fp32 moments, and writes the master weight, the moments and the new weight in the compute
 * dtype. Per element, in this order (the same operations, in the same order, on every path;
 * fma(a, b, c) is a * b + c rounded once):
 *
 *     g  = grad * grad_scale                   grad_scale folds 1/loss_scale, 1/k and clipping
 *     g  = fma(wd, w, g)                       Adam with L2 only
 *     m  = fma(beta1, m, (1 - beta1) * g)
 *     v  = fma(beta2, v, (1 - beta2) * (g * g))
 *     w  = w * decay                           AdamW only: decay = 1 - lr * wd
 *     w  = fma(-step_size, m / fma(sqrt(v), inv_sqrt_bc2, eps), w)
 *     out = dtype(w)                           round to nearest even
 *
 * with step_size = lr / (1 - beta1^t) and inv_sqrt_bc2 = 1 / sqrt(1 - beta2^t). Each fma is
 * written out (fmaf, the FMA intrinsics, __fmaf_rn) and nothing else is contracted, so the
 * scalar, AVX2, AVX-512 and CUDA paths give bit-identical results and a run does not depend on
 * which processor executed it. The fused forms are not for accuracy (they round less, nothing
 * more) but for the memory bound: the step is long in instructions (a division and a square root
 * per element), and four fewer operations per element let the out-of-order core keep more of its
 * loads in flight; without them the step ran 1-5 % slower than with them on an AVX-512 Xeon
 * (docs/offload.md, "Host Adam speed"). Every x86 level the step has a SIMD path for has FMA.
 *
 * Host paths are single-threaded over the range they are given; callers split work into tiles
 * of ZOE_ADAM_TILE elements and run the tiles on OpenMP threads with a static schedule, the same
 * tiling that first-touched the arrays. The *_stream variants run on a device stream: the host
 * path on the CPU backend (whose device memory is host memory), CUDA kernels on a CUDA stream.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#ifndef ZOE_KERNELS_ADAM_H
#define ZOE_KERNELS_ADAM_H

#include <stddef.h>
#include "runtime/cpu.h"
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/status.h"

/* Elements per tile of the threaded host step: 64 KiB of fp32, a whole number of 4 KiB pages. */
#define ZOE_ADAM_TILE ((size_t)16384)
/* Elements ahead of the one being updated that the host step prefetches (2 KiB of fp32): with a
 * division and a square root per element the step is long in uops, and the out-of-order window
 * alone keeps only about 1 KiB of each stream in flight. On an AVX-512 Xeon the step ran 10-20 %
 * slower than a streaming copy of its bytes without the prefetch (bench/cpu_adam.c, whose probe
 * may prefetch at the same distance). */
#define ZOE_ADAM_PREFETCH_AHEAD ((size_t)512)

typedef struct zoe_adam_hparams {
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    int decoupled;    /* 1: AdamW (decoupled decay), 0: L2 term added to the gradient */
    float grad_scale; /* multiplier applied to every incoming gradient */
    long step;        /* 1-based step number, for the bias corrections */
} zoe_adam_hparams;

/* The per-element constants, derived once per step from the hyper-parameters. */
typedef struct zoe_adam_consts {
    float grad_scale, l2, beta1, one_minus_beta1, beta2, one_minus_beta2;
    float decay, step_size, inv_sqrt_bc2, eps;
    int decoupled;
} zoe_adam_consts;

void zoe_adam_consts_init(zoe_adam_consts *c, const zoe_adam_hparams *h);

/* The fused step over n elements with the best path. grad in grad_dtype (f32, bf16, f16); out
 * (out_dtype f32, bf16 or f16) may be NULL. No buffer may overlap another. */
zoe_status zoe_adam_host(const zoe_adam_consts *c, float *master, float *m, float *v,
                         const void *grad, zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype,
                         size_t n);
/* The same reading the fp32 weights from w_in and writing the new ones to w_out. Element i is
 * read completely before anything of it is written, which allows three in-place forms and no
 * other overlap: w_out == w_in (the master updated in place); w_out == grad with an fp32
 * gradient (the new weights over the gradient they were computed from); out == grad with
 * out_dtype == grad_dtype (the new compute-dtype weights over a compute-dtype gradient). */
zoe_status zoe_adam_host_to(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m,
                            float *v, const void *grad, zoe_dtype grad_dtype, void *out,
                            zoe_dtype out_dtype, size_t n);
/* zoe_adam_host_to with a chosen path (tests and benchmarks); ZOE_ERR_UNSUPPORTED if the CPU
 * lacks it. zoe_adam_host_isa is its master-in-place form. */
zoe_status zoe_adam_host_to_isa(zoe_cpu_isa isa, const zoe_adam_consts *c, const float *w_in,
                                float *w_out, float *m, float *v, const void *grad,
                                zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype, size_t n);
zoe_status zoe_adam_host_isa(zoe_cpu_isa isa, const zoe_adam_consts *c, float *master, float *m,
                             float *v, const void *grad, zoe_dtype grad_dtype, void *out,
                             zoe_dtype out_dtype, size_t n);

/* dst[i] = dst_dtype(src[i] * scale), round to nearest even: the delayed update's snapshot of a
 * finished fp32 gradient (the fp32 accumulator is then free for the next iteration). */
zoe_status zoe_grad_snapshot_host(void *dst, zoe_dtype dst_dtype, const float *src, float scale,
                                  size_t n);
/* zoe_grad_snapshot_host with a chosen path (tests); ZOE_ERR_UNSUPPORTED if the CPU lacks it. */
zoe_status zoe_grad_snapshot_host_isa(zoe_cpu_isa isa, void *dst, zoe_dtype dst_dtype,
                                      const float *src, float scale, size_t n);

/* The delayed update's schedule variants (docs/offload.md, "Delayed parameter update"), scalar
 * passes with the same bits on every CPU. zoe_adam_predict_host: out[i] = out_dtype(w + scale *
 * (s - w)) where s is the step of constants c taken once more from w[i] with the moments m[i],
 * v[i] it left, no new gradient: w*decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps); the
 * weights the next step is predicted to reach. out must not overlap w, m or v. */
zoe_status zoe_adam_predict_host(const zoe_adam_consts *c, float scale, const float *w,
                                 const float *m, const float *v, void *out, zoe_dtype out_dtype,
                                 size_t n);
/* The delay-compensated gradient (DC-ASGD, with Adam's second moment as its adaptive scale): with
 * g = grad * grad_scale and delta = w - w_prev, the previous step (constants prev) recomputed
 * from w, m and v, grad[i] += c / grad_scale where c = lambda * g^2 / (sqrt(v_hat) + eps) * delta,
 * clamped to |g|. In place; w, m, v are read only. */
zoe_status zoe_adam_compensate_host(const zoe_adam_consts *prev, float lambda, float grad_scale,
                                    float *grad, const float *w, const float *m, const float *v,
                                    size_t n);

/* The fused step of constants c undone (ZOE_DPU_EXACT's redo, docs/offload.md): given the
 * fp32 gradient grad the step read and the w, m, v it left, restores the w, m, v it started
 * from, in place, and writes out = out_dtype(w) when out is not NULL. Computed in float64 from
 * the step's own formula solved backwards, so the restored values are within a few fp32 units in
 * the last place of the originals (not bit-exact: the step rounded); v is clamped at 0. Needs
 * beta1, beta2 > 0 and, for AdamW, decay > 0. */
zoe_status zoe_adam_undo_host(const zoe_adam_consts *c, float *w, float *m, float *v,
                              const float *grad, void *out, zoe_dtype out_dtype, size_t n);

/* dst[i] = (assign ? 0 : dst[i]) + scale * src[i] (src in f32, bf16 or f16). When sumsq is not
 * NULL it receives the sum of squares of the new dst (for the gradient norm, fused into the pass
 * that writes the gradient so that the norm costs no extra read). */
zoe_status zoe_grad_accumulate_host(float *dst, const void *src, zoe_dtype src_dtype, float scale,
                                    int assign, size_t n, double *sumsq);
/* Sum of squares of n floats. */
double zoe_sumsq_host(const float *x, size_t n);

/* On a device stream (host memory on CPU, device memory on CUDA). */
zoe_status zoe_adam_stream(zoe_stream *stream, const zoe_adam_consts *c, float *master, float *m,
                           float *v, const float *grad, void *out, zoe_dtype out_dtype, size_t n);
zoe_status zoe_grad_accumulate_stream(zoe_stream *stream, float *dst, const void *src,
                                      zoe_dtype src_dtype, float scale, int assign, size_t n);
/* ---- the device part of a step over a table of runs: one launch per step ----
 * The device-resident share of a partition (partial offload) is many runs (tensors grouped by
 * weight decay and by whether the norm counts them). The table is uploaded once; then the step
 * is one kernel launch over all runs, and the norm one reduction with one synchronisation. */
typedef struct zoe_adam_run {
    size_t offset, len; /* elements, into the arrays a call is given */
    int no_decay;       /* 1: updated with the exempt constants (no weight decay) */
    int counted;        /* 1: counted in the gradient norm */
} zoe_adam_run;

typedef struct zoe_adam_table zoe_adam_table;

/* Copies the runs (on the stream's device; synchronises the stream once). */
zoe_status zoe_adam_table_create(zoe_stream *stream, const zoe_adam_run *runs, int count,
                                 zoe_adam_table **out);
void zoe_adam_table_destroy(zoe_adam_table *table);
/* The fused step over every run, decayed or exempt constants per run; out may be NULL. Enqueued
 * on the stream, no synchronisation. */
zoe_status zoe_adam_table_step(zoe_stream *stream, const zoe_adam_table *table,
                               const zoe_adam_consts *decayed, const zoe_adam_consts *exempt,
                               float *master, float *m, float *v, const float *grad, void *out,
                               zoe_dtype out_dtype);
/* *host_sumsq += the sum of squares of grad over the counted runs; waits for the stream. The
 * order of the sum is fixed (by the table alone, not by the GPU or the scheduling), so equal
 * inputs give equal bits on every run. */
zoe_status zoe_adam_table_sumsq(zoe_stream *stream, zoe_adam_table *table, const float *grad,
                                double *host_sumsq);

/* Converts n values between fp32, bf16 and fp16 on the stream (master weights from the
 * parameters and back; streamed fp16 weights from a bf16 master). In place (dst == src) where
 * both dtypes have one size: each element is read before it is written, by the one thread that
 * writes it. zoe_convert's rounding (runtime/dtype.c) on both backends. */
zoe_status zoe_convert_stream(zoe_stream *stream, void *dst, zoe_dtype dst_dtype, const void *src,
                              zoe_dtype src_dtype, size_t n);

#ifdef ZOE_HAVE_CUDA
/* The CUDA half (kernels/cuda/adam.cu): kernels launched on a cudaStream_t. */
zoe_status zoe_adam_cuda(void *stream, const zoe_adam_consts *c, float *master, float *m, float *v,
                         const float *grad, void *out, zoe_dtype out_dtype, size_t n);
zoe_status zoe_grad_accumulate_cuda(void *stream, float *dst, const void *src, zoe_dtype src_dtype,
                                    float scale, int assign, size_t n);
/* Runs as the kernels see them: the table with each run's first index in the concatenation. */
typedef struct zoe_adam_run_cuda {
    size_t offset, len, begin;
    int no_decay, counted;
} zoe_adam_run_cuda;
/* Blocks of the norm's first pass: partials holds this many doubles. */
#define ZOE_SUMSQ_MAX_BLOCKS 1024
zoe_status zoe_adam_runs_cuda(void *stream, const zoe_adam_consts *decayed,
                              const zoe_adam_consts *exempt, const zoe_adam_run_cuda *runs,
                              int count, size_t total, float *master, float *m, float *v,
                              const float *grad, void *out, zoe_dtype out_dtype);
/* Two fixed-order passes (per-block partials, then one block over them) into *result, device
 * memory; the caller copies it out. */
zoe_status zoe_sumsq_runs_cuda(void *stream, const zoe_adam_run_cuda *runs, int count, size_t total,
                               const float *grad, double *partials, double *result);
zoe_status zoe_convert_cuda(void *stream, void *dst, zoe_dtype dst_dtype, const void *src,
                            zoe_dtype src_dtype, size_t n);
#endif

#endif
