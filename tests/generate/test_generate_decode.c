/* Incremental decoding with the KV cache (models/gpt_decode.c) against the training forward
 * without it (zoe_gpt_forward, itself checked against transformers in test_hf_reference), for a
 * GPT and two Llama shapes (4 query heads over 2 KV heads, untied; over 1, tied) with random
 * (Philox) weights, at TP = world size, and against the same model at TP = 1 on this rank
 * (MPI_COMM_SELF):
 *  (a) greedy decoding with the cache picks, token for token, the argmax of a full forward
 *      of the sequence so far (recomputed at every step, no cache);
 *  (b) the cached logits of every position (prompt chunks of 3 and 2 tokens at positions 0 and
 *      3, then one token per step) equal the full forward's;
 *  (c) the TP = world run generates the TP = 1 run's tokens, greedy and sampled (temperature,
 *      top-k, top-p through zoe_sample_token and the seeded draws), with the same logits.
 * Tolerance (b, c): |got - want| <= 1e-4 + 1e-4 |want|. Both paths compute in fp32 and differ in
 * the order of sums only: the attention (flash-style blocks of 64 against one running softmax),
 * the matmuls (BLAS blocks by the row count: T rows against 1) and at TP > 1 the all-reduces.
 * eps32 = 6e-8 per rounding over dot products of 32..128 terms through 2 blocks gives ~1e-6
 * (GEN_VERBOSE=1 prints the measured worst); a wrong position, a stale or missing cache row or
 * a misplaced head gives O(0.1) errors. */
#include <math.h>
#include <stdlib.h>
#include "../tp/stack.h"
#include "testing.h"
#include "zoe/generate.h"

enum { PROMPT = 5, STEPS = 20 };

static double worst = 0.0;

static zoe_gpt_config gpt_config(void) {
    return (zoe_gpt_config){
        .shape = {.vocab = 300, .hidden = 64, .heads = 4, .ffn = 128, .layers = 2, .seq_len = 32},
        .micro_batch = 1,
        .pad_multiple = 128,
        .dtype = ZOE_F32,
        .seed = 4242};
}

/* 4 query heads over 2 KV heads (split at TP 2, replicated on 2 ranks at TP 4), untied head,
 * Llama 3 RoPE scaling. */
static zoe_gpt_config llama_config(void) {
    zoe_gpt_config c = gpt_config();
    c.shape.family = ZOE_MODEL_LLAMA;
    c.shape.kv_heads = 2;
    c.shape.rope_theta = 500000.0f;
    c.shape.norm_eps = 1e-5f;
    c.shape.rope_scaling = (zoe_rope_scaling){.factor = 8.0f,
                                              .low_freq_factor = 1.0f,
                                              .high_freq_factor = 4.0f,
                                              .original_max_position = 16};
    return c;
}

/* The last decode's logits [n, padded], gathered over TP, as double. */
static zoe_status cached_logits(stack *s, zoe_gpt_kv_cache *c, int64_t n, double *out) {
    const int64_t V = zoe_gpt_embedding(s->gpt)->vocab.padded;
    const size_t bytes = (size_t)(n * V) * sizeof(float);
    void *full = NULL, *scratch = NULL;
    zoe_status st = zoe_device_alloc(s->dev, bytes, &full);
    if (st == ZOE_OK) st = zoe_device_alloc(s->dev, bytes, &scratch);
    if (st == ZOE_OK)
        st = zoe_tp_gather_from_forward(s->tp, full, zoe_gpt_kv_cache_logits(c), n, V, scratch);
    for (int64_t i = 0; st == ZOE_OK && i < n * V; i++) out[i] = ((const float *)full)[i];
    zoe_device_free(s->dev, full);
    zoe_device_free(s->dev, scratch);
    return st;
}

static int32_t argmax(const double *row, int32_t vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

static void compare(const double *got, const double *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        const double d = fabs(got[i] - want[i]);
        if (d > worst) worst = d;
    }
    CHECK_CLOSE(got, want, n, 1e-4, 1e-4, what);
}

/* The full forward of seq[0..len) (the rest of the context filled with token 0; causal, so it
 * cannot matter), row len - 1 of its logits into row[padded]. */
static void full_forward_row(stack *s, const int32_t *seq, int64_t len, double *all, double *row) {
    const int64_t V = zoe_gpt_embedding(s->gpt)->vocab.padded;
    int32_t tokens[64] = {0}; /* the context, seq_len <= 64 */
    for (int64_t i = 0; i < len; i++) tokens[i] = seq[i];
    CHECK_OK(stack_forward(s, tokens, tokens));
    CHECK_OK(stack_logits(s, all));
    memcpy(row, all + (len - 1) * V, (size_t)V * sizeof *row);
}

/* Generates STEPS tokens after the prompt through the cache, checking every position's logits
 * against the full forward's; returns the tokens in seq[PROMPT..]. sampling NULL: greedy, where
 * the full forward's argmax must be the token. */
