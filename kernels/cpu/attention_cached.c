/* Attention of new tokens over a key-value cache on the CPU (incremental decoding): OpenMP over
 * (new token, query head). Each pair streams its keys and values once with an online softmax
 * (running max m and sum l, the accumulator rescaled when m grows), so no score row is stored
 * and the op needs no workspace: one query attends to at most a context of keys, a matrix-vector
 * product that BLAS would not speed up. Arithmetic in fp32, as the training attention's.
 *
 * Explained in docs/generate.md, "The key-value cache". */
#include <math.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"
#include "runtime/error.h"

/* The head sizes the stack buffers cover (a query, a key, a value and the accumulator). */
enum { MAX_HS = 512, PARALLEL_MIN_PAIRS = 4 };

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

zoe_status zoe_cpu_attention_cached(zoe_cpu_kernels *ck, zoe_dtype dt, void *out, const void *q,
                                    const void *kv, int64_t pos, int64_t n, int64_t NH, int64_t NKV,
                                    int64_t HS, int64_t q_head_stride, int64_t q_row_stride,
                                    int64_t kv_head_stride, int64_t kv_row_stride) {
    if (HS > MAX_HS)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "zoe_attention_cached: HS=%lld above the CPU's %d",
                        (long long)HS, MAX_HS);
    const int64_t group = NH / NKV, pairs = n * NH;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (pairs >= PARALLEL_MIN_PAIRS)
    for (int64_t p = 0; p < pairs; p++) {
        const int64_t i = p / NH, h = p % NH, g = h / group;
        float qbuf[MAX_HS], kbuf[MAX_HS], vbuf[MAX_HS], acc[MAX_HS];
        const float *qv = zoe_cpu_load(q, dt, i * q_row_stride + h * q_head_stride, HS, qbuf);
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < HS; d++) acc[d] = 0.0f;
        for (int64_t t = 0; t <= pos + i; t++) {
            const int64_t off = t * kv_row_stride + g * kv_head_stride;
            const float s = scale * dot(qv, zoe_cpu_load(kv, dt, off, HS, kbuf), HS);
            if (s > m) { /* the first key always lands here: exp(-inf) rescales nothing to 0 */
                const float c = expf(m - s);
                l *= c;
                for (int64_t d = 0; d < HS; d++) acc[d] *= c;
                m = s;
            }
            const float w = expf(s - m);
            const float *vv = zoe_cpu_load(kv, dt, off + HS, HS, vbuf);
            l += w;
#pragma omp simd
            for (int64_t d = 0; d < HS; d++) acc[d] += w * vv[d];
        }
        for (int64_t d = 0; d < HS; d++) acc[d] /= l;
        zoe_cpu_store(out, dt, p * HS, acc, HS);
    }
    return ZOE_OK;
}
