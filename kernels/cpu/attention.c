/* Causal multi-head and grouped-query attention on the CPU, flash-style: no T x T matrix
 * exists, only one BLOCK x BLOCK score tile per thread. One implementation serves both public
 * layouts (GPT's interleaved qkv, Llama's q beside kv): q, k and v are strided views, and query
 * head h reads KV head h / group.
 *
 * Forward: OpenMP over (batch, head, query block). For each key block up to the diagonal,
 * S = scale q k^T, then an online softmax per row (running max m and sum l, the output
 * accumulator rescaled when m grows) and acc += P v. out = acc / l, lse = m + log l.
 * Backward: OpenMP over (batch, KV head), so one thread owns a KV head's dk, dv and the dq of
 * the query heads of its group (no races, fixed summation order). Per query head of the group:
 * D = rowsum(dout * out); per key block j, per query block i >= j: P = exp(S - lse)
 * recomputed, dv_j += P^T dout_i, dS = P (dout_i v_j^T - D), dq_i += scale dS k_j,
 * dk_j += scale dS^T q_i. dq is the query head's [T, HS] fp32 accumulator, dk and dv the KV
 * head's, summed over the group; each is added into its gradient once.
 *
 * Every block product is a cblas_sgemm, single-threaded inside the OpenMP region (see
 * matmul.c). Measured against a SIMD loop kernel (one thread, CPU time), OpenBLAS won at every
 * shape tried, HS 4 ... 128 and T 16 ... 1024 (2x at HS 4, T 16; 3-4x at HS 16-32, T 256), so
 * there is no second path. fp32 operands are read in place through their row stride
 * (NH * 3 * HS for GPT's qkv); bf16 blocks are converted into per-thread tiles.
 *
 * Explained in docs/attention.md. */
#include <math.h>
#include <omp.h>
#include <cblas.h>
#include "kernels/cpu/cpu_util.h"

enum { BLOCK = 64 };

size_t zoe_cpu_attention_thread_floats(const zoe_kernel_plan *plan) {
    const size_t hs = (size_t)plan->max_head_dim, tile = (size_t)BLOCK * hs;
    const size_t forward = BLOCK * BLOCK + tile + 2 * BLOCK + 3 * tile;
    const size_t backward =
        3 * (size_t)plan->max_seq * hs + (size_t)plan->max_seq + 2 * BLOCK * BLOCK + 4 * tile;
    return forward > backward ? forward : backward;
}

/* Where head h's [T, HS] rows of one operand are: row t of batch b starts at
 * base + ((b * T + t) * ld + h * head_stride) elements. */
typedef struct head_view {
    const char *base;
    int64_t ld, head_stride;
} head_view;

/* The operands and their gradients in one layout; query head h uses KV head h / group. */
typedef struct attention_ctx {
    const zoe_cpu_kernels *ck;
    zoe_dtype dt;
    int64_t T, NH, HS, group;
    float scale;
    head_view q, k, v, out; /* dout and out share out's layout */
    head_view dq, dk, dv;   /* the gradients share their operands' layouts */
} attention_ctx;

/* GPT's qkv [B, T, NH, 3, HS]: per head its q, k and v side by side. */
static attention_ctx interleaved_ctx(const zoe_cpu_kernels *ck, zoe_dtype dt, const void *qkv,
                                     const void *dqkv, int64_t T, int64_t NH, int64_t HS) {
    const size_t es = zoe_dtype_size(dt);
    const int64_t ld = NH * 3 * HS, hs = 3 * HS;
    const char *b = qkv, *g = dqkv;
    return (attention_ctx){.ck = ck,
                           .dt = dt,
                           .T = T,
                           .NH = NH,
                           .HS = HS,
                           .group = 1,
                           .scale = 1.0f / sqrtf((float)HS),
                           .q = {b, ld, hs},
                           .k = {b + (size_t)HS * es, ld, hs},
                           .v = {b + (size_t)(2 * HS) * es, ld, hs},
                           .out = {NULL, NH * HS, HS},
                           .dq = {g, ld, hs},
                           .dk = {g ? g + (size_t)HS * es : NULL, ld, hs},
                           .dv = {g ? g + (size_t)(2 * HS) * es : NULL, ld, hs}};
}

