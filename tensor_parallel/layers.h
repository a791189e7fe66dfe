/* Megatron's parallel layers: ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding
 * with the tied LM head, the vocab-parallel cross-entropy, and TP-invariant hidden dropout.
 *
 * Shapes: rows = B * T tokens. `x`/`y` are activations, `dx`/`dy` their gradients. Weight and
 * bias gradients ACCUMULATE (+=) into the bound grad buffers, as in kernels.h.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#ifndef ZOE_TP_LAYERS_H
#define ZOE_TP_LAYERS_H

#include "tensor_parallel/param.h"
#include "tensor_parallel/tp.h"

/* ---- linear layers: y = x . W^T + b with W [out, in] ----
 * Column-parallel: W split by rows (output features), [out / t, in], bias [out / t]; input
 * replicated (copy_to), output split, or gathered to [rows, out] with gather_output.
 * Row-parallel: W split by columns (input features), [out, in / t]; input already split
 * [rows, in / t]; the partial products are all-reduced and the replicated bias [out] enters
 * once (rank 0 adds it into its partial sum, so the reduced output holds it exactly once). */
typedef struct zoe_tp_linear {
    int64_t in, out;             /* global features */
    int64_t in_local, out_local; /* this rank's */
    bool column;                 /* column-parallel (true) or row-parallel */
    bool gather_output;          /* column-parallel only */
    bool has_bias;
    zoe_tp_param weight, bias; /* bias unused without has_bias */
    zoe_tp_traffic traffic;    /* bytes of the last forward / backward */
} zoe_tp_linear;

/* name is the layer's full name ("h.0.attn.linear_qkv"); parameters are name.weight and
 * name.bias, weights N(0, init_std^2), biases zero. */
zoe_status zoe_tp_column_linear_init(zoe_tp_linear *l, const char *name, int64_t in, int64_t out,
                                     bool has_bias, bool gather_output, float init_std, int tp_size,
                                     int tp_rank);
zoe_status zoe_tp_row_linear_init(zoe_tp_linear *l, const char *name, int64_t in, int64_t out,
                                  bool has_bias, float init_std, int tp_size, int tp_rank);
/* A column-parallel linear without bias whose weight rows are cut into `shards` blocks, each
 * held by tp / shards consecutive ranks (param.h's sharded split): out_local = out / shards.
 * Its forward is zoe_tp_column_linear_forward; its backward belongs to the layer that owns it,
 * which must sum dy over the ranks sharing the block (see tensor_parallel/llama_block.h). */
zoe_status zoe_tp_column_linear_init_sharded(zoe_tp_linear *l, const char *name, int64_t in,
                                             int64_t out, int shards, float init_std, int tp_size,
                                             int tp_rank);
/* Scratch a call needs: rows * out elements with gather_output, else 0. */
size_t zoe_tp_linear_scratch_bytes(const zoe_tp_linear *l, int64_t rows, zoe_dtype dtype);

/* y [rows, out_local] (or [rows, out] with gather_output) from replicated x [rows, in]. */
zoe_status zoe_tp_column_linear_forward(const zoe_tp *tp, zoe_tp_linear *l, void *y, const void *x,
                                        int64_t rows, void *scratch);
/* dx [rows, in] is OVERWRITTEN with the full input gradient (all-reduced over TP: copy_to's
 * backward), because the all-reduce must see this path's gradient alone; NULL skips it and the
 * all-reduce. dy is [rows, out_local], or [rows, out] with gather_output. */
zoe_status zoe_tp_column_linear_backward(const zoe_tp *tp, zoe_tp_linear *l, void *dx,
                                         const void *dy, const void *x, int64_t rows,
                                         void *scratch);
/* y [rows, out], replicated, from split x [rows, in_local]. */
zoe_status zoe_tp_row_linear_forward(const zoe_tp *tp, zoe_tp_linear *l, void *y, const void *x,
                                     int64_t rows);
/* dx [rows, in_local] += dy . W_local (no communication); dy [rows, out] replicated. The bias
 * gradient is the full one on every rank (see param.h on replicated parameters). */
zoe_status zoe_tp_row_linear_backward(const zoe_tp *tp, zoe_tp_linear *l, void *dx, const void *dy,
                                      const void *x, int64_t rows);

