/* The op table: forward and backward of every op of a GPT or Llama training step, one interface
 * with a CPU backend (kernels/cpu) and a CUDA backend (kernels/cuda).
 *
 * Conventions, shared by every op:
 *  - Tensors are row-major and contiguous. `dt` is the storage dtype of activations, weights
 *    and their gradients in the call (ZOE_F32 or ZOE_BF16 on CPU; ZOE_BF16/ZOE_F16/ZOE_F32 on
 *    CUDA); statistics (mean, rstd, lse, row max, sums) are always fp32, token ids int32.
 *    Arithmetic is fp32 whatever the storage.
 *  - Gradient outputs ACCUMULATE (+=) into their buffers (llm.c's convention), because most
 *    gradients in a transformer are sums over several consumers; callers zero them first.
 *  - Any gradient output may be NULL: that gradient is not computed.
 *  - Work is issued on the context's stream; on CPU it has completed when the call returns.
 *  - Scratch comes from the workspace planned at create time: no allocation inside an op.
 *    So a context serves one host thread at a time; threads that issue ops concurrently
 *    each need their own context.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_H
#define ZOE_KERNELS_H

#include <stdint.h>
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "kernels/op_list.h"
#include "zoe/status.h"

typedef struct zoe_kernels zoe_kernels;

/* The largest shapes the context will see; the workspace is planned from them. */
typedef struct zoe_kernel_plan {
    int64_t max_rows;  /* B*T, tokens per micro-batch */
    int64_t max_dim;   /* the widest K or N of a matmul (e.g. 4C or the local vocab) */
    int64_t max_seq;   /* T */
    int64_t max_heads; /* heads on this rank */
    int64_t max_head_dim;
    /* CUDA, fp32 storage: 1 lets matmuls round their inputs to TF32 (10-bit mantissa) for the
     * tensor cores, about 8x the fp32 rate at about 1e-3 relative error per product; 0 keeps
     * full fp32. Ignored by the CPU backend and by 16-bit storage. */
    int tf32;
    /* CUDA, 16-bit storage: 1 keeps attention on the fp32 flash kernels (CUDA cores) where it
     * would take the tensor cores (kernels/attention_plan.h), to compare the two. */
    int attention_flash;
    /* CUDA: 0, or a cap in bytes on the flash kernels' shared memory per block below the GPU's,
     * so that any GPU runs the smaller tiles another takes (96 KiB: V100's). */
    int64_t attention_smem_limit;
} zoe_kernel_plan;

zoe_status zoe_kernels_create(zoe_device *dev, zoe_stream *stream, const zoe_kernel_plan *plan,
                              zoe_kernels **out);
void zoe_kernels_destroy(zoe_kernels *k);
/* Bytes of the workspace zoe_kernels_create plans for plan, without creating a context: on
 * the CPU backend host memory, host_threads slices (the OpenMP thread count); on CUDA device
 * memory, where cub's sort scratch is bounded rather than asked of a GPU. */
size_t zoe_kernels_workspace_bytes(zoe_backend backend, const zoe_kernel_plan *plan,
                                   int host_threads);
zoe_backend zoe_kernels_backend(const zoe_kernels *k);
zoe_stream *zoe_kernels_stream(const zoe_kernels *k);

/* ---- matmul with optional bias: y[M,N] = x[M,K] . w[N,K]^T + b[N] ---- */
zoe_status zoe_matmul_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, const void *w,
                              const void *b, int64_t M, int64_t K, int64_t N);
/* dx[M,K] += dy . w;  dw[N,K] += dy^T . x;  db[N] += sum over rows of dy. */
zoe_status zoe_matmul_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dw, void *db,
                               const void *dy, const void *x, const void *w, int64_t M, int64_t K,
                               int64_t N);

/* ---- LayerNorm over the last dim C (eps 1e-5); mean and rstd [rows] saved for backward ---- */
zoe_status zoe_layernorm_forward(zoe_kernels *k, zoe_dtype dt, void *y, float *mean, float *rstd,
                                 const void *x, const void *gamma, const void *beta, int64_t rows,
                                 int64_t C);
