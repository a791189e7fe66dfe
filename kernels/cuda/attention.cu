/* Causal multi-head and grouped-query attention on CUDA, flash-style: no T x T matrix exists
 * anywhere; fp32 arithmetic on the CUDA cores. One set of kernels serves both public layouts
 * (GPT's interleaved qkv, Llama's q beside kv) through an attn_layout of strided views; query
 * head h reads KV head h / group. Where the GPU multiplies the storage dtype on tensor cores
 * (fp16 from sm_70, bf16 from sm_80) attention goes to the GEMM path instead
 * (attention_gemm.cu); the choice is zoe_attention_path_of (kernels/attention_plan.h), which the
 * plan reads too. These kernels serve fp32, bf16 before sm_80, and comparisons.
 *
 * Every kernel has the same shape. A 256-thread block owns a tile of OWN rows of one (batch,
 * head) (its "own" rows: queries, or keys in the dk/dv kernel), kept in shared memory as fp32,
 * and walks the partner tiles of 32 rows that causality lets it see, staged in shared memory
 * one after another. Each warp owns ROWS = OWN / 8 of the rows; lane j of the warp computes the
 * dot products of those rows with partner row j (partner rows padded by one float so the lanes
 * hit distinct banks), and the weighted sums over the 32 partners are formed with each weight
 * broadcast by a warp shuffle, lane l accumulating head dims l, l + 32, ... in registers
 * (HS <= 256). OWN is 32, 16 or 8, the largest whose shared memory the GPU grants a block
 * (zoe_attention_flash_rows): at head size 256 a V100's 96 KiB takes 16-row forward and 8-row
 * backward tiles, an A100 or H100 32-row tiles.
 *
 * Forward: own = q, partners = k, v; an online softmax per row (running max m and sum l,
 * accumulator rescaled as m grows); out = acc / l, lse = m + log l.
 * Backward, without atomics (each output element has one writer, fixed summation order):
 *  - delta = rowsum(dout * out), one warp per row, into the workspace;
 *  - dq kernel: own = q, dout; partners = k, v; p = exp(s - lse), ds = p (dout.v - delta),
 *    dq += scale sum ds k;
 *  - dk/dv kernel, one block per KV head's key tile and slice of its group's query heads:
 *    own = k, v; partners = q, dout (with their lse, delta) of each query head of the slice in
 *    turn; dv += sum p dout, dk += scale sum ds q. With one slice the block adds into dkv; with
 *    more (a grid too small for the GPU: zoe_attention_dkv_split_of) each slice writes fp32
 *    partial sums and one more kernel adds them into dkv in slice order: deterministic.
 * P is recomputed in both backward kernels rather than shared through atomics.
 *
 * Explained in docs/attention.md, "The fp32 flash kernels: `attention.cu`". */
#include <type_traits>
#include "kernels/cuda/attention.cuh"

enum {
    PTILE = ZOE_ATTN_PARTNER_ROWS, /* partner rows per staged tile: one per lane */
    WARPS = ZOE_ATTN_WARPS,        /* warps per block */
};

/* One head's [T, HS] rows in a tensor: row t starts at base + t * ld. */
template <typename T> struct head_rows {
    T *base;
    int64_t ld;
};

template <typename T>
static __device__ __forceinline__ head_rows<T> q_rows(T *q, const attn_layout &L, int64_t h) {
    return {q + (int64_t)blockIdx.z * L.seq * L.q_ld + h * L.q_hs, L.q_ld};
}
template <typename T>
static __device__ __forceinline__ head_rows<T> kv_rows(T *kv, const attn_layout &L, int64_t g,
                                                       int64_t off) {
    return {kv + (int64_t)blockIdx.z * L.seq * L.kv_ld + g * L.kv_hs + off, L.kv_ld};
}
template <typename T>
static __device__ __forceinline__ head_rows<T> out_rows(T *o, const attn_layout &L, int64_t h) {
    return {o + ((int64_t)blockIdx.z * L.seq * L.NH + h) * L.HS, (int64_t)L.NH * L.HS};
}

