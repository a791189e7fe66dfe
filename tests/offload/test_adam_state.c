/* The host Adam over compressed state (kernels/adam_state.h), every path this CPU runs:
 *  - each SIMD path equals the scalar path bit for bit, for every combination of master, m and v
 *    in {fp32, bf16}, gradient {fp32, bf16, fp16}, output {none, fp32, bf16, fp16}, AdamW and L2,
 *    over ragged lengths at misaligned starts, with NaN lanes;
 *  - all-fp32 state equals zoe_adam_host_to bit for bit (the compressed step changes only stores);
 *  - against float64: every stored bf16 value is one of the two bf16 neighbours of the float64
 *    step (computed from the same widened state), within fp32 rounding of the step's arithmetic
 *    (1e-5 relative of the update plus 3 ulps of the value, as test_adam_kernels states);
 *  - the stochastic rounding is unbiased: over 2^16 draws the mean of zoe_sr_bf16(x) is x within
 *    4 standard errors, and a bf16 master moved by updates of an eighth of its unit in the last
 *    place (which round-to-nearest would drop every time) follows the fp32 master over 2000
 *    steps within 4 standard deviations of the random walk;
 *  - the bits do not depend on how a range is split into calls, and a call across a 2^32 index
 *    boundary equals its two halves; the same (seed, step, index) gives the same bits;
 *  - the undo restores each state within the bound of kernels/adam_state.h, computed per element
 *    from the step's float64 values (check_undo says how). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/adam_state.h"
#include "adam_state_test.h"
#include "testing.h"
#include "zoe/dtype.h"

enum { N = 777 };

/* Random state in fp32 (already rounded to the dtypes it will be held in). */
typedef struct state32 {
    float w[N], m[N], v[N], g[N];
} state32;

static void fill(test_rng *rng, state32 *s, const zoe_adam_state_dtypes *dt) {
    for (int i = 0; i < N; i++) {
        s->w[i] = (float)(2 * test_rng_uniform(rng) - 1);
        s->m[i] = (float)(0.1 * test_rng_normal(rng));
        s->v[i] = (float)(0.01 * test_rng_uniform(rng) + 1e-6);
        s->g[i] = (float)test_rng_normal(rng);
    }
    float *arrays[] = {s->w, s->m, s->v};
    zoe_dtype dts[] = {dt->master, dt->exp_avg, dt->exp_avg_sq};
    for (int a = 0; a < 3; a++)
        if (dts[a] == ZOE_BF16)
            for (int i = 0; i < N; i++)
                arrays[a][i] = zoe_bf16_to_f32(zoe_f32_to_bf16(arrays[a][i]));
}

/* The arrays of one run in their dtypes. */
typedef struct held {
    unsigned char w[N * 4], m[N * 4], v[N * 4], g[N * 4], out[N * 4];
} held;

static void hold(const state32 *s, const zoe_adam_state_dtypes *dt, zoe_dtype gdt, held *h) {
    CHECK_OK(zoe_convert(h->w, dt->master, s->w, ZOE_F32, N));
    CHECK_OK(zoe_convert(h->m, dt->exp_avg, s->m, ZOE_F32, N));
    CHECK_OK(zoe_convert(h->v, dt->exp_avg_sq, s->v, ZOE_F32, N));
    CHECK_OK(zoe_convert(h->g, gdt, s->g, ZOE_F32, N));
    memset(h->out, 0xA5, sizeof h->out); /* poisoned */
}

static zoe_adam_state view(held *h) {
    return (zoe_adam_state){.master = h->w, .exp_avg = h->m, .exp_avg_sq = h->v};
}

static const zoe_dtype out_dtypes[] = {ZOE_F32, ZOE_BF16, ZOE_F16, ZOE_I32 /* none */};

