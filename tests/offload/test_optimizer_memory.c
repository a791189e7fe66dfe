/* The memory layout (include/zoe/optimizer.h, docs/offload.md): bytes per parameter measured
 * from the allocations, on the CPU backend at 1, 2 and 4 DP ranks, fp32 and bf16 weights, DPU
 * off and on, against the layout's figures and against zoe_optimizer_footprint_of().
 *
 * Measured: the device layer's accounting (zoe_device_memory_stats: the parameter buffer and
 * bucket ring, and any page-locked memory) and the process heap (glibc mallinfo2, or the
 * replacing allocator's under ASan, TSan or valgrind: every byte malloc'd between before
 * zoe_optimizer_create and after it). The heap growth must cover the optimizer's own count of its
 * host arrays and exceed it by no more than its tables and the MPI communicator it duplicates
 * (HEAP_SLACK, stated below); device and pinned bytes must equal its count exactly; and the count
 * must equal the footprint computed without allocating.
 *
 * Bytes per parameter: the host state per element of the rank's partition (fixed-size rings
 * excluded) plus the weight array per element of the parameter buffer; at one DP rank this is
 * every byte the optimizer holds, rings excluded, per parameter. The figures the layout
 * reaches on the CPU backend (the targets: 16 fp32, 18 bf16, DPU at most 2 more):
 *     fp32 16 = m, v, gradient 12 + the weights, which are the fp32 master;
 *     fp32 with DPU 20 = 16 + a second fp32 gradient partition: while the update of step i
 *         runs, the forward of i+1 reads w_{i-1} (fp32) from the weights, iteration i+1
 *         accumulates in fp32, and g_i / w_i share the other partition in place; 18 would need
 *         g_i or w_i in 2 bytes, i.e. a forward or a master of other precision (docs/offload.md);
 *     bf16 18 = master, m, v, gradient 16 + bf16 weights 2;
 *     bf16 with DPU 20 = 18 + a bf16 snapshot of the gradient, overwritten by the new weights.
 * The GPU box's host figures (16, and 18 with DPU) come from the same sizing code for the CUDA
 * backend and are checked from the footprint here (CUDA cannot run on this machine) and
 * against the real allocations in test_optimizer_cuda. */
#include <malloc.h>
#include "offload_test.h"
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HEAP_FROM_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HEAP_FROM_SANITIZER 1
#endif
#endif
#ifdef HEAP_FROM_SANITIZER
/* The ASan runtime's (sanitizer/allocator_interface.h, which gcc does not install). */
size_t __sanitizer_get_current_allocated_bytes(void);
#elif defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HEAP_FROM_MEMCHECK 1
#endif
#endif

enum { NT = 4 };
/* Bytes per element of an int8 moment: its code and its share of its block's fp32 scale. */
static const double I8 = 1.0 + 4.0 / 256.0;
static const size_t numel[NT] = {300000, 123457, 500001, 77};
/* Layout tables, tensor names, the chunk table, the DP communicator's duplicate and what
 * OpenMP allocates for its team: bounded by 256 KiB, against 5 MB and more of state. */
static const size_t HEAP_SLACK = 256 * 1024;
/* With state on drives, besides: the ring's alignment (zoe_drive_io_buffer_alloc aligns a buffer
 * of 4 MiB or more to 2 MiB: up to 2 MiB of the heap unused before it) and the drive engine's
 * tables, queues and threads' arenas (measured: 3.0 MiB in all for a 20 MiB ring). */
static const size_t DRIVE_HEAP_SLACK = 4 << 20;

/* Bytes the process has malloc'd and not freed: glibc's count, or the sanitizer's (ASan, TSan)
 * or valgrind's, whose allocators replace glibc's (mallinfo2 then reports nothing). */
