/* The decoder-only language model of either family (shape.family), built from
 * tensor_parallel/ alone and trained with the vocab-parallel cross-entropy:
 *  - GPT: a vocab-parallel embedding with learned positions, N pre-LayerNorm transformer blocks
 *    (tensor_parallel/block.h), a final LayerNorm and the LM head tied to the embedding;
 *  - Llama: the embedding without positions, N Llama blocks (RMSNorm, RoPE, grouped-query
 *    attention, SwiGLU; tensor_parallel/llama_block.h), a final RMSNorm, and the LM head tied
 *    or its own weight (shape.tie_embeddings).
 *
 * The model owns its activations (one planned device allocation) and its kernels context, but
 * not its weights or gradients: the caller binds each tensor's weight pointer (the optimizer's
 * flat buffer) and gives backward a gradient sink that hands out each tensor's gradient buffer
 * and takes it back once final, so an optimizer can reduce and offload buckets while backward
 * goes on (DESIGN.md, step 3).
 *
 * Explained in docs/architecture.md, "One step, following the data"; docs/hf.md. */
#ifndef ZOE_MODELS_GPT_H
#define ZOE_MODELS_GPT_H

#include "tensor_parallel/block.h"
#include "tensor_parallel/llama_block.h"
#include "zoe/model.h"

typedef struct zoe_gpt_config {
    zoe_model_config shape;
    int64_t micro_batch;  /* B: sequences per forward */
    zoe_dtype dtype;      /* storage dtype of weights, activations, gradients */
    uint64_t seed;        /* Philox key of initial weights and dropout */
    int recompute;        /* keep only each block's input; recompute the block in backward */
    int tf32;             /* CUDA: fp32 matmuls may use TF32 tensor cores (kernels.h) */
    int64_t pad_multiple; /* vocabulary padding (<= 0: ZOE_TP_VOCAB_PAD_MULTIPLE) */
} zoe_gpt_config;

/* Where backward puts gradients. acquire returns tensor t's gradient buffer (zeroed, or holding
 * earlier micro-batches' sum; backward accumulates into it); release says it is final for this
 * micro-batch. Each tensor is acquired and released once per backward, in reverse order of the
 * tensors, except a tied wte: it is acquired first (the LM head) and released last (the lookup).
 * So at most the tensors of one block, wte and the tail of the previous block are open. */
typedef struct zoe_gpt_grad_sink {
    void *user;
    zoe_status (*acquire)(void *user, int tensor, void **grad);
    zoe_status (*release)(void *user, int tensor);
} zoe_gpt_grad_sink;

typedef struct zoe_gpt zoe_gpt;

/* The passes that read the weights, each in its own order of units (zoe_gpt_unit). */
typedef enum zoe_gpt_pass { ZOE_GPT_FORWARD = 0, ZOE_GPT_BACKWARD = 1 } zoe_gpt_pass;

/* Where the passes get their weights, a unit at a time (zoe_gpt_unit: the embedding, each
 * block's parts, the tail). acquire(user, first, n, pass, weights) comes before the pass reads the
 * unit's tensors [first, first + n): weights[i] holds tensor first + i's bound pointer and may be
 * set to where its weights are for this use (device, dtype, local_numel elements); release(user,
 * first, n) follows their last read in the pass. The orders (docs/offload.md, "Streamed weights"):
 *   forward (training, evaluation, decoding): embedding, then block 0's parts .. block L-1's
 *     (each released after its last reader, tensor_parallel/layers.h), tail; the tail and then
 *     the embedding released after the LM head;
 *   backward: embedding (the tied head's backward reads it), tail (released after the final
 *     norm), blocks L-1 .. 0, each its parts from the last to the first (with recomputation
 *     its forward's parts first, the last of them held on into the backward), and the
 *     embedding released last.
 * zoe_gpt_pass_order lists them.
 * A pipeline that finishes an update while the forward runs (the optimizer's ZOE_DPU_EXACT
 * settling, zoe_optimizer_weights_ready) waits in acquire; weights that live on the host are
 * fetched there (offload/param_stream.h). */