zoe_status zoe_layernorm_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dgamma, void *dbeta,
                                  const void *dy, const void *x, const void *gamma,
                                  const float *mean, const float *rstd, int64_t rows, int64_t C);

/* ---- GELU, tanh approximation ---- */
zoe_status zoe_gelu_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n);
/* dx += dy * gelu'(x) */
zoe_status zoe_gelu_backward(zoe_kernels *k, zoe_dtype dt, void *dx, const void *dy, const void *x,
                             int64_t n);

/* ---- causal multi-head self-attention ----
 * qkv [B, T, NH, 3, HS]: per head its q, k and v side by side, so a column-parallel QKV whose
 * rows are laid out head by head gives every TP rank whole heads. out [B, T, NH, HS].
 * lse [B, NH, T]: log-sum-exp of each row's scaled scores, saved so that backward recomputes
 * the probabilities without a stored T x T matrix. Scale 1/sqrt(HS). */
zoe_status zoe_attention_forward(zoe_kernels *k, zoe_dtype dt, void *out, float *lse,
                                 const void *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS);
zoe_status zoe_attention_backward(zoe_kernels *k, zoe_dtype dt, void *dqkv, const void *dout,
                                  const void *qkv, const void *out, const float *lse, int64_t B,
                                  int64_t T, int64_t NH, int64_t HS);
/* Grouped-query attention, the same kernel on another layout: q [B, T, NH, HS] and
 * kv [B, T, NKV, 2, HS] (each KV head's k and v side by side); query head h attends with KV head
 * h / (NH / NKV). NKV divides NH; NKV == NH is multi-head attention. out [B, T, NH, HS], lse
 * [B, NH, T] as above. Backward: dq and dkv (same layouts) accumulate; either may be NULL. */
zoe_status zoe_attention_gqa_forward(zoe_kernels *k, zoe_dtype dt, void *out, float *lse,
                                     const void *q, const void *kv, int64_t B, int64_t T,
                                     int64_t NH, int64_t NKV, int64_t HS);
zoe_status zoe_attention_gqa_backward(zoe_kernels *k, zoe_dtype dt, void *dq, void *dkv,
                                      const void *dout, const void *q, const void *kv,
                                      const void *out, const float *lse, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t HS);

/* ---- attention of new tokens over a key-value cache (incremental decoding, one sequence) ----
 * n new tokens at positions [pos, pos + n); the cache already holds the keys and values of
 * positions [0, pos + n), the new ones included. Query head h of new token i is the HS elements
 * at q + i * q_row_stride + h * q_head_stride; the key of position t in KV head g is at
 * kv + t * kv_row_stride + g * kv_head_stride and its value the HS elements after it. Token i
 * attends causally to positions [0, pos + i], query head h with KV head h / (NH / NKV), scale
 * 1/sqrt(HS). out [n, NH, HS]. No lse: nothing is trained through it.
 *  GPT, a qkv cache [T, NH, 3, HS]: q = cache + pos * 3 NH HS, kv = cache + HS, both strides
 *      3 HS per head and 3 NH HS per row.
 *  Llama, q [n, NH, HS] and a kv cache [T, NKV, 2, HS]: kv_head_stride 2 HS. */
zoe_status zoe_attention_cached(zoe_kernels *k, zoe_dtype dt, void *out, const void *q,
                                const void *kv, int64_t pos, int64_t n, int64_t NH, int64_t NKV,
                                int64_t HS, int64_t q_head_stride, int64_t q_row_stride,
                                int64_t kv_head_stride, int64_t kv_row_stride);

/* ---- RMSNorm over the last dim C: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps); rstd
 * [rows] saved for backward. eps is the model's (Llama: 1e-5 or 1e-6, from its config). ---- */
zoe_status zoe_rmsnorm_forward(zoe_kernels *k, zoe_dtype dt, void *y, float *rstd, const void *x,
                               const void *gamma, int64_t rows, int64_t C, float eps);
