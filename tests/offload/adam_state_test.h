/* What the host Adam state tests share: every ISA path to compare, and the step's constants
 * from one set of hyperparameters (AdamW or L2, at a given step).
 *
 * Explained in docs/offload.md, "Compressed state". */
#ifndef ZOE_TESTS_ADAM_STATE_TEST_H
#define ZOE_TESTS_ADAM_STATE_TEST_H

#include "kernels/adam_state.h"

static const zoe_cpu_isa isas[] = {ZOE_CPU_ISA_SCALAR, ZOE_CPU_ISA_AVX2, ZOE_CPU_ISA_AVX512,
                                   ZOE_CPU_ISA_AVX512_BF16};
enum { NUM_ISAS = sizeof isas / sizeof isas[0] };

static inline zoe_adam_consts consts_of(int decoupled, long step) {
    zoe_adam_hparams h = {.lr = 1e-2f,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .decoupled = decoupled,
                          .grad_scale = 0.5f,
                          .step = step};
    zoe_adam_consts c;
    zoe_adam_consts_init(&c, &h);
    return c;
}

#endif
