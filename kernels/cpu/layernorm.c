/* LayerNorm and RMSNorm on the CPU: OpenMP over rows, each row one fused kernel (statistics then
 * the normalised output; in backward both reductions in one pass, then dx). dgamma/dbeta are summed
 * per thread over a fixed block of rows and reduced in thread order: deterministic for a given
 * thread count, no atomics. RMSNorm is LayerNorm without the mean and the bias.
 *
 * Explained in docs/architecture.md, "One step, following the data". */
#include <math.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"

#define LN_EPS 1e-5f

/* Per thread: x, dy and dx (or y) rows for bf16, and the dgamma/dbeta partial sums. */
size_t zoe_cpu_layernorm_thread_floats(const zoe_kernel_plan *plan) {
    return 5 * (size_t)plan->max_dim;
}
/* gamma and beta converted to fp32 once per call (bf16). */
size_t zoe_cpu_layernorm_shared_bytes(const zoe_kernel_plan *plan) {
    return 2 * (size_t)plan->max_dim * sizeof(float);
}

ZOE_CPU_INLINE void forward_row_body(zoe_cpu_isa isa, float *y, float *mean_out, float *rstd_out,
                                     const float *x, const float *g, const float *b, int64_t C) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < C; i++) sum += x[i];
    const float mean = sum / (float)C;
    float var = 0.0f; /* second pass over the row while it is in L1: no cancellation */
#pragma omp simd reduction(+ : var)
    for (int64_t i = 0; i < C; i++) var += (x[i] - mean) * (x[i] - mean);
    const float rstd = 1.0f / sqrtf(var / (float)C + LN_EPS);
#pragma omp simd
    for (int64_t i = 0; i < C; i++) y[i] = (x[i] - mean) * rstd * g[i] + b[i];
    *mean_out = mean;
    *rstd_out = rstd;
}
ZOE_CPU_MULTIVERSION(forward_row,
                     (zoe_cpu_isa isa, float *y, float *mean_out, float *rstd_out, const float *x,
                      const float *g, const float *b, int64_t C),
                     (isa, y, mean_out, rstd_out, x, g, b, C))

/* dx += rstd (dy g - mean(dy g) - xhat mean(dy g xhat)); dg += dy xhat; db += dy. dx and
 * dg/db may be NULL. */
ZOE_CPU_INLINE void backward_row_body(zoe_cpu_isa isa, float *dx, float *dg, float *db,
                                      const float *dy, const float *x, const float *g, float mean,
                                      float rstd, int64_t C) {
    float s_dn = 0.0f, s_dnx = 0.0f;
#pragma omp simd reduction(+ : s_dn, s_dnx)
    for (int64_t i = 0; i < C; i++) {
        const float dn = dy[i] * g[i];
        s_dn += dn;
        s_dnx += dn * (x[i] - mean) * rstd;
    }
    s_dn /= (float)C;
    s_dnx /= (float)C;
    if (dg) {
#pragma omp simd
        for (int64_t i = 0; i < C; i++) {
            dg[i] += dy[i] * (x[i] - mean) * rstd;
            db[i] += dy[i];
        }
    }
    if (dx) {
#pragma omp simd
        for (int64_t i = 0; i < C; i++)
            dx[i] += rstd * (dy[i] * g[i] - s_dn - (x[i] - mean) * rstd * s_dnx);
    }
}
ZOE_CPU_MULTIVERSION(backward_row,
                     (zoe_cpu_isa isa, float *dx, float *dg, float *db, const float *dy,
                      const float *x, const float *g, float mean, float rstd, int64_t C),
                     (isa, dx, dg, db, dy, x, g, mean, rstd, C))

/* gamma (and beta) as fp32: the storage itself for fp32, else converted into shared. */
static const float *weights_f32(const zoe_cpu_kernels *ck, zoe_dtype dt, const void *w, int slot,
                                int64_t C) {
    return zoe_cpu_load(w, dt, 0, C, (float *)ck->shared + slot * ck->plan.max_dim);
}

