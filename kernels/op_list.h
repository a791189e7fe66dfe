/* Internal: the one list of the op table's operations and their backend signatures. Each row is
 * X(name, (parameters after the backend context)): kernels.h numbers the ops from it for the
 * profile, and each backend declares zoe_<backend>_<name>(context, parameters) from it, so a
 * new op is one row here plus its documented public prototype in kernels.h and one function per
 * backend. The public zoe_<name>(zoe_kernels *k, parameters) takes the same parameters.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_OP_LIST_H
#define ZOE_KERNELS_OP_LIST_H

#define ZOE_KERNEL_OPS(X)                                                                          \
    X(matmul_forward, (zoe_dtype dt, void *y, const void *x, const void *w, const void *b,         \
                       int64_t M, int64_t K, int64_t N))                                           \
    X(matmul_backward, (zoe_dtype dt, void *dx, void *dw, void *db, const void *dy, const void *x, \
                        const void *w, int64_t M, int64_t K, int64_t N))                           \
    X(layernorm_forward, (zoe_dtype dt, void *y, float *mean, float *rstd, const void *x,          \
                          const void *gamma, const void *beta, int64_t rows, int64_t C))           \
    X(layernorm_backward,                                                                          \
      (zoe_dtype dt, void *dx, void *dgamma, void *dbeta, const void *dy, const void *x,           \
       const void *gamma, const float *mean, const float *rstd, int64_t rows, int64_t C))          \
    X(gelu_forward, (zoe_dtype dt, void *y, const void *x, int64_t n))                             \
    X(gelu_backward, (zoe_dtype dt, void *dx, const void *dy, const void *x, int64_t n))           \
    X(attention_forward, (zoe_dtype dt, void *out, float *lse, const void *qkv, int64_t B,         \
                          int64_t T, int64_t NH, int64_t HS))                                      \
    X(attention_backward,                                                                          \
      (zoe_dtype dt, void *dqkv, const void *dout, const void *qkv, const void *out,               \
       const float *lse, int64_t B, int64_t T, int64_t NH, int64_t HS))                            \
    X(attention_gqa_forward, (zoe_dtype dt, void *out, float *lse, const void *q, const void *kv,  \
                              int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS))          \
    X(attention_gqa_backward, (zoe_dtype dt, void *dq, void *dkv, const void *dout, const void *q, \
                               const void *kv, const void *out, const float *lse, int64_t B,       \
                               int64_t T, int64_t NH, int64_t NKV, int64_t HS))                    \
    X(rmsnorm_forward, (zoe_dtype dt, void *y, float *rstd, const void *x, const void *gamma,      \
                        int64_t rows, int64_t C, float eps))                                       \
    X(rmsnorm_backward, (zoe_dtype dt, void *dx, void *dgamma, const void *dy, const void *x,      \
                         const void *gamma, const float *rstd, int64_t rows, int64_t C))           \
    X(rope_forward, (zoe_dtype dt, void *x, const float *inv_freq, int64_t B, int64_t T,           \
                     int64_t heads, int64_t HS, int64_t head_stride, int64_t row_stride))          \
    X(rope_backward, (zoe_dtype dt, void *dx, const float *inv_freq, int64_t B, int64_t T,         \
                      int64_t heads, int64_t HS, int64_t head_stride, int64_t row_stride))         \
    X(swiglu_forward, (zoe_dtype dt, void *y, const void *gu, int64_t rows, int64_t F))            \
    X(swiglu_backward,                                                                             \
      (zoe_dtype dt, void *dgu, const void *dy, const void *gu, int64_t rows, int64_t F))          \
    X(residual_forward, (zoe_dtype dt, void *y, const void *a, const void *b, int64_t n))          \
    X(add, (zoe_dtype dt, void *y, const void *x, int64_t n))                                      \
    X(scale, (zoe_dtype dt, void *y, float s, int64_t n))                                          \
    X(embedding_forward,                                                                           \
      (zoe_dtype dt, void *y, const int32_t *tokens, const void *wte, const void *wpe, int64_t B,  \
       int64_t T, int64_t C, int64_t vocab_start, int64_t vocab_rows))                             \
    X(embedding_backward,                                                                          \
      (zoe_dtype dt, void *dwte, void *dwpe, const void *dy, const int32_t *tokens, int64_t B,     \
       int64_t T, int64_t C, int64_t vocab_start, int64_t vocab_rows))                             \
    X(xent_row_max, (zoe_dtype dt, float *row_max, const void *logits, int64_t rows, int64_t V,    \
                     int64_t v_valid))                                                             \
    X(xent_row_sums, (zoe_dtype dt, float *sum_exp, float *target_logit, const void *logits,       \
                      const float *row_max, const int32_t *targets, int64_t rows, int64_t V,       \
                      int64_t v_valid, int64_t vocab_start, int32_t ignore_index))                 \
    X(xent_loss, (float *losses, float *mean_loss, int64_t *count, const float *row_max,           \
                  const float *sum_exp, const float *target_logit, const int32_t *targets,         \
                  int64_t rows, int32_t ignore_index))                                             \
    X(xent_backward, (zoe_dtype dt, void *dlogits, const void *logits, const float *row_max,       \
                      const float *sum_exp, const int32_t *targets, int64_t rows, int64_t V,       \
                      int64_t v_valid, int64_t vocab_start, int32_t ignore_index, float scale))    \
    X(dropout,                                                                                     \
      (zoe_dtype dt, void *y, const void *x, int64_t n, float p, uint64_t seed, uint64_t stream))  \
    X(cast, (void *dst, zoe_dtype dst_dt, const void *src, zoe_dtype src_dt, int64_t n))           \
    X(attention_cached, (zoe_dtype dt, void *out, const void *q, const void *kv, int64_t pos,      \
                         int64_t n, int64_t NH, int64_t NKV, int64_t HS, int64_t q_head_stride,    \
                         int64_t q_row_stride, int64_t kv_head_stride, int64_t kv_row_stride))     \
    X(rope_forward_at, (zoe_dtype dt, void *x, const float *inv_freq, int64_t pos0, int64_t rows,  \
                        int64_t heads, int64_t HS, int64_t head_stride, int64_t row_stride))

/* The parameter list of a row, without its parentheses. */
#define ZOE_KERNEL_PARAMS(...) __VA_ARGS__

#endif
