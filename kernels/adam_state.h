/* The fused Adam/AdamW step over compressed optimizer state: the fp32 master weights and the two
 * moments each held in fp32 or bf16 (Megatron's --main-params-dtype, --exp-avg-dtype,
 * --exp-avg-sq-dtype), updated in one pass.
 *
 * Per element the arithmetic is kernels/adam.h's, unchanged, in fp32 on the widened state
 * (bf16 -> fp32 is exact). Only the stores differ. A bf16 master and a bf16 second moment are
 * written with stochastic rounding, so that an update smaller than half a bf16 unit in the last
 * place (2^-9 relative) is not lost on every step but applied with the right probability
 * (unbiased in expectation): the master's small updates (lr against |w|), and the second moment,
 * which with beta2 = 0.999 moves by 0.1 % a step and would never move under round-to-nearest. The
 * first moment moves by (1 - beta1) = 10 % of its distance to the gradient each step, far above
 * bf16's unit, and is rounded to nearest even. The random bits come from one counter-based hash
 * of (seed, step, element index) per element, its low 16 bits for the master and its high 16
 * for the second moment, not from a generator with state, so that
 *   - every path (scalar, AVX2, AVX-512, AVX-512-BF16, and the CUDA kernel of a GPU's device
 *     share, kernels/cuda/adam_state.cu) gives the same bits,
 *   - the result does not depend on how a range is split into tiles, threads or calls,
 *   - a run resumed from a checkpoint at step s rounds exactly as the uninterrupted run.
 * One hash rather than one per state: the multiplies of the hash share a port with the step's
 * division and square root, and three of them made the step compute-bound (bench_cpu_adam).
 *
 * Per element i (index = index0 + i, a 64-bit count; fma as in kernels/adam.h):
 *
 *     w, m, v = fp32(master[i]), fp32(exp_avg[i]), fp32(exp_avg_sq[i])
 *     g  = grad * grad_scale;  g = fma(wd, w, g)       the second for Adam with L2 only
 *     m' = fma(beta1, m, (1 - beta1) * g)
 *     v' = fma(beta2, v, (1 - beta2) * (g * g))
 *     w' = AdamW ? w * decay : w
 *     w' = fma(-step_size, m' / fma(sqrt(v'), inv_sqrt_bc2, eps), w')
 *     r  = zoe_sr_random(zoe_sr_key(rounding, index >> 32), index)
 *     master[i]     = bf16 ? zoe_sr_bf16(w', r & 0xffff) : w'
 *     exp_avg[i]    = bf16 ? zoe_f32_to_bf16(m')        : m'
 *     exp_avg_sq[i] = bf16 ? zoe_sr_bf16(v', r >> 16)    : v'
 *     out[i]        = out_dtype(fp32(master[i]))       the weights as stored, nearest even
 *
 * With int8 moments the step goes a block at a time: the block's moments dequantised, the
 * element step above on them (the master's update uses the fp32 m' and v'), then the block's new
 * absmax, scale and codes (v's stochastic rounding takes the element's r >> 16). Each path runs
 * its own fp32-state loop on the block and its own block quantisers (kernels/cpu/
 * adam_state_int8_block.h element-wise, adam_state_int8_simd.h in vectors, the same operations),
 * so the paths' bits agree.
 *
 * With every state in fp32 the result is bit-identical to zoe_adam_host_to (a test checks it).
 * With a bf16 master, out in bf16 is the master's own bits.
 *
 * fp16 weights from a bf16 master (a V100, which has no bf16): out in fp16 is the stored master
 * converted, fp16(fp32(master[i])), never the fp32 w' rounded directly, so that the weights are
 * a function of the master alone and streamed weights can be made from it where they are used
 * (offload/param_stream.c converts each gathered unit in place on the device; zoe_convert and
 * the CUDA convert kernel, one rule). Exact for every bf16 value in fp16's normal range
 * [2^-14, 65504] (bf16's 8 significant bits fit in fp16's 11); below 2^-14 the value becomes an
 * fp16 subnormal, rounded to nearest even at 2^-24 (below 2^-25 to a signed zero), as any fp16
 * weight is; a master of magnitude 65536 or more (bf16 has nothing between 65280 and 65536)
 * would be infinite: offload/state.c refuses such initial weights, and no step takes a weight
 * there (Adam moves a weight by about lr a step). NaN stays NaN.
 *
 * Explained in docs/offload.md, "Compressed state". */
#ifndef ZOE_KERNELS_ADAM_STATE_H
#define ZOE_KERNELS_ADAM_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/adam.h"

