/* The Llama ops against float64 references, fp32 and bf16 storage, gradients accumulating into
 * random initial values; every float64 backward checked by central finite differences of its
 * float64 forward:
 *  - RMSNorm forward (y, rstd) and backward (dx, dgamma);
 *  - RoPE forward and backward (the rotation and its transpose) over strided heads, with plain
 *    and Llama-3-scaled frequencies;
 *  - SwiGLU forward and backward;
 *  - grouped-query attention (q beside kv, NKV < NH), and its agreement with the multi-head op
 *    when NKV == NH (the same kernel on the other layout: bit for bit).
 *
 * Tolerances. RMSNorm: the mean of squares is a C-term sum, so errors are bounded norm-wise by
 * (C + 8) u32 times the output's scale (factor 4 slack); dgamma adds a rows-term sum. RoPE: the
 * angle is formed in fp32 (as Hugging Face does), so the reference rounds t * inv_freq to fp32
 * too; cos/sin and the two-term sums add a few u32 of |x|. SwiGLU: the kernel's exp is within
 * a few ulp: 32 u32 (1 + |g|)^2 |u|. Attention: as in test_kernels_attention. bf16 storage adds
 * 2^-8 of the stored value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernel_test.h"

/* sum(y * dy) over n: the scalar whose gradient backward computes. */
static double dot(const double *y, const double *dy, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += y[i] * dy[i];
    return s;
}

/* ---- RMSNorm ---- */

#define RMS_EPS 1e-5

static void rms_ref_forward(double *y, double *rstd, const double *x, const double *g, int64_t rows,
                            int64_t C) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < C; i++) ss += x[r * C + i] * x[r * C + i];
        double rs = 1.0 / sqrt(ss / (double)C + RMS_EPS);
        for (int64_t i = 0; i < C; i++) y[r * C + i] = x[r * C + i] * rs * g[i];
        if (rstd) rstd[r] = rs;
    }
}

static void rms_ref_backward(double *dx, double *dg, const double *dy, const double *x,
                             const double *g, int64_t rows, int64_t C) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C, *dyr = dy + r * C;
        double ss = 0, a = 0;
        for (int64_t i = 0; i < C; i++) ss += xr[i] * xr[i];
        double rs = 1.0 / sqrt(ss / (double)C + RMS_EPS);
        for (int64_t i = 0; i < C; i++) a += dyr[i] * g[i] * xr[i] * rs;
        a /= (double)C;
        for (int64_t i = 0; i < C; i++) {
            dg[i] += dyr[i] * xr[i] * rs;
            dx[r * C + i] += rs * (dyr[i] * g[i] - xr[i] * rs * a);
        }
    }
}

typedef struct rms_loss {
    const double *x, *g, *dy;
    int64_t rows, C;
} rms_loss;

static double rms_loss_fn(void *ctx) {
    rms_loss *l = ctx;
    size_t n = (size_t)(l->rows * l->C);
    double *y = kt_vec(n);
    rms_ref_forward(y, NULL, l->x, l->g, l->rows, l->C);
    double s = dot(y, l->dy, n);
    free(y);
    return s;
}

