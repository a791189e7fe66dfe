/* Internal: the block functions of blockwise int8 moments (adam_state_int8_block.h) as vector
 * loops, written once and instantiated per instruction set by adam_avx2.c and adam_avx512.c, after
 * adam_state_simd.h and adam_state_int8_block.h with INT8_VECTOR defined (its element
 * functions, for the elements past the last whole vector, and no table of its own).
 *
 * Each lane does the element functions' operations in their order, so the codes are the same
 * bits, with two changes that cannot alter a result:
 *  - the codes are computed in fp32 holding integers (exact below 2^24): a unit c^2 / top^2 is
 *    (c * c) * (1 / top^2) either way, c * c being exact in fp32 as in int;
 *  - code_below's guess comes from the approximate reciprocal square root (relative error at
 *    most 2^-14 with AVX-512, 1.5 * 2^-12 with AVX2) instead of sqrtf, made a little small so
 *    that it is the answer or one below it: one correction up (instead of one up and one down)
 *    then finds the answer exactly; the guess only picks where to start (code_below below).
 * v's random bits are the ones the step wrote out for the block (its hash, computed once per
 * element). tests/offload/test_adam_int8.c compares each path's block functions with the scalar
 * ones around every code's boundary.
 *
 * The including file defines, besides adam_state_simd.h's macros:
 *   V_SUB(a,b) V_MIN(a,b) V_MAX(a,b) V_TRUNC(x)  fp32 lanes (V_TRUNC: toward zero, as an int cast)
 *   V_RSQRT(x)            an approximate 1 / sqrt(x) for normal x, relative error below 2^-11
 *   VM, VM_CMP(a,b,p)     a lane mask and the fp32 comparison with predicate p (_CMP_*)
 *   VM_AND(a,b) VM_OR(a,b)
 *   V_ADD_IF(a,m,b)       a + b in the lanes of m, a elsewhere
 *   V_SELECT(m,a,b)       a in the lanes of m, b elsewhere
 *   V_LOAD_I8(p) V_LOAD_U8(p)          W codes widened to fp32
 *   V_LOAD_U16(p)                      W 16-bit random bits widened to fp32
 *   V_STORE_I8(p,x) V_STORE_U8(p,x)    W integer-valued fp32 lanes stored as codes
 *   VI_MAX_U32(a,b) VI_HMAX_U32(a)     unsigned maximum, lane-wise and of all lanes
 *   INT8_VEC_FN(name)     the name of an instantiated function; INT8_FN that of the element ones
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */

#ifdef INT8_VEC_FN

/* zoe_adam_int8_m_unit or _v_unit of the integer-valued lanes k: (k * k) * (1 / top^2). */
static inline __attribute__((always_inline)) VF INT8_VEC_FN(unit)(VF k, VF inv_top2) {
    return V_MUL(V_MUL(k, k), inv_top2);
}

/* zoe_adam_int8_code_below lane-wise: the largest code k whose unit is <= y, y in [0, 1]. The guess
 * is g = trunc(y * rsqrt(y) * top * (1 - 2^-10)), rsqrt(y) being 1 / sqrt(y) within a relative
 * 2^-11: its argument is t = top * sqrt(y) times a factor within (1 - 2^-9, 1 - 2^-11), the
 * roundings included. The answer k is floor(t (1 + d)) with |d| < 2^-22 (the units' roundings),
 * so g <= k (the factor is below 1 - d) and g >= k - 1 (t * 2^-9 < 255 / 512 < 1): one
 * correction up finds k, and g <= k <= top needs no clamp (the unit of top + 1 is above
 * 1, so the correction never passes top). The guess's y is kept at 2^-60 or above (normal, not
 * 0, for the reciprocal square root); below that the guess is 0, as it is for y itself. */
static inline __attribute__((always_inline)) VF INT8_VEC_FN(code_below)(VF y, VF top_shrunk,
                                                                        VF inv_top2) {
    const VF one = V_SET1(1.0f);
    VF guess_y = V_MAX(y, V_SET1(0x1p-60f));
    VF k = V_TRUNC(V_MUL(V_MUL(guess_y, V_RSQRT(guess_y)), top_shrunk));
    return V_ADD_IF(k, VM_CMP(INT8_VEC_FN(unit)(V_ADD(k, one), inv_top2), y, _CMP_LE_OQ), one);
}

