/* Softmax cross-entropy stages against a float64 reference, fp32 and bf16 logits: padding
 * columns hold huge values that would dominate any sum they leaked into, some rows carry
 * ignore_index, and a two-shard run (the stages combined the way a vocab-parallel caller
 * all-reduces them) must give the single-shard loss. The backward (in place and out of place)
 * is checked against the float64 gradient, itself checked by central finite differences.
 *
 * Tolerances: a V-term sum of exps in fp32 is within (V + 8) u32 of its value relatively
 * (all terms positive); the kernel's exp adds a few ulp, so 4 (V + 8) u32. Gradients are
 * probabilities: absolute 16 u32 scale, plus 2^-8 of the value when stored in bf16. */
#include <math.h>
#include <stdlib.h>
#include "kernel_test.h"

#define IGNORE (-100)

typedef struct xent_case {
    int64_t rows, V, v_valid;
} xent_case;

/* loss of row r (0 when ignored) over the valid columns, targets global from vocab_start 0. */
static double ref_loss(const double *logits, int64_t V, int64_t v_valid, int32_t target) {
    if (target == IGNORE) return 0.0;
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < v_valid; c++) mx = fmax(mx, logits[c]);
    for (int64_t c = 0; c < v_valid; c++) s += exp(logits[c] - mx);
    (void)V;
    return log(s) + mx - logits[target];
}

typedef struct xent_loss_ctx {
    const double *logits;
    const int32_t *targets;
    int64_t rows, V, v_valid;
    double scale;
} xent_loss_ctx;

static double loss_fn(void *ctx) {
    xent_loss_ctx *l = ctx;
    double s = 0;
    for (int64_t r = 0; r < l->rows; r++)
        s += ref_loss(l->logits + r * l->V, l->V, l->v_valid, l->targets[r]);
    return s * l->scale;
}

