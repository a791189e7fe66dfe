/* Test glue around the real model (models/gpt.h): one zoe_gpt per communicator, on its own CPU
 * device, with flat weight and gradient buffers and a gradient sink that hands out each tensor's
 * slice of the gradient buffer. A test holds a TP=1 model (over MPI_COMM_SELF) beside a TP=t one
 * and compares them. */
#ifndef ZOE_TESTS_TP_STACK_H
#define ZOE_TESTS_TP_STACK_H

#include "models/gpt.h"

typedef struct stack {
    zoe_gpt_config cfg;
    zoe_device *dev;
    zoe_stream *stream;
    zoe_comm *comm;
    zoe_gpt *gpt;
    zoe_tp *tp;
    int ntensors;
    int64_t numel;
    int64_t *offset;       /* tensor t starts offset[t] elements into weights and grads */
    void *weights, *grads; /* flat, numel elements */
    float loss;
} stack;

/* All weights initialised (Philox), gradients zero. group: the TP communicator. */
zoe_status stack_create(const zoe_gpt_config *cfg, MPI_Comm group, stack **out);
void stack_destroy(stack *s);
/* Runs the forward on host tokens/targets [B*T] to s->loss. */
zoe_status stack_forward(stack *s, const int32_t *tokens, const int32_t *targets);
/* Gradients of the mean loss, accumulated into s->grads (zero them first). */
zoe_status stack_backward(stack *s);
zoe_status stack_zero_grads(stack *s);
/* w -= lr * g on every local shard (host round trip: a test utility). */
zoe_status stack_sgd(stack *s, float lr);
/* The full logits [N, vocab.padded] gathered to the host as double (after forward). */
zoe_status stack_logits(stack *s, double *out);
/* Tensor t (data or grad) gathered to global layout on the host, as double. */
zoe_status stack_param_global(stack *s, int t, bool of_grad, double *out);

/* Element i of a host buffer of dtype dt as double. */
double stack_load(zoe_dtype dt, const void *p, size_t i);

#endif
