/* The drive tier in the plan (issue 38, item 5; docs/plan.md, "Drives"): every new term worked
 * out again here from the partition's element count, the state's dtypes, the model's shape and
 * the box's stated drives, not from the plan's own pieces.
 *   - the boxes' drives: count, capacity and rates as docs/plan.md's table states them;
 *   - on the drives, per rank: the state (a bf16 master 2 bytes, int8 moments 1 byte each and a
 *     4-byte scale per 256 elements each; fp32 state 12 bytes), the weights apart from the master
 *     (fp16 on a V100: 2 bytes; none where a bf16 master computing in bf16 is the weights, which
 *     then go to the drives as the master), the gradient partition where it goes (2 bytes in
 *     the compute dtype, 4 in fp32); against the drives' capacity less 5%;
 *   - the host: the host tier's plan less what went to the drives, plus the rings: 2k + 1
 *     buckets (k = 2) of what the step streams per element, between the largest tensor's and
 *     the bucket's partition; (prefetch + 2) partitions of the largest unit for the weights (a
 *     layer's largest part, ln_2 and fc1, or the embedding);
 *   - the traffic per rank per step: the host step reads the state and k gradient partitions
 *     (each micro-batch after the first adds to it, the step reads it) and writes the state,
 *     the weights and k gradients; the weights are read once per forward and once per backward
 *     of each micro-batch (grad_accum x 2 x (L layers + the embedding) / d); the box's ranks
 *     share the drives, whose reads and writes take their turns;
 *   - what binds: drives fast enough change nothing of the step; drives at half the rate at
 *     which they would fill 60% of the step bind it; the gradient partition goes to the drives
 *     where the host cannot hold it; the refusals;
 *   - the goals: the largest GPT on one DGX-2 with every tier, >= 1.5T, the GPU binding the
 *     next; on one V100-32GB the largest, against the host tier's; each at the plan's prefetch
 *     or, only where that does not fit, one unit ahead, the next fitting at neither.
 * Tolerances: byte counts are integers in doubles, equal to 1e-12 relative (sums in another
 * order); times within 1e-9 relative. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include "max_model_testing.h"
#include "offload/optimizer_impl.h" /* ZOE_GRAD_STAGE_SLOTS */
#include "testing.h"
#include "zoe/plan.h"
#include "zoe/zoe.h"

static double rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-300);
}

/* int8 moments with a bf16 master and the gradient in the compute dtype, on tp x dp of a box */
static zoe_plan_config tiers(const char *model, const char *hardware, int tp, int dp) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_model_preset(model, &p.model));
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware));
    p.hardware.gpu_cc = 0; /* attention as matmuls */
    p.tp = tp, p.dp = dp, p.micro_batch = 1, p.recompute = 1;
    p.dtype = p.hardware.dtype;
    p.main_params_dtype = ZOE_STATE_BF16;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = ZOE_STATE_INT8;
    p.main_grads_dtype = p.dtype;
    p.state_on_drives = 1;
    p.offload_params = ZOE_PLAN_WEIGHTS_ON_DRIVES;
    return p;
}

/* Each box's drives as docs/plan.md states them: count, TB, GB/s read and write each (90% of
 * the published sequential rates). */