/* Every path equals the scalar one, over pieces of ragged lengths at ragged starts. */
static void check_paths(const zoe_adam_state_dtypes *dt, zoe_dtype gdt, zoe_dtype odt, int dec) {
    test_rng rng;
    test_rng_seed(&rng, 100 + 7 * dt->master + 3 * dt->exp_avg + dt->exp_avg_sq + 11 * gdt);
    state32 s;
    fill(&rng, &s, dt);
    for (int i = 50; i < N; i += 101) s.w[i] = NAN; /* NaN lanes: quiet NaNs on every path */
    const zoe_adam_consts c = consts_of(dec, 7);
    const zoe_adam_rounding r = {.seed = 0x1234567890abcdefULL, .step = 7};
    const int has_out = odt != ZOE_I32;
    static held ref, got;
    hold(&s, dt, gdt, &ref);
    zoe_adam_state rv = view(&ref);
    CHECK_OK(zoe_adam_state_host_isa(ZOE_CPU_ISA_SCALAR, &c, &r, dt, &rv, 1000, ref.g, gdt,
                                     has_out ? ref.out : NULL, odt, N));
    for (int p = 1; p < NUM_ISAS; p++) {
        if (!zoe_cpu_isa_supported(isas[p])) continue;
        hold(&s, dt, gdt, &got);
        const size_t cuts[] = {0, 3, 20, 61, 400, N};
        for (int k = 0; k + 1 < 6; k++) {
            size_t a = cuts[k], n = cuts[k + 1] - a;
            size_t ms = zoe_adam_state_esize(dt->master), as = zoe_adam_state_esize(dt->exp_avg),
                   ss = zoe_adam_state_esize(dt->exp_avg_sq);
            zoe_adam_state part = {
                .master = got.w + a * ms, .exp_avg = got.m + a * as, .exp_avg_sq = got.v + a * ss};
            CHECK_OK(zoe_adam_state_host_isa(
                isas[p], &c, &r, dt, &part, 1000 + a, got.g + a * zoe_dtype_size(gdt), gdt,
                has_out ? got.out + a * zoe_dtype_size(odt) : NULL, odt, n));
        }
        size_t osz = has_out ? zoe_dtype_size(odt) : 0;
        CHECK(memcmp(ref.w, got.w, N * zoe_adam_state_esize(dt->master)) == 0 &&
                  memcmp(ref.m, got.m, N * zoe_adam_state_esize(dt->exp_avg)) == 0 &&
                  memcmp(ref.v, got.v, N * zoe_adam_state_esize(dt->exp_avg_sq)) == 0 &&
                  memcmp(ref.out, got.out, N * osz) == 0,
              "%s differs from scalar: master %s m %s v %s grad %s out %s %s",
              zoe_cpu_isa_name(isas[p]), zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
              zoe_dtype_name(dt->exp_avg_sq), zoe_dtype_name(gdt),
              has_out ? zoe_dtype_name(odt) : "none", dec ? "AdamW" : "L2");
    }
}

/* stored is one of the two bf16 values around x: within one bf16 unit in the last place of x,
 * plus tol for the fp32 arithmetic that computed what was rounded. */
static int is_bf16_neighbour(double x, float stored, double tol) {
    double ulp = ldexp(1.0, ilogb(x) - 7);
    return fabs((double)stored - x) <= ulp + tol;
}

static void check_reference(int dec) {
    test_rng rng;
    test_rng_seed(&rng, 5 + dec);
    const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_BF16, ZOE_BF16};
    state32 s;
    fill(&rng, &s, &dt);
    const zoe_adam_consts c = consts_of(dec, 3);
    const zoe_adam_rounding r = {.seed = 99, .step = 3};
    static held h;
    hold(&s, &dt, ZOE_F32, &h);
    zoe_adam_state st = view(&h);
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &st, 0, h.g, ZOE_F32, h.out, ZOE_F32, N));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double g = (double)s.g[i] * c.grad_scale, w = s.w[i];
        if (!dec) g += (double)c.l2 * w;
        double m = c.beta1 * (double)s.m[i] + (double)c.one_minus_beta1 * g;
        double v = c.beta2 * (double)s.v[i] + (double)c.one_minus_beta2 * g * g;
        double upd = (double)c.step_size * m / (sqrt(v) * c.inv_sqrt_bc2 + c.eps);
        double w1 = (dec ? w * c.decay : w) - upd;
        float sw = zoe_bf16_to_f32(((zoe_bf16 *)h.w)[i]),
              sm = zoe_bf16_to_f32(((zoe_bf16 *)h.m)[i]),
              sv = zoe_bf16_to_f32(((zoe_bf16 *)h.v)[i]);
        bad += !is_bf16_neighbour(w1, sw, 1e-5 * fabs(upd) + 3 * ldexp(fabs(w1), -24));
        bad += !is_bf16_neighbour(m, sm, 1e-6 * fabs(m));
        bad += !is_bf16_neighbour(v, sv, 1e-6 * fabs(v));
        bad += ((float *)h.out)[i] != sw; /* the output is the stored master */
    }
    CHECK(bad == 0, "%d values off their bf16 neighbours (%s)", bad, dec ? "AdamW" : "L2");
}

