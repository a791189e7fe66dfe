/* The sampler (engine/generate/sample.c) on fixed logit vectors against a float64 reference written
 * here another way (a selection of the kept set by counting, not by sorting): the distribution
 * for temperature, top-k and top-p; greedy ties to the lowest id; top-k = 1 is greedy for any
 * draw; a draw u picks the token where the cumulative distribution passes u, and 20000 draws
 * land on each token within 5 standard deviations of its probability; the seeded draws are a
 * function of (seed, step); bad parameters fail naming them. Tolerance of the distribution:
 * 1e-12 absolute (both float64, sums of at most 64 terms in different orders: ~1e-15). */
#include <math.h>
#include <stdlib.h>
#include "testing.h"
#include "zoe/generate.h"

enum { V = 64 };

/* Token i is kept when fewer than k tokens rank above it (by value, then lower id); then the
 * top-p set: i is kept when the probability of the tokens ranked above it is below p. */
static void reference(const float *z, const zoe_sampling *s, double *p) {
    double e[V], sum = 0.0, zmax = -INFINITY;
    int keep[V];
    for (int i = 0; i < V; i++) zmax = fmax(zmax, (double)z[i] / s->temperature);
    for (int i = 0; i < V; i++) {
        int above = 0;
        for (int j = 0; j < V; j++) above += z[j] > z[i] || (z[j] == z[i] && j < i);
        keep[i] = s->top_k == 0 || above < s->top_k;
        e[i] = keep[i] ? exp((double)z[i] / s->temperature - zmax) : 0.0;
        sum += e[i];
    }
    double kept_sum = 0.0;
    for (int i = 0; i < V; i++) {
        double mass_above = 0.0;
        for (int j = 0; j < V; j++)
            if (z[j] > z[i] || (z[j] == z[i] && j < i)) mass_above += e[j] / sum;
        if (s->top_p < 1.0f && keep[i] && !(mass_above < (double)s->top_p)) keep[i] = 0;
        if (!keep[i]) e[i] = 0.0;
        kept_sum += e[i];
    }
    for (int i = 0; i < V; i++) p[i] = e[i] / kept_sum;
}

static void check_distribution(const float *z, zoe_sampling s) {
    double got[V], want[V];
    char what[96];
    snprintf(what, sizeof what, "distribution at T=%g top-k=%d top-p=%g", (double)s.temperature,
             s.top_k, (double)s.top_p);
    reference(z, &s, want);
    if (CHECK_OK(zoe_sampling_distribution(z, V, &s, got)))
        CHECK_CLOSE(got, want, V, 1e-12, 0.0, what);
}