/* dst[j * ldd + d] = rows[t0 + j][d] as fp32 for j < count, d < HS; zeros past the sequence.
 * The whole block calls it; rows are read along d (coalesced). */
template <typename T>
static __device__ void load_tile(float *dst, int ldd, head_rows<const T> rows, int64_t t0,
                                 int64_t seq, int HS, int count) {
    for (int idx = threadIdx.x; idx < count * HS; idx += blockDim.x) {
        const int j = idx / HS, d = idx % HS;
        dst[j * ldd + d] = t0 + j < seq ? zoe_to_f32(rows.base[(t0 + j) * rows.ld + d]) : 0.0f;
    }
}

/* s[r] = own row r of this warp . partner row (the lane's), over HS dims. */
template <int ROWS>
static __device__ __forceinline__ void lane_dots(float (&s)[ROWS], const float *own,
                                                 const float *partner, int HS) {
#pragma unroll
    for (int r = 0; r < ROWS; r++) s[r] = 0.0f;
    for (int d = 0; d < HS; d++) {
        const float p = partner[d];
#pragma unroll
        for (int r = 0; r < ROWS; r++) s[r] += own[r * HS + d] * p;
    }
}

/* acc[r][i] += sum over lanes j of w[r] (held by lane j) * tile[j][lane + 32 i]. */
template <int ROWS, int DPL>
static __device__ __forceinline__ void lane_accumulate(float (&acc)[ROWS][DPL],
                                                       const float (&w)[ROWS], const float *tile,
                                                       int ldt, int HS) {
    const int lane = threadIdx.x % 32;
    for (int j = 0; j < PTILE; j++) {
        float wj[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; r++) wj[r] = __shfl_sync(0xffffffffu, w[r], j);
        const float *row = tile + j * ldt;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d < HS) {
                const float t = row[d];
#pragma unroll
                for (int r = 0; r < ROWS; r++) acc[r][i] += wj[r] * t;
            }
        }
    }
}

template <int ROWS, int DPL> static __device__ __forceinline__ void zero(float (&acc)[ROWS][DPL]) {
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[r][i] = 0.0f;
}

/* rows[t][d] (+)= acc[r][i] * k for the warp's row r at sequence position t, if t < seq. */
template <int ROWS, int DPL, typename T>
static __device__ __forceinline__ void store_rows(head_rows<T> rows, const float (&acc)[ROWS][DPL],
                                                  int64_t t_first, int64_t seq, int HS, float k,
                                                  bool accumulate) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int64_t t = t_first + r;
        if (t >= seq) continue;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d >= HS) continue;
            T *p = rows.base + t * rows.ld + d;
            *p = zoe_from_f32<T>((accumulate ? zoe_to_f32(*p) : 0.0f) + acc[r][i] * k);
        }
    }
}

/* The last row of the own tile starting at t0, within the sequence. */
static __device__ __forceinline__ int64_t tile_last(int64_t t0, int own, int64_t seq) {
    return (t0 + own < seq ? t0 + own : seq) - 1;
}

/* ---- forward ---- */

