/* The bound of include/zoe/comm.h on 16-bit sums, at DP = 16. NCCL adds bf16/fp16 data in fp32
 * and rounds the partial sum to 16 bits after every addition; which pairs it adds first
 * depends on the algorithm (ring, tree) and on the chunk, so this test draws the order at
 * random: for 16 random gradient-like values per element it adds random pairs of partial sums,
 * rounding each sum, and checks
 *     |sum - exact| <= gamma_{d-1} sum|x|,  gamma_k = k u / (1 - k u)
 * (the first-order (d - 1) u sum|x| of comm.h, made rigorous), for u = 2^-8 (bf16) and 2^-11
 * (fp16). The MPI path (zoe's: an fp32 sum rounded once) is checked against u |exact| plus the
 * fp32 rounding, d eps32 sum|x|, through the real communicator at the ranks ctest runs. Also
 * printed: the worst observed error in units of u sum|x|, to show how much of the bound real
 * orders use. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "testing.h"

enum { D = 16, ELEMENTS = 20000 };

static float round16(zoe_dtype dt, float x) {
    return dt == ZOE_BF16 ? zoe_bf16_to_f32(zoe_f32_to_bf16(x)) : zoe_f16_to_f32(zoe_f32_to_f16(x));
}

/* A sum of the d values in a random pairing order, rounded to dt after every addition. */
static double rounded_sum(zoe_dtype dt, const float *x, int d, test_rng *rng) {
    float part[D];
    int live = d;
    for (int i = 0; i < d; i++) part[i] = x[i];
    while (live > 1) {
        int a = (int)test_rng_int(rng, 0, live - 1), b = (int)test_rng_int(rng, 0, live - 2);
        if (b >= a) b++;
        part[a] = round16(dt, part[a] + part[b]);
        part[b] = part[--live];
        if (a == live) a = b; /* the survivor moved */
    }
    return part[0];
}

static void check_dtype(zoe_dtype dt) {
    const double u = dt == ZOE_BF16 ? 0x1p-8 : 0x1p-11;
    const double gamma = (D - 1) * u / (1 - (D - 1) * u);
    test_rng rng;
    test_rng_seed(&rng, dt == ZOE_BF16 ? 11 : 12);
    double worst = 0;
    int bad = 0;
    for (int e = 0; e < ELEMENTS; e++) {
        float x[D];
        double exact = 0, mag = 0;
        /* gradients: mixed signs, a spread of magnitudes, exactly representable in dt */
        for (int r = 0; r < D; r++) {
            double v = test_rng_normal(&rng) * exp(2 * test_rng_normal(&rng));
            x[r] = round16(dt, (float)(v * (dt == ZOE_F16 ? 1e-2 : 1.0)));
            exact += x[r], mag += fabs(x[r]);
        }
        double err = fabs(rounded_sum(dt, x, D, &rng) - exact);
        bad += !(err <= gamma * mag);
        if (mag > 0 && err / (u * mag) > worst) worst = err / (u * mag);
    }
    CHECK(bad == 0, "%s: %d of %d sums outside gamma_%d sum|x|", zoe_dtype_name(dt), bad, ELEMENTS,
          D - 1);
    if (test_rank() == 0)
        printf("%s at d=%d: worst |error| = %.2f u sum|x| (bound %d u sum|x|)\n",
               zoe_dtype_name(dt), D, worst, D - 1);
}

/* zoe's MPI path rounds once: within u |exact| + d eps32 sum|x| of the exact sum. */
static void check_mpi(zoe_dtype dt) {
    const int world = test_world_size(), rank = test_rank();
    const double u = dt == ZOE_BF16 ? 0x1p-8 : 0x1p-11;
    zoe_comm *c = NULL;
    if (!CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &c))) return;
    uint16_t *buf = malloc(ELEMENTS * sizeof(uint16_t));
    double *exact = calloc(ELEMENTS, sizeof(double)), *mag = calloc(ELEMENTS, sizeof(double));
    for (int r = 0; r < world; r++) {
        test_rng rng;
        test_rng_seed(&rng, 100 + (uint64_t)r);
        for (int e = 0; e < ELEMENTS; e++) {
            float v = round16(dt, (float)(test_rng_normal(&rng) * 0.01));
            exact[e] += v, mag[e] += fabs(v);
            if (r == rank) buf[e] = dt == ZOE_BF16 ? zoe_f32_to_bf16(v) : zoe_f32_to_f16(v);
        }
    }
    CHECK_OK(zoe_comm_all_reduce(c, buf, buf, ELEMENTS, dt, ZOE_REDUCE_SUM, NULL));
    int bad = 0;
    for (int e = 0; e < ELEMENTS; e++) {
        double got = dt == ZOE_BF16 ? zoe_bf16_to_f32(buf[e]) : zoe_f16_to_f32(buf[e]);
        bad += !(fabs(got - exact[e]) <= u * fabs(exact[e]) + world * FLT_EPSILON * mag[e]);
    }
    CHECK(bad == 0, "MPI %s sum: %d elements beyond one rounding", zoe_dtype_name(dt), bad);
    free(buf), free(exact), free(mag);
    zoe_comm_destroy(c);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    check_dtype(ZOE_BF16);
    check_dtype(ZOE_F16);
    check_mpi(ZOE_BF16);
    check_mpi(ZOE_F16);
    return test_finish("test_comm_bounds");
}
