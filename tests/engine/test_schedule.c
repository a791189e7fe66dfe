/* Learning-rate schedules against a float64 reference written from the formulas Megatron-LM
 * documents (warm-up, then constant, linear, cosine, inverse-square-root or WSD with each of
 * its decay shapes), over random run lengths, warm-ups, decay horizons and WSD fractions, at
 * every step; and the schedule checks (warm-up longer than the run, WSD decay overlapping the
 * warm-up), the default warm-up of short runs, and the flags that set them. Tolerance: the schedule
 * computes in double and returns float, so 1 float ulp (6e-8 relative) of a value of order lr; 2e-7
 * allowed. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "testing.h"
#include "zoe/train.h"

static double reference(const zoe_train_config *c, int s) {
    double lr = c->lr, lo = c->min_lr;
    double W = c->warmup, D = c->lr_decay_iters ? c->lr_decay_iters : c->steps, n = s + 1.0;
    if (s < W) return lr * n / W;
    if (c->lr_decay_style == ZOE_LR_CONSTANT) return lr;
    if (s >= D) return lo;
    if (c->lr_decay_style == ZOE_LR_INVERSE_SQRT) {
        double v = lr * sqrt(W < 1 ? 1 : W) / sqrt(n);
        return v > lo ? v : lo;
    }
    if (c->lr_decay_style == ZOE_LR_WSD) {
        double a = D - floor((double)c->lr_wsd_decay_fraction * D + 0.5);
        if (s < a) return lr;
        double r = (s - a) / (D - a), k;
        if (c->lr_wsd_decay_style == ZOE_WSD_LINEAR)
            k = 1 - r;
        else if (c->lr_wsd_decay_style == ZOE_WSD_COSINE)
            k = (1 + cos(M_PI * r)) / 2;
        else if (c->lr_wsd_decay_style == ZOE_WSD_MINUS_SQRT)
            k = 1 - sqrt(r);
        else
            k = 2 * pow(2, -r) - 1;
        return lo + (lr - lo) * k;
    }
    double p = (s - W) / (D - W);
    double k = c->lr_decay_style == ZOE_LR_LINEAR ? 1 - p : (1 + cos(M_PI * p)) / 2;
    return lo + (lr - lo) * k;
}

static void expect_invalid(const zoe_train_config *c, const char *want) {
    zoe_status st = zoe_train_schedule_validate(c);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), want),
          "schedule error '%s' (got status %d, '%s')", want, (int)st, zoe_last_error());
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 4242);
    int checked = 0;
    for (int trial = 0; trial < 200; trial++) {
        zoe_train_config c;
        zoe_train_config_defaults(&c);
        c.lr_decay_style = (zoe_lr_decay_style)(trial % 5);
        c.lr_wsd_decay_style = (zoe_lr_wsd_style)((trial / 5) % 4);
        c.steps = 20 + (int)(test_rng_uniform(&rng) * 500);
        c.warmup = (int)(test_rng_uniform(&rng) * 0.3 * c.steps);
        c.lr_decay_iters =
            trial % 3 == 0 ? 0 : c.warmup + 10 + (int)(test_rng_uniform(&rng) * c.steps);
        c.lr_wsd_decay_fraction = 0.05f + 0.3f * (float)test_rng_uniform(&rng);
        c.lr = 1e-4f + 1e-2f * (float)test_rng_uniform(&rng);
        c.min_lr = c.lr * 0.1f * (float)test_rng_uniform(&rng);
        if (zoe_train_schedule_validate(&c) != ZOE_OK) continue;
        double got[1200], want[1200];
        int n = c.steps + 50; /* past the end too: min_lr */
        for (int s = 0; s < n; s++) got[s] = zoe_train_lr_at(&c, s), want[s] = reference(&c, s);
        char what[96];
        snprintf(what, sizeof what, "trial %d style %d/%d steps %d warmup %d decay %d", trial,
                 (int)c.lr_decay_style, (int)c.lr_wsd_decay_style, c.steps, c.warmup,
                 c.lr_decay_iters);
        CHECK_CLOSE(got, want, (size_t)n, 0, 2e-7, what);
        checked++;
    }
    CHECK(checked > 150, "%d of 200 random schedules were valid and checked", checked);

    zoe_train_config c;
    zoe_train_config_defaults(&c);
    c.steps = 100, c.warmup = 101;
    expect_invalid(&c, "--lr-warmup-iters=101 is longer than the run (--steps=100)");
    c.warmup = 50, c.lr_decay_iters = 40;
    expect_invalid(&c, "is not shorter than the decay (--lr-decay-iters=40)");
    c.lr_decay_style = ZOE_LR_CONSTANT;
    CHECK_OK(zoe_train_schedule_validate(&c));
    c.lr_decay_style = ZOE_LR_WSD, c.lr_decay_iters = 0, c.lr_wsd_decay_fraction = 0.6f;
    expect_invalid(&c, "--lr-wsd-decay-fraction=0.6");

    /* The default warm-up: 10 steps, or fewer in a shorter run, and shorter than the decay;
     * the lr then ramps as a warm-up of that many steps does. A warm-up given explicitly and
     * longer than the run is an error. */
    const int runs[][3] = {/* steps, decay style, the warm-up */
                           {100, ZOE_LR_COSINE, 10}, {10, ZOE_LR_COSINE, 9},  {3, ZOE_LR_COSINE, 2},
                           {1, ZOE_LR_LINEAR, 0},    {3, ZOE_LR_CONSTANT, 3}, {4, ZOE_LR_WSD, 3}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        zoe_train_config_defaults(&c);
        CHECK(c.warmup == ZOE_WARMUP_AUTO, "the default --warmup is %d", c.warmup);
        c.steps = runs[i][0], c.lr_decay_style = (zoe_lr_decay_style)runs[i][1];
        if (c.lr_decay_style == ZOE_LR_WSD) c.lr_wsd_decay_fraction = 0.25f;
        int w = zoe_train_warmup(&c);
        CHECK(w == runs[i][2], "default warm-up of a %d-step run (style %d): %d, want %d", c.steps,
              runs[i][1], w, runs[i][2]);
        CHECK_OK(zoe_train_schedule_validate(&c));
        zoe_train_config explicit = c;
        explicit.warmup = w;
        for (int s = 0; s < c.steps; s++)
            CHECK(zoe_train_lr_at(&c, s) == zoe_train_lr_at(&explicit, s),
                  "%d-step run, step %d: lr %g by default, %g with --warmup %d", c.steps, s,
                  (double)zoe_train_lr_at(&c, s), (double)zoe_train_lr_at(&explicit, s), w);
    }
    zoe_train_config_defaults(&c);
    c.steps = 3, c.warmup = 5;
    expect_invalid(&c, "--lr-warmup-iters=5 is longer than the run (--steps=3)");
    c.warmup = 3, c.lr_decay_style = ZOE_LR_COSINE;
    expect_invalid(&c, "--lr-warmup-iters=3 is not shorter than the decay");

    /* the flags, --warmup and its Megatron name alike */
    char *args[] = {"zoe-train",
                    "--lr-decay-style",
                    "wsd",
                    "--lr-warmup-iters",
                    "7",
                    "--lr-decay-iters",
                    "90",
                    "--lr-wsd-decay-fraction=0.2",
                    "--lr-wsd-decay-style",
                    "minus-sqrt"};
    int help, models;
    zoe_train_config_defaults(&c);
    CHECK_OK(zoe_train_config_parse_args(&c, 10, args, &help, &models));
    CHECK(c.lr_decay_style == ZOE_LR_WSD && c.warmup == 7 && c.lr_decay_iters == 90 &&
              fabsf(c.lr_wsd_decay_fraction - 0.2f) < 1e-7f &&
              c.lr_wsd_decay_style == ZOE_WSD_MINUS_SQRT,
          "flags parsed: style %d warmup %d decay %d fraction %g shape %d", (int)c.lr_decay_style,
          c.warmup, c.lr_decay_iters, (double)c.lr_wsd_decay_fraction, (int)c.lr_wsd_decay_style);
    char *bad[] = {"zoe-train", "--lr-decay-style", "step"};
    CHECK(zoe_train_config_parse_args(&c, 3, bad, &help, &models) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "'step' is not one of"),
          "unknown style named: '%s'", zoe_last_error());
    return test_finish("test_schedule");
}