template <typename T, int DPL, int ROWS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_forward_kernel(T *out, float *lse, const T *qb, const T *kvb, attn_layout L,
                             float scale) {
    constexpr int OWN = WARPS * ROWS;
    extern __shared__ float smem[];
    const int HS = L.HS;
    const int64_t seq = L.seq, h = blockIdx.y, g = h / L.group;
    const int ldt = HS + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *own = smem, *kt = own + OWN * HS, *vt = kt + PTILE * ldt;
    /* blockIdx.x 0 takes the last query tile, the one with most work */
    const int64_t tiles = (seq + OWN - 1) / OWN, qtile = tiles - 1 - blockIdx.x;
    const int64_t q0 = qtile * OWN, q_first = q0 + warp * ROWS;
    const head_rows<const T> q = q_rows(qb, L, h);
    const head_rows<const T> k = kv_rows(kvb, L, g, L.k_off);
    const head_rows<const T> v = kv_rows(kvb, L, g, L.v_off);
    load_tile(own, HS, q, q0, seq, HS, OWN);
    float acc[ROWS][DPL], m[ROWS], l[ROWS];
    zero(acc);
#pragma unroll
    for (int r = 0; r < ROWS; r++) m[r] = -INFINITY, l[r] = 0.0f;
    const int64_t kt_last = tile_last(q0, OWN, seq) / PTILE;
    for (int64_t kt_i = 0; kt_i <= kt_last; kt_i++) {
        const int64_t k0 = kt_i * PTILE;
        __syncthreads(); /* the previous tiles are no longer read */
        load_tile(kt, ldt, k, k0, seq, HS, PTILE);
        load_tile(vt, ldt, v, k0, seq, HS, PTILE);
        __syncthreads();
        float s[ROWS];
        lane_dots(s, own + warp * ROWS * HS, kt + lane * ldt, HS);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int64_t qi = q_first + r, kj = k0 + lane;
            s[r] = kj <= qi && qi < seq ? s[r] * scale : -INFINITY;
            const float m_new = fmaxf(m[r], zoe_warp_max(s[r]));
            /* A row with nothing visible yet (only past the sequence) keeps p = 0. */
            const float p = m_new == -INFINITY ? 0.0f : expf(s[r] - m_new);
            const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
            l[r] = l[r] * corr + zoe_warp_sum(p);
            m[r] = m_new;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[r][i] *= corr;
            s[r] = p;
        }
        lane_accumulate(acc, s, vt, ldt, HS);
    }
    const head_rows<T> o = out_rows(out, L, h);
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const int64_t qi = q_first + r;
        if (qi >= seq) continue;
        const float inv = 1.0f / l[r];
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[r][i] *= inv;
        if (lane == 0) lse[((int64_t)blockIdx.z * L.NH + h) * seq + qi] = m[r] + logf(l[r]);
    }
    store_rows(o, acc, q_first, seq, HS, 1.0f, false);
}

/* ---- backward ---- */

/* delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]: one warp per (b, t, h) row. */
template <typename T>
__global__ void attention_delta_kernel(float *delta, const T *dout, const T *out, int64_t rows,
                                       int64_t seq, int NH, int HS) {
    const int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; /* (b * T + t) * NH + h */
    if (row >= rows) return;
    const int lane = threadIdx.x % 32;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32)
        s += zoe_to_f32(dout[row * HS + d]) * zoe_to_f32(out[row * HS + d]);
    s = zoe_warp_sum(s);
    const int64_t h = row % NH, bt = row / NH, b = bt / seq, t = bt % seq;
    if (lane == 0) delta[(b * NH + h) * seq + t] = s;
}

/* dq: own rows are queries (q, dout), partners are keys (k, v) of the query head's KV head. */
template <typename T, int DPL, int ROWS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_dq_kernel(T *dq, const T *dout, const T *qb, const T *kvb, const float *lse,
                        const float *delta, attn_layout L, float scale) {
    constexpr int OWN = WARPS * ROWS;
    extern __shared__ float smem[];
    const int HS = L.HS;
    const int64_t seq = L.seq, h = blockIdx.y, g = h / L.group;
    const int ldt = HS + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *own_q = smem, *own_g = own_q + OWN * HS, *kt = own_g + OWN * HS, *vt = kt + PTILE * ldt;
    const int64_t tiles = (seq + OWN - 1) / OWN, qtile = tiles - 1 - blockIdx.x;
    const int64_t q0 = qtile * OWN, q_first = q0 + warp * ROWS;
    const int64_t stats = ((int64_t)blockIdx.z * L.NH + h) * seq;
    load_tile(own_q, HS, q_rows(qb, L, h), q0, seq, HS, OWN);
    load_tile(own_g, HS, out_rows(dout, L, h), q0, seq, HS, OWN);
    float row_lse[ROWS], row_delta[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        const bool in = q_first + r < seq;
        row_lse[r] = in ? lse[stats + q_first + r] : 0.0f;
        row_delta[r] = in ? delta[stats + q_first + r] : 0.0f;
    }
    float acc[ROWS][DPL];
    zero(acc);
    const int64_t kt_last = tile_last(q0, OWN, seq) / PTILE;
    for (int64_t kt_i = 0; kt_i <= kt_last; kt_i++) {
        const int64_t k0 = kt_i * PTILE;
        __syncthreads();
        load_tile(kt, ldt, kv_rows(kvb, L, g, L.k_off), k0, seq, HS, PTILE);
        load_tile(vt, ldt, kv_rows(kvb, L, g, L.v_off), k0, seq, HS, PTILE);
        __syncthreads();
        float s[ROWS], dp[ROWS];
        lane_dots(s, own_q + warp * ROWS * HS, kt + lane * ldt, HS);
        lane_dots(dp, own_g + warp * ROWS * HS, vt + lane * ldt, HS);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            const int64_t qi = q_first + r, kj = k0 + lane;
            const float p = kj <= qi && qi < seq ? expf(s[r] * scale - row_lse[r]) : 0.0f;
            s[r] = p * (dp[r] - row_delta[r]); /* ds */
        }
        lane_accumulate(acc, s, kt, ldt, HS);
    }
    store_rows(q_rows(dq, L, h), acc, q_first, seq, HS, scale, true);
}

