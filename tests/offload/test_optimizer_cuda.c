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
 *  - The device step over compressed state (kernels/cuda/adam_state.cu) against the CPU
 *    backend's over the same run table: the same bits, NaN payloads aside.
 *  - Compressed state (bf16 master and moments; bf16 master and int8 moments; int8 moments
 *    alone) with and without a device share: the device share held and stepped in the host's
 *    dtypes, so the CUDA run equals the CPU run bit for bit (weights and every state array read
 *    back; clipping off, so the norm's summation order does not enter; at 1 and 2 ranks a sum
 *    over DP does not depend on its order). The states read back, written back in pieces that cut
 *    int8 blocks, twice over, and read again give the same bits.
 *  - The dc schedule without a device share (fp32 state; a bf16 master with int8 moments)
 *    against the CPU backend's dc within 2e-5; with a device share it is refused.
 *  - The memory the CUDA optimizer allocated (its count and the device layer's) equals
 *    zoe_optimizer_footprint_of() for the CUDA backend (test_optimizer_memory checks the
 *    per-parameter figures from the same sizing code). */
#include "kernels/adam.h"
#include "kernels/adam_state.h"
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

/* The run table of the table checks: gaps between runs (inside int8 blocks too), runs of both
 * decays, counted and not, the last ending in a short block of N elements. */
enum { N_TABLE = 20000, N_RUNS = 4 };
static const zoe_adam_run runs[N_RUNS] = {
    {.offset = 0, .len = 4099, .no_decay = 0, .counted = 1},
    {.offset = 4160, .len = 1, .no_decay = 1, .counted = 1},
    {.offset = 4224, .len = 9000, .no_decay = 1, .counted = 0},
    {.offset = 13248, .len = 6752, .no_decay = 0, .counted = 1}};

/* Their AdamW constants: decayed, and exempt (no weight decay). */
static void table_consts(zoe_adam_consts *decayed, zoe_adam_consts *exempt) {
    zoe_adam_hparams h = {.lr = 1e-3f,
                          .beta1 = 0.9f,
                          .beta2 = 0.95f,
                          .eps = 1e-8f,
                          .weight_decay = 0.1f,
                          .decoupled = 1,
                          .grad_scale = 0.25f,
                          .step = 4};
    zoe_adam_consts_init(decayed, &h);
    h.weight_decay = 0;
    zoe_adam_consts_init(exempt, &h);
}

/* Random weights, moments (v > 0) and gradients of N_TABLE elements. */
static void table_inputs(uint64_t seed, float *w, float *m, float *v, float *g) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int i = 0; i < N_TABLE; i++) {
        w[i] = (float)test_rng_normal(&rng), m[i] = (float)(0.1 * test_rng_normal(&rng));
        v[i] = (float)(0.01 * test_rng_uniform(&rng)), g[i] = (float)test_rng_normal(&rng);
    }
}

/* The device step over a run table (one launch) against the CPU backend's table step (the host
 * path run by run): bit-identical; the norm over the counted runs twice, equal bits (a fixed
 * order), and within n eps64 = 2.2e-12 relative of the float64 sum (both add exact squares in
 * double, in different orders). */
static void table_checks(zoe_device *dev, zoe_stream *s, zoe_stream *cpu_stream) {
    enum { N = N_TABLE };
    const int nruns = N_RUNS;
    static float w[N], m[N], v[N], g[N], hw[N], hm[N], hv[N], rw[N], rm[N], rv[N];
    static uint16_t hout[N], rout[N];
    table_inputs(9, w, m, v, g);
    zoe_adam_consts decayed, exempt;
    table_consts(&decayed, &exempt);
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

/* Whether n elements of dtype dt hold the same values: the same bits, or NaN in both (CUDA's
 * arithmetic and bf16 rounding write its canonical NaN where the host keeps a payload). */
static int same_values(const void *a, const void *b, size_t n, zoe_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        if (dt == ZOE_F32) {
            float x = ((const float *)a)[i], y = ((const float *)b)[i];
            if (memcmp(&x, &y, sizeof x) && !(x != x && y != y)) return 0;
        } else if (dt == ZOE_BF16) {
            uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
            if (x != y && !((x & 0x7fff) > 0x7f80 && (y & 0x7fff) > 0x7f80)) return 0;
        } else if (((const uint8_t *)a)[i] != ((const uint8_t *)b)[i]) {
            return 0;
        }
    }
    return 1;
}

/* Host state arrays of one dtype combination for the kernel checks: values x quantised or
 * rounded into each array's dtype (int8 with its scales). */
typedef struct state_arrays {
    void *a[3];
    float *scales[3];
} state_arrays;

