/* Causal attention forward (out, lse) and backward (dqkv accumulating) against a float64
 * reference that materialises the T x T probabilities, for fp32 and bf16 storage: head sizes
 * 1 ... 128, T below, at and across the 64-row blocks and not a power of two, both the loop
 * kernel (HS < 32 or T < 64) and the BLAS path. The float64 backward is checked by central
 * finite differences of the float64 forward on small shapes.
 *
 * Tolerances. Scores are HS-term fp32 dot products and rows are T-term sums, so errors are
 * bounded norm-wise by (HS + T) u32 times the tensor's scale (max |x|), with a factor 4 of
 * slack; stored bf16 values add one rounding, 2^-8 of the value. The reference backward takes
 * the stored out (what the kernel is given) for its row sums D = dout . out. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include "kernel_test.h"

typedef struct att_shape {
    int64_t B, T, NH, HS;
} att_shape;

static size_t qkv_index(att_shape s, int64_t b, int64_t t, int64_t h, int64_t part, int64_t d) {
    return (size_t)((((b * s.T + t) * s.NH + h) * 3 + part) * s.HS + d);
}
static size_t out_index(att_shape s, int64_t b, int64_t t, int64_t h, int64_t d) {
    return (size_t)(((b * s.T + t) * s.NH + h) * s.HS + d);
}

/* Row t's probabilities p[0..t] of head (b, h); returns its log-sum-exp. */
static double ref_probs(att_shape s, const double *qkv, int64_t b, int64_t h, int64_t t,
                        double *p) {
    const double scale = 1.0 / sqrt((double)s.HS);
    double mx = -INFINITY;
    for (int64_t u = 0; u <= t; u++) {
        double dot = 0;
        for (int64_t d = 0; d < s.HS; d++)
            dot += qkv[qkv_index(s, b, t, h, 0, d)] * qkv[qkv_index(s, b, u, h, 1, d)];
        p[u] = dot * scale;
        mx = fmax(mx, p[u]);
    }
    double sum = 0;
    for (int64_t u = 0; u <= t; u++) sum += exp(p[u] - mx);
    const double lse = mx + log(sum);
    for (int64_t u = 0; u <= t; u++) p[u] = exp(p[u] - lse);
    return lse;
}

static void ref_forward(att_shape s, double *out, double *lse, const double *qkv) {
    double *p = kt_vec((size_t)s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < s.T; t++) {
                double l = ref_probs(s, qkv, b, h, t, p);
                if (lse) lse[(b * s.NH + h) * s.T + t] = l;
                for (int64_t d = 0; d < s.HS; d++) {
                    double acc = 0;
                    for (int64_t u = 0; u <= t; u++) acc += p[u] * qkv[qkv_index(s, b, u, h, 2, d)];
                    out[out_index(s, b, t, h, d)] = acc;
                }
            }
    free(p);
}

/* dqkv += the gradient of sum(out * dout); D from the given out. */
static void ref_backward(att_shape s, double *dqkv, const double *dout, const double *qkv,
                         const double *out) {
    const double scale = 1.0 / sqrt((double)s.HS);
    double *p = kt_vec((size_t)s.T), *ds = kt_vec((size_t)s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < s.T; t++) {
                ref_probs(s, qkv, b, h, t, p);
                double D = 0;
                for (int64_t d = 0; d < s.HS; d++)
                    D += dout[out_index(s, b, t, h, d)] * out[out_index(s, b, t, h, d)];
                for (int64_t u = 0; u <= t; u++) {
                    double dp = 0;
                    for (int64_t d = 0; d < s.HS; d++) {
                        dp += dout[out_index(s, b, t, h, d)] * qkv[qkv_index(s, b, u, h, 2, d)];
                        dqkv[qkv_index(s, b, u, h, 2, d)] += p[u] * dout[out_index(s, b, t, h, d)];
                    }
                    ds[u] = p[u] * (dp - D) * scale;
                }
                for (int64_t u = 0; u <= t; u++)
                    for (int64_t d = 0; d < s.HS; d++) {
                        dqkv[qkv_index(s, b, t, h, 0, d)] +=
                            ds[u] * qkv[qkv_index(s, b, u, h, 1, d)];
                        dqkv[qkv_index(s, b, u, h, 1, d)] +=
                            ds[u] * qkv[qkv_index(s, b, t, h, 0, d)];
                    }
            }
    free(p), free(ds);
}

typedef struct att_loss {
    att_shape s;
    const double *qkv, *dout;
} att_loss;

static double loss_fn(void *ctx) {
    att_loss *l = ctx;
    size_t n = (size_t)(l->s.B * l->s.T * l->s.NH * l->s.HS);
    double *out = kt_vec(n), sum = 0;
    ref_forward(l->s, out, NULL, l->qkv);
    for (size_t i = 0; i < n; i++) sum += out[i] * l->dout[i];
    free(out);
    return sum;
}

/* abs_tol = 4 (HS + T + 4) u32 max|x| for every element. */
static double *normwise_tol(att_shape s, const double *x, size_t n) {
    double *t = kt_vec(n),
           v = 4.0 * (double)(s.HS + s.T + 4) * KT_U32 * fmax(kt_max_abs(x, n), 1.0);
    for (size_t i = 0; i < n; i++) t[i] = v;
    return t;
}

