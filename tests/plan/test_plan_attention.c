/* The plan's attention follows the kernels that will run it (kernels/attention_plan.h): on the
 * tensor cores (bf16 from A100 on, fp16 on V100 too) the GEMMs' FLOPs at the share of peak the
 * step reaches plus the scores' traffic through device memory; in fp32 (and bf16 on V100) the
 * flash kernels on the CUDA cores, no longer at the tensor cores' rate. The workspace holds the
 * tensor-core path's scores. Expected times are recounted here from the shapes. */
#include <math.h>
#include <string.h>
#include "testing.h"
#include "zoe/plan.h"

#define MIB (1024.0 * 1024.0)

static zoe_plan_result plan(const char *hw, const char *model, int tp, int seq, zoe_dtype dt,
                            zoe_plan_config *pc) {
    zoe_plan_config_init(pc);
    CHECK_OK(zoe_hardware_preset(hw, &pc->hardware));
    CHECK_OK(zoe_model_preset(model, &pc->model));
    pc->model.seq_len = seq;
    pc->tp = tp;
    pc->micro_batch = 1;
    pc->recompute = 1;
    pc->dtype = dt;
    zoe_plan_result r;
    memset(&r, 0, sizeof r);
    CHECK_OK(zoe_plan(pc, &r));
    return r;
}

/* Model FLOPs of attention's scores per step and GPU (Megatron-LM's 4 s h per token and layer,
 * forward, backward twice and the recomputed forward). */
static double model_attention_flops(const zoe_plan_config *pc) {
    const zoe_model_config *m = &pc->model;
    return (double)pc->micro_batch * m->seq_len * m->layers * 4.0 * m->seq_len * m->hidden * 4.0 /
           pc->tp;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_plan_config pc;

    /* llama-3-70b at TP=8, seq 4096, bf16 on H100: 8 query heads of 128 per rank; a head's
     * 4096 x 4096 scores (201 MiB) fit the 256 MiB scratch, so each pass takes one head and all
     * rows: per layer 2 GEMMs forward (twice, recompute) and 5 backward of 2 T^2 HS each, and
     * 14 bytes per score forward, 26 backward. */
    zoe_plan_result r = plan("dgx-h100", "llama-3-70b", 8, 4096, ZOE_BF16, &pc);
    CHECK(strstr(r.time.attention_path, "tensor cores") != NULL, "H100 bf16: %s",
          r.time.attention_path);
    const double T = 4096, scores = T * T * 8, layers = 80;
    const double flops = (2 * 2 + 5) * 2.0 * scores * 128, bytes = (14.0 * 2 + 26.0) * scores;
    const zoe_hardware *hw = &pc.hardware;
    const double want = layers * (flops / (hw->gpu_peak_flops * hw->gpu_fraction) +
                                  bytes / hw->gpu_memory_bandwidth);
    CHECK(fabs(r.time.attention - want) <= 1e-9 * want, "H100 bf16 attention %.6g s, want %.6g",
          r.time.attention, want);
    CHECK(r.gpu.workspace >= 256 * MIB + 32 * MIB,
          "the workspace (%.1f MiB) holds the 256 MiB of scores and cuBLAS's 32 MiB",
          r.gpu.workspace / MIB);
    const double bf16_compute = r.time.compute, bf16_attention = r.time.attention;

    /* The same in fp32: the flash kernels on the CUDA cores, 32-row tiles. They compute the
     * causal half and recompute P (3.5 of the formula's 4 backward products, 1 of its 2
     * forward ones), at most at the fp32 peak: far slower than the formula's FLOPs at the
     * tensor cores' rate, which the plan used to charge. */
    r = plan("dgx-h100", "llama-3-70b", 8, 4096, ZOE_F32, &pc);
    CHECK(strstr(r.time.attention_path, "fp32 flash kernels, 32/32-row tiles") != NULL,
          "H100 fp32: %s", r.time.attention_path);
    const double formula = model_attention_flops(&pc);
    CHECK(r.time.attention >= 0.5 * formula / hw->gpu_fp32_flops,
          "fp32 attention %.3g s below the causal FLOPs at the fp32 peak (%.3g s)",
          r.time.attention, 0.5 * formula / hw->gpu_fp32_flops);
    CHECK(r.time.attention > 10 * formula / (hw->gpu_peak_flops * hw->gpu_fraction),
          "fp32 attention priced near the tensor cores' rate");
    CHECK(r.time.attention > 3 * bf16_attention && r.time.compute > bf16_compute,
          "fp32 attention %.3g s vs bf16 %.3g s", r.time.attention, bf16_attention);

    /* V100: fp16 on the tensor cores, with row blocks at seq 8192 (llama-3-70b at TP=16);
     * bf16 would have none (flash); fp32 head size 256 takes V100's 16-row forward and 8-row
     * backward tiles. */
    r = plan("dgx2", "llama-3-70b", 16, 8192, ZOE_F16, &pc);
    CHECK(strstr(r.time.attention_path, "tensor cores") != NULL, "V100 fp16: %s",
          r.time.attention_path);
    CHECK(r.time.attention > 0 && r.gpu.workspace >= 256 * MIB, "V100 fp16 seq 8192");
    zoe_plan_config_init(&pc);
    CHECK_OK(zoe_hardware_preset("v100-32g", &pc.hardware));
    CHECK_OK(zoe_model_preset("gpt2-350m", &pc.model));
    pc.model.heads = 4; /* head size 256 */
    pc.dtype = ZOE_F32;
    pc.micro_batch = 1;
    CHECK_OK(zoe_plan(&pc, &r));
    CHECK(strstr(r.time.attention_path, "fp32 flash kernels, 16/8-row tiles") != NULL,
          "V100 fp32 HS 256: %s", r.time.attention_path);

    /* gpt2-124m on one H200 in bf16: 12 heads of 1024 x 1024 scores, 144 MiB of scratch. */
    r = plan("h200", "gpt2-124m", 1, 1024, ZOE_BF16, &pc);
    CHECK(r.gpu.workspace >= 144 * MIB + 32 * MIB && r.gpu.workspace < 256 * MIB + 32 * MIB,
          "gpt2-124m workspace %.1f MiB", r.gpu.workspace / MIB);

    /* The CPU backend prices attention with its matmuls, as before. */
    zoe_plan_config_init(&pc);
    CHECK_OK(zoe_hardware_local(0, &pc.hardware));
    pc.hardware.gpu_peak_flops = 1e11, pc.hardware.host_bandwidth = 1e10;
    CHECK_OK(zoe_plan(&pc, &r));
    CHECK(r.time.attention == 0 && r.time.attention_path[0] == 0, "CPU attention priced apart");
    return test_finish("test_plan_attention");
}