/* Llama's q [B, T, NH, HS] and kv [B, T, NKV, 2, HS]. */
static attention_ctx grouped_ctx(const zoe_cpu_kernels *ck, zoe_dtype dt, const void *q,
                                 const void *kv, const void *dq, const void *dkv, int64_t T,
                                 int64_t NH, int64_t NKV, int64_t HS) {
    const size_t es = zoe_dtype_size(dt);
    const int64_t ldkv = NKV * 2 * HS;
    const char *kvb = kv, *dkvb = dkv;
    return (attention_ctx){.ck = ck,
                           .dt = dt,
                           .T = T,
                           .NH = NH,
                           .HS = HS,
                           .group = NH / NKV,
                           .scale = 1.0f / sqrtf((float)HS),
                           .q = {q, NH * HS, HS},
                           .k = {kvb, ldkv, 2 * HS},
                           .v = {kvb + (size_t)HS * es, ldkv, 2 * HS},
                           .out = {NULL, NH * HS, HS},
                           .dq = {dq, NH * HS, HS},
                           .dk = {dkvb, ldkv, 2 * HS},
                           .dv = {dkvb ? dkvb + (size_t)HS * es : NULL, ldkv, 2 * HS}};
}

/* C[m,n] = alpha op(A) op(B) + beta C on the calling thread (the pool is serial here). */
static void block_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* ---- row kernels ---- */

/* One row of scaled scores s[0, nk) of which the first `valid` are unmasked: folds them into
 * the running max *m and sum *l, rescales the output accumulator, and leaves the unnormalised
 * probabilities exp(s - m) in s (0 where masked). */
ZOE_CPU_INLINE void online_softmax_body(zoe_cpu_isa isa, float *s, int64_t valid, int64_t nk,
                                        float *m, float *l, float *acc, int64_t HS) {
    float mx = *m;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < valid; c++) mx = s[c] > mx ? s[c] : mx;
    const float corr = *m == -INFINITY ? 0.0f : zoe_cpu_expf(*m - mx);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < valid; c++) {
        s[c] = zoe_cpu_expf(s[c] - mx);
        sum += s[c];
    }
    for (int64_t c = valid; c < nk; c++) s[c] = 0.0f;
#pragma omp simd
    for (int64_t d = 0; d < HS; d++) acc[d] *= corr;
    *l = *l * corr + sum;
    *m = mx;
}
ZOE_CPU_MULTIVERSION(online_softmax,
                     (zoe_cpu_isa isa, float *s, int64_t valid, int64_t nk, float *m, float *l,
                      float *acc, int64_t HS),
                     (isa, s, valid, nk, m, l, acc, HS))

/* s = exp(s - lse) for the first `valid` entries, 0 for the masked rest. */
ZOE_CPU_INLINE void probs_body(zoe_cpu_isa isa, float *s, int64_t valid, int64_t nk, float lse) {
#pragma omp simd
    for (int64_t c = 0; c < valid; c++) s[c] = zoe_cpu_expf(s[c] - lse);
    for (int64_t c = valid; c < nk; c++) s[c] = 0.0f;
}
ZOE_CPU_MULTIVERSION(probs, (zoe_cpu_isa isa, float *s, int64_t valid, int64_t nk, float lse),
                     (isa, s, valid, nk, lse))

/* dp = p (dp - D): the score gradient, in place over dP. */
ZOE_CPU_INLINE void dscores_body(zoe_cpu_isa isa, float *dp, const float *p, float D, int64_t n) {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) dp[c] = p[c] * (dp[c] - D);
}
ZOE_CPU_MULTIVERSION(dscores, (zoe_cpu_isa isa, float *dp, const float *p, float D, int64_t n),
                     (isa, dp, p, D, n))

