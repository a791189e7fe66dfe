/* Compressed optimizer state in the plan (docs/offload.md, "Compressed state"), from the plan
 * alone: the sizes come from the optimizer's own sizing code (test_optimizer_memory checks those
 * against the allocations), so these are the goals as the plan computes them:
 *   - bf16 master, m and v hold 10 bytes per parameter of the host partition (16 with fp32);
 *   - the largest GPT of GPT-3's family with offload (zoe-plan --max-model's run: seq 2048,
 *     vocabulary 50257, micro-batch 1, recompute) grows with each smaller state, on a DGX-2
 *     (TP=16) and a DGX A100-80GB (TP=8), and each answer is the largest: the family's next
 *     member (tp more layers) does not fit;
 *   - the 70b preset's host Adam on a DGX-2 at TP=16 takes <= 0.65 of the fp32 state's time
 *     (18 bytes moved per parameter instead of 30: 0.6);
 *   - a bf16 master with int8 moments (8.03 bytes held, 14 moved) goes further on both.
 * And the host Adam's two terms (docs/plan.md, "Time: a model with stated figures"): the bytes
 * it moves at the host's bandwidth, and its arithmetic, one core's nanoseconds per parameter
 * over the box's busy cores; the slower binds. Here each term is worked out again from the
 * plan's partition, the bytes of the layout and bench_cpu_adam's measured figure for the same
 * layout (not the plan's sum of its parts), on a host of few cores and high bandwidth where the
 * arithmetic binds, and on the presets, where memory binds and the 70B figures that docs/plan.md
 * and docs/offload.md quote stay as they were. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "max_model_testing.h"
#include "testing.h"
#include "zoe/plan.h"

/* bench_cpu_adam's cached_ns_per_param for each layout (engine/plan/hardware.c says how and where
 * it was measured): the plan's arithmetic for a state of that layout is this figure. */
typedef struct adam_layout {
    const char *bench_mode;
    zoe_backend backend;
    zoe_dtype compute;
    int state; /* as on_box's below */
    double bytes_per_param, ns_per_param;
} adam_layout;

static const adam_layout layouts[] = {
    {"fp32", ZOE_BACKEND_CPU, ZOE_F32, 0, 28, 0.139},
    {"bf16_weights", ZOE_BACKEND_CUDA, ZOE_BF16, 0, 30, 0.158},
    {"bf16_state", ZOE_BACKEND_CUDA, ZOE_BF16, 1, 18, 0.312},
    {"int8_state", ZOE_BACKEND_CUDA, ZOE_BF16, 2, 14, 1.060},
};

/* state: 0 fp32, 1 bf16 master, m and v, 2 a bf16 master with int8 m and v. */
static zoe_plan_config on_box(const char *model, const char *hardware, int tp, int state) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_model_preset(model, &p.model));
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware));
    p.tp = tp, p.dp = p.hardware.gpus / tp;
    p.dtype = p.hardware.dtype;
    p.main_params_dtype = p.exp_avg_dtype = p.exp_avg_sq_dtype =
        state ? ZOE_STATE_BF16 : ZOE_STATE_FP32;
    if (state == 2) p.exp_avg_dtype = p.exp_avg_sq_dtype = ZOE_STATE_INT8;
    return p;
}

/* The largest GPT of GPT-3's family at --max-model's run with `state` (and the gradient
 * partition in the compute dtype with grads16), in billions; checked to be the largest: it fits
 * and the next member does not. */
static double largest(const char *hardware, int tp, int state, int grads16) {
    zoe_plan_config p = on_box("demo", hardware, tp, state);
    max_model_run(&p);
    if (grads16) p.main_grads_dtype = p.dtype;
    zoe_model_config best;
    zoe_plan_result r, next;
    if (!max_model_and_next(&p, &best, &r, &next)) return 0;
    CHECK(r.fits && !next.fits && best.heads == best.layers && best.hidden == 128 * best.layers,
          "%s state %d: %d x %d fits %d, the next fits %d", hardware, state, best.layers,
          best.hidden, r.fits, next.fits);
    return (double)zoe_model_param_count(&best) / 1e9;
}

/* The plan of the 1.3b preset with `layout`'s state, one rank, on
 * a host of `cores` cores and `bandwidth` bytes/s: memory and arithmetic worked out here from the
 * rank's partition (all of it on the host: offload ratio 1) against the plan's. */
