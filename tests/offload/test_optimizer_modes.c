/* Configurations that must not change the result, at 1, 2 and 4 ranks:
 *  - partial offload r = 0.5 and 1 against r = 0 (all state on the host): bit-identical device
 *    weights and master weights (on the CPU backend the device Adam is the host path; with
 *    clipping off nothing depends on the norm's summation order), fp32 and bf16;
 *  - the full device gradient buffer against the bucket ring, and bucket sizes 1, 7, 100
 *    (not dividing the 407-element buffer) and rings of 1 and 3 against one bucket: within
 *    2e-5 (fp32 sums in another order; see test_optimizer_dp for the bound);
 *  - TP-replicated ranges counted once in the norm, with tp = 2 at 2 and 4 ranks (tp = 1 at 1
 *    rank): the norm against a float64 norm that counts every TP shard of the sharded tensors
 *    and the replicated tensors once (1e-6 relative; the double-counted norm differs by more),
 *    and replicated tensors stay bit-identical across the TP group;
 *  - the gradient ring by bytes (bucket_ring_window) against the ring of fixed slots with the
 *    same buckets (sizes 1, 7, 100), with clipping off and on: bit-identical weights and norms
 *    (the buckets drain in the order they completed in both, so the norm adds up alike);
 *  - a ring too small for the order the model completes buckets in fails with a message, in
 *    slots and in bytes. */
#include "offload_test.h"

enum { NT = 4, NTOTAL = 407, STEPS = 8 };
static const size_t numel[NT] = {150, 31, 200, 26};
static zoe_device *dev;
static zoe_stream *stream;

/* STEPS steps of 2 micro-batches; the device weights, this rank's master weights (partition
 * order, *part_numel of them) and the norms. */
static void run(zoe_grid *grid, zoe_dtype dt, const zoe_optimizer_config *cfg, const int *repl,
                double *w_out, float *master_out, size_t *part_numel, double *norms) {
    zoe_param_tensor t[NT] = {{"w1", numel[0], repl[0], 0},
                              {"ln", numel[1], repl[1], 0},
                              {"w2", numel[2], repl[2], 0},
                              {"b", numel[3], repl[3], 0}};
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, t, NT, cfg, &opt))) return;
    int tp = zoe_grid_tp_rank(grid), dp = zoe_grid_dp_rank(grid);
    double w[NTOTAL], g[NTOTAL];
    test_rng rng;
    for (int t0 = 0, k = 0; t0 < NT; k += (int)numel[t0], t0++) {
        test_rng_seed(&rng, 40 + 10 * (uint64_t)t0 + (repl[t0] ? 0 : (uint64_t)tp));
        for (size_t i = 0; i < numel[t0]; i++)
            w[k + i] = round_to(dt, 2 * test_rng_uniform(&rng) - 1);
    }
    write_params(opt, dt, numel, NT, w);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    for (int s = 0; s < STEPS; s++) {
        for (int j = 0; j < 2; j++) {
            /* Sharded tensors differ across TP ranks; replicated ones are the same on all. */
            for (int t0 = 0, k = 0; t0 < NT; k += (int)numel[t0], t0++) {
                test_rng_seed(&rng, 1000 * (uint64_t)s + 100 * (uint64_t)j + 10 * (uint64_t)dp +
                                        (repl[t0] ? 7 : (uint64_t)tp) + 100000 * (uint64_t)t0);
                for (size_t i = 0; i < numel[t0]; i++)
                    g[k + i] = round_to(dt, test_rng_normal(&rng));
            }
            feed_micro_batch(opt, dt, numel, NT, g);
        }
        CHECK_OK(zoe_optimizer_step(opt, 1e-2f));
        zoe_optimizer_stats st;
        CHECK_OK(zoe_optimizer_stats_get(opt, &st));
        if (norms) norms[s] = st.grad_norm;
    }
    read_params(opt, dt, numel, NT, w_out);
    if (master_out) {
        *part_numel = zoe_optimizer_partition_numel(opt);
        CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 0, *part_numel, master_out));
    }
    zoe_optimizer_destroy(opt);
}

static void base_config(zoe_optimizer_config *cfg) {
    zoe_optimizer_config_default(cfg);
    cfg->clip_norm = 0;
    cfg->weight_decay = 0.1f;
    cfg->adamw = 0;
    cfg->eps = 1e-3f;
    cfg->bucket_numel = 180;
}

