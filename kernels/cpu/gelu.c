/* GELU (tanh approximation) on the CPU: one fused pass per chunk, tanh through the
 * vectorisable exp so the loops stay SIMD.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include <omp.h>
#include "kernels/cpu/cpu_util.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

enum { PARALLEL_MIN_CHUNKS = 4 };

/* tanh(u) = 1 - 2 / (1 + e^{2u}); saturates cleanly at both ends. */
ZOE_CPU_INLINE float tanh_via_exp(float u) {
    return 1.0f - 2.0f / (1.0f + zoe_cpu_expf(2.0f * u));
}

ZOE_CPU_INLINE void gelu_forward_chunk_body(zoe_cpu_isa isa, float *y, const float *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanh_via_exp(GELU_SCALE * (v + GELU_CUBIC * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}
ZOE_CPU_MULTIVERSION(gelu_forward_chunk, (zoe_cpu_isa isa, float *y, const float *x, int64_t n),
                     (isa, y, x, n))

/* dx += dy * gelu'(x), gelu'(x) = (1 + t) / 2 + x (1 - t^2) s (1 + 3 c x^2) / 2. */
ZOE_CPU_INLINE void gelu_backward_chunk_body(zoe_cpu_isa isa, float *dx, const float *dy,
                                             const float *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float t = tanh_via_exp(GELU_SCALE * (v + GELU_CUBIC * v * v * v));
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * v * v);
        dx[i] += dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}
ZOE_CPU_MULTIVERSION(gelu_backward_chunk,
                     (zoe_cpu_isa isa, float *dx, const float *dy, const float *x, int64_t n),
                     (isa, dx, dy, x, n))

zoe_status zoe_cpu_gelu_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x,
                                int64_t n) {
    const int64_t chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK;
        const int64_t len = zoe_cpu_chunk_len(n, c);
        float xbuf[ZOE_CPU_CHUNK], ybuf[ZOE_CPU_CHUNK];
        const float *xv = zoe_cpu_load(x, dt, off, len, xbuf);
        float *yv = zoe_cpu_out(y, dt, off, ybuf);
        gelu_forward_chunk(ck->isa, yv, xv, len);
        zoe_cpu_store(y, dt, off, yv, len);
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_gelu_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, const void *dy,
                                 const void *x, int64_t n) {
    const int64_t chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK;
        const int64_t len = zoe_cpu_chunk_len(n, c);
        float xbuf[ZOE_CPU_CHUNK], dybuf[ZOE_CPU_CHUNK], dxbuf[ZOE_CPU_CHUNK];
        const float *xv = zoe_cpu_load(x, dt, off, len, xbuf);
        const float *dyv = zoe_cpu_load(dy, dt, off, len, dybuf);
        float *dxv = zoe_cpu_inout(dx, dt, off, len, dxbuf);
        gelu_backward_chunk(ck->isa, dxv, dyv, xv, len);
        zoe_cpu_store(dx, dt, off, dxv, len);
    }
    return ZOE_OK;
}
