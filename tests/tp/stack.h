/* A small GPT assembled from the tensor_parallel layers, for the TP tests: vocab-parallel
 * embedding (+ positions), L transformer blocks, final LayerNorm, tied LM head and the
 * vocab-parallel cross-entropy. One stack per communicator, so a test holds a TP=1 stack (over
 * MPI_COMM_SELF) beside a TP=t one and compares them. */
#ifndef ZOE_TESTS_TP_STACK_H
#define ZOE_TESTS_TP_STACK_H

#include "tensor_parallel/block.h"

#define STACK_MAX_LAYERS 4
#define STACK_MAX_PARAMS (2 + 2 + STACK_MAX_LAYERS * ZOE_TP_BLOCK_PARAMS)
#define STACK_IGNORE     (-1)

typedef struct stack_config {
    int64_t vocab, pad_multiple, hidden, heads, ffn, layers, B, T;
    float dropout;
    zoe_dtype dtype;
    uint64_t seed;
} stack_config;

typedef struct stack {
    stack_config cfg;
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernels *kernels;
    zoe_comm *comm;
    zoe_tp tp;
    zoe_tp_embedding emb;
    zoe_tp_block blocks[STACK_MAX_LAYERS];
    zoe_tp_param ln_f_weight, ln_f_bias;
    zoe_tp_param *params[STACK_MAX_PARAMS];
    int nparams;
    int64_t numel;
    void *weights, *grads;             /* flat, numel elements */
    void *resid[STACK_MAX_LAYERS + 1]; /* block inputs / the last output, [N, C] */
    void *acts_buf;
    zoe_tp_block_acts acts[STACK_MAX_LAYERS];
    void *scratch;                /* block backward scratch */
    void *ln_f, *d_ln_f, *dres;   /* [N, C] */
    float *ln_f_mean, *ln_f_rstd; /* [N] */
    void *logits;                 /* [N, vocab.local], dlogits in place after backward */
    float *stats;
    int32_t *tokens, *targets; /* device [N] */
    float *losses;             /* host [N] */
    float loss;
    int64_t count;
} stack;

/* All weights initialised (Philox), gradients zero. group: the TP communicator. */
zoe_status stack_create(const stack_config *cfg, MPI_Comm group, stack **out);
void stack_destroy(stack *s);
/* Copies the host tokens/targets [B*T] in and runs the forward to s->loss. */
zoe_status stack_forward(stack *s, const int32_t *tokens, const int32_t *targets, uint64_t step);
/* Gradients of the mean loss, accumulated into s->grads (zero them first). */
zoe_status stack_backward(stack *s);
zoe_status stack_zero_grads(stack *s);
/* w -= lr * g on every local shard (host round trip: a test utility). */
zoe_status stack_sgd(stack *s, float lr);
/* The full logits [N, vocab.padded] gathered to the host as double (after forward). */
zoe_status stack_logits(stack *s, double *out);
/* A parameter (data or grad) gathered to global layout on the host, as double. */
zoe_status stack_param_global(stack *s, int i, bool of_grad, double *out);

/* Element i of a host buffer of dtype dt as double. */
double stack_load(zoe_dtype dt, const void *p, size_t i);

#endif
