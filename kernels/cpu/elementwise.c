/* Element-wise ops on the CPU: residual (y = a + b), add (y += x), scale (y *= s) and casts.
 * OpenMP over chunks of ZOE_CPU_CHUNK elements; bf16 chunks go through stack buffers.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <omp.h>
#include "kernels/cpu/cpu_util.h"
#include "runtime/error.h"

/* Below this many chunks a parallel region costs more than it saves. */
enum { PARALLEL_MIN_CHUNKS = 16 };

ZOE_CPU_INLINE void sum_chunk_body(zoe_cpu_isa isa, float *y, const float *a, const float *b,
                                   int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
ZOE_CPU_MULTIVERSION(sum_chunk,
                     (zoe_cpu_isa isa, float *y, const float *a, const float *b, int64_t n),
                     (isa, y, a, b, n))

ZOE_CPU_INLINE void scale_chunk_body(zoe_cpu_isa isa, float *y, float s, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] *= s;
}
ZOE_CPU_MULTIVERSION(scale_chunk, (zoe_cpu_isa isa, float *y, float s, int64_t n), (isa, y, s, n))

/* y = a + b; y may alias a or b: each chunk is read whole before it is written. */
zoe_status zoe_cpu_residual_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *a,
                                    const void *b, int64_t n) {
    const int64_t chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK, len = zoe_cpu_chunk_len(n, c);
        float abuf[ZOE_CPU_CHUNK], bbuf[ZOE_CPU_CHUNK], ybuf[ZOE_CPU_CHUNK];
        const float *av = zoe_cpu_load(a, dt, off, len, abuf);
        const float *bv = zoe_cpu_load(b, dt, off, len, bbuf);
        float *yv = zoe_cpu_out(y, dt, off, ybuf);
        sum_chunk(ck->isa, yv, av, bv, len);
        zoe_cpu_store(y, dt, off, yv, len);
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_add(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x, int64_t n) {
    return zoe_cpu_residual_forward(ck, dt, y, y, x, n);
}

zoe_status zoe_cpu_scale(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float s, int64_t n) {
    const int64_t chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK, len = zoe_cpu_chunk_len(n, c);
        float buf[ZOE_CPU_CHUNK];
        float *yv = zoe_cpu_inout(y, dt, off, len, buf);
        scale_chunk(ck->isa, yv, s, len);
        zoe_cpu_store(y, dt, off, yv, len);
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_cast(zoe_cpu_kernels *ck, void *dst, zoe_dtype dst_dt, const void *src,
                        zoe_dtype src_dt, int64_t n) {
    const size_t dsz = zoe_dtype_size(dst_dt), ssz = zoe_dtype_size(src_dt);
    const int64_t chunks = zoe_cpu_chunk_count(n);
    zoe_worker_error err = {ZOE_OK, ""}; /* dispatch checked the dtypes; a failure is a bug */
#pragma omp parallel for num_threads(ck->threads)                                                  \
    schedule(static) if (chunks >= PARALLEL_MIN_CHUNKS)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK;
        zoe_worker_error_record(&err, zoe_convert((char *)dst + (size_t)off * dsz, dst_dt,
                                                  (const char *)src + (size_t)off * ssz, src_dt,
                                                  (size_t)zoe_cpu_chunk_len(n, c)));
    }
    return zoe_worker_error_raise(&err, "zoe_cast");
}
