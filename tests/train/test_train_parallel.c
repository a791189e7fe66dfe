/* Training at TP x DP equals training at TP=1 x DP=1 with the same global batch: 30 steps of a
 * small GPT, and of a small Llama, on the demo corpus, DPU off, the loss of every step compared.
 * The grid run uses every rank (tp = 2 when the world allows, dp = the rest, micro-batch b); the
 * reference runs on each rank alone (MPI_COMM_SELF) with micro-batch dp * b, so that both see the
 * same sequences each step (the loader deals a global batch out in contiguous shares).
 *
 * Tolerance: fp32 throughout. TP splits the reductions of row-parallel matmuls and the
 * vocabulary softmax, DP sums gradients in another order, so per-step gradients differ by a
 * few fp32 ulps; Adam carries such differences forward, and a measured run (TP=2 x DP=2)
 * stays at 1.2e-7 relative in the loss over 30 steps. We allow 1e-5 relative: about a hundred
 * times the observed drift, and a thousand times below the loss's own step-to-step change, so
 * a wrong gradient, a missing all-reduce or a mis-dealt batch fails. */
#include <math.h>
#include <stdlib.h>
#include "testing.h"
#include "train_run.h"
#include "zoe/data.h"

enum { STEPS = 30, MICRO = 2 };

typedef struct run_options {
    int recompute;
    float dropout;
    int steps;
    int llama; /* the Llama family: 4 query heads over 2 KV heads, an untied head */
} run_options;

static zoe_status run(MPI_Comm comm, int tp, int micro_batch, const char *corpus,
                      const run_options *o, float *losses) {
    zoe_model_config model = {.name = "test",
                              .layers = 2,
                              .hidden = 64,
                              .heads = 4,
                              .seq_len = 32,
                              .vocab = ZOE_BYTE_VOCAB_SIZE,
                              .dropout = o->dropout};
    if (o->llama) {
        model.family = ZOE_MODEL_LLAMA;
        model.kv_heads = 2;
        model.ffn = 176;
        model.rope_theta = 10000.0f;
        model.norm_eps = 1e-5f;
    }
    train_run r = {.comm = comm,
                   .model = model,
                   .backend = ZOE_BACKEND_CPU,
                   .dtype = ZOE_F32,
                   .tp = tp,
                   .micro_batch = micro_batch,
                   .steps = o->steps,
                   .recompute = o->recompute,
                   .corpus = corpus};
    return train_run_losses(&r, losses, NULL);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_parallel CORPUS\n");
        return 2;
    }
    int world = test_world_size(), tp = world % 2 == 0 ? 2 : 1, dp = world / tp;
    float grid[STEPS], ref[STEPS];
    run_options plain = {.steps = STEPS};
    CHECK_OK(run(MPI_COMM_WORLD, tp, MICRO, argv[1], &plain, grid));
    CHECK_OK(run(MPI_COMM_SELF, 1, MICRO * dp, argv[1], &plain, ref));
    double g[STEPS], r[STEPS];
    for (int s = 0; s < STEPS; s++) g[s] = grid[s], r[s] = ref[s];
    char what[96];
    snprintf(what, sizeof what, "loss per step, TP=%d x DP=%d vs TP=1 x DP=1", tp, dp);
    CHECK_CLOSE(g, r, STEPS, 0, 1e-5, what);
    CHECK(r[STEPS - 1] < r[0] - 0.5, "the reference learns: loss %.3f -> %.3f", r[0], r[STEPS - 1]);
    /* The same for a Llama (GQA, RoPE, SwiGLU, untied head); at 4 ranks TP=2 splits its 2 KV
     * heads, and the TP=4 runs of test_tp_stack cover their replication. */
    float lgrid[STEPS], lref[STEPS];
    run_options llama = {.steps = STEPS, .llama = 1};
    CHECK_OK(run(MPI_COMM_WORLD, tp, MICRO, argv[1], &llama, lgrid));
    CHECK_OK(run(MPI_COMM_SELF, 1, MICRO * dp, argv[1], &llama, lref));
    double lg[STEPS], lr[STEPS];
    for (int s = 0; s < STEPS; s++) lg[s] = lgrid[s], lr[s] = lref[s];
    snprintf(what, sizeof what, "Llama loss per step, TP=%d x DP=%d vs TP=1 x DP=1", tp, dp);
    CHECK_CLOSE(lg, lr, STEPS, 0, 1e-5, what);
    CHECK(lr[STEPS - 1] < lr[0] - 0.5, "the Llama reference learns: loss %.3f -> %.3f", lr[0],
          lr[STEPS - 1]);
    if (world == 4) {
        /* TP=4 x DP=1: each KV head is replicated on 2 ranks, its gradient summed over exactly
         * those and counted once in the global norm that the default clipping (1.0) uses. */
        float l4[STEPS];
        double g4[STEPS];
        CHECK_OK(run(MPI_COMM_WORLD, 4, MICRO * dp, argv[1], &llama, l4));
        for (int s = 0; s < STEPS; s++) g4[s] = l4[s];
        CHECK_CLOSE(g4, lr, STEPS, 0, 1e-5, "Llama loss per step, TP=4 (KV heads replicated)");
    }
    /* Activation recomputation reruns each block's forward, with the same dropout masks, in
     * backward: the same operations in the same order, so the same losses to the bit. */
    enum { RECOMPUTE_STEPS = 8 };
    float kept[RECOMPUTE_STEPS], recomputed[RECOMPUTE_STEPS];
    run_options keep = {.recompute = 0, .dropout = 0.1f, .steps = RECOMPUTE_STEPS};
    run_options again = {.recompute = 1, .dropout = 0.1f, .steps = RECOMPUTE_STEPS};
    CHECK_OK(run(MPI_COMM_WORLD, tp, MICRO, argv[1], &keep, kept));
    CHECK_OK(run(MPI_COMM_WORLD, tp, MICRO, argv[1], &again, recomputed));
    for (int s = 0; s < RECOMPUTE_STEPS; s++)
        CHECK(kept[s] == recomputed[s], "recompute changes step %d's loss: %.9g vs %.9g", s,
              kept[s], recomputed[s]);
    CHECK(kept[RECOMPUTE_STEPS - 1] != grid[RECOMPUTE_STEPS - 1], "dropout 0.1 changes the loss");
    if (test_rank() == 0) {
        double worst = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(g[s] - r[s]) / fabs(r[s]));
        printf("TP=%d x DP=%d vs TP=1 x DP=1: loss %.4f -> %.4f, worst relative difference %.2e\n",
               tp, dp, r[0], r[STEPS - 1], worst);
        worst = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(lg[s] - lr[s]) / fabs(lr[s]));
        printf("Llama TP=%d x DP=%d vs TP=1 x DP=1: loss %.4f -> %.4f, worst relative difference "
               "%.2e\n",
               tp, dp, lr[0], lr[STEPS - 1], worst);
    }
    return test_finish("test_train_parallel");
}
