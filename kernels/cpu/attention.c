/* Causal multi-head attention on the CPU, flash-style: no T x T matrix exists, only one
 * BLOCK x BLOCK score tile per thread.
 *
 * Forward: OpenMP over (batch, head, query block). For each key block up to the diagonal,
 * S = scale q k^T, then an online softmax per row (running max m and sum l, the output
 * accumulator rescaled when m grows) and acc += P v. out = acc / l, lse = m + log l.
 * Backward: OpenMP over (batch, head), so one thread owns a head's dq, dk, dv (no races, fixed
 * summation order). D = rowsum(dout * out); per key block j, per query block i >= j:
 * P = exp(S - lse) recomputed, dv_j += P^T dout_i, dS = P (dout_i v_j^T - D),
 * dq_i += scale dS k_j, dk_j += scale dS^T q_i. dk_j, dv_j are block tiles; dq is the head's
 * [T, HS] fp32 accumulator; all are added into dqkv once.
 *
 * Every block product is a cblas_sgemm, single-threaded inside the OpenMP region (see
 * matmul.c). Measured against a SIMD loop kernel (one thread, CPU time), OpenBLAS won at every
 * shape tried, HS 4 ... 128 and T 16 ... 1024 (2x at HS 4, T 16; 3-4x at HS 16-32, T 256), so
 * there is no second path. fp32 operands are read in place through their row stride
 * (NH * 3 * HS for qkv); bf16 blocks are converted into per-thread tiles. */
#include <math.h>
#include <omp.h>
#include <cblas.h>
#include "kernels/cpu/cpu_util.h"

enum { BLOCK = 64 };

size_t zoe_cpu_attention_thread_floats(const zoe_kernel_plan *plan) {
    const size_t hs = (size_t)plan->max_head_dim, tile = (size_t)BLOCK * hs;
    const size_t forward = BLOCK * BLOCK + tile + 2 * BLOCK + 3 * tile;
    const size_t backward =
        (size_t)plan->max_seq * hs + (size_t)plan->max_seq + 2 * BLOCK * BLOCK + 6 * tile;
    return forward > backward ? forward : backward;
}

typedef struct attention_ctx {
    const zoe_cpu_kernels *ck;
    zoe_dtype dt;
    int64_t T, NH, HS;
    float scale;
} attention_ctx;

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

/* One head's [T, HS] slice of a [B, T, NH, parts, HS] tensor: its first element and the
 * distance between its rows. */
typedef struct head_slice {
    const char *base;
    int64_t ld;
} head_slice;

static head_slice slice_of(const attention_ctx *a, const void *t, int64_t parts, int64_t b,
                           int64_t h, int64_t part) {
    const int64_t off = ((b * a->T * a->NH + h) * parts + part) * a->HS;
    return (head_slice){(const char *)t + (size_t)off * zoe_dtype_size(a->dt),
                        a->NH * parts * a->HS};
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

static void forward_block(const attention_ctx *a, float *ws, void *out, float *lse, const void *qkv,
                          int64_t b, int64_t h, int64_t i) {
    const int64_t HS = a->HS, T = a->T;
    float *S = ws, *acc = S + BLOCK * BLOCK, *m = acc + BLOCK * HS, *l = m + BLOCK;
    float *qt = l + BLOCK, *kt = qt + BLOCK * HS, *vt = kt + BLOCK * HS;
    const int64_t q0 = i * BLOCK, nq = zoe_cpu_min64(BLOCK, T - q0);
    int64_t ldq, ldk, ldv;
    const float *q = slice_rows(a, slice_of(a, qkv, 3, b, h, 0), q0, nq, qt, &ldq);
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(acc, 0, (size_t)(nq * HS) * sizeof(float));
    for (int64_t j = 0; j <= i; j++) {
        const int64_t k0 = j * BLOCK, nk = zoe_cpu_min64(BLOCK, T - k0);
        const float *k = slice_rows(a, slice_of(a, qkv, 3, b, h, 1), k0, nk, kt, &ldk);
        const float *v = slice_rows(a, slice_of(a, qkv, 3, b, h, 2), k0, nk, vt, &ldv);
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
    head_slice o = slice_of(a, out, 1, b, h, 0);
    zoe_cpu_store_tile(a->ck, (void *)o.base, a->dt, o.ld, q0, 0, acc, nq, HS, 0);
}

zoe_status zoe_cpu_attention_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, float *lse,
                                     const void *qkv, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS) {
    const attention_ctx a = {ck, dt, T, NH, HS, 1.0f / sqrtf((float)HS)};
    const int64_t blocks = (T + BLOCK - 1) / BLOCK, items = B * NH * blocks;
    int saved = zoe_cpu_blas_serial_begin();
#pragma omp parallel for num_threads(ck->threads) schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
        /* The longest rows (last query blocks) first, for the dynamic schedule. */
        const int64_t i = blocks - 1 - it % blocks, bh = it / blocks;
        forward_block(&a, zoe_cpu_thread_scratch(ck, omp_get_thread_num()), out, lse, qkv, bh / NH,
                      bh % NH, i);
    }
    zoe_cpu_blas_serial_end(saved);
    return ZOE_OK;
}