/* Functions of the rounding and the int8 code rule that the CUDA kernel of a GPU's device share
 * (kernels/cuda/adam_state.cu) compiles too, so that both sides round with the same code. */
#ifdef __CUDACC__
#define ZOE_HOST_DEVICE __host__ __device__
#else
#define ZOE_HOST_DEVICE __attribute__((always_inline))
#endif

/* The dtype of each state array: ZOE_F32 or ZOE_BF16; the moments also ZOE_I8 (blockwise int8,
 * below). */
typedef struct zoe_adam_state_dtypes {
    zoe_dtype master, exp_avg, exp_avg_sq;
} zoe_adam_state_dtypes;

/* The three state arrays of a range, element 0 of each at the range's first element. */
typedef struct zoe_adam_state {
    void *master;     /* master_dtype */
    void *exp_avg;    /* exp_avg_dtype */
    void *exp_avg_sq; /* exp_avg_sq_dtype */
    /* ZOE_I8 moments only: one fp32 scale per block of ZOE_ADAM_INT8_BLOCK elements, block 0
     * starting at element 0 of the arrays above (a range given to the step starts at a block
     * boundary; its last block may be short). NULL otherwise. */
    float *exp_avg_scale, *exp_avg_sq_scale;
} zoe_adam_state;

/* Blockwise int8 moments (8-bit Adam's dynamic quantisation with a per-block scale). A block of
 * ZOE_ADAM_INT8_BLOCK elements holds one scale s, a power of two with absmax / s in (1/2, 1]
 * (so that dividing by it is exact and a dequantised block requantises to its own codes), and
 * one code per element on a square law, which keeps resolution for the small values:
 *   m: int8 code c in [-127, 127],  m = s * sign(c) * (c / 127)^2,  nearest code
 *   v: uint8 code c in [0, 255],    v = s * (c / 255)^2  (sqrt(v) linear in c), stochastic
 *      rounding between the two neighbouring codes with the step's random bits, and code 1
 *      wherever the fp32 v' > 0: v never rounds to zero, which with a nonzero m would make
 *      the update m / (sqrt(v) + eps) blow up.
 * A block holding a NaN or infinity gets that as its scale (every element then reads NaN or
 * infinity, as an fp32 state would have spread it on the next step). */
enum { ZOE_ADAM_INT8_BLOCK = 256 };

/* The number of scales of n elements. */
static inline size_t zoe_adam_int8_blocks(size_t n) {
    return (n + ZOE_ADAM_INT8_BLOCK - 1) / ZOE_ADAM_INT8_BLOCK;
}
/* The value of code c of a block with scale s. */
/* |value| / s of code c: c^2 / 127^2 (m) or c^2 / 255^2 (v), as a multiply by the reciprocal
 * rounded once (no division per element). Exact squares times one positive constant, so
 * increasing in c. */
static inline ZOE_HOST_DEVICE float zoe_adam_int8_m_unit(int c) {
    return (float)(c * c) * (1.0f / 16129.0f);
}
static inline ZOE_HOST_DEVICE float zoe_adam_int8_v_unit(int c) {
    return (float)(c * c) * (1.0f / 65025.0f);
}
static inline ZOE_HOST_DEVICE float zoe_adam_int8_m_value(int8_t c, float s) {
    float a = zoe_adam_int8_m_unit(c);
    return s * (c < 0 ? -a : a);
}
static inline ZOE_HOST_DEVICE float zoe_adam_int8_v_value(uint8_t c, float s) {
    return s * zoe_adam_int8_v_unit(c);
}
/* n fp32 values quantised into blocks (codes, scales): m to nearest; v stochastically with the
 * 16 random bits bits16[i] (NULL: to nearest), floored at code 1 where x > 0. The inverse reads
 * them back. Used by the step (per block) and by conversions (checkpoints). */
void zoe_adam_int8_quantize_m(const float *x, size_t n, int8_t *codes, float *scales);
void zoe_adam_int8_quantize_v(const float *x, const uint16_t *bits16, size_t n, uint8_t *codes,
                              float *scales);
void zoe_adam_int8_dequantize_m(const int8_t *codes, const float *scales, size_t n, float *x);
void zoe_adam_int8_dequantize_v(const uint8_t *codes, const float *scales, size_t n, float *x);

/* Elements [i0, i0 + n) of a moment array held in dt (ZOE_F32, ZOE_BF16, or ZOE_I8: codes with
 * one scale per block, block 0 at element 0 of p and scales; is_v: the second moment's codes) as
 * fp32 values into x, and back from x: to nearest (bf16 to nearest even; int8 requantised to
 * nearest, v's floor at code 1 kept). An int8 write starts at a block boundary and requantises
 * every block it reaches from the values given (its last block as a short one when n ends
 * inside it). Every reader and writer of a stored moment goes through these. */