static void check_boxes(void) {
    static const struct {
        const char *name;
        int drives;
        double tb, read, write;
    } boxes[] = {{"dgx2", 8, 3.84, 0.9 * 3.2, 0.9 * 2.0},
                 {"v100-32g", 8, 3.84, 0.9 * 3.2, 0.9 * 2.0},
                 {"dgx-a100-80g", 8, 3.84, 0.9 * 6.4, 0.9 * 3.8},
                 {"dgx-h100", 8, 3.84, 0.9 * 6.4, 0.9 * 3.8},
                 {"h200", 1, 3.84, 0.9 * 6.4, 0.9 * 3.8}};
    for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++) {
        zoe_hardware hw;
        if (!CHECK_OK(zoe_hardware_preset(boxes[i].name, &hw))) continue;
        CHECK(hw.drives == boxes[i].drives && rel(hw.drive_bytes, boxes[i].tb * 1e12) < 1e-12 &&
                  rel(hw.drive_read_bandwidth, boxes[i].read * 1e9) < 1e-12 &&
                  rel(hw.drive_write_bandwidth, boxes[i].write * 1e9) < 1e-12 && hw.drive_source,
              "%s: %d drives of %.3g TB at %.3g / %.3g GB/s", boxes[i].name, hw.drives,
              hw.drive_bytes / 1e12, hw.drive_read_bandwidth / 1e9, hw.drive_write_bandwidth / 1e9);
    }
    zoe_hardware local;
    CHECK_OK(zoe_hardware_local(0, &local));
    CHECK(local.drives == 0, "local: %d drives without --drives", local.drives);
}

/* The plan of p (grads: the gradient partition on the drives) against the sums worked out
 * here, and against the same run with everything on the host. */