/* ---- the vocabulary split ----
 * padded = vocab rounded up to a multiple of m = t * ceil(pad_multiple / t) (Megatron's
 * make-vocab-size-divisible-by, default pad_multiple 128). For every t that divides
 * pad_multiple (t = 1, 2, 4, ..., 128 with the default) m == pad_multiple, so the padded
 * vocabulary, and the checkpointed embedding, do not depend on t; otherwise m is the smallest
 * multiple of t not below pad_multiple. Rank r owns rows [r * padded / t, (r + 1) * padded / t);
 * of those, the ones at or above vocab are padding: their logits never enter the loss and
 * their gradients stay zero. */
#define ZOE_TP_VOCAB_PAD_MULTIPLE 128
typedef struct zoe_tp_vocab {
    int64_t vocab;       /* real tokens */
    int64_t padded;      /* global rows of the table */
    int64_t local;       /* rows on this rank, padded / t */
    int64_t start;       /* first global row on this rank */
    int64_t valid_local; /* real rows among the local ones (0 .. local) */
} zoe_tp_vocab;
/* pad_multiple <= 0 selects ZOE_TP_VOCAB_PAD_MULTIPLE. */
zoe_status zoe_tp_vocab_init(zoe_tp_vocab *v, int64_t vocab, int64_t pad_multiple, int tp_size,
                             int tp_rank);

/* ---- VocabParallelEmbedding (+ replicated position embedding) and the tied LM head ---- */
typedef struct zoe_tp_embedding {
    zoe_tp_vocab vocab;
    int64_t hidden, max_seq;     /* max_seq 0: no position embedding */
    zoe_tp_param wte;            /* name.wte [padded, hidden], split by rows */
    zoe_tp_param wpe;            /* name.wpe [max_seq, hidden], replicated */
    bool untied;                 /* the LM head has its own weight (zoe_tp_embedding_untie) */
    zoe_tp_param head;           /* lm_head.weight [padded, hidden], split by rows, if untied */
    zoe_tp_traffic traffic;      /* of the lookup */
    zoe_tp_traffic head_traffic; /* of the tied head and the loss */
} zoe_tp_embedding;

/* prefix "" gives "wte" / "wpe"; weights N(0, init_std^2). */
zoe_status zoe_tp_embedding_init(zoe_tp_embedding *e, const char *prefix, int64_t vocab,
                                 int64_t pad_multiple, int64_t hidden, int64_t max_seq,
                                 float init_std, int tp_size, int tp_rank);
/* Gives the LM head its own weight `name` [padded, hidden], split by rows like wte, N(0,
 * init_std^2) (Llama without tied embeddings). */
zoe_status zoe_tp_embedding_untie(zoe_tp_embedding *e, const char *name, float init_std,
                                  int tp_size, int tp_rank);
/* y [B*T, hidden] = wte[token] + wpe[t]: each rank looks up its rows (others give zero rows,
 * rank 0 adds the positions), then one all-reduce (reduce_from). tokens int32 [B*T], device,
 * in [0, vocab) (others give zero rows on every rank). */
zoe_status zoe_tp_embedding_forward(const zoe_tp *tp, zoe_tp_embedding *e, void *y,
                                    const int32_t *tokens, int64_t B, int64_t T);
/* The same for one sequence's n tokens at positions [pos0, pos0 + n) (incremental decoding):
 * y [n, hidden] = wte[token] + wpe[pos0 + i]; pos0 + n <= max_seq when there are positions. */
zoe_status zoe_tp_embedding_forward_at(const zoe_tp *tp, zoe_tp_embedding *e, void *y,
                                       const int32_t *tokens, int64_t n, int64_t pos0);
/* dwte (local rows) and dwpe (full, every rank) accumulate from the replicated dy; no
 * communication. */
zoe_status zoe_tp_embedding_backward(const zoe_tp *tp, zoe_tp_embedding *e, const void *dy,
                                     const int32_t *tokens, int64_t B, int64_t T);
/* The LM head, a column-parallel matmul without bias against wte (tied) or head (untied):
 * logits [rows, vocab.local] = x [rows, hidden] . W_local^T. */
