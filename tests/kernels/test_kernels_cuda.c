/* GPU: every op of the CUDA backend against the CPU backend on the same random inputs, in fp32,
 * bf16 and fp16 storage (the Llama ops too: RMSNorm, RoPE, SwiGLU, grouped-query attention).
 * Skipped (exit 77) without a GPU.
 *
 * The CPU backend has no fp16, so an fp16 case feeds the CPU the same fp16-rounded values in
 * fp32 storage and compares the GPU's fp16 result with the CPU's fp32 one. Each backward and
 * each later cross-entropy stage gets the same saved statistics on both sides (the CPU's), so
 * every op is compared on identical inputs. Outputs are poisoned with NaN before the calls;
 * accumulated gradients start from the same random values.
 *
 * Tolerances, per element: |gpu - cpu| <= tol (|cpu| + spread max|cpu|), tol by storage dtype:
 *  - fp32 5e-5: both sides compute in fp32 but sum in different orders and use different exp
 *    and tanh (the CPU's polynomial exp is within 2 ulp); over the sums here (<= 1000 terms of
 *    unit size) that stays below about 1e-5 of the largest value;
 *  - bf16 1.2e-2: both sides round the same fp32-accurate value to bf16, which can land one
 *    bf16 ulp apart (up to 2^-7 relative), plus the fp32 differences above;
 *  - fp16 1.5e-3: the GPU rounds to fp16 once (half an ulp, <= 2^-11 relative) against the
 *    CPU's unrounded fp32 value; 2^-10 plus margin.
 * spread is 1 for reductions (products, norms, attention, column sums: the error scales with
 * the largest magnitudes involved, cancellation can make a single element small) and 0.01 for
 * element-wise results. Ops that perform the very same IEEE operations on both sides (casts,
 * residual, add, scale, embedding forward, and dwte, whose sums run in position order on both)
 * must match exactly in fp32 and bf16, and within one fp16 rounding in fp16. */
#include <math.h>
#include <stdlib.h>
#include "kernel_test.h"
#include "kernels/adam.h"

#define IGNORE (-100)

typedef struct env {
    zoe_device *cpu_dev, *gpu_dev;
    zoe_stream *cpu_stream, *gpu_stream;
    zoe_kernels *cpu, *gpu;
} env;

/* ---- tensors held on both sides ---- */

/* The CPU computes in the GPU's dtype, except fp16, which it computes in fp32. */
static zoe_dtype cpu_dtype(zoe_dtype dt) {
    return dt == ZOE_F16 ? ZOE_F32 : dt;
}

typedef struct tensor {
    zoe_dtype dt; /* GPU storage */
    size_t n;
    double *vals; /* the values both sides were given, rounded to dt */
    void *cpu;    /* host buffer in cpu_dtype(dt) */
    void *gpu;    /* device buffer in dt */
} tensor;

/* Storage of n values in dt; vals are rounded to dt in place. */
static void *to_storage(zoe_dtype dt, double *vals, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    void *buf = malloc((n ? n : 1) * zoe_dtype_size(dt));
    for (size_t i = 0; i < n; i++) f[i] = (float)vals[i];
    CHECK_OK(zoe_convert(buf, dt, f, ZOE_F32, n));
    CHECK_OK(zoe_convert(f, ZOE_F32, buf, dt, n));
    for (size_t i = 0; i < n; i++) vals[i] = f[i];
    free(f);
    return buf;
}

static double *from_storage(const void *buf, zoe_dtype dt, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    CHECK_OK(zoe_convert(f, ZOE_F32, buf, dt, n));
    double *out = kt_vec(n);
    for (size_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
    return out;
}

static void upload(env *e, void *dst, const void *src, size_t bytes) {
    CHECK_OK(zoe_memcpy_async(dst, src, bytes, ZOE_COPY_HOST_TO_DEVICE, e->gpu_stream));
    CHECK_OK(zoe_stream_synchronize(e->gpu_stream));
}

/* A tensor holding vals (taken over), rounded to dt. */
static tensor t_from(env *e, zoe_dtype dt, double *vals, size_t n) {
    tensor t = {dt, n, vals, NULL, NULL};
    void *dev_bytes = to_storage(dt, t.vals, n);
    t.cpu = to_storage(cpu_dtype(dt), t.vals, n); /* exact: dt values fit cpu_dtype */
    CHECK_OK(zoe_device_alloc(e->gpu_dev, (n ? n : 1) * zoe_dtype_size(dt), &t.gpu));
    upload(e, t.gpu, dev_bytes, n * zoe_dtype_size(dt));
    free(dev_bytes);
    return t;
}

static tensor t_random(env *e, test_rng *rng, zoe_dtype dt, size_t n, double lo, double hi) {
    return t_from(e, dt, kt_random(rng, n, lo, hi), n);
}

static tensor t_poisoned(env *e, zoe_dtype dt, size_t n) {
    double *v = kt_vec(n);
    for (size_t i = 0; i < n; i++) v[i] = NAN;
    return t_from(e, dt, v, n);
}

/* A tensor with the CPU result of another, as the input of a later call. */
static tensor t_copy_cpu(env *e, const tensor *src, zoe_dtype dt) {
    return t_from(e, dt, from_storage(src->cpu, cpu_dtype(src->dt), src->n), src->n);
}

static void t_free(env *e, tensor *t) {
    free(t->vals);
    free(t->cpu);
    zoe_device_free(e->gpu_dev, t->gpu);
    memset(t, 0, sizeof *t);
}

static double *t_gpu_values(env *e, const tensor *t) {
    void *bytes = malloc((t->n ? t->n : 1) * zoe_dtype_size(t->dt));
    CHECK_OK(zoe_memcpy_async(bytes, t->gpu, t->n * zoe_dtype_size(t->dt), ZOE_COPY_DEVICE_TO_HOST,
                              e->gpu_stream));
    CHECK_OK(zoe_stream_synchronize(e->gpu_stream));
    double *v = from_storage(bytes, t->dt, t->n);
    free(bytes);
    return v;
}

/* int32 ids on both sides. */
typedef struct ids {
    size_t n;
    int32_t *cpu;
    void *gpu;
} ids;

static ids ids_from(env *e, int32_t *vals, size_t n) {
    ids t = {n, vals, NULL};
    CHECK_OK(zoe_device_alloc(e->gpu_dev, (n ? n : 1) * sizeof(int32_t), &t.gpu));
    upload(e, t.gpu, vals, n * sizeof(int32_t));
    return t;
}

static void ids_free(env *e, ids *t) {
    free(t->cpu);
    zoe_device_free(e->gpu_dev, t->gpu);
}

/* ---- comparison ---- */

enum { EXACT = 0, ELEMENTWISE = 1, REDUCTION = 2 };

static double tol_for(zoe_dtype dt) {
    return dt == ZOE_F32 ? 5e-5 : dt == ZOE_BF16 ? 1.2e-2 : 1.5e-3;
}

/* The GPU result of t against the CPU's, by the rules in the header comment. */
static void compare(env *e, const tensor *t, int kind, const char *what) {
    double *got = t_gpu_values(e, t), *want = from_storage(t->cpu, cpu_dtype(t->dt), t->n);
    double tol = tol_for(t->dt), spread = kind == REDUCTION ? 1.0 : 0.01, mx = 0;
    /* EXACT in fp16: one rounding, relative 2^-11, absolute 2^-25 among the subnormals. */
    const double floor = kind == EXACT && t->dt == ZOE_F16 ? 0x1p-25 : 0.0;
    if (kind == EXACT) tol = t->dt == ZOE_F16 ? 0x1p-11 : 0.0, spread = 0.0;
    for (size_t i = 0; i < t->n; i++) mx = fmax(mx, fabs(want[i]));
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < t->n; i++) {
        const double lim = tol * (fabs(want[i]) + spread * mx) + floor,
                     err = fabs(got[i] - want[i]);
        const double ratio = isnan(got[i]) || isnan(want[i]) ? INFINITY
                             : lim > 0                       ? err / lim
                             : err > 0                       ? INFINITY
                                                             : 0.0;
        if (!(ratio <= 1.0)) bad++;
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    }
    CHECK(bad == 0, "%s [%s]: %zu of %zu out of tolerance; worst [%zu] gpu %.9g cpu %.9g", what,
          zoe_dtype_name(t->dt), bad, t->n, worst, t->n ? got[worst] : 0.0,
          t->n ? want[worst] : 0.0);
    free(got);
    free(want);
}

