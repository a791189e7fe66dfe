/* zoe_adam_step (zoe/adam.h): the public face of the host Adam kernel over a caller's arrays,
 * tiled over OpenMP threads as the offload optimizer tiles its partition. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
#include "runtime/error.h"
#include "zoe/adam.h"

/* A tile starts at a block boundary of int8 moments; the public header says the block's size. */
_Static_assert(ZOE_ADAM_TILE % ZOE_ADAM_INT8_BLOCK == 0, "tiles of whole int8 blocks");
_Static_assert(ZOE_ADAM_STATE_INT8_BLOCK == ZOE_ADAM_INT8_BLOCK, "zoe/adam.h's block size");

/* Whether the byte ranges [a, a + na) and [b, b + nb) share a byte. */
static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

static zoe_status check_config(const zoe_adam_config *cfg) {
    if (!cfg) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: cfg is NULL");
    ZOE_TRY(zoe_check_struct_version("zoe_adam_config", cfg->struct_size, cfg->api_version,
                                     sizeof *cfg));
    if (!(cfg->lr >= 0 && isfinite(cfg->lr)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: lr=%g is not >= 0",
                        (double)cfg->lr);
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_adam_step: betas (%g, %g) are not both in [0, 1)", (double)cfg->beta1,
                        (double)cfg->beta2);
    if (!(cfg->eps > 0 && isfinite(cfg->eps)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: eps=%g is not > 0",
                        (double)cfg->eps);
    if (!(cfg->weight_decay >= 0 && isfinite(cfg->weight_decay)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: weight_decay=%g is not >= 0",
                        (double)cfg->weight_decay);
    if (!isfinite(cfg->grad_scale))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: grad_scale=%g is not finite",
                        (double)cfg->grad_scale);
    if (cfg->step < 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: step=%ld is not >= 1", cfg->step);
    if (cfg->threads < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: threads=%d is not >= 0",
                        cfg->threads);
    return ZOE_OK;
}

static zoe_status check_arrays(const zoe_adam_config *cfg, const zoe_adam_state_arrays *st,
                               const void *grad, zoe_dtype grad_dtype, void *param,
                               zoe_dtype param_dtype, size_t n) {
    ZOE_TRY(
        zoe_adam_state_dtypes_check(&(zoe_adam_state_dtypes){.master = cfg->master_dtype,
                                                             .exp_avg = cfg->exp_avg_dtype,
                                                             .exp_avg_sq = cfg->exp_avg_sq_dtype}));
    if (!zoe_dtype_is_float(grad_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_adam_step: gradient dtype %s is not fp32, bf16 or fp16",
                        zoe_dtype_name(grad_dtype));
    if (param && !zoe_dtype_is_float(param_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_adam_step: parameter dtype %s is not fp32, bf16 or fp16",
                        zoe_dtype_name(param_dtype));
    if (!st || !st->master || !st->exp_avg || !st->exp_avg_sq || !grad)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_adam_step: NULL array for %zu elements", n);
    const size_t blocks = zoe_adam_int8_blocks(n) * sizeof(float);
    if ((cfg->exp_avg_dtype == ZOE_I8 && !st->exp_avg_scale) ||
        (cfg->exp_avg_sq_dtype == ZOE_I8 && !st->exp_avg_sq_scale))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_adam_step: an int8 moment of %zu elements without its scales", n);
    const struct {
        const char *name;
        const void *at;
        size_t bytes;
    } arrays[] = {
        {"master", st->master, n * zoe_adam_state_esize(cfg->master_dtype)},
        {"exp_avg", st->exp_avg, n * zoe_adam_state_esize(cfg->exp_avg_dtype)},
        {"exp_avg_sq", st->exp_avg_sq, n * zoe_adam_state_esize(cfg->exp_avg_sq_dtype)},
        {"exp_avg_scale", st->exp_avg_scale, cfg->exp_avg_dtype == ZOE_I8 ? blocks : 0},
        {"exp_avg_sq_scale", st->exp_avg_sq_scale, cfg->exp_avg_sq_dtype == ZOE_I8 ? blocks : 0},
        {"grad", grad, n * zoe_dtype_size(grad_dtype)},
        {"param", param, param ? n * zoe_dtype_size(param_dtype) : 0}};
    enum { ARRAYS = sizeof arrays / sizeof arrays[0] };
    for (int i = 0; i < ARRAYS; i++)
        for (int j = i + 1; j < ARRAYS; j++) {
            /* the one in-place form: the new weights over their gradient, same dtype */
            int param_over_grad =
                arrays[i].at == grad && arrays[j].at == param && param_dtype == grad_dtype;
            if (!param_over_grad &&
                overlaps(arrays[i].at, arrays[i].bytes, arrays[j].at, arrays[j].bytes))
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                "zoe_adam_step: %s and %s overlap (only param may be grad, in "
                                "grad's dtype)",
                                arrays[i].name, arrays[j].name);
        }
    return ZOE_OK;
}

/* Elements [first, first + count) of the state, a tile that starts at a block boundary. */
static zoe_adam_state tile_of(const zoe_adam_config *cfg, const zoe_adam_state_arrays *st,
                              size_t first) {
    const size_t block = first / ZOE_ADAM_INT8_BLOCK;
    return (zoe_adam_state){
        .master = (char *)st->master + first * zoe_adam_state_esize(cfg->master_dtype),
        .exp_avg = (char *)st->exp_avg + first * zoe_adam_state_esize(cfg->exp_avg_dtype),
        .exp_avg_sq = (char *)st->exp_avg_sq + first * zoe_adam_state_esize(cfg->exp_avg_sq_dtype),
        .exp_avg_scale = st->exp_avg_scale ? st->exp_avg_scale + block : NULL,
        .exp_avg_sq_scale = st->exp_avg_sq_scale ? st->exp_avg_sq_scale + block : NULL};
}

zoe_status zoe_adam_step_state(const zoe_adam_config *cfg, const zoe_adam_state_arrays *state,
                               const void *grad, zoe_dtype grad_dtype, void *param,
                               zoe_dtype param_dtype, size_t n) {
    ZOE_TRY(check_config(cfg));
    if (n == 0) return ZOE_OK;
    ZOE_TRY(check_arrays(cfg, state, grad, grad_dtype, param, param_dtype, n));
    zoe_adam_consts c;
    zoe_adam_consts_init(&c, &(zoe_adam_hparams){.lr = cfg->lr,
                                                 .beta1 = cfg->beta1,
                                                 .beta2 = cfg->beta2,
                                                 .eps = cfg->eps,
                                                 .weight_decay = cfg->weight_decay,
                                                 .decoupled = cfg->decoupled,
                                                 .grad_scale = cfg->grad_scale,
                                                 .step = cfg->step});
    const zoe_adam_state_dtypes dt = {.master = cfg->master_dtype,
                                      .exp_avg = cfg->exp_avg_dtype,
                                      .exp_avg_sq = cfg->exp_avg_sq_dtype};
    const int fp32_state =
        dt.master == ZOE_F32 && dt.exp_avg == ZOE_F32 && dt.exp_avg_sq == ZOE_F32;
    const zoe_adam_rounding rounding = {.seed = cfg->seed, .step = (uint64_t)cfg->step};
    const zoe_cpu_isa isa = zoe_cpu_isa_best();
    const size_t g_size = zoe_dtype_size(grad_dtype),
                 p_size = param ? zoe_dtype_size(param_dtype) : 0;
    const long tiles = (long)((n + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE);
    const int threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    zoe_worker_error failure = {0};
#pragma omp parallel for schedule(static) num_threads(threads) if (tiles > 1)
    for (long t = 0; t < tiles; t++) {
        size_t first = (size_t)t * ZOE_ADAM_TILE,
               count = n - first < ZOE_ADAM_TILE ? n - first : ZOE_ADAM_TILE;
        const void *g = (const char *)grad + first * g_size;
        void *out = param ? (char *)param + first * p_size : NULL;
        zoe_dtype out_dtype = param ? param_dtype : ZOE_F32;
        zoe_adam_state tile = tile_of(cfg, state, first);
        zoe_worker_error_record(
            &failure,
            fp32_state ? zoe_adam_host_to_isa(isa, &c, tile.master, tile.master, tile.exp_avg,
                                              tile.exp_avg_sq, g, grad_dtype, out, out_dtype, count)
                       : zoe_adam_state_host_isa(isa, &c, &rounding, &dt, &tile, first, g,
                                                 grad_dtype, out, out_dtype, count));
    }
    return zoe_worker_error_raise(&failure, "zoe_adam_step");
}

zoe_status zoe_adam_step(const zoe_adam_config *cfg, float *master, float *exp_avg,
                         float *exp_avg_sq, const void *grad, zoe_dtype grad_dtype, void *param,
                         zoe_dtype param_dtype, size_t n) {
    if (cfg && (cfg->master_dtype != ZOE_F32 || cfg->exp_avg_dtype != ZOE_F32 ||
                cfg->exp_avg_sq_dtype != ZOE_F32))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "zoe_adam_step: fp32 state only (master %s, exp_avg %s, exp_avg_sq %s); "
                        "zoe_adam_step_state takes the others",
                        zoe_dtype_name(cfg->master_dtype), zoe_dtype_name(cfg->exp_avg_dtype),
                        zoe_dtype_name(cfg->exp_avg_sq_dtype));
    return zoe_adam_step_state(
        cfg,
        &(zoe_adam_state_arrays){.master = master, .exp_avg = exp_avg, .exp_avg_sq = exp_avg_sq},
        grad, grad_dtype, param, param_dtype, n);
}
