/* Each collective in each dtype against the serial result on random data: sizes 1, odd, and a
 * few MB. Every rank generates every rank's input from the same seed, so the serial reference
 * (a float64 sum, or the max) is computed locally. Tolerances:
 *  - fp32 sums: the MPI reduction order differs from ours; |error| <= world * eps32 * sum|x|.
 *  - bf16/fp16: staged through fp32 and rounded once, so the result is the 16-bit rounding of
 *    the fp32 sum: within one 16-bit ulp (2^-8 / 2^-11 relative) plus the fp32 bound.
 *  - max, int32, gather and broadcast move or pick values: exact.
 * The same checks run once more with MPI calls cut into small chunks (the path of counts above
 * INT_MAX), through the test knob zoe_comm_set_max_count. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "runtime/comm_impl.h"
#include "testing.h"

static const zoe_dtype dtypes[] = {ZOE_F32, ZOE_BF16, ZOE_F16, ZOE_I32};

static double rel_eps(zoe_dtype dt) {
    return dt == ZOE_BF16 ? 0x1p-8 : dt == ZOE_F16 ? 0x1p-11 : dt == ZOE_F32 ? FLT_EPSILON : 0;
}

/* reference[i] = op over ranks of input r element offset+i; also sum of |x| for the bound. */
static void reference(zoe_dtype dt, zoe_reduce_op op, size_t total, size_t offset, size_t n,
                      uint64_t seed, double *ref, double *mag) {
    int world = test_world_size();
    size_t esz = zoe_dtype_size(dt);
    char *in = malloc(total * esz);
    for (size_t i = 0; i < n; i++) ref[i] = op == ZOE_REDUCE_MAX ? -INFINITY : 0, mag[i] = 0;
    for (int r = 0; r < world; r++) {
        test_fill_rank_input(dt, r, total, seed, in);
        for (size_t i = 0; i < n; i++) {
            double v = test_get(dt, in, offset + i);
            ref[i] = op == ZOE_REDUCE_MAX ? fmax(ref[i], v) : ref[i] + v;
            mag[i] += fabs(v);
        }
    }
    free(in);
}

static void compare(zoe_dtype dt, zoe_reduce_op op, const void *got, const double *ref,
                    const double *mag, size_t n, const char *what) {
    int world = test_world_size();
    double *g = malloc(n * sizeof(double)), *zero = calloc(n, sizeof(double));
    double *err = malloc(n * sizeof(double));
    /* Per-element bound: |got - ref| <= ulp16(ref) + world*eps32*sum|x|, compared as err<=tol. */
    for (size_t i = 0; i < n; i++) {
        g[i] = test_get(dt, got, i);
        double tol = op == ZOE_REDUCE_MAX || dt == ZOE_I32
                         ? 0
                         : rel_eps(dt) * fabs(ref[i]) + world * FLT_EPSILON * mag[i];
        err[i] = fabs(g[i] - ref[i]) <= tol ? 0 : fabs(g[i] - ref[i]);
    }
    char label[128];
    snprintf(label, sizeof label, "%s %s %s n=%zu", what, zoe_dtype_name(dt),
             op == ZOE_REDUCE_MAX ? "max" : "sum", n);
    CHECK_CLOSE(err, zero, n, 0, 0, label);
    free(g), free(zero), free(err);
}