zoe_status zoe_tp_lm_head_forward(const zoe_tp *tp, zoe_tp_embedding *e, void *logits,
                                  const void *x, int64_t rows);
/* dx [rows, hidden] OVERWRITTEN with the full gradient (all-reduced); dW += dlogits^T . x. */
zoe_status zoe_tp_lm_head_backward(const zoe_tp *tp, zoe_tp_embedding *e, void *dx,
                                   const void *dlogits, const void *x, int64_t rows);

/* ---- vocab-parallel cross-entropy over the local logits [rows, vocab.local] ----
 * The global row max (all-reduce MAX), then the sum of exponentials and the target logit (one
 * all-reduce SUM of both, packed), so the loss is log(sum exp(l - max)) + max - l_target over
 * the real global vocabulary: the unsplit computation, no log(t) offsets. No label smoothing.
 * stats: device fp32 scratch of zoe_tp_xent_stats_bytes(rows), kept for backward. */
size_t zoe_tp_xent_stats_bytes(int64_t rows);
/* losses (host, [rows]) per row, *mean_loss over non-ignored rows, *count their number; any
 * of the three may be NULL. */
zoe_status zoe_tp_xent_forward(const zoe_tp *tp, zoe_tp_embedding *e, float *stats,
                               const void *logits, const int32_t *targets, int64_t rows,
                               int32_t ignore_index, float *losses, float *mean_loss,
                               int64_t *count);
/* dlogits = (softmax - onehot) * scale, locally (no communication); may alias logits.
 * Overwrites, like zoe_xent_backward. */
zoe_status zoe_tp_xent_backward(const zoe_tp *tp, const zoe_tp_embedding *e, void *dlogits,
                                const void *logits, const float *stats, const int32_t *targets,
                                int64_t rows, int32_t ignore_index, float scale);

/* ---- hidden dropout, the same mask on every TP rank ----
 * Element e (index in the replicated [rows, hidden] tensor) is kept when its Philox draw
 * (seed tp->seed, stream zoe_philox_stream_at_step(site, step)) is >= round(p * 2^24), and
 * scaled by 1 / (1 - p). The mask is recomputed in backward, never stored. dst may alias src.
 * On both backends (kernels' zoe_dropout: the same masks, bit for bit). */
zoe_status zoe_tp_dropout_forward(const zoe_tp *tp, void *dst, const void *src, int64_t n, float p,
                                  uint64_t site, uint64_t step);
/* dst = dy * mask / (1 - p) (overwrites; may alias dy). */
zoe_status zoe_tp_dropout_backward(const zoe_tp *tp, void *dst, const void *dy, int64_t n, float p,
                                   uint64_t site, uint64_t step);

/* ---- where a block gets its weights: a part at a time ----
 * A block's parameters fall in ZOE_TP_BLOCK_PARTS parts, each a run of its parameter list read by
 * consecutive ops (zoe_tp_block_part, zoe_tp_llama_block_part): the attention's input (the first
 * norm and the QKV projection), its output projection, the MLP's input (the second norm and
 * fc1), and fc2. The forward reads them in that order, the backward in the reverse. A streamed
 * run keeps one part at a time on the device (docs/offload.md, "Streamed weights"), so a block
 * asks for each right before the first op that reads it and hands it back after the last. */
enum {
    ZOE_TP_PART_ATTN_IN,
    ZOE_TP_PART_ATTN_OUT,
    ZOE_TP_PART_MLP_IN,
    ZOE_TP_PART_MLP_OUT,
    ZOE_TP_BLOCK_PARTS
};

/* acquire rebinds the part's parameters (their .data) to where its weights are now; release
 * says the ops queued so far are the part's last readers. NULL, or acquire NULL: the weights stay
 * where they are bound. */
typedef struct zoe_tp_weights {
    void *user;
    zoe_status (*acquire)(void *user, int part);
    zoe_status (*release)(void *user, int part);
} zoe_tp_weights;

/* Part `part` from w, then a check that its n parameters are bound (one line naming the first
 * that is not). */
zoe_status zoe_tp_weights_acquire(const zoe_tp_weights *w, int part, zoe_tp_param *const *params,
                                  int n);
zoe_status zoe_tp_weights_release(const zoe_tp_weights *w, int part);

#endif
