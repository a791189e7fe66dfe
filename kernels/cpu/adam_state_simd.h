/* Internal: the host Adam over compressed state (kernels/adam_state.h), its element written once
 * and its vector loop instantiated per instruction set, as adam_simd.h does for fp32 state.
 *
 * A file that instantiates the loop defines, besides adam_simd.h's float macros (VF, W, V_SET1,
 * V_MUL, V_DIV, V_FMA, V_SQRT, V_LOAD_F32, V_STORE_F32, V_LOAD_BF16, V_LOAD_F16):
 *   VI                  the integer vector of W 32-bit lanes
 *   VI_SET1(x) VI_ADD(a,b) VI_XOR(a,b) VI_AND(a,b) VI_MULLO(a,b) VI_SRLI(a,n) VI_SLLI(a,n)
 *   VI_IOTA()
 *   V_AS_I(x) V_AS_F(x) reinterpretations
 *   V_SR_NAN(u, r, x)   r with the lanes where x is NaN replaced by (u >> 16) | 0x40
 *   V_STORE_LOW16(p, r) the low 16 bits of each lane of r to W 16-bit values at p
 *   V_ROUND_BF16(x)     round to nearest even into the low 16 bits (NaN quiet), as VI
 *   V_STORE_F16(p, x)   W fp16 values, round to nearest even
 *   STATE_FN(name)      the name of an instantiated function
 * and is compiled whole for its instruction set.
 *
 * Explained in docs/offload.md, "Compressed state". */
#ifndef ZOE_KERNELS_CPU_ADAM_STATE_SIMD_H
#define ZOE_KERNELS_CPU_ADAM_STATE_SIMD_H

#include "kernels/adam_state.h"
/* adam_simd.h comes first (its scalar element), included by the including file. */

/* The key of one step for the elements whose index has one high word. */
typedef struct zoe_adam_state_keys {
    uint32_t key;
} zoe_adam_state_keys;

static inline zoe_adam_state_keys zoe_adam_state_keys_of(const zoe_adam_rounding *r, uint32_t hi) {
    return (zoe_adam_state_keys){.key = zoe_sr_key(r, hi)};
}

static inline float adam_state_load(const void *p, size_t i, zoe_dtype dt) {
    return dt == ZOE_BF16 ? zoe_bf16_to_f32(((const zoe_bf16 *)p)[i]) : ((const float *)p)[i];
}

/* Stores x in dtype dt (bf16: stochastically with the 16 random bits given, or to nearest even
 * when nearest) and returns the value as stored. */
static inline float adam_state_store(void *p, size_t i, zoe_dtype dt, float x, uint32_t bits16,
                                     int nearest) {
    if (dt != ZOE_BF16) return ((float *)p)[i] = x;
    zoe_bf16 b = nearest ? zoe_f32_to_bf16(x) : zoe_sr_bf16(x, bits16);
    ((zoe_bf16 *)p)[i] = b;
    return zoe_bf16_to_f32(b);
}

/* v_bits, in the calls below: NULL, or where each element's high 16 random bits go (an int8
 * v's stochastic rounding, adam_state_int8.c: the hash computed once per element), element 0
 * at element 0 of the call. */
void zoe_adam_state_scalar_range(const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                                 const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                 uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                                 uint16_t *v_bits, size_t lo, size_t hi);
/* The step of path isa over n elements whose indices share their high word (key k), arguments
 * checked: the vector loop of the path, or the scalar one. */
void zoe_adam_state_path(zoe_cpu_isa isa, const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                         const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                         uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                         uint16_t *v_bits, size_t n);
/* The step over pieces with an int8 moment (adam_state_int8.c), a block at a time, on path isa
 * (zoe_adam_state_host_pieces_isa, arguments checked). */
zoe_status zoe_adam_state_int8_pieces(zoe_cpu_isa isa, const zoe_adam_rounding *r,
                                      const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                      uint64_t index0, const zoe_adam_state_piece *pieces,
                                      int num_pieces, zoe_dtype gdt, zoe_dtype odt, size_t n);
/* The vector loops (adam_avx2.c, adam_avx512.c; the AVX512_BF16 level runs the AVX-512 one: the
 * stochastic stores are integer adds, and the output rounding is the same either way). All
 * element indices of a call share their high word: index_lo is the low word of element 0. */
void zoe_adam_state_avx2(const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                         const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                         uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                         uint16_t *v_bits, size_t n);
void zoe_adam_state_avx512(const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                           const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                           uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                           uint16_t *v_bits, size_t n);

#endif /* ZOE_KERNELS_CPU_ADAM_STATE_SIMD_H */

#ifdef STATE_FN
/* ---- the vector loop, instantiated once per including file ---- */

