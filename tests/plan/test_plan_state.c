/* Compressed optimizer state in the plan (docs/offload.md, "Compressed state"), from the plan
 * alone: the sizes come from the optimizer's own sizing code (test_optimizer_memory checks those
 * against the allocations), so these are the goals as the plan computes them:
 *   - bf16 master, m and v hold 10 bytes per parameter of the host partition (16 with fp32);
 *   - the largest scaled GPT with offload grows from ~91B to >= 130B on a DGX-2 (TP=16) and from
 *     ~122B to >= 180B on a DGX A100-80GB (TP=8);
 *   - the 70b preset's host Adam on a DGX-2 at TP=16 takes <= 0.65 of the fp32 state's time
 *     (18 bytes moved per parameter instead of 30: 0.6). */
#include <stdio.h>
#include "testing.h"
#include "zoe/plan.h"

static zoe_plan_config on_box(const char *model, const char *hardware, int tp, int bf16) {
    zoe_plan_config p;
    zoe_plan_config_init(&p);
    CHECK_OK(zoe_model_preset(model, &p.model));
    CHECK_OK(zoe_hardware_preset(hardware, &p.hardware));
    p.tp = tp, p.dp = p.hardware.gpus / tp;
    p.dtype = p.hardware.dtype;
    p.main_params_dtype = p.exp_avg_dtype = p.exp_avg_sq_dtype =
        bf16 ? ZOE_STATE_BF16 : ZOE_STATE_FP32;
    return p;
}

static double largest(const char *hardware, int tp, int bf16) {
    zoe_plan_config p = on_box("demo", hardware, tp, bf16);
    p.model.seq_len = 64; /* zoe-plan --max-model's default run */
    zoe_model_config best;
    zoe_plan_result r;
    if (!CHECK_OK(zoe_plan_max_model(&p, &best, &r))) return 0;
    return (double)zoe_model_param_count(&best) / 1e9;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    double dgx2[2] = {largest("dgx2", 16, 0), largest("dgx2", 16, 1)};
    double a100[2] = {largest("dgx-a100-80g", 8, 0), largest("dgx-a100-80g", 8, 1)};
    printf("largest GPT with offload: DGX-2 TP=16 %.1fB -> %.1fB, DGX A100-80GB TP=8 %.1fB -> "
           "%.1fB (fp32 -> bf16 state)\n",
           dgx2[0], dgx2[1], a100[0], a100[1]);
    CHECK(dgx2[1] >= 130 && dgx2[1] > 1.4 * dgx2[0], "DGX-2: %.1fB with bf16 state", dgx2[1]);
    CHECK(a100[1] >= 180 && a100[1] > 1.4 * a100[0], "DGX A100: %.1fB with bf16 state", a100[1]);

    zoe_plan_result r32, r16;
    zoe_plan_config p32 = on_box("70b", "dgx2", 16, 0), p16 = on_box("70b", "dgx2", 16, 1);
    p32.micro_batch = p16.micro_batch = 8, p32.recompute = p16.recompute = 1;
    CHECK_OK(zoe_plan(&p32, &r32));
    CHECK_OK(zoe_plan(&p16, &r16));
    double ratio = r16.time.host_adam / r32.time.host_adam;
    printf("70b on a DGX-2, TP=16: host Adam %.2f s -> %.2f s (%.3f), step %.2f s -> %.2f s\n",
           r32.time.host_adam, r16.time.host_adam, ratio, r32.time.step, r16.time.step);
    CHECK(ratio <= 0.65, "host Adam with bf16 state takes %.3f of fp32's", ratio);
    CHECK(r16.fits && r32.fits, "70b does not fit a DGX-2 (fp32 %d, bf16 %d)", r32.fits, r16.fits);
    return test_finish("test_plan_state");
}