static void state_arrays_fill(state_arrays *h, const zoe_adam_state_dtypes *dt, float *const x[3],
                              size_t n) {
    const zoe_dtype dts[] = {dt->master, dt->exp_avg, dt->exp_avg_sq};
    for (int k = 0; k < 3; k++) {
        h->a[k] = malloc(n * zoe_adam_state_esize(dts[k]));
        h->scales[k] = dts[k] == ZOE_I8 ? malloc(zoe_adam_int8_blocks(n) * sizeof(float)) : NULL;
        if (dts[k] == ZOE_I8 && k == 1)
            zoe_adam_int8_quantize_m(x[k], n, h->a[k], h->scales[k]);
        else if (dts[k] == ZOE_I8)
            zoe_adam_int8_quantize_v(x[k], NULL, n, h->a[k], h->scales[k]);
        else
            CHECK_OK(zoe_convert(h->a[k], dts[k], x[k], ZOE_F32, n));
    }
}

static void state_arrays_free(state_arrays *h) {
    for (int k = 0; k < 3; k++) free(h->a[k]), free(h->scales[k]);
}

static zoe_adam_state state_of(const state_arrays *h) {
    return (zoe_adam_state){.master = h->a[0],
                            .exp_avg = h->a[1],
                            .exp_avg_sq = h->a[2],
                            .exp_avg_scale = h->scales[1],
                            .exp_avg_sq_scale = h->scales[2]};
}

/* The compressed device step against the CPU backend's on one run table: the runs leave gaps
 * inside int8 blocks (positions of no run are requantised with their block, as on the host) and
 * end in a short block; one gradient is NaN, so its block's int8 scales take the NaN. */
static void state_table_checks(zoe_device *dev, zoe_stream *s, zoe_stream *cpu_stream) {
    enum { N = N_TABLE };
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    const zoe_adam_state_dtypes combos[] = {{B, B, B}, {B, Q, Q}, {F, Q, B}, {F, B, Q}};
    static float w[N], m[N], v[N], g[N];
    table_inputs(11, w, m, v, g);
    g[5003] = NAN;
    float *const x[3] = {w, m, v};
    zoe_adam_consts decayed, exempt;
    table_consts(&decayed, &exempt);
    const zoe_adam_rounding rounding = {.seed = 0x5eed0123456789abull, .step = 4};
    zoe_adam_table *ht = NULL, *dtab = NULL;
    CHECK_OK(zoe_adam_table_create(cpu_stream, runs, N_RUNS, &ht));
    CHECK_OK(zoe_adam_table_create(s, runs, N_RUNS, &dtab));
    char *d = NULL;
    const size_t slot = N * sizeof(float), blocks = zoe_adam_int8_blocks(N);
    if (!CHECK_OK(zoe_device_alloc(dev, 6 * slot, (void **)&d))) return;
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        const zoe_adam_state_dtypes *dt = &combos[c];
        const zoe_dtype dts[] = {dt->master, dt->exp_avg, dt->exp_avg_sq};
        state_arrays host, back;
        state_arrays_fill(&host, dt, x, N);
        state_arrays_fill(&back, dt, x, N);
        /* device: the three arrays, their scales, the gradient and the output, a slot each */
        state_arrays on_dev = {.a = {d, d + slot, d + 2 * slot}};
        for (int k = 0; k < 3; k++) {
            CHECK_OK(zoe_memcpy_async(on_dev.a[k], host.a[k], N * zoe_adam_state_esize(dts[k]),
                                      ZOE_COPY_HOST_TO_DEVICE, s));
            if (host.scales[k]) {
                on_dev.scales[k] = (float *)(d + 3 * slot) + k * blocks;
                CHECK_OK(zoe_memcpy_async(on_dev.scales[k], host.scales[k], blocks * sizeof(float),
                                          ZOE_COPY_HOST_TO_DEVICE, s));
            }
        }
        float *dg = (float *)(d + 4 * slot);
        uint16_t *dout = (uint16_t *)(d + 5 * slot);
        static uint16_t hout[N], rout[N];
        memset(hout, 0, sizeof hout);
        CHECK_OK(zoe_memcpy_async(dg, g, sizeof g, ZOE_COPY_HOST_TO_DEVICE, s));
        CHECK_OK(zoe_memset_async(dout, 0, sizeof hout, s));
        const zoe_adam_state hst = state_of(&host), dst = state_of(&on_dev);
        CHECK_OK(zoe_adam_table_step_state(cpu_stream, ht, &decayed, &exempt, &rounding, dt, &hst,
                                           N, g, hout, ZOE_BF16));
        CHECK_OK(zoe_adam_table_step_state(s, dtab, &decayed, &exempt, &rounding, dt, &dst, N, dg,
                                           dout, ZOE_BF16));
        for (int k = 0; k < 3; k++) {
            CHECK_OK(zoe_memcpy_async(back.a[k], on_dev.a[k], N * zoe_adam_state_esize(dts[k]),
                                      ZOE_COPY_DEVICE_TO_HOST, s));
            if (back.scales[k])
                CHECK_OK(zoe_memcpy_async(back.scales[k], on_dev.scales[k], blocks * sizeof(float),
                                          ZOE_COPY_DEVICE_TO_HOST, s));
        }
        CHECK_OK(zoe_memcpy_async(rout, dout, sizeof rout, ZOE_COPY_DEVICE_TO_HOST, s));
        CHECK_OK(zoe_stream_synchronize(s));
        const char *names[] = {"master", "exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            CHECK(same_values(back.a[k], host.a[k], N, dts[k]),
                  "state %s/%s/%s: the device's %s differs from the host's",
                  zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
                  zoe_dtype_name(dt->exp_avg_sq), names[k]);
            CHECK(!host.scales[k] || same_values(back.scales[k], host.scales[k], blocks, ZOE_F32),
                  "state %s/%s/%s: the device's %s scales differ from the host's",
                  zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
                  zoe_dtype_name(dt->exp_avg_sq), names[k]);
        }
        CHECK(same_values(rout, hout, N, ZOE_BF16),
              "state %s/%s/%s: the device's bf16 weights differ from the host's",
              zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
              zoe_dtype_name(dt->exp_avg_sq));
        state_arrays_free(&host);
        state_arrays_free(&back);
    }
    zoe_device_free(dev, d);
    zoe_adam_table_destroy(ht);
    zoe_adam_table_destroy(dtab);
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