/* dk, dv: own rows are keys (k, v) of KV head blockIdx.y / slices, partners are the queries
 * (q, dout, lse, delta) of each query head of slice blockIdx.y % slices of its group in turn.
 * One slice adds into dkv; several write their sums to partial [slices, B, T, NKV, 2, HS]. */
template <typename T, int DPL, int ROWS>
__global__ void __launch_bounds__(WARPS * 32)
    attention_dkv_kernel(T *dkv, float *partial, const T *dout, const T *qb, const T *kvb,
                         const float *lse, const float *delta, attn_layout L, float scale,
                         int slices, int slice_heads) {
    constexpr int OWN = WARPS * ROWS;
    extern __shared__ float smem[];
    const int HS = L.HS;
    const int64_t seq = L.seq, g = blockIdx.y / slices, slice = blockIdx.y % slices;
    const int ldt = HS + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *own_k = smem, *own_v = own_k + OWN * HS, *qt = own_v + OWN * HS, *gt = qt + PTILE * ldt,
          *tile_lse = gt + PTILE * ldt, *tile_delta = tile_lse + PTILE;
    /* blockIdx.x 0 takes key tile 0, which every query sees: most work first */
    const int64_t ptiles = (seq + PTILE - 1) / PTILE;
    const int64_t k0 = (int64_t)blockIdx.x * OWN, k_first = k0 + warp * ROWS;
    load_tile(own_k, HS, kv_rows(kvb, L, g, L.k_off), k0, seq, HS, OWN);
    load_tile(own_v, HS, kv_rows(kvb, L, g, L.v_off), k0, seq, HS, OWN);
    float dk[ROWS][DPL], dv[ROWS][DPL];
    zero(dk);
    zero(dv);
    const int64_t h_begin = g * L.group + slice * slice_heads;
    const int64_t h_end =
        h_begin + slice_heads < (g + 1) * L.group ? h_begin + slice_heads : (g + 1) * L.group;
    for (int64_t h = h_begin; h < h_end; h++) {
        const int64_t stats = ((int64_t)blockIdx.z * L.NH + h) * seq;
        for (int64_t qt_i = k0 / PTILE; qt_i < ptiles; qt_i++) {
            const int64_t q0 = qt_i * PTILE;
            __syncthreads();
            load_tile(qt, ldt, q_rows(qb, L, h), q0, seq, HS, PTILE);
            load_tile(gt, ldt, out_rows(dout, L, h), q0, seq, HS, PTILE);
            if (threadIdx.x < PTILE) {
                const int64_t qi = q0 + threadIdx.x;
                tile_lse[threadIdx.x] = qi < seq ? lse[stats + qi] : 0.0f;
                tile_delta[threadIdx.x] = qi < seq ? delta[stats + qi] : 0.0f;
            }
            __syncthreads();
            float s[ROWS], dp[ROWS], p[ROWS];
            lane_dots(s, own_k + warp * ROWS * HS, qt + lane * ldt, HS);
            lane_dots(dp, own_v + warp * ROWS * HS, gt + lane * ldt, HS);
            const int64_t qi = q0 + lane;
#pragma unroll
            for (int r = 0; r < ROWS; r++) {
                const int64_t kj = k_first + r;
                p[r] = kj <= qi && qi < seq ? expf(s[r] * scale - tile_lse[lane]) : 0.0f;
                s[r] = p[r] * (dp[r] - tile_delta[lane]); /* ds */
            }
            lane_accumulate(dv, p, gt, ldt, HS);
            lane_accumulate(dk, s, qt, ldt, HS);
        }
    }
    if (slices == 1) {
        store_rows(kv_rows(dkv, L, g, L.k_off), dk, k_first, seq, HS, scale, true);
        store_rows(kv_rows(dkv, L, g, L.v_off), dv, k_first, seq, HS, 1.0f, true);
        return;
    }
    const int64_t ld = (int64_t)(L.NH / L.group) * 2 * HS;
    float *base = partial + (slice * gridDim.z + blockIdx.z) * seq * ld + g * 2 * HS;
    store_rows(head_rows<float>{base, ld}, dk, k_first, seq, HS, scale, false);
    store_rows(head_rows<float>{base + HS, ld}, dv, k_first, seq, HS, 1.0f, false);
}

