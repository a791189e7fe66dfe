/* Test helper: a short training run through the public API on the demo corpus, returning the
 * loss of every step (the global-batch mean), for tests that compare runs. */
#ifndef ZOE_TESTS_TRAIN_RUN_H
#define ZOE_TESTS_TRAIN_RUN_H

#include "zoe/train.h"

typedef struct train_run {
    MPI_Comm comm;
    zoe_model_config model;
    zoe_backend backend;
    zoe_dtype dtype;
    int tp, micro_batch, steps;
    int recompute, dpu_warmup; /* dpu_warmup 0: no DPU */
    zoe_offload_mode offload;  /* ZOE_OFFLOAD_CPU (0) unless set */
    float loss_scale;          /* fp16; 0: the default */
    const char *corpus;
} train_run;

/* losses[s] for s < r->steps; *skipped (may be NULL) counts steps skipped on overflow. */
zoe_status train_run_losses(const train_run *r, float *losses, int *skipped);

#endif
