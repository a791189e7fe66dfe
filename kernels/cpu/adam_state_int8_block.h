/* Internal: one block of blockwise int8 moments (kernels/adam_state.h) quantised and read back,
 * element by element: the scalar path's block functions (adam_state_int8.c, with INT8_FN(name)
 * naming its copy) and the element functions that the vector loops of adam_state_int8_simd.h
 * (adam_avx2.c, adam_avx512.c, which define INT8_VECTOR and take no table from here) mirror lane
 * by lane and run on the elements past their last whole vector. The operations are the same in
 * every copy (no contraction: kernels/CMakeLists.txt), so the codes are the same bits.
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */
#ifndef ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H
#define ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H

#include <math.h>
#include "kernels/adam_state.h"

/* Quantises len <= ZOE_ADAM_INT8_BLOCK values of one block into codes and its one scale: m to
 * nearest; v stochastically with the 16 random bits bits16[i] (the high 16 of the step's, which
 * the step wrote out: kernels/adam_state.h), to nearest where bits16 is NULL (conversions). */
typedef void zoe_int8_quantize_m_fn(const float *x, size_t len, int8_t *codes, float *scale);
typedef void zoe_int8_quantize_v_fn(const float *x, const uint16_t *bits16, size_t len,
                                    uint8_t *codes, float *scale);
/* Reads len codes of one block with scale s back into fp32. */
typedef void zoe_int8_dequantize_m_fn(const int8_t *codes, float s, size_t len, float *x);
typedef void zoe_int8_dequantize_v_fn(const uint8_t *codes, float s, size_t len, float *x);

/* A path's block functions (adam_state_int8.c picks one per call). */
typedef struct zoe_int8_block_fns {
    zoe_int8_quantize_m_fn *quantize_m;
    zoe_int8_quantize_v_fn *quantize_v;
    zoe_int8_dequantize_m_fn *dequantize_m;
    zoe_int8_dequantize_v_fn *dequantize_v;
} zoe_int8_block_fns;

zoe_int8_block_fns zoe_int8_block_fns_scalar(void);
zoe_int8_block_fns zoe_int8_block_fns_avx2(void);
zoe_int8_block_fns zoe_int8_block_fns_avx512(void);

#endif /* ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H */

#ifdef INT8_FN
/* ---- the block functions, instantiated once per including file ---- */

/* The block's scale: the power of two s with absmax / s in (1/2, 1]; 0 for an all-zero block;
 * the NaN or infinity itself for a block holding one. A power of two, so that x / s is exact
 * (for normal results) and a dequantised block, whose largest value is in (s/2, s], finds the
 * same s again: quantising what was read back gives back the codes. The maximum is taken over
 * the bit patterns of |x| (for non-negative floats the integer order is the float order, and a
 * NaN's pattern is above infinity's): no branch per element (block_top, or a path's vector
 * loop), and the first NaN of the block is looked for only when there is one (scale_of_top). */
static inline uint32_t INT8_FN(block_top)(const float *x, size_t n) {
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        top = u > top ? u : top;
    }
    return top;
}

static inline float INT8_FN(scale_of_top)(uint32_t top, const float *x) {
    float absmax;
    memcpy(&absmax, &top, sizeof absmax);
    if (absmax != absmax) /* the block's first NaN, as the scale (rare: not vectorised) */
        for (size_t i = 0;; i++)
            if (x[i] != x[i]) return fabsf(x[i]);
    if (absmax == 0 || !isfinite(absmax)) return absmax;
    int e;
    float f = frexpf(absmax, &e); /* absmax = f 2^e, f in [1/2, 1) */
    return ldexpf(1.0f, f == 0.5f ? e - 1 : e);
}

/* The largest code k in [0, top] whose unit (zoe_adam_int8_m_unit or _v_unit) is <= y, y in
 * [0, 1]: the square law's guess, off by at most one either way (the rounding of sqrt and of
 * the units moves a value by far less than the gap between two codes' units, which is at least
 * 1 / top^2), corrected once up and once down. */
static inline __attribute__((always_inline)) int INT8_FN(code_below)(float y, int top,
                                                                     float (*unit)(int)) {
    int k = (int)(sqrtf(y) * (float)top);
    k = k > top ? top : k;
    k += (k < top) & (unit(k + 1) <= y); /* & rather than &&: no branch, the loop vectorises */
    k -= (k > 0) & (unit(k) > y);
    return k;
}

