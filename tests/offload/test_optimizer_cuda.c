/* GPU (skipped, exit 77, without one): the CUDA half of the optimizer.
 *  - The device Adam (kernels/cuda/adam.cu) against the host path: bit-identical master
 *    weights, moments and bf16/fp16 weights (the same operations with _rn intrinsics and the
 *    same four fused multiply-adds), for AdamW and Adam+L2; the device gradient accumulation
 *    bit-identical to the host's.
 *  - The optimizer on CUDA against the same run on the CPU backend: 10 steps of
 *    g_r = a_r * w - c_r, fp32 weights within 2e-5 (NCCL and MPI sum the ranks in different
 *    orders; the rest is fp32 arithmetic, as in test_optimizer_dp). Two setups: device Adam for
 *    half of the partition with DPU after 2 steps (NCCL, copy stream, the pinned gradient
 *    snapshot, the device partition buffer); and everything on the host without DPU, where
 *    the new weights stream to the device through the pinned copy-out ring in blocks of one
 *    tile (several blocks, both slots) into the parameter buffer, all-gathered in place.
 *    Both again with int8 moments on the host (the same host step on both backends).
 *  - The memory the CUDA optimizer allocated (its count and the device layer's) equals
 *    zoe_optimizer_footprint_of() for the CUDA backend (test_optimizer_memory checks the
 *    per-parameter figures from the same sizing code). */
#include "kernels/adam.h"
#include "offload_test.h"

enum { NT = 3, NTOTAL = 50000, STEPS = 10 };
static const size_t numel[NT] = {15000, 10000, 25000};