zoe_status zoe_adam_moment_to_f32(zoe_dtype dt, int is_v, const void *p, const float *scales,
                                  size_t i0, size_t n, float *x);
zoe_status zoe_adam_moment_from_f32(zoe_dtype dt, int is_v, const float *x, size_t i0, size_t n,
                                    void *p, float *scales);

/* What the rounding of one step is keyed by: the caller's seed (the run's seed mixed with the
 * DP rank, offload/optimizer.c says why not the TP rank) and the step number (1-based, the
 * bias correction's). */
typedef struct zoe_adam_rounding {
    uint64_t seed;
    uint64_t step;
} zoe_adam_rounding;

/* A 32-bit integer hash (a bijection with good avalanche: xor-shift, multiply, twice). */
static inline ZOE_HOST_DEVICE uint32_t zoe_hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* The key of one step for the elements whose index has high word hi. */
static inline ZOE_HOST_DEVICE uint32_t zoe_sr_key(const zoe_adam_rounding *r, uint32_t hi) {
    uint32_t k = zoe_hash32((uint32_t)(r->seed >> 32));
    k = zoe_hash32((uint32_t)r->seed ^ k);
    k = zoe_hash32(k ^ (uint32_t)r->step);
    k = zoe_hash32(k ^ (uint32_t)(r->step >> 32) ^ 0x9e3779b9U);
    return zoe_hash32(k ^ hi);
}

/* The 32 random bits of element index (low word lo) under key. */
static inline ZOE_HOST_DEVICE uint32_t zoe_sr_random(uint32_t key, uint32_t lo) {
    return zoe_hash32(lo ^ key);
}

/* x rounded to bf16 stochastically: up (in magnitude) with probability equal to the fraction
 * of a bf16 unit that the discarded low 16 bits hold, by adding bits16 (uniform in [0, 65535])
 * below the kept bits and truncating. NaN becomes a quiet NaN of the same sign; infinities stay;
 * a finite value within a unit of the largest bf16 may round to infinity (as its magnitude
 * deserves with that probability). */
static inline ZOE_HOST_DEVICE zoe_bf16 zoe_sr_bf16(float x, uint32_t bits16) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (x != x) return (zoe_bf16)((u >> 16) | 0x40);
    return (zoe_bf16)((u + bits16) >> 16);
}

/* Whether a moment is held in blockwise int8 (the step and its callers then go by blocks). */
static inline int zoe_adam_state_has_int8(const zoe_adam_state_dtypes *dt) {
    return dt->exp_avg == ZOE_I8 || dt->exp_avg_sq == ZOE_I8;
}

/* Checks: every state dtype ZOE_F32 or ZOE_BF16, the moments also ZOE_I8. */
zoe_status zoe_adam_state_dtypes_check(const zoe_adam_state_dtypes *dt);

/* The fused step over n elements with the best path. grad in grad_dtype (f32, bf16, f16); out
 * (f32, bf16, f16) may be NULL. The state is updated in place; no buffer may overlap another,
 * except out == grad when out_dtype == grad_dtype (the new weights over a compute-dtype
 * gradient: element i is read completely before anything of it is written). */
zoe_status zoe_adam_state_host(const zoe_adam_consts *c, const zoe_adam_rounding *r,
                               const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                               uint64_t index0, const void *grad, zoe_dtype grad_dtype, void *out,
                               zoe_dtype out_dtype, size_t n);
/* The same with a chosen path (tests and benchmarks); ZOE_ERR_UNSUPPORTED if the CPU lacks it. */
zoe_status zoe_adam_state_host_isa(zoe_cpu_isa isa, const zoe_adam_consts *c,
                                   const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                   const zoe_adam_state *st, uint64_t index0, const void *grad,
                                   zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype, size_t n);

/* One piece of a range given to zoe_adam_state_host_pieces: elements [offset, offset + len) of
 * the range, stepped with constants c, with its own master weights, gradient and output (element
 * 0 of each at the piece's first element; out may be NULL). */
typedef struct zoe_adam_state_piece {
    size_t offset, len;
    const zoe_adam_consts *c;
    void *master;
    const void *grad;
    void *out;
} zoe_adam_state_piece;

