/* The one table of GPU specs by compute capability, and the compute dtype each GPU trains in.
 *
 * Explained in docs/gpus.md, "The dtype". */
#include <stdio.h>
#include <string.h>
#include "runtime/error.h"
#include "zoe/gpu.h"

/* A row applies to a GPU of its capability whose name contains `variant` (NULL: any name); the
 * first row that applies wins, so variants come before their capability's default. Figures:
 * NVIDIA's datasheets, dense tensor-core peaks with fp32 accumulation; SMs and the opt-in shared
 * memory per block from the CUDA programming guide's table of compute capabilities. */
typedef struct spec_row {
    const char *variant;
    zoe_gpu_spec spec;
} spec_row;

static const spec_row rows[] = {
    {NULL,
     {.capability = 70,
      .name = "V100-SXM2",
      .fp16_tflops = 125,
      .fp32_tflops = 15.7,
      .sms = 80,
      .smem_per_block = 96 * 1024}},
    {NULL,
     {.capability = 75,
      .name = "T4",
      .fp16_tflops = 65,
      .fp32_tflops = 8.1,
      .sms = 40,
      .smem_per_block = 64 * 1024}},
    {NULL,
     {.capability = 80,
      .name = "A100-SXM4",
      .fp16_tflops = 312,
      .bf16_tflops = 312,
      .tf32_tflops = 156,
      .fp32_tflops = 19.5,
      .sms = 108,
      .smem_per_block = 163 * 1024}},
    {NULL,
     {.capability = 86,
      .name = "A40",
      .fp16_tflops = 149.7,
      .bf16_tflops = 149.7,
      .tf32_tflops = 74.8,
      .fp32_tflops = 37.4,
      .sms = 84,
      .smem_per_block = 99 * 1024}},
    {NULL,
     {.capability = 89,
      .name = "L40S",
      .fp16_tflops = 362,
      .bf16_tflops = 362,
      .tf32_tflops = 183,
      .fp32_tflops = 91.6,
      .sms = 142,
      .smem_per_block = 99 * 1024}},
    {"PCIe",
     {.capability = 90,
      .name = "H100-PCIe",
      .fp16_tflops = 756,
      .bf16_tflops = 756,
      .tf32_tflops = 378,
      .fp32_tflops = 51,
      .sms = 114,
      .smem_per_block = 227 * 1024}},
    {NULL, /* the H200 is the same GH100 chip at the same clocks */
     {.capability = 90,
      .name = "H100-SXM5/H200",
      .fp16_tflops = 989,
      .bf16_tflops = 989,
      .tf32_tflops = 494,
      .fp32_tflops = 67,
      .sms = 132,
      .smem_per_block = 227 * 1024}},
};
enum { NUM_ROWS = sizeof rows / sizeof rows[0] };

int zoe_gpu_spec_of(int capability, const char *name, zoe_gpu_spec *out) {
    for (int i = 0; i < NUM_ROWS; i++) {
        const spec_row *r = &rows[i];
        if (r->spec.capability != capability) continue;
        if (r->variant && !(name && strstr(name, r->variant))) continue;
        *out = r->spec;
        out->has_bf16 = out->bf16_tflops > 0;
        out->has_tf32 = out->tf32_tflops > 0;
        return 1;
    }
    /* bf16 and TF32 tensor cores came with Ampere (sm_80) and stayed */
    *out = (zoe_gpu_spec){.capability = capability,
                          .name = "GPU",
                          .has_bf16 = capability >= 80,
                          .has_tf32 = capability >= 80};
    return 0;
}

double zoe_gpu_spec_peak_tflops(const zoe_gpu_spec *spec, zoe_dtype dtype, int tf32) {
    switch (dtype) {
    case ZOE_F16:
        return spec->fp16_tflops;
    case ZOE_BF16:
        return spec->bf16_tflops;
    case ZOE_F32:
        return tf32 && spec->has_tf32 ? spec->tf32_tflops : spec->fp32_tflops;
    default:
        return 0;
    }
}

zoe_dtype zoe_gpu_default_dtype(const zoe_gpu_spec *spec) {
    return spec->has_bf16 ? ZOE_BF16 : ZOE_F16;
}

zoe_status zoe_gpu_check_dtype(const zoe_gpu_spec *spec, zoe_dtype dtype, int tf32, char *warning,
                               size_t n) {
    if (n) warning[0] = '\0';
    if (dtype == ZOE_BF16 && !spec->has_bf16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--dtype bf16: the %s (sm_%d) has no bf16 tensor cores; use --dtype fp16 "
                        "(with dynamic loss scaling; zoe-train's default on this GPU)",
                        spec->name, spec->capability);
    if (dtype == ZOE_F32 && tf32 && !spec->has_tf32 && n)
        snprintf(warning, n,
                 "--tf32 does nothing on the %s (sm_%d): TF32 tensor cores start with sm_80; its "
                 "fp32 matmuls run on CUDA cores",
                 spec->name, spec->capability);
    return ZOE_OK;
}