static void rmsnorm_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t C,
                         int fd) {
    const size_t n = (size_t)(rows * C);
    char what[128];
    snprintf(what, sizeof what, "rmsnorm %s rows=%lld C=%lld", zoe_dtype_name(dt), (long long)rows,
             (long long)C);
    double *x = kt_random(rng, n, -2, 3), *g = kt_random(rng, (size_t)C, 0.5, 1.5);
    double *dy = kt_random(rng, n, -1, 1);
    void *xs = kt_to_storage(dt, x, n), *gs = kt_to_storage(dt, g, (size_t)C);
    void *dys = kt_to_storage(dt, dy, n), *ys = kt_poisoned(dt, n);
    float *rstd = malloc((size_t)rows * sizeof(float));
    for (int64_t r = 0; r < rows; r++) rstd[r] = NAN;
    double *y = kt_vec(n), *rs = kt_vec((size_t)rows);
    rms_ref_forward(y, rs, x, g, rows, C);
    CHECK_OK(zoe_rmsnorm_forward(env->k, dt, ys, rstd, xs, gs, rows, C, (float)RMS_EPS));
    const double slack = 4.0 * (double)(C + 8) * KT_U32;
    double *tol = kt_const_tol(n, slack * fmax(kt_max_abs(y, n), 1.0));
    kt_check_storage(ys, dt, y, tol, kt_unit(dt), n, what);
    free(tol);
    double *got = kt_vec((size_t)rows);
    for (int64_t r = 0; r < rows; r++) got[r] = rstd[r];
    kt_check(got, rs, NULL, slack, (size_t)rows, "rmsnorm rstd");
    free(got);

    double *dx = kt_random(rng, n, -1, 1), *dg = kt_random(rng, (size_t)C, -1, 1);
    void *dxs = kt_to_storage(dt, dx, n), *dgs = kt_to_storage(dt, dg, (size_t)C);
    double *gx = kt_vec(n), *gg = kt_vec((size_t)C);
    rms_ref_backward(gx, gg, dy, x, g, rows, C);
    CHECK_OK(zoe_rmsnorm_backward(env->k, dt, dxs, dgs, dys, xs, gs, rstd, rows, C));
    for (size_t i = 0; i < n; i++) dx[i] += gx[i];
    for (int64_t i = 0; i < C; i++) dg[i] += gg[i];
    tol = kt_const_tol(n, slack * fmax(kt_max_abs(gx, n), 1.0));
    kt_check_storage(dxs, dt, dx, tol, kt_unit(dt), n, "rmsnorm dx");
    free(tol);
    const double pslack = 4.0 * (double)(rows + C + 8) * KT_U32;
    tol =
        kt_const_tol((size_t)C, pslack * fmax(kt_max_abs(gg, (size_t)C), 1.0) * sqrt((double)rows));
    kt_check_storage(dgs, dt, dg, tol, kt_unit(dt), (size_t)C, "rmsnorm dgamma");
    free(tol);
    /* dx alone gives the same dx */
    double *zero = kt_vec(n);
    void *dxz = kt_to_storage(dt, zero, n);
    CHECK_OK(zoe_rmsnorm_backward(env->k, dt, dxz, NULL, dys, xs, gs, rstd, rows, C));
    tol = kt_const_tol(n, slack * fmax(kt_max_abs(gx, n), 1.0));
    kt_check_storage(dxz, dt, gx, tol, kt_unit(dt), n, "rmsnorm dx only");
    free(tol), free(zero), free(dxz);
    if (fd) {
        rms_loss l = {x, g, dy, rows, C};
        kt_check_fd(rng, rms_loss_fn, &l, x, gx, n, 20, 1.0, "rmsnorm reference dx vs FD");
        kt_check_fd(rng, rms_loss_fn, &l, g, gg, (size_t)C, 10, 1.0, "rmsnorm reference dg vs FD");
    }
    free(x), free(g), free(dy), free(xs), free(gs), free(dys), free(ys), free(rstd), free(y);
    free(rs), free(dx), free(dg), free(dxs), free(dgs), free(gx), free(gg);
}

/* ---- RoPE ---- */

typedef struct rope_shape {
    int64_t B, T, heads, HS, head_stride, row_stride;
} rope_shape;

/* Rotates every head of x (float64) by +angle (dir 1) or -angle (dir -1). */
static void rope_ref(rope_shape s, double *x, const float *inv_freq, int dir) {
    const int64_t half = s.HS / 2;
    for (int64_t r = 0; r < s.B * s.T; r++)
        for (int64_t h = 0; h < s.heads; h++) {
            double *v = x + r * s.row_stride + h * s.head_stride;
            for (int64_t i = 0; i < half; i++) {
                const double angle = (double)((float)(r % s.T) * inv_freq[i]);
                const double c = cos(angle), sn = dir * sin(angle), a = v[i], b = v[i + half];
                v[i] = a * c - b * sn;
                v[i + half] = b * c + a * sn;
            }
        }
}