/* dkv += the sum over slices, in slice order, of partial [slices, B, T, NKV, 2, HS]. */
template <typename T>
__global__ void attention_dkv_reduce_kernel(T *dkv, const float *partial, attn_layout L, int64_t B,
                                            int slices) {
    const int64_t width = 2 * (int64_t)L.HS, NKV = L.NH / L.group, n = B * L.seq * NKV * width;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < slices; s++) sum += partial[s * n + e];
        const int64_t c = e % width, row = e / width; /* row = (b T + t) NKV + g */
        const int64_t g = row % NKV, bt = row / NKV;
        T *p = dkv + bt * L.kv_ld + g * L.kv_hs + (c < L.HS ? L.k_off + c : L.v_off + c - L.HS);
        *p = zoe_from_f32<T>(zoe_to_f32(*p) + sum);
    }
}

/* ---- launch ---- */

/* Calls f(std::integral_constant<int, DPL>) with DPL the dims per lane (1, 2, 4, 8) for HS. */
template <typename F> static zoe_status with_dims_per_lane(int64_t HS, F &&f) {
    if (HS <= 32) return f(std::integral_constant<int, 1>{});
    if (HS <= 64) return f(std::integral_constant<int, 2>{});
    if (HS <= 128) return f(std::integral_constant<int, 4>{});
    return f(std::integral_constant<int, 8>{});
}

/* Calls f(std::integral_constant<int, ROWS>) with ROWS the own rows per warp of `rows` rows. */
template <typename F> static zoe_status with_rows_per_warp(int rows, F &&f) {
    if (rows == 32) return f(std::integral_constant<int, 4>{});
    if (rows == 16) return f(std::integral_constant<int, 2>{});
    return f(std::integral_constant<int, 1>{});
}

static zoe_status check_shape(const char *op, int64_t B, int64_t NH, int64_t HS) {
    if (HS > ZOE_ATTN_MAX_HEAD_DIM)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "%s: HS=%lld exceeds the CUDA kernels' %d", op,
                        (long long)HS, (int)ZOE_ATTN_MAX_HEAD_DIM);
    if (B > 65535 || NH > 65535)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "%s: B=%lld or NH=%lld exceeds a grid dimension", op,
                        (long long)B, (long long)NH);
    return ZOE_OK;
}

/* Own rows of the flash tiles of `pass` at HS on this GPU (zoe_cuda_kernels_create has refused
 * a plan whose head size fits none; this is the same check for a call). */
