/* The four region mappings, forward and backward, at TP = world size against serial
 * references. Every rank generates every rank's input from the same seed, so the references
 * (float64 sums, column slices) are computed locally. Tolerances:
 *  - moves (identity, slicing, gathering) are exact: compared bit for bit;
 *  - fp32 sums: the MPI reduction order is not ours, |error| <= t * eps32 * sum |x|;
 *  - bf16 sums are staged through fp32 and rounded once: plus one bf16 ulp (2^-8 relative). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "tensor_parallel/tp.h"
#include "testing.h"

enum { ROWS = 5, COLS = 24 }; /* COLS divides by 1, 2 and 4 */

typedef struct fixture {
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernels *kernels;
    zoe_comm *comm;
    zoe_tp tp;
} fixture;

static size_t es(const fixture *f) {
    return zoe_dtype_size(f->tp.dtype);
}

/* Rank r's input [ROWS, cols] in dtype, values exact in bf16. */
static void *make_input(const fixture *f, int r, int64_t n, uint64_t salt) {
    test_rng rng;
    test_rng_seed(&rng, 1000 * salt + (uint64_t)r);
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        v[i] = zoe_bf16_to_f32(zoe_f32_to_bf16((float)(test_rng_uniform(&rng) * 4 - 2)));
    void *out = malloc((size_t)n * es(f));
    zoe_convert(out, f->tp.dtype, v, ZOE_F32, (size_t)n);
    free(v);
    return out;
}

