/* zoe_adam_step (zoe/adam.h), the public step over a caller's arrays, against the internal kernel
 * it wraps (zoe_adam_host_to on the whole range, one thread): bit-identical at 1 and 3 threads
 * over a length that is not a whole number of tiles (the tiling changes who computes an element,
 * never how), with every parameter dtype, in the documented in-place form (the new weights over
 * their gradient), and the arguments it refuses, each with a message. torch.optim.AdamW checks
 * the numbers themselves (tests/python/test_host_adam.py). */
#include <string.h>
#include "kernels/adam.h"
#include "testing.h"
#include "zoe/adam.h"

enum { N = 2 * 16384 + 777 };

static float w0[N], m0[N], v0[N], g0[N];

static void fill(void) {
    test_rng rng;
    test_rng_seed(&rng, 7);
    test_fill_uniform(&rng, w0, N, -1, 1);
    test_fill_uniform(&rng, m0, N, -0.01f, 0.01f);
    test_fill_uniform(&rng, v0, N, 0, 1e-4f);
    test_fill_uniform(&rng, g0, N, -0.1f, 0.1f);
}

static const zoe_adam_config config = {ZOE_STRUCT_VERSION(zoe_adam_config),
                                       .lr = 1e-2f,
                                       .beta1 = 0.9f,
                                       .beta2 = 0.95f,
                                       .eps = 1e-8f,
                                       .weight_decay = 0.1f,
                                       .decoupled = 1,
                                       .grad_scale = 0.5f,
                                       .step = 3};

/* The reference: the kernel itself over the whole range. */
static void reference(float *w, float *m, float *v, void *out, zoe_dtype out_dtype) {
    zoe_adam_consts c;
    zoe_adam_consts_init(&c, &(zoe_adam_hparams){.lr = config.lr,
                                                 .beta1 = config.beta1,
                                                 .beta2 = config.beta2,
                                                 .eps = config.eps,
                                                 .weight_decay = config.weight_decay,
                                                 .decoupled = config.decoupled,
                                                 .grad_scale = config.grad_scale,
                                                 .step = config.step});
    memcpy(w, w0, sizeof w0), memcpy(m, m0, sizeof m0), memcpy(v, v0, sizeof v0);
    CHECK_OK(zoe_adam_host_to(&c, w, w, m, v, g0, ZOE_F32, out, out_dtype, N));
}

static float w[N], m[N], v[N], rw[N], rm[N], rv[N];
static uint16_t out16[N], ref16[N];

static void start(void) {
    memcpy(w, w0, sizeof w0), memcpy(m, m0, sizeof m0), memcpy(v, v0, sizeof v0);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    fill();
    for (int threads = 1; threads <= 3; threads += 2) {
        zoe_adam_config cfg = config;
        cfg.threads = threads;
        reference(rw, rm, rv, NULL, ZOE_F32);
        start();
        CHECK_OK(zoe_adam_step(&cfg, w, m, v, g0, ZOE_F32, NULL, ZOE_F32, N));
        CHECK(memcmp(w, rw, sizeof w) == 0 && memcmp(m, rm, sizeof m) == 0 &&
                  memcmp(v, rv, sizeof v) == 0,
              "fp32 in place, %d threads: bits differ from the kernel", threads);
        for (zoe_dtype dt = ZOE_BF16; dt <= ZOE_F16; dt++) {
            reference(rw, rm, rv, ref16, dt);
            start();
            CHECK_OK(zoe_adam_step(&cfg, w, m, v, g0, ZOE_F32, out16, dt, N));
            CHECK(memcmp(w, rw, sizeof w) == 0 && memcmp(out16, ref16, sizeof out16) == 0,
                  "%s parameter, %d threads: bits differ from the kernel", zoe_dtype_name(dt),
                  threads);
        }
        /* the in-place form: the new fp32 weights written over the gradient's buffer */
        static float g[N], out[N];
        reference(rw, rm, rv, out, ZOE_F32);
        start();
        memcpy(g, g0, sizeof g);
        CHECK_OK(zoe_adam_step(&cfg, w, m, v, g, ZOE_F32, g, ZOE_F32, N));
        CHECK(memcmp(g, out, sizeof g) == 0, "param over grad, %d threads: bits differ", threads);
    }

    /* refused, each with its message */
    zoe_adam_config bad = config;
    bad.step = 0;
    CHECK(zoe_adam_step(&bad, w, m, v, g0, ZOE_F32, NULL, ZOE_F32, N) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "step=0"),
          "step 0: %s", zoe_last_error());
    bad = config, bad.beta2 = 1.0f;
    CHECK(zoe_adam_step(&bad, w, m, v, g0, ZOE_F32, NULL, ZOE_F32, N) == ZOE_ERR_INVALID_ARGUMENT,
          "beta2 1 accepted");
    bad = config, bad.struct_size = sizeof bad - 4;
    CHECK(zoe_adam_step(&bad, w, m, v, g0, ZOE_F32, NULL, ZOE_F32, N) == ZOE_ERR_INVALID_ARGUMENT,
          "a struct of another size accepted");
    CHECK(zoe_adam_step(&config, w, m, m + 1, g0, ZOE_F32, NULL, ZOE_F32, N - 1) ==
                  ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "exp_avg and exp_avg_sq overlap"),
          "overlapping moments: %s", zoe_last_error());
    CHECK(zoe_adam_step(&config, w, m, v, g0, ZOE_F32, g0, ZOE_BF16, N) == ZOE_ERR_INVALID_ARGUMENT,
          "param over grad in another dtype accepted");
    CHECK(zoe_adam_step(&config, w, m, v, g0, ZOE_I32, NULL, ZOE_F32, N) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "an int32 gradient accepted");
    CHECK(zoe_adam_step(&config, w, m, v, NULL, ZOE_F32, NULL, ZOE_F32, N) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "a NULL gradient accepted");
    CHECK_OK(zoe_adam_step(&config, NULL, NULL, NULL, NULL, ZOE_F32, NULL, ZOE_F32, 0));
    return test_finish("test_adam_step");
}
