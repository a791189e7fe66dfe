#include "train_run.h"
#include <stdlib.h>
#include "zoe/data.h"

zoe_status train_run_losses(const train_run *r, float *losses, int *skipped) {
    int size;
    MPI_Comm_size(r->comm, &size);
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    c.model = r->model;
    c.backend = r->backend, c.dtype = r->dtype;
    c.tp = r->tp, c.micro_batch = r->micro_batch, c.grad_accum = 1, c.steps = r->steps;
    c.recompute = r->recompute;
    c.offload = r->offload;
    c.lr = 1e-3f, c.min_lr = 1e-4f, c.warmup = 5, c.dpu_warmup = r->dpu_warmup, c.seed = 99;
    if (r->loss_scale > 0) c.loss_scale = r->loss_scale;
    zoe_trainer *tr = NULL;
    zoe_dataset *ds = NULL;
    zoe_loader *loader = NULL;
    zoe_status st = zoe_trainer_create(r->comm, &c, &tr);
    if (st == ZOE_OK) st = zoe_dataset_open(r->corpus, &ds);
    zoe_loader_config lc = {.seq_len = c.model.seq_len,
                            .micro_batch = r->micro_batch,
                            .dp_size = size / r->tp,
                            .dp_rank = st == ZOE_OK ? zoe_trainer_dp_rank(tr) : 0,
                            .grad_accum = 1,
                            .seed = 7,
                            .vocab_size = c.model.vocab};
    if (st == ZOE_OK) st = zoe_loader_create(ds, &lc, &loader);
    size_t n = (size_t)r->micro_batch * (size_t)c.model.seq_len;
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    if (skipped) *skipped = 0;
    for (int s = 0; st == ZOE_OK && s < r->steps; s++) {
        zoe_step_stats stats;
        st = zoe_loader_fetch(loader, s, 0, tokens, targets);
        if (st == ZOE_OK) st = zoe_trainer_micro_batch(tr, tokens, targets, NULL);
        if (st == ZOE_OK) st = zoe_trainer_step(tr, zoe_train_lr_at(&c, s), &stats);
        if (st == ZOE_OK) losses[s] = stats.loss;
        if (st == ZOE_OK && skipped) *skipped += stats.skipped;
    }
    free(tokens), free(targets);
    zoe_loader_destroy(loader);
    zoe_dataset_destroy(ds);
    if (st == ZOE_OK) st = zoe_trainer_finalize(tr);
    zoe_trainer_destroy(tr);
    return st;
}
