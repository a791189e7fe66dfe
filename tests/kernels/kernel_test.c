#include "kernel_test.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>

void kt_setup(kt_env *env, const zoe_kernel_plan *plan, int threads) {
    memset(env, 0, sizeof *env);
    omp_set_num_threads(threads); /* the context takes its thread count at create */
    if (!CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &env->dev))) return;
    if (!CHECK_OK(zoe_stream_create(env->dev, &env->stream))) return;
    CHECK_OK(zoe_kernels_create(env->dev, env->stream, plan, &env->k));
}

void kt_teardown(kt_env *env) {
    zoe_kernels_destroy(env->k);
    zoe_stream_destroy(env->stream);
    zoe_device_destroy(env->dev);
}

double kt_unit(zoe_dtype dt) {
    return dt == ZOE_F32 ? KT_U32 : KT_U16;
}

double *kt_vec(size_t n) {
    return calloc(n ? n : 1, sizeof(double));
}

double *kt_random(test_rng *rng, size_t n, double lo, double hi) {
    double *x = kt_vec(n);
    for (size_t i = 0; i < n; i++) {
        do x[i] = lo + (hi - lo) * test_rng_uniform(rng);
        while (x[i] == 0.0);
    }
    return x;
}

void *kt_to_storage(zoe_dtype dt, double *vals, size_t n) {
    void *buf = malloc((n ? n : 1) * zoe_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float f = (float)vals[i];
        if (dt == ZOE_F32) {
            ((float *)buf)[i] = f;
        } else {
            zoe_bf16 h = zoe_f32_to_bf16(f);
            ((zoe_bf16 *)buf)[i] = h;
            f = zoe_bf16_to_f32(h);
        }
        vals[i] = f;
    }
    return buf;
}

void *kt_poisoned(zoe_dtype dt, size_t n) {
    void *buf = malloc((n ? n : 1) * zoe_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        if (dt == ZOE_F32)
            ((float *)buf)[i] = NAN;
        else
            ((zoe_bf16 *)buf)[i] = zoe_f32_to_bf16(NAN);
    }
    return buf;
}

void kt_from_storage(double *out, const void *buf, zoe_dtype dt, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] =
            dt == ZOE_F32 ? ((const float *)buf)[i] : zoe_bf16_to_f32(((const zoe_bf16 *)buf)[i]);
}

double *kt_read(const void *buf, zoe_dtype dt, size_t n) {
    double *out = kt_vec(n);
    kt_from_storage(out, buf, dt, n);
    return out;
}

int kt_check(const double *got, const double *want, const double *abs_tol, double rel, size_t n,
             const char *what) {
    size_t bad = 0, worst = 0;
    double worst_ratio = -1.0;
    for (size_t i = 0; i < n; i++) {
        double tol = (abs_tol ? abs_tol[i] : 0.0) + rel * fabs(want[i]);
        double err = fabs(got[i] - want[i]);
        double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (!(err <= tol)) bad++;
        if (isnan(got[i])) ratio = INFINITY;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
    CHECK(bad == 0,
          "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g "
          "(err/tol %.3g)",
          what, bad, n, worst, n ? got[worst] : 0.0, n ? want[worst] : 0.0, worst_ratio);
    return bad == 0;
}

int kt_check_storage(const void *got, zoe_dtype dt, const double *want, const double *abs_tol,
                     double rel, size_t n, const char *what) {
    double *g = kt_read(got, dt, n);
    int ok = kt_check(g, want, abs_tol, rel, n, what);
    free(g);
    return ok;
}

double kt_fd(kt_scalar_fn f, void *ctx, double *x, size_t i) {
    const double x0 = x[i], h = 1e-6 * (fabs(x0) > 1.0 ? fabs(x0) : 1.0);
    x[i] = x0 + h;
    double fp = f(ctx);
    x[i] = x0 - h;
    double fm = f(ctx);
    x[i] = x0;
    return (fp - fm) / (2.0 * h);
}

void kt_check_fd(test_rng *rng, kt_scalar_fn f, void *ctx, double *x, const double *grad, size_t n,
                 size_t samples, double scale, const char *what) {
    size_t count = n <= samples ? n : samples, bad = 0;
    for (size_t s = 0; s < count; s++) {
        size_t i = n <= samples ? s : (size_t)test_rng_int(rng, 0, (int64_t)n - 1);
        double fd = kt_fd(f, ctx, x, i);
        double tol = 1e-6 * (fabs(fd) > scale ? fabs(fd) : scale);
        if (!(fabs(fd - grad[i]) <= tol)) {
            if (bad++ == 0)
                CHECK(0, "%s: analytic gradient [%zu] = %.12g, finite difference %.12g", what, i,
                      grad[i], fd);
        }
    }
}

double kt_max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

double *kt_const_tol(size_t n, double v) {
    double *t = kt_vec(n);
    for (size_t i = 0; i < n; i++) t[i] = v;
    return t;
}