static void partial_cases(zoe_grid *grid, zoe_dtype dt) {
    static const int none[NT] = {0, 0, 0, 0};
    zoe_optimizer_config cfg;
    base_config(&cfg);
    double w0[NTOTAL], w[NTOTAL];
    static float m0[4096], m[4096];
    size_t pn0 = 0, pn = 0;
    run(grid, dt, &cfg, none, w0, m0, &pn0, NULL);
    const float ratios[] = {0.5f, 1.0f};
    for (int r = 0; r < 2; r++) {
        cfg.partial_ratio = ratios[r];
        memset(m, 0xff, sizeof m);
        run(grid, dt, &cfg, none, w, m, &pn, NULL);
        CHECK(!memcmp(w, w0, sizeof w), "%s partial %.1f: device weights differ from r = 0",
              zoe_dtype_name(dt), ratios[r]);
        CHECK(pn == pn0 && !memcmp(m, m0, pn * sizeof(float)),
              "%s partial %.1f: master weights differ", zoe_dtype_name(dt), ratios[r]);
    }
}

static void layout_cases(zoe_grid *grid) {
    static const int none[NT] = {0, 0, 0, 0};
    zoe_optimizer_config cfg;
    base_config(&cfg);
    cfg.bucket_numel = (size_t)1 << 30;
    double w0[NTOTAL], w[NTOTAL];
    run(grid, ZOE_F32, &cfg, none, w0, NULL, NULL, NULL);
    const size_t sizes[] = {1, 7, 100};
    for (int i = 0; i < 3; i++)
        for (int ring = 1; ring <= 3; ring += 2) {
            base_config(&cfg);
            cfg.bucket_numel = sizes[i], cfg.bucket_ring = ring;
            run(grid, ZOE_F32, &cfg, none, w, NULL, NULL, NULL);
            char what[96];
            snprintf(what, sizeof what, "bucket_numel %zu ring %d vs one bucket", sizes[i], ring);
            CHECK_CLOSE(w, w0, NTOTAL, 2e-5, 0, what);
        }
    base_config(&cfg);
    cfg.grad_mode = ZOE_GRAD_FULL_BUFFER;
    run(grid, ZOE_F32, &cfg, none, w, NULL, NULL, NULL);
    CHECK_CLOSE(w, w0, NTOTAL, 2e-5, 0, "full gradient buffer vs bucket ring");
}

static void ring_by_bytes_cases(zoe_grid *grid) {
    static const int none[NT] = {0, 0, 0, 0};
    const size_t sizes[] = {1, 7, 100};
    for (int i = 0; i < 3; i++)
        for (int clip = 0; clip < 2; clip++) {
            zoe_optimizer_config cfg;
            base_config(&cfg);
            cfg.bucket_numel = sizes[i], cfg.bucket_ring = 2;
            cfg.clip_norm = clip ? 0.5f : 0.0f; /* the norms here are about 14: every step clips */
            double w0[NTOTAL], w[NTOTAL], n0[STEPS], n[STEPS];
            run(grid, ZOE_F32, &cfg, none, w0, NULL, NULL, n0);
            cfg.bucket_ring_window = 200; /* feed_micro_batch holds one tensor open at a time */
            run(grid, ZOE_F32, &cfg, none, w, NULL, NULL, n);
            CHECK(!memcmp(w, w0, sizeof w) && !memcmp(n, n0, sizeof n),
                  "bucket_numel %zu, clip %d: the ring by bytes differs from the slots (norm %.17g "
                  "vs %.17g)",
                  sizes[i], clip, n[STEPS - 1], n0[STEPS - 1]);
        }
}

/* The expected norm of step s: TP ranks' sharded gradients all count, replicated once. */
static double expected_norm(int s, int tp_size, int dp_size, const int *repl, int count_twice) {
    double sum = 0;
    for (int t0 = 0; t0 < NT; t0++)
        for (int tp = 0; tp < (repl[t0] ? (count_twice ? tp_size : 1) : tp_size); tp++) {
            double *mean = calloc(numel[t0], sizeof(double));
            for (int j = 0; j < 2; j++)
                for (int dp = 0; dp < dp_size; dp++) {
                    test_rng rng;
                    test_rng_seed(&rng, 1000 * (uint64_t)s + 100 * (uint64_t)j + 10 * (uint64_t)dp +
                                            (repl[t0] ? 7 : (uint64_t)tp) + 100000 * (uint64_t)t0);
                    for (size_t i = 0; i < numel[t0]; i++)
                        mean[i] += (float)test_rng_normal(&rng) / (2.0 * dp_size);
                }
            for (size_t i = 0; i < numel[t0]; i++) sum += mean[i] * mean[i];
            free(mean);
        }
    return sqrt(sum);
}

