/* ZeRO-Offload against a float64 Adam/AdamW, at the DP size of the run (1, 2, 4 ranks).
 *
 * 1. Random gradients, 20 steps, fp32 and bf16 weights, with and without accumulation over 3
 *    micro-batches, both gradient modes, Adam+L2 and AdamW: device weights, master weights and
 *    the reported gradient norm against the reference fed the same (dtype-rounded) gradients.
 *    Half of the tensors are flagged no_weight_decay and the reference decays only the others;
 *    ignoring the flag (or decaying the wrong tensors) moves those weights by ~1e-2 relative
 *    over the 20 steps, far beyond the tolerance.
 *    Adam is invariant to the scale of the gradient, so the cases use L2 decay and eps = 1e-3,
 *    which make a wrong 1/d or 1/k visible, and the norm is checked too. The master weights of
 *    every rank's shard are read back through the checkpoint interface.
 * 2. DP = d with b samples per rank equals DP = 1 with d*b samples (and DP = 1 with d
 *    micro-batches of b): gradients of a per-sample function of the weights, g_s = a_s*w - c_s.
 *
 * The reference is fed the gradient the data path is specified to deliver: each rank's
 * gradient written in the compute dtype (accumulated in it across micro-batches in the
 * full-buffer mode, where the model's += rounds), reduced over ranks in fp32 and rounded once to
 * the compute dtype (the communicator's contract), divided by d and averaged over the k
 * micro-batches; everything after that in float64.
 *
 * Tolerances: what is left is the optimizer's fp32 arithmetic: ~10 roundings (2^-24 relative)
 * per element per step on weights of magnitude <= 2, and the fp32 accumulation on the host;
 * over 20 steps that is below 1e-6, and master weights are checked at 2e-5 absolute for both
 * dtypes. bf16 device weights are the master weights rounded once more: 2e-5 + 2^-8 relative
 * (a master weight that lies within 2e-5 of a rounding tie may round the other way). The norm
 * within 1e-5 relative. */
#include "offload_test.h"

static const size_t numel[] = {37, 300, 5, 129, 64, 1000};
enum { NT = 6, NTOTAL = 1535, STEPS = 20 };

static zoe_device *dev;
static zoe_stream *stream;

static double lr_at(int s) {
    return 1e-2 * (1.0 - s / 40.0);
}

/* Tensors a, c and e are exempt from weight decay (as biases and LayerNorm weights are): each
 * bucket mixes exempt and decayed tensors, and DP partitions cut through both kinds. */
static const int exempt[NT] = {1, 0, 1, 0, 1, 0};

static zoe_param_tensor *tensor_list(void) {
    static zoe_param_tensor t[NT];
    static const char *names[NT] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < NT; i++)
        t[i] =
            (zoe_param_tensor){.name = names[i], .numel = numel[i], .no_weight_decay = exempt[i]};
    return t;
}

/* The per-element exemption mask of the concatenated tensors. */
static void exempt_mask(unsigned char *mask) {
    for (int t = 0, k = 0; t < NT; k += (int)numel[t], t++) memset(mask + k, exempt[t], numel[t]);
}

/* Rank r's gradient for micro-batch j of step s (the same on every rank that asks). */
static void random_grad(int s, int j, int r, zoe_dtype dt, double *g) {
    test_rng rng;
    test_rng_seed(&rng, 1000003u * (uint64_t)s + 7919u * (uint64_t)j + (uint64_t)r + 17);
    for (int i = 0; i < NTOTAL; i++) g[i] = round_to(dt, test_rng_normal(&rng));
}