static void check_terms(const adam_layout *l, int cores, double bandwidth, const char *bound) {
    zoe_plan_config p = on_box("1.3b", "h200", 1, l->state);
    p.hardware.host_cores = cores, p.hardware.host_bandwidth = bandwidth;
    if (l->backend == ZOE_BACKEND_CPU) {
        zoe_hardware cpu = p.hardware;
        CHECK_OK(zoe_hardware_local(0, &cpu));
        cpu.host_cores = cores, cpu.host_bandwidth = bandwidth;
        cpu.gpu_peak_flops = 1e12, cpu.nvlink_bandwidth = bandwidth;
        p.hardware = cpu;
    }
    p.dtype = l->compute;
    zoe_plan_result r;
    if (!CHECK_OK(zoe_plan(&p, &r))) return;
    double n = (double)r.state_params;
    double memory = n * l->bytes_per_param / bandwidth,
           compute = n * l->ns_per_param * 1e-9 / cores;
    double expect = fmax(memory, compute);
    printf("%-12s on %3d cores at %4.0f GB/s: host Adam %.4f s (memory %.4f, compute %.4f; worked "
           "out here %.4f, %.4f), %s-bound\n",
           l->bench_mode, cores, bandwidth / 1e9, r.time.host_adam, r.time.host_adam_memory,
           r.time.host_adam_compute, memory, compute, r.time.host_adam_bound);
    /* the plan's constants are the bench's figures written to 3 decimals: their sum matches to
     * rounding (1e-9 relative), the bytes are integers */
    CHECK(fabs(r.time.host_adam_memory - memory) <= 1e-9 * memory,
          "%s: memory %.6f s, expected %.6f", l->bench_mode, r.time.host_adam_memory, memory);
    CHECK(fabs(r.time.host_adam_compute - compute) <= 1e-9 * compute,
          "%s: compute %.6f s, expected %.6f", l->bench_mode, r.time.host_adam_compute, compute);
    CHECK(fabs(r.time.host_adam - expect) <= 1e-9 * expect, "%s: host Adam %.6f s, expected %.6f",
          l->bench_mode, r.time.host_adam, expect);
    CHECK(!strcmp(r.time.host_adam_bound, bound), "%s on %d cores at %.0f GB/s: %s-bound, not %s",
          l->bench_mode, cores, bandwidth / 1e9, r.time.host_adam_bound, bound);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* Two cores with 1000 GB/s (500 per core) compute more slowly than they stream, every
     * layout (its bytes over its ns: 28 / 0.139 = 201 GB/s per core at the most); 16 cores with
     * 100 GB/s, the h200 preset's host, stream more slowly than they compute (int8: 14 bytes /
     * 1.06 ns = 13 GB/s per core's arithmetic against 6.25 of bandwidth per core). */
    for (int i = 0; i < (int)(sizeof layouts / sizeof layouts[0]); i++) {
        check_terms(&layouts[i], 2, 1000e9, "compute");
        check_terms(&layouts[i], 16, 100e9, "memory");
    }
    double dgx2[4] = {largest("dgx2", 16, 0, 0), largest("dgx2", 16, 1, 0),
                      largest("dgx2", 16, 2, 0), largest("dgx2", 16, 2, 1)};
    double a100[4] = {largest("dgx-a100-80g", 8, 0, 0), largest("dgx-a100-80g", 8, 1, 0),
                      largest("dgx-a100-80g", 8, 2, 0), largest("dgx-a100-80g", 8, 2, 1)};
    printf("largest GPT with offload: DGX-2 TP=16 %.2fB -> %.2fB -> %.2fB -> %.2fB, DGX "
           "A100-80GB TP=8 %.2fB -> %.2fB -> %.2fB -> %.2fB (fp32 -> bf16 state -> bf16 master "
           "with int8 moments -> and a 2-byte gradient partition)\n",
           dgx2[0], dgx2[1], dgx2[2], dgx2[3], a100[0], a100[1], a100[2], a100[3]);
    /* 16, 10 and 8.03 bytes held per parameter: each smaller state reaches the next member of
     * the family (a step of tp layers); the 2-byte gradient (6.03) at least holds its own */
    for (int i = 1; i < 4; i++)
        CHECK(dgx2[i] >= dgx2[i - 1] && a100[i] >= a100[i - 1] &&
                  (i == 3 || (dgx2[i] > dgx2[i - 1] && a100[i] > a100[i - 1])),
              "state %d: DGX-2 %.1fB after %.1fB, DGX A100 %.1fB after %.1fB", i, dgx2[i],
              dgx2[i - 1], a100[i], a100[i - 1]);

    zoe_plan_result r32, r16, r8;
    zoe_plan_config p32 = on_box("70b", "dgx2", 16, 0), p16 = on_box("70b", "dgx2", 16, 1);
    p32.micro_batch = p16.micro_batch = 8, p32.recompute = p16.recompute = 1;
    CHECK_OK(zoe_plan(&p32, &r32));
    CHECK_OK(zoe_plan(&p16, &r16));
    zoe_plan_config p8 = on_box("70b", "dgx2", 16, 2);
    p8.micro_batch = 8, p8.recompute = 1;
    CHECK_OK(zoe_plan(&p8, &r8));
    printf("70b on a DGX-2, TP=16, int8 moments: host Adam %.2f s (%.3f of fp32's: 14 bytes moved "
           "of 30)\n",
           r8.time.host_adam, r8.time.host_adam / r32.time.host_adam);
    CHECK(r8.time.host_adam < r16.time.host_adam, "host Adam with int8 moments %.2f s, bf16 %.2f s",
          r8.time.host_adam, r16.time.host_adam);
    double ratio = r16.time.host_adam / r32.time.host_adam;
    printf("70b on a DGX-2, TP=16: host Adam %.2f s -> %.2f s (%.3f), step %.2f s -> %.2f s\n",
           r32.time.host_adam, r16.time.host_adam, ratio, r32.time.step, r16.time.step);
    CHECK(ratio <= 0.65, "host Adam with bf16 state takes %.3f of fp32's", ratio);
    /* The 70B figures that docs/plan.md, docs/offload.md and README.md quote, from before the
     * arithmetic term, stay: the DGX-2's host Adam is memory-bound in every state dtype, the
     * bytes moved (30, 18, 14 per parameter) over 75% of 2 x 6 channels of DDR4-2666. */
    const double dgx2_bandwidth = 0.75 * 2 * 6 * 2666e6 * 8, bytes[3] = {30, 18, 14};
    const zoe_plan_result *seventy[3] = {&r32, &r16, &r8};
    for (int s = 0; s < 3; s++) {
        const zoe_plan_result *q = seventy[s];
        double memory = (double)q->state_params * q->ranks_per_node * bytes[s] / dgx2_bandwidth;
        CHECK(!strcmp(q->time.host_adam_bound, "memory") &&
                  fabs(q->time.host_adam - memory) <= 1e-9 * memory,
              "70b on a DGX-2, state %d: host Adam %.4f s %s-bound, expected %.4f memory-bound", s,
              q->time.host_adam, q->time.host_adam_bound, memory);
    }
    CHECK(fabs(r32.time.host_adam - 11.10) < 0.005 && fabs(r16.time.host_adam - 6.66) < 0.005 &&
              fabs(r8.time.host_adam - 5.18) < 0.005 && fabs(r32.time.step - 21.24) < 0.005,
          "70b on a DGX-2: host Adam %.3f / %.3f / %.3f s, step %.3f s (docs: 11.10 / 6.66 / 5.18, "
          "21.24)",
          r32.time.host_adam, r16.time.host_adam, r8.time.host_adam, r32.time.step);
    /* and the other presets with int8 moments, their arithmetic the slowest: memory binds */
    const char *boxes[] = {"dgx-a100-80g", "dgx-h100", "h200"};
    for (int b = 0; b < 3; b++) {
        zoe_plan_config pb = on_box(b == 2 ? "13b" : "70b", boxes[b], b == 2 ? 1 : 8, 2);
        zoe_plan_result rb;
        if (!CHECK_OK(zoe_plan(&pb, &rb))) continue;
        printf("%s, int8 moments: host Adam %.3f s, memory %.3f, compute %.3f (%d cores)\n",
               boxes[b], rb.time.host_adam, rb.time.host_adam_memory, rb.time.host_adam_compute,
               rb.time.host_adam_cores);
        CHECK(!strcmp(rb.time.host_adam_bound, "memory"), "%s with int8 moments: %s-bound",
              boxes[b], rb.time.host_adam_bound);
    }
    CHECK(r16.fits && r32.fits, "70b does not fit a DGX-2 (fp32 %d, bf16 %d)", r32.fits, r16.fits);
    return test_finish("test_plan_state");
}