static void tp_case(void) {
    int world = test_world_size(), tp_size = world % 2 == 0 ? 2 : 1;
    zoe_grid *grid = NULL;
    if (!CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, tp_size, &grid))) return;
    static const int repl[NT] = {0, 1, 0, 1};
    zoe_optimizer_config cfg;
    base_config(&cfg);
    cfg.clip_norm = 5.0f; /* active on some steps: the norm feeds the update */
    double w[NTOTAL], norms[STEPS];
    run(grid, ZOE_F32, &cfg, repl, w, NULL, NULL, norms);
    int dp_size = zoe_grid_dp_size(grid);
    for (int s = 0; s < STEPS; s++) {
        double want = expected_norm(s, tp_size, dp_size, repl, 0);
        double twice = expected_norm(s, tp_size, dp_size, repl, 1);
        CHECK(fabs(norms[s] - want) <= 1e-6 * want, "tp=%d step %d: norm %.9g, want %.9g", tp_size,
              s, norms[s], want);
        if (tp_size > 1)
            CHECK(fabs(twice - want) > 1e-3 * want, "double counting indistinguishable");
    }
    /* Replicated tensors: the same on every TP rank (same gradients, same clip coefficient). */
    double rep[NTOTAL], maxd[NTOTAL];
    int k = 0;
    for (int t0 = 0, off = 0; t0 < NT; off += (int)numel[t0], t0++)
        if (repl[t0])
            for (size_t i = 0; i < numel[t0]; i++) rep[k++] = w[off + i];
    for (int i = 0; i < k; i++) maxd[i] = rep[i];
    MPI_Allreduce(MPI_IN_PLACE, maxd, k, MPI_DOUBLE, MPI_MAX, zoe_grid_tp_comm(grid));
    CHECK(!memcmp(maxd, rep, (size_t)k * sizeof(double)),
          "replicated tensors differ across the TP group");
    zoe_grid_destroy(grid);
}

static void ring_too_small(zoe_grid *grid) {
    zoe_optimizer_config cfg;
    base_config(&cfg);
    cfg.bucket_numel = 160, cfg.bucket_ring = 1;
    zoe_param_tensor t[NT] = {
        {"w1", 150, 0, 0}, {"ln", 31, 0, 0}, {"w2", 200, 0, 0}, {"b", 26, 0, 0}};
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F32, t, NT, &cfg, &opt))) return;
    void *a = NULL, *b = (void *)1;
    CHECK_OK(zoe_optimizer_begin_micro_batch(opt));
    CHECK_OK(zoe_optimizer_grad_buffer(opt, 0, &a));
    zoe_status st = zoe_optimizer_grad_buffer(opt, 2, &b);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && b == NULL, "second open bucket in a ring of 1: %d",
          (int)st);
    CHECK(strstr(zoe_last_error(), "ring of 1 full") != NULL, "message: %s", zoe_last_error());
    zoe_optimizer_destroy(opt);
}

/* Six tensors of 100 in buckets of one, a window of one tensor: the ring holds the run of 3 buckets
 * one tensor can touch and one more, so from the top down buckets 5, 4, 3, 2 have places of
 * their own and bucket 1 wraps onto bucket 5's: opening 1 while 5 is open fails. */
static void ring_by_bytes_too_small(zoe_grid *grid) {
    zoe_optimizer_config cfg;
    base_config(&cfg);
    cfg.bucket_numel = 1, cfg.bucket_ring_window = 100;
    zoe_param_tensor t[6];
    for (int i = 0; i < 6; i++) t[i] = (zoe_param_tensor){"t", 100, 0, 0};
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F32, t, 6, &cfg, &opt))) return;
    void *a = NULL, *b = (void *)1;
    CHECK_OK(zoe_optimizer_begin_micro_batch(opt));
    for (int i = 5; i >= 2; i--) CHECK_OK(zoe_optimizer_grad_buffer(opt, i, &a));
    zoe_status st = zoe_optimizer_grad_buffer(opt, 1, &b);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && b == NULL, "bucket 1 over open bucket 5: %d", (int)st);
    CHECK(strstr(zoe_last_error(), "overlaps a bucket still open") != NULL, "message: %s",
          zoe_last_error());
    /* completed, bucket 5 drains and gives its place to bucket 1 */
    CHECK_OK(zoe_optimizer_grad_ready(opt, 5));
    CHECK_OK(zoe_optimizer_grad_buffer(opt, 1, &b));
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *grid = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    partial_cases(grid, ZOE_F32);
    partial_cases(grid, ZOE_BF16);
    layout_cases(grid);
    ring_too_small(grid);
    ring_by_bytes_cases(grid);
    ring_by_bytes_too_small(grid);
    tp_case();
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_modes");
}
