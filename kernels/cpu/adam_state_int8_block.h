/* Internal: one block of blockwise int8 moments (kernels/adam_state.h) quantised and read back,
 * element by element with the code rule of kernels/adam_state_int8.h: the scalar path's block
 * functions (adam_state_int8.c, with INT8_FN(name) naming its copy) and the element loops that
 * the vector loops of adam_state_int8_simd.h (adam_avx2.c, adam_avx512.c, which define
 * INT8_VECTOR and take no table from here) mirror lane by lane and run on the elements past
 * their last whole vector. The operations are the same in every copy (no contraction:
 * kernels/CMakeLists.txt), so the codes are the same bits.
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */
#ifndef ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H
#define ZOE_KERNELS_CPU_ADAM_STATE_INT8_BLOCK_H

#include <math.h>
#include "kernels/adam_state_int8.h"

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

/* The block's scale (zoe_adam_int8_scale_of), the block's first NaN for a block holding one.
 * The maximum is taken over
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
    return zoe_adam_int8_scale_of(absmax);
}

/* The block's scale into *scale; returns whether elements divide by it (not 0, NaN, infinity),
 * and the inverse in *inv. */
static inline int INT8_FN(scale_block)(uint32_t top, const float *x, float *scale,
                                       zoe_int8_inverse *inv) {
    float s = INT8_FN(scale_of_top)(top, x);
    *scale = s;
    int usable = zoe_adam_int8_usable(s);
    *inv = zoe_adam_int8_inverse_of(usable ? s : 1);
    return usable;
}

static inline void INT8_FN(quantize_m)(const float *x, size_t len, int8_t *codes, float *scale) {
    zoe_int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_FN(block_top)(x, len), x, scale, &inv);
    for (size_t i = 0; i < len; i++) codes[i] = zoe_adam_int8_m_code(x[i], usable, inv);
}

static inline void INT8_FN(quantize_v)(const float *x, const uint16_t *bits16, size_t len,
                                       uint8_t *codes, float *scale) {
    zoe_int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_FN(block_top)(x, len), x, scale, &inv);
    int stochastic = bits16 != NULL;
    for (size_t i = 0; i < len; i++)
        codes[i] = zoe_adam_int8_v_code(x[i], stochastic ? bits16[i] : 0, stochastic, usable, inv);
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
