/* TP-invariant hidden dropout. The mask of element e depends on (seed, site, step, e) only, so
 * every TP rank, and a TP=1 run, drop the same elements of the replicated hidden state. The
 * CPU backend's device memory is host memory, so this loop is its kernel; a CUDA kernel with
 * the same Philox counter layout belongs in kernels/ (not there yet). */
#include <math.h>
#include "runtime/error.h"
#include "tensor_parallel/layers.h"
#include "tensor_parallel/philox.h"

static float load(zoe_dtype dt, const void *p, int64_t i) {
    if (dt == ZOE_F32) return ((const float *)p)[i];
    if (dt == ZOE_BF16) return zoe_bf16_to_f32(((const uint16_t *)p)[i]);
    return zoe_f16_to_f32(((const uint16_t *)p)[i]);
}

static void store(zoe_dtype dt, void *p, int64_t i, float v) {
    if (dt == ZOE_F32)
        ((float *)p)[i] = v;
    else if (dt == ZOE_BF16)
        ((uint16_t *)p)[i] = zoe_f32_to_bf16(v);
    else
        ((uint16_t *)p)[i] = zoe_f32_to_f16(v);
}

/* dst = src * mask / (1 - p): forward and backward are the same map. */
static zoe_status apply_mask(const zoe_tp *tp, void *dst, const void *src, int64_t n, float p,
                             uint64_t site, uint64_t step) {
    if (!(p >= 0.0f && p < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dropout p=%g outside [0, 1)", (double)p);
    if (zoe_device_backend(tp->device) != ZOE_BACKEND_CPU)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "hidden dropout p=%g needs a %s dropout kernel",
                        (double)p, zoe_backend_name(zoe_device_backend(tp->device)));
    const uint32_t threshold = (uint32_t)lrint((double)p * 16777216.0);
    const float keep_scale = 1.0f / (1.0f - p);
    const uint64_t stream = zoe_philox_stream_at_step(site, step), seed = tp->seed;
    const zoe_dtype dt = tp->dtype;
    const int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        uint32_t bits[4];
        int64_t first = 4 * b, count = n - first < 4 ? n - first : 4;
        zoe_philox_bits24_fill(bits, (size_t)count, seed, stream, (uint64_t)first);
        for (int64_t j = 0; j < count; j++) {
            float v = bits[j] >= threshold ? load(dt, src, first + j) * keep_scale : 0.0f;
            store(dt, dst, first + j, v);
        }
    }
    return ZOE_OK;
}

zoe_status zoe_tp_dropout_forward(const zoe_tp *tp, void *dst, const void *src, int64_t n, float p,
                                  uint64_t site, uint64_t step) {
    return apply_mask(tp, dst, src, n, p, site, step);
}

zoe_status zoe_tp_dropout_backward(const zoe_tp *tp, void *dst, const void *dy, int64_t n, float p,
                                   uint64_t site, uint64_t step) {
    return apply_mask(tp, dst, dy, n, p, site, step);
}
