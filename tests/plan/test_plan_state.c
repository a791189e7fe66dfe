/* Compressed optimizer state in the plan (docs/offload.md, "Compressed state"), from the plan
 * alone: the sizes come from the optimizer's own sizing code (test_optimizer_memory checks those
 * against the allocations), so these are the goals as the plan computes them:
 *   - bf16 master, m and v hold 10 bytes per parameter of the host partition (16 with fp32);
 *   - the largest scaled GPT with offload grows from ~91B to >= 130B on a DGX-2 (TP=16) and from
 *     ~122B to >= 180B on a DGX A100-80GB (TP=8);
 *   - the 70b preset's host Adam on a DGX-2 at TP=16 takes <= 0.65 of the fp32 state's time
 *     (18 bytes moved per parameter instead of 30: 0.6);
 *   - a bf16 master with int8 moments (8.03 bytes held, 14 moved) goes further on both. */
#include <stdio.h>
#include "testing.h"
#include "zoe/plan.h"

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

static double largest(const char *hardware, int tp, int state) {
    zoe_plan_config p = on_box("demo", hardware, tp, state);
    p.model.seq_len = 64; /* zoe-plan --max-model's default run */
    zoe_model_config best;
    zoe_plan_result r;
    if (!CHECK_OK(zoe_plan_max_model(&p, &best, &r))) return 0;
    return (double)zoe_model_param_count(&best) / 1e9;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    double dgx2[3] = {largest("dgx2", 16, 0), largest("dgx2", 16, 1), largest("dgx2", 16, 2)};
    double a100[3] = {largest("dgx-a100-80g", 8, 0), largest("dgx-a100-80g", 8, 1),
                      largest("dgx-a100-80g", 8, 2)};
    printf("largest GPT with offload: DGX-2 TP=16 %.1fB -> %.1fB -> %.1fB, DGX A100-80GB TP=8 "
           "%.1fB -> %.1fB -> %.1fB (fp32 -> bf16 state -> bf16 master with int8 moments)\n",
           dgx2[0], dgx2[1], dgx2[2], a100[0], a100[1], a100[2]);
    CHECK(dgx2[1] >= 130 && dgx2[1] > 1.4 * dgx2[0], "DGX-2: %.1fB with bf16 state", dgx2[1]);
    CHECK(a100[1] >= 180 && a100[1] > 1.4 * a100[0], "DGX A100: %.1fB with bf16 state", a100[1]);
    /* int8 moments hold 8.03 bytes per parameter where bf16 state holds 10: 1.2x the model */
    CHECK(dgx2[2] > 1.15 * dgx2[1] && a100[2] > 1.15 * a100[1],
          "int8 moments: DGX-2 %.1fB, DGX A100 %.1fB (bf16 state %.1fB, %.1fB)", dgx2[2], a100[2],
          dgx2[1], a100[1]);

    zoe_plan_result r32, r16, r8;
    zoe_plan_config p32 = on_box("70b", "dgx2", 16, 0), p16 = on_box("70b", "dgx2", 16, 1);
    p32.micro_batch = p16.micro_batch = 8, p32.recompute = p16.recompute = 1;
    CHECK_OK(zoe_plan(&p32, &r32));
    CHECK_OK(zoe_plan(&p16, &r16));
    /* and the gradient partition in the compute dtype: 6.03 bytes held */
    zoe_plan_config g2 = on_box("demo", "dgx2", 16, 2);
    g2.model.seq_len = 64;
    g2.main_grads_dtype = g2.dtype;
    zoe_model_config best;
    zoe_plan_result rg;
    if (CHECK_OK(zoe_plan_max_model(&g2, &best, &rg))) {
        double b = (double)zoe_model_param_count(&best) / 1e9;
        printf("largest GPT with offload, int8 moments and a %s gradient partition: DGX-2 TP=16 "
               "%.1fB\n",
               zoe_dtype_name(g2.dtype), b);
        CHECK(b > 1.15 * dgx2[2], "a 2-byte gradient partition: %.1fB (4 bytes: %.1fB)", b,
              dgx2[2]);
    }
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
    CHECK(r16.fits && r32.fits, "70b does not fit a DGX-2 (fp32 %d, bf16 %d)", r32.fits, r16.fits);
    return test_finish("test_plan_state");
}