/* ---- backward ---- */

static void backward_head(const attention_ctx *a, float *ws, void *dqkv, const void *dout,
                          const void *qkv, const void *out, const float *lse_bh, int64_t b,
                          int64_t h) {
    const int64_t HS = a->HS, T = a->T, blocks = (T + BLOCK - 1) / BLOCK;
    const zoe_cpu_isa isa = a->ck->isa;
    float *dq = ws, *D = dq + T * HS, *P = D + T, *dP = P + BLOCK * BLOCK;
    float *dk = dP + BLOCK * BLOCK, *dv = dk + BLOCK * HS, *qt = dv + BLOCK * HS;
    float *gt = qt + BLOCK * HS, *kt = gt + BLOCK * HS, *vt = kt + BLOCK * HS;
    const head_slice sq = slice_of(a, qkv, 3, b, h, 0), sk = slice_of(a, qkv, 3, b, h, 1);
    const head_slice sv = slice_of(a, qkv, 3, b, h, 2), sg = slice_of(a, dout, 1, b, h, 0);
    const head_slice so = slice_of(a, out, 1, b, h, 0);
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
        memset(dk, 0, (size_t)(2 * BLOCK * HS) * sizeof(float)); /* dk and dv */
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
        head_slice dks = slice_of(a, dqkv, 3, b, h, 1), dvs = slice_of(a, dqkv, 3, b, h, 2);
        zoe_cpu_store_tile(a->ck, (void *)dks.base, a->dt, dks.ld, k0, 0, dk, nk, HS, 1);
        zoe_cpu_store_tile(a->ck, (void *)dvs.base, a->dt, dvs.ld, k0, 0, dv, nk, HS, 1);
    }
    head_slice dqs = slice_of(a, dqkv, 3, b, h, 0);
    zoe_cpu_store_tile(a->ck, (void *)dqs.base, a->dt, dqs.ld, 0, 0, dq, T, HS, 1);
}

zoe_status zoe_cpu_attention_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dqkv,
                                      const void *dout, const void *qkv, const void *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH,
                                      int64_t HS) {
    if (!dqkv) return ZOE_OK;
    const attention_ctx a = {ck, dt, T, NH, HS, 1.0f / sqrtf((float)HS)};
    int saved = zoe_cpu_blas_serial_begin();
#pragma omp parallel for num_threads(ck->threads) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; bh++)
        backward_head(&a, zoe_cpu_thread_scratch(ck, omp_get_thread_num()), dqkv, dout, qkv, out,
                      lse + bh * T, bh / NH, bh % NH);
    zoe_cpu_blas_serial_end(saved);
    return ZOE_OK;
}
