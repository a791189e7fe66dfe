/* Internal: the CPU backend of the op table. kernels.c validates every argument once and then
 * calls zoe_cpu_<op>(ck, <the public op's arguments after the context>); the functions here
 * assume valid arguments (sizes within the plan, required pointers non-NULL, dt fp32 or bf16). */
#ifndef ZOE_KERNELS_CPU_OPS_H
#define ZOE_KERNELS_CPU_OPS_H

#include "kernels/kernels.h"

typedef struct zoe_cpu_kernels zoe_cpu_kernels;

/* Plans the workspace (per-thread tiles and shared scratch) for the shapes in plan. */
zoe_status zoe_cpu_kernels_create(const zoe_kernel_plan *plan, zoe_cpu_kernels **out);
/* Host bytes of the workspace zoe_cpu_kernels_create allocates for plan with threads threads. */
size_t zoe_cpu_workspace_bytes(const zoe_kernel_plan *plan, int threads);
void zoe_cpu_kernels_destroy(zoe_cpu_kernels *ck);

zoe_status zoe_cpu_matmul_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                  const void *w, const void *b, int64_t M, int64_t K, int64_t N);
zoe_status zoe_cpu_matmul_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dw, void *db,
                                   const void *dy, const void *x, const void *w, int64_t M,
                                   int64_t K, int64_t N);

zoe_status zoe_cpu_layernorm_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float *mean,
                                     float *rstd, const void *x, const void *gamma,
                                     const void *beta, int64_t rows, int64_t C);
zoe_status zoe_cpu_layernorm_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dgamma,
                                      void *dbeta, const void *dy, const void *x, const void *gamma,
                                      const float *mean, const float *rstd, int64_t rows,
                                      int64_t C);

zoe_status zoe_cpu_gelu_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                int64_t n);
zoe_status zoe_cpu_gelu_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, const void *dy,
                                 const void *x, int64_t n);

zoe_status zoe_cpu_attention_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, float *lse,
                                     const void *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS);
zoe_status zoe_cpu_attention_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dqkv,
                                      const void *dout, const void *qkv, const void *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH,
                                      int64_t HS);

zoe_status zoe_cpu_attention_gqa_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, float *lse,
                                         const void *q, const void *kv, int64_t B, int64_t T,
                                         int64_t NH, int64_t NKV, int64_t HS);
zoe_status zoe_cpu_attention_gqa_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dq, void *dkv,
                                          const void *dout, const void *q, const void *kv,
                                          const void *out, const float *lse, int64_t B, int64_t T,
                                          int64_t NH, int64_t NKV, int64_t HS);

zoe_status zoe_cpu_rmsnorm_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float *rstd,
                                   const void *x, const void *gamma, int64_t rows, int64_t C,
                                   float eps);
zoe_status zoe_cpu_rmsnorm_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dgamma,
                                    const void *dy, const void *x, const void *gamma,
                                    const float *rstd, int64_t rows, int64_t C);

zoe_status zoe_cpu_rope_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *x, const float *inv_freq,
                                int64_t B, int64_t T, int64_t heads, int64_t HS,
                                int64_t head_stride, int64_t row_stride);
zoe_status zoe_cpu_rope_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, const float *inv_freq,
                                 int64_t B, int64_t T, int64_t heads, int64_t HS,
                                 int64_t head_stride, int64_t row_stride);

zoe_status zoe_cpu_rope_forward_at(zoe_cpu_kernels *ck, zoe_dtype dt, void *x,
                                   const float *inv_freq, int64_t pos0, int64_t rows, int64_t heads,
                                   int64_t HS, int64_t head_stride, int64_t row_stride);
zoe_status zoe_cpu_attention_cached(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, const void *q,
                                    const void *kv, int64_t pos, int64_t n, int64_t NH, int64_t NKV,
                                    int64_t HS, int64_t q_head_stride, int64_t q_row_stride,
                                    int64_t kv_head_stride, int64_t kv_row_stride);

zoe_status zoe_cpu_swiglu_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *gu,
                                  int64_t rows, int64_t F);
zoe_status zoe_cpu_swiglu_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dgu, const void *dy,
                                   const void *gu, int64_t rows, int64_t F);

zoe_status zoe_cpu_residual_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *a,
                                    const void *b, int64_t n);
zoe_status zoe_cpu_add(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x, int64_t n);
zoe_status zoe_cpu_scale(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float s, int64_t n);
zoe_status zoe_cpu_dropout(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x, int64_t n,
                           float p, uint64_t seed, uint64_t stream);

zoe_status zoe_cpu_embedding_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y,
                                     const int32_t *tokens, const void *wte, const void *wpe,
                                     int64_t B, int64_t T, int64_t C, int64_t vocab_start,
                                     int64_t vocab_rows);
zoe_status zoe_cpu_embedding_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dwte, void *dwpe,
                                      const void *dy, const int32_t *tokens, int64_t B, int64_t T,
                                      int64_t C, int64_t vocab_start, int64_t vocab_rows);

zoe_status zoe_cpu_xent_row_max(zoe_cpu_kernels *ck, zoe_dtype dt, float *row_max,
                                const void *logits, int64_t rows, int64_t V, int64_t v_valid);
zoe_status zoe_cpu_xent_row_sums(zoe_cpu_kernels *ck, zoe_dtype dt, float *sum_exp,
                                 float *target_logit, const void *logits, const float *row_max,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t v_valid,
                                 int64_t vocab_start, int32_t ignore_index);
zoe_status zoe_cpu_xent_loss(zoe_cpu_kernels *ck, float *losses, float *mean_loss, int64_t *count,
                             const float *row_max, const float *sum_exp, const float *target_logit,
                             const int32_t *targets, int64_t rows, int32_t ignore_index);
zoe_status zoe_cpu_xent_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dlogits,
                                 const void *logits, const float *row_max, const float *sum_exp,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t v_valid,
                                 int64_t vocab_start, int32_t ignore_index, float scale);

zoe_status zoe_cpu_cast(zoe_cpu_kernels *ck, void *dst, zoe_dtype dst_dt, const void *src,
                        zoe_dtype src_dt, int64_t n);

#endif
