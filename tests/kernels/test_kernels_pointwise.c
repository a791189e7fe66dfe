/* LayerNorm and GELU forward/backward, residual, add, scale and casts, against float64
 * references, fp32 and bf16 storage; backward references checked by central finite
 * differences; gradients accumulate into random initial values.
 *
 * Tolerances. LayerNorm: mean and variance are C-term sums, so errors are bounded norm-wise by
 * (C + 8) u32 times the scale of the output (factor 4 slack); dgamma/dbeta add a rows-term
 * sum. GELU: the kernel's exp is within a few ulp, so 32 u32 (1 + |x|)^2 absolute (times
 * |dy| in backward) covers it. Element-wise sums: one rounding. bf16 storage adds 2^-8 of the
 * stored value. */
#include <math.h>
#include <stdlib.h>
#include "kernel_test.h"

/* ---- LayerNorm ---- */

static void ln_ref_forward(double *y, double *mean, double *rstd, const double *x, const double *g,
                           const double *b, int64_t rows, int64_t C) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C;
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += xr[i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        double rs = 1.0 / sqrt(v / (double)C + 1e-5);
        for (int64_t i = 0; i < C; i++) y[r * C + i] = (xr[i] - m) * rs * g[i] + b[i];
        if (mean) mean[r] = m, rstd[r] = rs;
    }
}

/* Gradients of sum(y * dy), added into dx, dg, db. */
static void ln_ref_backward(double *dx, double *dg, double *db, const double *dy, const double *x,
                            const double *g, int64_t rows, int64_t C) {
    double *y = kt_vec((size_t)C), mean, rstd;
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C, *dyr = dy + r * C;
        ln_ref_forward(y, &mean, &rstd, xr, g, g, 1, C);
        double a = 0, bsum = 0;
        for (int64_t i = 0; i < C; i++) {
            double xhat = (xr[i] - mean) * rstd;
            a += dyr[i] * g[i];
            bsum += dyr[i] * g[i] * xhat;
            dg[i] += dyr[i] * xhat;
            db[i] += dyr[i];
        }
        a /= (double)C, bsum /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            double xhat = (xr[i] - mean) * rstd;
            dx[r * C + i] += rstd * (dyr[i] * g[i] - a - xhat * bsum);
        }
    }
    free(y);
}

typedef struct ln_loss {
    const double *x, *g, *b, *dy;
    int64_t rows, C;
} ln_loss;

static double ln_loss_fn(void *ctx) {
    ln_loss *l = ctx;
    size_t n = (size_t)(l->rows * l->C);
    double *y = kt_vec(n), s = 0;
    ln_ref_forward(y, NULL, NULL, l->x, l->g, l->b, l->rows, l->C);
    for (size_t i = 0; i < n; i++) s += y[i] * l->dy[i];
    free(y);
    return s;
}