typedef struct rope_loss {
    rope_shape s;
    const double *x, *dy;
    const float *inv_freq;
} rope_loss;

static double rope_loss_fn(void *ctx) {
    rope_loss *l = ctx;
    size_t n = (size_t)(l->s.B * l->s.T * l->s.row_stride);
    double *y = kt_vec(n);
    memcpy(y, l->x, n * sizeof(double));
    rope_ref(l->s, y, l->inv_freq, 1);
    double v = dot(y, l->dy, n);
    free(y);
    return v;
}

/* Hugging Face's inv_freq: theta^(-2i/HS) in fp32, and Llama 3's frequency scaling (factor 8,
 * low 1, high 4, original context 8192) when scaled. */
static void inv_freq_of(float *out, int64_t HS, double theta, int scaled) {
    for (int64_t i = 0; i < HS / 2; i++) {
        double f = (double)(float)(1.0 / pow(theta, (double)(2 * i) / (double)HS));
        if (scaled) {
            const double factor = 8, low = 1, high = 4, old = 8192, pi = 3.14159265358979323846;
            const double wavelen = 2 * pi / f;
            if (wavelen > old / low) {
                f /= factor;
            } else if (wavelen >= old / high) {
                const double smooth = (old / wavelen - low) / (high - low);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        }
        out[i] = (float)f;
    }
}

static void rope_case(kt_env *env, test_rng *rng, zoe_dtype dt, rope_shape s, int scaled, int fd) {
    const size_t n = (size_t)(s.B * s.T * s.row_stride);
    char what[160];
    snprintf(what, sizeof what, "rope %s B=%lld T=%lld heads=%lld HS=%lld stride=%lld%s",
             zoe_dtype_name(dt), (long long)s.B, (long long)s.T, (long long)s.heads,
             (long long)s.HS, (long long)s.head_stride, scaled ? " llama3-scaled" : "");
    float *inv_freq = malloc((size_t)s.HS / 2 * sizeof(float));
    inv_freq_of(inv_freq, s.HS, scaled ? 500000.0 : 10000.0, scaled);
    double *x = kt_random(rng, n, -2, 2);
    void *xs = kt_to_storage(dt, x, n);
    double *y = kt_vec(n);
    memcpy(y, x, n * sizeof(double));
    rope_ref(s, y, inv_freq, 1);
    double *tol = kt_const_tol(n, 8 * KT_U32 * fmax(kt_max_abs(x, n), 1.0));
    CHECK_OK(zoe_rope_forward(env->k, dt, xs, inv_freq, s.B, s.T, s.heads, s.HS, s.head_stride,
                              s.row_stride));
    kt_check_storage(xs, dt, y, tol, kt_unit(dt), n, what);
    /* backward: the transpose, in place on the gradient */
    double *dy = kt_random(rng, n, -1, 1), *dx = kt_vec(n);
    void *dys = kt_to_storage(dt, dy, n);
    memcpy(dx, dy, n * sizeof(double));
    rope_ref(s, dx, inv_freq, -1);
    CHECK_OK(zoe_rope_backward(env->k, dt, dys, inv_freq, s.B, s.T, s.heads, s.HS, s.head_stride,
                               s.row_stride));
    kt_check_storage(dys, dt, dx, tol, kt_unit(dt), n, "rope backward");
    if (fd) {
        rope_loss l = {s, x, dy, inv_freq};
        /* elements between heads are untouched: their gradient is dy itself */
        kt_check_fd(rng, rope_loss_fn, &l, x, dx, n, 40, 1.0, "rope reference backward vs FD");
    }
    free(inv_freq), free(x), free(xs), free(y), free(tol), free(dy), free(dx), free(dys);
}

/* ---- SwiGLU ---- */

static double silu(double g) {
    return g / (1 + exp(-g));
}

typedef struct swiglu_loss {
    const double *gu, *dy;
    size_t n;
} swiglu_loss;

static double swiglu_loss_fn(void *ctx) {
    swiglu_loss *l = ctx;
    double s = 0;
    for (size_t i = 0; i < l->n; i++) s += silu(l->gu[2 * i]) * l->gu[2 * i + 1] * l->dy[i];
    return s;
}

static void swiglu_case(kt_env *env, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t F, int fd) {
    const size_t n = (size_t)(rows * F);
    double *gu = kt_random(rng, 2 * n, -6, 6), *dy = kt_random(rng, n, -1, 1);
    double *dgu = kt_random(rng, 2 * n, -1, 1), *grad = kt_vec(2 * n);
    void *gus = kt_to_storage(dt, gu, 2 * n), *dys = kt_to_storage(dt, dy, n);
    void *dgus = kt_to_storage(dt, dgu, 2 * n), *ys = kt_poisoned(dt, n);
    double *y = kt_vec(n), *tol = kt_vec(n), *tolb = kt_vec(2 * n);
    for (size_t i = 0; i < n; i++) {
        const double g = gu[2 * i], u = gu[2 * i + 1], s = 1 / (1 + exp(-g));
        y[i] = silu(g) * u;
        grad[2 * i] = dy[i] * u * s * (1 + g * (1 - s));
        grad[2 * i + 1] = dy[i] * silu(g);
        tol[i] = 32 * KT_U32 * (1 + fabs(g)) * (1 + fabs(g)) * (1 + fabs(u));
        tolb[2 * i] = tolb[2 * i + 1] = tol[i] * (1 + fabs(g)) * fabs(dy[i]) + 4 * KT_U32;
    }
    CHECK_OK(zoe_swiglu_forward(env->k, dt, ys, gus, rows, F));
    kt_check_storage(ys, dt, y, tol, kt_unit(dt), n, "swiglu forward");
    CHECK_OK(zoe_swiglu_backward(env->k, dt, dgus, dys, gus, rows, F));
    for (size_t i = 0; i < 2 * n; i++) dgu[i] += grad[i];
    kt_check_storage(dgus, dt, dgu, tolb, kt_unit(dt), 2 * n, "swiglu backward");
    if (fd) {
        swiglu_loss l = {gu, dy, n};
        kt_check_fd(rng, swiglu_loss_fn, &l, gu, grad, 2 * n, 40, 1.0,
                    "swiglu reference backward vs FD");
    }
    free(gu), free(dy), free(dgu), free(grad), free(gus), free(dys), free(dgus), free(ys);
    free(y), free(tol), free(tolb);
}

/* ---- grouped-query attention ---- */

typedef struct gqa_shape {
    int64_t B, T, NH, NKV, HS;
} gqa_shape;

static size_t q_index(gqa_shape s, int64_t b, int64_t t, int64_t h, int64_t d) {
    return (size_t)(((b * s.T + t) * s.NH + h) * s.HS + d);
}
static size_t kv_index(gqa_shape s, int64_t b, int64_t t, int64_t h, int64_t part, int64_t d) {
    return (size_t)((((b * s.T + t) * s.NKV + h) * 2 + part) * s.HS + d);
}

/* Query row t of head h: probabilities p[0..t] against KV head h / group; returns the lse. */
static double gqa_probs(gqa_shape s, const double *q, const double *kv, int64_t b, int64_t h,
                        int64_t t, double *p) {
    const int64_t hk = h / (s.NH / s.NKV);
    double mx = -INFINITY;
    for (int64_t u = 0; u <= t; u++) {
        double d = 0;
        for (int64_t i = 0; i < s.HS; i++)
            d += q[q_index(s, b, t, h, i)] * kv[kv_index(s, b, u, hk, 0, i)];
        p[u] = d / sqrt((double)s.HS);
        mx = fmax(mx, p[u]);
    }
    double sum = 0;
    for (int64_t u = 0; u <= t; u++) sum += exp(p[u] - mx);
    const double lse = mx + log(sum);
    for (int64_t u = 0; u <= t; u++) p[u] = exp(p[u] - lse);
    return lse;
}

static void gqa_ref_forward(gqa_shape s, double *out, double *lse, const double *q,
                            const double *kv) {
    double *p = kt_vec((size_t)s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < s.T; t++) {
                const int64_t hk = h / (s.NH / s.NKV);
                double l = gqa_probs(s, q, kv, b, h, t, p);
                if (lse) lse[(b * s.NH + h) * s.T + t] = l;
                for (int64_t d = 0; d < s.HS; d++) {
                    double acc = 0;
                    for (int64_t u = 0; u <= t; u++) acc += p[u] * kv[kv_index(s, b, u, hk, 1, d)];
                    out[q_index(s, b, t, h, d)] = acc;
                }
            }
    free(p);
}

/* dq, dkv += the gradient of sum(out * dout); D from the given out. */
static void gqa_ref_backward(gqa_shape s, double *dq, double *dkv, const double *dout,
                             const double *q, const double *kv, const double *out) {
    const double scale = 1.0 / sqrt((double)s.HS);
    double *p = kt_vec((size_t)s.T), *ds = kt_vec((size_t)s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.NH; h++)
            for (int64_t t = 0; t < s.T; t++) {
                const int64_t hk = h / (s.NH / s.NKV);
                gqa_probs(s, q, kv, b, h, t, p);
                double D = 0;
                for (int64_t d = 0; d < s.HS; d++)
                    D += dout[q_index(s, b, t, h, d)] * out[q_index(s, b, t, h, d)];
                for (int64_t u = 0; u <= t; u++) {
                    double dp = 0;
                    for (int64_t d = 0; d < s.HS; d++) {
                        dp += dout[q_index(s, b, t, h, d)] * kv[kv_index(s, b, u, hk, 1, d)];
                        dkv[kv_index(s, b, u, hk, 1, d)] += p[u] * dout[q_index(s, b, t, h, d)];
                    }
                    ds[u] = p[u] * (dp - D) * scale;
                }
                for (int64_t u = 0; u <= t; u++)
                    for (int64_t d = 0; d < s.HS; d++) {
                        dq[q_index(s, b, t, h, d)] += ds[u] * kv[kv_index(s, b, u, hk, 0, d)];
                        dkv[kv_index(s, b, u, hk, 0, d)] += ds[u] * q[q_index(s, b, t, h, d)];
                    }
            }
    free(p), free(ds);
}

typedef struct gqa_loss {
    gqa_shape s;
    const double *q, *kv, *dout;
} gqa_loss;

static double gqa_loss_fn(void *ctx) {
    gqa_loss *l = ctx;
    size_t n = (size_t)(l->s.B * l->s.T * l->s.NH * l->s.HS);
    double *out = kt_vec(n);
    gqa_ref_forward(l->s, out, NULL, l->q, l->kv);
    double v = dot(out, l->dout, n);
    free(out);
    return v;
}

static double *normwise_tol(gqa_shape s, const double *x, size_t n) {
    return kt_const_tol(n, 4.0 * (double)(s.HS + s.T + 4) * KT_U32 * fmax(kt_max_abs(x, n), 1.0) *
                               (double)(s.NH / s.NKV));
}

static void gqa_case(kt_env *env, test_rng *rng, zoe_dtype dt, gqa_shape s, int fd) {
    const size_t nq = (size_t)(s.B * s.T * s.NH * s.HS),
                 nkv = (size_t)(s.B * s.T * s.NKV * 2 * s.HS);
    const size_t nlse = (size_t)(s.B * s.NH * s.T);
    char what[160];
    snprintf(what, sizeof what, "gqa %s B=%lld T=%lld NH=%lld NKV=%lld HS=%lld", zoe_dtype_name(dt),
             (long long)s.B, (long long)s.T, (long long)s.NH, (long long)s.NKV, (long long)s.HS);
    double *q = kt_random(rng, nq, -1.5, 1.5), *kv = kt_random(rng, nkv, -1.5, 1.5);
    void *qs = kt_to_storage(dt, q, nq), *kvs = kt_to_storage(dt, kv, nkv);
    void *outs = kt_poisoned(dt, nq);
    float *lse = malloc(nlse * sizeof(float));
    for (size_t i = 0; i < nlse; i++) lse[i] = NAN;
    double *out = kt_vec(nq), *lse_ref = kt_vec(nlse);
    gqa_ref_forward(s, out, lse_ref, q, kv);
    CHECK_OK(
        zoe_attention_gqa_forward(env->k, dt, outs, lse, qs, kvs, s.B, s.T, s.NH, s.NKV, s.HS));
    double *tol = normwise_tol(s, out, nq);
    kt_check_storage(outs, dt, out, tol, kt_unit(dt), nq, what);
    free(tol);
    double *lse_got = kt_vec(nlse);
    for (size_t i = 0; i < nlse; i++) lse_got[i] = lse[i];
    tol = normwise_tol(s, lse_ref, nlse);
    kt_check(lse_got, lse_ref, tol, KT_U32, nlse, "gqa lse");
    free(tol);

    double *dout = kt_random(rng, nq, -1, 1), *dq = kt_random(rng, nq, -1, 1);
    double *dkv = kt_random(rng, nkv, -1, 1), *gq = kt_vec(nq), *gkv = kt_vec(nkv);
    void *douts = kt_to_storage(dt, dout, nq), *dqs = kt_to_storage(dt, dq, nq);
    void *dkvs = kt_to_storage(dt, dkv, nkv);
    double *out_used = kt_read(outs, dt, nq);
    gqa_ref_backward(s, gq, gkv, dout, q, kv, out_used);
    CHECK_OK(zoe_attention_gqa_backward(env->k, dt, dqs, dkvs, douts, qs, kvs, outs, lse, s.B, s.T,
                                        s.NH, s.NKV, s.HS));
    for (size_t i = 0; i < nq; i++) dq[i] += gq[i];
    for (size_t i = 0; i < nkv; i++) dkv[i] += gkv[i];
    tol = normwise_tol(s, gq, nq);
    kt_check_storage(dqs, dt, dq, tol, kt_unit(dt), nq, "gqa dq");
    free(tol);
    tol = normwise_tol(s, gkv, nkv);
    kt_check_storage(dkvs, dt, dkv, tol, kt_unit(dt), nkv, "gqa dkv");
    free(tol);
    if (fd) {
        double *eq = kt_vec(nq), *ekv = kt_vec(nkv);
        gqa_ref_forward(s, out, NULL, q, kv);
        gqa_ref_backward(s, eq, ekv, dout, q, kv, out);
        gqa_loss l = {s, q, kv, dout};
        kt_check_fd(rng, gqa_loss_fn, &l, q, eq, nq, 30, 1.0, "gqa reference dq vs FD");
        kt_check_fd(rng, gqa_loss_fn, &l, kv, ekv, nkv, 30, 1.0, "gqa reference dkv vs FD");
        free(eq), free(ekv);
    }
    free(q), free(kv), free(qs), free(kvs), free(outs), free(lse), free(out), free(lse_ref);
    free(lse_got), free(dout), free(dq), free(dkv), free(gq), free(gkv), free(douts), free(dqs);
    free(dkvs), free(out_used);
}

/* NKV == NH: the grouped op on q | kv equals the multi-head op on the interleaved qkv. */
static void mha_layouts_agree(kt_env *env, test_rng *rng, zoe_dtype dt) {
    const int64_t B = 2, T = 70, NH = 3, HS = 16, rows = B * T;
    const size_t n = (size_t)(rows * NH * HS);
    double *qkv = kt_random(rng, 3 * n, -1.5, 1.5), *q = kt_vec(n), *kv = kt_vec(2 * n);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t d = 0; d < HS; d++) {
                const double *src = qkv + ((r * NH + h) * 3) * HS + d;
                q[(r * NH + h) * HS + d] = src[0];
                kv[((r * NH + h) * 2) * HS + d] = src[HS];
                kv[((r * NH + h) * 2 + 1) * HS + d] = src[2 * HS];
            }
    void *qkvs = kt_to_storage(dt, qkv, 3 * n), *qs = kt_to_storage(dt, q, n);
    void *kvs = kt_to_storage(dt, kv, 2 * n), *o1 = kt_poisoned(dt, n), *o2 = kt_poisoned(dt, n);
    float *l1 = malloc((size_t)(B * NH * T) * sizeof(float)),
          *l2 = malloc((size_t)(B * NH * T) * sizeof(float));
    CHECK_OK(zoe_attention_forward(env->k, dt, o1, l1, qkvs, B, T, NH, HS));
    CHECK_OK(zoe_attention_gqa_forward(env->k, dt, o2, l2, qs, kvs, B, T, NH, NH, HS));
    CHECK(memcmp(o1, o2, n * zoe_dtype_size(dt)) == 0, "gqa with NKV == NH equals mha (%s)",
          zoe_dtype_name(dt));
    CHECK(memcmp(l1, l2, (size_t)(B * NH * T) * sizeof(float)) == 0, "gqa lse equals mha lse");
    free(qkv), free(q), free(kv), free(qkvs), free(qs), free(kvs), free(o1), free(o2), free(l1);
    free(l2);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 12);
    zoe_kernel_plan plan = {
        .max_rows = 512, .max_dim = 700, .max_seq = 200, .max_heads = 8, .max_head_dim = 128};
    kt_env env;
    kt_setup(&env, &plan, 3);
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        rmsnorm_case(&env, &rng, dt, 5, 7, d == 0);
        rmsnorm_case(&env, &rng, dt, 200, 512, 0);
        rmsnorm_case(&env, &rng, dt, 37, 650, 0);
        rope_case(&env, &rng, dt, (rope_shape){2, 5, 2, 8, 8, 16}, 0, d == 0);
        /* strided heads: k of a [NKV, 2, HS] kv buffer, a gap between vectors */
        rope_case(&env, &rng, dt, (rope_shape){1, 33, 3, 64, 128, 384}, 1, d == 0);
        rope_case(&env, &rng, dt, (rope_shape){3, 40, 4, 128, 128, 512}, 1, 0);
        swiglu_case(&env, &rng, dt, 3, 5, d == 0);
        swiglu_case(&env, &rng, dt, 37, 300, 0);
        gqa_case(&env, &rng, dt, (gqa_shape){1, 9, 4, 2, 8}, d == 0);
        gqa_case(&env, &rng, dt, (gqa_shape){2, 70, 4, 1, 16}, d == 0);
        gqa_case(&env, &rng, dt, (gqa_shape){1, 130, 8, 2, 64}, 0);
        gqa_case(&env, &rng, dt, (gqa_shape){2, 65, 6, 3, 32}, 0);
        mha_layouts_agree(&env, &rng, dt);
    }
    /* bad arguments name the value */
    float buf[64], lse[8];
    CHECK(zoe_attention_gqa_forward(env.k, ZOE_F32, buf, lse, buf, buf, 1, 2, 4, 3, 2) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "NH not divisible by NKV");
    CHECK(strstr(zoe_last_error(), "NKV=3") != NULL, "names NKV: %s", zoe_last_error());
    CHECK(zoe_rope_forward(env.k, ZOE_F32, buf, buf, 1, 2, 1, 3, 3, 3) == ZOE_ERR_INVALID_ARGUMENT,
          "odd HS");
    CHECK(zoe_rope_forward(env.k, ZOE_F32, buf, buf, 1, 2, 2, 4, 4, 6) == ZOE_ERR_INVALID_ARGUMENT,
          "heads past the row");
    CHECK(strstr(zoe_last_error(), "row_stride=6") != NULL, "names the row: %s", zoe_last_error());
    CHECK(zoe_rmsnorm_forward(env.k, ZOE_F32, buf, lse, buf, buf, 1, 4, 0.0f) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "eps 0");
    kt_teardown(&env);
    return test_finish("test_kernels_llama");
}
