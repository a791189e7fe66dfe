/* The GPT of models/gpt.h at TP = 1 in fp32 against a float64 GPT written here from the definitions
 * (the independent check that the block composes the right math: LayerNorm, QKV laid out
 * [heads][3][head_dim], causal attention, tanh-GELU, residuals, tied head, mean
 * cross-entropy over the real vocabulary, padding excluded).
 *  - loss and logits: fp32 storage with fp32 arithmetic over dot products of <= 256 terms
 *    through ~15 ops: relative error ~1e-5; tolerance 2e-4 of the largest magnitude.
 *  - gradients: for each parameter tensor, a random direction d; zoe's <grad, d> against the
 *    central difference (L(w + e d) - L(w - e d)) / 2e of the float64 loss (e = 1e-3: error
 *    O(e^2) ~1e-7, float64 rounding ~1e-13 / e; zoe's fp32 gradients ~1e-6 relative).
 *    Measured worst 2e-6 of sum |grad_i d_i|; the bound is 1e-4 of it, which a missing or
 *    doubled term exceeds by orders of magnitude.
 * TP_VERBOSE=1 prints the measured errors. */
#include <math.h>
#include <stdlib.h>
#include "stack.h"
#include "kernels/philox.h"
#include "testing.h"

#define LAYERS      2
#define NUM_TENSORS (2 + LAYERS * ZOE_TP_BLOCK_PARAMS + 2)

typedef struct model64 {
    const zoe_gpt_config *c;
    int64_t B, T, V; /* V: padded vocabulary */
    double *w[NUM_TENSORS];
    uint64_t sites[LAYERS][2]; /* the blocks' dropout sites */
    uint64_t step;
} model64;

/* x *= keep / (1 - p) with keep drawn as documented in layers.h (element index e of the
 * [N, C] tensor: Philox stream_at_step(site, step), kept when its 24 bits >= round(p 2^24)). */
static void dropout64(const model64 *m, double *x, int64_t n, uint64_t site) {
    double p = m->c->shape.dropout;
    if (p <= 0) return;
    uint32_t *bits = malloc((size_t)n * sizeof(uint32_t));
    zoe_philox_bits24_fill(bits, (size_t)n, m->c->seed, zoe_philox_stream_at_step(site, m->step),
                           0);
    uint32_t threshold = (uint32_t)lrint(p * 16777216.0);
    for (int64_t i = 0; i < n; i++) x[i] = bits[i] >= threshold ? x[i] / (1 - p) : 0;
    free(bits);
}

static void layernorm(const double *x, const double *g, const double *b, double *y, int64_t N,
                      int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        const double *r = x + i * C;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < C; j++) mean += r[j];
        mean /= (double)C;
        for (int64_t j = 0; j < C; j++) var += (r[j] - mean) * (r[j] - mean);
        double rstd = 1.0 / sqrt(var / (double)C + 1e-5);
        for (int64_t j = 0; j < C; j++) y[i * C + j] = (r[j] - mean) * rstd * g[j] + b[j];
    }
}

/* y[N, out] = x[N, in] . W[out, in]^T + b (b may be NULL) */
static void linear(const double *x, const double *W, const double *b, double *y, int64_t N,
                   int64_t in, int64_t out) {
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int64_t k = 0; k < in; k++) s += x[i * in + k] * W[o * in + k];
            y[i * out + o] = s;
        }
}

static void attention(const double *qkv, double *out, const model64 *m) {
    int64_t NH = m->c->shape.heads, HS = m->c->shape.hidden / NH, T = m->T;
    double *p = malloc((size_t)T * sizeof(double));
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + ((b * T + t) * NH + h) * 3 * HS;
                double m = -INFINITY, z = 0;
                for (int64_t s = 0; s <= t; s++) {
                    const double *k = qkv + ((b * T + s) * NH + h) * 3 * HS + HS;
                    double dot = 0;
                    for (int64_t d = 0; d < HS; d++) dot += q[d] * k[d];
                    p[s] = dot / sqrt((double)HS);
                    m = fmax(m, p[s]);
                }
                for (int64_t s = 0; s <= t; s++) z += p[s] = exp(p[s] - m);
                double *o = out + ((b * T + t) * NH + h) * HS;
                for (int64_t d = 0; d < HS; d++) {
                    double acc = 0;
                    for (int64_t s = 0; s <= t; s++)
                        acc += p[s] / z * qkv[((b * T + s) * NH + h) * 3 * HS + 2 * HS + d];
                    o[d] = acc;
                }
            }
    free(p);
}