static void check_terms(const char *what, zoe_plan_config p, int grads) {
    p.grads_on_drives = grads;
    zoe_plan_result r, host;
    if (!CHECK_OK(zoe_plan(&p, &r))) return;
    zoe_plan_config q = p;
    q.state_on_drives = 0, q.grads_on_drives = 0;
    q.offload_params = p.offload_params ? 1 : 0;
    if (!CHECK_OK(zoe_plan(&q, &host))) return;
    const zoe_hardware *hw = &p.hardware;
    const double P = (double)r.state_params, esz = p.dtype == ZOE_F32 ? 4 : 2;
    const int weights = p.offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES;
    /* a bf16 master is the weights computing in bf16, and in fp16 (their exact conversion) */
    const int master_is_weights = p.offload_params && p.dtype != ZOE_F32;
    /* on the drives */
    const double state_all = P * (2 + 1 + 1) + 2 * 4 * P / 256;
    const double master_stays = master_is_weights && !weights ? 2 * P : 0;
    const double S = state_all - master_stays;
    const double W = weights && !master_is_weights ? esz * P : 0;
    const double G = grads ? (p.main_grads_dtype == ZOE_F32 ? 4 : 2) * P : 0;
    const double ranks = r.ranks_per_node, k = p.grad_accum, d = p.dp;
    CHECK(r.drive.state_bytes == S && r.drive.weights_bytes == W && r.drive.grads_bytes == G &&
              r.drive.grads == grads,
          "%s: on the drives state %.0f weights %.0f grads %.0f (expected %.0f %.0f %.0f)", what,
          r.drive.state_bytes, r.drive.weights_bytes, r.drive.grads_bytes, S, W, G);
    const double capacity = hw->drives * hw->drive_bytes;
    /* the optimizer's own scratch bytes: each array of each bucket padded to the drives' 4096
     * bytes, a few KiB per bucket of several MiB */
    CHECK(r.drive.total >= ranks * (S + W + G) * (1 - 1e-12) &&
              r.drive.total <= ranks * (S + W + G) * 1.01 && r.drive.capacity == capacity &&
              rel(r.drive.available, 0.95 * capacity) < 1e-12 &&
              r.drive.fits == (r.drive.total <= 0.95 * capacity),
          "%s: drives %.0f of %.0f, fits %d", what, r.drive.total, r.drive.available, r.drive.fits);
    /* the traffic */
    const double h = p.model.hidden, t = p.tp, T = p.model.seq_len, V = p.model.vocab;
    const double L = p.model.layers;
    const double m = t * ceil(128.0 / t), padded = ceil(V / m) * m;
    const double layer = (12 * h * h / t + 7 * h / t + 6 * h) * esz;
    const double emb = (padded / t * h + T * h + 2 * h) * esz;
    /* the ring's units are a layer's parts, the largest ln_2 and fc1; with recompute the
     * backward reads every part but fc2 (4 h^2 / t + h) a second time */
    const double part = (4 * h * h / t + 4 * h / t + 2 * h) * esz;
    const double refetch = layer - (4 * h * h / t + h) * esz;
    const double read = S + k * G, write = S + W + k * G;
    const double stream_read = weights ? k * (2 * (L * layer + emb) + L * refetch) / d : 0;
    const double rb = hw->drives * hw->drive_read_bandwidth,
                 wb = hw->drives * hw->drive_write_bandwidth;
    const double host_step = ranks * (read / rb + write / wb), stream = ranks * stream_read / rb;
    CHECK(rel(r.drive.step_read_bytes, read) < 1e-12 &&
              rel(r.drive.step_write_bytes, write) < 1e-12 &&
              (weights ? rel(r.drive.stream_read_bytes, stream_read) < 1e-12
                       : r.drive.stream_read_bytes == 0),
          "%s: read %.0f written %.0f streamed %.0f (expected %.0f %.0f %.0f)", what,
          r.drive.step_read_bytes, r.drive.step_write_bytes, r.drive.stream_read_bytes, read, write,
          stream_read);
    CHECK(rel(r.drive.host_step, host_step) < 1e-9 &&
              (weights ? rel(r.drive.stream, stream) < 1e-9 : r.drive.stream == 0) &&
              rel(r.drive.seconds, host_step + stream) < 1e-9,
          "%s: drives %.3f s for the step, %.3f for the weights (expected %.3f %.3f)", what,
          r.drive.host_step, r.drive.stream, host_step, stream);
    CHECK(r.time.step >= host_step + stream - 1e-9 &&
              r.time.host_adam >= fmax(host.time.host_adam, host_step) * (1 - 1e-12),
          "%s: step %.3f s, host step %.3f, below the drives' %.3f or the update's %.3f", what,
          r.time.step, r.time.host_adam, host_step + stream, host.time.host_adam);
    /* the host: the host tier's less what went to the drives, plus the rings: the optimizer's
     * 5 slots of a bucket's state in plain memory, its weights where they are on the drives
     * (the master that is them, or their copy), and its gradient (its arrays each padded to
     * 4096 bytes), and with the gradient ZOE_GRAD_STAGE_SLOTS staging buckets of it (the one
     * summed, the one written, those read ahead; none read ahead at one micro-batch a step) */
    const double plain = state_all - (master_is_weights ? 2 * P : 0);
    const double paged_weights = weights ? (master_is_weights ? 2 * P : esz * P) : 0;
    const double per_element = (plain + paged_weights + G) / P,
                 staged = (ZOE_GRAD_STAGE_SLOTS - (k == 1 ? ZOE_GRAD_STAGE_AHEAD : 0)) * G / P;
    const double ring = r.drive.state_ring;
    double largest = fmax(4 * h * h / t, padded / t * h); /* fc1's or the embedding's shard */
    const double bucket = fmax(largest, 16.0 * (1 << 20) / esz);
    CHECK(ring >= (5 * per_element + staged) * largest / d * (1 - 1e-12) &&
              ring <=
                  (5 * per_element + staged) * (bucket / d) + (5 * 6 + ZOE_GRAD_STAGE_SLOTS) * 4096,
          "%s: the state ring %.0f outside %.2f bytes x [%.0f, %.0f] elements", what, ring,
          5 * per_element + staged, largest / d, bucket / d);
    const double pinned = paged_weights;
    const double wring = weights ? (r.stream.prefetch + 2) * fmax(part, emb) / d : 0;
    CHECK(r.drive.weights_ring == wring &&
              rel(r.host.optimizer_per_rank, host.host.optimizer_per_rank - plain - G + ring) <
                  1e-12 &&
              rel(r.host.pinned_per_rank, host.host.pinned_per_rank - pinned + wring) < 1e-12,
          "%s: host %.0f pinned %.0f weights ring %.0f; expected %.0f %.0f %.0f", what,
          r.host.optimizer_per_rank, r.host.pinned_per_rank, r.drive.weights_ring,
          host.host.optimizer_per_rank - plain - G + ring,
          host.host.pinned_per_rank - pinned + wring, wring);
    /* the device holds what it held but for the weights' ring, which may prefetch further
     * (test_plan_stream checks it) */
    CHECK(r.gpu.total - r.gpu.weights == host.gpu.total - host.gpu.weights,
          "%s: GPU %.0f less its weights %.0f, the host tier's %.0f less %.0f", what, r.gpu.total,
          r.gpu.weights, host.gpu.total, host.gpu.weights);
    printf("%-40s drives %.2f TB of %.2f (state %.1f, weights %.1f, grads %.1f GiB/rank); host "
           "%.1f GiB (rings %.2f); drives busy %.2f s (step %.2f, weights %.2f) of a %.2f s step; "
           "%s binds\n",
           what, r.drive.total / 1e12, r.drive.available / 1e12, S / (1 << 30), W / (1 << 30),
           G / (1 << 30), r.host.total / (1 << 30), (ring + wring) / (1 << 30), r.drive.seconds,
           host_step, stream, r.time.step, r.time.bound);
}

