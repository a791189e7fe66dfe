/* Matmul forward (with and without bias) and backward (dx, dw, db accumulating, each optional)
 * against float64 references, fp32 and bf16 storage, odd shapes and shapes that cross the
 * bf16 tiles (128 x 128 x 256). The float64 backward is itself checked by central finite
 * differences of the float64 forward.
 *
 * Tolerances: a K-term fp32 dot product is within K u32 sum|x w| of the exact value (u32 =
 * 2^-24, the classic bound for any summation order), plus one rounding of the stored value:
 * u32 |y| for fp32, 2^-8 |y| for bf16. Inputs are rounded to the storage dtype before the
 * reference sees them. */
#include <math.h>
#include <stdlib.h>
#include "kernel_test.h"

typedef struct mm_case {
    int64_t M, K, N;
} mm_case;

/* y = x w^T + b; mag = sum |x w| + |b| (the scale of the rounding error). */
static void ref_forward(double *y, double *mag, const double *x, const double *w, const double *b,
                        int64_t M, int64_t K, int64_t N) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0.0, m = b ? fabs(b[j]) : 0.0;
            for (int64_t p = 0; p < K; p++) {
                s += x[i * K + p] * w[j * K + p];
                m += fabs(x[i * K + p] * w[j * K + p]);
            }
            y[i * N + j] = s;
            if (mag) mag[i * N + j] = m;
        }
}

/* dx += dy w, dw += dy^T x, db += colsum(dy); mags likewise. */
static void ref_backward(double *dx, double *dxm, double *dw, double *dwm, double *db, double *dbm,
                         const double *dy, const double *x, const double *w, int64_t M, int64_t K,
                         int64_t N) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t p = 0; p < K; p++) {
            double s = 0, m = fabs(dx[i * K + p]);
            for (int64_t j = 0; j < N; j++) {
                s += dy[i * N + j] * w[j * K + p];
                m += fabs(dy[i * N + j] * w[j * K + p]);
            }
            dx[i * K + p] += s;
            dxm[i * K + p] = m;
        }
    for (int64_t j = 0; j < N; j++)
        for (int64_t p = 0; p < K; p++) {
            double s = 0, m = fabs(dw[j * K + p]);
            for (int64_t i = 0; i < M; i++) {
                s += dy[i * N + j] * x[i * K + p];
                m += fabs(dy[i * N + j] * x[i * K + p]);
            }
            dw[j * K + p] += s;
            dwm[j * K + p] = m;
        }
    for (int64_t j = 0; j < N; j++) {
        double s = 0, m = fabs(db[j]);
        for (int64_t i = 0; i < M; i++) s += dy[i * N + j], m += fabs(dy[i * N + j]);
        db[j] += s;
        dbm[j] = m;
    }
}

/* L = sum(y * dy), the scalar whose gradient the backward computes. */
typedef struct mm_loss {
    const double *x, *w, *b, *dy;
    int64_t M, K, N;
} mm_loss;

static double loss_fn(void *ctx) {
    mm_loss *l = ctx;
    double *y = kt_vec((size_t)(l->M * l->N)), s = 0;
    ref_forward(y, NULL, l->x, l->w, l->b, l->M, l->K, l->N);
    for (int64_t i = 0; i < l->M * l->N; i++) s += y[i] * l->dy[i];
    free(y);
    return s;
}

/* abs_tol[i] = (terms + 2) u32 mag[i] */
static double *sum_tol(const double *mag, size_t n, int64_t terms) {
    double *t = kt_vec(n);
    for (size_t i = 0; i < n; i++) t[i] = (double)(terms + 2) * KT_U32 * mag[i];
    return t;
}