static inline __attribute__((always_inline)) VI STATE_FN(state_hash)(VI x) {
    x = VI_XOR(x, VI_SRLI(x, 16));
    x = VI_MULLO(x, VI_SET1((int)0x7feb352dU));
    x = VI_XOR(x, VI_SRLI(x, 15));
    x = VI_MULLO(x, VI_SET1((int)0x846ca68bU));
    return VI_XOR(x, VI_SRLI(x, 16));
}

/* zoe_sr_bf16 lane-wise into the low 16 bits, with random bits16 (below 2^16) per lane. */
static inline __attribute__((always_inline)) VI STATE_FN(state_sr_bf16)(VF x, VI bits16) {
    VI u = V_AS_I(x);
    return V_SR_NAN(u, VI_SRLI(VI_ADD(u, bits16), 16), x);
}

/* W lanes of state at i: loaded widened; stored (and returned as stored, for the output). */
static inline __attribute__((always_inline)) VF STATE_FN(state_load)(const void *p, size_t i,
                                                                     zoe_dtype dt) {
    return dt == ZOE_BF16 ? V_LOAD_BF16((const zoe_bf16 *)p + i) : V_LOAD_F32((const float *)p + i);
}

/* As adam_state_store: stochastically with bits16 per lane, or to nearest even. */
static inline __attribute__((always_inline)) VF
STATE_FN(state_store)(void *p, size_t i, zoe_dtype dt, VF x, VI bits16, int nearest) {
    if (dt != ZOE_BF16) {
        V_STORE_F32((float *)p + i, x);
        return x;
    }
    VI b = nearest ? V_ROUND_BF16(x) : STATE_FN(state_sr_bf16)(x, bits16);
    V_STORE_LOW16((zoe_bf16 *)p + i, b);
    return V_AS_F(VI_SLLI(b, 16));
}

static inline __attribute__((always_inline)) VF STATE_FN(state_grad)(const void *p, size_t i,
                                                                     int dt) {
    if (dt == ZOE_BF16) return V_LOAD_BF16((const zoe_bf16 *)p + i);
    if (dt == ZOE_F16) return V_LOAD_F16((const zoe_f16 *)p + i);
    return V_LOAD_F32((const float *)p + i);
}

static inline __attribute__((always_inline)) void STATE_FN(state_out)(void *p, size_t i, int dt,
                                                                      VF x) {
    if (dt == ZOE_BF16)
        V_STORE_LOW16((zoe_bf16 *)p + i, V_ROUND_BF16(x));
    else if (dt == ZOE_F16)
        V_STORE_F16((zoe_f16 *)p + i, x);
    else if (dt == ZOE_F32)
        V_STORE_F32((float *)p + i, x);
}

/* adam_element() on W lanes, then the three stores: the operations of the scalar path in its
 * order, so every lane has the scalar path's bits. Every dtype is a constant at the call site. */
static inline __attribute__((always_inline)) void
STATE_FN(state_body)(const zoe_adam_consts *c, const zoe_adam_state_keys *k, zoe_dtype mdt,
                     zoe_dtype adt, zoe_dtype sdt, const zoe_adam_state *st, uint32_t index_lo,
                     const void *grad, int gdt, void *out, int odt, uint16_t *v_bits, size_t n) {
    const VF gs = V_SET1(c->grad_scale), l2 = V_SET1(c->l2), b1 = V_SET1(c->beta1),
             omb1 = V_SET1(c->one_minus_beta1), b2 = V_SET1(c->beta2),
             omb2 = V_SET1(c->one_minus_beta2), decay = V_SET1(c->decay),
             neg_step = V_SET1(-c->step_size), isb2 = V_SET1(c->inv_sqrt_bc2), eps = V_SET1(c->eps);
    const VI key = VI_SET1((int)k->key), lanes = VI_IOTA(), low16 = VI_SET1(0xffff);
    const int dec = c->decoupled;
    size_t i = 0;
    for (; i + W <= n; i += W) {
        VI idx = VI_ADD(VI_SET1((int)(index_lo + (uint32_t)i)), lanes);
        VF w = STATE_FN(state_load)(st->master, i, mdt);
        VF g = V_MUL(STATE_FN(state_grad)(grad, i, gdt), gs);
        if (!dec) g = V_FMA(l2, w, g);
        VF mm = V_FMA(b1, STATE_FN(state_load)(st->exp_avg, i, adt), V_MUL(omb1, g));
        VF vv = V_FMA(b2, STATE_FN(state_load)(st->exp_avg_sq, i, sdt), V_MUL(omb2, V_MUL(g, g)));
        if (dec) w = V_MUL(w, decay);
        w = V_FMA(neg_step, V_DIV(mm, V_FMA(V_SQRT(vv), isb2, eps)), w);
        /* one hash per element, when a store is stochastic (the dtypes are constants here) or an
         * int8 v takes its bits */
        VI r = mdt == ZOE_BF16 || sdt == ZOE_BF16 || v_bits ? STATE_FN(state_hash)(VI_XOR(idx, key))
                                                            : idx;
        if (v_bits) V_STORE_LOW16(v_bits + i, VI_SRLI(r, 16));
        if (mdt == ZOE_BF16 && odt == ZOE_BF16) {
            /* The weights out are the bf16 master as stored: rounding it again to nearest would
             * give the same bits (a quiet NaN stays itself), so its bits are stored twice. */
            VI b = STATE_FN(state_sr_bf16)(w, VI_AND(r, low16));
            V_STORE_LOW16((zoe_bf16 *)st->master + i, b);
            V_STORE_LOW16((zoe_bf16 *)out + i, b);
        } else {
            VF stored = STATE_FN(state_store)(st->master, i, mdt, w, VI_AND(r, low16), 0);
            STATE_FN(state_out)(out, i, odt, stored);
        }
        STATE_FN(state_store)(st->exp_avg, i, adt, mm, r, 1);
        STATE_FN(state_store)(st->exp_avg_sq, i, sdt, vv, VI_SRLI(r, 16), 0);
    }
    zoe_adam_state_dtypes dt = {.master = mdt, .exp_avg = adt, .exp_avg_sq = sdt};
    zoe_adam_state_scalar_range(c, k, &dt, st, index_lo, grad, gdt, out, odt, v_bits, i, n);
}