/* The three state arrays of a run's partition, read back as fp32 (states[k] of numel each). */
typedef struct run_states {
    float *states[3];
    size_t numel;
} run_states;

static void run_states_free(run_states *r) {
    for (int k = 0; k < 3; k++) free(r->states[k]);
}

/* Reads every state array back; then writes them back in pieces of 1000 elements (cutting int8
 * blocks and, with a device share, the boundary between device and host share) twice over, and
 * checks that a second read gives the same bits. */
static void read_states(zoe_optimizer *opt, run_states *out) {
    size_t n = zoe_optimizer_partition_numel(opt);
    out->numel = n;
    float *again = malloc(n * sizeof(float));
    for (int k = 0; k < 3; k++) {
        zoe_optimizer_state which = (zoe_optimizer_state)(ZOE_STATE_MASTER + k);
        out->states[k] = malloc(n * sizeof(float));
        CHECK_OK(zoe_optimizer_read_state(opt, which, 0, n, out->states[k]));
        for (int pass = 0; pass < 2; pass++)
            for (size_t a = 0; a < n; a += 1000)
                CHECK_OK(zoe_optimizer_write_state(opt, which, a, n - a < 1000 ? n - a : 1000,
                                                   out->states[k] + a));
        CHECK_OK(zoe_optimizer_read_state(opt, which, 0, n, again));
        CHECK(memcmp(again, out->states[k], n * sizeof(float)) == 0,
              "state %d written back in pieces reads back different bits", k);
    }
    free(again);
}

/* state: the state dtypes of both shares (NULL: fp32); with a compressed state clipping is off
 * (the CPU and CUDA norms sum in different orders). states: NULL, or where the states go. */
static void run_schedule(zoe_grid *grid, zoe_device *dev, zoe_stream *s, float partial, int dpu,
                         zoe_dpu_schedule schedule, const zoe_adam_state_dtypes *state,
                         double *w_out, run_states *states) {
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.dpu_schedule = schedule;
    cfg.bucket_numel = 20000;
    cfg.partial_ratio = partial;
    cfg.dpu_warmup = dpu;
    cfg.weight_decay = 0.01f;
    cfg.copy_out_numel = 1; /* one tile per block */
    if (state) {
        cfg.main_params_dtype = state->master;
        cfg.exp_avg_dtype = state->exp_avg, cfg.exp_avg_sq_dtype = state->exp_avg_sq;
        cfg.clip_norm = 0;
    }
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
    if (states) read_states(opt, states);
    zoe_optimizer_destroy(opt);
}

static void run(zoe_grid *grid, zoe_device *dev, zoe_stream *s, float partial, int dpu,
                const zoe_adam_state_dtypes *state, double *w_out, run_states *states) {
    run_schedule(grid, dev, s, partial, dpu, ZOE_DPU_PLAIN, state, w_out, states);
}

/* dc on CUDA: the host share's update in flight compensates a widened fp32 copy of the pinned
 * snapshot (fp32 state, and a bf16 master with int8 moments), against the CPU backend (which
 * compensates its fp32 gradient partition in place with fp32 state, the fp32 snapshot with
 * compressed state: with one micro-batch the same inputs); with a device share it is refused
 * (the device Adam does not compensate). */