/* Drives fast enough leave the step as the host tier's; slow enough they bind it. */
static void check_binding(void) {
    zoe_plan_config p = tiers("13b", "h200", 1, 1);
    p.offload_params = 1; /* the state on the drives, the weights streamed from the host */
    p.micro_batch = 4, p.grad_accum = 8, p.dpu = 1, p.main_grads_dtype = ZOE_F32;
    zoe_plan_config q = p;
    q.state_on_drives = 0;
    zoe_plan_result host, fast, some, half;
    if (!CHECK_OK(zoe_plan(&q, &host))) return;
    p.hardware.drive_read_bandwidth = p.hardware.drive_write_bandwidth = 1e15;
    if (!CHECK_OK(zoe_plan(&p, &fast))) return;
    CHECK(rel(fast.time.step, host.time.step) < 1e-6 && !strstr(fast.time.bound, "drives"),
          "drives at 1 PB/s: step %.4f s (the host tier's %.4f), %s binds", fast.time.step,
          host.time.step, fast.time.bound);
    /* rates at which the drives are busy for 60% of the host tier's step, then half of them */
    const double scale = fast.drive.seconds / (0.6 * host.time.step);
    p.hardware.drive_read_bandwidth = 1e15 * scale, p.hardware.drive_write_bandwidth = 1e15 * scale;
    if (!CHECK_OK(zoe_plan(&p, &some))) return;
    p.hardware.drive_read_bandwidth /= 2, p.hardware.drive_write_bandwidth /= 2;
    if (!CHECK_OK(zoe_plan(&p, &half))) return;
    printf(
        "13b on h200, 4 x 8 micro-batches, DPU: host tier %.2f s (%s binds); drives busy %.2f s: "
        "%.2f s (%s); at half their rate %.2f s busy: %.2f s (%s)\n",
        host.time.step, host.time.bound, some.drive.seconds, some.time.step, some.time.bound,
        half.drive.seconds, half.time.step, half.time.bound);
    CHECK(rel(some.drive.seconds, 0.6 * host.time.step) < 1e-9 &&
              !strstr(some.time.bound, "drives"),
          "drives busy %.3f s of a %.3f s step: %s binds", some.drive.seconds, some.time.step,
          some.time.bound);
    CHECK(rel(half.drive.seconds, 1.2 * host.time.step) < 1e-9 &&
              strstr(half.time.bound, "drives") && half.time.step >= half.drive.seconds,
          "drives busy %.3f s past the host tier's %.3f s step: %s binds, step %.3f",
          half.drive.seconds, host.time.step, half.time.bound, half.time.step);
}