static void run_case(kt_env *env, test_rng *rng, zoe_dtype dt, xent_case c) {
    const int64_t rows = c.rows, V = c.V, vv = c.v_valid;
    const size_t n = (size_t)(rows * V);
    char what[128];
    snprintf(what, sizeof what, "xent %s rows=%lld V=%lld v_valid=%lld", zoe_dtype_name(dt),
             (long long)rows, (long long)V, (long long)vv);
    double *logits = kt_random(rng, n, -4, 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t col = vv; col < V; col++) logits[r * V + col] = 1e4; /* padding */
    int32_t *targets = malloc((size_t)rows * sizeof(int32_t));
    int64_t counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        targets[r] = r % 5 == 3 ? IGNORE : (int32_t)test_rng_int(rng, 0, vv - 1);
        counted += targets[r] != IGNORE;
    }
    void *ls = kt_to_storage(dt, logits, n);
    float *mx = malloc((size_t)rows * 4), *se = malloc((size_t)rows * 4);
    float *tl = malloc((size_t)rows * 4), *losses = malloc((size_t)rows * 4);
    for (int64_t r = 0; r < rows; r++) mx[r] = se[r] = tl[r] = losses[r] = NAN;
    float mean = NAN;
    int64_t count = -1;
    CHECK_OK(zoe_xent_row_max(env->k, dt, mx, ls, rows, V, vv));
    CHECK_OK(zoe_xent_row_sums(env->k, dt, se, tl, ls, mx, targets, rows, V, vv, 0, IGNORE));
    CHECK_OK(zoe_xent_loss(env->k, losses, &mean, &count, mx, se, tl, targets, rows, IGNORE));
    double *want = kt_vec((size_t)rows), *got = kt_vec((size_t)rows), total = 0;
    for (int64_t r = 0; r < rows; r++) {
        want[r] = ref_loss(logits + r * V, V, vv, targets[r]);
        got[r] = losses[r];
        total += want[r];
    }
    double *tol = kt_vec((size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        tol[r] = 4.0 * (double)(vv + 8) * KT_U32 * (1 + fabs(want[r]) + 4);
    kt_check(got, want, tol, 0, (size_t)rows, what);
    CHECK(count == counted, "%s: count %lld want %lld", what, (long long)count, (long long)counted);
    double want_mean = counted ? total / (double)counted : 0.0;
    CHECK(fabs(mean - want_mean) <= 4.0 * (double)(vv + 8) * KT_U32 * (fabs(want_mean) + 5),
          "%s: mean %.9g want %.9g", what, mean, want_mean);
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY;
        for (int64_t col = 0; col < vv; col++) m = fmax(m, logits[r * V + col]);
        CHECK(mx[r] == (float)m, "%s: row max [%lld] %g want %g", what, (long long)r, mx[r], m);
        if (targets[r] == IGNORE)
            CHECK(tl[r] == 0.0f, "%s: ignored row's target logit %g", what, tl[r]);
    }

    /* two shards [0, h) and [h, vv), each padded to its own width, combined like an all-reduce */
    if (vv >= 2) {
        const int64_t h = vv / 2, w0 = h + 1, w1 = vv - h + 3; /* padded widths */
        double *s0 = kt_vec((size_t)(rows * w0)), *s1 = kt_vec((size_t)(rows * w1));
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t col = 0; col < w0; col++)
                s0[r * w0 + col] = col < h ? logits[r * V + col] : 1e4;
            for (int64_t col = 0; col < w1; col++)
                s1[r * w1 + col] = col < vv - h ? logits[r * V + h + col] : 1e4;
        }
        void *s0s = kt_to_storage(dt, s0, (size_t)(rows * w0)),
             *s1s = kt_to_storage(dt, s1, (size_t)(rows * w1));
        float *m0 = malloc((size_t)rows * 4), *m1 = malloc((size_t)rows * 4);
        float *e0 = malloc((size_t)rows * 4), *e1 = malloc((size_t)rows * 4);
        float *t0 = malloc((size_t)rows * 4), *t1 = malloc((size_t)rows * 4);
        CHECK_OK(zoe_xent_row_max(env->k, dt, m0, s0s, rows, w0, h));
        CHECK_OK(zoe_xent_row_max(env->k, dt, m1, s1s, rows, w1, vv - h));
        for (int64_t r = 0; r < rows; r++) m0[r] = m1[r] = fmaxf(m0[r], m1[r]); /* all-reduce max */
        CHECK_OK(zoe_xent_row_sums(env->k, dt, e0, t0, s0s, m0, targets, rows, w0, h, 0, IGNORE));
        CHECK_OK(
            zoe_xent_row_sums(env->k, dt, e1, t1, s1s, m1, targets, rows, w1, vv - h, h, IGNORE));
        for (int64_t r = 0; r < rows; r++) e0[r] += e1[r], t0[r] += t1[r]; /* all-reduce sum */
        CHECK_OK(zoe_xent_loss(env->k, losses, NULL, NULL, m0, e0, t0, targets, rows, IGNORE));
        for (int64_t r = 0; r < rows; r++) got[r] = losses[r];
        kt_check(got, want, tol, 0, (size_t)rows, "xent two shards");
        /* shard 1's backward: its slice of the full gradient, padding zero */
        void *d1 = kt_poisoned(dt, (size_t)(rows * w1));
        CHECK_OK(zoe_xent_backward(env->k, dt, d1, s1s, m1, e0, targets, rows, w1, vv - h, h,
                                   IGNORE, 0.5f));
        double *g1 = kt_vec((size_t)(rows * w1)), *tol1 = kt_vec((size_t)(rows * w1));
        for (int64_t r = 0; r < rows; r++) {
            const double *lr = logits + r * V;
            double m = -INFINITY, s = 0;
            for (int64_t col = 0; col < vv; col++) m = fmax(m, lr[col]);
            for (int64_t col = 0; col < vv; col++) s += exp(lr[col] - m);
            for (int64_t col = 0; col < vv - h && targets[r] != IGNORE; col++)
                g1[r * w1 + col] = 0.5 * (exp(lr[h + col] - m) / s - (targets[r] == h + col));
            for (int64_t col = 0; col < w1; col++) tol1[r * w1 + col] = 16 * KT_U32 * 0.5;
        }
        kt_check_storage(d1, dt, g1, tol1, kt_unit(dt), (size_t)(rows * w1), "xent shard backward");
        free(s0), free(s1), free(s0s), free(s1s), free(m0), free(m1), free(e0), free(e1);
        free(t0), free(t1), free(d1), free(g1), free(tol1);
    }

    /* backward, out of place then in place; scale as a mean over counted rows */
    const float scale = counted ? 1.0f / (float)counted : 1.0f;
    double *g = kt_vec(n), *gtol = kt_vec(n);
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == IGNORE) continue;
        const double *lr = logits + r * V;
        double m = -INFINITY, s = 0;
        for (int64_t col = 0; col < vv; col++) m = fmax(m, lr[col]);
        for (int64_t col = 0; col < vv; col++) s += exp(lr[col] - m);
        for (int64_t col = 0; col < vv; col++)
            g[r * V + col] = scale * (exp(lr[col] - m) / s - (col == targets[r]));
    }
    for (size_t i = 0; i < n; i++) gtol[i] = 16 * KT_U32 * scale;
    void *ds = kt_poisoned(dt, n);
    CHECK_OK(zoe_xent_backward(env->k, dt, ds, ls, mx, se, targets, rows, V, vv, 0, IGNORE, scale));
    kt_check_storage(ds, dt, g, gtol, kt_unit(dt), n, "xent backward");
    CHECK_OK(zoe_xent_backward(env->k, dt, ls, ls, mx, se, targets, rows, V, vv, 0, IGNORE, scale));
    kt_check_storage(ls, dt, g, gtol, kt_unit(dt), n, "xent backward in place");

    if (dt == ZOE_F32 && n <= 2000) {
        xent_loss_ctx l = {logits, targets, rows, V, vv, scale};
        kt_check_fd(rng, loss_fn, &l, logits, g, n, 30, 0.01, "xent reference gradient vs FD");
    }
    free(logits), free(targets), free(ls), free(mx), free(se), free(tl), free(losses);
    free(want), free(got), free(tol), free(g), free(gtol), free(ds);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 3);
    zoe_kernel_plan plan = {
        .max_rows = 64, .max_dim = 5000, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    kt_env env;
    kt_setup(&env, &plan, 3);
    const xent_case cases[] = {
        {1, 1, 1}, {7, 13, 10}, {5, 64, 64}, {33, 3000, 2977}, {64, 5000, 4099}};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(&env, &rng, d ? ZOE_BF16 : ZOE_F32, cases[i]);

    /* all rows ignored: zero mean, zero count */
    float mx[2] = {1, 1}, se[2] = {1, 1}, tl[2] = {0, 0}, losses[2], mean = NAN;
    int32_t t[2] = {IGNORE, IGNORE};
    int64_t count = -1;
    CHECK_OK(zoe_xent_loss(env.k, losses, &mean, &count, mx, se, tl, t, 2, IGNORE));
    CHECK(mean == 0.0f && count == 0 && losses[0] == 0.0f, "all ignored: mean %g count %lld", mean,
          (long long)count);
    float logits[4] = {1, 2, 3, 4};
    CHECK(zoe_xent_row_max(env.k, ZOE_F32, mx, logits, 1, 4, 5) == ZOE_ERR_INVALID_ARGUMENT,
          "v_valid > V");
    CHECK(strstr(zoe_last_error(), "v_valid=5") != NULL, "names v_valid: %s", zoe_last_error());
    CHECK(zoe_xent_row_max(env.k, ZOE_F32, mx, logits, 65, 4, 4) == ZOE_ERR_INVALID_ARGUMENT,
          "rows over the plan");
    kt_teardown(&env);
    return test_finish("test_kernels_xent");
}
