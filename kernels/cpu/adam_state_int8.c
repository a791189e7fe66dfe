/* The host Adam over blockwise int8 moments (kernels/adam_state.h): the codes and scales, and the
 * step a block at a time: the block's int8 moments read back into fp32, the fp32-state step of
 * the chosen path on them (adam_state.c: every path's vector loop, bit-identical to the scalar
 * one), then the block requantised with that path's block functions (adam_state_int8_block.h for
 * the scalar path, the vector loops of adam_state_int8_simd.h for AVX2 and AVX-512).
 *
 * Explained in docs/offload.md, "Blockwise int8 moments". */
#include "kernels/cpu/adam_simd.h" /* ADAM_OUT_NONE */
#include "kernels/cpu/adam_state_int8_block.h"
#include "kernels/cpu/adam_state_simd.h"
#include "runtime/error.h"

#define INT8_FN(name) name##_scalar
#include "kernels/cpu/adam_state_int8_block.h"

/* The length of the block starting at lo of n elements (the last may be short). */
static size_t block_len(size_t n, size_t lo) {
    return n - lo < ZOE_ADAM_INT8_BLOCK ? n - lo : ZOE_ADAM_INT8_BLOCK;
}

void zoe_adam_int8_quantize_m(const float *x, size_t n, int8_t *codes, float *scales) {
    for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK)
        quantize_m_scalar(x + lo, block_len(n, lo), codes + lo, scales + lo / ZOE_ADAM_INT8_BLOCK);
}

void zoe_adam_int8_quantize_v(const float *x, const uint16_t *bits16, size_t n, uint8_t *codes,
                              float *scales) {
    for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK)
        quantize_v_scalar(x + lo, bits16 ? bits16 + lo : NULL, block_len(n, lo), codes + lo,
                          scales + lo / ZOE_ADAM_INT8_BLOCK);
}

void zoe_adam_int8_dequantize_m(const int8_t *codes, const float *scales, size_t n, float *x) {
    for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK)
        dequantize_m_scalar(codes + lo, scales[lo / ZOE_ADAM_INT8_BLOCK], block_len(n, lo), x + lo);
}

void zoe_adam_int8_dequantize_v(const uint8_t *codes, const float *scales, size_t n, float *x) {
    for (size_t lo = 0; lo < n; lo += ZOE_ADAM_INT8_BLOCK)
        dequantize_v_scalar(codes + lo, scales[lo / ZOE_ADAM_INT8_BLOCK], block_len(n, lo), x + lo);
}

static size_t min_size(size_t a, size_t b) {
    return a < b ? a : b;
}

zoe_status zoe_adam_moment_to_f32(zoe_dtype dt, int is_v, const void *p, const float *scales,
                                  size_t i0, size_t n, float *x) {
    if (dt != ZOE_I8)
        return zoe_convert(x, ZOE_F32, (const char *)p + i0 * zoe_dtype_size(dt), dt, n);
    for (size_t a = i0; a < i0 + n;) { /* a block's piece at a time: each has its one scale */
        size_t e = min_size((a / ZOE_ADAM_INT8_BLOCK + 1) * ZOE_ADAM_INT8_BLOCK, i0 + n);
        const float *scale = scales + a / ZOE_ADAM_INT8_BLOCK;
        if (is_v)
            zoe_adam_int8_dequantize_v((const uint8_t *)p + a, scale, e - a, x + (a - i0));
        else
            zoe_adam_int8_dequantize_m((const int8_t *)p + a, scale, e - a, x + (a - i0));
        a = e;
    }
    return ZOE_OK;
}

zoe_status zoe_adam_moment_from_f32(zoe_dtype dt, int is_v, const float *x, size_t i0, size_t n,
                                    void *p, float *scales) {
    if (dt != ZOE_I8) return zoe_convert((char *)p + i0 * zoe_dtype_size(dt), dt, x, ZOE_F32, n);
    if (i0 % ZOE_ADAM_INT8_BLOCK)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "int8 moment write at element %zu: not at a block boundary", i0);
    float *scale = scales + i0 / ZOE_ADAM_INT8_BLOCK;
    if (is_v)
        zoe_adam_int8_quantize_v(x, NULL, n, (uint8_t *)p + i0, scale);
    else
        zoe_adam_int8_quantize_m(x, n, (int8_t *)p + i0, scale);
    return ZOE_OK;
}

