/* Clipping, static and dynamic loss scaling, and the skipped step, at 1, 2 and 4 DP ranks.
 *
 * 1. Clipping by hand: every rank writes the gradient (3, 4) * S for a static loss scale S = 8,
 *    so the averaged, unscaled gradient is (3, 4), its norm 5, and with clip_norm 1 the
 *    coefficient is 1 / (5 + 1e-6). With eps = 1 Adam's first step is not scale-invariant:
 *    the bias-corrected m/sqrt(v) is g c / (|g| c + 1), so the weights move by
 *    lr * 0.6 / 1.6 = 0.375 lr and lr * 0.8 / 1.8 = 0.4444 lr (to within 1e-6 from the
 *    1e-6 in the coefficient). Checked to 1e-6 relative on the step and the statistics, plus
 *    one fp32 ulp of the stored weight.
 * 2. Dynamic loss scaling: scale 1024, window 3, min 256. Three clean steps double it; an inf
 *    on the last rank only makes every rank skip (statistics say so), halve the scale, and
 *    leave master weights, both moments, the device weights and the step count bit-identical;
 *    a NaN does the same; repeated overflows stop at min_loss_scale. */
#include "offload_test.h"

static zoe_device *dev;
static zoe_stream *stream;

static void clip_case(zoe_grid *grid) {
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.eps = 1.0f;
    cfg.clip_norm = 1.0f;
    cfg.loss_scale = 8.0f;
    cfg.weight_decay = 0;
    zoe_param_tensor t[] = {{"g", 2, 0, 0}, {"h", 1, 0, 0}};
    size_t numel[] = {2, 1};
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F32, t, 2, &cfg, &opt))) return;
    double w0[] = {0.25, -0.5, 0.75}, g[] = {3 * 8.0, 4 * 8.0, 0}, w[3];
    write_params(opt, ZOE_F32, numel, 2, w0);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    feed_micro_batch(opt, ZOE_F32, numel, 2, g);
    const double lr = 0.01;
    CHECK_OK(zoe_optimizer_step(opt, (float)lr));
    zoe_optimizer_stats st;
    CHECK_OK(zoe_optimizer_stats_get(opt, &st));
    CHECK(fabs(st.grad_norm - 5.0) <= 1e-6 * 5, "grad norm %.9g, want 5", st.grad_norm);
    CHECK(fabs(st.clip_coef - 1 / (5 + 1e-6)) <= 1e-6 / 5, "clip coef %.9g, want 0.2",
          st.clip_coef);
    read_params(opt, ZOE_F32, numel, 2, w);
    double want[] = {w0[0] - lr * 0.375, w0[1] - lr * 0.8 / 1.8, w0[2]};
    /* 1e-6 relative on the update plus the fp32 storage of w (ulp 6e-8 at 0.5). */
    CHECK_CLOSE(w, want, 3, 1e-6 * lr + 1.2e-7, 0, "clipped first step");
    zoe_optimizer_destroy(opt);
}

typedef struct snapshot {
    float *master, *m, *v;
    double *params;
} snapshot;

static void take(zoe_optimizer *opt, const size_t *numel, int nt, size_t total, snapshot *s) {
    size_t pn = zoe_optimizer_partition_numel(opt);
    s->master = malloc(pn * 4), s->m = malloc(pn * 4), s->v = malloc(pn * 4);
    s->params = malloc(total * sizeof(double));
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 0, pn, s->master));
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG, 0, pn, s->m));
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG_SQ, 0, pn, s->v));
    read_params(opt, ZOE_BF16, numel, nt, s->params);
}

static int same(const snapshot *a, const snapshot *b, size_t pn, size_t total) {
    return !memcmp(a->master, b->master, pn * 4) && !memcmp(a->m, b->m, pn * 4) &&
           !memcmp(a->v, b->v, pn * 4) && !memcmp(a->params, b->params, total * sizeof(double));
}

static void drop(snapshot *s) {
    free(s->master), free(s->m), free(s->v), free(s->params);
}

static void loss_scale_case(zoe_grid *grid) {
    int last = zoe_grid_dp_rank(grid) == zoe_grid_dp_size(grid) - 1;
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.dynamic_loss_scale = 1;
    cfg.loss_scale = 1024;
    cfg.loss_scale_window = 3;
    cfg.min_loss_scale = 256;
    cfg.bucket_numel = 50;
    zoe_param_tensor t[] = {{"a", 70, 0, 0}, {"b", 33, 0, 0}};
    size_t numel[] = {70, 33}, total = 103;
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_BF16, t, 2, &cfg, &opt))) return;
    size_t pn = zoe_optimizer_partition_numel(opt);
    double w0[103], g[103];
    test_rng rng;
    test_rng_seed(&rng, 8);
    for (size_t i = 0; i < total; i++) w0[i] = round_to(ZOE_BF16, test_rng_normal(&rng));
    write_params(opt, ZOE_BF16, numel, 2, w0);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    /* scale expected after each step: clean x3 -> 2048; inf -> 1024 (skip); nan -> 512 (skip);
     * clean; inf -> 256; inf -> 256 (floor); clean */
    const int bad[] = {0, 0, 0, 1, 2, 0, 1, 1, 0};
    const double scale_after[] = {1024, 1024, 2048, 1024, 512, 512, 256, 256, 256};
    long applied = 0;
    for (int s = 0; s < 9; s++) {
        zoe_optimizer_stats st;
        CHECK_OK(zoe_optimizer_stats_get(opt, &st));
        for (size_t i = 0; i < total; i++) g[i] = test_rng_normal(&rng) * st.loss_scale;
        if (bad[s] && last) g[37] = bad[s] == 1 ? INFINITY : NAN;
        snapshot before, after;
        take(opt, numel, 2, total, &before);
        feed_micro_batch(opt, ZOE_BF16, numel, 2, g);
        CHECK_OK(zoe_optimizer_step(opt, 1e-2f));
        CHECK_OK(zoe_optimizer_stats_get(opt, &st));
        take(opt, numel, 2, total, &after);
        applied += !bad[s];
        CHECK(st.skipped == (bad[s] != 0), "step %d: skipped %d", s, st.skipped);
        CHECK(st.step == applied, "step %d: step count %ld, want %ld", s, st.step, applied);
        CHECK(st.loss_scale == scale_after[s], "step %d: loss scale %g, want %g", s, st.loss_scale,
              scale_after[s]);
        int unchanged = same(&before, &after, pn, total);
        CHECK(unchanged == (bad[s] != 0), "step %d: state %s", s,
              unchanged ? "unchanged by a clean step" : "changed by a skipped step");
        drop(&before), drop(&after);
    }
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *grid = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    clip_case(grid);
    loss_scale_case(grid);
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_scaling");
}
