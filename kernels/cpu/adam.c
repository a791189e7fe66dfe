/* The host Adam step: the constants, the portable path, and the choice of instruction set.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#include <math.h>
#include "kernels/cpu/adam_simd.h"
#include "runtime/error.h"

void zoe_adam_consts_init(zoe_adam_consts *c, const zoe_adam_hparams *h) {
    double bc1 = 1.0 - pow((double)h->beta1, (double)h->step);
    double bc2 = 1.0 - pow((double)h->beta2, (double)h->step);
    c->grad_scale = h->grad_scale;
    c->l2 = h->decoupled ? 0.0f : h->weight_decay;
    c->beta1 = h->beta1;
    c->one_minus_beta1 = 1.0f - h->beta1;
    c->beta2 = h->beta2;
    c->one_minus_beta2 = 1.0f - h->beta2;
    c->decay = h->decoupled ? (float)(1.0 - (double)h->lr * h->weight_decay) : 1.0f;
    c->step_size = (float)(h->lr / bc1);
    c->inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    c->eps = h->eps;
    c->decoupled = h->decoupled != 0;
}

zoe_status zoe_adam_host_to_isa(zoe_cpu_isa isa, const zoe_adam_consts *c, const float *w_in,
                                float *w_out, float *m, float *v, const void *grad,
                                zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype, size_t n) {
    if (!zoe_dtype_is_float(grad_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam: gradient dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(grad_dtype));
    if (out && !zoe_dtype_is_float(out_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam: output dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(out_dtype));
    if (n && (!c || !w_in || !w_out || !m || !v || !grad))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "adam: NULL buffer for %zu elements", n);
    if (!zoe_cpu_isa_supported(isa))
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "adam: this CPU cannot run the %s path",
                        zoe_cpu_isa_name(isa));
    int odt = out ? (int)out_dtype : ADAM_OUT_NONE;
    switch (isa) {
    case ZOE_CPU_ISA_AVX512_BF16:
        zoe_adam_avx512_bf16(c, w_in, w_out, m, v, grad, grad_dtype, out, odt, n);
        break;
    case ZOE_CPU_ISA_AVX512:
        zoe_adam_avx512(c, w_in, w_out, m, v, grad, grad_dtype, out, odt, n);
        break;
    case ZOE_CPU_ISA_AVX2:
        zoe_adam_avx2(c, w_in, w_out, m, v, grad, grad_dtype, out, odt, n);
        break;
    default:
        if (c->decoupled)
            adam_scalar_range(c, 1, w_in, w_out, m, v, grad, grad_dtype, out, odt, 0, n);
        else
            adam_scalar_range(c, 0, w_in, w_out, m, v, grad, grad_dtype, out, odt, 0, n);
        break;
    }
    return ZOE_OK;
}

zoe_status zoe_adam_host_isa(zoe_cpu_isa isa, const zoe_adam_consts *c, float *master, float *m,
                             float *v, const void *grad, zoe_dtype grad_dtype, void *out,
                             zoe_dtype out_dtype, size_t n) {
    return zoe_adam_host_to_isa(isa, c, master, master, m, v, grad, grad_dtype, out, out_dtype, n);
}

zoe_status zoe_adam_host_to(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m,
                            float *v, const void *grad, zoe_dtype grad_dtype, void *out,
                            zoe_dtype out_dtype, size_t n) {
    return zoe_adam_host_to_isa(zoe_cpu_isa_best(), c, w_in, w_out, m, v, grad, grad_dtype, out,
                                out_dtype, n);
}

zoe_status zoe_adam_host(const zoe_adam_consts *c, float *master, float *m, float *v,
                         const void *grad, zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype,
                         size_t n) {
    return zoe_adam_host_to(c, master, master, m, v, grad, grad_dtype, out, out_dtype, n);
}

zoe_status zoe_grad_snapshot_host_isa(zoe_cpu_isa isa, void *dst, zoe_dtype dst_dtype,
                                      const float *src, float scale, size_t n) {
    if (!zoe_dtype_is_float(dst_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "snapshot: dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(dst_dtype));
    if (n && (!dst || !src))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "snapshot: NULL buffer for %zu elements", n);
    if (!zoe_cpu_isa_supported(isa))
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "snapshot: this CPU cannot run the %s path",
                        zoe_cpu_isa_name(isa));
    switch (isa) {
    case ZOE_CPU_ISA_AVX512_BF16:
        zoe_snapshot_avx512_bf16(dst, dst_dtype, src, scale, n);
        break;
    case ZOE_CPU_ISA_AVX512:
        zoe_snapshot_avx512(dst, dst_dtype, src, scale, n);
        break;
    case ZOE_CPU_ISA_AVX2:
        zoe_snapshot_avx2(dst, dst_dtype, src, scale, n);
        break;
    default:
        snapshot_scalar_range(dst, dst_dtype, src, scale, 0, n);
        break;
    }
    return ZOE_OK;
}

zoe_status zoe_grad_snapshot_host(void *dst, zoe_dtype dst_dtype, const float *src, float scale,
                                  size_t n) {
    return zoe_grad_snapshot_host_isa(zoe_cpu_isa_best(), dst, dst_dtype, src, scale, n);
}

zoe_status zoe_grad_accumulate_host(float *dst, const void *src, zoe_dtype src_dtype, float scale,
                                    int assign, size_t n, double *sumsq) {
    if (!zoe_dtype_is_float(src_dtype))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "accumulate: gradient dtype %s is not fp32/bf16/fp16",
                        zoe_dtype_name(src_dtype));
    if (n && (!dst || !src))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "accumulate: NULL buffer for %zu elements", n);
    double s;
    switch (zoe_cpu_isa_best()) {
    case ZOE_CPU_ISA_AVX512_BF16:
        s = zoe_accumulate_avx512_bf16(dst, src, src_dtype, scale, assign, n);
        break;
    case ZOE_CPU_ISA_AVX512:
        s = zoe_accumulate_avx512(dst, src, src_dtype, scale, assign, n);
        break;
    case ZOE_CPU_ISA_AVX2:
        s = zoe_accumulate_avx2(dst, src, src_dtype, scale, assign, n);
        break;
    default:
        s = accumulate_scalar_range(dst, src, src_dtype, scale, assign, 0, n);
        break;
    }
    if (sumsq) *sumsq = s;
    return ZOE_OK;
}

double zoe_sumsq_host(const float *x, size_t n) {
    /* Four double accumulators: a dependency chain per lane, not one long one. */
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) s[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) s[0] += (double)x[i] * x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}
