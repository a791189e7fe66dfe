/* SwiGLU on the CPU: one fused pass per chunk of features, silu through the vectorisable exp.
 * gu holds (gate, up) pairs, so a chunk of F-features reads 2 * chunk inputs.
 *
 * Explained in docs/hf.md. */
#include <omp.h>
#include "kernels/cpu/cpu_util.h"
#include "runtime/error.h"

enum { PARALLEL_MIN_CHUNKS = 4 };

ZOE_CPU_INLINE float sigmoid(float x) {
    return 1.0f / (1.0f + zoe_cpu_expf(-x));
}

ZOE_CPU_INLINE void swiglu_forward_chunk_body(zoe_cpu_isa isa, float *y, const float *gu,
                                              int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gu[2 * i], u = gu[2 * i + 1];
        y[i] = g * sigmoid(g) * u;
    }
}
ZOE_CPU_MULTIVERSION(swiglu_forward_chunk, (zoe_cpu_isa isa, float *y, const float *gu, int64_t n),
                     (isa, y, gu, n))

/* dgate += dy u silu'(g), silu'(g) = s (1 + g (1 - s)); dup += dy silu(g). */
ZOE_CPU_INLINE void swiglu_backward_chunk_body(zoe_cpu_isa isa, float *dgu, const float *dy,
                                               const float *gu, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gu[2 * i], u = gu[2 * i + 1], s = sigmoid(g);
        dgu[2 * i] += dy[i] * u * s * (1.0f + g * (1.0f - s));
        dgu[2 * i + 1] += dy[i] * g * s;
    }
}
ZOE_CPU_MULTIVERSION(swiglu_backward_chunk,
                     (zoe_cpu_isa isa, float *dgu, const float *dy, const float *gu, int64_t n),
                     (isa, dgu, dy, gu, n))

/* The element-wise ops see [rows, F] as one run of rows * F features. */
zoe_status zoe_cpu_swiglu_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *gu,
                                  int64_t rows, int64_t F) {
    const int64_t n = rows * F, chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK, len = zoe_cpu_chunk_len(n, c);
        float gubuf[2 * ZOE_CPU_CHUNK], ybuf[ZOE_CPU_CHUNK];
        const float *guv = zoe_cpu_load(gu, dt, 2 * off, 2 * len, gubuf);
        float *yv = zoe_cpu_out(y, dt, off, ybuf);
        swiglu_forward_chunk(ck->isa, yv, guv, len);
        zoe_cpu_store(y, dt, off, yv, len);
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_swiglu_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dgu, const void *dy,
                                   const void *gu, int64_t rows, int64_t F) {
    const int64_t n = rows * F, chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK, len = zoe_cpu_chunk_len(n, c);
        float gubuf[2 * ZOE_CPU_CHUNK], dybuf[ZOE_CPU_CHUNK], dgubuf[2 * ZOE_CPU_CHUNK];
        const float *guv = zoe_cpu_load(gu, dt, 2 * off, 2 * len, gubuf);
        const float *dyv = zoe_cpu_load(dy, dt, off, len, dybuf);
        float *dguv = zoe_cpu_inout(dgu, dt, 2 * off, 2 * len, dgubuf);
        swiglu_backward_chunk(ck->isa, dguv, dyv, guv, len);
        zoe_cpu_store(dgu, dt, 2 * off, dguv, 2 * len);
    }
    return ZOE_OK;
}