/* x / s for the block's power-of-two scale s without a division: (x * pre) * post, pre and post
 * powers of two with pre * post = 1 / s, pre = 2^64 for a tiny s so that post stays finite.
 * x * pre is exact (|x| <= s), and the one rounding of the product is that of x / s. */
typedef struct int8_inverse {
    float pre, post;
} int8_inverse;

static inline int8_inverse INT8_FN(inverse_of)(float s) {
    float pre = s < 0x1p-100f ? 0x1p64f : 1.0f;
    return (int8_inverse){.pre = pre, .post = 1.0f / (s * pre)};
}

/* The code of one element x of a block: y = |x| / s (0 where the scale is not usable: zero, NaN
 * or infinite), m to the nearest code, v stochastically with the 16 random bits (or to nearest
 * when not stochastic). A path's vector loop does the same operations per lane; its elements past
 * the last whole vector come here. */
static inline int8_t INT8_FN(m_code)(float x, int usable, int8_inverse inv) {
    float y = usable ? fabsf(x) * inv.pre * inv.post : 0;
    int k = INT8_FN(code_below)(y, 127, zoe_adam_int8_m_unit);
    float below = zoe_adam_int8_m_unit(k), above = zoe_adam_int8_m_unit(k + 1);
    k += (k < 127) & (above - y < y - below); /* nearest; a tie keeps the smaller code */
    return (int8_t)(x < 0 ? -k : k);
}

static inline uint8_t INT8_FN(v_code)(float x, uint32_t bits16, int stochastic, int usable,
                                      int8_inverse inv) {
    float y = (usable & (x > 0)) ? x * inv.pre * inv.post : 0;
    int k = INT8_FN(code_below)(y, 255, zoe_adam_int8_v_unit);
    float below = zoe_adam_int8_v_unit(k), above = zoe_adam_int8_v_unit(k + 1);
    /* up with probability (y - below) / (above - below), without the division:
     * bits / 2^16 < that fraction; never up when y is a code. Above half the scale a value
     * never rounds to a code at or below it: the block's largest value read back then stays
     * in (s/2, s] and finds the same scale. */
    int up_half = (y > 0.5f) & (below <= 0.5f);
    int up_random = (float)bits16 * (above - below) < (y - below) * 65536.0f;
    int up_nearest = above - y < y - below;
    k += (k < 255) & (up_half | (stochastic ? up_random : up_nearest));
    k += (k == 0) & (x > 0); /* never zero where v is not */
    return (uint8_t)k;
}

/* The block's scale into *scale; returns whether elements divide by it (not 0, NaN, infinity),
 * and the inverse in *inv. */
static inline int INT8_FN(scale_block)(uint32_t top, const float *x, float *scale,
                                       int8_inverse *inv) {
    float s = INT8_FN(scale_of_top)(top, x);
    *scale = s;
    int usable = s > 0 && isfinite(s);
    *inv = INT8_FN(inverse_of)(usable ? s : 1);
    return usable;
}

static inline void INT8_FN(quantize_m)(const float *x, size_t len, int8_t *codes, float *scale) {
    int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_FN(block_top)(x, len), x, scale, &inv);
    for (size_t i = 0; i < len; i++) codes[i] = INT8_FN(m_code)(x[i], usable, inv);
}

static inline void INT8_FN(quantize_v)(const float *x, const uint16_t *bits16, size_t len,
                                       uint8_t *codes, float *scale) {
    int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_FN(block_top)(x, len), x, scale, &inv);
    int stochastic = bits16 != NULL;
    for (size_t i = 0; i < len; i++)
        codes[i] = INT8_FN(v_code)(x[i], stochastic ? bits16[i] : 0, stochastic, usable, inv);
}

static inline void INT8_FN(dequantize_m)(const int8_t *codes, float s, size_t len, float *x) {
    for (size_t i = 0; i < len; i++) x[i] = zoe_adam_int8_m_value(codes[i], s);
}

static inline void INT8_FN(dequantize_v)(const uint8_t *codes, float s, size_t len, float *x) {
    for (size_t i = 0; i < len; i++) x[i] = zoe_adam_int8_v_value(codes[i], s);
}

#ifndef INT8_VECTOR /* a file with its own vector loops (adam_state_int8_simd.h) has its table */
zoe_int8_block_fns INT8_FN(zoe_int8_block_fns)(void) {
    return (zoe_int8_block_fns){.quantize_m = INT8_FN(quantize_m),
                                .quantize_v = INT8_FN(quantize_v),
                                .dequantize_m = INT8_FN(dequantize_m),
                                .dequantize_v = INT8_FN(dequantize_v)};
}
#endif
#endif
