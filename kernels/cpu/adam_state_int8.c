/* The host Adam over blockwise int8 moments (kernels/adam_state.h): the codes and scales, and the
 * step a block at a time.
 *
 * Explained in docs/offload.md, "Compressed state". */
#include <math.h>
#include "kernels/adam_state.h"
#include "kernels/cpu/adam_simd.h"
#include "kernels/cpu/adam_state_simd.h"

/* The length of the block starting at lo of n elements (the last may be short). */
static size_t block_len(size_t n, size_t lo) {
    return n - lo < ZOE_ADAM_INT8_BLOCK ? n - lo : ZOE_ADAM_INT8_BLOCK;
}

/* The block's scale: the power of two s with absmax / s in (1/2, 1]; 0 for an all-zero block;
 * the NaN or infinity itself for a block holding one. A power of two, so that x / s is exact
 * (for normal results) and a dequantised block, whose largest value is in (s/2, s], finds the
 * same s again: quantising what was read back gives back the codes. */
static float block_scale(const float *x, size_t n) {
    float absmax = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= absmax)) absmax = a; /* a NaN wins and stays */
        if (absmax != absmax) return absmax;
    }
    if (absmax == 0 || isinf(absmax)) return absmax;
    int e;
    float f = frexpf(absmax, &e); /* absmax = f 2^e, f in [1/2, 1) */
    return ldexpf(1.0f, f == 0.5f ? e - 1 : e);
}

/* The largest code k in [0, top] whose unit (zoe_adam_int8_m_unit or _v_unit) is <= y, y in
 * [0, 1], from the square law's guess, corrected both ways (the guess may be off by one from
 * the rounding of sqrt and of the units). */
static int code_below(float y, int top, float (*unit)(int)) {
    int k = (int)(sqrtf(y) * (float)top);
    if (k > top) k = top;
    while (k < top && unit(k + 1) <= y) k++;
    while (k > 0 && unit(k) > y) k--;
    return k;
}

void zoe_adam_int8_quantize_m(const float *x, size_t n, int8_t *codes, float *scales) {
    for (size_t b = 0; b * ZOE_ADAM_INT8_BLOCK < n; b++) {
        size_t lo = b * ZOE_ADAM_INT8_BLOCK;
        size_t len = block_len(n, lo);
        float s = block_scale(x + lo, len);
        scales[b] = s;
        for (size_t i = 0; i < len; i++) {
            float y = s > 0 && isfinite(s) ? fabsf(x[lo + i]) / s : 0;
            int k = code_below(y, 127, zoe_adam_int8_m_unit);
            if (k < 127) {
                float below = zoe_adam_int8_m_unit(k), above = zoe_adam_int8_m_unit(k + 1);
                if (above - y < y - below) k++; /* nearest; a tie keeps the smaller code */
            }
            codes[lo + i] = (int8_t)(x[lo + i] < 0 ? -k : k);
        }
    }
}

void zoe_adam_int8_quantize_v(const float *x, const uint16_t *bits16, size_t n, uint8_t *codes,
                              float *scales) {
    for (size_t b = 0; b * ZOE_ADAM_INT8_BLOCK < n; b++) {
        size_t lo = b * ZOE_ADAM_INT8_BLOCK;
        size_t len = block_len(n, lo);
        float s = block_scale(x + lo, len);
        scales[b] = s;
        for (size_t i = 0; i < len; i++) {
            float xi = x[lo + i];
            float y = s > 0 && isfinite(s) && xi > 0 ? xi / s : 0;
            int k = code_below(y, 255, zoe_adam_int8_v_unit);
            if (k < 255) {
                float below = zoe_adam_int8_v_unit(k), above = zoe_adam_int8_v_unit(k + 1);
                /* up with probability (y - below) / (above - below), without the division:
                 * bits / 2^16 < that fraction; never up when y is a code */
                /* Above half the scale a value never rounds to a code at or below it: the block's
                 * largest value read back then stays in (s/2, s] and finds the same scale. */
                int up = y > 0.5f && below <= 0.5f ? 1
                         : bits16 ? (float)bits16[lo + i] * (above - below) < (y - below) * 65536.0f
                                  : above - y < y - below;
                k += up;
            }
            if (k == 0 && xi > 0) k = 1; /* never zero where v is not */
            codes[lo + i] = (uint8_t)k;
        }
    }
}