static double gelu(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* The loss; logits (when not NULL) gets [N, V]. Parameter order as zoe_gpt_tensor: wte, wpe, per
 * layer the block's 12, ln_f weight and bias. */
static double forward64(const model64 *m, const int32_t *tok, const int32_t *tgt,
                        double *logits_out) {
    const zoe_model_config *c = &m->c->shape;
    int64_t N = m->B * m->T, C = c->hidden, F = c->ffn, V = m->V;
    double *x = malloc((size_t)(N * C) * 8), *ln = malloc((size_t)(N * C) * 8);
    double *big = malloc((size_t)(N * (F > 3 * C ? F : 3 * C)) * 8),
           *att = malloc((size_t)(N * C) * 8);
    double *br = malloc((size_t)(N * C) * 8), *logits = malloc((size_t)(N * V) * 8);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++)
            x[i * C + j] = m->w[0][tok[i] * C + j] + m->w[1][(i % m->T) * C + j];
    for (int64_t l = 0; l < c->layers; l++) {
        double *const *p = m->w + 2 + l * ZOE_TP_BLOCK_PARAMS;
        layernorm(x, p[0], p[1], ln, N, C);
        linear(ln, p[2], p[3], big, N, C, 3 * C);
        attention(big, att, m);
        linear(att, p[4], p[5], br, N, C, C);
        dropout64(m, br, N * C, m->sites[l][0]);
        for (int64_t i = 0; i < N * C; i++) x[i] += br[i];
        layernorm(x, p[6], p[7], ln, N, C);
        linear(ln, p[8], p[9], big, N, C, F);
        for (int64_t i = 0; i < N * F; i++) big[i] = gelu(big[i]);
        linear(big, p[10], p[11], br, N, F, C);
        dropout64(m, br, N * C, m->sites[l][1]);
        for (int64_t i = 0; i < N * C; i++) x[i] += br[i];
    }
    int64_t last = 2 + c->layers * ZOE_TP_BLOCK_PARAMS;
    layernorm(x, m->w[last], m->w[last + 1], ln, N, C);
    linear(ln, m->w[0], NULL, logits, N, C, V);
    double loss = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        if (tgt[i] == ZOE_GPT_IGNORE_INDEX) continue;
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < c->vocab; v++) mx = fmax(mx, logits[i * V + v]);
        for (int64_t v = 0; v < c->vocab; v++) z += exp(logits[i * V + v] - mx);
        loss += log(z) + mx - logits[i * V + tgt[i]];
        count++;
    }
    if (logits_out) memcpy(logits_out, logits, (size_t)(N * V) * 8);
    free(x), free(ln), free(big), free(att), free(br), free(logits);
    return loss / (double)count;
}