/* The end of a backward: each thread reduces a block of columns over every thread's partial
 * sums (at part_offset floats into its scratch: dgamma's C, then dbeta's C), threads in order,
 * and adds the sums into dgamma and dbeta (dbeta may be NULL: RMSNorm has none). sg, sb and
 * buf are C-float rows of the calling thread's scratch its rows are done with. Call after a
 * barrier. */
static void reduce_param_grads(const zoe_cpu_kernels *ck, zoe_dtype dt, void *dgamma, void *dbeta,
                               float *sg, float *sb, float *buf, int64_t part_offset, int64_t C,
                               int tid, int team) {
    const int64_t c0 = C * tid / team, nc = C * (tid + 1) / team - c0;
    memset(sg, 0, (size_t)nc * sizeof(float));
    memset(sb, 0, (size_t)nc * sizeof(float));
    for (int t = 0; t < team; t++) {
        const float *part = zoe_cpu_thread_scratch(ck, t) + part_offset + c0;
        zoe_cpu_accumulate(ck->isa, sg, part, nc);
        if (dbeta) zoe_cpu_accumulate(ck->isa, sb, part + C, nc);
    }
    if (dgamma) zoe_cpu_add_into(ck, dt, dgamma, c0, sg, nc, buf);
    if (dbeta) zoe_cpu_add_into(ck, dt, dbeta, c0, sb, nc, buf);
}

zoe_status zoe_cpu_layernorm_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float *mean,
                                     float *rstd, const void *x, const void *gamma,
                                     const void *beta, int64_t rows, int64_t C) {
    const float *g = weights_f32(ck, dt, gamma, 0, C), *b = weights_f32(ck, dt, beta, 1, C);
#pragma omp parallel num_threads(ck->threads)
    {
        float *xbuf = zoe_cpu_thread_scratch(ck, omp_get_thread_num()), *ybuf = xbuf + C;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = zoe_cpu_load(x, dt, r * C, C, xbuf);
            float *yr = zoe_cpu_out(y, dt, r * C, ybuf);
            forward_row(ck->isa, yr, &mean[r], &rstd[r], xr, g, b, C);
            zoe_cpu_store(y, dt, r * C, yr, C);
        }
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_layernorm_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dgamma,
                                      void *dbeta, const void *dy, const void *x, const void *gamma,
                                      const float *mean, const float *rstd, int64_t rows,
                                      int64_t C) {
    const float *g = weights_f32(ck, dt, gamma, 0, C);
    /* One call computes both parameter gradients; a NULL one is summed and dropped. */
    const int want_params = dgamma || dbeta;
#pragma omp parallel num_threads(ck->threads)
    {
        const int tid = omp_get_thread_num(), team = omp_get_num_threads();
        float *xbuf = zoe_cpu_thread_scratch(ck, tid), *dybuf = xbuf + C, *dxbuf = dybuf + C;
        float *dg = want_params ? dxbuf + C : NULL, *db = want_params ? dxbuf + 2 * C : NULL;
        if (want_params) memset(dg, 0, 2 * (size_t)C * sizeof(float));
        const int64_t r0 = rows * tid / team, r1 = rows * (tid + 1) / team;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = zoe_cpu_load(x, dt, r * C, C, xbuf);
            const float *dyr = zoe_cpu_load(dy, dt, r * C, C, dybuf);
            float *dxr = dx ? zoe_cpu_inout(dx, dt, r * C, C, dxbuf) : NULL;
            backward_row(ck->isa, dxr, dg, db, dyr, xr, g, mean[r], rstd[r], C);
            if (dx) zoe_cpu_store(dx, dt, r * C, dxr, C);
        }
        if (want_params) {
#pragma omp barrier
            reduce_param_grads(ck, dt, dgamma, dbeta, xbuf, dybuf, dxbuf, 3 * C, C, tid, team);
        }
    }
    return ZOE_OK;
}

/* ---- RMSNorm ---- */