static zoe_status flash_rows(const zoe_cuda_kernels *ck, const char *op, zoe_attention_pass pass,
                             int64_t HS, int *rows) {
    *rows = zoe_attention_flash_rows(pass, HS, ck->attn_gpu.smem_optin);
    if (*rows == 0)
        return zoe_fail(ZOE_ERR_UNSUPPORTED,
                        "%s: HS=%lld needs %lld bytes of shared memory per block, the GPU (sm_%d) "
                        "allows %lld",
                        op, (long long)HS,
                        (long long)zoe_attention_flash_smem(pass, HS, ZOE_ATTN_WARPS),
                        ck->attn_gpu.cc, (long long)ck->attn_gpu.smem_optin);
    return ZOE_OK;
}

/* Launches kernel on grid with `bytes` of dynamic shared memory, raising the kernel's limit
 * first (needed above the default 48 KiB). */
template <typename K, typename... Args>
static zoe_status launch_tiles(zoe_cuda_kernels *ck, const char *name, K kernel, int64_t bytes,
                               dim3 grid, Args... args) {
    ZOE_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    kernel<<<grid, WARPS * 32, (size_t)bytes, ck->stream>>>(args...);
    return zoe_cuda_launched(name);
}

static dim3 tile_grid(int64_t T, int rows, int64_t y, int64_t B) {
    return dim3((unsigned)((T + rows - 1) / rows), (unsigned)y, (unsigned)B);
}

static bool on_tensor_cores(const zoe_cuda_kernels *ck, zoe_dtype dt) {
    return zoe_attention_path_of(dt, ck->attn_gpu.cc, ck->plan.attention_flash) ==
           ZOE_ATTN_PATH_GEMM;
}

static zoe_status forward(zoe_cuda_kernels *ck, const char *op, zoe_dtype dt, void *out, float *lse,
                          const void *q, const void *kv, int64_t B, const attn_layout &L) {
    if (B == 0 || L.seq == 0 || L.NH == 0) return ZOE_OK;
    ZOE_TRY(check_shape(op, B, L.NH, L.HS));
    if (on_tensor_cores(ck, dt))
        return zoe_cuda_attention_gemm_forward(ck, dt, out, lse, q, kv, B, L);
    int rows = 0;
    ZOE_TRY(flash_rows(ck, op, ZOE_ATTN_FORWARD, L.HS, &rows));
    const float scale = 1.0f / sqrtf((float)L.HS);
    const int64_t bytes = zoe_attention_flash_smem(ZOE_ATTN_FORWARD, L.HS, rows);
    const dim3 grid = tile_grid(L.seq, rows, L.NH, B);
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        return with_dims_per_lane(L.HS, [&](auto dpl) {
            return with_rows_per_warp(rows, [&](auto rpw) {
                constexpr int DPL = decltype(dpl)::value, ROWS = decltype(rpw)::value;
                return launch_tiles(ck, "attention_forward_kernel",
                                    attention_forward_kernel<E, DPL, ROWS>, bytes, grid, (E *)out,
                                    lse, (const E *)q, (const E *)kv, L, scale);
            });
        });
    });
}

/* delta, then dq (when not NULL) over the query heads and dk/dv (when not NULL) over the KV
 * heads, on the tensor cores or the flash kernels. */