/* top * (1 - 2^-10), the guess's factor (above). */
#define INT8_TOP_SHRUNK(top) ((top) * (1.0f - 0x1p-10f))

/* INT8_FN(block_top) over whole vectors, the rest element-wise. */
static inline uint32_t INT8_VEC_FN(block_top)(const float *x, size_t len) {
    VI top = VI_SET1(0);
    size_t i = 0;
    for (; i + W <= len; i += W)
        top = VI_MAX_U32(top, VI_AND(V_AS_I(V_LOAD_F32(x + i)), VI_SET1(0x7fffffff)));
    uint32_t rest = INT8_FN(block_top)(x + i, len - i), vec = VI_HMAX_U32(top);
    return rest > vec ? rest : vec;
}

/* m's codes of the whole vectors of a block with a usable scale (the rest element-wise);
 * unscaled: pre is 1, so x * pre is x and is not computed (a constant at each call). Returns
 * the elements done. */
static inline __attribute__((always_inline)) size_t
INT8_VEC_FN(quantize_m_vectors)(const float *x, size_t len, int8_t *codes, zoe_int8_inverse inv,
                                int unscaled) {
    const VF pre = V_SET1(inv.pre), post = V_SET1(inv.post),
             top_shrunk = V_SET1(INT8_TOP_SHRUNK(127.0f)), inv_top2 = V_SET1(1.0f / 16129.0f),
             one = V_SET1(1.0f), zero = V_SET1(0.0f);
    size_t i = 0;
    for (; i + W <= len; i += W) {
        VF xv = V_LOAD_F32(x + i);
        VF ax = V_AS_F(VI_AND(V_AS_I(xv), VI_SET1(0x7fffffff)));
        VF y = V_MUL(unscaled ? ax : V_MUL(ax, pre), post);
        VF k = INT8_VEC_FN(code_below)(y, top_shrunk, inv_top2);
        VF below = INT8_VEC_FN(unit)(k, inv_top2),
           above = INT8_VEC_FN(unit)(V_ADD(k, one), inv_top2);
        /* (k < 127 needs no test: at 127, y - below is below 2^-23 and above - y above 0.015) */
        k = V_ADD_IF(k, VM_CMP(V_SUB(above, y), V_SUB(y, below), _CMP_LT_OQ), one);
        V_STORE_I8(codes + i, V_SELECT(VM_CMP(xv, zero, _CMP_LT_OQ), V_SUB(zero, k), k));
    }
    return i;
}

static void INT8_VEC_FN(quantize_m)(const float *x, size_t len, int8_t *codes, float *scale) {
    zoe_int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_VEC_FN(block_top)(x, len), x, scale, &inv);
    size_t i = 0; /* not usable: every y is 0, the element loop */
    if (usable && inv.pre == 1.0f)
        i = INT8_VEC_FN(quantize_m_vectors)(x, len, codes, inv, 1);
    else if (usable)
        i = INT8_VEC_FN(quantize_m_vectors)(x, len, codes, inv, 0);
    for (; i < len; i++) codes[i] = zoe_adam_int8_m_code(x[i], usable, inv);
}

/* v's codes of the whole vectors of a block with a usable scale, as quantize_m_vectors, with
 * the step's random bits (bits16 not NULL: the step's quantiser; NULL, conversions: nearest). */