static void run_case(kt_env *env, test_rng *rng, zoe_dtype dt, mm_case c, int with_bias,
                     int fd_check) {
    const int64_t M = c.M, K = c.K, N = c.N;
    char what[128];
    double *x = kt_random(rng, (size_t)(M * K), -1, 1), *w = kt_random(rng, (size_t)(N * K), -1, 1);
    double *b = with_bias ? kt_random(rng, (size_t)N, -1, 1) : NULL;
    double *dy = kt_random(rng, (size_t)(M * N), -1, 1);
    double *dx = kt_random(rng, (size_t)(M * K), -1, 1),
           *dw = kt_random(rng, (size_t)(N * K), -1, 1);
    double *db = kt_random(rng, (size_t)N, -1, 1);
    void *xs = kt_to_storage(dt, x, (size_t)(M * K)), *ws = kt_to_storage(dt, w, (size_t)(N * K));
    void *bs = with_bias ? kt_to_storage(dt, b, (size_t)N) : NULL;
    void *dys = kt_to_storage(dt, dy, (size_t)(M * N));
    void *dxs = kt_to_storage(dt, dx, (size_t)(M * K)),
         *dws = kt_to_storage(dt, dw, (size_t)(N * K));
    void *dbs = kt_to_storage(dt, db, (size_t)N);
    const double rel = dt == ZOE_F32 ? KT_U32 : KT_U16;

    /* forward */
    void *ys = kt_poisoned(dt, (size_t)(M * N));
    double *y = kt_vec((size_t)(M * N)), *ym = kt_vec((size_t)(M * N));
    ref_forward(y, ym, x, w, b, M, K, N);
    CHECK_OK(zoe_matmul_forward(env->k, dt, ys, xs, ws, bs, M, K, N));
    double *tol = sum_tol(ym, (size_t)(M * N), K);
    snprintf(what, sizeof what, "matmul_forward %s M=%lld K=%lld N=%lld bias=%d",
             zoe_dtype_name(dt), (long long)M, (long long)K, (long long)N, with_bias);
    kt_check_storage(ys, dt, y, tol, rel, (size_t)(M * N), what);
    free(tol);

    /* backward: each gradient accumulates into random initial values */
    double *dxm = kt_vec((size_t)(M * K)), *dwm = kt_vec((size_t)(N * K)), *dbm = kt_vec((size_t)N);
    double *dx0 = kt_vec((size_t)(M * K));
    memcpy(dx0, dx, sizeof(double) * (size_t)(M * K));
    ref_backward(dx, dxm, dw, dwm, db, dbm, dy, x, w, M, K, N);
    CHECK_OK(zoe_matmul_backward(env->k, dt, dxs, dws, dbs, dys, xs, ws, M, K, N));
    snprintf(what, sizeof what, "matmul_backward %s M=%lld K=%lld N=%lld", zoe_dtype_name(dt),
             (long long)M, (long long)K, (long long)N);
    tol = sum_tol(dxm, (size_t)(M * K), N);
    kt_check_storage(dxs, dt, dx, tol, rel, (size_t)(M * K), what);
    free(tol);
    tol = sum_tol(dwm, (size_t)(N * K), M);
    kt_check_storage(dws, dt, dw, tol, rel, (size_t)(N * K), what);
    free(tol);
    tol = sum_tol(dbm, (size_t)N, M);
    kt_check_storage(dbs, dt, db, tol, rel, (size_t)N, what);
    free(tol);

    /* only dx requested: x may be NULL then, w may not */
    void *dxs2 = kt_to_storage(dt, dx0, (size_t)(M * K));
    CHECK(zoe_matmul_backward(env->k, dt, dxs2, NULL, NULL, dys, xs, NULL, M, K, N) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "dx without w");
    CHECK_OK(zoe_matmul_backward(env->k, dt, dxs2, NULL, NULL, dys, NULL, ws, M, K, N));
    tol = sum_tol(dxm, (size_t)(M * K), N);
    kt_check_storage(dxs2, dt, dx, tol, rel, (size_t)(M * K), "matmul_backward dx only");
    free(tol);

    if (fd_check) { /* the float64 backward against finite differences of the forward */
        mm_loss l = {x, w, b, dy, M, K, N};
        double *gx = kt_vec((size_t)(M * K)), *gw = kt_vec((size_t)(N * K)),
               *gb = kt_vec((size_t)N);
        double *s1 = kt_vec((size_t)(M * K)), *s2 = kt_vec((size_t)(N * K)),
               *s3 = kt_vec((size_t)N);
        ref_backward(gx, s1, gw, s2, gb, s3, dy, x, w, M, K, N);
        kt_check_fd(rng, loss_fn, &l, x, gx, (size_t)(M * K), 12, 1.0, "reference dx vs FD");
        kt_check_fd(rng, loss_fn, &l, w, gw, (size_t)(N * K), 12, 1.0, "reference dw vs FD");
        if (b) kt_check_fd(rng, loss_fn, &l, b, gb, (size_t)N, 12, 1.0, "reference db vs FD");
        free(gx), free(gw), free(gb), free(s1), free(s2), free(s3);
    }
    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(y), free(ym);
    free(dxm), free(dwm), free(dbm), free(dx0);
    free(xs), free(ws), free(bs), free(dys), free(dxs), free(dws), free(dbs), free(ys);
    free(dxs2);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 11);
    zoe_kernel_plan plan = {
        .max_rows = 300, .max_dim = 600, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    kt_env env;
    kt_setup(&env, &plan, 3);
    const mm_case fixed[] = {
        {1, 1, 1}, {3, 5, 7}, {130, 260, 129}, {257, 520, 131}, {64, 128, 384}};
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            run_case(&env, &rng, dt, fixed[i], (int)(i % 2), i < 2);
        for (int r = 0; r < 4; r++) {
            mm_case c = {test_rng_int(&rng, 1, 70), test_rng_int(&rng, 1, 300),
                         test_rng_int(&rng, 1, 200)};
            run_case(&env, &rng, dt, c, r % 2, 0);
        }
    }

    /* bad arguments: named in the message, nothing written */
    float y[4] = {0}, x[4] = {1, 2, 3, 4}, w[4] = {1, 2, 3, 4};
    CHECK(zoe_matmul_forward(env.k, ZOE_F32, y, x, w, NULL, -1, 2, 2) == ZOE_ERR_INVALID_ARGUMENT,
          "negative M");
    CHECK(strstr(zoe_last_error(), "M=-1") != NULL, "message names M=-1: %s", zoe_last_error());
    CHECK(zoe_matmul_forward(env.k, ZOE_F32, y, NULL, w, NULL, 2, 2, 2) == ZOE_ERR_INVALID_ARGUMENT,
          "NULL x");
    CHECK(strstr(zoe_last_error(), "x is NULL") != NULL, "message names x: %s", zoe_last_error());
    CHECK(zoe_matmul_forward(env.k, ZOE_F16, y, x, w, NULL, 2, 2, 2) == ZOE_ERR_UNSUPPORTED,
          "fp16 on CPU");
    CHECK(zoe_matmul_forward(env.k, (zoe_dtype)42, y, x, w, NULL, 2, 2, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "unknown dtype");
    CHECK(strstr(zoe_last_error(), "42") != NULL, "message names dtype 42: %s", zoe_last_error());
    CHECK(zoe_matmul_forward(env.k, ZOE_F32, y, x, w, NULL, 301, 2, 2) == ZOE_ERR_INVALID_ARGUMENT,
          "M over the plan");
    CHECK(strstr(zoe_last_error(), "M=301") && strstr(zoe_last_error(), "max_rows=300"),
          "message names M and the plan: %s", zoe_last_error());
    CHECK(zoe_matmul_forward(env.k, ZOE_F32, y, x, w, NULL, 2, 2, 601) == ZOE_ERR_INVALID_ARGUMENT,
          "N over the plan");
    CHECK(y[0] == 0 && y[3] == 0, "failed calls write nothing");
    kt_teardown(&env);
    return test_finish("test_kernels_matmul");
}