static void check_fp32_equals_fused(int dec) {
    test_rng rng;
    test_rng_seed(&rng, 21 + dec);
    const zoe_adam_state_dtypes dt = {ZOE_F32, ZOE_F32, ZOE_F32};
    state32 s, t;
    fill(&rng, &s, &dt);
    t = s;
    const zoe_adam_consts c = consts_of(dec, 4);
    const zoe_adam_rounding r = {.seed = 1, .step = 4};
    zoe_bf16 out_a[N], out_b[N];
    zoe_adam_state st = {.master = s.w, .exp_avg = s.m, .exp_avg_sq = s.v};
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &st, 5, s.g, ZOE_F32, out_a, ZOE_BF16, N));
    CHECK_OK(zoe_adam_host_to(&c, t.w, t.w, t.m, t.v, t.g, ZOE_F32, out_b, ZOE_BF16, N));
    CHECK(memcmp(s.w, t.w, sizeof s.w) == 0 && memcmp(s.m, t.m, sizeof s.m) == 0 &&
              memcmp(s.v, t.v, sizeof s.v) == 0 && memcmp(out_a, out_b, sizeof out_a) == 0,
          "fp32 state differs from zoe_adam_host_to (%s)", dec ? "AdamW" : "L2");
}

static void check_rounding_statistics(void) {
    /* x = 1 + 0.3 units of bf16's last place (2^-7 at 1): rounds up with probability 0.3. */
    const float x = 1.0f + 0.3f * 0x1p-7f;
    const int draws = 1 << 16;
    const zoe_adam_rounding r = {.seed = 77, .step = 1};
    uint32_t key = zoe_sr_key(&r, 0);
    double sum = 0;
    int up = 0;
    for (int i = 0; i < draws; i++) {
        float y = zoe_bf16_to_f32(zoe_sr_bf16(x, zoe_sr_random(key, (uint32_t)i) & 0xffff));
        sum += y;
        up += y > 1.0f;
    }
    double p = 0.3, se = sqrt(p * (1 - p) / draws);
    CHECK(fabs((double)up / draws - p) < 4 * se, "rounded up %d of %d, expected 0.3", up, draws);
    CHECK(fabs(sum / draws - x) < 4 * se * 0x1p-7, "mean %.9g, expected %.9g", sum / draws,
          (double)x);

    /* The master alone, moved by a constant small step each iteration: lr with unit Adam
     * direction. Build it from the kernel with m = v-consistent moments: grad g = 1 every step,
     * beta1 = beta2 = 0 so m = g, v = g^2 and the step is exactly lr * 1 / (1 + eps). */
    enum { ELEMS = 256, STEPS = 2000 };
    const float w0 = 0.5f, lr = 0x1p-11f; /* an eighth of w's bf16 unit at 0.5 (2^-8) */
    zoe_adam_hparams hp = {
        .lr = lr, .beta1 = 0, .beta2 = 0, .eps = 1e-8f, .decoupled = 1, .grad_scale = 1.0f};
    const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_F32, ZOE_F32};
    static zoe_bf16 w[ELEMS];
    static float m[ELEMS], v[ELEMS], g[ELEMS], w32[ELEMS];
    for (int i = 0; i < ELEMS; i++) w[i] = zoe_f32_to_bf16(w0), w32[i] = w0, g[i] = -1.0f;
    for (int s = 1; s <= STEPS; s++) {
        hp.step = s;
        zoe_adam_consts c;
        zoe_adam_consts_init(&c, &hp);
        c.step_size = lr; /* no bias correction: beta = 0 makes it 1 anyway */
        zoe_adam_rounding rs = {.seed = 5, .step = (uint64_t)s};
        zoe_adam_state st = {.master = w, .exp_avg = m, .exp_avg_sq = v};
        CHECK_OK(zoe_adam_state_host(&c, &rs, &dt, &st, 0, g, ZOE_F32, NULL, ZOE_F32, ELEMS));
        zoe_adam_state st32 = {.master = w32, .exp_avg = m, .exp_avg_sq = v};
        const zoe_adam_state_dtypes f32 = {ZOE_F32, ZOE_F32, ZOE_F32};
        CHECK_OK(zoe_adam_state_host(&c, &rs, &f32, &st32, 0, g, ZOE_F32, NULL, ZOE_F32, ELEMS));
    }
    double mean = 0, want = w32[0];
    for (int i = 0; i < ELEMS; i++) mean += zoe_bf16_to_f32(w[i]);
    mean /= ELEMS;
    /* Each step adds at most one bf16 unit (2^-8 for w in [0.5, 1) ... 2^-7 above 1) of
     * Bernoulli noise; the walk's sd after STEPS steps is below 2^-7 sqrt(STEPS / 4). */
    double sd = 0x1p-7 * sqrt(STEPS / 4.0) / sqrt(ELEMS);
    CHECK(want > w0 + 0.9, "the fp32 master moved to %g", want);
    CHECK(fabs(mean - want) < 4 * sd, "bf16 master mean %.6g, fp32 master %.6g (4 sd = %.3g)", mean,
          want, 4 * sd);
}