void zoe_adam_int8_dequantize_m(const int8_t *codes, const float *scales, size_t n, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = zoe_adam_int8_m_value(codes[i], scales[i / ZOE_ADAM_INT8_BLOCK]);
}

void zoe_adam_int8_dequantize_v(const uint8_t *codes, const float *scales, size_t n, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = zoe_adam_int8_v_value(codes[i], scales[i / ZOE_ADAM_INT8_BLOCK]);
}

/* One moment of a block widened into fp32 (int8: dequantised). */
static void load_moment(const void *p, const float *scales, zoe_dtype dt, int is_v, size_t lo,
                        size_t len, float *x) {
    for (size_t i = 0; i < len; i++) {
        if (dt != ZOE_I8)
            x[i] = adam_state_load(p, lo + i, dt);
        else if (is_v)
            x[i] = zoe_adam_int8_v_value(((const uint8_t *)p)[lo + i],
                                         scales[lo / ZOE_ADAM_INT8_BLOCK]);
        else
            x[i] = zoe_adam_int8_m_value(((const int8_t *)p)[lo + i],
                                         scales[lo / ZOE_ADAM_INT8_BLOCK]);
    }
}

void zoe_adam_state_int8_range(const zoe_adam_consts *c, const zoe_adam_rounding *r,
                               const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                               uint64_t index0, const void *grad, int gdt, void *out, int odt,
                               size_t n) {
    float m[ZOE_ADAM_INT8_BLOCK], v[ZOE_ADAM_INT8_BLOCK];
    uint16_t bits_v[ZOE_ADAM_INT8_BLOCK];
    uint32_t key_word = (uint32_t)(index0 >> 32);
    zoe_adam_state_keys k = zoe_adam_state_keys_of(r, key_word);
    for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK) {
        size_t len = block_len(n, lo);
        load_moment(st->exp_avg, st->exp_avg_scale, dt->exp_avg, 0, lo, len, m);
        load_moment(st->exp_avg_sq, st->exp_avg_sq_scale, dt->exp_avg_sq, 1, lo, len, v);
        for (size_t i = 0; i < len; i++) {
            uint64_t index = index0 + lo + i;
            if ((uint32_t)(index >> 32) != key_word) {
                key_word = (uint32_t)(index >> 32);
                k = zoe_adam_state_keys_of(r, key_word);
            }
            float w = adam_state_load(st->master, lo + i, dt->master);
            float ww =
                adam_element(c, c->decoupled, adam_load_scalar(grad, lo + i, gdt), w, &m[i], &v[i]);
            uint32_t bits = zoe_sr_random(k.key, (uint32_t)index);
            float stored = adam_state_store(st->master, lo + i, dt->master, ww, bits & 0xffff, 0);
            adam_store_scalar(out, lo + i, odt, stored);
            bits_v[i] = (uint16_t)(bits >> 16);
            if (dt->exp_avg != ZOE_I8)
                adam_state_store(st->exp_avg, lo + i, dt->exp_avg, m[i], 0, 1);
            if (dt->exp_avg_sq != ZOE_I8)
                adam_state_store(st->exp_avg_sq, lo + i, dt->exp_avg_sq, v[i], bits >> 16, 0);
        }
        size_t b = lo / ZOE_ADAM_INT8_BLOCK;
        if (dt->exp_avg == ZOE_I8)
            zoe_adam_int8_quantize_m(m, len, (int8_t *)st->exp_avg + lo, st->exp_avg_scale + b);
        if (dt->exp_avg_sq == ZOE_I8)
            zoe_adam_int8_quantize_v(v, bits_v, len, (uint8_t *)st->exp_avg_sq + lo,
                                     st->exp_avg_sq_scale + b);
    }
}