static void reference_case(zoe_grid *grid, zoe_dtype dt, int k, zoe_grad_mode mode, int adamw) {
    int d = zoe_grid_dp_size(grid), me = zoe_grid_dp_rank(grid);
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.adamw = adamw;
    cfg.weight_decay = adamw ? 0.05f : 0.2f;
    cfg.eps = 1e-3f;
    cfg.clip_norm = 0;
    cfg.bucket_numel = 400;
    cfg.grad_mode = mode;
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, tensor_list(), NT, &cfg, &opt)))
        return;
    double *w = malloc(NTOTAL * sizeof(double)), *g = malloc(NTOTAL * sizeof(double));
    double *gsum = malloc(NTOTAL * sizeof(double)), *got = malloc(NTOTAL * sizeof(double));
    test_rng rng;
    test_rng_seed(&rng, 5);
    for (int i = 0; i < NTOTAL; i++) w[i] = round_to(dt, 2 * test_rng_uniform(&rng) - 1);
    write_params(opt, dt, numel, NT, w);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    ref_adam ref;
    ref_adam_init(&ref, w, NTOTAL);
    unsigned char no_decay[NTOTAL];
    exempt_mask(no_decay);
    ref.no_decay = no_decay;
    double worst_norm_err = 0;
    double *acc = malloc((size_t)d * NTOTAL * sizeof(double));
    for (int s = 0; s < STEPS; s++) {
        memset(gsum, 0, NTOTAL * sizeof(double));
        memset(acc, 0, (size_t)d * NTOTAL * sizeof(double));
        for (int j = 0; j < k; j++) {
            for (int r = 0; r < d; r++) {
                random_grad(s, j, r, dt, g);
                for (int i = 0; i < NTOTAL; i++) {
                    double *a = &acc[(size_t)r * NTOTAL + i];
                    *a = mode == ZOE_GRAD_FULL_BUFFER ? round_to(dt, *a + g[i]) : *a + g[i];
                }
            }
            if (mode == ZOE_GRAD_BUCKETS) /* reduced (and rounded) once per micro-batch */
                for (int i = 0; i < NTOTAL; i++) {
                    double red = 0;
                    for (int r = 0; r < d; r++) red += acc[(size_t)r * NTOTAL + i];
                    for (int r = 0; r < d; r++) acc[(size_t)r * NTOTAL + i] = 0;
                    gsum[i] += round_to(dt, red) / d;
                }
            random_grad(s, j, me, dt, g);
            feed_micro_batch(opt, dt, numel, NT, g);
        }
        if (mode == ZOE_GRAD_FULL_BUFFER) /* reduced once per step */
            for (int i = 0; i < NTOTAL; i++) {
                double red = 0;
                for (int r = 0; r < d; r++) red += acc[(size_t)r * NTOTAL + i];
                gsum[i] = round_to(dt, red) / d;
            }
        double norm = 0;
        for (int i = 0; i < NTOTAL; i++) gsum[i] /= k, norm += gsum[i] * gsum[i];
        norm = sqrt(norm);
        CHECK_OK(zoe_optimizer_step(opt, (float)lr_at(s)));
        ref_adam_step(&ref, gsum, 1.0, lr_at(s), &cfg);
        zoe_optimizer_stats st;
        CHECK_OK(zoe_optimizer_stats_get(opt, &st));
        double e = fabs(st.grad_norm - norm) / norm;
        if (e > worst_norm_err) worst_norm_err = e;
        CHECK(st.step == s + 1 && !st.skipped, "step %ld skipped %d after %d steps", st.step,
              st.skipped, s + 1);
    }
    char what[160];
    snprintf(what, sizeof what, "dp=%d %s k=%d %s %s", d, zoe_dtype_name(dt), k,
             mode == ZOE_GRAD_BUCKETS ? "buckets" : "full", adamw ? "adamw" : "adam+l2");
    double master_tol = 2e-5;
    CHECK(worst_norm_err <= 1e-5, "%s: grad norm relative error %g", what, worst_norm_err);
    read_params(opt, dt, numel, NT, got);
    CHECK_CLOSE(got, ref.w, NTOTAL, master_tol, dt == ZOE_F32 ? 0 : 0x1p-8, what);
    /* Master weights: poison, then read back this rank's shard of every tensor. */
    unsigned char *owned = calloc(NTOTAL, 1);
    for (int i = 0; i < NTOTAL; i++) got[i] = NAN;
    read_owned_state(opt, ZOE_STATE_MASTER, numel, NT, got, owned);
    size_t n_owned = 0;
    for (int i = 0; i < NTOTAL; i++) {
        n_owned += owned[i];
        if (!owned[i]) got[i] = ref.w[i];
    }
    CHECK_CLOSE(got, ref.w, NTOTAL, master_tol, 0, what);
    size_t total_owned = n_owned;
    MPI_Allreduce(MPI_IN_PLACE, &total_owned, 1, MPI_UNSIGNED_LONG, MPI_SUM,
                  zoe_grid_dp_comm(grid));
    CHECK(total_owned == NTOTAL, "%s: DP ranks own %zu elements in all, not %d", what, total_owned,
          NTOTAL);
    ref_adam_free(&ref);
    free(acc), free(owned), free(w), free(g), free(gsum), free(got);
    zoe_optimizer_destroy(opt);
}

