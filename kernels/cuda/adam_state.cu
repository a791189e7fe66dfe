// The device Adam of partial offload over compressed state (kernels/adam_state.h): a GPU's device
// share held in the same dtypes as the host's share, stepped and rounded as the host steps it, so
// that a partition updated on the device matches the CPU backend's bit for bit (NaN payloads
// aside: CUDA's bf16 rounding writes its canonical NaN). The element step is adam_element.cuh's;
// the rounding (the hash, stochastic bf16) and the int8 code rule are the host's own functions
// (kernels/adam_state.h, kernels/adam_state_int8.h), compiled here without contraction
// (kernels/CMakeLists.txt).
//
// One thread block per block of ZOE_ADAM_INT8_BLOCK positions of the arrays, one thread per
// position: with int8 moments the block's new absmax is a reduction over its threads, and every
// position of the block is requantised once per step, those of no run (padding) with the values
// they hold, as the host requantises a block.
//
// Explained in docs/offload.md, "Compressed state".
#include "kernels/cuda/adam_element.cuh"
extern "C" {
#include "kernels/adam_state_int8.h"
}

namespace {

using namespace zoe_adam_device;

static_assert(ZOE_ADAM_INT8_BLOCK == kThreads, "one thread per element of an int8 block");

/* One step's arguments (a kernel parameter: constant across the launch). */
struct state_step {
    zoe_adam_consts decayed, exempt;
    zoe_adam_rounding rounding;
    int master_dt, m_dt, v_dt, out_dt;
    void *master, *m, *v;
    float *m_scale, *v_scale;
    const float *grad;
    void *out;
    size_t n;
    const zoe_adam_run_cuda *runs; /* sorted by offset, disjoint */
    int count;
};

/* The run holding array position p, or -1 (between runs, or past the last). */
__device__ int run_at(const zoe_adam_run_cuda *runs, int count, size_t p) {
    if (count == 0 || runs[0].offset > p) return -1;
    int r = last_run_at_or_below<&zoe_adam_run_cuda::offset>(runs, count, p);
    return p < runs[r].offset + runs[r].len ? r : -1;
}

/* Element i of a state array as fp32: int8 through its block's scale. */
__device__ float load_state(const void *p, size_t i, int dt, const float *scales, bool is_v) {
    if (dt == ZOE_I8) {
        float s = scales[i / ZOE_ADAM_INT8_BLOCK];
        return is_v ? zoe_adam_int8_v_value(((const uint8_t *)p)[i], s)
                    : zoe_adam_int8_m_value(((const int8_t *)p)[i], s);
    }
    if (dt == ZOE_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores x in dtype dt (fp32 or bf16: stochastically with bits16, or to nearest even) and
 * returns the value as stored. */
__device__ float store_state(void *p, size_t i, int dt, float x, uint32_t bits16, bool nearest) {
    if (dt != ZOE_BF16) {
        ((float *)p)[i] = x;
        return x;
    }
    uint16_t h = nearest ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : zoe_sr_bf16(x, bits16);
    ((uint16_t *)p)[i] = h;
    return __uint_as_float((uint32_t)h << 16);
}

/* Block b's int8 codes and scale from x, this thread's value (valid: a position of the arrays).
 * Every thread of the block calls it. The scale is that of the largest |x| (its bit pattern: a
 * NaN's is above infinity's), or the block's first NaN by position, as on the host. */
__device__ void quantize_block(float x, bool valid, bool is_v, uint32_t bits16, void *codes,
                               float *scales, size_t b, size_t p) {
    __shared__ uint32_t warp_tops[kThreads / 32];
    __shared__ int first_nan;
    __shared__ float nan_scale;
    uint32_t top = valid ? (__float_as_uint(x) & 0x7fffffffu) : 0;
    for (int lanes = 16; lanes > 0; lanes /= 2)
        top = max(top, __shfl_xor_sync(0xffffffffu, top, lanes));
    if ((threadIdx.x & 31) == 0) warp_tops[threadIdx.x / 32] = top;
    if (threadIdx.x == 0) first_nan = kThreads;
    __syncthreads();
    for (int w = 0; w < kThreads / 32; w++) top = max(top, warp_tops[w]);
    float absmax = __uint_as_float(top), s;
    if (absmax != absmax) { /* the same branch in every thread: top is the block's */
        if (valid && x != x) atomicMin(&first_nan, (int)threadIdx.x);
        __syncthreads();
        if ((int)threadIdx.x == first_nan) nan_scale = fabsf(x);
        __syncthreads();
        s = nan_scale;
    } else {
        s = zoe_adam_int8_scale_of(absmax);
    }
    int usable = zoe_adam_int8_usable(s);
    zoe_int8_inverse inv = zoe_adam_int8_inverse_of(usable ? s : 1);
    if (valid && is_v)
        ((uint8_t *)codes)[p] = zoe_adam_int8_v_code(x, bits16, 1, usable, inv);
    else if (valid)
        ((int8_t *)codes)[p] = zoe_adam_int8_m_code(x, usable, inv);
    if (threadIdx.x == 0) scales[b] = s;
    __syncthreads(); /* the shared words are the next call's */
}

__global__ void adam_state_kernel(state_step a) {
    const size_t blocks = (a.n + ZOE_ADAM_INT8_BLOCK - 1) / ZOE_ADAM_INT8_BLOCK;
    const bool m_int8 = a.m_dt == ZOE_I8, v_int8 = a.v_dt == ZOE_I8;
    for (size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
        size_t p = b * ZOE_ADAM_INT8_BLOCK + threadIdx.x;
        bool valid = p < a.n;
        int run = valid ? run_at(a.runs, a.count, p) : -1;
        float m = 0, v = 0;
        uint32_t r = 0;
        if (run >= 0 || (valid && (m_int8 || v_int8))) {
            m = load_state(a.m, p, a.m_dt, a.m_scale, false);
            v = load_state(a.v, p, a.v_dt, a.v_scale, true);
            r = zoe_sr_random(zoe_sr_key(&a.rounding, (uint32_t)(p >> 32)), (uint32_t)p);
        }
        if (run >= 0) {
            const zoe_adam_consts &c = a.runs[run].no_decay ? a.exempt : a.decayed;
            float w = load_state(a.master, p, a.master_dt, nullptr, false);
            adam_update(c, a.grad[p], w, m, v);
            float stored = store_state(a.master, p, a.master_dt, w, r & 0xffffu, false);
            if (a.out) store_from_f32(a.out, p, a.out_dt, stored);
            if (!m_int8) store_state(a.m, p, a.m_dt, m, 0, true);
            if (!v_int8) store_state(a.v, p, a.v_dt, v, r >> 16, false);
        }
        if (m_int8) quantize_block(m, valid, false, 0, a.m, a.m_scale, b, p);
        if (v_int8) quantize_block(v, valid, true, r >> 16, a.v, a.v_scale, b, p);
    }
}

} // namespace

extern "C" zoe_status zoe_adam_state_runs_cuda(void *stream, const zoe_adam_consts *decayed,
                                               const zoe_adam_consts *exempt,
                                               const zoe_adam_rounding *rounding,
                                               const zoe_adam_state_dtypes *dt,
                                               const zoe_adam_state *st,
                                               const zoe_adam_run_cuda *runs, int count, size_t n,
                                               const float *grad, void *out, zoe_dtype out_dtype) {
    if (n == 0) return ZOE_OK;
    const state_step a = {.decayed = *decayed,
                          .exempt = *exempt,
                          .rounding = *rounding,
                          .master_dt = (int)dt->master,
                          .m_dt = (int)dt->exp_avg,
                          .v_dt = (int)dt->exp_avg_sq,
                          .out_dt = (int)out_dtype,
                          .master = st->master,
                          .m = st->exp_avg,
                          .v = st->exp_avg_sq,
                          .m_scale = st->exp_avg_scale,
                          .v_scale = st->exp_avg_sq_scale,
                          .grad = grad,
                          .out = out,
                          .n = n,
                          .runs = runs,
                          .count = count};
    size_t blocks = zoe_adam_int8_blocks(n);
    unsigned grid = (unsigned)(blocks < 65535u * 8u ? blocks : 65535u * 8u);
    adam_state_kernel<<<grid, kThreads, 0, (cudaStream_t)stream>>>(a);
    return check(cudaGetLastError(), "adam state kernel launch");
}
