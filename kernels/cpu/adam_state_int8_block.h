/* Internal: one block of blockwise int8 moments (kernels/adam_state.h) quantised and read back,
 * written once and compiled per instruction set: adam_state_int8.c (the baseline), adam_avx2.c
 * and adam_avx512.c include it with INT8_FN(name) naming their copy. Branch-free loops over
 * the block, so that the compiler vectorises them for each file's level; the operations are the
 * same in every copy (no contraction: kernels/CMakeLists.txt), so the codes are the same bits.
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */
#ifndef ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H
#define ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H

#include <math.h>
#include "kernels/adam_state.h"

/* Quantises len <= ZOE_ADAM_INT8_BLOCK values of one block into codes and its one scale. */
typedef void zoe_int8_quantize_m_fn(const float *x, size_t len, int8_t *codes, float *scale);
typedef void zoe_int8_quantize_v_fn(const float *x, const uint16_t *bits16, size_t len,
                                    uint8_t *codes, float *scale);
/* Reads len codes of one block with scale s back into fp32. */
typedef void zoe_int8_dequantize_m_fn(const int8_t *codes, float s, size_t len, float *x);
typedef void zoe_int8_dequantize_v_fn(const uint8_t *codes, float s, size_t len, float *x);

/* The high 16 of the step's 32 random bits of elements index0 .. index0 + len - 1, len <=
 * ZOE_ADAM_INT8_BLOCK (v's stochastic rounding, kernels/adam_state.h): key0 is the key of
 * index0's high word, key1 that of the next one (a block may cross into it). */
typedef void zoe_int8_bits16_fn(uint64_t index0, uint32_t key0, uint32_t key1, size_t len,
                                uint16_t *bits16);

/* A path's block functions (adam_state_int8.c picks one per call). */
typedef struct zoe_int8_block_fns {
    zoe_int8_quantize_m_fn *quantize_m;
    zoe_int8_quantize_v_fn *quantize_v;
    zoe_int8_dequantize_m_fn *dequantize_m;
    zoe_int8_dequantize_v_fn *dequantize_v;
    zoe_int8_bits16_fn *bits16;
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
 * NaN's pattern is above infinity's): no branch per element, and the first NaN of the block is
 * looked for only when there is one. */
static inline float INT8_FN(block_scale)(const float *x, size_t n) {
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7fffffffu;
        top = u > top ? u : top;
    }
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

static void INT8_FN(quantize_m)(const float *x, size_t len, int8_t *codes, float *scale) {
    float s = INT8_FN(block_scale)(x, len);
    *scale = s;
    int usable = s > 0 && isfinite(s);
    int8_inverse inv = INT8_FN(inverse_of)(usable ? s : 1);
    for (size_t i = 0; i < len; i++) {
        float y = usable ? fabsf(x[i]) * inv.pre * inv.post : 0;
        int k = INT8_FN(code_below)(y, 127, zoe_adam_int8_m_unit);
        float below = zoe_adam_int8_m_unit(k), above = zoe_adam_int8_m_unit(k + 1);
        k += (k < 127) & (above - y < y - below); /* nearest; a tie keeps the smaller code */
        codes[i] = (int8_t)(x[i] < 0 ? -k : k);
    }
}

static void INT8_FN(quantize_v)(const float *x, const uint16_t *bits16, size_t len, uint8_t *codes,
                                float *scale) {
    float s = INT8_FN(block_scale)(x, len);
    *scale = s;
    int usable = s > 0 && isfinite(s), stochastic = bits16 != NULL;
    int8_inverse inv = INT8_FN(inverse_of)(usable ? s : 1);
    for (size_t i = 0; i < len; i++) {
        float xi = x[i];
        float y = (usable & (xi > 0)) ? xi * inv.pre * inv.post : 0;
        int k = INT8_FN(code_below)(y, 255, zoe_adam_int8_v_unit);
        float below = zoe_adam_int8_v_unit(k), above = zoe_adam_int8_v_unit(k + 1);
        /* up with probability (y - below) / (above - below), without the division:
         * bits / 2^16 < that fraction; never up when y is a code. Above half the scale a value
         * never rounds to a code at or below it: the block's largest value read back then stays
         * in (s/2, s] and finds the same scale. */
        int up_half = (y > 0.5f) & (below <= 0.5f);
        int up_random =
            (float)(stochastic ? bits16[i] : 0) * (above - below) < (y - below) * 65536.0f;
        int up_nearest = above - y < y - below;
        k += (k < 255) & (up_half | (stochastic ? up_random : up_nearest));
        k += (k == 0) & (xi > 0); /* never zero where v is not */
        codes[i] = (uint8_t)k;
    }
}

static void INT8_FN(dequantize_m)(const int8_t *codes, float s, size_t len, float *x) {
    for (size_t i = 0; i < len; i++) x[i] = zoe_adam_int8_m_value(codes[i], s);
}

static void INT8_FN(dequantize_v)(const uint8_t *codes, float s, size_t len, float *x) {
    for (size_t i = 0; i < len; i++) x[i] = zoe_adam_int8_v_value(codes[i], s);
}

static void INT8_FN(bits16)(uint64_t index0, uint32_t key0, uint32_t key1, size_t len,
                            uint16_t *bits16) {
    uint32_t word0 = (uint32_t)(index0 >> 32);
    for (size_t i = 0; i < len; i++) {
        uint64_t index = index0 + i;
        uint32_t key = (uint32_t)(index >> 32) == word0 ? key0 : key1;
        bits16[i] = (uint16_t)(zoe_sr_random(key, (uint32_t)index) >> 16);
    }
}

zoe_int8_block_fns INT8_FN(zoe_int8_block_fns)(void) {
    return (zoe_int8_block_fns){.quantize_m = INT8_FN(quantize_m),
                                .quantize_v = INT8_FN(quantize_v),
                                .dequantize_m = INT8_FN(dequantize_m),
                                .dequantize_v = INT8_FN(dequantize_v),
                                .bits16 = INT8_FN(bits16)};
}
#endif