static size_t heap_in_use(void) {
#ifdef HEAP_FROM_SANITIZER
    return __sanitizer_get_current_allocated_bytes();
#else
#ifdef HEAP_FROM_MEMCHECK
    if (RUNNING_ON_VALGRIND) { /* valgrind's malloc, too: every live block, as its leak check */
        unsigned long leaked = 0, dubious = 0, reachable = 0, suppressed = 0;
        VALGRIND_DO_QUICK_LEAK_CHECK;
        VALGRIND_COUNT_LEAKS(leaked, dubious, reachable, suppressed);
        return leaked + dubious + reachable + suppressed;
    }
#endif
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

static int same_footprint(const zoe_optimizer_footprint *a, const zoe_optimizer_footprint *b) {
    return a->host_bytes == b->host_bytes && a->pinned_bytes == b->pinned_bytes &&
           a->device_bytes == b->device_bytes && a->pinned_ring_bytes == b->pinned_ring_bytes &&
           a->device_ring_bytes == b->device_ring_bytes && a->params_numel == b->params_numel &&
           a->partition_numel == b->partition_numel &&
           a->step_bytes_per_element == b->step_bytes_per_element;
}

/* Host bytes per partition element and weight bytes per parameter-buffer element. */
static double host_per_param(const zoe_optimizer_footprint *f) {
    return (double)(f->host_bytes + f->pinned_bytes - f->pinned_ring_bytes) /
           (double)f->partition_numel;
}
static double device_per_param(const zoe_optimizer_footprint *f) {
    return (double)(f->device_bytes - f->device_ring_bytes) / (double)f->params_numel;
}

/* The state dtypes of a configuration: master, m, v. */
static zoe_optimizer_config with_state(zoe_optimizer_config c, zoe_dtype master, zoe_dtype m,
                                       zoe_dtype v) {
    c.main_params_dtype = master, c.exp_avg_dtype = m, c.exp_avg_sq_dtype = v;
    return c;
}

static zoe_optimizer_config config(int dpu, zoe_grad_mode mode, float partial) {
    zoe_optimizer_config c;
    zoe_optimizer_config_default(&c);
    c.bucket_numel = (size_t)1 << 18;
    c.bucket_ring = 2;
    c.dpu_warmup = dpu ? 1 : 0;
    c.grad_mode = mode;
    c.partial_ratio = partial;
    return c;
}

static zoe_optimizer_footprint footprint(zoe_backend be, zoe_dtype dt, int d,
                                         const zoe_optimizer_config *c) {
    zoe_optimizer_footprint f = {0};
    CHECK_OK(zoe_optimizer_footprint_of(&(zoe_optimizer_footprint_args){.backend = be,
                                                                        .compute_dtype = dt,
                                                                        .numel = numel,
                                                                        .num_tensors = NT,
                                                                        .dp_size = d,
                                                                        .config = c},
                                        &f));
    return f;
}

/* Creates the optimizer, measures it, runs three steps (the last two under DPU with an update
 * in flight) and checks nothing more was allocated. want_total < 0: no per-parameter figure
 * (partial offload, full-buffer mode: only the measurement against the footprint). */
static void measure(zoe_grid *grid, zoe_dtype dt, const zoe_optimizer_config *c, double want_total,
                    const char *what) {
    int d = zoe_grid_dp_size(grid);
    zoe_device *dev = NULL;
    zoe_stream *stream = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    zoe_param_tensor t[NT] = {
        {"a", numel[0], 0, 0}, {"b", numel[1], 1, 1}, {"c", numel[2], 0, 0}, {"d", numel[3], 1, 1}};
    zoe_memory_stats before, after, later;
    CHECK_OK(zoe_device_memory_stats(dev, &before));
    size_t heap0 = heap_in_use();
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, t, NT, c, &opt))) return;
    size_t heap = heap_in_use() - heap0;
    CHECK_OK(zoe_device_memory_stats(dev, &after));
    zoe_optimizer_footprint real, plan = footprint(ZOE_BACKEND_CPU, dt, d, c);
    CHECK_OK(zoe_optimizer_memory(opt, &real));
    CHECK(same_footprint(&real, &plan),
          "%s: allocated host %zu pinned %zu device %zu (rings %zu, %zu) but the footprint says "
          "%zu %zu %zu (%zu, %zu)",
          what, real.host_bytes, real.pinned_bytes, real.device_bytes, real.pinned_ring_bytes,
          real.device_ring_bytes, plan.host_bytes, plan.pinned_bytes, plan.device_bytes,
          plan.pinned_ring_bytes, plan.device_ring_bytes);
    CHECK(after.device_bytes - before.device_bytes == real.device_bytes &&
              after.pinned_bytes - before.pinned_bytes == real.pinned_bytes,
          "%s: the device layer holds %zu device and %zu pinned bytes more, the optimizer counts "
          "%zu and %zu",
          what, after.device_bytes - before.device_bytes, after.pinned_bytes - before.pinned_bytes,
          real.device_bytes, real.pinned_bytes);
    /* On the CPU backend device and pinned memory come from the heap as well. */
    size_t counted = real.host_bytes + real.device_bytes + real.pinned_bytes;
    size_t slack = HEAP_SLACK + (c->state_paths ? DRIVE_HEAP_SLACK : 0);
    CHECK(heap >= counted && heap <= counted + slack,
          "%s: the heap grew by %zu bytes for %zu counted (slack %zu)", what, heap, counted, slack);
    double host = host_per_param(&real), device = device_per_param(&real);
    if (want_total >= 0)
        CHECK(fabs(host + device - want_total) < 1e-9,
              "%s: %.4f host + %.4f weight bytes per parameter, the layout's figure is %.1f", what,
              host, device, want_total);
    if (test_rank() == 0)
        printf("%s, DP=%d: %.3f B/param host + %.3f device = %.3f (rings: %zu device bytes); "
               "heap +%zu for %zu counted\n",
               what, d, host, device, host + device, real.device_ring_bytes, heap, counted);

    /* Steps with random gradients; the update in flight allocates nothing. */
    size_t total = 0;
    for (int i = 0; i < NT; i++) total += numel[i];
    double *w = malloc(total * sizeof(double)), *g = malloc(total * sizeof(double));
    init_random_params(opt, dt, numel, NT, 17, w);
    test_rng rng;
    test_rng_seed(&rng, 18);
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < total; i++) g[i] = test_rng_normal(&rng);
        feed_micro_batch(opt, dt, numel, NT, g);
        CHECK_OK(zoe_optimizer_step(opt, 1e-3f));
        /* the time blocked on the drives: none with host state, part of a synchronous step's
         * update with state on drives */
        zoe_optimizer_stats st;
        CHECK_OK(zoe_optimizer_stats_get(opt, &st));
        CHECK(st.ms_drive_wait >= 0 && (c->state_paths || st.ms_drive_wait == 0) &&
                  (c->dpu_warmup > 0 || st.ms_drive_wait <= st.ms_update),
              "%s: %.3f ms waiting for the drives in an update of %.3f ms", what, st.ms_drive_wait,
              st.ms_update);
    }
    CHECK_OK(zoe_device_memory_stats(dev, &later));
    CHECK(later.device_peak == after.device_bytes && later.pinned_peak == after.pinned_bytes,
          "%s: device peak %zu, pinned peak %zu after steps; %zu and %zu after create", what,
          later.device_peak, later.pinned_peak, after.device_bytes, after.pinned_bytes);
    CHECK_OK(zoe_optimizer_flush(opt));
    free(w), free(g);
    zoe_optimizer_destroy(opt);
    CHECK_OK(zoe_device_memory_stats(dev, &later));
    CHECK(later.device_bytes == before.device_bytes && later.pinned_bytes == before.pinned_bytes,
          "%s: destroy returned the device layer to %zu device, %zu pinned bytes (from %zu, %zu)",
          what, later.device_bytes, later.pinned_bytes, before.device_bytes, before.pinned_bytes);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
}