static inline __attribute__((always_inline)) size_t
INT8_VEC_FN(quantize_v_vectors)(const float *x, const uint16_t *bits16, size_t len, uint8_t *codes,
                                zoe_int8_inverse inv, int unscaled) {
    const VF pre = V_SET1(inv.pre), post = V_SET1(inv.post), top = V_SET1(255.0f),
             top_shrunk = V_SET1(INT8_TOP_SHRUNK(255.0f)), inv_top2 = V_SET1(1.0f / 65025.0f),
             one = V_SET1(1.0f), zero = V_SET1(0.0f), half = V_SET1(0.5f),
             bits_scale = V_SET1(65536.0f);
    size_t i = 0;
    for (; i + W <= len; i += W) {
        VF bits = V_LOAD_U16(bits16 + i);
        VF xv = V_LOAD_F32(x + i);
        VM positive = VM_CMP(xv, zero, _CMP_GT_OQ);
        VF y = V_SELECT(positive, V_MUL(unscaled ? xv : V_MUL(xv, pre), post), zero);
        VF k = INT8_VEC_FN(code_below)(y, top_shrunk, inv_top2);
        VF below = INT8_VEC_FN(unit)(k, inv_top2),
           above = INT8_VEC_FN(unit)(V_ADD(k, one), inv_top2);
        VM up_half = VM_AND(VM_CMP(y, half, _CMP_GT_OQ), VM_CMP(below, half, _CMP_LE_OQ));
        VM up_random = VM_CMP(V_MUL(bits, V_SUB(above, below)), V_MUL(V_SUB(y, below), bits_scale),
                              _CMP_LT_OQ);
        k = V_ADD_IF(k, VM_AND(VM_CMP(k, top, _CMP_LT_OQ), VM_OR(up_half, up_random)), one);
        k = V_ADD_IF(k, VM_AND(VM_CMP(k, zero, _CMP_EQ_OQ), positive), one);
        V_STORE_U8(codes + i, k);
    }
    return i;
}

/* Conversions (bits16 NULL, to nearest) take the element functions: only the step's
 * stochastic quantiser is a vector loop. */
static void INT8_VEC_FN(quantize_v)(const float *x, const uint16_t *bits16, size_t len,
                                    uint8_t *codes, float *scale) {
    if (!bits16) {
        INT8_FN(quantize_v)(x, NULL, len, codes, scale);
        return;
    }
    zoe_int8_inverse inv;
    int usable = INT8_FN(scale_block)(INT8_VEC_FN(block_top)(x, len), x, scale, &inv);
    size_t i = 0; /* not usable: every y is 0, the element loop */
    if (usable && inv.pre == 1.0f)
        i = INT8_VEC_FN(quantize_v_vectors)(x, bits16, len, codes, inv, 1);
    else if (usable)
        i = INT8_VEC_FN(quantize_v_vectors)(x, bits16, len, codes, inv, 0);
    for (; i < len; i++) codes[i] = zoe_adam_int8_v_code(x[i], bits16[i], 1, usable, inv);
}

/* zoe_adam_int8_m_value lane-wise: the sign of the code put on its unit, then times s. */
static void INT8_VEC_FN(dequantize_m)(const int8_t *codes, float s, size_t len, float *x) {
    const VF sv = V_SET1(s), inv_top2 = V_SET1(1.0f / 16129.0f);
    const VI sign = VI_SET1((int)0x80000000u);
    size_t i = 0;
    for (; i + W <= len; i += W) {
        VF c = V_LOAD_I8(codes + i);
        VF a = INT8_VEC_FN(unit)(c, inv_top2);
        V_STORE_F32(x + i, V_MUL(sv, V_AS_F(VI_XOR(V_AS_I(a), VI_AND(V_AS_I(c), sign)))));
    }
    INT8_FN(dequantize_m)(codes + i, s, len - i, x + i);
}

static void INT8_VEC_FN(dequantize_v)(const uint8_t *codes, float s, size_t len, float *x) {
    const VF sv = V_SET1(s), inv_top2 = V_SET1(1.0f / 65025.0f);
    size_t i = 0;
    for (; i + W <= len; i += W)
        V_STORE_F32(x + i, V_MUL(sv, INT8_VEC_FN(unit)(V_LOAD_U8(codes + i), inv_top2)));
    INT8_FN(dequantize_v)(codes + i, s, len - i, x + i);
}

zoe_int8_block_fns INT8_VEC_FN(zoe_int8_block_fns)(void) {
    return (zoe_int8_block_fns){.quantize_m = INT8_VEC_FN(quantize_m),
                                .quantize_v = INT8_VEC_FN(quantize_v),
                                .dequantize_m = INT8_VEC_FN(dequantize_m),
                                .dequantize_v = INT8_VEC_FN(dequantize_v)};
}

#endif /* INT8_VEC_FN */