ZOE_CPU_INLINE void row_dot_body(zoe_cpu_isa isa, float *out, const float *a, const float *b,
                                 int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    *out = s;
}
ZOE_CPU_MULTIVERSION(row_dot,
                     (zoe_cpu_isa isa, float *out, const float *a, const float *b, int64_t n),
                     (isa, out, a, b, n))

/* ---- head slices ---- */

/* One head's [T, HS] slice of batch b: its first element and the distance between its rows. */
typedef struct head_slice {
    const char *base;
    int64_t ld;
} head_slice;

static head_slice slice_of(const attention_ctx *a, head_view view, const void *base, int64_t b,
                           int64_t h) {
    const int64_t off = b * a->T * view.ld + h * view.head_stride;
    return (head_slice){(const char *)base + (size_t)off * zoe_dtype_size(a->dt), view.ld};
}

/* Rows [r0, r0 + n) of a slice as fp32: in place for fp32, converted into tile for bf16. */
static const float *slice_rows(const attention_ctx *a, head_slice s, int64_t r0, int64_t n,
                               float *tile, int64_t *ld) {
    if (a->dt == ZOE_F32) {
        *ld = s.ld;
        return (const float *)s.base + r0 * s.ld;
    }
    zoe_cpu_load_tile(tile, s.base, a->dt, s.ld, r0, 0, n, a->HS);
    *ld = a->HS;
    return tile;
}

/* The number of unmasked keys of query row r of block i against key block j. */
static int64_t causal_valid(int64_t i, int64_t j, int64_t r, int64_t nk) {
    return i == j ? zoe_cpu_min64(r + 1, nk) : nk;
}

/* ---- forward ---- */

static void forward_block(const attention_ctx *a, float *ws, void *out, float *lse, int64_t b,
                          int64_t h, int64_t i) {
    const int64_t HS = a->HS, T = a->T;
    float *S = ws, *acc = S + BLOCK * BLOCK, *m = acc + BLOCK * HS, *l = m + BLOCK;
    float *qt = l + BLOCK, *kt = qt + BLOCK * HS, *vt = kt + BLOCK * HS;
    const int64_t q0 = i * BLOCK, nq = zoe_cpu_min64(BLOCK, T - q0);
    int64_t ldq, ldk, ldv;
    const int64_t hkv = h / a->group;
    const float *q = slice_rows(a, slice_of(a, a->q, a->q.base, b, h), q0, nq, qt, &ldq);
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(acc, 0, (size_t)(nq * HS) * sizeof(float));
    for (int64_t j = 0; j <= i; j++) {
        const int64_t k0 = j * BLOCK, nk = zoe_cpu_min64(BLOCK, T - k0);
        const float *k = slice_rows(a, slice_of(a, a->k, a->k.base, b, hkv), k0, nk, kt, &ldk);
        const float *v = slice_rows(a, slice_of(a, a->v, a->v.base, b, hkv), k0, nk, vt, &ldv);
        block_gemm(0, 1, nq, nk, HS, a->scale, q, ldq, k, ldk, 0.0f, S, nk);
        for (int64_t r = 0; r < nq; r++)
            online_softmax(a->ck->isa, S + r * nk, causal_valid(i, j, r, nk), nk, &m[r], &l[r],
                           acc + r * HS, HS);
        block_gemm(0, 0, nq, HS, nk, 1.0f, S, nk, v, ldv, 1.0f, acc, HS);
    }
    float *lse_row = lse + (b * a->NH + h) * T + q0;
    for (int64_t r = 0; r < nq; r++) {
        const float inv = 1.0f / l[r];
        for (int64_t d = 0; d < HS; d++) acc[r * HS + d] *= inv;
        lse_row[r] = m[r] + logf(l[r]);
    }
    head_slice o = slice_of(a, a->out, out, b, h);
    zoe_cpu_store_tile(a->ck, (void *)o.base, a->dt, o.ld, q0, 0, acc, nq, HS, 0);
}