static void run_size(zoe_comm *c, zoe_stream *s, size_t n, uint64_t seed) {
    int world = test_world_size(), rank = test_rank();
    double *ref = malloc(n * world * sizeof(double)), *mag = malloc(n * world * sizeof(double));
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        zoe_dtype dt = dtypes[d];
        size_t esz = zoe_dtype_size(dt);
        char *in = malloc(n * world * esz), *out = malloc(n * world * esz);
        for (int o = 0; o < 2; o++) {
            zoe_reduce_op op = o ? ZOE_REDUCE_MAX : ZOE_REDUCE_SUM;
            /* all-reduce, out of place and in place */
            test_fill_rank_input(dt, rank, n, seed, in);
            memset(out, 0xff, n * esz);
            CHECK_OK(zoe_comm_all_reduce(c, in, out, n, dt, op, s));
            reference(dt, op, n, 0, n, seed, ref, mag);
            compare(dt, op, out, ref, mag, n, "all_reduce");
            CHECK_OK(zoe_comm_all_reduce(c, in, in, n, dt, op, s));
            compare(dt, op, in, ref, mag, n, "all_reduce in-place");
            /* reduce-scatter: block r of the n*world input */
            test_fill_rank_input(dt, rank, n * world, seed + 1, in);
            memset(out, 0xff, n * esz);
            CHECK_OK(zoe_comm_reduce_scatter(c, in, out, n, dt, op, s));
            reference(dt, op, n * world, n * (size_t)rank, n, seed + 1, ref, mag);
            compare(dt, op, out, ref, mag, n, "reduce_scatter");
            CHECK_OK(zoe_comm_reduce_scatter(c, in, in + n * rank * esz, n, dt, op, s));
            compare(dt, op, in + n * rank * esz, ref, mag, n, "reduce_scatter in-place");
        }
        /* all-gather: exact; block r equals rank r's input */
        test_fill_rank_input(dt, rank, n, seed + 2, in);
        memset(out, 0xff, n * world * esz);
        CHECK_OK(zoe_comm_all_gather(c, in, out, n, dt, s));
        char *want = malloc(n * esz);
        int bad = 0;
        for (int r = 0; r < world; r++) {
            test_fill_rank_input(dt, r, n, seed + 2, want);
            bad += memcmp(out + (size_t)r * n * esz, want, n * esz) != 0;
        }
        CHECK(bad == 0, "all_gather %s n=%zu: %d blocks differ", zoe_dtype_name(dt), n, bad);
        memset(out, 0xff, n * world * esz); /* poison every block but our own */
        memcpy(out + (size_t)rank * n * esz, in, n * esz);
        CHECK_OK(zoe_comm_all_gather(c, out + (size_t)rank * n * esz, out, n, dt, s));
        bad = 0;
        for (int r = 0; r < world; r++) {
            test_fill_rank_input(dt, r, n, seed + 2, want);
            bad += memcmp(out + (size_t)r * n * esz, want, n * esz) != 0;
        }
        CHECK(bad == 0, "all_gather in-place %s n=%zu: %d blocks differ", zoe_dtype_name(dt), n,
              bad);
        /* broadcast from the last rank */
        test_fill_rank_input(dt, rank, n, seed + 3, in);
        CHECK_OK(zoe_comm_broadcast(c, in, n, dt, world - 1, s));
        test_fill_rank_input(dt, world - 1, n, seed + 3, want);
        CHECK(memcmp(in, want, n * esz) == 0, "broadcast %s n=%zu", zoe_dtype_name(dt), n);
        free(want), free(in), free(out);
    }
    free(ref), free(mag);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    zoe_comm *c = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &s));
    CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &c));
    CHECK(zoe_comm_size(c) == test_world_size() && zoe_comm_rank(c) == test_rank(),
          "comm size/rank");
    size_t sizes[] = {1, 7, 1001, (size_t)3 << 18}; /* the last: 3 MB of fp32 per rank */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) run_size(c, s, sizes[i], 17 + i);

    /* Counts above MPI's int limit run in chunks. The same checks on a communicator whose limit
     * is lowered to 5 x size + 1 elements per call: all-reduces in chunks of 5 x size + 1,
     * reduce-scatters and all-gathers in chunks of 5 per block, broadcasts likewise; sizes below,
     * at and well above one chunk, none a multiple of it. */
    zoe_comm *chunked = NULL;
    CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &chunked));
    CHECK(zoe_comm_set_max_count(chunked, (size_t)test_world_size() - 1) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "a limit below the group size is refused");
    CHECK_OK(zoe_comm_set_max_count(chunked, 5 * (size_t)test_world_size() + 1));
    size_t chunked_sizes[] = {3, 5, 7, 1001};
    for (size_t i = 0; i < sizeof chunked_sizes / sizeof chunked_sizes[0]; i++)
        run_size(chunked, s, chunked_sizes[i], 41 + i);
    zoe_comm_destroy(chunked);

    /* Byte counter: an all-reduce of 10 fp32 adds 40 bytes. */
    zoe_comm_reset_bytes(c);
    float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK_OK(zoe_comm_all_reduce(c, x, x, 10, ZOE_F32, ZOE_REDUCE_SUM, s));
    CHECK(zoe_comm_bytes(c) == 40, "bytes counted %llu", (unsigned long long)zoe_comm_bytes(c));
    CHECK_OK(zoe_comm_barrier(c, s));

    /* Bad input: unknown dtype, unknown op, a "negative" count, a bad root. */
    CHECK(zoe_comm_all_reduce(c, x, x, 10, (zoe_dtype)9, ZOE_REDUCE_SUM, s) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "unknown dtype");
    CHECK(strstr(zoe_last_error(), "unknown dtype 9") != NULL, "message: %s", zoe_last_error());
    /* int8 is a dtype (the Adam moments' codes) that no collective carries: refused by name on
     * every collective, never moved as fp32 words (4 bytes per int8 element). */
    int8_t codes[10] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10};
    zoe_status i8[4] = {
        zoe_comm_all_reduce(c, codes, codes, 10, ZOE_I8, ZOE_REDUCE_SUM, s),
        zoe_comm_reduce_scatter(c, codes, codes, 1, ZOE_I8, ZOE_REDUCE_SUM, s),
        zoe_comm_all_gather(c, codes, codes, 1, ZOE_I8, s),
        zoe_comm_broadcast(c, codes, 10, ZOE_I8, 0, s),
    };
    for (int k = 0; k < 4; k++) CHECK(i8[k] == ZOE_ERR_INVALID_ARGUMENT, "int8 collective %d", k);
    CHECK(strstr(zoe_last_error(), "dtype int8 is not one the communicators carry") != NULL,
          "message: %s", zoe_last_error());
    CHECK(zoe_comm_all_reduce(c, x, x, 10, ZOE_F32, (zoe_reduce_op)7, s) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "unknown op");
    CHECK(zoe_comm_all_reduce(c, x, x, (size_t)-5, ZOE_F32, ZOE_REDUCE_SUM, s) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "negative count");
    CHECK(zoe_comm_broadcast(c, x, 10, ZOE_F32, test_world_size(), s) == ZOE_ERR_INVALID_ARGUMENT,
          "bad root");
    zoe_comm *bad = (zoe_comm *)0x1;
    CHECK(zoe_comm_create_nccl(MPI_COMM_WORLD, dev, &bad) != ZOE_OK && bad == NULL,
          "NCCL needs a CUDA device");

    zoe_comm_destroy(c);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    return test_finish("test_collectives");
}
