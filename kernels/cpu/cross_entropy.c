/* Softmax cross-entropy on the CPU, in the stages of the public header: OpenMP over rows, each
 * row streamed in chunks (bf16 through a stack buffer), so nothing beyond the logits buffer
 * holds probabilities. Only the first v_valid columns are read; padding columns of dlogits
 * and whole ignored rows are written as zeros (0 bits are +0 in fp32 and bf16 alike).
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include <math.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"

/* Rows per parallel region below which a region costs more than it saves. */
enum { PARALLEL_MIN_ROWS = 4 };

ZOE_CPU_INLINE void max_chunk_body(zoe_cpu_isa isa, float *m, const float *x, int64_t n) {
    float mx = *m;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    *m = mx;
}
ZOE_CPU_MULTIVERSION(max_chunk, (zoe_cpu_isa isa, float *m, const float *x, int64_t n),
                     (isa, m, x, n))

ZOE_CPU_INLINE void sum_exp_chunk_body(zoe_cpu_isa isa, float *s, const float *x, float mx,
                                       int64_t n) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; i++) sum += zoe_cpu_expf(x[i] - mx);
    *s += sum;
}
ZOE_CPU_MULTIVERSION(sum_exp_chunk,
                     (zoe_cpu_isa isa, float *s, const float *x, float mx, int64_t n),
                     (isa, s, x, mx, n))

/* d = exp(x - mx) * k, where k = scale / sum_exp; d may alias x. */
ZOE_CPU_INLINE void softmax_chunk_body(zoe_cpu_isa isa, float *d, const float *x, float mx, float k,
                                       int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) d[i] = zoe_cpu_expf(x[i] - mx) * k;
}
ZOE_CPU_MULTIVERSION(softmax_chunk,
                     (zoe_cpu_isa isa, float *d, const float *x, float mx, float k, int64_t n),
                     (isa, d, x, mx, k, n))

zoe_status zoe_cpu_xent_row_max(zoe_cpu_kernels *ck, zoe_dtype dt, float *row_max,
                                const void *logits, int64_t rows, int64_t V, int64_t v_valid) {
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (rows >= PARALLEL_MIN_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        float buf[ZOE_CPU_CHUNK], mx = -INFINITY;
        for (int64_t c = 0; c < v_valid; c += ZOE_CPU_CHUNK) {
            const int64_t n = zoe_cpu_min64(ZOE_CPU_CHUNK, v_valid - c);
            max_chunk(ck->isa, &mx, zoe_cpu_load(logits, dt, r * V + c, n, buf), n);
        }
        row_max[r] = mx;
    }
    return ZOE_OK;
}

/* The logit of column `col` of row r. */
static float logit_at(const void *logits, zoe_dtype dt, int64_t r, int64_t V, int64_t col) {
    float v;
    return *zoe_cpu_load(logits, dt, r * V + col, 1, &v);
}

/* Column of the target in this rank's valid range, or -1. */
static int64_t target_column(int32_t target, int64_t vocab_start, int64_t v_valid,
                             int32_t ignore_index) {
    if (target == ignore_index) return -1;
    const int64_t col = (int64_t)target - vocab_start;
    return col >= 0 && col < v_valid ? col : -1;
}

zoe_status zoe_cpu_xent_row_sums(zoe_cpu_kernels *ck, zoe_dtype dt, float *sum_exp,
                                 float *target_logit, const void *logits, const float *row_max,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t v_valid,
                                 int64_t vocab_start, int32_t ignore_index) {
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (rows >= PARALLEL_MIN_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        float buf[ZOE_CPU_CHUNK], s = 0.0f;
        for (int64_t c = 0; c < v_valid; c += ZOE_CPU_CHUNK) {
            const int64_t n = zoe_cpu_min64(ZOE_CPU_CHUNK, v_valid - c);
            sum_exp_chunk(ck->isa, &s, zoe_cpu_load(logits, dt, r * V + c, n, buf), row_max[r], n);
        }
        sum_exp[r] = s;
        const int64_t col = target_column(targets[r], vocab_start, v_valid, ignore_index);
        target_logit[r] = col >= 0 ? logit_at(logits, dt, r, V, col) : 0.0f;
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_xent_loss(zoe_cpu_kernels *ck, float *losses, float *mean_loss, int64_t *count,
                             const float *row_max, const float *sum_exp, const float *target_logit,
                             const int32_t *targets, int64_t rows, int32_t ignore_index) {
    (void)ck;
    double total = 0.0; /* serial, in row order: the mean is reproducible */
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        float loss = 0.0f;
        if (targets[r] != ignore_index) {
            loss = logf(sum_exp[r]) + row_max[r] - target_logit[r];
            total += loss;
            counted++;
        }
        if (losses) losses[r] = loss;
    }
    if (mean_loss) *mean_loss = counted ? (float)(total / (double)counted) : 0.0f;
    if (count) *count = counted;
    return ZOE_OK;
}

zoe_status zoe_cpu_xent_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dlogits,
                                 const void *logits, const float *row_max, const float *sum_exp,
                                 const int32_t *targets, int64_t rows, int64_t V, int64_t v_valid,
                                 int64_t vocab_start, int32_t ignore_index, float scale) {
    const size_t esize = zoe_dtype_size(dt);
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (rows >= PARALLEL_MIN_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        char *row = (char *)dlogits + (size_t)(r * V) * esize;
        if (targets[r] == ignore_index) {
            memset(row, 0, (size_t)V * esize);
            continue;
        }
        const int64_t col = target_column(targets[r], vocab_start, v_valid, ignore_index);
        const float k = scale / sum_exp[r];
        for (int64_t c = 0; c < v_valid; c += ZOE_CPU_CHUNK) {
            const int64_t n = zoe_cpu_min64(ZOE_CPU_CHUNK, v_valid - c);
            float in[ZOE_CPU_CHUNK], out[ZOE_CPU_CHUNK];
            const float *x = zoe_cpu_load(logits, dt, r * V + c, n, in);
            float *d = zoe_cpu_out(dlogits, dt, r * V + c, out);
            softmax_chunk(ck->isa, d, x, row_max[r], k, n);
            if (col >= c && col < c + n) d[col - c] -= scale;
            zoe_cpu_store(dlogits, dt, r * V + c, d, n);
        }
        memset(row + (size_t)v_valid * esize, 0, (size_t)(V - v_valid) * esize);
    }
    return ZOE_OK;
}