static void forward(const attention_ctx *ap, void *out, float *lse, int64_t B) {
    const attention_ctx a = *ap;
    const zoe_cpu_kernels *ck = a.ck;
    const int64_t T = a.T, NH = a.NH;
    const int64_t blocks = (T + BLOCK - 1) / BLOCK, items = B * NH * blocks;
    int saved = zoe_cpu_blas_serial_begin();
#pragma omp parallel for num_threads(ck->threads) schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
        /* The longest rows (last query blocks) first, for the dynamic schedule. */
        const int64_t i = blocks - 1 - it % blocks, bh = it / blocks;
        forward_block(&a, zoe_cpu_thread_scratch(ck, omp_get_thread_num()), out, lse, bh / NH,
                      bh % NH, i);
    }
    zoe_cpu_blas_serial_end(saved);
}

zoe_status zoe_cpu_attention_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, float *lse,
                                     const void *qkv, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS) {
    const attention_ctx a = interleaved_ctx(ck, dt, qkv, NULL, T, NH, HS);
    forward(&a, out, lse, B);
    return ZOE_OK;
}

zoe_status zoe_cpu_attention_gqa_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, float *lse,
                                         const void *q, const void *kv, int64_t B, int64_t T,
                                         int64_t NH, int64_t NKV, int64_t HS) {
    const attention_ctx a = grouped_ctx(ck, dt, q, kv, NULL, NULL, T, NH, NKV, HS);
    forward(&a, out, lse, B);
    return ZOE_OK;
}

/* ---- backward ---- */

/* One query head h of batch b: dq (when wanted) into its gradient, and its share of the KV
 * head's gradients into the fp32 accumulators dk_acc, dv_acc [T, HS]. */
static void backward_query_head(const attention_ctx *a, float *ws, float *dk_acc, float *dv_acc,
                                const void *dout, const void *out, const float *lse_bh, int64_t b,
                                int64_t h) {
    const int64_t HS = a->HS, T = a->T, blocks = (T + BLOCK - 1) / BLOCK, hkv = h / a->group;
    const zoe_cpu_isa isa = a->ck->isa;
    float *dq = ws, *D = dq + T * HS, *P = D + T, *dP = P + BLOCK * BLOCK;
    float *qt = dP + BLOCK * BLOCK, *gt = qt + BLOCK * HS, *kt = gt + BLOCK * HS;
    float *vt = kt + BLOCK * HS;
    const head_slice sq = slice_of(a, a->q, a->q.base, b, h);
    const head_slice sk = slice_of(a, a->k, a->k.base, b, hkv);
    const head_slice sv = slice_of(a, a->v, a->v.base, b, hkv);
    const head_slice sg = slice_of(a, a->out, dout, b, h), so = slice_of(a, a->out, out, b, h);
    int64_t ldq, ldk, ldv, ldg, ldo;

    for (int64_t i = 0; i < blocks; i++) { /* D = rowsum(dout * out) */
        const int64_t q0 = i * BLOCK, nq = zoe_cpu_min64(BLOCK, T - q0);
        const float *g = slice_rows(a, sg, q0, nq, gt, &ldg);
        const float *o = slice_rows(a, so, q0, nq, qt, &ldo);
        for (int64_t r = 0; r < nq; r++) row_dot(isa, &D[q0 + r], g + r * ldg, o + r * ldo, HS);
    }
    memset(dq, 0, (size_t)(T * HS) * sizeof(float));
    for (int64_t j = 0; j < blocks; j++) {
        const int64_t k0 = j * BLOCK, nk = zoe_cpu_min64(BLOCK, T - k0);
        const float *k = slice_rows(a, sk, k0, nk, kt, &ldk);
        const float *v = slice_rows(a, sv, k0, nk, vt, &ldv);
        float *dk = dk_acc + k0 * HS, *dv = dv_acc + k0 * HS;
        for (int64_t i = j; i < blocks; i++) {
            const int64_t q0 = i * BLOCK, nq = zoe_cpu_min64(BLOCK, T - q0);
            const float *q = slice_rows(a, sq, q0, nq, qt, &ldq);
            const float *g = slice_rows(a, sg, q0, nq, gt, &ldg);
            block_gemm(0, 1, nq, nk, HS, a->scale, q, ldq, k, ldk, 0.0f, P, nk);
            for (int64_t r = 0; r < nq; r++)
                probs(isa, P + r * nk, causal_valid(i, j, r, nk), nk, lse_bh[q0 + r]);
            block_gemm(1, 0, nk, HS, nq, 1.0f, P, nk, g, ldg, 1.0f, dv, HS);
            block_gemm(0, 1, nq, nk, HS, 1.0f, g, ldg, v, ldv, 0.0f, dP, nk);
            for (int64_t r = 0; r < nq; r++) dscores(isa, dP + r * nk, P + r * nk, D[q0 + r], nk);
            block_gemm(0, 0, nq, HS, nk, a->scale, dP, nk, k, ldk, 1.0f, dq + q0 * HS, HS);
            block_gemm(1, 0, nk, HS, nq, a->scale, dP, nk, q, ldq, 1.0f, dk, HS);
        }
    }
    if (a->dq.base) {
        head_slice dqs = slice_of(a, a->dq, a->dq.base, b, h);
        zoe_cpu_store_tile(a->ck, (void *)dqs.base, a->dt, dqs.ld, 0, 0, dq, T, HS, 1);
    }
}

