/* The code rule of blockwise int8 moments (kernels/adam_state.h) element by element: a block's
 * scale from its absmax, and the code of one element under that scale. Written once for every
 * path that quantises: the CPU's block functions (kernels/cpu/adam_state_int8_block.h, whose
 * vector loops do these operations lane by lane) and the CUDA kernel of a GPU's device share
 * (kernels/cuda/adam_state.cu, compiled without contraction), so that a block quantised anywhere
 * gets the same codes. Only IEEE operations that round once (multiply, subtract, compare, a
 * division and a square root correctly rounded, frexp and ldexp) and integer arithmetic.
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */
#ifndef ZOE_KERNELS_ADAM_STATE_INT8_H
#define ZOE_KERNELS_ADAM_STATE_INT8_H

#include <math.h>
#include "kernels/adam_state.h"

/* The scale of a block whose largest |x| is absmax (not NaN): the power of two s with
 * absmax / s in (1/2, 1]; 0 for an all-zero block; infinity itself. A power of two, so that
 * x / s is exact (for normal results) and a dequantised block, whose largest value is in
 * (s/2, s], finds the same s again: quantising what was read back gives back the codes. A block
 * holding a NaN takes that NaN as its scale: the caller finds it (its first, by index). */
static inline ZOE_HOST_DEVICE float zoe_adam_int8_scale_of(float absmax) {
    if (absmax == 0 || !isfinite(absmax)) return absmax;
    int e;
    float f = frexpf(absmax, &e); /* absmax = f 2^e, f in [1/2, 1) */
    return ldexpf(1.0f, f == 0.5f ? e - 1 : e);
}

/* x / s for the block's power-of-two scale s without a division: (x * pre) * post, pre and post
 * powers of two with pre * post = 1 / s, pre = 2^64 for a tiny s so that post stays finite.
 * x * pre is exact (|x| <= s), and the one rounding of the product is that of x / s. */
typedef struct zoe_int8_inverse {
    float pre, post;
} zoe_int8_inverse;

static inline ZOE_HOST_DEVICE zoe_int8_inverse zoe_adam_int8_inverse_of(float s) {
    float pre = s < 0x1p-100f ? 0x1p64f : 1.0f;
    return (zoe_int8_inverse){.pre = pre, .post = 1.0f / (s * pre)};
}

/* Whether elements divide by scale s (not 0, NaN or infinity). */
static inline ZOE_HOST_DEVICE int zoe_adam_int8_usable(float s) {
    return s > 0 && isfinite(s);
}

/* |value| / s of code c for a code range of top (127: m, 255: v): zoe_adam_int8_m_unit or
 * zoe_adam_int8_v_unit. */
static inline ZOE_HOST_DEVICE float zoe_adam_int8_unit(int c, int top) {
    return top == 127 ? zoe_adam_int8_m_unit(c) : zoe_adam_int8_v_unit(c);
}

/* The largest code k in [0, top] whose unit is <= y, y in [0, 1]: the square law's guess, off by
 * at most one either way (the rounding of sqrt and of the units moves a value by far less than
 * the gap between two codes' units, which is at least 1 / top^2), corrected once up and once
 * down. & rather than &&: no branch, the CPU's element loops vectorise. */
static inline ZOE_HOST_DEVICE int zoe_adam_int8_code_below(float y, int top) {
    int k = (int)(sqrtf(y) * (float)top);
    k = k > top ? top : k;
    k += (k < top) & (zoe_adam_int8_unit(k + 1, top) <= y);
    k -= (k > 0) & (zoe_adam_int8_unit(k, top) > y);
    return k;
}

/* The code of one element x of m in a block with inverse inv: y = |x| / s (0 where the scale is
 * not usable), then the nearest code (a tie keeps the smaller). */
static inline ZOE_HOST_DEVICE int8_t zoe_adam_int8_m_code(float x, int usable,
                                                          zoe_int8_inverse inv) {
    float y = usable ? fabsf(x) * inv.pre * inv.post : 0;
    int k = zoe_adam_int8_code_below(y, 127);
    float below = zoe_adam_int8_m_unit(k), above = zoe_adam_int8_m_unit(k + 1);
    k += (k < 127) & (above - y < y - below);
    return (int8_t)(x < 0 ? -k : k);
}

/* The code of one element x of v: stochastically with the 16 random bits (or to nearest when not
 * stochastic), up with probability (y - below) / (above - below), without the division:
 * bits / 2^16 < that fraction; never up when y is a code. Above half the scale a value never
 * rounds to a code at or below it: the block's largest value read back then stays in (s/2, s]
 * and finds the same scale. Never code 0 where x > 0. */
static inline ZOE_HOST_DEVICE uint8_t zoe_adam_int8_v_code(float x, uint32_t bits16, int stochastic,
                                                           int usable, zoe_int8_inverse inv) {
    float y = (usable & (x > 0)) ? x * inv.pre * inv.post : 0;
    int k = zoe_adam_int8_code_below(y, 255);
    float below = zoe_adam_int8_v_unit(k), above = zoe_adam_int8_v_unit(k + 1);
    int up_half = (y > 0.5f) & (below <= 0.5f);
    int up_random = (float)bits16 * (above - below) < (y - below) * 65536.0f;
    int up_nearest = above - y < y - below;
    k += (k < 255) & (up_half | (stochastic ? up_random : up_nearest));
    k += (k == 0) & (x > 0);
    return (uint8_t)k;
}

#endif
