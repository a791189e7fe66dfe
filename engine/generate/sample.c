/* Sampling a token from logits (zoe/generate.h): temperature, top-k, top-p, in float64, and the
 * counter-based uniform draw of each step.
 *
 * Explained in docs/generate.md, "Sampling". */
#include <math.h>
#include <stdlib.h>
#include "runtime/error.h"
#include "kernels/philox.h"
#include "zoe/generate.h"

zoe_status zoe_sampling_check(const zoe_sampling *s) {
    if (!s) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "sampling: NULL parameters");
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "temperature=%g must be >= 0",
                        (double)s->temperature);
    if (s->top_k < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "top-k=%d must be >= 0 (0: no limit)", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "top-p=%g outside (0, 1]", (double)s->top_p);
    return ZOE_OK;
}

static zoe_status check_sampling(const float *logits, int32_t V, const zoe_sampling *s,
                                 const void *out) {
    if (!logits || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "sampling: NULL argument");
    if (V <= 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "sampling: vocabulary of %d", V);
    return zoe_sampling_check(s);
}

static int32_t argmax(const float *z, int32_t V) {
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (z[i] > z[best]) best = i; /* strict: a tie keeps the lower id */
    return best;
}

typedef struct ranked {
    double p;
    int32_t id;
} ranked;

/* Most probable first; equal probabilities by id, so the order (and the kept set) is total. */
static int by_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

zoe_status zoe_sampling_distribution(const float *logits, int32_t V, const zoe_sampling *s,
                                     double *probs) {
    ZOE_TRY(check_sampling(logits, V, s, probs));
    for (int32_t i = 0; i < V; i++) probs[i] = 0.0;
    if (s->temperature == 0.0f) {
        probs[argmax(logits, V)] = 1.0;
        return ZOE_OK;
    }
    ranked *r = malloc((size_t)V * sizeof *r);
    if (!r) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "sampling over %d tokens", V);
    /* scaled logits, ranked; the softmax over the top k of them, stable by the maximum */
    for (int32_t i = 0; i < V; i++) r[i] = (ranked){(double)logits[i] / s->temperature, i};
    qsort(r, (size_t)V, sizeof *r, by_rank);
    const int32_t k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    const double top = r[0].p;
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) sum += (r[i].p = exp(r[i].p - top));
    int32_t kept = k;
    if (s->top_p < 1.0f) {
        double cum = 0.0;
        for (kept = 0; kept < k && cum < (double)s->top_p * sum;) cum += r[kept++].p;
        sum = cum;
    }
    for (int32_t i = 0; i < kept; i++) probs[r[i].id] = r[i].p / sum;
    free(r);
    return ZOE_OK;
}

zoe_status zoe_sample_token(const float *logits, int32_t V, const zoe_sampling *s, double u,
                            double *work, int32_t *token) {
    ZOE_TRY(check_sampling(logits, V, s, token));
    if (!work) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "sampling: NULL work buffer");
    if (!(u >= 0.0 && u < 1.0)) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "u=%g outside [0, 1)", u);
    ZOE_TRY(zoe_sampling_distribution(logits, V, s, work));
    /* the last token with probability absorbs rounding: the cumulative sum may end below 1 */
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < V; i++) {
        if (work[i] <= 0.0) continue;
        last = i;
        cum += work[i];
        if (u < cum) break;
    }
    *token = last;
    return ZOE_OK;
}

/* The Philox stream key of (site, step), hashed by splitmix64's finaliser, serves as the draw:
 * a bijection of distinct inputs, so consecutive steps draw unrelated values. */
double zoe_sampling_uniform(uint64_t seed, uint64_t step) {
    return (double)(zoe_philox_stream_at_step(seed, step) >> 11) * 0x1.0p-53;
}