static void dc_checks(zoe_grid *grid, zoe_device *gpu, zoe_stream *gs, zoe_device *cpu,
                      zoe_stream *cs) {
    static double w_gpu[NTOTAL], w_cpu[NTOTAL];
    const zoe_adam_state_dtypes int8 = {ZOE_BF16, ZOE_I8, ZOE_I8};
    for (int k = 0; k < 2; k++) {
        run_schedule(grid, gpu, gs, 0.0f, 2, ZOE_DPU_DC, k ? &int8 : NULL, w_gpu, NULL);
        run_schedule(grid, cpu, cs, 0.0f, 2, ZOE_DPU_DC, k ? &int8 : NULL, w_cpu, NULL);
        CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0,
                    k ? "CUDA vs CPU optimizer, dc, bf16 master, int8 moments"
                      : "CUDA vs CPU optimizer, dc");
    }
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.partial_ratio = 0.5f, cfg.dpu_warmup = 2, cfg.dpu_schedule = ZOE_DPU_DC;
    zoe_param_tensor t[NT] = {{"a", numel[0], 0, 0}, {"b", numel[1], 1, 0}, {"c", numel[2], 0, 0}};
    zoe_optimizer *opt = NULL;
    zoe_status st = zoe_optimizer_create(grid, gpu, gs, ZOE_F32, t, NT, &cfg, &opt);
    CHECK(st == ZOE_ERR_UNSUPPORTED && !opt &&
              strstr(zoe_last_error(), "the device Adam does not compensate"),
          "dc with a device share on a GPU: status %d, '%s'", (int)st, zoe_last_error());
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
    state_table_checks(gpu, gs, cs);
    static double w_gpu[NTOTAL], w_gpu_again[NTOTAL], w_cpu[NTOTAL];
    run(grid, gpu, gs, 0.5f, 2, NULL, w_gpu, NULL);
    run(grid, cpu, cs, 0.5f, 2, NULL, w_cpu, NULL);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA optimizer vs CPU optimizer, partial 0.5, DPU");
    /* Reproducible: the same run again gives the same bits (the device norm is a fixed-order
     * reduction; NCCL's sums are deterministic for a fixed communicator and size). */
    run(grid, gpu, gs, 0.5f, 2, NULL, w_gpu_again, NULL);
    CHECK(memcmp(w_gpu, w_gpu_again, sizeof w_gpu) == 0,
          "two identical CUDA runs differ: not bit-reproducible");
    run(grid, gpu, gs, 0.0f, 0, NULL, w_gpu, NULL);
    run(grid, cpu, cs, 0.0f, 0, NULL, w_cpu, NULL);
    CHECK_CLOSE(w_gpu, w_cpu, NTOTAL, 2e-5, 0, "CUDA optimizer vs CPU optimizer, copy-out ring");
    /* Compressed state in both shares: the same bits on both backends (the header says when). */
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    const zoe_adam_state_dtypes states[] = {{F, Q, Q}, {B, B, B}, {B, Q, Q}};
    const struct {
        float partial;
        int dpu;
    } setups[] = {{0.5f, 2}, {0.5f, 0}, {0.0f, 0}};
    for (size_t k = 0; k < sizeof states / sizeof states[0]; k++)
        for (size_t u = 0; u < sizeof setups / sizeof setups[0]; u++) {
            run_states on_gpu = {0}, on_cpu = {0};
            run(grid, gpu, gs, setups[u].partial, setups[u].dpu, &states[k], w_gpu, &on_gpu);
            run(grid, cpu, cs, setups[u].partial, setups[u].dpu, &states[k], w_cpu, &on_cpu);
            int same = memcmp(w_gpu, w_cpu, sizeof w_gpu) == 0 && on_gpu.numel == on_cpu.numel;
            for (int a = 0; same && a < 3; a++)
                same = memcmp(on_gpu.states[a], on_cpu.states[a], on_gpu.numel * 4) == 0;
            CHECK(same, "state %s/%s/%s, partial %g, DPU after %d: CUDA and CPU runs differ",
                  zoe_dtype_name(states[k].master), zoe_dtype_name(states[k].exp_avg),
                  zoe_dtype_name(states[k].exp_avg_sq), (double)setups[u].partial, setups[u].dpu);
            run_states_free(&on_gpu);
            run_states_free(&on_cpu);
        }
    dc_checks(grid, gpu, gs, cpu, cs);
    zoe_stream_destroy(gs), zoe_stream_destroy(cs);
    zoe_device_destroy(gpu), zoe_device_destroy(cpu);
    zoe_grid_destroy(grid);
    return test_finish("test_optimizer_cuda");
}