static void check_split_and_boundary(void) {
    test_rng rng;
    test_rng_seed(&rng, 31);
    const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_BF16, ZOE_BF16};
    state32 s;
    fill(&rng, &s, &dt);
    const zoe_adam_consts c = consts_of(1, 9);
    const zoe_adam_rounding r = {.seed = 3, .step = 9};
    static held a, b;
    const uint64_t base = ((uint64_t)1 << 32) - 100; /* the call crosses the high word */
    hold(&s, &dt, ZOE_F32, &a);
    hold(&s, &dt, ZOE_F32, &b);
    zoe_adam_state sa = view(&a);
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &sa, base, a.g, ZOE_F32, a.out, ZOE_BF16, N));
    zoe_adam_state b0 = view(&b);
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &b0, base, b.g, ZOE_F32, b.out, ZOE_BF16, 100));
    zoe_adam_state b1 = {.master = b.w + 200, .exp_avg = b.m + 200, .exp_avg_sq = b.v + 200};
    CHECK_OK(zoe_adam_state_host(&c, &r, &dt, &b1, base + 100, b.g + 400, ZOE_F32, b.out + 200,
                                 ZOE_BF16, N - 100));
    CHECK(memcmp(&a, &b, sizeof a) == 0, "a call across 2^32 differs from its halves");
    /* Another step number draws other bits: some stored value differs. */
    hold(&s, &dt, ZOE_F32, &b);
    zoe_adam_rounding r2 = {.seed = 3, .step = 10};
    zoe_adam_state sb = view(&b);
    CHECK_OK(zoe_adam_state_host(&c, &r2, &dt, &sb, base, b.g, ZOE_F32, b.out, ZOE_BF16, N));
    CHECK(memcmp(a.w, b.w, N * 2) != 0, "the rounding of step 10 equals step 9's");
}

/* One bf16 unit in the last place at x (0 for fp32 state: its rounding is in the slack). */
static double unit_of(zoe_dtype dt, double x) {
    return dt == ZOE_BF16 && x != 0 ? ldexp(1.0, ilogb(x) - 7) : 0.0;
}

/* The undo's bound per element (kernels/adam_state.h): solving back divides what the step's
 * rounding moved each state by (a bf16 unit of the value written, over beta1, beta2 or decay),
 * recomputes the step's shift from the rounded moments (a bf16 unit of m relative, and half of
 * v's) and, with L2, the gradient term from the restored weight (l2 times its error), and rounds
 * the result (half a unit of the start); fp32 arithmetic adds 1e-5 relative of the terms. */