zoe_status zoe_rmsnorm_backward(zoe_kernels *k, zoe_dtype dt, void *dx, void *dgamma,
                                const void *dy, const void *x, const void *gamma, const float *rstd,
                                int64_t rows, int64_t C);

/* ---- rotary position embedding, in place ----
 * x holds B*T rows (row b*T + t is position t) of row_stride elements; in each, `heads` vectors
 * of HS elements start head_stride apart. Each vector is rotated by the position's angles in
 * the half-split pairing (i, i + HS/2) of Hugging Face's rotate_half: angle t * inv_freq[i]
 * (fp32 product), inv_freq [HS/2] fp32 on the device (theta and any frequency scaling are the
 * caller's). Backward rotates the gradient back (the transpose) in place: it OVERWRITES, as the
 * rotation replaced its input. HS even. */
zoe_status zoe_rope_forward(zoe_kernels *k, zoe_dtype dt, void *x, const float *inv_freq, int64_t B,
                            int64_t T, int64_t heads, int64_t HS, int64_t head_stride,
                            int64_t row_stride);
zoe_status zoe_rope_backward(zoe_kernels *k, zoe_dtype dt, void *dx, const float *inv_freq,
                             int64_t B, int64_t T, int64_t heads, int64_t HS, int64_t head_stride,
                             int64_t row_stride);

/* RoPE forward of rows at positions pos0, pos0 + 1, ...: row r (of `rows`, row_stride apart) is
 * position pos0 + r, otherwise as zoe_rope_forward. Incremental decoding rotates the new tokens'
 * queries and keys with it. */
zoe_status zoe_rope_forward_at(zoe_kernels *k, zoe_dtype dt, void *x, const float *inv_freq,
                               int64_t pos0, int64_t rows, int64_t heads, int64_t HS,
                               int64_t head_stride, int64_t row_stride);

/* ---- SwiGLU: y[r, i] = silu(gu[r, i, 0]) * gu[r, i, 1] ----
 * gu [rows, F, 2]: gate and up of feature i side by side, so a column-parallel fused gate/up
 * linear whose rows interleave them gives every TP rank whole features. y [rows, F].
 * dgu += the gradient of sum(y * dy). */
zoe_status zoe_swiglu_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *gu, int64_t rows,
                              int64_t F);
zoe_status zoe_swiglu_backward(zoe_kernels *k, zoe_dtype dt, void *dgu, const void *dy,
                               const void *gu, int64_t rows, int64_t F);

/* ---- residual: y = a + b (y may alias a or b); backward is zoe_add: y += x ---- */
zoe_status zoe_residual_forward(zoe_kernels *k, zoe_dtype dt, void *y, const void *a, const void *b,
                                int64_t n);
zoe_status zoe_add(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n);
/* y *= s (loss and gradient scaling, averaging) */
zoe_status zoe_scale(zoe_kernels *k, zoe_dtype dt, void *y, float s, int64_t n);

/* ---- token + position embedding ----
 * y[b,t,:] = wte[tok - vocab_start] if vocab_start <= tok < vocab_start + vocab_rows, else 0
 *          (+ wpe[t] when wpe is not NULL).
 * The vocabulary range serves VocabParallelEmbedding; a single rank passes 0 and the vocab. */
zoe_status zoe_embedding_forward(zoe_kernels *k, zoe_dtype dt, void *y, const int32_t *tokens,
                                 const void *wte, const void *wpe, int64_t B, int64_t T, int64_t C,
                                 int64_t vocab_start, int64_t vocab_rows);
/* Scatter-add: dwte[tok - vocab_start] += dy[b,t] for tokens in range; dwpe[t] += dy[b,t].
 * Deterministic (no order-dependent races). */
zoe_status zoe_embedding_backward(zoe_kernels *k, zoe_dtype dt, void *dwte, void *dwpe,
                                  const void *dy, const int32_t *tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t vocab_start, int64_t vocab_rows);