typedef struct zoe_gpt_weight_source {
    void *user;
    zoe_status (*acquire)(void *user, int first, int n, zoe_gpt_pass pass, void **weights);
    zoe_status (*release)(void *user, int first, int n);
} zoe_gpt_weight_source;

/* tp_comm: the TP group's communicator (borrowed). Fails naming the value when a shape does
 * not divide by its size. */
zoe_status zoe_gpt_create(const zoe_gpt_config *cfg, zoe_device *dev, zoe_stream *stream,
                          zoe_comm *tp_comm, zoe_gpt **out);
void zoe_gpt_destroy(zoe_gpt *g);
/* The model described for TP rank tp_rank of tp_size but not built: its tensors (no data),
 * element counts, activation size and kernel plan, from the same code zoe_gpt_create sizes
 * its allocations with, and no device memory. Only the queries below the next line and
 * zoe_gpt_destroy may be called on it. The plan (engine/plan/plan.c) sizes a run with it. */
zoe_status zoe_gpt_describe(const zoe_gpt_config *cfg, int tp_size, int tp_rank, zoe_gpt **out);

/* The tensors in their fixed order. GPT: wte, wpe, h.0.* ... h.{L-1}.*, ln_f.weight, ln_f.bias.
 * Llama: wte, h.0.* ... h.{L-1}.*, ln_f.weight, and lm_head.weight when untied. */
int zoe_gpt_num_tensors(const zoe_gpt *g);
const zoe_tp_param *zoe_gpt_tensor(const zoe_gpt *g, int t);
/* The units a weight source hands out: unit 0 the embedding (tensors [0, first block): wte, and
 * wpe for GPT), units 1 + l P + p (P = ZOE_TP_BLOCK_PARTS) block l's part p (the attention's
 * input, its output projection, the MLP's input, fc2: tensor_parallel/layers.h), unit L P + 1
 * the tail (the final norm and an untied LM head, to the last tensor). */
int zoe_gpt_num_units(const zoe_gpt *g);
void zoe_gpt_unit(const zoe_gpt *g, int u, int *first, int *n);
/* The units in the order a pass acquires them (above; with cfg.recompute the backward reads
 * all but one of a block's parts twice), into order (NULL: only counted); returns the count. */
int zoe_gpt_pass_order(const zoe_gpt *g, zoe_gpt_pass pass, int *order);
/* Elements on this rank (sum of local shards) and in the whole model (padded vocabulary). */
int64_t zoe_gpt_local_numel(const zoe_gpt *g);
int64_t zoe_gpt_global_numel(const zoe_gpt *g);
/* Elements of one transformer block on this rank (the most backward holds open at once,
 * besides wte). */
int64_t zoe_gpt_block_local_numel(const zoe_gpt *g);
/* Device bytes of the planned activation allocation (with cfg.recompute: the block inputs and
 * one block's activations; without: every block's). */
size_t zoe_gpt_activation_bytes(const zoe_gpt *g);
/* The largest shapes the model's kernels see: the kernel workspace is planned from it. */
const zoe_kernel_plan *zoe_gpt_kernel_plan(const zoe_gpt *g);
zoe_tp *zoe_gpt_tp(zoe_gpt *g);
/* Where the model's kernel time went since creation or the last reset (reset: start again). */
void zoe_gpt_kernel_profile(zoe_gpt *g, zoe_kernel_profile *out, int reset);
/* For tests: the embedding (vocabulary split, traffic) and block l (traffic, dropout sites). */
const zoe_tp_embedding *zoe_gpt_embedding(const zoe_gpt *g);
const zoe_tp_block *zoe_gpt_block(const zoe_gpt *g, int l);             /* NULL for Llama */
const zoe_tp_llama_block *zoe_gpt_llama_block(const zoe_gpt *g, int l); /* NULL for GPT */
const zoe_model_config *zoe_gpt_shape(const zoe_gpt *g);
/* For tests, after forward: device logits [B*T, vocab.local] (their gradient after backward)
 * and the count of non-ignored targets. */
const void *zoe_gpt_logits(const zoe_gpt *g);
int64_t zoe_gpt_loss_count(const zoe_gpt *g);