static double at(const fixture *f, const void *p, int64_t i) {
    return f->tp.dtype == ZOE_F32 ? ((const float *)p)[i]
                                  : zoe_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* A device buffer holding host data, or poisoned (0xff: NaN) when host is NULL. */
static void *upload(const fixture *f, const void *host, int64_t n) {
    void *d = NULL;
    CHECK_OK(zoe_device_alloc(f->dev, (size_t)n * es(f), &d));
    if (host)
        CHECK_OK(zoe_memcpy_async(d, host, (size_t)n * es(f), ZOE_COPY_HOST_TO_DEVICE, f->stream));
    else
        CHECK_OK(zoe_memset_async(d, 0xff, (size_t)n * es(f), f->stream));
    return d;
}

static void *download(const fixture *f, const void *dev, int64_t n) {
    void *h = malloc((size_t)n * es(f));
    CHECK_OK(zoe_memcpy_async(h, dev, (size_t)n * es(f), ZOE_COPY_DEVICE_TO_HOST, f->stream));
    CHECK_OK(zoe_stream_synchronize(f->stream));
    return h;
}

static void check_exact(const fixture *f, const void *got, const void *want, int64_t n,
                        const char *what) {
    CHECK(memcmp(got, want, (size_t)n * es(f)) == 0, "%s %s: not bit-identical", what,
          zoe_dtype_name(f->tp.dtype));
}

/* got (device, n) == sum over ranks of the inputs with salt, within the stated bound. */
static void check_sum(const fixture *f, const void *got_dev, int64_t n, uint64_t salt,
                      const char *what) {
    int t = f->tp.size;
    double *ref = calloc((size_t)n, sizeof(double)), *mag = calloc((size_t)n, sizeof(double));
    for (int r = 0; r < t; r++) {
        void *in = make_input(f, r, n, salt);
        for (int64_t i = 0; i < n; i++) ref[i] += at(f, in, i), mag[i] += fabs(at(f, in, i));
        free(in);
    }
    void *got = download(f, got_dev, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double tol =
            t * FLT_EPSILON * mag[i] + (f->tp.dtype == ZOE_BF16 ? 0x1p-8 * fabs(ref[i]) : 0);
        double err = fabs(at(f, got, i) - ref[i]);
        if (!(err <= tol)) worst = fmax(worst, isnan(err) ? INFINITY : err);
    }
    CHECK(worst == 0, "%s %s: error %g over the bound", what, zoe_dtype_name(f->tp.dtype), worst);
    free(got), free(ref), free(mag);
}

static void run(fixture *f) {
    int t = f->tp.size, r = f->tp.rank;
    int64_t n = ROWS * COLS, w = COLS / t;
    void *x = make_input(f, r, n, 1), *dx = upload(f, NULL, n), *dx_in = upload(f, x, n);

    /* copy_to: identity forward (out of place), all-reduce backward (out of and in place) */
    void *dev_x = upload(f, x, n), *y = upload(f, NULL, n);
    CHECK_OK(zoe_tp_copy_to_forward(&f->tp, y, dev_x, n));
    void *h = download(f, y, n);
    check_exact(f, h, x, n, "copy_to forward");
    free(h);
    CHECK_OK(zoe_tp_copy_to_backward(&f->tp, dx, dev_x, n));
    check_sum(f, dx, n, 1, "copy_to backward");
    CHECK_OK(zoe_tp_copy_to_backward(&f->tp, dx_in, dx_in, n));
    check_sum(f, dx_in, n, 1, "copy_to backward in place");

    /* reduce_from: all-reduce forward, identity backward */
    CHECK_OK(zoe_memset_async(y, 0xff, (size_t)n * es(f), f->stream));
    CHECK_OK(zoe_tp_reduce_from_forward(&f->tp, y, dev_x, n));
    check_sum(f, y, n, 1, "reduce_from forward");
    CHECK_OK(zoe_memset_async(dx, 0xff, (size_t)n * es(f), f->stream));
    CHECK_OK(zoe_tp_reduce_from_backward(&f->tp, dx, dev_x, n));
    h = download(f, dx, n);
    check_exact(f, h, x, n, "reduce_from backward");
    free(h);

    /* scatter_to forward / gather_from backward: this rank's columns of the full x */
    char *slice = malloc((size_t)(ROWS * w) * es(f));
    for (int64_t i = 0; i < ROWS; i++)
        memcpy(slice + (size_t)(i * w) * es(f), (char *)x + (size_t)(i * COLS + r * w) * es(f),
               (size_t)w * es(f));
    void *local = upload(f, NULL, ROWS * w);
    CHECK_OK(zoe_tp_scatter_to_forward(&f->tp, local, dev_x, ROWS, COLS));
    h = download(f, local, ROWS * w);
    check_exact(f, h, slice, ROWS * w, "scatter_to forward");
    free(h);
    CHECK_OK(zoe_memset_async(local, 0xff, (size_t)(ROWS * w) * es(f), f->stream));
    CHECK_OK(zoe_tp_gather_from_backward(&f->tp, local, dev_x, ROWS, COLS));
    h = download(f, local, ROWS * w);
    check_exact(f, h, slice, ROWS * w, "gather_from backward");
    free(h);

    /* gather_from forward / scatter_to backward: rank q's [ROWS, w] input is columns q*w.. */
    char *full = malloc((size_t)n * es(f));
    for (int q = 0; q < t; q++) {
        void *in = make_input(f, q, ROWS * w, 2);
        for (int64_t i = 0; i < ROWS; i++)
            memcpy(full + (size_t)(i * COLS + q * w) * es(f), (char *)in + (size_t)(i * w) * es(f),
                   (size_t)w * es(f));
        free(in);
    }
    void *mine = make_input(f, r, ROWS * w, 2), *dev_mine = upload(f, mine, ROWS * w);
    void *scratch = upload(f, NULL, n);
    CHECK_OK(zoe_memset_async(y, 0xff, (size_t)n * es(f), f->stream));
    CHECK_OK(zoe_tp_gather_from_forward(&f->tp, y, dev_mine, ROWS, COLS, scratch));
    h = download(f, y, n);
    check_exact(f, h, full, n, "gather_from forward");
    free(h);
    CHECK_OK(zoe_memset_async(dx, 0xff, (size_t)n * es(f), f->stream));
    CHECK_OK(zoe_tp_scatter_to_backward(&f->tp, dx, dev_mine, ROWS, COLS, scratch));
    h = download(f, dx, n);
    check_exact(f, h, full, n, "scatter_to backward");
    free(h);

    /* a width that does not split is refused, naming it */
    if (t > 1) {
        zoe_status st = zoe_tp_scatter_to_forward(&f->tp, local, dev_x, ROWS, t + 1);
        CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), "not divisible by tp"),
              "odd width: %s", zoe_last_error());
    }
    void *dbufs[] = {dx, dx_in, dev_x, y, local, dev_mine, scratch};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) zoe_device_free(f->dev, dbufs[i]);
    free(x), free(slice), free(full), free(mine);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    fixture f = {0};
    zoe_kernel_plan plan = {
        .max_rows = ROWS, .max_dim = COLS, .max_seq = 1, .max_heads = 1, .max_head_dim = 1};
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &f.dev));
    CHECK_OK(zoe_stream_create(f.dev, &f.stream));
    CHECK_OK(zoe_kernels_create(f.dev, f.stream, &plan, &f.kernels));
    CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &f.comm));
    const zoe_dtype dts[] = {ZOE_F32, ZOE_BF16};
    for (int d = 0; d < 2 && test_failures() == 0; d++) {
        CHECK_OK(zoe_tp_init(&f.tp, f.kernels, f.comm, dts[d], 1));
        run(&f);
    }
    zoe_comm_destroy(f.comm);
    zoe_kernels_destroy(f.kernels);
    zoe_stream_destroy(f.stream);
    zoe_device_destroy(f.dev);
    return test_finish("test_tp_mappings");
}
