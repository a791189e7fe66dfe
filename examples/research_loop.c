/* A research trainer's own loop on zoe's public API: its own batches (here: continue arithmetic
 * progressions modulo the vocabulary, a task a small GPT picks up in a few dozen steps), its
 * own learning-rate rule, zoe doing TP x DP and ZeRO-Offload underneath.
 *   mpirun -np 2 build/examples/research_loop */
#include <stdio.h>
#include <stdlib.h>
#include "zoe/zoe.h"
#include "zoe/train.h"

enum { SEQ = 32, BATCH = 4, VOCAB = 64, STEPS = 40 };

/* Each DP rank draws its own batches; the TP ranks of a DP group must see the same ones. */
static void make_batch(unsigned seed, int32_t *tokens, int32_t *targets) {
    for (int b = 0; b < BATCH; b++) {
        int32_t *row = tokens + b * SEQ, start = rand_r(&seed) % VOCAB,
                stride = 1 + rand_r(&seed) % 4;
        for (int t = 0; t < SEQ; t++) row[t] = (start + t * stride) % VOCAB;
        for (int t = 0; t < SEQ; t++) /* the last position has no next token: ignored */
            targets[b * SEQ + t] = t + 1 < SEQ ? (start + (t + 1) * stride) % VOCAB : -1;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    cfg.model = (zoe_model_config){
        .name = "copy", .layers = 2, .hidden = 64, .heads = 4, .seq_len = SEQ, .vocab = VOCAB};
    cfg.tp = world % 2 == 0 ? 2 : 1; /* TP over pairs of ranks, DP over the rest */
    cfg.micro_batch = BATCH;
    cfg.dpu_warmup = 10;

    zoe_trainer *tr = NULL;
    if (zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr) != ZOE_OK) {
        fprintf(stderr, "research_loop: %s\n", zoe_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    for (int step = 0; step < STEPS; step++) {
        for (int micro = 0; micro < 2; micro++) { /* gradient accumulation, by hand */
            unsigned seed = (unsigned)(1000 * step + 10 * micro + zoe_trainer_dp_rank(tr));
            make_batch(seed, tokens, targets);
            if (zoe_trainer_micro_batch(tr, tokens, targets, NULL) != ZOE_OK) goto fail;
        }
        float lr = step < 5 ? 2e-3f * (float)(step + 1) / 5 : 2e-3f; /* our own schedule */
        zoe_step_stats s;
        if (zoe_trainer_step(tr, lr, &s) != ZOE_OK) goto fail;
        if (rank == 0 && step % 10 == 9)
            printf("step %2d  loss %.3f  grad norm %.3f\n", step + 1, (double)s.loss,
                   (double)s.grad_norm);
    }
    if (zoe_trainer_finalize(tr) != ZOE_OK) goto fail; /* collective: lands the last update */
    zoe_trainer_destroy(tr);
    MPI_Finalize();
    return 0;
fail:
    fprintf(stderr, "research_loop: rank %d: %s\n", rank, zoe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}