static void check_undo(int dec) {
    test_rng rng;
    test_rng_seed(&rng, 41 + dec);
    const zoe_adam_state_dtypes dts[] = {{ZOE_BF16, ZOE_BF16, ZOE_BF16},
                                         {ZOE_F32, ZOE_BF16, ZOE_F32},
                                         {ZOE_BF16, ZOE_F32, ZOE_BF16}};
    for (int d = 0; d < 3; d++) {
        const zoe_adam_state_dtypes *dt = &dts[d];
        state32 s;
        fill(&rng, &s, dt);
        const zoe_adam_consts c = consts_of(dec, 6);
        const zoe_adam_rounding r = {.seed = 8, .step = 6};
        static held h;
        hold(&s, dt, ZOE_F32, &h);
        zoe_adam_state st = view(&h);
        CHECK_OK(zoe_adam_state_host(&c, &r, dt, &st, 0, h.g, ZOE_F32, NULL, ZOE_F32, N));
        CHECK_OK(zoe_adam_state_undo_host(&c, dt, &st, h.g, ZOE_F32, h.out, ZOE_F32, N));
        int bad = 0;
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double w0 = s.w[i], m0 = s.m[i], v0 = s.v[i];
            double g = (double)s.g[i] * c.grad_scale + (dec ? 0 : (double)c.l2 * w0);
            double m1 = c.beta1 * m0 + (double)c.one_minus_beta1 * g;
            double v1 = c.beta2 * v0 + (double)c.one_minus_beta2 * g * g;
            double upd = (double)c.step_size * fabs(m1) / (sqrt(v1) * c.inv_sqrt_bc2 + c.eps);
            double w1 = (dec ? w0 * c.decay : w0) - upd;
            double rel_m = unit_of(dt->exp_avg, m1) / fabs(m1 ? m1 : 1);
            double rel_v = unit_of(dt->exp_avg_sq, v1) / fabs(v1 ? v1 : 1);
            /* 1.1: the products of the terms (a rounded v under a rounded m ...) */
            double tol_w = 1.1 * (unit_of(dt->master, w1) / c.decay + upd * (rel_m + rel_v / 2) +
                                  unit_of(dt->master, w0) / 2 + 1e-5 * (upd + fabs(w0)));
            /* L2: the gradient term is recomputed from the restored weight (its error: tol_w) */
            double dg = dec ? 0 : (double)c.l2 * tol_w;
            double tol_m = unit_of(dt->exp_avg, m1) / c.beta1 + unit_of(dt->exp_avg, m0) / 2 +
                           1e-5 * (fabs(m0) + fabs(g)) + c.one_minus_beta1 / c.beta1 * dg;
            double tol_v = unit_of(dt->exp_avg_sq, v1) / c.beta2 + unit_of(dt->exp_avg_sq, v0) / 2 +
                           1e-5 * (fabs(v0) + g * g) +
                           c.one_minus_beta2 / c.beta2 * 2 * fabs(g) * dg;
            double ew = fabs(w0 - test_get(dt->master, h.w, i)) / tol_w;
            double em = fabs(m0 - test_get(dt->exp_avg, h.m, i)) / tol_m;
            double ev = fabs(v0 - test_get(dt->exp_avg_sq, h.v, i)) / tol_v;
            double e = fmax(ew, fmax(em, ev));
            worst = fmax(worst, e);
            bad += !(e <= 1.0);
        }
        CHECK(bad == 0,
              "undo: %d elements beyond their bound (worst %.2f of it; master %s m %s v %s, %s)",
              bad, worst, zoe_dtype_name(dt->master), zoe_dtype_name(dt->exp_avg),
              zoe_dtype_name(dt->exp_avg_sq), dec ? "AdamW" : "L2");
    }
}

static void check_errors(void) {
    const zoe_adam_state_dtypes bad = {ZOE_F16, ZOE_F32, ZOE_F32};
    float x[4] = {1, 2, 3, 4};
    zoe_adam_state st = {.master = x, .exp_avg = x, .exp_avg_sq = x};
    zoe_adam_consts c = consts_of(1, 1);
    zoe_adam_rounding r = {0};
    CHECK(zoe_adam_state_host(&c, &r, &bad, &st, 0, x, ZOE_F32, NULL, ZOE_F32, 4) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "fp16 master accepted");
    const zoe_adam_state_dtypes ok = {ZOE_F32, ZOE_F32, ZOE_F32};
    CHECK(zoe_adam_state_host(&c, &r, &ok, &st, 0, x, ZOE_I32, NULL, ZOE_F32, 4) ==
              ZOE_ERR_INVALID_ARGUMENT,
          "int32 gradient accepted");
    for (int p = 0; p < NUM_ISAS; p++)
        if (!zoe_cpu_isa_supported(isas[p]))
            CHECK(zoe_adam_state_host_isa(isas[p], &c, &r, &ok, &st, 0, x, ZOE_F32, NULL, ZOE_F32,
                                          4) == ZOE_ERR_UNSUPPORTED,
                  "%s runs on a CPU without it", zoe_cpu_isa_name(isas[p]));
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    for (int p = 1; p < NUM_ISAS; p++)
        if (!zoe_cpu_isa_supported(isas[p]))
            printf("test_adam_state: skipped the %s path (not on this CPU)\n",
                   zoe_cpu_isa_name(isas[p]));
    const zoe_dtype sd[] = {ZOE_F32, ZOE_BF16}, gd[] = {ZOE_F32, ZOE_BF16, ZOE_F16};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int q = 0; q < 2; q++) {
                zoe_adam_state_dtypes dt = {sd[a], sd[b], sd[q]};
                for (int g = 0; g < 3; g++)
                    for (int o = 0; o < 4; o++)
                        for (int dec = 0; dec < 2; dec++)
                            check_paths(&dt, gd[g], out_dtypes[o], dec);
            }
    for (int dec = 0; dec < 2; dec++) {
        check_fp32_equals_fused(dec);
        check_reference(dec);
        check_undo(dec);
    }
    check_rounding_statistics();
    check_split_and_boundary();
    check_errors();
    return test_finish("test_adam_state");
}