/* 20000 draws from the test's generator against the distribution: each count within 5 sigma. */
static void check_frequencies(const float *z, zoe_sampling s) {
    enum { DRAWS = 20000 };
    double p[V], work[V];
    int count[V] = {0};
    test_rng rng;
    test_rng_seed(&rng, 17);
    CHECK_OK(zoe_sampling_distribution(z, V, &s, p));
    for (int d = 0; d < DRAWS; d++) {
        int32_t t = -1;
        CHECK_OK(zoe_sample_token(z, V, &s, test_rng_uniform(&rng), work, &t));
        if (t >= 0 && t < V) count[t]++;
    }
    int bad = 0;
    for (int i = 0; i < V; i++) {
        const double mean = DRAWS * p[i], sd = sqrt(DRAWS * p[i] * (1 - p[i]));
        bad += fabs(count[i] - mean) > 5 * sd + (p[i] == 0 ? 0 : 1);
        bad += p[i] == 0 && count[i] != 0;
    }
    CHECK(bad == 0, "%d tokens drawn off their probability (T=%g k=%d p=%g)", bad,
          (double)s.temperature, s.top_k, (double)s.top_p);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 3);
    float z[V];
    test_fill_uniform(&rng, z, V, -4.0f, 4.0f);
    z[10] = z[40] = 5.0f; /* a tie at the top: greedy and top-k = 1 must take 10 */
    z[20] = z[30] = 1.5f; /* a tie inside the kept sets */
    const zoe_sampling cases[] = {
        {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f},
        {.temperature = 0.7f, .top_k = 0, .top_p = 1.0f},
        {.temperature = 2.0f, .top_k = 5, .top_p = 1.0f},
        {.temperature = 1.0f, .top_k = 0, .top_p = 0.9f},
        {.temperature = 0.8f, .top_k = 0, .top_p = 0.5f},
        {.temperature = 1.3f, .top_k = 20, .top_p = 0.75f},
        {.temperature = 1.0f, .top_k = 0, .top_p = 0.01f},
        {.temperature = 1.0f, .top_k = V + 5, .top_p = 1.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_distribution(z, cases[c]);
        check_frequencies(z, cases[c]);
    }

    /* greedy: the argmax, ties to the lowest id; top-k = 1 is greedy whatever the draw */
    double work[V];
    int32_t t = -1;
    const zoe_sampling greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    CHECK_OK(zoe_sample_token(z, V, &greedy, 0.999, work, &t));
    CHECK(t == 10, "greedy picked %d, want 10 (the lower of two tied maxima)", t);
    for (int d = 0; d < 50; d++) {
        const zoe_sampling top1 = {.temperature = 1.5f, .top_k = 1, .top_p = 1.0f};
        CHECK_OK(zoe_sample_token(z, V, &top1, test_rng_uniform(&rng), work, &t));
        CHECK(t == 10, "top-k 1 picked %d, want greedy's 10", t);
    }

    /* a draw picks where the cumulative distribution first exceeds it */
    double p[V];
    const zoe_sampling plain = cases[0];
    CHECK_OK(zoe_sampling_distribution(z, V, &plain, p));
    double cum = 0.0;
    for (int i = 0; i < V; i++) {
        const double u = cum + 0.5 * p[i];
        cum += p[i];
        CHECK_OK(zoe_sample_token(z, V, &plain, u, work, &t));
        CHECK(t == i, "u=%.6f picked %d, want %d", u, t, i);
    }

    /* seeded draws: a function of (seed, step), in [0, 1), different across steps and seeds */
    CHECK(zoe_sampling_uniform(7, 3) == zoe_sampling_uniform(7, 3), "draw not reproducible");
    CHECK(zoe_sampling_uniform(7, 3) != zoe_sampling_uniform(7, 4), "steps draw alike");
    CHECK(zoe_sampling_uniform(7, 3) != zoe_sampling_uniform(8, 3), "seeds draw alike");
    double mean = 0.0;
    for (int s = 0; s < 10000; s++) {
        const double u = zoe_sampling_uniform(1234, (uint64_t)s);
        CHECK(u >= 0.0 && u < 1.0, "draw %d = %g outside [0, 1)", s, u);
        mean += u / 10000;
    }
    CHECK(fabs(mean - 0.5) < 0.02, "mean of 10000 draws %g (want 0.5 +- 0.02, 7 sigma)", mean);

    /* bad parameters */
    const zoe_sampling bad[] = {{.temperature = -1.0f, .top_p = 1.0f},
                                {.temperature = NAN, .top_p = 1.0f},
                                {.temperature = 1.0f, .top_k = -2, .top_p = 1.0f},
                                {.temperature = 1.0f, .top_p = 0.0f},
                                {.temperature = 1.0f, .top_p = 1.5f}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++)
        CHECK(zoe_sample_token(z, V, &bad[b], 0.5, work, &t) == ZOE_ERR_INVALID_ARGUMENT,
              "bad sampling parameters %zu accepted", b);
    CHECK(zoe_sample_token(z, V, &plain, 1.0, work, &t) == ZOE_ERR_INVALID_ARGUMENT,
          "u = 1 accepted");
    return test_finish("test_sampling");
}