static void run_case(kt_env *env, test_rng *rng, zoe_dtype dt, att_shape s, int fd_check) {
    const size_t nqkv = (size_t)(s.B * s.T * s.NH * 3 * s.HS), nout = nqkv / 3;
    const size_t nlse = (size_t)(s.B * s.NH * s.T);
    char what[160];
    snprintf(what, sizeof what, "attention %s B=%lld T=%lld NH=%lld HS=%lld", zoe_dtype_name(dt),
             (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.HS);
    /* spread of the scores grows with HS: keep them O(1..3) so softmax is not one-hot */
    double *qkv = kt_random(rng, nqkv, -1.5, 1.5);
    void *qkv_s = kt_to_storage(dt, qkv, nqkv);
    void *out_s = kt_poisoned(dt, nout);
    float *lse = malloc(nlse * sizeof(float));
    for (size_t i = 0; i < nlse; i++) lse[i] = NAN;
    double *out = kt_vec(nout), *lse_ref = kt_vec(nlse);
    ref_forward(s, out, lse_ref, qkv);
    CHECK_OK(zoe_attention_forward(env->k, dt, out_s, lse, qkv_s, s.B, s.T, s.NH, s.HS));
    double *tol = normwise_tol(s, out, nout);
    char w2[200];
    snprintf(w2, sizeof w2, "%s out", what);
    kt_check_storage(out_s, dt, out, tol, kt_unit(dt), nout, w2);
    free(tol);
    double *lse_got = kt_vec(nlse);
    for (size_t i = 0; i < nlse; i++) lse_got[i] = lse[i];
    tol = normwise_tol(s, lse_ref, nlse);
    snprintf(w2, sizeof w2, "%s lse", what);
    kt_check(lse_got, lse_ref, tol, KT_U32, nlse, w2);
    free(tol);

    /* backward from the kernel's own out and lse, into random initial gradients */
    double *dout = kt_random(rng, nout, -1, 1);
    void *dout_s = kt_to_storage(dt, dout, nout);
    double *dqkv = kt_random(rng, nqkv, -1, 1);
    void *dqkv_s = kt_to_storage(dt, dqkv, nqkv);
    double *grad = kt_vec(nqkv);
    double *out_used = kt_read(out_s, dt, nout);
    ref_backward(s, grad, dout, qkv, out_used);
    tol = normwise_tol(s, grad, nqkv);
    for (size_t i = 0; i < nqkv; i++) dqkv[i] += grad[i];
    CHECK_OK(zoe_attention_backward(env->k, dt, dqkv_s, dout_s, qkv_s, out_s, lse, s.B, s.T, s.NH,
                                    s.HS));
    snprintf(w2, sizeof w2, "%s dqkv", what);
    kt_check_storage(dqkv_s, dt, dqkv, tol, kt_unit(dt), nqkv, w2);
    free(tol);

    if (fd_check) {
        double *g_exact = kt_vec(nqkv);
        ref_forward(s, out, NULL, qkv);
        ref_backward(s, g_exact, dout, qkv, out);
        att_loss l = {s, qkv, dout};
        snprintf(w2, sizeof w2, "%s reference dqkv vs FD", what);
        kt_check_fd(rng, loss_fn, &l, qkv, g_exact, nqkv, 40, 1.0, w2);
        free(g_exact);
    }
    free(qkv), free(qkv_s), free(out_s), free(lse), free(out), free(lse_ref), free(lse_got);
    free(dout), free(dout_s), free(dqkv), free(dqkv_s), free(grad), free(out_used);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 5);
    zoe_kernel_plan plan = {
        .max_rows = 512, .max_dim = 64, .max_seq = 200, .max_heads = 4, .max_head_dim = 128};
    kt_env env;
    kt_setup(&env, &plan, 3);
    /* the BLAS pool is switched to one thread around the parallel blocks and restored */
    openblas_set_num_threads(2);
    const att_shape fixed[] = {{1, 1, 1, 1},    {2, 5, 3, 4},    {1, 67, 2, 8},   {1, 64, 1, 32},
                               {2, 130, 2, 32}, {1, 97, 1, 128}, {1, 200, 1, 16}, {3, 65, 2, 64}};
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            run_case(&env, &rng, dt, fixed[i], d == 0 && i < 3);
        for (int r = 0; r < 3; r++) {
            att_shape s = {test_rng_int(&rng, 1, 2), test_rng_int(&rng, 1, 150),
                           test_rng_int(&rng, 1, 3), test_rng_int(&rng, 1, 80)};
            run_case(&env, &rng, dt, s, 0);
        }
    }

    CHECK(openblas_get_num_threads() == 2, "BLAS threads restored: %d", openblas_get_num_threads());

    /* bad arguments */
    float buf[64], lse[8];
    CHECK(zoe_attention_forward(env.k, ZOE_F32, buf, lse, buf, 1, 201, 1, 1) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "T over the plan");
    CHECK(strstr(zoe_last_error(), "T=201") != NULL, "names T: %s", zoe_last_error());
    CHECK(zoe_attention_forward(env.k, ZOE_F32, buf, lse, buf, 1, 2, 1, 129) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "HS over the plan");
    CHECK(zoe_attention_forward(env.k, ZOE_F32, buf, lse, buf, 3, 200, 1, 1) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "B*T over the plan");
    CHECK(zoe_attention_forward(env.k, ZOE_F32, buf, NULL, buf, 1, 2, 1, 1) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "NULL lse");
    CHECK(strstr(zoe_last_error(), "lse") != NULL, "names lse: %s", zoe_last_error());
    CHECK(zoe_attention_backward(env.k, ZOE_F32, buf, buf, buf, buf, lse, -1, 2, 1, 1) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "negative B");
    kt_teardown(&env);
    return test_finish("test_kernels_attention");
}
