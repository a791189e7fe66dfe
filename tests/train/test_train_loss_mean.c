/* The loss and its gradient are the mean over every counted target of the global batch, across
 * micro-batches and DP ranks, when micro-batches hold very different numbers of ignored (-1)
 * targets. The grid run (DP = the ranks, 2 micro-batches of 2 rows each, zoe_trainer_begin_step)
 * is compared with a run on each rank alone that takes the whole global batch as one
 * micro-batch, where the mean over all tokens is a single reduction by construction; and each
 * step's reported loss with a float64 recomputation from the micro-batches' means and counts,
 * all-reduced here. The masks ignore 0%, 45% and 90% of a micro-batch's targets, so the
 * gradient of a mean of micro-batch means (the trainer without begin_step) misses by far more
 * than the tolerance (checked too).
 *
 * Tolerance: fp32 throughout; the two runs sum the same per-token terms in another order, so
 * losses agree to a few ulps (1e-6 relative allowed) and gradient norms, sums over 0.2M
 * parameters, to 1e-5 relative; Adam then carries rounding-level differences, 3 steps keep
 * them at that level. */
#include <math.h>
#include <stdlib.h>
#include "testing.h"
#include "zoe/data.h"
#include "zoe/train.h"

enum { STEPS = 3, MICRO = 2, ACCUM = 2, SEQ = 32 };

/* Whether target t of global row `row` is ignored: a share that depends on the micro-batch the
 * row belongs to in the grid run. */
static int ignored(int64_t row, int t) {
    int64_t micro = row / MICRO; /* (dp_rank * ACCUM + micro_step) */
    double share = (double)(micro % 3) * 0.45;
    uint64_t h = (uint64_t)row * 0x9e3779b97f4a7c15ull ^ (uint64_t)t * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    return (double)(h % 1000) / 1000.0 < share;
}

typedef struct result {
    float loss[STEPS], norm[STEPS];
    double ref64[STEPS], mean_of_means[STEPS];
} result;

static zoe_status run(MPI_Comm comm, int micro, int accum, int declare, const char *corpus,
                      result *out) {
    int size;
    MPI_Comm_size(comm, &size);
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    c.model = (zoe_model_config){
        .name = "test", .layers = 2, .hidden = 64, .heads = 4, .seq_len = SEQ, .vocab = 257};
    c.micro_batch = micro, c.grad_accum = accum, c.steps = STEPS;
    c.lr = 1e-3f, c.min_lr = 1e-4f, c.warmup = 1, c.dpu_warmup = 0, c.seed = 5;
    zoe_trainer *tr = NULL;
    zoe_dataset *ds = NULL;
    zoe_loader *loader = NULL;
    zoe_status st = zoe_trainer_create(comm, &c, &tr);
    if (st == ZOE_OK) st = zoe_dataset_open(corpus, &ds);
    int dp_rank = st == ZOE_OK ? zoe_trainer_dp_rank(tr) : 0;
    zoe_loader_config lc = {.seq_len = SEQ,
                            .micro_batch = micro,
                            .dp_size = size,
                            .dp_rank = dp_rank,
                            .grad_accum = accum,
                            .seed = 3,
                            .vocab_size = 257};
    if (st == ZOE_OK) st = zoe_loader_create(ds, &lc, &loader);
    size_t n = (size_t)micro * SEQ;
    int32_t *tokens = malloc(accum * n * sizeof(int32_t)),
            *targets = malloc(accum * n * sizeof(int32_t));
    for (int s = 0; st == ZOE_OK && s < STEPS; s++) {
        for (int m = 0; st == ZOE_OK && m < accum; m++) {
            st = zoe_loader_fetch(loader, s, m, tokens + m * n, targets + m * n);
            for (int r = 0; r < micro; r++) {
                int64_t row = ((int64_t)dp_rank * accum + m) * micro + r;
                for (int t = 0; t < SEQ; t++)
                    if (ignored(row, t)) targets[m * n + (size_t)r * SEQ + t] = -1;
            }
        }
        if (st == ZOE_OK && declare)
            st = zoe_trainer_begin_step(tr, zoe_count_targets(targets, accum * n));
        double sums[3] = {0, 0, 0}; /* loss x count, count, micro-batch means */
        for (int m = 0; st == ZOE_OK && m < accum; m++) {
            float l = 0;
            st = zoe_trainer_micro_batch(tr, tokens + m * n, targets + m * n, &l);
            double count = (double)zoe_count_targets(targets + m * n, n);
            sums[0] += (double)l * count, sums[1] += count, sums[2] += l;
        }
        MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, comm);
        zoe_step_stats stats;
        if (st == ZOE_OK) st = zoe_trainer_step(tr, zoe_train_lr_at(&c, s), &stats);
        if (st == ZOE_OK) {
            out->loss[s] = stats.loss, out->norm[s] = stats.grad_norm;
            out->ref64[s] = sums[0] / sums[1];
            out->mean_of_means[s] = sums[2] / (double)(accum * size);
        }
    }
    free(tokens), free(targets);
    zoe_loader_destroy(loader);
    zoe_dataset_destroy(ds);
    zoe_trainer_destroy(tr);
    return st;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_loss_mean CORPUS\n");
        return 2;
    }
    int dp = test_world_size();
    static result grid, ref, undeclared;
    CHECK_OK(run(MPI_COMM_WORLD, MICRO, ACCUM, 1, argv[1], &grid));
    CHECK_OK(run(MPI_COMM_SELF, MICRO * ACCUM * dp, 1, 1, argv[1], &ref));
    CHECK_OK(run(MPI_COMM_WORLD, MICRO, ACCUM, 0, argv[1], &undeclared));
    double g[STEPS], r[STEPS], gn[STEPS], rn[STEPS];
    for (int s = 0; s < STEPS; s++)
        g[s] = grid.loss[s], r[s] = ref.loss[s], gn[s] = grid.norm[s], rn[s] = ref.norm[s];
    CHECK_CLOSE(g, r, STEPS, 0, 1e-6, "loss: DP x 2 micro-batches vs one micro-batch");
    CHECK_CLOSE(gn, rn, STEPS, 0, 1e-5, "gradient norm: DP x 2 micro-batches vs one micro-batch");
    CHECK_CLOSE(g, grid.ref64, STEPS, 0, 1e-6, "loss vs float64 per-token mean of micro-batches");
    /* Without begin_step each micro-batch is its own mean: the test would see that. */
    double gap = fabs(undeclared.norm[0] - ref.norm[0]) / ref.norm[0];
    CHECK(gap > 1e-3, "a mean of micro-batch means has another gradient (%.2e relative)", gap);
    if (test_rank() == 0)
        printf("DP=%d x %d micro-batches: loss %.6f (one micro-batch %.6f, float64 %.6f, mean of "
               "means %.6f), grad norm %.6f vs %.6f (mean of means %.6f)\n",
               dp, ACCUM, g[0], r[0], grid.ref64[0], grid.mean_of_means[0], gn[0], rn[0],
               undeclared.norm[0]);
    return test_finish("test_train_loss_mean");
}