/* zoe_plan refuses each, naming the value. */
static void check_refusals(void) {
    const struct {
        const char *what, *says;
        int state, params, grads, drives;
        float ratio;
    } cases[] = {
        {"weights on drives without the state", "without --offload nvme", 0, 2, -1, 8, 1.0f},
        {"gradient on drives without the state", "without --offload nvme", 0, 1, 1, 8, 1.0f},
        {"no drives", "0 drives", 1, 2, -1, 0, 1.0f},
        {"part of the state on the device", "--offload-ratio 0.5", 1, 0, -1, 8, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zoe_plan_config p = tiers("1.3b", "dgx2", 1, 16);
        p.state_on_drives = cases[i].state, p.offload_params = cases[i].params;
        p.grads_on_drives = cases[i].grads, p.hardware.drives = cases[i].drives;
        p.offload_ratio = cases[i].ratio;
        zoe_plan_result r;
        zoe_status st = zoe_plan(&p, &r);
        CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), cases[i].says),
              "%s: status %d, '%s' (expected it to say '%s')", cases[i].what, (int)st,
              zoe_last_error(), cases[i].says);
    }
}

/* The gradient partition goes to the drives where the host cannot hold it, and only there. */
static void check_grads_auto(void) {
    zoe_plan_config p = tiers("70b", "dgx2", 16, 1);
    p.grads_on_drives = ZOE_PLAN_GRADS_AUTO;
    zoe_plan_result r;
    if (CHECK_OK(zoe_plan(&p, &r)))
        CHECK(r.fits && !r.drive.grads, "70b on a DGX-2: fits %d, gradient on drives %d", r.fits,
              r.drive.grads);
    max_model_run(&p);
    zoe_plan_family_member(&p.model, 208, &p.model); /* 1.77T: 3.5 TB of fp16 gradient */
    zoe_plan_result on_host;
    p.grads_on_drives = 0;
    if (CHECK_OK(zoe_plan(&p, &on_host)))
        CHECK(!on_host.fits_host, "1.77T with its gradient on the host: fits %d", on_host.fits);
    p.grads_on_drives = ZOE_PLAN_GRADS_AUTO;
    if (CHECK_OK(zoe_plan(&p, &r)))
        CHECK(r.fits && r.drive.grads, "1.77T on a DGX-2: fits %d (%s), gradient on drives %d",
              r.fits, r.verdict, r.drive.grads);
}

/* zoe-train's drives: its --nvme-path directories, one drive each of the least free space; the
 * plan of an unprobed `local` box with them sizes and has no time. */
static void check_paths(void) {
    zoe_hardware hw;
    CHECK_OK(zoe_hardware_local(0, &hw));
    struct statvfs fs;
    CHECK(statvfs(".", &fs) == 0, "statvfs(.)");
    if (!CHECK_OK(zoe_hardware_drives_of_paths(".,.,.", &hw))) return;
    /* the free space moves while other work runs: within 1% */
    const double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
    CHECK(hw.drives == 3 && rel(hw.drive_bytes, free_bytes) < 0.01,
          "'.,.,.': %d drives of %.0f bytes (statvfs: %.0f free)", hw.drives, hw.drive_bytes,
          free_bytes);
    zoe_hardware bad = hw;
    CHECK(zoe_hardware_drives_of_paths(".,/no/such/zoe/dir", &bad) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "'/no/such/zoe/dir'") && bad.drives == 3,
          "a missing directory: '%s'", zoe_last_error());
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    p.hardware = hw;
    p.state_on_drives = 1;
    zoe_plan_result r;
    if (CHECK_OK(zoe_plan(&p, &r)))
        CHECK(r.drive.state_bytes > 0 && r.drive.seconds == 0 &&
                  !strcmp(r.time.bound, "not probed"),
              "local with drives: state %.0f bytes on them, busy %.3f s, %s", r.drive.state_bytes,
              r.drive.seconds, r.time.bound);
}

/* The largest GPT of GPT-3's family with every tier at the run: it fits, the next does
 * not, and the GPU stops it. Returns its parameters. */