static void kernel_checks(zoe_device *dev, zoe_stream *s) {
    enum { N = 4099 };
    test_rng rng;
    test_rng_seed(&rng, 5);
    float w[N], m[N], v[N], g[N], hw[N], hm[N], hv[N];
    for (int i = 0; i < N; i++) {
        w[i] = (float)test_rng_normal(&rng), m[i] = (float)(0.1 * test_rng_normal(&rng));
        v[i] = (float)(0.01 * test_rng_uniform(&rng)), g[i] = (float)test_rng_normal(&rng);
    }
    float *d = NULL;
    uint16_t dout[N], hout[N];
    if (!CHECK_OK(zoe_device_alloc(dev, 5 * N * sizeof(float), (void **)&d))) return;
    float *dw = d, *dm = d + N, *dv = d + 2 * N, *dg = d + 3 * N;
    void *dout_dev = d + 4 * N;
    const zoe_dtype outs[] = {ZOE_BF16, ZOE_F16};
    for (int dec = 0; dec < 2; dec++)
        for (int o = 0; o < 2; o++) {
            zoe_adam_hparams h = {.lr = 1e-3f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f,
                                  .decoupled = dec,
                                  .grad_scale = 0.5f,
                                  .step = 3};
            zoe_adam_consts c;
            zoe_adam_consts_init(&c, &h);
            memcpy(hw, w, sizeof w), memcpy(hm, m, sizeof m), memcpy(hv, v, sizeof v);
            CHECK_OK(zoe_adam_host(&c, hw, hm, hv, g, ZOE_F32, hout, outs[o], N));
            CHECK_OK(zoe_memcpy_async(dw, w, sizeof w, ZOE_COPY_HOST_TO_DEVICE, s));
            CHECK_OK(zoe_memcpy_async(dm, m, sizeof m, ZOE_COPY_HOST_TO_DEVICE, s));
            CHECK_OK(zoe_memcpy_async(dv, v, sizeof v, ZOE_COPY_HOST_TO_DEVICE, s));
            CHECK_OK(zoe_memcpy_async(dg, g, sizeof g, ZOE_COPY_HOST_TO_DEVICE, s));
            CHECK_OK(zoe_adam_stream(s, &c, dw, dm, dv, dg, dout_dev, outs[o], N));
            float rw[N], rm[N], rv[N];
            CHECK_OK(zoe_memcpy_async(rw, dw, sizeof rw, ZOE_COPY_DEVICE_TO_HOST, s));
            CHECK_OK(zoe_memcpy_async(rm, dm, sizeof rm, ZOE_COPY_DEVICE_TO_HOST, s));
            CHECK_OK(zoe_memcpy_async(rv, dv, sizeof rv, ZOE_COPY_DEVICE_TO_HOST, s));
            CHECK_OK(zoe_memcpy_async(dout, dout_dev, sizeof dout, ZOE_COPY_DEVICE_TO_HOST, s));
            CHECK_OK(zoe_stream_synchronize(s));
            CHECK(!memcmp(rw, hw, sizeof rw) && !memcmp(rm, hm, sizeof rm) &&
                      !memcmp(rv, hv, sizeof rv) && !memcmp(dout, hout, sizeof dout),
                  "device Adam (decoupled=%d, out %s) differs from the host path", dec,
                  zoe_dtype_name(outs[o]));
        }
    /* Accumulation: dst = dst + 0.25 * bf16(src). */
    uint16_t src[N];
    for (int i = 0; i < N; i++) src[i] = zoe_f32_to_bf16(g[i]);
    memcpy(hw, w, sizeof w);
    CHECK_OK(zoe_grad_accumulate_host(hw, src, ZOE_BF16, 0.25f, 0, N, NULL));
    CHECK_OK(zoe_memcpy_async(dw, w, sizeof w, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_memcpy_async(dout_dev, src, sizeof src, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_grad_accumulate_stream(s, dw, dout_dev, ZOE_BF16, 0.25f, 0, N));
    CHECK_OK(zoe_memcpy_async(w, dw, sizeof w, ZOE_COPY_DEVICE_TO_HOST, s));
    CHECK_OK(zoe_stream_synchronize(s));
    CHECK(!memcmp(w, hw, sizeof w), "device accumulation differs from the host's");
    zoe_device_free(dev, d);
}

/* The device step over a run table (one launch) against the CPU backend's table step (the host
 * path run by run): bit-identical; the norm over the counted runs twice, equal bits (a fixed
 * order), and within n eps64 = 2.2e-12 relative of the float64 sum (both add exact squares in
 * double, in different orders). */
static void table_checks(zoe_device *dev, zoe_stream *s, zoe_stream *cpu_stream) {
    enum { N = 20000 };
    const zoe_adam_run runs[] = {{.offset = 0, .len = 4099, .no_decay = 0, .counted = 1},
                                 {.offset = 4160, .len = 1, .no_decay = 1, .counted = 1},
                                 {.offset = 4224, .len = 9000, .no_decay = 1, .counted = 0},
                                 {.offset = 13248, .len = 6752, .no_decay = 0, .counted = 1}};
    const int nruns = 4;
    static float w[N], m[N], v[N], g[N], hw[N], hm[N], hv[N], rw[N], rm[N], rv[N];
    static uint16_t hout[N], rout[N];
    test_rng rng;
    test_rng_seed(&rng, 9);
    for (int i = 0; i < N; i++) {
        w[i] = (float)test_rng_normal(&rng), m[i] = (float)(0.1 * test_rng_normal(&rng));
        v[i] = (float)(0.01 * test_rng_uniform(&rng)), g[i] = (float)test_rng_normal(&rng);
    }
    zoe_adam_hparams h = {.lr = 1e-3f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .decoupled = 1,
                          .grad_scale = 0.25f,
                          .step = 4};
    zoe_adam_consts decayed, exempt;
    zoe_adam_consts_init(&decayed, &h);
    h.weight_decay = 0;
    zoe_adam_consts_init(&exempt, &h);
    zoe_adam_table *ht = NULL, *dt = NULL;
    CHECK_OK(zoe_adam_table_create(cpu_stream, runs, nruns, &ht));
    CHECK_OK(zoe_adam_table_create(s, runs, nruns, &dt));
    memcpy(hw, w, sizeof w), memcpy(hm, m, sizeof m), memcpy(hv, v, sizeof v);
    memset(hout, 0, sizeof hout), memset(rout, 0, sizeof rout);
    CHECK_OK(zoe_adam_table_step(cpu_stream, ht, &decayed, &exempt, hw, hm, hv, g, hout, ZOE_BF16));
    float *d = NULL;
    if (!CHECK_OK(zoe_device_alloc(dev, 5 * sizeof w, (void **)&d))) return;
    float *dw = d, *dm = d + N, *dv = d + 2 * N, *dg = d + 3 * N;
    void *dout = d + 4 * N;
    CHECK_OK(zoe_memcpy_async(dw, w, sizeof w, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_memcpy_async(dm, m, sizeof m, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_memcpy_async(dv, v, sizeof v, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_memcpy_async(dg, g, sizeof g, ZOE_COPY_HOST_TO_DEVICE, s));
    CHECK_OK(zoe_memset_async(dout, 0, sizeof rout, s));
    CHECK_OK(zoe_adam_table_step(s, dt, &decayed, &exempt, dw, dm, dv, dg, dout, ZOE_BF16));
    CHECK_OK(zoe_memcpy_async(rw, dw, sizeof rw, ZOE_COPY_DEVICE_TO_HOST, s));
    CHECK_OK(zoe_memcpy_async(rm, dm, sizeof rm, ZOE_COPY_DEVICE_TO_HOST, s));
    CHECK_OK(zoe_memcpy_async(rv, dv, sizeof rv, ZOE_COPY_DEVICE_TO_HOST, s));
    CHECK_OK(zoe_memcpy_async(rout, dout, sizeof rout, ZOE_COPY_DEVICE_TO_HOST, s));
    CHECK_OK(zoe_stream_synchronize(s));
    CHECK(!memcmp(rw, hw, sizeof rw) && !memcmp(rm, hm, sizeof rm) && !memcmp(rv, hv, sizeof rv) &&
              !memcmp(rout, hout, sizeof rout),
          "the device table step differs from the host's (gaps between runs must stay untouched)");
    double want = 0, first = 0, again = 0;
    for (int r = 0; r < nruns; r++)
        for (size_t i = runs[r].offset; runs[r].counted && i < runs[r].offset + runs[r].len; i++)
            want += (double)g[i] * g[i];
    CHECK_OK(zoe_adam_table_sumsq(s, dt, dg, &first));
    CHECK_OK(zoe_adam_table_sumsq(s, dt, dg, &again));
    CHECK(memcmp(&first, &again, sizeof first) == 0, "the device norm is not reproducible");
    CHECK(fabs(first - want) <= 2.3e-12 * want, "device sum of squares %.17g, float64 %.17g", first,
          want);
    zoe_device_free(dev, d);
    zoe_adam_table_destroy(ht);
    zoe_adam_table_destroy(dt);
}

/* Parameters in and out through host staging (device memory is not host-addressable). */
static void copy_params(zoe_optimizer *opt, zoe_stream *s, double *w, int to_device) {
    size_t off = 0;
    float buf[NTOTAL];
    for (int t = 0, k = 0; t < NT; k += (int)numel[t], t++) {
        CHECK_OK(zoe_optimizer_tensor_offset(opt, t, &off));
        float *p = (float *)zoe_optimizer_params(opt) + off;
        if (to_device) {
            for (size_t i = 0; i < numel[t]; i++) buf[k + i] = (float)w[k + i];
            CHECK_OK(zoe_memcpy_async(p, buf + k, numel[t] * 4, ZOE_COPY_HOST_TO_DEVICE, s));
        } else {
            CHECK_OK(zoe_memcpy_async(buf + k, p, numel[t] * 4, ZOE_COPY_DEVICE_TO_HOST, s));
        }
    }
    CHECK_OK(zoe_stream_synchronize(s));
    if (!to_device)
        for (int i = 0; i < NTOTAL; i++) w[i] = buf[i];
}

static void check_memory(zoe_grid *grid, zoe_device *dev, const zoe_memory_stats *before,
                         const zoe_optimizer *opt, const zoe_optimizer_config *cfg) {
    zoe_memory_stats after;
    zoe_optimizer_footprint real, plan;
    CHECK_OK(zoe_device_memory_stats(dev, &after));
    CHECK_OK(zoe_optimizer_memory(opt, &real));
    CHECK_OK(zoe_optimizer_footprint_of(
        &(zoe_optimizer_footprint_args){.backend = zoe_device_backend(dev),
                                        .compute_dtype = ZOE_F32,
                                        .numel = numel,
                                        .num_tensors = NT,
                                        .dp_size = zoe_grid_dp_size(grid),
                                        .config = cfg},
        &plan));
    CHECK(real.host_bytes == plan.host_bytes && real.pinned_bytes == plan.pinned_bytes &&
              real.device_bytes == plan.device_bytes &&
              after.device_bytes - before->device_bytes == real.device_bytes &&
              after.pinned_bytes - before->pinned_bytes == real.pinned_bytes,
          "%s: allocated host %zu, pinned %zu (device layer %zu), device %zu (device layer %zu); "
          "footprint %zu, %zu, %zu",
          zoe_backend_name(zoe_device_backend(dev)), real.host_bytes, real.pinned_bytes,
          after.pinned_bytes - before->pinned_bytes, real.device_bytes,
          after.device_bytes - before->device_bytes, plan.host_bytes, plan.pinned_bytes,
          plan.device_bytes);
}

/* int8: the host share's moments in blockwise int8 (the device share keeps fp32 state). */
static void run(zoe_grid *grid, zoe_device *dev, zoe_stream *s, float partial, int dpu, int int8,
                double *w_out) {
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.bucket_numel = 20000;
    cfg.partial_ratio = partial;
    cfg.dpu_warmup = dpu;
    cfg.weight_decay = 0.01f;
    cfg.copy_out_numel = 1; /* one tile per block */
    if (int8) cfg.exp_avg_dtype = cfg.exp_avg_sq_dtype = ZOE_I8;
    zoe_param_tensor t[NT] = {{"a", numel[0], 0, 0}, {"b", numel[1], 1, 0}, {"c", numel[2], 0, 0}};
    zoe_optimizer *opt = NULL;
    zoe_memory_stats before;
    CHECK_OK(zoe_device_memory_stats(dev, &before));
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, s, ZOE_F32, t, NT, &cfg, &opt))) return;
    check_memory(grid, dev, &before, opt, &cfg);
    static double w[NTOTAL];
    static float g[NTOTAL];
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int i = 0; i < NTOTAL; i++) w[i] = 2 * test_rng_uniform(&rng) - 1;
    copy_params(opt, s, w, 1);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    int r = zoe_grid_dp_rank(grid);
    for (int step = 0; step < STEPS; step++) {
        copy_params(opt, s, w, 0);
        test_rng_seed(&rng, 100 + (uint64_t)r);
        for (int i = 0; i < NTOTAL; i++) {
            double a = 0.5 + test_rng_uniform(&rng), c = 2 * test_rng_uniform(&rng) - 1;
            g[i] = (float)(a * w[i] - c);
        }
        CHECK_OK(zoe_optimizer_begin_micro_batch(opt));
        for (int t0 = NT - 1, k = NTOTAL; t0 >= 0; t0--) {
            k -= (int)numel[t0];
            void *buf = NULL;
            CHECK_OK(zoe_optimizer_grad_buffer(opt, t0, &buf));
            CHECK_OK(zoe_memcpy_async(buf, g + k, numel[t0] * 4, ZOE_COPY_HOST_TO_DEVICE, s));
            CHECK_OK(zoe_optimizer_grad_ready(opt, t0));
        }
        CHECK_OK(zoe_optimizer_end_micro_batch(opt));
        CHECK_OK(zoe_optimizer_step(opt, 1e-2f));
    }
    CHECK_OK(zoe_optimizer_flush(opt));
    copy_params(opt, s, w_out, 0);
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (test_skip_without_gpus("test_optimizer_cuda")) return 77;
    zoe_grid *grid = NULL;
    zoe_device *gpu = NULL, *cpu = NULL;
    zoe_stream *gs = NULL, *cs = NULL;
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CUDA, test_gpu_ordinal(), &gpu));
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &cpu));
    CHECK_OK(zoe_stream_create(gpu, &gs));
    CHECK_OK(zoe_stream_create(cpu, &cs));
    kernel_checks(gpu, gs);
    table_checks(gpu, gs, cs);
    static double w_gpu[NTOTAL], w_gpu_again[NTOTAL], w_cpu[NTOTAL];
    run(grid, gpu, gs, 0.5f, 2, 0, w_gpu);
    run(grid, cpu, cs, 0.5f, 2, 0, w_cpu);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA optimizer vs CPU optimizer, partial 0.5, DPU");
    /* Reproducible: the same run again gives the same bits (the device norm is a fixed-order
     * reduction; NCCL's sums are deterministic for a fixed communicator and size). */
    run(grid, gpu, gs, 0.5f, 2, 0, w_gpu_again);
    CHECK(memcmp(w_gpu, w_gpu_again, sizeof w_gpu) == 0,
          "two identical CUDA runs differ: not bit-reproducible");
    run(grid, gpu, gs, 0.0f, 0, 0, w_gpu);
    run(grid, cpu, cs, 0.0f, 0, 0, w_cpu);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA optimizer vs CPU optimizer, copy-out ring");
    /* int8 moments on the host: the same host step on both backends (the host share starts at a
     * block boundary on CUDA too), the device share fp32 */
    run(grid, gpu, gs, 0.5f, 2, 1, w_gpu);
    run(grid, cpu, cs, 0.5f, 2, 1, w_cpu);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA vs CPU optimizer, int8 moments, partial 0.5");
    run(grid, gpu, gs, 0.0f, 0, 1, w_gpu);
    run(grid, cpu, cs, 0.0f, 0, 1, w_cpu);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA vs CPU optimizer, int8 moments, copy-out");
    zoe_stream_destroy(gs), zoe_stream_destroy(cs);
    zoe_device_destroy(gpu), zoe_device_destroy(cpu);
    zoe_grid_destroy(grid);
    return test_finish("test_optimizer_cuda");
}