static void run(stack *s, const zoe_sampling *sampling, int32_t *seq, double *logits_out) {
    const int32_t vocab = s->cfg.shape.vocab;
    const int64_t T = s->cfg.shape.seq_len, V = zoe_gpt_embedding(s->gpt)->vocab.padded;
    zoe_gpt_kv_cache *c = NULL;
    double *all = malloc((size_t)(T * V) * sizeof *all), *want = malloc((size_t)V * sizeof *want);
    double *got = malloc((size_t)(T * V) * sizeof *got), *work = malloc((size_t)V * sizeof *work);
    float *row = malloc((size_t)V * sizeof *row);
    if (!CHECK_OK(zoe_gpt_kv_cache_create(s->gpt, T, 8, &c))) return;
    /* the prompt in two chunks: positions [0, 3) and [3, 5) */
    CHECK_OK(zoe_gpt_decode(s->gpt, c, seq, 3));
    CHECK_OK(cached_logits(s, c, 3, got));
    CHECK_OK(zoe_gpt_decode(s->gpt, c, seq + 3, PROMPT - 3));
    CHECK_OK(cached_logits(s, c, PROMPT - 3, got + 3 * V));
    full_forward_row(s, seq, PROMPT, all, want);
    compare(got, all, (size_t)(PROMPT * V), "prefill logits, every prompt position");
    CHECK(zoe_gpt_kv_cache_length(c) == PROMPT, "cache length %lld after the prompt",
          (long long)zoe_gpt_kv_cache_length(c));
    for (int step = 0; step < STEPS; step++) {
        const int64_t len = PROMPT + step;
        const double *last = got + (step == 0 ? (PROMPT - 1) * V : 0);
        int32_t token;
        if (sampling) {
            for (int32_t i = 0; i < vocab; i++) row[i] = (float)last[i];
            CHECK_OK(zoe_sample_token(row, vocab, sampling, zoe_sampling_uniform(99, step), work,
                                      &token));
        } else {
            token = argmax(last, vocab);
            full_forward_row(s, seq, len, all, want);
            CHECK(token == argmax(want, vocab),
                  "greedy step %d: cached argmax %d, full forward's %d", step, token,
                  argmax(want, vocab));
        }
        seq[len] = token;
        memcpy(logits_out + (size_t)step * V, last, (size_t)V * sizeof *last);
        CHECK_OK(zoe_gpt_decode(s->gpt, c, &token, 1));
        CHECK_OK(cached_logits(s, c, 1, got));
        full_forward_row(s, seq, len + 1, all, want);
        compare(got, want, (size_t)V, "decode step logits");
    }
    zoe_gpt_kv_cache_destroy(c);
    free(all), free(want), free(got), free(work), free(row);
}

static void check_family(const zoe_gpt_config *cfg, const char *name) {
    stack *tp = NULL, *one = NULL;
    if (!CHECK_OK(stack_create(cfg, MPI_COMM_WORLD, &tp)) ||
        !CHECK_OK(stack_create(cfg, MPI_COMM_SELF, &one)))
        return;
    const int64_t V = zoe_gpt_embedding(tp->gpt)->vocab.padded;
    test_rng rng;
    test_rng_seed(&rng, 5);
    const zoe_sampling sampled = {.temperature = 0.9f, .top_k = 40, .top_p = 0.9f};
    for (int mode = 0; mode < 2; mode++) {
        int32_t seq_tp[64], seq_one[64];
        for (int i = 0; i < PROMPT; i++)
            seq_tp[i] = seq_one[i] = (int32_t)test_rng_int(&rng, 0, cfg->shape.vocab - 1);
        double *l_tp = malloc((size_t)(STEPS * V) * sizeof(double));
        double *l_one = malloc((size_t)(STEPS * V) * sizeof(double));
        const zoe_sampling *s = mode ? &sampled : NULL;
        run(tp, s, seq_tp, l_tp);
        run(one, s, seq_one, l_one);
        int same = 1;
        for (int i = 0; i < PROMPT + STEPS; i++) same &= seq_tp[i] == seq_one[i];
        CHECK(same, "%s %s: TP=%d tokens differ from TP=1's", name, mode ? "sampled" : "greedy",
              test_world_size());
        compare(l_tp, l_one, (size_t)(STEPS * V), "TP=world logits against TP=1");
        free(l_tp), free(l_one);
    }
    stack_destroy(tp);
    stack_destroy(one);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_gpt_config g = gpt_config(), l = llama_config(), tied = llama_config();
    tied.shape.kv_heads = 1; /* one KV head, on every rank at TP 2 and 4 */
    tied.shape.tie_embeddings = 1;
    check_family(&g, "gpt");
    check_family(&l, "llama");
    check_family(&tied, "llama, 1 KV head, tied");
    if (getenv("GEN_VERBOSE") && test_rank() == 0)
        printf("worst |cached - full| or |TP - TP1| logit difference: %.3g\n", worst);
    return test_finish("test_generate_decode");
}