/* Points tensor t's weights at ptrs[t] (device, dtype, local_numel elements each); the range
 * form tensors [first, first + n) at ptrs[0 .. n). */
zoe_status zoe_gpt_bind_weights(zoe_gpt *g, void *const *ptrs);
zoe_status zoe_gpt_bind_tensors(zoe_gpt *g, int first, int n, void *const *ptrs);
/* Writes the TP-invariant initial values (Philox) into the bound weights (of tensors [first,
 * first + n) for the range form: a unit at a time, for streamed weights). */
zoe_status zoe_gpt_init_weights(zoe_gpt *g);
zoe_status zoe_gpt_init_tensors(zoe_gpt *g, int first, int n);

/* tokens and targets: host int32 [B, T] (targets may hold ignore_index -1). *loss is the mean
 * over this micro-batch's non-ignored tokens (identical on every TP rank). Dropout masks are
 * keyed by the number of forwards since creation (1 for the first), so models created and
 * stepped alike draw the same masks on every rank. */
zoe_status zoe_gpt_forward(zoe_gpt *g, const int32_t *tokens, const int32_t *targets, float *loss);
/* The same forward without dropout, the forward counter left as it is (evaluation). Backward
 * must not follow it. */
zoe_status zoe_gpt_forward_eval(zoe_gpt *g, const int32_t *tokens, const int32_t *targets,
                                float *loss);
/* The forward counter that keys the dropout masks, for checkpoints: a model set to the count
 * of another draws the masks that one would draw next. */
uint64_t zoe_gpt_forward_count(const zoe_gpt *g);
void zoe_gpt_set_forward_count(zoe_gpt *g, uint64_t count);
/* The weight source every later pass calls (copied; NULL: none, the bound weights as they are). */
void zoe_gpt_set_weight_source(zoe_gpt *g, const zoe_gpt_weight_source *source);
/* Gradients of loss_scale x the micro-batch's mean loss, into the sink's buffers. */
zoe_status zoe_gpt_backward(zoe_gpt *g, float loss_scale, const zoe_gpt_grad_sink *sink);
/* Gradients of token_scale x the sum of the micro-batch's token losses: the trainer's form,
 * which weights every token of a global batch alike across micro-batches and DP ranks. */
zoe_status zoe_gpt_backward_scaled(zoe_gpt *g, float token_scale, const zoe_gpt_grad_sink *sink);

/* ---- incremental decoding: one sequence, a key-value cache, no dropout (models/gpt_decode.c)
 * The cache holds, per layer, this rank's heads' keys and values (GPT: its q, k, v rows) of up to
 * max_tokens positions (at most shape.seq_len) and the buffers of a chunk of up to max_chunk new
 * tokens (at most micro_batch * seq_len, the rows the model's kernels are planned for): one
 * device allocation, owned by the cache. The model must outlive it. */
typedef struct zoe_gpt_kv_cache zoe_gpt_kv_cache;
zoe_status zoe_gpt_kv_cache_create(zoe_gpt *g, int64_t max_tokens, int64_t max_chunk,
                                   zoe_gpt_kv_cache **out);
void zoe_gpt_kv_cache_destroy(zoe_gpt_kv_cache *c);
/* Positions held (0 after create or reset); reset starts a new sequence. */
int64_t zoe_gpt_kv_cache_length(const zoe_gpt_kv_cache *c);
void zoe_gpt_kv_cache_reset(zoe_gpt_kv_cache *c);
/* Appends n host int32 tokens (1 <= n <= max_chunk) at positions [length, length + n) and
 * computes their logits into the cache's device buffer [n, vocab.local] (this rank's vocabulary
 * shard, zoe_gpt_kv_cache_logits); the prompt goes in as chunks, then one token per step.
 * Collective over TP: every rank passes the same tokens. Returns with the stream synchronised. */
zoe_status zoe_gpt_decode(zoe_gpt *g, zoe_gpt_kv_cache *c, const int32_t *tokens, int64_t n);
const void *zoe_gpt_kv_cache_logits(const zoe_gpt_kv_cache *c);

#define ZOE_GPT_IGNORE_INDEX (-1)

#endif