/* ---- softmax cross-entropy, in stages so that a vocab-parallel caller can all-reduce between
 * them (max, then sums) and a single rank calls them back to back ----
 * logits [rows, V] hold this rank's columns [vocab_start, vocab_start + V); only the first
 * v_valid of them are real (padding columns never contribute). targets [rows] are global ids;
 * a target equal to ignore_index contributes nothing. */
/* row_max[r] = max over valid columns of logits[r] */
zoe_status zoe_xent_row_max(zoe_kernels *k, zoe_dtype dt, float *row_max, const void *logits,
                            int64_t rows, int64_t V, int64_t v_valid);
/* sum_exp[r] = sum exp(logit - row_max[r]) over valid columns; target_logit[r] = the target's
 * logit when it lies in this rank's range, else 0. */
zoe_status zoe_xent_row_sums(zoe_kernels *k, zoe_dtype dt, float *sum_exp, float *target_logit,
                             const void *logits, const float *row_max, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t v_valid, int64_t vocab_start,
                             int32_t ignore_index);
/* losses[r] = log(sum_exp) + row_max - target_logit (0 for ignored rows); *mean_loss the mean
 * over non-ignored rows (0 if none), *count their number. Reads device stats, writes host.
 * Any of losses, mean_loss and count may be NULL (not wanted). */
zoe_status zoe_xent_loss(zoe_kernels *k, float *losses, float *mean_loss, int64_t *count,
                         const float *row_max, const float *sum_exp, const float *target_logit,
                         const int32_t *targets, int64_t rows, int32_t ignore_index);
/* dlogits = (softmax - onehot(target)) * scale for valid columns, 0 for padding columns and
 * ignored rows. dlogits may alias logits (in place: no second [rows, V] buffer). Overwrites:
 * the one gradient that does not accumulate, because it replaces the logits buffer. */
zoe_status zoe_xent_backward(zoe_kernels *k, zoe_dtype dt, void *dlogits, const void *logits,
                             const float *row_max, const float *sum_exp, const int32_t *targets,
                             int64_t rows, int64_t V, int64_t v_valid, int64_t vocab_start,
                             int32_t ignore_index, float scale);

/* ---- dropout with a counter-based mask ----
 * y[e] = x[e] * (1 / (1 - p)) when element e is kept, else 0; y may alias x. Element e is kept
 * when the top 24 bits of word e % 4 of Philox block e / 4 of (seed, stream) are at least
 * round(p * 2^24) (kernels/philox.h): a pure function of (seed, stream, e), so every backend
 * and every TP rank holding the same tensor draw the same mask, bit for bit. p in [0, 1). */
zoe_status zoe_dropout(zoe_kernels *k, zoe_dtype dt, void *y, const void *x, int64_t n, float p,
                       uint64_t seed, uint64_t stream);

/* ---- casts between storage dtypes on the device ---- */
zoe_status zoe_cast(zoe_kernels *k, void *dst, zoe_dtype dst_dt, const void *src, zoe_dtype src_dt,
                    int64_t n);

/* ---- time per op, for benchmarks and the trainer's split of a step ----
 * Wall time of each op's calls since create or the last reset: on CPU the op's own time (it
 * completes inside the call); on CUDA the time to enqueue it. One entry per row of
 * kernels/op_list.h. */
typedef enum zoe_kernel_op {
#define ZOE_KERNEL_OP_ENUM(name, params) ZOE_KOP_##name,
    ZOE_KERNEL_OPS(ZOE_KERNEL_OP_ENUM)
#undef ZOE_KERNEL_OP_ENUM
        ZOE_KOP_COUNT
} zoe_kernel_op;

typedef struct zoe_kernel_profile {
    double seconds[ZOE_KOP_COUNT];
    int64_t calls[ZOE_KOP_COUNT];
} zoe_kernel_profile;

/* "matmul_forward", ... */
const char *zoe_kernel_op_name(zoe_kernel_op op);
void zoe_kernels_profile(const zoe_kernels *k, zoe_kernel_profile *out);
void zoe_kernels_profile_reset(zoe_kernels *k);

#endif
