/* zoe_adam_step (zoe/adam.h), the public step over a caller's arrays, against the internal kernel
 * it wraps (zoe_adam_host_to on the whole range, one thread): bit-identical at 1 and 3 threads
 * over a length that is not a whole number of tiles (the tiling changes who computes an element,
 * never how), with every parameter dtype, in the documented in-place form (the new weights over
 * their gradient), and the arguments it refuses, each with a message. zoe_adam_step_state the
 * same way against zoe_adam_state_host on the whole range, for a bf16 master that is the bf16
 * weights with bf16 or int8 moments (the int8 scales of each tile found at its first block), and
 * with every dtype fp32 against zoe_adam_step. torch.optim.AdamW checks the numbers themselves
 * (tests/python/test_host_adam.py). */
#include <string.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
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

/* Compressed state: the public step (tiles over 3 threads) against the kernel on the whole range
 * in one call, bit for bit; the master is the bf16 weights (no param), the gradient bf16. */
static void compressed_state(void) {
    enum { BLOCKS = (N + ZOE_ADAM_INT8_BLOCK - 1) / ZOE_ADAM_INT8_BLOCK };
    static uint16_t master[N], rmaster[N], g16[N], m16[N], v16[N], rm16[N], rv16[N];
    static int8_t m8[N], rm8[N];
    static uint8_t v8[N], rv8[N];
    static float ms[BLOCKS], vs[BLOCKS], rms[BLOCKS], rvs[BLOCKS];
    for (size_t i = 0; i < N; i++)
        master[i] = zoe_f32_to_bf16(w0[i]), g16[i] = zoe_f32_to_bf16(g0[i]);
    const zoe_dtype moments[] = {ZOE_BF16, ZOE_I8};
    for (int k = 0; k < 2; k++) {
        const zoe_dtype dt = moments[k];
        zoe_adam_config cfg = config;
        cfg.threads = 3, cfg.seed = 99, cfg.master_dtype = ZOE_BF16;
        cfg.exp_avg_dtype = cfg.exp_avg_sq_dtype = dt;
        /* the state after one step from zero moments, then the step compared */
        void *m = dt == ZOE_I8 ? (void *)m8 : m16, *v = dt == ZOE_I8 ? (void *)v8 : v16;
        memset(m8, 0, sizeof m8), memset(v8, 0, sizeof v8), memset(m16, 0, sizeof m16);
        memset(v16, 0, sizeof v16), memset(ms, 0, sizeof ms), memset(vs, 0, sizeof vs);
        zoe_adam_state_arrays st = {.master = master,
                                    .exp_avg = m,
                                    .exp_avg_sq = v,
                                    .exp_avg_scale = dt == ZOE_I8 ? ms : NULL,
                                    .exp_avg_sq_scale = dt == ZOE_I8 ? vs : NULL};
        cfg.step = 1;
        CHECK_OK(zoe_adam_step_state(&cfg, &st, g16, ZOE_BF16, NULL, ZOE_BF16, N));
        memcpy(rmaster, master, sizeof master), memcpy(rm16, m16, sizeof m16);
        memcpy(rv16, v16, sizeof v16), memcpy(rm8, m8, sizeof m8), memcpy(rv8, v8, sizeof v8);
        memcpy(rms, ms, sizeof ms), memcpy(rvs, vs, sizeof vs);
        cfg.step = 2;
        CHECK_OK(zoe_adam_step_state(&cfg, &st, g16, ZOE_BF16, NULL, ZOE_BF16, N));
        zoe_adam_consts c;
        zoe_adam_consts_init(&c, &(zoe_adam_hparams){.lr = cfg.lr,
                                                     .beta1 = cfg.beta1,
                                                     .beta2 = cfg.beta2,
                                                     .eps = cfg.eps,
                                                     .weight_decay = cfg.weight_decay,
                                                     .decoupled = cfg.decoupled,
                                                     .grad_scale = cfg.grad_scale,
                                                     .step = 2});
        const zoe_adam_state ref = {.master = rmaster,
                                    .exp_avg = dt == ZOE_I8 ? (void *)rm8 : rm16,
                                    .exp_avg_sq = dt == ZOE_I8 ? (void *)rv8 : rv16,
                                    .exp_avg_scale = dt == ZOE_I8 ? rms : NULL,
                                    .exp_avg_sq_scale = dt == ZOE_I8 ? rvs : NULL};
        CHECK_OK(zoe_adam_state_host(
            &c, &(zoe_adam_rounding){.seed = 99, .step = 2},
            &(zoe_adam_state_dtypes){.master = ZOE_BF16, .exp_avg = dt, .exp_avg_sq = dt}, &ref, 0,
            g16, ZOE_BF16, NULL, ZOE_BF16, N));
        size_t esize = zoe_adam_state_esize(dt);
        CHECK(
            memcmp(master, rmaster, sizeof master) == 0 && memcmp(m, ref.exp_avg, N * esize) == 0 &&
                memcmp(v, ref.exp_avg_sq, N * esize) == 0 &&
                (dt != ZOE_I8 ||
                 (memcmp(ms, rms, sizeof ms) == 0 && memcmp(vs, rvs, sizeof vs) == 0)),
            "bf16 master, %s moments, 3 threads: bits differ from the kernel", zoe_dtype_name(dt));
        if (dt == ZOE_I8) { /* int8 without its scales */
            st.exp_avg_scale = NULL;
            CHECK(zoe_adam_step_state(&cfg, &st, g16, ZOE_BF16, NULL, ZOE_BF16, N) ==
                          ZOE_ERR_INVALID_ARGUMENT &&
                      strstr(zoe_last_error(), "without its scales"),
                  "int8 moments without scales: %s", zoe_last_error());
        }
    }
    /* every dtype fp32: zoe_adam_step's bits; a bf16 master refused by zoe_adam_step */
    zoe_adam_config cfg = config;
    reference(rw, rm, rv, NULL, ZOE_F32);
    start();
    CHECK_OK(zoe_adam_step_state(
        &cfg, &(zoe_adam_state_arrays){.master = w, .exp_avg = m, .exp_avg_sq = v}, g0, ZOE_F32,
        NULL, ZOE_F32, N));
    CHECK(memcmp(w, rw, sizeof w) == 0 && memcmp(m, rm, sizeof m) == 0, "fp32 state differs");
    cfg.master_dtype = ZOE_BF16;
    CHECK(zoe_adam_step(&cfg, w, m, v, g0, ZOE_F32, NULL, ZOE_F32, N) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "zoe_adam_step_state takes"),
          "zoe_adam_step with a bf16 master: %s", zoe_last_error());
    cfg.master_dtype = ZOE_I8;
    CHECK(zoe_adam_step_state(&cfg,
                              &(zoe_adam_state_arrays){.master = w, .exp_avg = m, .exp_avg_sq = v},
                              g0, ZOE_F32, NULL, ZOE_F32, N) == ZOE_ERR_INVALID_ARGUMENT,
          "an int8 master accepted");
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

    compressed_state();

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