static zoe_int8_block_fns block_fns_of(zoe_cpu_isa isa) {
    switch (isa) {
    case ZOE_CPU_ISA_AVX512_BF16:
    case ZOE_CPU_ISA_AVX512:
        return zoe_int8_block_fns_avx512();
    case ZOE_CPU_ISA_AVX2:
        return zoe_int8_block_fns_avx2();
    default:
        return zoe_int8_block_fns_scalar();
    }
}

/* Blocks stepped together: each group's blocks read back, the pieces within the group stepped
 * (one call of the path's loop per piece and group rather than per block: 8 blocks a call ran
 * the int8 step 7 % faster in cache than one), the group's blocks requantised. 16 KiB of fp32 on
 * the stack for both moments, within L1 with the step's streams. */
enum { INT8_GROUP = 8 * ZOE_ADAM_INT8_BLOCK };

/* The keys of the high word of index and the next, rolled forward from those of the word before
 * (words visited in increasing order, at most one apart). */
static void roll_keys(const zoe_adam_rounding *r, uint64_t index, uint32_t *word, uint32_t *key0,
                      uint32_t *key1) {
    if ((uint32_t)(index >> 32) == *word) return;
    *word = (uint32_t)(index >> 32);
    *key0 = *key1;
    *key1 = zoe_sr_key(r, *word + 1);
}

/* The high 16 random bits of the elements [from, to) of a group at lo that the step did not give
 * (no piece holds them: padding; or a piece across a high word), key0 that of word, key1 of the
 * next. */
static void fill_bits(uint64_t index0, size_t lo, size_t from, size_t to, uint32_t word,
                      uint32_t key0, uint32_t key1, uint16_t *bits) {
    for (size_t i = from; i < to; i++) {
        uint64_t index = index0 + i;
        uint32_t key = (uint32_t)(index >> 32) == word ? key0 : key1;
        bits[i - lo] = (uint16_t)(zoe_sr_random(key, (uint32_t)index) >> 16);
    }
}