/* The step over the pieces of one range of n elements: the segments of a tile of the optimizer's
 * partition, whose weight decay differs by tensor and whose master and output need not be
 * contiguous. Pieces sorted by offset, disjoint, within [0, n). st holds the moments (and their
 * scales) at element 0 of the range, which starts at a block boundary of int8 moments; st->master
 * is not read; element offset + i of the range has index index0 + offset + i. With an int8
 * moment each block is read back once, every piece within it stepped, and the block requantised
 * once, so that a block holding two tensors' elements rounds once per step; elements of no piece
 * (padding: zero moments) are requantised with their block. Otherwise the same as one
 * zoe_adam_state_host call per piece. */
zoe_status zoe_adam_state_host_pieces(const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                      const zoe_adam_state *st, uint64_t index0,
                                      const zoe_adam_state_piece *pieces, int num_pieces,
                                      zoe_dtype grad_dtype, zoe_dtype out_dtype, size_t n);
zoe_status zoe_adam_state_host_pieces_isa(zoe_cpu_isa isa, const zoe_adam_rounding *r,
                                          const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                          uint64_t index0, const zoe_adam_state_piece *pieces,
                                          int num_pieces, zoe_dtype grad_dtype, zoe_dtype out_dtype,
                                          size_t n);

/* The step of constants c undone (ZOE_DPU_EXACT's redo), as zoe_adam_undo_host in float64 from
 * the step's formula solved backwards, on the widened state, from the gradient the step read
 * (grad_dtype: fp32, or a 2-byte gradient partition); each restored value is stored with
 * round-to-nearest-even in its dtype, an int8 moment a block at a time (its blocks from element
 * 0, each requantised to nearest once). Not bit-exact: with bf16 state each restored value is
 * within the step's own rounding of what it wrote (one bf16 unit in the last place of that value)
 * divided by beta1, beta2 or decay, plus, for the master, the shift recomputed from rounded
 * moments (2^-8 relative of m, 2^-9 of v) and, with L2, the gradient term recomputed from the
 * restored weight, plus half a unit of the restored value (tests/offload/test_adam_state.c checks
 * this bound per element). With int8 moments the same with the step's quantisation in place of
 * bf16's rounding, and the restored moment's own requantisation: within the block's code
 * interval at the value stored, divided by beta, plus one interval at the restored value
 * (tests/offload/test_adam_int8.c checks it). fp32 states as zoe_adam_undo_host.
 * out = out_dtype(fp32(master)) when out is not NULL. */
zoe_status zoe_adam_state_undo_host(const zoe_adam_consts *c, const zoe_adam_state_dtypes *dt,
                                    const zoe_adam_state *st, const void *grad,
                                    zoe_dtype grad_dtype, void *out, zoe_dtype out_dtype, size_t n);

/* The device part of a step over a table of runs (kernels/adam.h) on compressed state: the
 * device share of partial offload, held in the host's dtypes. st holds state arrays of n
 * elements, which the runs' offsets index (sorted by offset, disjoint, within n); with an int8
 * moment its blocks start at element 0, and every block is requantised once (positions of no run
 * with the values they hold). Element i rounds as index i (the partition coordinate of the
 * device share). grad fp32; out (the compute-dtype weights, out_dtype(fp32(master))) may be
 * NULL. Enqueued on the stream, no synchronisation. On the CPU backend it is one
 * zoe_adam_state_host_pieces call, a run a piece; on CUDA the kernel of
 * kernels/cuda/adam_state.cu gives the same bits. */
zoe_status zoe_adam_table_step_state(zoe_stream *stream, const zoe_adam_table *table,
                                     const zoe_adam_consts *decayed, const zoe_adam_consts *exempt,
                                     const zoe_adam_rounding *r, const zoe_adam_state_dtypes *dt,
                                     const zoe_adam_state *st, size_t n, const float *grad,
                                     void *out, zoe_dtype out_dtype);
#ifdef ZOE_HAVE_CUDA
zoe_status zoe_adam_state_runs_cuda(void *stream, const zoe_adam_consts *decayed,
                                    const zoe_adam_consts *exempt, const zoe_adam_rounding *r,
                                    const zoe_adam_state_dtypes *dt, const zoe_adam_state *st,
                                    const zoe_adam_run_cuda *runs, int count, size_t n,
                                    const float *grad, void *out, zoe_dtype out_dtype);
#endif

/* Element size in bytes of a state dtype (ZOE_I8: the code; the scales come on top,
 * 4 / ZOE_ADAM_INT8_BLOCK bytes per element). */
static inline size_t zoe_adam_state_esize(zoe_dtype dt) {
    return dt == ZOE_BF16 ? 2 : dt == ZOE_I8 ? 1 : 4;
}

#endif
