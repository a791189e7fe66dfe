/* Rotary position embedding on the CPU, in place: OpenMP over rows (positions); each row's
 * cos and sin are computed once into stack buffers and applied to every head of the row.
 * Backward is the same rotation with the sine negated (a rotation's transpose).
 *
 * Explained in docs/hf.md. */
#include <math.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"
#include "runtime/error.h"

/* The head sizes the stack buffers cover: a row of cos and sin, and a bf16 head in fp32. */
enum { MAX_HALF = 512, PARALLEL_MIN_ROWS = 8 };

/* x[i], x[i + half] <- x[i] c - x[i + half] s, x[i + half] c + x[i] s. */
ZOE_CPU_INLINE void rotate_body(zoe_cpu_isa isa, float *x, const float *c, const float *s,
                                int64_t half) {
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i] + a * s[i];
    }
}
ZOE_CPU_MULTIVERSION(rotate,
                     (zoe_cpu_isa isa, float *x, const float *c, const float *s, int64_t half),
                     (isa, x, c, s, half))

/* Row r of the B*T rows is position pos0 + r % T. */
static zoe_status rope(zoe_cpu_kernels *ck, zoe_dtype dt, void *x, const float *inv_freq,
                       int64_t pos0, int64_t B, int64_t T, int64_t heads, int64_t HS,
                       int64_t head_stride, int64_t row_stride, float sign) {
    if (HS / 2 > MAX_HALF)
        return zoe_fail(ZOE_ERR_UNSUPPORTED, "zoe_rope: HS=%lld above the CPU kernel's %d",
                        (long long)HS, 2 * MAX_HALF);
    const int64_t half = HS / 2, rows = B * T;
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (rows >= PARALLEL_MIN_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        float c[MAX_HALF], s[MAX_HALF], buf[2 * MAX_HALF];
        /* fp32 angle as Hugging Face forms it (position times inv_freq in fp32), then its cos
         * and sin to float precision */
        const float pos = (float)(pos0 + r % T);
        for (int64_t i = 0; i < half; i++) {
            const float angle = pos * inv_freq[i];
            c[i] = (float)cos((double)angle);
            s[i] = sign * (float)sin((double)angle);
        }
        for (int64_t h = 0; h < heads; h++) {
            const int64_t off = r * row_stride + h * head_stride;
            float *v = zoe_cpu_inout(x, dt, off, HS, buf);
            rotate(ck->isa, v, c, s, half);
            zoe_cpu_store(x, dt, off, v, HS);
        }
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_rope_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *x, const float *inv_freq,
                                int64_t B, int64_t T, int64_t heads, int64_t HS,
                                int64_t head_stride, int64_t row_stride) {
    return rope(ck, dt, x, inv_freq, 0, B, T, heads, HS, head_stride, row_stride, 1.0f);
}

zoe_status zoe_cpu_rope_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, const float *inv_freq,
                                 int64_t B, int64_t T, int64_t heads, int64_t HS,
                                 int64_t head_stride, int64_t row_stride) {
    return rope(ck, dt, dx, inv_freq, 0, B, T, heads, HS, head_stride, row_stride, -1.0f);
}

zoe_status zoe_cpu_rope_forward_at(zoe_cpu_kernels *ck, zoe_dtype dt, void *x,
                                   const float *inv_freq, int64_t pos0, int64_t rows, int64_t heads,
                                   int64_t HS, int64_t head_stride, int64_t row_stride) {
    return rope(ck, dt, x, inv_freq, pos0, 1, rows, heads, HS, head_stride, row_stride, 1.0f);
}