/* KV head hkv of batch b and the query heads of its group. */
static void backward_kv_head(const attention_ctx *a, float *ws, const void *dout, const void *out,
                             const float *lse, int64_t b, int64_t hkv) {
    const int64_t HS = a->HS, T = a->T;
    float *dk = ws, *dv = dk + T * HS;
    memset(dk, 0, (size_t)(2 * T * HS) * sizeof(float));
    for (int64_t h = hkv * a->group; h < (hkv + 1) * a->group; h++)
        backward_query_head(a, dv + T * HS, dk, dv, dout, out, lse + (b * a->NH + h) * T, b, h);
    if (a->dk.base) {
        head_slice dks = slice_of(a, a->dk, a->dk.base, b, hkv);
        head_slice dvs = slice_of(a, a->dv, a->dv.base, b, hkv);
        zoe_cpu_store_tile(a->ck, (void *)dks.base, a->dt, dks.ld, 0, 0, dk, T, HS, 1);
        zoe_cpu_store_tile(a->ck, (void *)dvs.base, a->dt, dvs.ld, 0, 0, dv, T, HS, 1);
    }
}

static void backward(const attention_ctx *ap, const void *dout, const void *out, const float *lse,
                     int64_t B) {
    const attention_ctx a = *ap;
    const zoe_cpu_kernels *ck = a.ck;
    const int64_t NKV = a.NH / a.group;
    int saved = zoe_cpu_blas_serial_begin();
#pragma omp parallel for num_threads(ck->threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NKV; bh++)
        backward_kv_head(&a, zoe_cpu_thread_scratch(ck, omp_get_thread_num()), dout, out, lse,
                         bh / NKV, bh % NKV);
    zoe_cpu_blas_serial_end(saved);
}

zoe_status zoe_cpu_attention_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dqkv,
                                      const void *dout, const void *qkv, const void *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH,
                                      int64_t HS) {
    if (!dqkv) return ZOE_OK;
    const attention_ctx a = interleaved_ctx(ck, dt, qkv, dqkv, T, NH, HS);
    backward(&a, dout, out, lse, B);
    return ZOE_OK;
}

zoe_status zoe_cpu_attention_gqa_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dq, void *dkv,
                                          const void *dout, const void *q, const void *kv,
                                          const void *out, const float *lse, int64_t B, int64_t T,
                                          int64_t NH, int64_t NKV, int64_t HS) {
    if (!dq && !dkv) return ZOE_OK;
    const attention_ctx a = grouped_ctx(ck, dt, q, kv, dq, dkv, T, NH, NKV, HS);
    backward(&a, dout, out, lse, B);
    return ZOE_OK;
}
