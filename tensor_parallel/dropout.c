/* TP-invariant hidden dropout. The mask of element e depends on (seed, site, step, e) only, so
 * every TP rank, and a TP=1 run, drop the same elements of the replicated hidden state, on
 * either backend (the kernels' zoe_dropout draws the same Philox mask on CPU and CUDA).
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#include "runtime/error.h"
#include "tensor_parallel/layers.h"
#include "kernels/philox.h"

/* dst = src * mask / (1 - p): forward and backward are the same map. */
static zoe_status apply_mask(const zoe_tp *tp, void *dst, const void *src, int64_t n, float p,
                             uint64_t site, uint64_t step) {
    if (!(p >= 0.0f && p < 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dropout p=%g outside [0, 1)", (double)p);
    return zoe_dropout(tp->kernels, tp->dtype, dst, src, n, p, tp->seed,
                       zoe_philox_stream_at_step(site, step));
}

zoe_status zoe_tp_dropout_forward(const zoe_tp *tp, void *dst, const void *src, int64_t n, float p,
                                  uint64_t site, uint64_t step) {
    return apply_mask(tp, dst, src, n, p, site, step);
}

zoe_status zoe_tp_dropout_backward(const zoe_tp *tp, void *dst, const void *dy, int64_t n, float p,
                                   uint64_t site, uint64_t step) {
    return apply_mask(tp, dst, dy, n, p, site, step);
}