/* Every (state dtypes, gradient dtype, output dtype) its own loop. */
#define STATE_BODY(mdt, adt, sdt, gd, od)                                                          \
    STATE_FN(state_body)(c, k, mdt, adt, sdt, st, index_lo, grad, gd, out, od, v_bits, n)
#define STATE_OUT_CASES(mdt, adt, sdt, gd)                                                         \
    switch (odt) {                                                                                 \
    case ZOE_F32:                                                                                  \
        STATE_BODY(mdt, adt, sdt, gd, ZOE_F32);                                                    \
        break;                                                                                     \
    case ZOE_BF16:                                                                                 \
        STATE_BODY(mdt, adt, sdt, gd, ZOE_BF16);                                                   \
        break;                                                                                     \
    case ZOE_F16:                                                                                  \
        STATE_BODY(mdt, adt, sdt, gd, ZOE_F16);                                                    \
        break;                                                                                     \
    default:                                                                                       \
        STATE_BODY(mdt, adt, sdt, gd, ADAM_OUT_NONE);                                              \
        break;                                                                                     \
    }
#define STATE_GRAD_CASES(mdt, adt, sdt)                                                            \
    switch (gdt) {                                                                                 \
    case ZOE_BF16:                                                                                 \
        STATE_OUT_CASES(mdt, adt, sdt, ZOE_BF16);                                                  \
        break;                                                                                     \
    case ZOE_F16:                                                                                  \
        STATE_OUT_CASES(mdt, adt, sdt, ZOE_F16);                                                   \
        break;                                                                                     \
    default:                                                                                       \
        STATE_OUT_CASES(mdt, adt, sdt, ZOE_F32);                                                   \
        break;                                                                                     \
    }
#define STATE_SQ_CASES(mdt, adt)                                                                   \
    if (dt->exp_avg_sq == ZOE_BF16)                                                                \
        STATE_GRAD_CASES(mdt, adt, ZOE_BF16)                                                       \
    else                                                                                           \
        STATE_GRAD_CASES(mdt, adt, ZOE_F32)
#define STATE_AVG_CASES(mdt)                                                                       \
    if (dt->exp_avg == ZOE_BF16)                                                                   \
        STATE_SQ_CASES(mdt, ZOE_BF16)                                                              \
    else                                                                                           \
        STATE_SQ_CASES(mdt, ZOE_F32)

void STATE_FN(zoe_adam_state)(const zoe_adam_consts *c, const zoe_adam_state_keys *k,
                              const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                              uint32_t index_lo, const void *grad, int gdt, void *out, int odt,
                              uint16_t *v_bits, size_t n) {
    if (dt->master == ZOE_BF16)
        STATE_AVG_CASES(ZOE_BF16)
    else
        STATE_AVG_CASES(ZOE_F32)
}
#undef STATE_AVG_CASES
#undef STATE_SQ_CASES
#undef STATE_GRAD_CASES
#undef STATE_OUT_CASES
#undef STATE_BODY
#endif /* STATE_FN */
