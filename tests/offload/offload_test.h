/* Shared by the offload tests: a float64 Adam/AdamW written from its definition (Kingma & Ba,
 * Loshchilov & Hutter; the bias-corrected form PyTorch uses), and small helpers to drive an
 * optimizer on the CPU backend as a model would. */
#ifndef ZOE_TESTS_OFFLOAD_TEST_H
#define ZOE_TESTS_OFFLOAD_TEST_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testing.h"
#include "zoe/optimizer.h"

typedef struct ref_adam {
    size_t n;
    double *w, *m, *v;
    long step;
    const unsigned char *no_decay; /* NULL, or per element 1: no weight decay (not owned) */
} ref_adam;

static inline void ref_adam_init(ref_adam *r, const double *w0, size_t n) {
    r->n = n, r->step = 0, r->no_decay = NULL;
    r->w = malloc(n * sizeof(double)), r->m = calloc(n, sizeof(double));
    r->v = calloc(n, sizeof(double));
    memcpy(r->w, w0, n * sizeof(double));
}

static inline void ref_adam_free(ref_adam *r) {
    free(r->w), free(r->m), free(r->v);
}

/* One step on gradient g (already averaged), multiplied by coef (clipping). */
static inline void ref_adam_step(ref_adam *r, const double *g, double coef, double lr,
                                 const zoe_optimizer_config *c) {
    r->step++;
    double bc1 = 1 - pow(c->beta1, (double)r->step), bc2 = 1 - pow(c->beta2, (double)r->step);
    for (size_t i = 0; i < r->n; i++) {
        double wd = r->no_decay && r->no_decay[i] ? 0.0 : c->weight_decay;
        double gi = g[i] * coef;
        if (!c->adamw) gi += wd * r->w[i];
        r->m[i] = c->beta1 * r->m[i] + (1 - c->beta1) * gi;
        r->v[i] = c->beta2 * r->v[i] + (1 - c->beta2) * gi * gi;
        if (c->adamw) r->w[i] *= 1 - lr * wd;
        r->w[i] -= lr / bc1 * r->m[i] / (sqrt(r->v[i]) / sqrt(bc2) + c->eps);
    }
}

/* x rounded to dtype, as a double. */
static inline double round_to(zoe_dtype dt, double x) {
    if (dt == ZOE_BF16) return zoe_bf16_to_f32(zoe_f32_to_bf16((float)x));
    if (dt == ZOE_F16) return zoe_f16_to_f32(zoe_f32_to_f16((float)x));
    return (float)x;
}

static inline double load_elem(zoe_dtype dt, const void *p, size_t i) {
    if (dt == ZOE_BF16) return zoe_bf16_to_f32(((const zoe_bf16 *)p)[i]);
    if (dt == ZOE_F16) return zoe_f16_to_f32(((const zoe_f16 *)p)[i]);
    return ((const float *)p)[i];
}

static inline void store_elem(zoe_dtype dt, void *p, size_t i, double x) {
    if (dt == ZOE_BF16)
        ((zoe_bf16 *)p)[i] = zoe_f32_to_bf16((float)x);
    else if (dt == ZOE_F16)
        ((zoe_f16 *)p)[i] = zoe_f32_to_f16((float)x);
    else
        ((float *)p)[i] = (float)x;
}

/* The tensors' values, concatenated in tensor order (no padding), to and from the optimizer's
 * parameter buffer. On the CPU backend device memory is host memory. */
static inline void write_params(zoe_optimizer *opt, zoe_dtype dt, const size_t *numel, int nt,
                                const double *w) {
    void *p = zoe_optimizer_params(opt);
    for (int t = 0, k = 0; t < nt; t++) {
        size_t off = 0;
        CHECK_OK(zoe_optimizer_tensor_offset(opt, t, &off));
        for (size_t i = 0; i < numel[t]; i++) store_elem(dt, p, off + i, w[k++]);
    }
}

static inline void read_params(zoe_optimizer *opt, zoe_dtype dt, const size_t *numel, int nt,
                               double *w) {
    const void *p = zoe_optimizer_params(opt);
    for (int t = 0, k = 0; t < nt; t++) {
        size_t off = 0;
        CHECK_OK(zoe_optimizer_tensor_offset(opt, t, &off));
        for (size_t i = 0; i < numel[t]; i++) w[k++] = load_elem(dt, p, off + i);
    }
}

/* Uniform [-1, 1) weights from seed written into the parameters, and the optimizer initialised
 * from them. */
static inline void init_random_params(zoe_optimizer *opt, zoe_dtype dt, const size_t *numel, int nt,
                                      uint64_t seed, double *w) {
    size_t total = 0;
    for (int t = 0; t < nt; t++) total += numel[t];
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (size_t i = 0; i < total; i++) w[i] = 2 * test_rng_uniform(&rng) - 1;
    write_params(opt, dt, numel, nt, w);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
}

/* One micro-batch as a model's backward would run it: tensors in reverse order, each gradient
 * accumulated (+=, rounded to dt) into the buffer the optimizer hands out, then marked ready. */
static inline void feed_micro_batch(zoe_optimizer *opt, zoe_dtype dt, const size_t *numel, int nt,
                                    const double *g) {
    size_t *start = malloc((size_t)nt * sizeof(size_t));
    for (int t = 0, k = 0; t < nt; t++) start[t] = (size_t)k, k += (int)numel[t];
    CHECK_OK(zoe_optimizer_begin_micro_batch(opt));
    for (int t = nt - 1; t >= 0; t--) {
        void *buf = NULL;
        CHECK_OK(zoe_optimizer_grad_buffer(opt, t, &buf));
        if (!buf) continue;
        for (size_t i = 0; i < numel[t]; i++)
            store_elem(dt, buf, i, load_elem(dt, buf, i) + g[start[t] + i]);
        CHECK_OK(zoe_optimizer_grad_ready(opt, t));
    }
    CHECK_OK(zoe_optimizer_end_micro_batch(opt));
    free(start);
}

/* The rank's master weights (or a moment) gathered tensor by tensor into the concatenated
 * layout: elements this rank does not own are left as they were. */
static inline void read_owned_state(zoe_optimizer *opt, zoe_optimizer_state which,
                                    const size_t *numel, int nt, double *out,
                                    unsigned char *owned) {
    size_t pn = zoe_optimizer_partition_numel(opt);
    float *buf = malloc((pn ? pn : 1) * sizeof(float));
    CHECK_OK(zoe_optimizer_read_state(opt, which, 0, pn, buf));
    for (int t = 0, k = 0; t < nt; k += (int)numel[t], t++) {
        size_t first, count, poff;
        CHECK_OK(zoe_optimizer_tensor_shard(opt, t, &first, &count, &poff));
        for (size_t i = 0; i < count; i++) {
            out[k + first + i] = buf[poff + i];
            if (owned) owned[k + first + i] = 1;
        }
    }
    free(buf);
}

#endif