static zoe_status backward(zoe_cuda_kernels *ck, const char *op, zoe_dtype dt, void *dq, void *dkv,
                           const void *dout, const void *q, const void *kv, const void *out,
                           const float *lse, int64_t B, const attn_layout &L) {
    if ((!dq && !dkv) || B == 0 || L.seq == 0 || L.NH == 0) return ZOE_OK;
    ZOE_TRY(check_shape(op, B, L.NH, L.HS));
    const bool gemm = on_tensor_cores(ck, dt);
    int rows = 0;
    if (!gemm) ZOE_TRY(flash_rows(ck, op, ZOE_ATTN_BACKWARD, L.HS, &rows));
    const float scale = 1.0f / sqrtf((float)L.HS);
    const int64_t n_rows = B * L.seq * L.NH, NKV = L.NH / L.group;
    float *delta = ck->attn_delta;
    return zoe_cuda_with_dtype(dt, [&](auto tag) {
        using E = typename decltype(tag)::type;
        attention_delta_kernel<E>
            <<<(unsigned)((n_rows + WARPS - 1) / WARPS), WARPS * 32, 0, ck->stream>>>(
                delta, (const E *)dout, (const E *)out, n_rows, L.seq, L.NH, L.HS);
        ZOE_TRY(zoe_cuda_launched("attention_delta_kernel"));
        if (gemm)
            return zoe_cuda_attention_gemm_backward(ck, dt, dq, dkv, dout, q, kv, lse, delta, B, L);
        const int64_t bytes = zoe_attention_flash_smem(ZOE_ATTN_BACKWARD, L.HS, rows);
        const zoe_attention_dkv_split split = zoe_attention_dkv_split_of(
            B, L.seq, NKV, L.group, L.HS, rows, ck->attn_gpu.sms, ck->attn_dkv_bytes);
        return with_dims_per_lane(L.HS, [&](auto dpl) {
            return with_rows_per_warp(rows, [&](auto rpw) {
                constexpr int DPL = decltype(dpl)::value, ROWS = decltype(rpw)::value;
                if (dq)
                    ZOE_TRY(launch_tiles(
                        ck, "attention_dq_kernel", attention_dq_kernel<E, DPL, ROWS>, bytes,
                        tile_grid(L.seq, rows, L.NH, B), (E *)dq, (const E *)dout, (const E *)q,
                        (const E *)kv, lse, (const float *)delta, L, scale));
                if (!dkv) return ZOE_OK;
                ZOE_TRY(launch_tiles(ck, "attention_dkv_kernel", attention_dkv_kernel<E, DPL, ROWS>,
                                     bytes, tile_grid(L.seq, rows, NKV * split.slices, B), (E *)dkv,
                                     ck->attn_dkv, (const E *)dout, (const E *)q, (const E *)kv,
                                     lse, (const float *)delta, L, scale, (int)split.slices,
                                     (int)split.heads));
                if (split.slices == 1) return ZOE_OK;
                const int64_t n = B * L.seq * NKV * 2 * L.HS;
                attention_dkv_reduce_kernel<E><<<zoe_grid_for(ck, n, 256), 256, 0, ck->stream>>>(
                    (E *)dkv, (const float *)ck->attn_dkv, L, B, (int)split.slices);
                return zoe_cuda_launched("attention_dkv_reduce_kernel");
            });
        });
    });
}

extern "C" zoe_status zoe_cuda_attention_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                                 float *lse, const void *qkv, int64_t B, int64_t T,
                                                 int64_t NH, int64_t HS) {
    return forward(ck, "zoe_attention_forward", dt, out, lse, qkv, qkv, B,
                   attn_interleaved_layout(T, NH, HS));
}

extern "C" zoe_status zoe_cuda_attention_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dqkv,
                                                  const void *dout, const void *qkv,
                                                  const void *out, const float *lse, int64_t B,
                                                  int64_t T, int64_t NH, int64_t HS) {
    return backward(ck, "zoe_attention_backward", dt, dqkv, dqkv, dout, qkv, qkv, out, lse, B,
                    attn_interleaved_layout(T, NH, HS));
}

extern "C" zoe_status zoe_cuda_attention_gqa_forward(zoe_cuda_kernels *ck, zoe_dtype dt, void *out,
                                                     float *lse, const void *q, const void *kv,
                                                     int64_t B, int64_t T, int64_t NH, int64_t NKV,
                                                     int64_t HS) {
    return forward(ck, "zoe_attention_gqa_forward", dt, out, lse, q, kv, B,
                   attn_grouped_layout(T, NH, NKV, HS));
}

extern "C" zoe_status zoe_cuda_attention_gqa_backward(zoe_cuda_kernels *ck, zoe_dtype dt, void *dq,
                                                      void *dkv, const void *dout, const void *q,
                                                      const void *kv, const void *out,
                                                      const float *lse, int64_t B, int64_t T,
                                                      int64_t NH, int64_t NKV, int64_t HS) {
    return backward(ck, "zoe_attention_gqa_backward", dt, dq, dkv, dout, q, kv, out, lse, B,
                    attn_grouped_layout(T, NH, NKV, HS));
}