/* Two GPU results that must be bitwise equal (determinism). */
static void compare_bits(env *e, const tensor *a, const tensor *b, const char *what) {
    const size_t bytes = a->n * zoe_dtype_size(a->dt);
    char *ha = malloc(bytes ? bytes : 1), *hb = malloc(bytes ? bytes : 1);
    CHECK_OK(zoe_memcpy_async(ha, a->gpu, bytes, ZOE_COPY_DEVICE_TO_HOST, e->gpu_stream));
    CHECK_OK(zoe_memcpy_async(hb, b->gpu, bytes, ZOE_COPY_DEVICE_TO_HOST, e->gpu_stream));
    CHECK_OK(zoe_stream_synchronize(e->gpu_stream));
    CHECK(memcmp(ha, hb, bytes) == 0, "%s [%s]: two runs differ", what, zoe_dtype_name(a->dt));
    free(ha);
    free(hb);
}

/* ---- ops ---- */

static void test_matmul(env *e, test_rng *rng, zoe_dtype dt, int64_t M, int64_t K, int64_t N,
                        int bias) {
    const zoe_dtype ct = cpu_dtype(dt);
    tensor x = t_random(e, rng, dt, (size_t)(M * K), -1, 1);
    tensor w = t_random(e, rng, dt, (size_t)(N * K), -1, 1);
    tensor b = t_random(e, rng, dt, (size_t)N, -1, 1);
    tensor y = t_poisoned(e, dt, (size_t)(M * N));
    tensor dy = t_random(e, rng, dt, (size_t)(M * N), -1, 1);
    tensor dx = t_random(e, rng, dt, (size_t)(M * K), -1, 1);
    tensor dw = t_random(e, rng, dt, (size_t)(N * K), -1, 1);
    tensor db = t_random(e, rng, dt, (size_t)N, -1, 1);
    CHECK_OK(zoe_matmul_forward(e->cpu, ct, y.cpu, x.cpu, w.cpu, bias ? b.cpu : NULL, M, K, N));
    CHECK_OK(zoe_matmul_forward(e->gpu, dt, y.gpu, x.gpu, w.gpu, bias ? b.gpu : NULL, M, K, N));
    compare(e, &y, REDUCTION, "matmul_forward y");
    CHECK_OK(
        zoe_matmul_backward(e->cpu, ct, dx.cpu, dw.cpu, db.cpu, dy.cpu, x.cpu, w.cpu, M, K, N));
    CHECK_OK(
        zoe_matmul_backward(e->gpu, dt, dx.gpu, dw.gpu, db.gpu, dy.gpu, x.gpu, w.gpu, M, K, N));
    compare(e, &dx, REDUCTION, "matmul_backward dx");
    compare(e, &dw, REDUCTION, "matmul_backward dw");
    compare(e, &db, REDUCTION, "matmul_backward db");
    tensor *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

static void test_layernorm(env *e, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t C) {
    const zoe_dtype ct = cpu_dtype(dt);
    tensor x = t_random(e, rng, dt, (size_t)(rows * C), -2, 3);
    tensor g = t_random(e, rng, dt, (size_t)C, 0.5, 1.5),
           b = t_random(e, rng, dt, (size_t)C, -1, 1);
    tensor y = t_poisoned(e, dt, (size_t)(rows * C));
    tensor mean = t_poisoned(e, ZOE_F32, (size_t)rows), rstd = t_poisoned(e, ZOE_F32, (size_t)rows);
    CHECK_OK(
        zoe_layernorm_forward(e->cpu, ct, y.cpu, mean.cpu, rstd.cpu, x.cpu, g.cpu, b.cpu, rows, C));
    CHECK_OK(
        zoe_layernorm_forward(e->gpu, dt, y.gpu, mean.gpu, rstd.gpu, x.gpu, g.gpu, b.gpu, rows, C));
    compare(e, &y, REDUCTION, "layernorm_forward y");
    compare(e, &mean, REDUCTION, "layernorm_forward mean");
    compare(e, &rstd, ELEMENTWISE, "layernorm_forward rstd");

    tensor m2 = t_copy_cpu(e, &mean, ZOE_F32), r2 = t_copy_cpu(e, &rstd, ZOE_F32);
    tensor dy = t_random(e, rng, dt, (size_t)(rows * C), -1, 1);
    tensor dx = t_random(e, rng, dt, (size_t)(rows * C), -1, 1);
    tensor dg = t_random(e, rng, dt, (size_t)C, -1, 1),
           dbt = t_random(e, rng, dt, (size_t)C, -1, 1);
    tensor dx2 = t_from(e, dt, kt_vec(dx.n), dx.n), dg2 = t_from(e, dt, kt_vec(dg.n), dg.n);
    CHECK_OK(zoe_layernorm_backward(e->cpu, ct, dx.cpu, dg.cpu, dbt.cpu, dy.cpu, x.cpu, g.cpu,
                                    m2.cpu, r2.cpu, rows, C));
    CHECK_OK(zoe_layernorm_backward(e->gpu, dt, dx.gpu, dg.gpu, dbt.gpu, dy.gpu, x.gpu, g.gpu,
                                    m2.gpu, r2.gpu, rows, C));
    compare(e, &dx, REDUCTION, "layernorm_backward dx");
    compare(e, &dg, REDUCTION, "layernorm_backward dgamma");
    compare(e, &dbt, REDUCTION, "layernorm_backward dbeta");
    /* determinism: the same call twice from zero, dgamma only */
    tensor dg3 = t_from(e, dt, kt_vec(dg.n), dg.n);
    CHECK_OK(zoe_layernorm_backward(e->gpu, dt, dx2.gpu, dg2.gpu, NULL, dy.gpu, x.gpu, g.gpu,
                                    m2.gpu, r2.gpu, rows, C));
    CHECK_OK(zoe_layernorm_backward(e->gpu, dt, NULL, dg3.gpu, NULL, dy.gpu, x.gpu, g.gpu, m2.gpu,
                                    r2.gpu, rows, C));
    compare_bits(e, &dg2, &dg3, "layernorm_backward dgamma");
    tensor *all[] = {&x, &g, &b, &y, &mean, &rstd, &m2, &r2, &dy, &dx, &dg, &dbt, &dx2, &dg2, &dg3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

static void test_gelu(env *e, test_rng *rng, zoe_dtype dt, int64_t n) {
    const zoe_dtype ct = cpu_dtype(dt);
    tensor x = t_random(e, rng, dt, (size_t)n, -4, 4), y = t_poisoned(e, dt, (size_t)n);
    tensor dy = t_random(e, rng, dt, (size_t)n, -1, 1), dx = t_random(e, rng, dt, (size_t)n, -1, 1);
    CHECK_OK(zoe_gelu_forward(e->cpu, ct, y.cpu, x.cpu, n));
    CHECK_OK(zoe_gelu_forward(e->gpu, dt, y.gpu, x.gpu, n));
    compare(e, &y, REDUCTION, "gelu_forward"); /* 1 + tanh cancels for negative x */
    CHECK_OK(zoe_gelu_backward(e->cpu, ct, dx.cpu, dy.cpu, x.cpu, n));
    CHECK_OK(zoe_gelu_backward(e->gpu, dt, dx.gpu, dy.gpu, x.gpu, n));
    compare(e, &dx, REDUCTION, "gelu_backward");
    tensor *all[] = {&x, &y, &dy, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

/* Element i of a tensor's CPU or GPU buffer. */
static void *at_cpu(const tensor *t, int64_t i) {
    return (char *)t->cpu + (size_t)i * zoe_dtype_size(cpu_dtype(t->dt));
}
static void *at_gpu(const tensor *t, int64_t i) {
    return (char *)t->gpu + (size_t)i * zoe_dtype_size(t->dt);
}

/* residual, add, scale on n elements starting `offset` elements into the buffers (an offset of
 * 1 defeats the 16-byte packs and takes the one-element path). */
static void test_elementwise(env *e, test_rng *rng, zoe_dtype dt, int64_t n, int64_t offset) {
    const zoe_dtype ct = cpu_dtype(dt);
    tensor a = t_random(e, rng, dt, (size_t)(n + offset), -1, 1);
    tensor b = t_random(e, rng, dt, (size_t)(n + offset), -1, 1);
    double *yv = kt_vec((size_t)(n + offset)); /* the skipped head stays 0, the rest NaN */
    for (int64_t i = offset; i < n + offset; i++) yv[i] = NAN;
    tensor y = t_from(e, dt, yv, (size_t)(n + offset));
    CHECK_OK(zoe_residual_forward(e->cpu, ct, at_cpu(&y, offset), at_cpu(&a, offset),
                                  at_cpu(&b, offset), n));
    CHECK_OK(zoe_residual_forward(e->gpu, dt, at_gpu(&y, offset), at_gpu(&a, offset),
                                  at_gpu(&b, offset), n));
    CHECK_OK(zoe_add(e->cpu, ct, at_cpu(&a, offset), at_cpu(&b, offset), n));
    CHECK_OK(zoe_add(e->gpu, dt, at_gpu(&a, offset), at_gpu(&b, offset), n));
    CHECK_OK(zoe_scale(e->cpu, ct, at_cpu(&b, offset), -0.37f, n));
    CHECK_OK(zoe_scale(e->gpu, dt, at_gpu(&b, offset), -0.37f, n));
    compare(e, &y, EXACT, offset ? "residual (unaligned)" : "residual");
    compare(e, &a, EXACT, offset ? "add (unaligned)" : "add");
    compare(e, &b, EXACT, offset ? "scale (unaligned)" : "scale");
    t_free(e, &a), t_free(e, &b), t_free(e, &y);
}

/* Dropout: the same Philox mask and the same multiply on both sides, so the results are equal
 * bit for bit (fp16: the GPU's one rounding of the CPU's fp32 value); in place too. The kept
 * fraction must be near 1 - p (a mask of all ones or all zeros would pass the comparison). */
static void test_dropout(env *e, test_rng *rng, zoe_dtype dt, int64_t n, float p) {
    const zoe_dtype ct = cpu_dtype(dt);
    const uint64_t seed = 0x5eed, stream = 0xabcdef12345ull;
    tensor x = t_random(e, rng, dt, (size_t)n, 0.5, 2), y = t_poisoned(e, dt, (size_t)n);
    CHECK_OK(zoe_dropout(e->cpu, ct, y.cpu, x.cpu, n, p, seed, stream));
    CHECK_OK(zoe_dropout(e->gpu, dt, y.gpu, x.gpu, n, p, seed, stream));
    compare(e, &y, EXACT, "dropout");
    size_t kept = 0;
    float *f = malloc((size_t)n * sizeof(float));
    CHECK_OK(zoe_convert(f, ZOE_F32, y.cpu, ct, (size_t)n));
    for (int64_t i = 0; i < n; i++) kept += f[i] != 0.0f;
    const double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    CHECK(fabs(frac - (1 - p)) < 6 * sd, "dropout p=%g kept %.4f of %lld", (double)p, frac,
          (long long)n);
    free(f);
    CHECK_OK(zoe_dropout(e->cpu, ct, x.cpu, x.cpu, n, p, seed, stream + 1));
    CHECK_OK(zoe_dropout(e->gpu, dt, x.gpu, x.gpu, n, p, seed, stream + 1));
    compare(e, &x, EXACT, "dropout in place");
    t_free(e, &x), t_free(e, &y);
}

/* Every cast pair, GPU against the CPU's zoe_cast (both round to nearest even). */
static void test_casts(env *e, test_rng *rng, int64_t n) {
    const zoe_dtype dts[] = {ZOE_F32, ZOE_BF16, ZOE_F16};
    for (int s = 0; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            const zoe_dtype sd = dts[s], dd = dts[d];
            double *v = kt_random(rng, (size_t)n, -70000, 70000); /* beyond fp16: inf */
            for (int64_t i = 0; i < n / 4; i++) v[i] *= 1e-9;     /* fp16 subnormals */
            for (int64_t i = n / 4; i < n / 2; i++) v[i] *= 1e-5;
            void *src = to_storage(sd, v, (size_t)n);
            void *want = malloc((size_t)n * zoe_dtype_size(dd));
            void *got = malloc((size_t)n * zoe_dtype_size(dd));
            void *dsrc = NULL, *ddst = NULL;
            CHECK_OK(zoe_device_alloc(e->gpu_dev, (size_t)n * zoe_dtype_size(sd), &dsrc));
            CHECK_OK(zoe_device_alloc(e->gpu_dev, (size_t)n * zoe_dtype_size(dd), &ddst));
            upload(e, dsrc, src, (size_t)n * zoe_dtype_size(sd));
            CHECK_OK(zoe_cast(e->cpu, want, dd, src, sd, n));
            CHECK_OK(zoe_cast(e->gpu, ddst, dd, dsrc, sd, n));
            CHECK_OK(zoe_memcpy_async(got, ddst, (size_t)n * zoe_dtype_size(dd),
                                      ZOE_COPY_DEVICE_TO_HOST, e->gpu_stream));
            CHECK_OK(zoe_stream_synchronize(e->gpu_stream));
            CHECK(memcmp(got, want, (size_t)n * zoe_dtype_size(dd)) == 0,
                  "cast %s -> %s differs from the CPU's", zoe_dtype_name(sd), zoe_dtype_name(dd));
            zoe_device_free(e->gpu_dev, dsrc);
            zoe_device_free(e->gpu_dev, ddst);
            free(v), free(src), free(want), free(got);
        }
}

/* bf16 -> fp16 in place on the GPU (zoe_convert_stream, as the weight stream converts each
 * gathered unit of a bf16 master computing in fp16) against the CPU's zoe_convert (checked
 * against float64 in test_dtype), on all 65536 bf16 patterns: the same bits, NaN as NaN. */
static void test_convert_in_place(env *e) {
    enum { N = 1 << 16 };
    uint16_t *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++) want[i] = (uint16_t)i;
    void *d = NULL;
    CHECK_OK(zoe_device_alloc(e->gpu_dev, N * sizeof *want, &d));
    upload(e, d, want, N * sizeof *want);
    CHECK_OK(zoe_convert(want, ZOE_F16, want, ZOE_BF16, N));
    CHECK_OK(zoe_convert_stream(e->gpu_stream, d, ZOE_F16, d, ZOE_BF16, N));
    CHECK_OK(zoe_memcpy_async(got, d, N * sizeof *got, ZOE_COPY_DEVICE_TO_HOST, e->gpu_stream));
    CHECK_OK(zoe_stream_synchronize(e->gpu_stream));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int nan_w = (want[i] & 0x7c00) == 0x7c00 && (want[i] & 0x3ff);
        int nan_g = (got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x3ff);
        if (nan_w ? !nan_g : got[i] != want[i])
            if (bad++ < 5) CHECK(0, "bf16 0x%04x: GPU fp16 0x%04x, CPU 0x%04x", i, got[i], want[i]);
    }
    CHECK(bad == 0, "bf16 -> fp16 in place: %d of %d patterns differ from the CPU's", bad, N);
    zoe_device_free(e->gpu_dev, d);
    free(want), free(got);
}

static void test_attention(env *e, test_rng *rng, zoe_dtype dt, int64_t B, int64_t T, int64_t NH,
                           int64_t HS) {
    const zoe_dtype ct = cpu_dtype(dt);
    const size_t n_qkv = (size_t)(B * T * NH * 3 * HS), n_out = (size_t)(B * T * NH * HS);
    const size_t n_lse = (size_t)(B * NH * T);
    char what[96];
    tensor qkv = t_random(e, rng, dt, n_qkv, -2, 2), out = t_poisoned(e, dt, n_out);
    tensor lse = t_poisoned(e, ZOE_F32, n_lse);
    CHECK_OK(zoe_attention_forward(e->cpu, ct, out.cpu, lse.cpu, qkv.cpu, B, T, NH, HS));
    CHECK_OK(zoe_attention_forward(e->gpu, dt, out.gpu, lse.gpu, qkv.gpu, B, T, NH, HS));
    snprintf(what, sizeof what, "attention B=%lld T=%lld NH=%lld HS=%lld", (long long)B,
             (long long)T, (long long)NH, (long long)HS);
    compare(e, &out, REDUCTION, what);
    compare(e, &lse, REDUCTION, what);

    tensor out2 = t_copy_cpu(e, &out, dt), lse2 = t_copy_cpu(e, &lse, ZOE_F32);
    tensor dout = t_random(e, rng, dt, n_out, -1, 1), dqkv = t_random(e, rng, dt, n_qkv, -1, 1);
    tensor z1 = t_from(e, dt, kt_vec(n_qkv), n_qkv), z2 = t_from(e, dt, kt_vec(n_qkv), n_qkv);
    CHECK_OK(zoe_attention_backward(e->cpu, ct, dqkv.cpu, dout.cpu, qkv.cpu, out2.cpu, lse2.cpu, B,
                                    T, NH, HS));
    CHECK_OK(zoe_attention_backward(e->gpu, dt, dqkv.gpu, dout.gpu, qkv.gpu, out2.gpu, lse2.gpu, B,
                                    T, NH, HS));
    compare(e, &dqkv, REDUCTION, what);
    CHECK_OK(zoe_attention_backward(e->gpu, dt, z1.gpu, dout.gpu, qkv.gpu, out2.gpu, lse2.gpu, B, T,
                                    NH, HS));
    CHECK_OK(zoe_attention_backward(e->gpu, dt, z2.gpu, dout.gpu, qkv.gpu, out2.gpu, lse2.gpu, B, T,
                                    NH, HS));
    compare_bits(e, &z1, &z2, what);
    tensor *all[] = {&qkv, &out, &lse, &out2, &lse2, &dout, &dqkv, &z1, &z2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

/* Grouped-query attention (q beside kv), NKV < NH. */
static void test_gqa(env *e, test_rng *rng, zoe_dtype dt, int64_t B, int64_t T, int64_t NH,
                     int64_t NKV, int64_t HS) {
    const zoe_dtype ct = cpu_dtype(dt);
    const size_t n_q = (size_t)(B * T * NH * HS), n_kv = (size_t)(B * T * NKV * 2 * HS);
    const size_t n_lse = (size_t)(B * NH * T);
    char what[112];
    snprintf(what, sizeof what, "gqa B=%lld T=%lld NH=%lld NKV=%lld HS=%lld", (long long)B,
             (long long)T, (long long)NH, (long long)NKV, (long long)HS);
    tensor q = t_random(e, rng, dt, n_q, -2, 2), kv = t_random(e, rng, dt, n_kv, -2, 2);
    tensor out = t_poisoned(e, dt, n_q), lse = t_poisoned(e, ZOE_F32, n_lse);
    CHECK_OK(
        zoe_attention_gqa_forward(e->cpu, ct, out.cpu, lse.cpu, q.cpu, kv.cpu, B, T, NH, NKV, HS));
    CHECK_OK(
        zoe_attention_gqa_forward(e->gpu, dt, out.gpu, lse.gpu, q.gpu, kv.gpu, B, T, NH, NKV, HS));
    compare(e, &out, REDUCTION, what);
    compare(e, &lse, REDUCTION, what);
    tensor out2 = t_copy_cpu(e, &out, dt), lse2 = t_copy_cpu(e, &lse, ZOE_F32);
    tensor dout = t_random(e, rng, dt, n_q, -1, 1), dq = t_random(e, rng, dt, n_q, -1, 1);
    tensor dkv = t_random(e, rng, dt, n_kv, -1, 1);
    CHECK_OK(zoe_attention_gqa_backward(e->cpu, ct, dq.cpu, dkv.cpu, dout.cpu, q.cpu, kv.cpu,
                                        out2.cpu, lse2.cpu, B, T, NH, NKV, HS));
    CHECK_OK(zoe_attention_gqa_backward(e->gpu, dt, dq.gpu, dkv.gpu, dout.gpu, q.gpu, kv.gpu,
                                        out2.gpu, lse2.gpu, B, T, NH, NKV, HS));
    compare(e, &dq, REDUCTION, what);
    compare(e, &dkv, REDUCTION, what);
    /* dK and dV sum over a group's heads (a split dk/dv grid's slices, or successive GEMMs):
     * in a fixed order, so two runs agree bit for bit. */
    tensor z1 = t_from(e, dt, kt_vec(n_kv), n_kv), z2 = t_from(e, dt, kt_vec(n_kv), n_kv);
    CHECK_OK(zoe_attention_gqa_backward(e->gpu, dt, NULL, z1.gpu, dout.gpu, q.gpu, kv.gpu, out2.gpu,
                                        lse2.gpu, B, T, NH, NKV, HS));
    CHECK_OK(zoe_attention_gqa_backward(e->gpu, dt, NULL, z2.gpu, dout.gpu, q.gpu, kv.gpu, out2.gpu,
                                        lse2.gpu, B, T, NH, NKV, HS));
    compare_bits(e, &z1, &z2, what);
    tensor *all[] = {&q, &kv, &out, &lse, &out2, &lse2, &dout, &dq, &dkv, &z1, &z2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

static void test_rmsnorm(env *e, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t C) {
    const zoe_dtype ct = cpu_dtype(dt);
    tensor x = t_random(e, rng, dt, (size_t)(rows * C), -2, 3);
    tensor g = t_random(e, rng, dt, (size_t)C, 0.5, 1.5), y = t_poisoned(e, dt, (size_t)(rows * C));
    tensor rstd = t_poisoned(e, ZOE_F32, (size_t)rows);
    CHECK_OK(zoe_rmsnorm_forward(e->cpu, ct, y.cpu, rstd.cpu, x.cpu, g.cpu, rows, C, 1e-6f));
    CHECK_OK(zoe_rmsnorm_forward(e->gpu, dt, y.gpu, rstd.gpu, x.gpu, g.gpu, rows, C, 1e-6f));
    compare(e, &y, REDUCTION, "rmsnorm_forward y");
    compare(e, &rstd, ELEMENTWISE, "rmsnorm_forward rstd");
    tensor r2 = t_copy_cpu(e, &rstd, ZOE_F32), dy = t_random(e, rng, dt, (size_t)(rows * C), -1, 1);
    tensor dx = t_random(e, rng, dt, (size_t)(rows * C), -1, 1);
    tensor dg = t_random(e, rng, dt, (size_t)C, -1, 1);
    CHECK_OK(
        zoe_rmsnorm_backward(e->cpu, ct, dx.cpu, dg.cpu, dy.cpu, x.cpu, g.cpu, r2.cpu, rows, C));
    CHECK_OK(
        zoe_rmsnorm_backward(e->gpu, dt, dx.gpu, dg.gpu, dy.gpu, x.gpu, g.gpu, r2.gpu, rows, C));
    compare(e, &dx, REDUCTION, "rmsnorm_backward dx");
    compare(e, &dg, REDUCTION, "rmsnorm_backward dgamma");
    tensor *all[] = {&x, &g, &y, &rstd, &r2, &dy, &dx, &dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

/* RoPE over strided heads (k halves of a kv buffer), forward and backward in place. */
static void test_rope(env *e, test_rng *rng, zoe_dtype dt, int64_t B, int64_t T, int64_t heads,
                      int64_t HS) {
    const zoe_dtype ct = cpu_dtype(dt);
    const int64_t head_stride = 2 * HS, row_stride = heads * 2 * HS;
    const size_t n = (size_t)(B * T * row_stride);
    double *f = kt_vec((size_t)HS / 2);
    for (int64_t i = 0; i < HS / 2; i++) f[i] = pow(10000.0, -2.0 * (double)i / (double)HS);
    tensor inv_freq = t_from(e, ZOE_F32, f, (size_t)HS / 2);
    tensor x = t_random(e, rng, dt, n, -2, 2), dx = t_random(e, rng, dt, n, -1, 1);
    CHECK_OK(zoe_rope_forward(e->cpu, ct, x.cpu, inv_freq.cpu, B, T, heads, HS, head_stride,
                              row_stride));
    CHECK_OK(zoe_rope_forward(e->gpu, dt, x.gpu, inv_freq.gpu, B, T, heads, HS, head_stride,
                              row_stride));
    compare(e, &x, ELEMENTWISE, "rope_forward");
    CHECK_OK(zoe_rope_backward(e->cpu, ct, dx.cpu, inv_freq.cpu, B, T, heads, HS, head_stride,
                               row_stride));
    CHECK_OK(zoe_rope_backward(e->gpu, dt, dx.gpu, inv_freq.gpu, B, T, heads, HS, head_stride,
                               row_stride));
    compare(e, &dx, ELEMENTWISE, "rope_backward");
    tensor *all[] = {&inv_freq, &x, &dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

/* Incremental decoding's ops: RoPE from a first position on n rows of NH heads, and the
 * attention of n new tokens at positions [pos, pos + n) over a cache, in Llama's layout (q beside
 * a [T, NKV, 2, HS] cache) and GPT's (a [T, NH, 3, HS] qkv cache holding the queries too). */
static void test_decode_ops(env *e, test_rng *rng, zoe_dtype dt, int64_t pos, int64_t n, int64_t NH,
                            int64_t NKV, int64_t HS) {
    const zoe_dtype ct = cpu_dtype(dt);
    const int64_t T = pos + n, es = (int64_t)zoe_dtype_size(dt), ces = (int64_t)zoe_dtype_size(ct);
    char what[112];
    snprintf(what, sizeof what, "decode pos=%lld n=%lld NH=%lld NKV=%lld HS=%lld", (long long)pos,
             (long long)n, (long long)NH, (long long)NKV, (long long)HS);
    double *f = kt_vec((size_t)HS / 2);
    for (int64_t i = 0; i < HS / 2; i++) f[i] = pow(10000.0, -2.0 * (double)i / (double)HS);
    tensor inv_freq = t_from(e, ZOE_F32, f, (size_t)HS / 2);
    tensor q = t_random(e, rng, dt, (size_t)(n * NH * HS), -2, 2);
    CHECK_OK(zoe_rope_forward_at(e->cpu, ct, q.cpu, inv_freq.cpu, pos, n, NH, HS, HS, NH * HS));
    CHECK_OK(zoe_rope_forward_at(e->gpu, dt, q.gpu, inv_freq.gpu, pos, n, NH, HS, HS, NH * HS));
    compare(e, &q, ELEMENTWISE, what);
    tensor q2 = t_copy_cpu(e, &q, dt), kv = t_random(e, rng, dt, (size_t)(T * NKV * 2 * HS), -2, 2);
    tensor out = t_poisoned(e, dt, (size_t)(n * NH * HS));
    CHECK_OK(zoe_attention_cached(e->cpu, ct, out.cpu, q2.cpu, kv.cpu, pos, n, NH, NKV, HS, HS,
                                  NH * HS, 2 * HS, NKV * 2 * HS));
    CHECK_OK(zoe_attention_cached(e->gpu, dt, out.gpu, q2.gpu, kv.gpu, pos, n, NH, NKV, HS, HS,
                                  NH * HS, 2 * HS, NKV * 2 * HS));
    compare(e, &out, REDUCTION, what);
    const int64_t row = NH * 3 * HS;
    tensor qkv = t_random(e, rng, dt, (size_t)(T * row), -2, 2);
    tensor out3 = t_poisoned(e, dt, (size_t)(n * NH * HS));
    CHECK_OK(zoe_attention_cached(e->cpu, ct, out3.cpu, (char *)qkv.cpu + pos * row * ces,
                                  (char *)qkv.cpu + HS * ces, pos, n, NH, NH, HS, 3 * HS, row,
                                  3 * HS, row));
    CHECK_OK(zoe_attention_cached(e->gpu, dt, out3.gpu, (char *)qkv.gpu + pos * row * es,
                                  (char *)qkv.gpu + HS * es, pos, n, NH, NH, HS, 3 * HS, row,
                                  3 * HS, row));
    compare(e, &out3, REDUCTION, what);
    tensor *all[] = {&inv_freq, &q, &q2, &kv, &out, &qkv, &out3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

static void test_swiglu(env *e, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t F) {
    const zoe_dtype ct = cpu_dtype(dt);
    const size_t n = (size_t)(rows * F);
    tensor gu = t_random(e, rng, dt, 2 * n, -6, 6), y = t_poisoned(e, dt, n);
    tensor dy = t_random(e, rng, dt, n, -1, 1), dgu = t_random(e, rng, dt, 2 * n, -1, 1);
    CHECK_OK(zoe_swiglu_forward(e->cpu, ct, y.cpu, gu.cpu, rows, F));
    CHECK_OK(zoe_swiglu_forward(e->gpu, dt, y.gpu, gu.gpu, rows, F));
    compare(e, &y, ELEMENTWISE, "swiglu_forward");
    CHECK_OK(zoe_swiglu_backward(e->cpu, ct, dgu.cpu, dy.cpu, gu.cpu, rows, F));
    CHECK_OK(zoe_swiglu_backward(e->gpu, dt, dgu.gpu, dy.gpu, gu.gpu, rows, F));
    compare(e, &dgu, ELEMENTWISE, "swiglu_backward");
    tensor *all[] = {&gu, &y, &dy, &dgu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
}

static void test_embedding(env *e, test_rng *rng, zoe_dtype dt, int64_t B, int64_t T, int64_t C) {
    const zoe_dtype ct = cpu_dtype(dt);
    const int64_t vocab_start = 5, vocab_rows = 40, n = B * T;
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) /* repeats, and ids on both sides of the range */
        tok[i] = (int32_t)test_rng_int(rng, 0, vocab_start + vocab_rows + 9);
    ids tokens = ids_from(e, tok, (size_t)n);
    tensor wte = t_random(e, rng, dt, (size_t)(vocab_rows * C), -1, 1);
    tensor wpe = t_random(e, rng, dt, (size_t)(T * C), -1, 1);
    tensor y = t_poisoned(e, dt, (size_t)(n * C)), y2 = t_poisoned(e, dt, (size_t)(n * C));
    CHECK_OK(zoe_embedding_forward(e->cpu, ct, y.cpu, tokens.cpu, wte.cpu, wpe.cpu, B, T, C,
                                   vocab_start, vocab_rows));
    CHECK_OK(zoe_embedding_forward(e->gpu, dt, y.gpu, tokens.gpu, wte.gpu, wpe.gpu, B, T, C,
                                   vocab_start, vocab_rows));
    compare(e, &y, EXACT, "embedding_forward");
    CHECK_OK(zoe_embedding_forward(e->cpu, ct, y2.cpu, tokens.cpu, wte.cpu, NULL, B, T, C,
                                   vocab_start, vocab_rows));
    CHECK_OK(zoe_embedding_forward(e->gpu, dt, y2.gpu, tokens.gpu, wte.gpu, NULL, B, T, C,
                                   vocab_start, vocab_rows));
    compare(e, &y2, EXACT, "embedding_forward without wpe");

    tensor dy = t_random(e, rng, dt, (size_t)(n * C), -1, 1);
    tensor dwte = t_random(e, rng, dt, wte.n, -1, 1), dwpe = t_random(e, rng, dt, wpe.n, -1, 1);
    tensor z1 = t_from(e, dt, kt_vec(wte.n), wte.n), z2 = t_from(e, dt, kt_vec(wte.n), wte.n);
    CHECK_OK(zoe_embedding_backward(e->cpu, ct, dwte.cpu, dwpe.cpu, dy.cpu, tokens.cpu, B, T, C,
                                    vocab_start, vocab_rows));
    CHECK_OK(zoe_embedding_backward(e->gpu, dt, dwte.gpu, dwpe.gpu, dy.gpu, tokens.gpu, B, T, C,
                                    vocab_start, vocab_rows));
    compare(e, &dwte, EXACT, "embedding_backward dwte");
    compare(e, &dwpe, REDUCTION, "embedding_backward dwpe");
    CHECK_OK(zoe_embedding_backward(e->gpu, dt, z1.gpu, NULL, dy.gpu, tokens.gpu, B, T, C,
                                    vocab_start, vocab_rows));
    CHECK_OK(zoe_embedding_backward(e->gpu, dt, z2.gpu, NULL, dy.gpu, tokens.gpu, B, T, C,
                                    vocab_start, vocab_rows));
    compare_bits(e, &z1, &z2, "embedding_backward dwte");
    tensor *all[] = {&wte, &wpe, &y, &y2, &dy, &dwte, &dwpe, &z1, &z2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
    ids_free(e, &tokens);
}

/* The stages of a second vocabulary shard [vocab_start, vocab_start + v_valid) of a vocabulary
 * of 3 v_valid; padding columns hold huge values that must never leak into a sum. */
static void test_xent(env *e, test_rng *rng, zoe_dtype dt, int64_t rows, int64_t V,
                      int64_t v_valid) {
    const zoe_dtype ct = cpu_dtype(dt);
    const int64_t vocab_start = v_valid;
    double *lv = kt_random(rng, (size_t)(rows * V), -4, 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = v_valid; c < V; c++) lv[r * V + c] = 1e4;
    tensor logits = t_from(e, dt, lv, (size_t)(rows * V));
    int32_t *tg = malloc((size_t)rows * sizeof(int32_t));
    for (int64_t r = 0; r < rows; r++)
        tg[r] = r % 5 == 3 ? IGNORE : (int32_t)test_rng_int(rng, 0, 3 * v_valid - 1);
    ids targets = ids_from(e, tg, (size_t)rows);
    tensor mx = t_poisoned(e, ZOE_F32, (size_t)rows), se = t_poisoned(e, ZOE_F32, (size_t)rows);
    tensor tl = t_poisoned(e, ZOE_F32, (size_t)rows);
    CHECK_OK(zoe_xent_row_max(e->cpu, ct, mx.cpu, logits.cpu, rows, V, v_valid));
    CHECK_OK(zoe_xent_row_max(e->gpu, dt, mx.gpu, logits.gpu, rows, V, v_valid));
    compare(e, &mx, EXACT, "xent_row_max"); /* a max is exact */
    tensor mx2 = t_copy_cpu(e, &mx, ZOE_F32);
    CHECK_OK(zoe_xent_row_sums(e->cpu, ct, se.cpu, tl.cpu, logits.cpu, mx2.cpu, targets.cpu, rows,
                               V, v_valid, vocab_start, IGNORE));
    CHECK_OK(zoe_xent_row_sums(e->gpu, dt, se.gpu, tl.gpu, logits.gpu, mx2.gpu, targets.gpu, rows,
                               V, v_valid, vocab_start, IGNORE));
    compare(e, &se, ELEMENTWISE, "xent_row_sums sum_exp"); /* positive terms: no cancellation */
    compare(e, &tl, EXACT, "xent_row_sums target_logit");

    tensor se2 = t_copy_cpu(e, &se, ZOE_F32), tl2 = t_copy_cpu(e, &tl, ZOE_F32);
    float *lc = malloc((size_t)rows * 4), *lg = malloc((size_t)rows * 4);
    float mean_c = NAN, mean_g = NAN;
    int64_t count_c = -1, count_g = -2;
    CHECK_OK(zoe_xent_loss(e->cpu, lc, &mean_c, &count_c, mx2.cpu, se2.cpu, tl2.cpu, targets.cpu,
                           rows, IGNORE));
    CHECK_OK(zoe_xent_loss(e->gpu, lg, &mean_g, &count_g, mx2.gpu, se2.gpu, tl2.gpu, targets.gpu,
                           rows, IGNORE));
    CHECK(count_c == count_g, "xent_loss count gpu %lld cpu %lld", (long long)count_g,
          (long long)count_c);
    CHECK(fabsf(mean_g - mean_c) <= 1e-5f * (1.0f + fabsf(mean_c)),
          "xent_loss mean gpu %.9g cpu %.9g", mean_g, mean_c);
    for (int64_t r = 0; r < rows; r++)
        CHECK(fabsf(lg[r] - lc[r]) <= 1e-5f * (1.0f + fabsf(lc[r])),
              "xent_loss row %lld gpu %.9g cpu %.9g", (long long)r, lg[r], lc[r]);

    /* backward in place over the logits */
    CHECK_OK(zoe_xent_backward(e->cpu, ct, logits.cpu, logits.cpu, mx2.cpu, se2.cpu, targets.cpu,
                               rows, V, v_valid, vocab_start, IGNORE, 0.25f));
    CHECK_OK(zoe_xent_backward(e->gpu, dt, logits.gpu, logits.gpu, mx2.gpu, se2.gpu, targets.gpu,
                               rows, V, v_valid, vocab_start, IGNORE, 0.25f));
    compare(e, &logits, ELEMENTWISE, "xent_backward in place");
    double *got = t_gpu_values(e, &logits);
    int64_t nonzero = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < V; c++)
            if ((tg[r] == IGNORE || c >= v_valid) && got[r * V + c] != 0.0) nonzero++;
    CHECK(nonzero == 0, "xent_backward: %lld padding or ignored entries are not 0",
          (long long)nonzero);
    free(got), free(lc), free(lg);
    tensor *all[] = {&logits, &mx, &se, &tl, &mx2, &se2, &tl2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) t_free(e, all[i]);
    ids_free(e, &targets);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (test_skip_without_gpus("test_kernels_cuda")) return 77;
    const zoe_kernel_plan plan = {
        .max_rows = 256, .max_dim = 1024, .max_seq = 128, .max_heads = 4, .max_head_dim = 256};
    env e = {0};
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &e.cpu_dev));
    CHECK_OK(zoe_stream_create(e.cpu_dev, &e.cpu_stream));
    CHECK_OK(zoe_kernels_create(e.cpu_dev, e.cpu_stream, &plan, &e.cpu));
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CUDA, test_gpu_ordinal(), &e.gpu_dev));
    CHECK_OK(zoe_stream_create(e.gpu_dev, &e.gpu_stream));
    CHECK_OK(zoe_kernels_create(e.gpu_dev, e.gpu_stream, &plan, &e.gpu));
    if (test_failures()) return test_finish("test_kernels_cuda");
    CHECK(zoe_kernels_backend(e.gpu) == ZOE_BACKEND_CUDA, "the GPU context runs CUDA kernels");

    test_rng rng;
    test_rng_seed(&rng, 2024);
    test_casts(&e, &rng, 4099);
    test_convert_in_place(&e);
    const zoe_dtype dts[] = {ZOE_F32, ZOE_BF16, ZOE_F16};
    for (int d = 0; d < 3; d++) {
        const zoe_dtype dt = dts[d];
        /* packed (multiples of 8, aligned) and one-element paths; multi-group column sums */
        test_matmul(&e, &rng, dt, 64, 96, 80, 1);
        test_matmul(&e, &rng, dt, 200, 129, 67, 0);
        test_layernorm(&e, &rng, dt, 200, 256);
        test_layernorm(&e, &rng, dt, 37, 77);
        test_gelu(&e, &rng, dt, 4099);
        test_elementwise(&e, &rng, dt, 4099, 0);
        test_elementwise(&e, &rng, dt, 1001, 1);
        test_attention(&e, &rng, dt, 2, 77, 3, 64);
        test_attention(&e, &rng, dt, 1, 40, 2, 40);
        test_attention(&e, &rng, dt, 1, 33, 1, 128);
        test_attention(&e, &rng, dt, 1, 70, 1, 256); /* over 48 KiB of shared memory */
        test_attention(&e, &rng, dt, 3, 5, 4, 16);
        test_dropout(&e, &rng, dt, 40001, 0.1f);
        test_dropout(&e, &rng, dt, 7, 0.5f);
        test_gqa(&e, &rng, dt, 2, 77, 4, 2, 64);
        test_gqa(&e, &rng, dt, 1, 40, 4, 1, 128);
        test_gqa(&e, &rng, dt, 3, 33, 3, 3, 16);
        test_gqa(&e, &rng, dt, 2, 50, 4, 2, 144); /* the GPT presets' head size */
        test_gqa(&e, &rng, dt, 1, 70, 4, 1, 256);
        test_rmsnorm(&e, &rng, dt, 200, 256);
        test_rmsnorm(&e, &rng, dt, 37, 77);
        test_rope(&e, &rng, dt, 2, 37, 3, 64);
        test_rope(&e, &rng, dt, 1, 100, 2, 128);
        test_decode_ops(&e, &rng, dt, 0, 9, 4, 2, 64);
        test_decode_ops(&e, &rng, dt, 77, 1, 4, 1, 128);
        test_decode_ops(&e, &rng, dt, 30, 5, 3, 3, 256);
        test_swiglu(&e, &rng, dt, 37, 301);
        test_embedding(&e, &rng, dt, 3, 17, 64);
        test_embedding(&e, &rng, dt, 2, 9, 50);
        test_xent(&e, &rng, dt, 23, 1000, 997);
        test_xent(&e, &rng, dt, 9, 333, 333);
    }

    /* Attention's other configurations, each in a context of its own:
     *  - bf16/fp16 on the fp32 flash kernels (where the tensor cores would serve them);
     *  - the flash tiles a V100 takes (96 KiB of shared memory per block: 16- and 8-row tiles
     *    at head size 256, 16-row backward at 192), on whatever GPU this is;
     *  - the tensor-core path in row blocks: at T = 4800 a head's T x T scores exceed the
     *    256 MiB scratch, so each pass takes one head and 4608 query rows. */
    zoe_kernels *main_ctx = e.gpu;
    zoe_kernel_plan flash_plan = plan, v100_plan = plan, long_plan = plan;
    flash_plan.attention_flash = 1;
    v100_plan.attention_smem_limit = 96 * 1024;
    long_plan.max_rows = long_plan.max_seq = 4800;
    long_plan.max_heads = 2;
    zoe_kernels *ctx[3] = {NULL, NULL, NULL};
    CHECK_OK(zoe_kernels_create(e.gpu_dev, e.gpu_stream, &flash_plan, &ctx[0]));
    CHECK_OK(zoe_kernels_create(e.gpu_dev, e.gpu_stream, &v100_plan, &ctx[1]));
    CHECK_OK(zoe_kernels_create(e.gpu_dev, e.gpu_stream, &long_plan, &ctx[2]));
    for (int d = 0; d < 3 && ctx[0] && ctx[1] && ctx[2]; d++) {
        e.gpu = ctx[0];
        if (d > 0) {
            test_attention(&e, &rng, dts[d], 2, 77, 3, 64);
            test_attention(&e, &rng, dts[d], 1, 70, 1, 256);
            test_gqa(&e, &rng, dts[d], 1, 40, 4, 1, 128);
            test_gqa(&e, &rng, dts[d], 1, 70, 4, 1, 256);
        }
        e.gpu = ctx[1];
        test_attention(&e, &rng, dts[d], 1, 70, 1, 256);
        test_attention(&e, &rng, dts[d], 1, 45, 2, 192);
        test_gqa(&e, &rng, dts[d], 1, 70, 4, 1, 256);
        test_gqa(&e, &rng, dts[d], 2, 50, 4, 2, 144);
        e.gpu = ctx[2];
        if (d > 0) {
            test_attention(&e, &rng, dts[d], 1, 4800, 1, 64);
            test_gqa(&e, &rng, dts[d], 1, 4800, 2, 1, 64);
        }
    }
    for (int i = 0; i < 3; i++) zoe_kernels_destroy(ctx[i]);
    e.gpu = main_ctx;

    zoe_kernels_destroy(e.gpu);
    zoe_stream_destroy(e.gpu_stream);
    zoe_device_destroy(e.gpu_dev);
    zoe_kernels_destroy(e.cpu);
    zoe_stream_destroy(e.cpu_stream);
    zoe_device_destroy(e.cpu_dev);
    return test_finish("test_kernels_cuda");
}