zoe_status zoe_adam_state_int8_pieces(zoe_cpu_isa isa, const zoe_adam_rounding *r,
                                      const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                      uint64_t index0, const zoe_adam_state_piece *pieces,
                                      int num_pieces, zoe_dtype gdt, zoe_dtype odt, size_t n) {
    zoe_int8_block_fns fns = block_fns_of(isa);
    /* The step proper runs on fp32 copies of the int8 moments; the other states in place. */
    const zoe_adam_state_dtypes step_dt = {.master = dt->master,
                                           .exp_avg = dt->exp_avg == ZOE_I8 ? ZOE_F32 : dt->exp_avg,
                                           .exp_avg_sq =
                                               dt->exp_avg_sq == ZOE_I8 ? ZOE_F32 : dt->exp_avg_sq};
    const size_t wsz = zoe_adam_state_esize(dt->master), gsz = zoe_dtype_size(gdt),
                 osz = zoe_dtype_size(odt);
    const size_t msz = zoe_adam_state_esize(step_dt.exp_avg),
                 vsz = zoe_adam_state_esize(step_dt.exp_avg_sq);
    float m[INT8_GROUP], v[INT8_GROUP];
    uint16_t v_bits[INT8_GROUP]; /* an int8 v's random bits, from the step's hash */
    const int v_int8 = dt->exp_avg_sq == ZOE_I8;
    uint32_t key_word = (uint32_t)(index0 >> 32);
    uint32_t key0 = zoe_sr_key(r, key_word), key1 = zoe_sr_key(r, key_word + 1);
    int first = 0; /* the first piece not wholly before the group */
    for (size_t lo = 0; lo < n; lo += INT8_GROUP) {
        size_t len = min_size(n - lo, INT8_GROUP);
        /* The keys of the group's first word (the words only grow). */
        roll_keys(r, index0 + lo, &key_word, &key0, &key1);
        /* The group's moments, at its element 0: the fp32 copies of int8 ones, else in place. */
        char *mb = (char *)st->exp_avg + lo * msz, *vb = (char *)st->exp_avg_sq + lo * vsz;
        for (size_t at = lo; at < lo + len; at += ZOE_ADAM_INT8_BLOCK) {
            size_t blen = block_len(n, at), b = at / ZOE_ADAM_INT8_BLOCK;
            if (dt->exp_avg == ZOE_I8)
                fns.dequantize_m((const int8_t *)st->exp_avg + at, st->exp_avg_scale[b], blen,
                                 m + (at - lo));
            if (dt->exp_avg_sq == ZOE_I8)
                fns.dequantize_v((const uint8_t *)st->exp_avg_sq + at, st->exp_avg_sq_scale[b],
                                 blen, v + (at - lo));
        }
        if (dt->exp_avg == ZOE_I8) mb = (char *)m;
        if (dt->exp_avg_sq == ZOE_I8) vb = (char *)v;
        while (first < num_pieces && pieces[first].offset + pieces[first].len <= lo) first++;
        size_t with_bits = lo; /* v_bits holds [lo, with_bits) */
        for (int p = first; p < num_pieces && pieces[p].offset < lo + len; p++) {
            const zoe_adam_state_piece *pc = &pieces[p];
            size_t a = pc->offset > lo ? pc->offset : lo,
                   e = min_size(pc->offset + pc->len, lo + len);
            size_t into = a - pc->offset; /* elements of the piece before the group */
            const zoe_adam_state part = {.master = (char *)pc->master + into * wsz,
                                         .exp_avg = mb + (a - lo) * msz,
                                         .exp_avg_sq = vb + (a - lo) * vsz};
            const void *grad = (const char *)pc->grad + into * gsz;
            void *out = pc->out ? (char *)pc->out + into * osz : NULL;
            uint64_t index_a = index0 + a, index_last = index0 + e - 1;
            if (v_int8) fill_bits(index0, lo, with_bits, a, key_word, key0, key1, v_bits);
            if ((index_a >> 32) == (index_last >> 32)) { /* the path directly, with its key */
                const zoe_adam_state_keys k = {(uint32_t)(index_a >> 32) == key_word ? key0 : key1};
                zoe_adam_state_path(isa, pc->c, &k, &step_dt, &part, (uint32_t)index_a, grad, gdt,
                                    out, out ? (int)odt : ADAM_OUT_NONE,
                                    v_int8 ? v_bits + (a - lo) : NULL, e - a);
            } else { /* across a high word (once in 2^32 elements): split there */
                ZOE_TRY(zoe_adam_state_host_isa(isa, pc->c, r, &step_dt, &part, index_a, grad, gdt,
                                                out, odt, e - a));
                if (v_int8) fill_bits(index0, lo, a, e, key_word, key0, key1, v_bits);
            }
            with_bits = e;
        }
        if (v_int8) fill_bits(index0, lo, with_bits, lo + len, key_word, key0, key1, v_bits);
        for (size_t at = lo; at < lo + len; at += ZOE_ADAM_INT8_BLOCK) {
            size_t blen = block_len(n, at), b = at / ZOE_ADAM_INT8_BLOCK;
            if (dt->exp_avg == ZOE_I8)
                fns.quantize_m(m + (at - lo), blen, (int8_t *)st->exp_avg + at,
                               st->exp_avg_scale + b);
            if (v_int8)
                fns.quantize_v(v + (at - lo), v_bits + (at - lo), blen,
                               (uint8_t *)st->exp_avg_sq + at, st->exp_avg_sq_scale + b);
        }
    }
    return ZOE_OK;
}
