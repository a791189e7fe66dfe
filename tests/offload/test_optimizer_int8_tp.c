/* TP-replicated tensors (LayerNorm weights, row-parallel biases, KV heads held by several TP
 * ranks) must stay the same on every TP rank: each rank updates its own copy from the same
 * gradient, and nothing reconciles them afterwards. With int8 moments a block's scale is its
 * largest value, so a block holding replicated elements and sharded ones (which differ by TP
 * rank) would quantise the replicated ones differently on each rank and their weights would
 * drift apart. At TP = 2 (2 and 4 ranks: DP 1 and 2), sharded tensors with different weights and
 * ten times larger gradients on each TP rank (so they set the scales), replicated ones with the
 * same: after 10 steps the replicated weights and moments are the same bits on both TP ranks, for
 * int8 moments (with a bf16 master and with fp32), bf16 and fp32 state, DPU off and plain. */
#include "offload_test.h"

enum { NT = 5, STEPS = 10 };
static const size_t numel[NT] = {1000, 300, 701, 77, 2000};
static const zoe_param_tensor tensors[NT] = {
    {.name = "sharded.a", .numel = 1000},
    {.name = "replicated.a", .numel = 300, .tp_replicated = 1, .no_weight_decay = 1},
    {.name = "sharded.b", .numel = 701},
    {.name = "replicated.b", .numel = 77, .tp_replicated = 1},
    {.name = "sharded.c", .numel = 2000}};
enum { TOTAL = 1000 + 300 + 701 + 77 + 2000 };

/* Whether element i of the concatenation belongs to a replicated tensor. */
static int replicated_at(size_t i) {
    for (int t = 0; t < NT; i -= numel[t], t++)
        if (i < numel[t]) return tensors[t].tp_replicated;
    return 0;
}

/* Values for this rank: replicated elements from seed alone (the same on every TP rank), sharded
 * ones from the TP rank too, times sharded_scale. */
static void values(zoe_grid *grid, uint64_t seed, double sharded_scale, double *x) {
    test_rng same, own;
    test_rng_seed(&same, seed);
    test_rng_seed(&own, seed * 7919 + 1 + (uint64_t)zoe_grid_tp_rank(grid));
    for (size_t i = 0; i < TOTAL; i++) {
        double r = test_rng_normal(&same), s = test_rng_normal(&own);
        x[i] = replicated_at(i) ? r : sharded_scale * s;
    }
}

/* Whether the replicated elements of x are the same bits on every rank of the TP group. */
static int same_on_tp_ranks(zoe_grid *grid, const double *x) {
    double lo[TOTAL], hi[TOTAL];
    MPI_Allreduce(x, lo, TOTAL, MPI_DOUBLE, MPI_MIN, zoe_grid_tp_comm(grid));
    MPI_Allreduce(x, hi, TOTAL, MPI_DOUBLE, MPI_MAX, zoe_grid_tp_comm(grid));
    for (size_t i = 0; i < TOTAL; i++)
        if (replicated_at(i) && lo[i] != hi[i]) return 0;
    return 1;
}

static void one_case(zoe_grid *grid, zoe_device *dev, zoe_stream *stream, zoe_dtype master,
                     zoe_dtype moments, int dpu) {
    const zoe_dtype dt = ZOE_BF16;
    zoe_optimizer_config c;
    zoe_optimizer_config_default(&c);
    c.bucket_numel = 2500; /* two buckets, each holding replicated and sharded tensors */
    c.weight_decay = 0.1f;
    c.clip_norm = 0;
    c.dpu_warmup = dpu;
    c.main_params_dtype = master, c.exp_avg_dtype = c.exp_avg_sq_dtype = moments;
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, tensors, NT, &c, &opt))) return;
    static double w[TOTAL], g[TOTAL];
    values(grid, 3, 1.0, w);
    write_params(opt, dt, numel, NT, w);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    for (int s = 0; s < STEPS; s++) {
        /* the same gradient on every DP rank too: the reduced one is then what each rank sent */
        values(grid, 100 + (uint64_t)s, 10.0, g);
        feed_micro_batch(opt, dt, numel, NT, g);
        CHECK_OK(zoe_optimizer_step(opt, 1e-2f));
    }
    CHECK_OK(zoe_optimizer_flush(opt));
    read_params(opt, dt, numel, NT, w);
    int same = same_on_tp_ranks(grid, w);
    /* the moments of the replicated elements this rank's partition holds */
    for (int which = ZOE_STATE_EXP_AVG; which <= ZOE_STATE_EXP_AVG_SQ; which++) {
        double x[TOTAL] = {0};
        for (int t = 0, k = 0; t < NT; k += (int)numel[t], t++) {
            size_t first, count, poff;
            CHECK_OK(zoe_optimizer_tensor_shard(opt, t, &first, &count, &poff));
            float *v = malloc((count ? count : 1) * sizeof(float));
            CHECK_OK(zoe_optimizer_read_state(opt, (zoe_optimizer_state)which, poff, count, v));
            for (size_t i = 0; i < count; i++) x[k + first + i] = v[i];
            free(v);
        }
        same = same && same_on_tp_ranks(grid, x);
    }
    CHECK(same, "master %s, moments %s, DPU after %d: a replicated tensor differs between TP ranks",
          zoe_dtype_name(master), zoe_dtype_name(moments), dpu);
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world % 2) {
        fprintf(stderr, "test_optimizer_int8_tp: needs an even number of ranks (TP = 2)\n");
        return 77;
    }
    zoe_grid *grid = NULL;
    zoe_device *dev = NULL;
    zoe_stream *stream = NULL;
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 2, &grid));
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    for (int dpu = 0; dpu <= 2; dpu += 2) {
        one_case(grid, dev, stream, B, Q, dpu);
        one_case(grid, dev, stream, F, Q, dpu);
        one_case(grid, dev, stream, B, B, dpu);
        one_case(grid, dev, stream, F, F, dpu);
    }
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    zoe_grid_destroy(grid);
    return test_finish("test_optimizer_int8_tp");
}