static double largest(const char *hardware, int tp) {
    zoe_plan_config p = tiers("demo", hardware, tp, 1);
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware)); /* attention as zoe-plan prices it */
    p.dp = p.hardware.gpus / tp;
    p.grads_on_drives = ZOE_PLAN_GRADS_AUTO;
    max_model_run(&p);
    zoe_model_config best;
    zoe_plan_result r, next;
    if (!max_model_and_next(&p, &best, &r, &next)) return 0;
    printf("largest GPT with every tier on %s at TP=%d: %d x %d, %.2fB; GPU %.1f GiB "
           "(activations %.1f, weights ring %.1f, gradient ring %.1f), host %.0f GiB, drives "
           "%.2f TB (gradient on drives: %d); prefetch %d%s; step %.0f s, %s binds; the next: %s\n",
           hardware, tp, best.layers, best.hidden, (double)r.params / 1e9, r.gpu.total / (1 << 30),
           r.gpu.activations / (1 << 30), r.gpu.weights / (1 << 30), r.gpu.grad_ring / (1 << 30),
           r.host.total / (1 << 30), r.drive.total / 1e12, r.drive.grads, r.stream.prefetch,
           r.stream.prefetch_from_plan ? " (the plan's)" : " (one ahead: the plan's does not fit)",
           r.time.step, r.time.bound, next.verdict);
    CHECK(r.fits && !next.fits && !next.fits_gpu && next.fits_host && next.drive.fits,
          "%s: the next member %s (host %d, drives %d)", hardware, next.verdict, next.fits_host,
          next.drive.fits);
    /* one unit ahead only where the plan's prefetch does not fit; the next fits at neither */
    zoe_plan_config at = p, one = p;
    at.model = one.model = best;
    one.prefetch_layers = 1;
    zoe_plan_result plans, ones;
    zoe_plan_family_member(&best, best.layers + tp, &one.model);
    if (CHECK_OK(zoe_plan(&at, &plans)) && CHECK_OK(zoe_plan(&one, &ones)))
        CHECK((r.stream.prefetch_from_plan ||
               (r.stream.prefetch == 1 && !plans.fits && plans.stream.prefetch > 1)) &&
                  !ones.fits,
              "%s: prefetch %d (the plan's: %d, %d, which fits %d); the next at one ahead fits %d",
              hardware, r.stream.prefetch, r.stream.prefetch_from_plan, plans.stream.prefetch,
              plans.fits, ones.fits);
    return (double)r.params;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    check_boxes();
    /* fp16 on a V100: the weights a copy apart from the bf16 master; TP x DP on the box */
    zoe_plan_config v = tiers("70b", "dgx2", 16, 1);
    check_terms("70b dgx2 TP=16, all on drives", v, 1);
    check_terms("70b dgx2 TP=16, gradient on the host", v, 0);
    zoe_plan_config w = tiers("13b", "dgx2", 4, 4);
    w.grad_accum = 3, w.main_grads_dtype = ZOE_F32; /* micro-batches add in fp32 */
    check_terms("13b dgx2 TP=4 x DP=4, 3 micro-batches", w, 1);
    /* bf16: the master is the weights, on the drives with them or on the host with them */
    zoe_plan_config a = tiers("13b", "dgx-a100-80g", 1, 8);
    check_terms("13b dgx-a100 DP=8, all on drives", a, 1);
    a.offload_params = 1;
    check_terms("13b dgx-a100 DP=8, weights on the host", a, 0);
    a.offload_params = 0;
    check_terms("13b dgx-a100 DP=8, weights on the GPUs", a, 0);
    check_binding();
    check_refusals();
    check_grads_auto();
    check_paths();
    const double dgx2 = largest("dgx2", 16);
    CHECK(dgx2 >= 1.5e12, "one DGX-2 with every tier: %.2fB, the goal 1500B", dgx2 / 1e9);
    /* one V100 is bound by its GPU (docs/plan.md, "Drives": the gradient ring and the weights'
     * ring of whole layers), past the host tier's 241.59B */
    const double v100 = largest("v100-32g", 1);
    CHECK(v100 > 241.59e9, "one V100-32GB with every tier: %.2fB", v100 / 1e9);
    return test_finish("test_plan_nvme");
}