/* The GPU box from the sizing code alone: host bytes per partition element (pinned included,
 * rings excluded) and device bytes per parameter-buffer element. */
static void gpu_box(int d) {
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    struct {
        zoe_dtype dt;
        int dpu;
        double host, device;
        zoe_dpu_schedule schedule;
        zoe_dtype master, m, v;
        size_t step_bytes; /* moved by the host step per element */
        zoe_dtype grads;   /* main_grads_dtype; 0 (fp32) when not given */
    } cases[] = {
        {ZOE_BF16, 0, 16, 2, ZOE_DPU_PLAIN, F, F, F, 30, F},
        {ZOE_F16, 0, 16, 2, ZOE_DPU_PLAIN, F, F, F, 30, F},
        {ZOE_BF16, 1, 18, 2, ZOE_DPU_PLAIN, F, F, F, 30, F}, /* + the device partition buffer */
        {ZOE_F16, 1, 18, 2, ZOE_DPU_PLAIN, F, F, F, 30, F},
        {ZOE_BF16, 1, 16, 2, ZOE_DPU_EXACT, F, F, F, 30, F}, /* never in flight past its step */
        /* Compressed state (docs/offload.md): bf16 master, m, v 6 + the fp32 gradient 4; the
         * step reads and writes the 6, reads the gradient and writes the bf16 weights: 18. */
        {ZOE_BF16, 0, 10, 2, ZOE_DPU_PLAIN, B, B, B, 18, F},
        {ZOE_BF16, 1, 10, 2, ZOE_DPU_EXACT, B, B, B, 18, F},
        {ZOE_BF16, 1, 12, 2, ZOE_DPU_PLAIN, B, B, B, 18, F}, /* + the bf16 snapshot */
        {ZOE_BF16, 0, 12, 2, ZOE_DPU_PLAIN, F, B, B, 22, F}, /* fp32 master, bf16 moments */
        {ZOE_F16, 0, 14, 2, ZOE_DPU_PLAIN, B, F, F, 26, F},  /* bf16 master, fp32 moments */
        /* int8 moments: a code each and a 4-byte scale per block of 256 (the host share is
         * whole blocks, zoe_partition_align), so 1 + 1/64 bytes each; the step moves the codes
         * (the scales' 2/64 are left out of step_bytes_per_element). */
        {ZOE_BF16, 0, 2 + 2 * I8 + 4, 2, ZOE_DPU_PLAIN, B, Q, Q, 14, F},
        {ZOE_BF16, 1, 2 + 2 * I8 + 4 + 2, 2, ZOE_DPU_PLAIN, B, Q, Q, 14, F}, /* + the snapshot */
        {ZOE_BF16, 0, 4 + 2 * I8 + 4, 2, ZOE_DPU_PLAIN, F, Q, Q, 18, F},
        {ZOE_F16, 0, 2 + 2 + I8 + 4, 2, ZOE_DPU_PLAIN, B, B, Q, 16, F},
        /* the gradient partition in the compute dtype (main_grads_dtype): 2 bytes, not 4 */
        {ZOE_BF16, 0, 2 + 2 * I8 + 2, 2, ZOE_DPU_PLAIN, B, Q, Q, 12, B},
        {ZOE_BF16, 1, 2 + 2 * I8 + 2 + 2, 2, ZOE_DPU_PLAIN, B, Q, Q, 12, B},
        {ZOE_F16, 0, 2 + 2 + 2 + 2, 2, ZOE_DPU_PLAIN, B, B, B, 16, ZOE_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zoe_optimizer_config c = config(cases[i].dpu, ZOE_GRAD_BUCKETS, 0.0f);
        c.dpu_schedule = cases[i].schedule;
        c = with_state(c, cases[i].master, cases[i].m, cases[i].v);
        c.main_grads_dtype = cases[i].grads;
        zoe_optimizer_footprint f = footprint(ZOE_BACKEND_CUDA, cases[i].dt, d, &c);
        /* With DPU the update in flight writes a device partition buffer, not the weights the
         * forward reads: 2 bytes per partition element more on the device. */
        double device =
            cases[i].device + (cases[i].dpu && cases[i].schedule != ZOE_DPU_EXACT
                                   ? 2.0 * (double)f.partition_numel / (double)f.params_numel
                                   : 0.0);
        CHECK(fabs(host_per_param(&f) - cases[i].host) < 1e-9 &&
                  fabs(device_per_param(&f) - device) < 1e-9 &&
                  f.step_bytes_per_element == cases[i].step_bytes,
              "CUDA %s DPU %d state %s/%s/%s, %s gradient, DP=%d: %.4f host and %.4f device "
              "bytes per parameter, %zu moved; want %.1f, %.4f and %zu",
              zoe_dtype_name(cases[i].dt), cases[i].dpu, zoe_dtype_name(cases[i].master),
              zoe_dtype_name(cases[i].m), zoe_dtype_name(cases[i].v),
              zoe_dtype_name(cases[i].grads), d, host_per_param(&f), device_per_param(&f),
              f.step_bytes_per_element, cases[i].host, device, cases[i].step_bytes);
        /* Pinned memory is bounded: rings only, the DPU snapshot pageable (docs/offload.md,
         * "Pinned memory"). */
        CHECK(f.pinned_bytes == f.pinned_ring_bytes && f.pinned_ring_bytes > 0,
              "CUDA %s DPU %d, DP=%d: %zu bytes pinned, %zu of them rings",
              zoe_dtype_name(cases[i].dt), cases[i].dpu, d, f.pinned_bytes, f.pinned_ring_bytes);
        if (test_rank() == 0)
            printf("CUDA %s DPU %d state %s/%s/%s, %s gradient, DP=%d: %.3f B/param host held "
                   "(pinned rings %zu bytes), %zu moved by the host step, %.3f device\n",
                   zoe_dtype_name(cases[i].dt), cases[i].dpu, zoe_dtype_name(cases[i].master),
                   zoe_dtype_name(cases[i].m), zoe_dtype_name(cases[i].v),
                   zoe_dtype_name(cases[i].grads), d, host_per_param(&f), f.pinned_ring_bytes,
                   f.step_bytes_per_element, device_per_param(&f));
    }
}

/* The device share of partial offload on the GPU box, from the sizing code alone: held in the
 * host's state dtypes. Its element count is what DPU's second device gradient partition adds
 * (4 bytes each, nothing else on the device changes); its state is then what partial offload adds
 * beyond that gradient and the partition buffer the update writes. */
static void gpu_box_device_share(int d) {
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    const struct {
        zoe_dtype master, m, v;
        size_t bytes; /* per element: master, m and v (codes) */
        int int8_moments;
    } cases[] = {{F, F, F, 12, 0}, {B, B, B, 6, 0}, {B, Q, Q, 4, 2}, {F, Q, B, 7, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zoe_optimizer_config sync =
            with_state(config(0, ZOE_GRAD_BUCKETS, 0.5f), cases[i].master, cases[i].m, cases[i].v);
        zoe_optimizer_config dpu = sync, none = sync;
        dpu.dpu_warmup = 1, dpu.dpu_schedule = ZOE_DPU_PLAIN;
        none.partial_ratio = 0;
        zoe_optimizer_footprint f = footprint(ZOE_BACKEND_CUDA, ZOE_BF16, d, &sync),
                                fd = footprint(ZOE_BACKEND_CUDA, ZOE_BF16, d, &dpu),
                                f0 = footprint(ZOE_BACKEND_CUDA, ZOE_BF16, d, &none);
        size_t share = (fd.device_bytes - f.device_bytes) / 4;
        size_t state = f.device_bytes - f0.device_bytes - 2 * f.partition_numel - 4 * share;
        size_t want = share * cases[i].bytes + (size_t)cases[i].int8_moments *
                                                   ((share + 255) / 256) *
                                                   4; /* a scale per block */
        CHECK(share > 0 && share < f.partition_numel && state == want,
              "CUDA device share, state %s/%s/%s, DP=%d: %zu elements hold %zu bytes of state; "
              "want %zu",
              zoe_dtype_name(cases[i].master), zoe_dtype_name(cases[i].m),
              zoe_dtype_name(cases[i].v), d, share, state, want);
        if (test_rank() == 0)
            printf("CUDA device share, state %s/%s/%s, DP=%d: %.3f B/param of state + 4 of "
                   "gradient\n",
                   zoe_dtype_name(cases[i].master), zoe_dtype_name(cases[i].m),
                   zoe_dtype_name(cases[i].v), d, (double)state / (double)share);
    }
}

/* The gradient ring by bytes (bucket_ring_window): measured as above, and its bytes against the
 * places worked out here. Buckets of 1 << 17 elements hold 300000, 123457, 500001 and 77 each
 * alone; a window of 500001 touches at most buckets 1, 2 and 3 (the run from bucket 1: all of
 * 2 inside, 3 where it ends); the ring holds bucket 0 in a place of its own, that run, and one
 * more of the largest (2) for what a wrap may leave unused. Each bucket takes d x its partition,
 * rounded up to 64 bytes (32 bf16 elements). */
static void ring_by_bytes(zoe_grid *grid) {
    zoe_optimizer_config c = config(0, ZOE_GRAD_BUCKETS, 0.0f);
    c.bucket_numel = (size_t)1 << 17;
    c.bucket_ring_window = numel[2];
    /* bf16: the ring stays under ZOE_HOST_ARRAY_HUGE_MIN, whose rounding the heap would see */
    measure(grid, ZOE_BF16, &c, 18, "CPU bf16, gradient ring by bytes");
    size_t d = (size_t)zoe_grid_dp_size(grid), dev[NT];
    for (int b = 0; b < NT; b++) dev[b] = d * (((numel[b] + d - 1) / d + 31) / 32 * 32);
    size_t want = (dev[0] + dev[1] + dev[2] + dev[3] + dev[2]) * sizeof(uint16_t);
    zoe_optimizer_footprint f = footprint(ZOE_BACKEND_CPU, ZOE_BF16, (int)d, &c);
    CHECK(f.device_ring_bytes == want, "ring by bytes: %zu device bytes, want %zu",
          f.device_ring_bytes, want);
    /* On a GPU the pinned staging is the ring's places over d. */
    f = footprint(ZOE_BACKEND_CUDA, ZOE_BF16, (int)d, &c);
    CHECK(f.device_ring_bytes == want && f.pinned_ring_bytes >= want / d,
          "ring by bytes, CUDA: %zu device, %zu pinned ring bytes, want %zu and %zu + the "
          "copy-out ring",
          f.device_ring_bytes, f.pinned_ring_bytes, want, want / d);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *grid = NULL;
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    zoe_optimizer_config sync = config(0, ZOE_GRAD_BUCKETS, 0.0f);
    zoe_optimizer_config dpu = config(1, ZOE_GRAD_BUCKETS, 0.0f);
    measure(grid, ZOE_F32, &sync, 16, "CPU fp32");
    measure(grid, ZOE_F32, &dpu, 20, "CPU fp32 DPU");
    measure(grid, ZOE_BF16, &sync, 18, "CPU bf16");
    measure(grid, ZOE_BF16, &dpu, 20, "CPU bf16 DPU");
    /* The weight prediction: a separate fp32 master (the parameters hold the prediction) and an
     * fp32 snapshot instead of the second gradient partition; with bf16 weights no change. */
    zoe_optimizer_config predict = dpu;
    predict.dpu_schedule = ZOE_DPU_PREDICT;
    measure(grid, ZOE_F32, &predict, 24, "CPU fp32 DPU predict");
    measure(grid, ZOE_BF16, &predict, 20, "CPU bf16 DPU predict");
    zoe_optimizer_config dc = dpu;
    dc.dpu_schedule = ZOE_DPU_DC; /* the last step recomputed from m and v: no array */
    measure(grid, ZOE_F32, &dc, 20, "CPU fp32 DPU dc");
    measure(grid, ZOE_BF16, &dc, 20, "CPU bf16 DPU dc"); /* a tile per thread while it runs */
    ring_by_bytes(grid);
    zoe_optimizer_config exact = dpu;
    exact.dpu_schedule = ZOE_DPU_EXACT; /* the layout of DPU off */
    measure(grid, ZOE_F32, &exact, 16, "CPU fp32 DPU exact");
    measure(grid, ZOE_BF16, &exact, 18, "CPU bf16 DPU exact");
    /* Compressed state: bf16 master, m, v (2 each) + the fp32 gradient + the weights. */
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16;
    zoe_optimizer_config s_all = with_state(sync, B, B, B), s_mom = with_state(sync, F, B, B);
    measure(grid, ZOE_BF16, &s_all, 12, "CPU bf16, bf16 state");
    measure(grid, ZOE_F32, &s_all, 14, "CPU fp32, bf16 state");
    /* the fp32 master stays the weights: m, v 4 + gradient 4 + weights 4 */
    measure(grid, ZOE_F32, &s_mom, 12, "CPU fp32, bf16 moments");
    zoe_optimizer_config e_all = with_state(exact, B, B, B), d_all = with_state(dpu, B, B, B);
    measure(grid, ZOE_BF16, &e_all, 12, "CPU bf16 DPU exact, bf16 state");
    measure(grid, ZOE_BF16, &d_all, 14, "CPU bf16 DPU, bf16 state"); /* + the bf16 snapshot */
    /* A stale update with compressed state writes over the snapshot, not a second gradient: the
     * fp32 master leaves the weights (4 + 4 + 4 + 4 snapshot + 4 weights). */
    zoe_optimizer_config d_mom = with_state(dpu, F, B, B);
    measure(grid, ZOE_F32, &d_mom, 20, "CPU fp32 DPU, bf16 moments");
    /* int8 moments, 1 + 1/64 bytes each (gpu_box): with a bf16 master the GPU box's 8.03 */
    const zoe_dtype Q = ZOE_I8;
    zoe_optimizer_config q_all = with_state(sync, B, Q, Q), q_mom = with_state(sync, F, Q, Q);
    zoe_optimizer_config qd_all = with_state(dpu, B, Q, Q);
    measure(grid, ZOE_BF16, &q_all, 2 + 2 * I8 + 4 + 2, "CPU bf16, bf16 master, int8 moments");
    measure(grid, ZOE_F32, &q_mom, 2 * I8 + 4 + 4, "CPU fp32, int8 moments");
    measure(grid, ZOE_BF16, &qd_all, 2 + 2 * I8 + 4 + 2 + 2,
            "CPU bf16 DPU, bf16 master, int8 moments");
    zoe_optimizer_config q16 = q_all, qd16 = qd_all; /* and a bf16 gradient partition */
    q16.main_grads_dtype = qd16.main_grads_dtype = ZOE_BF16;
    measure(grid, ZOE_BF16, &q16, 2 + 2 * I8 + 2 + 2,
            "CPU bf16, bf16 master, int8 moments, bf16 gradient");
    measure(grid, ZOE_BF16, &qd16, 2 + 2 * I8 + 2 + 2 + 2,
            "CPU bf16 DPU, bf16 master, int8 moments, bf16 gradient");
    zoe_optimizer_config qd16_dc = qd16; /* dc: no array either */
    qd16_dc.dpu_schedule = ZOE_DPU_DC;
    measure(grid, ZOE_BF16, &qd16_dc, 2 + 2 * I8 + 2 + 2 + 2,
            "CPU bf16 DPU dc, bf16 master, int8 moments, bf16 gradient");
    /* State on drives (a tmpfs here): the host holds a ring of 5 buckets instead of the state
     * (the rank's gradient partition and weights as before), counted as the footprint says. */
    zoe_optimizer_config drive = sync, drive_q = with_state(exact, B, Q, Q);
    drive.state_paths = drive_q.state_paths = "/dev/shm";
    measure(grid, ZOE_F32, &drive, -1, "CPU fp32, state on drives");
    measure(grid, ZOE_BF16, &drive_q, -1,
            "CPU bf16 DPU exact, bf16 master, int8 moments on drives");
    zoe_optimizer_config partial = config(1, ZOE_GRAD_FULL_BUFFER, 0.5f);
    measure(grid, ZOE_F32, &partial, -1, "CPU fp32 DPU full-buffer partial 0.5");
    measure(grid, ZOE_BF16, &partial, -1, "CPU bf16 DPU full-buffer partial 0.5");
    zoe_optimizer_config q_partial = with_state(partial, B, Q, Q);
    measure(grid, ZOE_BF16, &q_partial, -1, "CPU bf16 DPU full-buffer partial 0.5, int8 moments");
    gpu_box(zoe_grid_dp_size(grid));
    gpu_box_device_share(zoe_grid_dp_size(grid));
    zoe_grid_destroy(grid);
    return test_finish("test_optimizer_memory");
}
