/* The delayed update's schedule variants (docs/offload.md, "Delayed parameter update"): the
 * weight prediction, the delay-compensated gradient and the exact schedule's undo. Separate passes
 * over a tile the fused step has just touched (or is about to), scalar and in a fixed order, so
 * they give the same bits on every CPU. */
#include <math.h>
#include "kernels/cpu/adam_simd.h"
#include "runtime/error.h"

/* The weights w moved once more by the step whose constants c are given, with the moments it
 * left (no new gradient). */
static inline float step_again(const zoe_adam_consts *c, float w, float m, float v) {
    float ww = c->decoupled ? w * c->decay : w;
    return fmaf(-c->step_size, m / fmaf(sqrtf(v), c->inv_sqrt_bc2, c->eps), ww);
}

zoe_status zoe_adam_predict_host(const zoe_adam_consts *c, float scale, const float *w,
                                 const float *m, const float *v, void *out, zoe_dtype out_dtype,
                                 size_t n) {
    if (out_dtype != ZOE_F32 && out_dtype != ZOE_BF16 && out_dtype != ZOE_F16)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "predict: dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(out_dtype));
    if (n && (!c || !w || !m || !v || !out))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "predict: NULL buffer for %zu elements", n);
    for (size_t i = 0; i < n; i++)
        adam_store_scalar(out, i, out_dtype,
                          w[i] + scale * (step_again(c, w[i], m[i], v[i]) - w[i]));
    return ZOE_OK;
}

zoe_status zoe_adam_compensate_host(const zoe_adam_consts *prev, float lambda, float grad_scale,
                                    float *grad, const float *w, const float *m, const float *v,
                                    size_t n) {
    if (n && (!prev || !grad || !w || !m || !v))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "compensate: NULL buffer for %zu elements", n);
    if (!(grad_scale > 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "compensate: gradient scale %g is not > 0",
                        (double)grad_scale);
    for (size_t i = 0; i < n; i++) {
        /* w - w_prev: the last step, undone from the moments it left (w stands for w_prev in
         * the decay term, a relative error of lr * wd). */
        float delta = step_again(prev, w[i], m[i], v[i]) - w[i];
        float g = grad[i] * grad_scale;
        float denom = fmaf(sqrtf(v[i]), prev->inv_sqrt_bc2, prev->eps);
        float corr = lambda * (g * g / denom) * delta;
        /* First order only: a correction larger than the gradient is outside its reach. */
        float bound = fabsf(g);
        corr = fminf(fmaxf(corr, -bound), bound);
        grad[i] += corr / grad_scale;
    }
    return ZOE_OK;
}

zoe_status zoe_adam_undo_host(const zoe_adam_consts *c, float *w, float *m, float *v,
                              const float *grad, void *out, zoe_dtype out_dtype, size_t n) {
    if (n && (!c || !w || !m || !v || !grad))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "undo: NULL buffer for %zu elements", n);
    if (!(c->beta1 > 0) || !(c->beta2 > 0) || !(c->decay > 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "undo: beta1 %g, beta2 %g and decay %g must be > 0 to solve the step back",
                        (double)c->beta1, (double)c->beta2, (double)c->decay);
    for (size_t i = 0; i < n; i++) {
        /* The step subtracted step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps) from the decayed
         * weight; m and v are the ones it left, so that term is known again. */
        double shift =
            (double)c->step_size * ((double)m[i] / (sqrt((double)v[i]) * c->inv_sqrt_bc2 + c->eps));
        double w0 = (double)w[i] + shift;
        if (c->decoupled) w0 /= c->decay;
        float gf = grad[i] * c->grad_scale; /* the step's own rounding of its gradient term */
        if (!c->decoupled) gf = gf + c->l2 * (float)w0;
        double g = gf;
        double m0 = ((double)m[i] - (double)c->one_minus_beta1 * g) / c->beta1;
        double v0 = ((double)v[i] - (double)c->one_minus_beta2 * (g * g)) / c->beta2;
        w[i] = (float)w0, m[i] = (float)m0, v[i] = (float)(v0 > 0 ? v0 : 0);
        if (out) adam_store_scalar(out, i, out_dtype, w[i]);
    }
    return ZOE_OK;
}