/* Mean over samples [first, first + count) of g_s = a_s * w - c_s, a_s in [0.5, 1.5]. */
static void sample_grad(const double *w, int first, int count, double *g) {
    memset(g, 0, NTOTAL * sizeof(double));
    for (int s = first; s < first + count; s++) {
        test_rng rng;
        test_rng_seed(&rng, 99 + (uint64_t)s);
        for (int i = 0; i < NTOTAL; i++) {
            double a = 0.5 + test_rng_uniform(&rng), c = 2 * test_rng_uniform(&rng) - 1;
            g[i] += (a * w[i] - c) / count;
        }
    }
}

/* 20 steps where each of `micro` micro-batches of this rank has b samples; returns weights. */
static void batch_run(zoe_grid *grid, int b, int micro, double *w_out) {
    int me = zoe_grid_dp_rank(grid);
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.bucket_numel = 300;
    cfg.weight_decay = 0.01f;
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F32, tensor_list(), NT, &cfg, &opt)))
        return;
    double *w = malloc(NTOTAL * sizeof(double)), *g = malloc(NTOTAL * sizeof(double));
    init_random_params(opt, ZOE_F32, numel, NT, 6, w);
    for (int s = 0; s < STEPS; s++) {
        read_params(opt, ZOE_F32, numel, NT, w);
        for (int j = 0; j < micro; j++) {
            sample_grad(w, (me * micro + j) * b, b, g);
            feed_micro_batch(opt, ZOE_F32, numel, NT, g);
        }
        CHECK_OK(zoe_optimizer_step(opt, (float)lr_at(s)));
    }
    read_params(opt, ZOE_F32, numel, NT, w_out);
    free(w), free(g);
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *world = NULL, *self = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &world));
    CHECK_OK(zoe_grid_create(MPI_COMM_SELF, 1, &self));
    const zoe_dtype dts[] = {ZOE_F32, ZOE_BF16};
    for (int i = 0; i < 2; i++)
        for (int k = 1; k <= 3; k += 2)
            for (int mode = 0; mode < 2; mode++)
                reference_case(world, dts[i], k, (zoe_grad_mode)mode, (k + mode) % 2);

    int d = test_world_size(), b = 2;
    double *w_dp = malloc(NTOTAL * sizeof(double)), *w_one = malloc(NTOTAL * sizeof(double));
    double *w_acc = malloc(NTOTAL * sizeof(double));
    batch_run(world, b, 1, w_dp);
    batch_run(self, d * b, 1, w_one);
    batch_run(self, b, d, w_acc);
    CHECK_CLOSE(w_dp, w_one, NTOTAL, 2e-5, 0, "DP=d batch b vs DP=1 batch d*b");
    CHECK_CLOSE(w_acc, w_one, NTOTAL, 2e-5, 0, "DP=1 d micro-batches of b vs batch d*b");
    free(w_dp), free(w_one), free(w_acc);
    zoe_grid_destroy(self);
    zoe_grid_destroy(world);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_dp");
}
