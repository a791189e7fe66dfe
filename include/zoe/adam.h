/* One fused Adam/AdamW step over a caller's arrays: the host kernel of the offload optimizer
 * (zoe/optimizer.h) for trainers that hold their own parameters, such as zoe.torch.HostAdam,
 * the drop-in for DeepSpeed's CPU Adam. The same pass as the optimizer's host step, in the same
 * order of operations on every SIMD path (scalar, AVX2, AVX-512, AVX-512 BF16: the best this
 * CPU runs, bit-identical results), over OpenMP threads in tiles with a static schedule. */
#ifndef ZOE_ADAM_H
#define ZOE_ADAM_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/dtype.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The step's hyper-parameters. Start from ZOE_ADAM_CONFIG_INITIALIZER, which holds
 * torch.optim.AdamW's defaults, and override with designated initializers. A field added later
 * goes at the end; zoe_adam_step refuses a struct whose size or version is not the library's. */
typedef struct zoe_adam_config {
    size_t struct_size; /* sizeof(zoe_adam_config) where the caller was built; set for you */
    int api_version;    /* ZOE_API_VERSION where the caller was built; set for you */
    float lr;           /* >= 0 */
    float beta1, beta2; /* in [0, 1) */
    float eps;          /* > 0 */
    float weight_decay; /* >= 0 */
    int decoupled;      /* 1: AdamW (w *= 1 - lr * weight_decay); 0: Adam, L2 added to g */
    float grad_scale;   /* every gradient is multiplied by it first (1/loss scale, clipping) */
    long step;          /* 1-based number of this step, for the bias corrections */
    int threads;        /* OpenMP threads; 0: OpenMP's default (OMP_NUM_THREADS) */
    /* The dtypes of the state zoe_adam_step_state updates, as zoe-train's --main-params-dtype,
     * --exp-avg-dtype and --exp-avg-sq-dtype: the master ZOE_F32 or ZOE_BF16, each moment
     * ZOE_F32, ZOE_BF16 or ZOE_I8 (blockwise int8: one code per element and one fp32 scale per
     * ZOE_ADAM_STATE_INT8_BLOCK elements). ZOE_F32 in the initializer; zoe_adam_step takes fp32
     * only. docs/offload.md, "Compressed state", says what each costs and how it rounds. */
    zoe_dtype master_dtype, exp_avg_dtype, exp_avg_sq_dtype;
    /* A bf16 master and a bf16 or int8 second moment round stochastically, with random bits
     * that are a hash of (seed, step, element index): the same on every SIMD path and for any
     * split into threads. Give each tensor its own seed. */
    uint64_t seed;
} zoe_adam_config;

#define ZOE_ADAM_CONFIG_INITIALIZER                                                                \
    {                                                                                              \
        ZOE_STRUCT_VERSION(zoe_adam_config),                                                       \
            .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-2f,      \
            .decoupled = 1, .grad_scale = 1.0f, .step = 1, .master_dtype = ZOE_F32,                \
            .exp_avg_dtype = ZOE_F32, .exp_avg_sq_dtype = ZOE_F32                                  \
    }

/* Elements of one block of an int8 moment, which shares one fp32 scale. */
#define ZOE_ADAM_STATE_INT8_BLOCK 256

/* Per element i < n, with g = grad[i] * grad_scale (+ weight_decay * w for Adam):
 *
 *     exp_avg[i]    = beta1 * exp_avg[i] + (1 - beta1) * g
 *     exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1 - beta2) * g * g
 *     master[i]     = master[i] * (AdamW: 1 - lr * wd)
 *                     - lr / (1 - beta1^step) * exp_avg[i]
 *                       / (sqrt(exp_avg_sq[i] / (1 - beta2^step)) + eps)
 *     param[i]      = param_dtype(master[i]), nearest even, when param is not NULL
 *
 * (kernels/adam.h gives the exact operations and their order.) master, exp_avg and exp_avg_sq
 * are fp32, updated in place; grad is ZOE_F32, ZOE_BF16 or ZOE_F16; param (optional) is
 * ZOE_F32, ZOE_BF16 or ZOE_F16. In place: element i is read completely before anything of it is
 * written, so param may be grad itself (the same buffer and dtype: the new weights over the
 * gradient they were computed from); no other two arrays may overlap, which is checked. Local
 * (no MPI); the calling thread's last error names a bad argument. Explained in docs/python.md. */
zoe_status zoe_adam_step(const zoe_adam_config *cfg, float *master, float *exp_avg,
                         float *exp_avg_sq, const void *grad, zoe_dtype grad_dtype, void *param,
                         zoe_dtype param_dtype, size_t n);

/* The state of zoe_adam_step_state, each array in its dtype of cfg: element 0 of each at the
 * tensor's first element. The scales (int8 moments only, else NULL): ceil(n / 256) floats each,
 * zero for a new state (as the codes). */
typedef struct zoe_adam_state_arrays {
    void *master, *exp_avg, *exp_avg_sq;
    float *exp_avg_scale, *exp_avg_sq_scale;
} zoe_adam_state_arrays;

/* zoe_adam_step on state in cfg's dtypes: the same arithmetic in fp32 on the widened state, each
 * value stored in its dtype (a bf16 master and second moment stochastically, the first moment
 * to nearest even; int8 moments a block at a time). With a bf16 master and a bf16 param, param
 * may be NULL: the master is then the weights (a bf16 tensor updated in place). With every dtype
 * ZOE_F32 it is zoe_adam_step, bit for bit. Overlaps and arguments are checked as there. */
zoe_status zoe_adam_step_state(const zoe_adam_config *cfg, const zoe_adam_state_arrays *state,
                               const void *grad, zoe_dtype grad_dtype, void *param,
                               zoe_dtype param_dtype, size_t n);

#ifdef __cplusplus
}
#endif
#endif