static void layernorm_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t C,
                           int fd) {
    const size_t n = (size_t)(rows * C);
    char what[128];
    snprintf(what, sizeof what, "layernorm %s rows=%lld C=%lld", zoe_dtype_name(dt),
             (long long)rows, (long long)C);
    double *x = kt_random(rng, n, -2, 3), *g = kt_random(rng, (size_t)C, 0.5, 1.5);
    double *b = kt_random(rng, (size_t)C, -1, 1), *dy = kt_random(rng, n, -1, 1);
    void *xs = kt_to_storage(dt, x, n), *gs = kt_to_storage(dt, g, (size_t)C);
    void *bs = kt_to_storage(dt, b, (size_t)C), *dys = kt_to_storage(dt, dy, n);
    void *ys = kt_poisoned(dt, n);
    float *mean = malloc((size_t)rows * sizeof(float)),
          *rstd = malloc((size_t)rows * sizeof(float));
    for (int64_t r = 0; r < rows; r++) mean[r] = rstd[r] = NAN;
    double *y = kt_vec(n), *m = kt_vec((size_t)rows), *rs = kt_vec((size_t)rows);
    ln_ref_forward(y, m, rs, x, g, b, rows, C);
    CHECK_OK(zoe_layernorm_forward(env->k, dt, ys, mean, rstd, xs, gs, bs, rows, C));
    const double slack = 4.0 * (double)(C + 8) * KT_U32;
    double *tol = kt_const_tol(n, slack * fmax(kt_max_abs(y, n), 1.0));
    kt_check_storage(ys, dt, y, tol, kt_unit(dt), n, what);
    free(tol);
    double *got = kt_vec((size_t)rows);
    for (int64_t r = 0; r < rows; r++) got[r] = mean[r];
    tol = kt_const_tol((size_t)rows, slack * kt_max_abs(x, n));
    kt_check(got, m, tol, 0, (size_t)rows, "layernorm mean");
    for (int64_t r = 0; r < rows; r++) got[r] = rstd[r];
    kt_check(got, rs, NULL, slack, (size_t)rows, "layernorm rstd");
    free(tol), free(got);

    double *dx = kt_random(rng, n, -1, 1), *dg = kt_random(rng, (size_t)C, -1, 1);
    double *db = kt_random(rng, (size_t)C, -1, 1);
    void *dxs = kt_to_storage(dt, dx, n), *dgs = kt_to_storage(dt, dg, (size_t)C);
    void *dbs = kt_to_storage(dt, db, (size_t)C);
    double *gx = kt_vec(n), *gg = kt_vec((size_t)C), *gb = kt_vec((size_t)C);
    ln_ref_backward(gx, gg, gb, dy, x, g, rows, C);
    /* the kernel reads the fp32 statistics it saved */
    CHECK_OK(zoe_layernorm_backward(env->k, dt, dxs, dgs, dbs, dys, xs, gs, mean, rstd, rows, C));
    for (size_t i = 0; i < n; i++) dx[i] += gx[i];
    for (int64_t i = 0; i < C; i++) dg[i] += gg[i], db[i] += gb[i];
    tol = kt_const_tol(n, slack * fmax(kt_max_abs(gx, n), 1.0));
    kt_check_storage(dxs, dt, dx, tol, kt_unit(dt), n, "layernorm dx");
    free(tol);
    const double pslack = 4.0 * (double)(rows + C + 8) * KT_U32;
    tol =
        kt_const_tol((size_t)C, pslack * fmax(kt_max_abs(gg, (size_t)C), 1.0) * sqrt((double)rows));
    kt_check_storage(dgs, dt, dg, tol, kt_unit(dt), (size_t)C, "layernorm dgamma");
    kt_check_storage(dbs, dt, db, tol, kt_unit(dt), (size_t)C, "layernorm dbeta");
    free(tol);

    /* dx alone (parameter gradients NULL) gives the same dx */
    double *zero = kt_vec(n);
    void *dxz = kt_to_storage(dt, zero, n);
    CHECK_OK(zoe_layernorm_backward(env->k, dt, dxz, NULL, NULL, dys, xs, gs, mean, rstd, rows, C));
    tol = kt_const_tol(n, slack * fmax(kt_max_abs(gx, n), 1.0));
    kt_check_storage(dxz, dt, gx, tol, kt_unit(dt), n, "layernorm dx only");
    free(tol), free(zero), free(dxz);

    if (fd) {
        ln_loss l = {x, g, b, dy, rows, C};
        kt_check_fd(rng, ln_loss_fn, &l, x, gx, n, 20, 1.0, "layernorm reference dx vs FD");
        kt_check_fd(rng, ln_loss_fn, &l, g, gg, (size_t)C, 10, 1.0, "layernorm reference dg vs FD");
        kt_check_fd(rng, ln_loss_fn, &l, b, gb, (size_t)C, 10, 1.0, "layernorm reference db vs FD");
    }
    free(x), free(g), free(b), free(dy), free(xs), free(gs), free(bs), free(dys), free(ys);
    free(mean), free(rstd), free(y), free(m), free(rs), free(dx), free(dg), free(db);
    free(dxs), free(dgs), free(dbs), free(gx), free(gg), free(gb);
}

/* ---- GELU ---- */

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}
static double gelu_ref_grad(double x) {
    double s = 0.79788456080286535588, t = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}
static double gelu_at(void *ctx) {
    return gelu_ref(*(double *)ctx);
}