ZOE_CPU_INLINE void rms_forward_row_body(zoe_cpu_isa isa, float *y, float *rstd_out, const float *x,
                                         const float *g, float eps, int64_t C) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < C; i++) ss += x[i] * x[i];
    const float rstd = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
    for (int64_t i = 0; i < C; i++) y[i] = x[i] * rstd * g[i];
    *rstd_out = rstd;
}
ZOE_CPU_MULTIVERSION(rms_forward_row,
                     (zoe_cpu_isa isa, float *y, float *rstd_out, const float *x, const float *g,
                      float eps, int64_t C),
                     (isa, y, rstd_out, x, g, eps, C))

/* dx += rstd (dy g - xhat mean(dy g xhat)); dg += dy xhat. dx and dg may be NULL. */
ZOE_CPU_INLINE void rms_backward_row_body(zoe_cpu_isa isa, float *dx, float *dg, const float *dy,
                                          const float *x, const float *g, float rstd, int64_t C) {
    float s_dnx = 0.0f;
#pragma omp simd reduction(+ : s_dnx)
    for (int64_t i = 0; i < C; i++) s_dnx += dy[i] * g[i] * x[i] * rstd;
    s_dnx /= (float)C;
    if (dg) {
#pragma omp simd
        for (int64_t i = 0; i < C; i++) dg[i] += dy[i] * x[i] * rstd;
    }
    if (dx) {
#pragma omp simd
        for (int64_t i = 0; i < C; i++) dx[i] += rstd * (dy[i] * g[i] - x[i] * rstd * s_dnx);
    }
}
ZOE_CPU_MULTIVERSION(rms_backward_row,
                     (zoe_cpu_isa isa, float *dx, float *dg, const float *dy, const float *x,
                      const float *g, float rstd, int64_t C),
                     (isa, dx, dg, dy, x, g, rstd, C))

zoe_status zoe_cpu_rmsnorm_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, float *rstd,
                                   const void *x, const void *gamma, int64_t rows, int64_t C,
                                   float eps) {
    const float *g = weights_f32(ck, dt, gamma, 0, C);
#pragma omp parallel num_threads(ck->threads)
    {
        float *xbuf = zoe_cpu_thread_scratch(ck, omp_get_thread_num()), *ybuf = xbuf + C;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = zoe_cpu_load(x, dt, r * C, C, xbuf);
            float *yr = zoe_cpu_out(y, dt, r * C, ybuf);
            rms_forward_row(ck->isa, yr, &rstd[r], xr, g, eps, C);
            zoe_cpu_store(y, dt, r * C, yr, C);
        }
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_rmsnorm_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dx, void *dgamma,
                                    const void *dy, const void *x, const void *gamma,
                                    const float *rstd, int64_t rows, int64_t C) {
    const float *g = weights_f32(ck, dt, gamma, 0, C);
#pragma omp parallel num_threads(ck->threads)
    {
        const int tid = omp_get_thread_num(), team = omp_get_num_threads();
        float *xbuf = zoe_cpu_thread_scratch(ck, tid), *dybuf = xbuf + C, *dxbuf = dybuf + C;
        float *dg = dgamma ? dxbuf + C : NULL;
        if (dg) memset(dg, 0, (size_t)C * sizeof(float));
        const int64_t r0 = rows * tid / team, r1 = rows * (tid + 1) / team;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = zoe_cpu_load(x, dt, r * C, C, xbuf);
            const float *dyr = zoe_cpu_load(dy, dt, r * C, C, dybuf);
            float *dxr = dx ? zoe_cpu_inout(dx, dt, r * C, C, dxbuf) : NULL;
            rms_backward_row(ck->isa, dxr, dg, dyr, xr, g, rstd[r], C);
            if (dx) zoe_cpu_store(dx, dt, r * C, dxr, C);
        }
        if (dgamma) {
#pragma omp barrier
            reduce_param_grads(ck, dt, dgamma, NULL, xbuf, dybuf, dxbuf, 3 * C, C, tid, team);
        }
    }
    return ZOE_OK;
}