static void run(float dropout) {
    zoe_gpt_config cfg = {.shape = {.vocab = 257,
                                    .hidden = 64,
                                    .heads = 4,
                                    .ffn = 256,
                                    .layers = LAYERS,
                                    .seq_len = 17,
                                    .dropout = dropout},
                          .micro_batch = 2,
                          .pad_multiple = 128,
                          .dtype = ZOE_F32,
                          .seed = 9};
    stack *s = NULL;
    int64_t N = cfg.micro_batch * cfg.shape.seq_len;
    int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
    test_rng rng;
    test_rng_seed(&rng, 31);
    for (int64_t i = 0; i < N; i++)
        tok[i] = (int32_t)test_rng_int(&rng, 0, cfg.shape.vocab - 1),
        tgt[i] = (int32_t)test_rng_int(&rng, 0, cfg.shape.vocab - 1);
    tgt[5] = ZOE_GPT_IGNORE_INDEX;
    if (!CHECK_OK(stack_create(&cfg, MPI_COMM_SELF, &s))) return;
    if (s->ntensors != NUM_TENSORS) {
        CHECK(0, "%d tensors, want %d", s->ntensors, NUM_TENSORS);
        stack_destroy(s);
        return;
    }
    /* larger weights than GPT-2's 0.02 so that attention and GELU are far from linear
     * (written in place: CPU device memory is host memory) */
    for (int i = 0; i < NUM_TENSORS; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, i);
        float *w = p->data;
        test_rng_seed(&rng, 100 + (uint64_t)i);
        double scale = p->init == ZOE_TP_INIT_NORMAL ? 0.3 : 0.1;
        for (int64_t j = 0; j < p->local_numel; j++)
            w[j] = (p->init == ZOE_TP_INIT_ONES ? 1.0f : 0.0f) +
                   (float)(scale * (test_rng_uniform(&rng) * 2 - 1));
    }
    /* the model's dropout step is its micro step, counted from 1 at the first forward */
    model64 m = {.c = &cfg,
                 .B = cfg.micro_batch,
                 .T = cfg.shape.seq_len,
                 .V = zoe_gpt_embedding(s->gpt)->vocab.padded,
                 .step = 1};
    for (int l = 0; l < LAYERS; l++) {
        const zoe_tp_block *blk = zoe_gpt_block(s->gpt, l);
        m.sites[l][0] = blk->dropout_site[0], m.sites[l][1] = blk->dropout_site[1];
    }
    for (int i = 0; i < NUM_TENSORS; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, i);
        m.w[i] = malloc((size_t)p->local_numel * 8);
        CHECK_OK(stack_param_global(s, i, false, m.w[i]));
    }
    CHECK_OK(stack_forward(s, tok, tgt));
    double *want = malloc((size_t)(N * m.V) * 8), *got = malloc((size_t)(N * m.V) * 8);
    double loss64 = forward64(&m, tok, tgt, want);
    CHECK_OK(stack_logits(s, got));
    double amax = 0;
    for (int64_t i = 0; i < N * m.V; i++) amax = fmax(amax, fabs(want[i]));
    char what[64];
    snprintf(what, sizeof what, "logits vs float64, dropout %.1f", (double)dropout);
    CHECK_CLOSE(got, want, (size_t)(N * m.V), 2e-4 * amax, 2e-4, what);
    CHECK(fabs(s->loss - loss64) <= 2e-4 * loss64, "loss %.8g, float64 %.8g (dropout %.1f)",
          s->loss, loss64, (double)dropout);
    CHECK_OK(stack_backward(s));

    const double eps = 1e-3;
    for (int i = 0; i < NUM_TENSORS; i++) {
        const zoe_tp_param *p = zoe_gpt_tensor(s->gpt, i);
        int64_t n = p->local_numel;
        const float *g = p->grad;
        double *w0 = malloc((size_t)n * 8), *d = malloc((size_t)n * 8), dot = 0, mag = 0;
        memcpy(w0, m.w[i], (size_t)n * 8);
        for (int64_t j = 0; j < n; j++) {
            d[j] = test_rng_uniform(&rng) * 2 - 1;
            dot += g[j] * d[j];
            mag += fabs(g[j] * d[j]);
        }
        for (int64_t j = 0; j < n; j++) m.w[i][j] = w0[j] + eps * d[j];
        double up = forward64(&m, tok, tgt, NULL);
        for (int64_t j = 0; j < n; j++) m.w[i][j] = w0[j] - eps * d[j];
        double down = forward64(&m, tok, tgt, NULL);
        memcpy(m.w[i], w0, (size_t)n * 8);
        double fd = (up - down) / (2 * eps);
        if (getenv("TP_VERBOSE"))
            printf("  %-32s fd %.8g dot %.8g rel %.2g\n", p->name, fd, dot, fabs(fd - dot) / mag);
        CHECK(mag > 0, "%s: zero gradient", p->name);
        CHECK(fabs(fd - dot) <= 1e-4 * mag,
              "%s dropout %.1f: <grad, d> = %.8g, finite difference %.8g (sum|g d| %.3g)", p->name,
              (double)dropout, dot, fd, mag);
        free(w0), free(d);
    }
    for (int i = 0; i < NUM_TENSORS; i++) free(m.w[i]);
    free(want), free(got), free(tok), free(tgt);
    stack_destroy(s);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    run(0.0f);
    run(0.2f); /* the masks, forward and backward, are the documented Philox draws */
    return test_finish("test_tp_reference");
}