static void gelu_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t n) {
    double *x = kt_random(rng, (size_t)n, -6, 6), *dy = kt_random(rng, (size_t)n, -1, 1);
    double *dx = kt_random(rng, (size_t)n, -1, 1);
    void *xs = kt_to_storage(dt, x, (size_t)n), *dys = kt_to_storage(dt, dy, (size_t)n);
    void *dxs = kt_to_storage(dt, dx, (size_t)n), *ys = kt_poisoned(dt, (size_t)n);
    double *y = kt_vec((size_t)n), *tol = kt_vec((size_t)n), *tolb = kt_vec((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        y[i] = gelu_ref(x[i]);
        dx[i] += dy[i] * gelu_ref_grad(x[i]);
        tol[i] = 32 * KT_U32 * (1 + fabs(x[i])) * (1 + fabs(x[i]));
        tolb[i] = tol[i] * fabs(dy[i]) * (1 + fabs(x[i])) + 4 * KT_U32 * fabs(dx[i]);
    }
    CHECK_OK(zoe_gelu_forward(env->k, dt, ys, xs, n));
    kt_check_storage(ys, dt, y, tol, kt_unit(dt), (size_t)n, "gelu forward");
    CHECK_OK(zoe_gelu_backward(env->k, dt, dxs, dys, xs, n));
    kt_check_storage(dxs, dt, dx, tolb, kt_unit(dt), (size_t)n, "gelu backward");
    for (int64_t i = 0; i < n && i < 20; i++) { /* the reference derivative vs FD */
        double fd = kt_fd(gelu_at, &x[i], &x[i], 0);
        CHECK(fabs(fd - gelu_ref_grad(x[i])) < 1e-7, "gelu' reference at %g: %g vs FD %g", x[i],
              gelu_ref_grad(x[i]), fd);
    }
    free(x), free(dy), free(dx), free(xs), free(dys), free(dxs), free(ys), free(y), free(tol);
    free(tolb);
}

/* ---- residual, add, scale, cast ---- */

static void elementwise_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t n) {
    double *a = kt_random(rng, (size_t)n, -4, 4), *b = kt_random(rng, (size_t)n, -4, 4);
    void *as = kt_to_storage(dt, a, (size_t)n), *bs = kt_to_storage(dt, b, (size_t)n);
    void *ys = kt_poisoned(dt, (size_t)n);
    double *want = kt_vec((size_t)n), *tol = kt_vec((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        want[i] = a[i] + b[i];
        tol[i] = KT_U32 * (fabs(a[i]) + fabs(b[i]));
    }
    CHECK_OK(zoe_residual_forward(env->k, dt, ys, as, bs, n));
    kt_check_storage(ys, dt, want, tol, kt_unit(dt), (size_t)n, "residual");
    /* in place over either input */
    void *a2 = kt_to_storage(dt, a, (size_t)n), *b2 = kt_to_storage(dt, b, (size_t)n);
    CHECK_OK(zoe_residual_forward(env->k, dt, a2, a2, bs, n));
    kt_check_storage(a2, dt, want, tol, kt_unit(dt), (size_t)n, "residual y = a");
    CHECK_OK(zoe_residual_forward(env->k, dt, b2, as, b2, n));
    kt_check_storage(b2, dt, want, tol, kt_unit(dt), (size_t)n, "residual y = b");
    /* add: y += x */
    void *a3 = kt_to_storage(dt, a, (size_t)n);
    CHECK_OK(zoe_add(env->k, dt, a3, bs, n));
    kt_check_storage(a3, dt, want, tol, kt_unit(dt), (size_t)n, "add");
    /* scale */
    for (int64_t i = 0; i < n; i++) want[i] = a[i] * -0.375, tol[i] = 0;
    void *a4 = kt_to_storage(dt, a, (size_t)n);
    CHECK_OK(zoe_scale(env->k, dt, a4, -0.375f, n));
    kt_check_storage(a4, dt, want, tol, kt_unit(dt), (size_t)n, "scale");
    free(a), free(b), free(as), free(bs), free(ys), free(want), free(tol), free(a2), free(b2);
    free(a3), free(a4);
}

static void cast_case(kt_env *env, test_rng *rng, int64_t n) {
    const zoe_dtype dts[3] = {ZOE_F32, ZOE_BF16, ZOE_F16};
    double *x = kt_random(rng, (size_t)n, -100, 100);
    float *xf = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) xf[i] = (float)x[i];
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            void *src = malloc((size_t)n * 4), *dst = malloc((size_t)n * 4);
            CHECK_OK(zoe_convert(src, dts[s], xf, ZOE_F32, (size_t)n));
            memset(dst, 0xff, (size_t)n * 4);
            CHECK_OK(zoe_cast(env->k, dst, dts[d], src, dts[s], n));
            /* every element: the source value rounded once more to the destination */
            size_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float v = dts[s] == ZOE_F32    ? ((float *)src)[i]
                          : dts[s] == ZOE_BF16 ? zoe_bf16_to_f32(((zoe_bf16 *)src)[i])
                                               : zoe_f16_to_f32(((zoe_f16 *)src)[i]);
                float got = dts[d] == ZOE_F32    ? ((float *)dst)[i]
                            : dts[d] == ZOE_BF16 ? zoe_bf16_to_f32(((zoe_bf16 *)dst)[i])
                                                 : zoe_f16_to_f32(((zoe_f16 *)dst)[i]);
                double u = dts[d] == ZOE_F32 ? 0 : dts[d] == ZOE_BF16 ? KT_U16 : 0x1p-11;
                if (!(fabs(got - v) <= u * fabs(v))) bad++;
            }
            CHECK(bad == 0, "cast %s -> %s: %zu of %lld elements wrong", zoe_dtype_name(dts[s]),
                  zoe_dtype_name(dts[d]), bad, (long long)n);
            free(src), free(dst);
        }
    free(x), free(xf);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 7);
    zoe_kernel_plan plan = {
        .max_rows = 64, .max_dim = 1000, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    kt_env env;
    kt_setup(&env, &plan, 3);
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        layernorm_case(&env, &rng, dt, 3, 7, d == 0);
        layernorm_case(&env, &rng, dt, 1, 1, 0);
        layernorm_case(&env, &rng, dt, 64, 768, 0);
        layernorm_case(&env, &rng, dt, test_rng_int(&rng, 1, 64), test_rng_int(&rng, 2, 1000), 0);
        for (int r = 0; r < 3; r++) {
            int64_t n = r == 0 ? 1 : test_rng_int(&rng, 1, 50000);
            gelu_case(&env, &rng, dt, n);
            elementwise_case(&env, &rng, dt, n);
        }
    }
    cast_case(&env, &rng, 5000);

    float y[4], x[4] = {1, 2, 3, 4}, m[2], r[2];
    CHECK(zoe_layernorm_forward(env.k, ZOE_F32, y, m, r, x, x, x, 2, 1001) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "C over the plan");
    CHECK(strstr(zoe_last_error(), "C=1001") != NULL, "names C: %s", zoe_last_error());
    CHECK(zoe_layernorm_forward(env.k, ZOE_F32, y, m, r, x, NULL, x, 2, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "NULL gamma");
    CHECK(zoe_gelu_forward(env.k, ZOE_F32, y, x, -4) == ZOE_ERR_INVALID_ARGUMENT, "negative n");
    CHECK(strstr(zoe_last_error(), "n=-4") != NULL, "names n: %s", zoe_last_error());
    CHECK(zoe_scale(env.k, ZOE_F16, y, 2.0f, 4) == ZOE_ERR_UNSUPPORTED, "fp16 on CPU");
    CHECK(zoe_cast(env.k, y, ZOE_I32, x, ZOE_F32, 4) == ZOE_ERR_INVALID_ARGUMENT, "cast to int32");
    CHECK(zoe_add(NULL, ZOE_F32, y, x, 4) == ZOE_ERR_INVALID_ARGUMENT, "NULL context");
    zoe_kernels *k2 = (zoe_kernels *)&plan; /* must be reset to NULL on failure */
    zoe_kernel_plan bad = plan;
    bad.max_seq = -3;
    CHECK(zoe_kernels_create(env.dev, env.stream, &bad, &k2) == ZOE_ERR_INVALID_ARGUMENT && !k2,
          "negative plan field");
    CHECK(strstr(zoe_last_error(), "max_seq=-3") != NULL, "names max_seq: %s", zoe_last_error());
    CHECK(zoe_kernels_create(env.dev, env.stream, NULL, &k2) == ZOE_ERR_INVALID_ARGUMENT,
          "NULL plan");
    CHECK(zoe_kernels_backend(env.k) == ZOE_BACKEND_CPU && zoe_kernels_stream(env.k) == env.stream,
          "accessors");
    kt_teardown(&env);
    return test_finish("test_kernels_pointwise");
}
