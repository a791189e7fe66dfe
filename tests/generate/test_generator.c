/* The generator (engine/generate/generate.c) on checkpoints saved here, GPT and Llama, at TP =
 * world size:
 *  - zoe_generator_logits of a sequence (prefill chunks through the KV cache, the vocabulary
 *    shards gathered) equal zoe_trainer_logits (the training forward, no cache) of the trainer
 *    that saved it, within 1e-4 + 1e-4 |x| (fp32, sums in other orders; see
 *    test_generate_decode);
 *  - greedy generation picks the argmax of the generator's own logits of the sequence so far,
 *    and stops at the end-of-document token given (which it does not return);
 *  - the TP = world generator and a TP = 1 one on each rank (MPI_COMM_SELF) generate the same
 *    tokens, greedy and sampled with a seed; another seed samples other tokens;
 *  - past the context (a prompt longer than it, and more new tokens than it holds): each greedy
 *    token the argmax after the window zoe/generate.h documents, and TP = world equal to TP = 1;
 *  - configurations it must refuse: tp other than the world size, no or a missing checkpoint,
 *    max_new_tokens 0, bad sampling parameters. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include "testing.h"
#include "zoe/generate.h"

enum { SEQ = 40, VOCAB = 300, PROMPT = 6, NEW = 16, LONG_PROMPT = SEQ + 3, LONG = SEQ / 2 + 10 };

static void save_checkpoint(zoe_model_family family, const char *dir, float *logits,
                            const int32_t *tokens) {
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    cfg.model = (zoe_model_config){.name = "tiny",
                                   .layers = 2,
                                   .hidden = 64,
                                   .heads = 4,
                                   .seq_len = SEQ,
                                   .vocab = VOCAB,
                                   .family = family,
                                   .kv_heads = family == ZOE_MODEL_LLAMA ? 2 : 0};
    cfg.tp = test_world_size();
    cfg.micro_batch = 1;
    cfg.grad_accum = 2;
    cfg.dpu_warmup = 0;
    cfg.warmup = 0;
    zoe_trainer *tr = NULL;
    if (!CHECK_OK(zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr))) return;
    /* one step on the tokens, so the saved weights are not the initial ones */
    for (int m = 0; m < 2; m++) CHECK_OK(zoe_trainer_micro_batch(tr, tokens, tokens, NULL));
    CHECK_OK(zoe_trainer_step(tr, 1e-2f, NULL));
    CHECK_OK(zoe_trainer_save(tr, dir, 0, NULL, 0));
    CHECK_OK(zoe_trainer_logits(tr, tokens, logits));
    zoe_trainer_destroy(tr);
}

static int32_t argmax(const float *row) {
    int32_t best = 0;
    for (int32_t i = 1; i < VOCAB; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

static zoe_generator *generator(MPI_Comm comm, const char *dir, zoe_sampling s, uint64_t seed,
                                int max_new) {
    zoe_generate_config cfg = ZOE_GENERATE_CONFIG_INITIALIZER;
    snprintf(cfg.checkpoint, sizeof cfg.checkpoint, "%s", dir);
    cfg.max_new_tokens = max_new;
    cfg.sampling = s;
    cfg.seed = seed;
    zoe_generator *g = NULL;
    CHECK_OK(zoe_generator_create(comm, &cfg, &g));
    return g;
}

/* Past the context: a prompt longer than it, and more new tokens than it holds. Each greedy
 * token is the argmax after the window the generator documents: the prompt's last SEQ tokens,
 * then one more per token until the cache is full, then the newest SEQ / 2 (zoe/generate.h). */
static void check_window(const char *dir, const int32_t *tokens, float *logits) {
    const zoe_sampling greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    zoe_generator *g = generator(MPI_COMM_WORLD, dir, greedy, 1, LONG);
    zoe_generator *one = generator(MPI_COMM_SELF, dir, greedy, 1, LONG);
    if (!g || !one) return;
    int32_t history[LONG_PROMPT + LONG], out[LONG], out1[LONG];
    for (int i = 0; i < LONG_PROMPT; i++) history[i] = tokens[(i * 7) % SEQ];
    int64_t n = 0, n1 = 0;
    CHECK_OK(zoe_generator_generate(g, history, LONG_PROMPT, -1, out, &n));
    CHECK_OK(zoe_generator_generate(one, history, LONG_PROMPT, -1, out1, &n1));
    CHECK(n == LONG && n1 == LONG && !memcmp(out, out1, sizeof out),
          "%d tokens past the context: TP=%d differs from TP=1", LONG, test_world_size());
    int64_t start = LONG_PROMPT - SEQ, len = SEQ, bad = 0;
    for (int i = 0; i < LONG; i++) {
        CHECK_OK(zoe_generator_logits(g, history + start, len, logits));
        bad += out[i] != argmax(logits + (size_t)(len - 1) * VOCAB);
        history[LONG_PROMPT + i] = out[i];
        if (len == SEQ)
            start = LONG_PROMPT + i + 1 - SEQ / 2, len = SEQ / 2;
        else
            len++;
    }
    CHECK(bad == 0, "%lld of %d tokens past the context are not the argmax after their window",
          (long long)bad, LONG);
    zoe_generator_destroy(g);
    zoe_generator_destroy(one);
}

static void check_family(zoe_model_family family, const char *dir) {
    int32_t tokens[SEQ];
    test_rng rng;
    test_rng_seed(&rng, 8);
    for (int i = 0; i < SEQ; i++) tokens[i] = (int32_t)test_rng_int(&rng, 0, VOCAB - 1);
    float *want = malloc((size_t)SEQ * VOCAB * sizeof(float));
    float *got = malloc((size_t)SEQ * VOCAB * sizeof(float));
    save_checkpoint(family, dir, want, tokens);
    const zoe_sampling greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    const zoe_sampling sampled = {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f};
    zoe_generator *g = generator(MPI_COMM_WORLD, dir, greedy, 1, NEW);
    if (!g) return;
    CHECK(zoe_generator_model(g)->vocab == VOCAB && !zoe_generator_byte_tokens(g),
          "model vocab %d, byte tokens %d", zoe_generator_model(g)->vocab,
          zoe_generator_byte_tokens(g));
    CHECK_OK(zoe_generator_logits(g, tokens, SEQ, got));
    double *gd = malloc((size_t)SEQ * VOCAB * sizeof(double));
    double *wd = malloc((size_t)SEQ * VOCAB * sizeof(double));
    for (size_t i = 0; i < (size_t)SEQ * VOCAB; i++) gd[i] = got[i], wd[i] = want[i];
    CHECK_CLOSE(gd, wd, (size_t)SEQ * VOCAB, 1e-4, 1e-4, "generator logits against the trainer's");

    /* greedy: each token the argmax of the logits of the sequence before it */
    int32_t seq[SEQ], out[NEW], out1[NEW];
    int64_t n = 0, n1 = 0;
    memcpy(seq, tokens, sizeof seq);
    CHECK_OK(zoe_generator_generate(g, seq, PROMPT, -1, out, &n));
    CHECK(n == NEW, "greedy generated %lld tokens, want %d", (long long)n, NEW);
    for (int i = 0; i < NEW; i++) seq[PROMPT + i] = out[i];
    CHECK_OK(zoe_generator_logits(g, seq, PROMPT + NEW, got));
    for (int i = 0; i < NEW; i++)
        CHECK(out[i] == argmax(got + (size_t)(PROMPT + i - 1) * VOCAB),
              "greedy token %d is %d, the argmax %d", i, out[i],
              argmax(got + (size_t)(PROMPT + i - 1) * VOCAB));
    /* the end-of-document token stops it, unreturned (first found among the tokens) */
    int first = 2;
    for (int i = 1; i >= 0; i--)
        if (out[i] == out[2]) first = i;
    CHECK_OK(zoe_generator_generate(g, tokens, PROMPT, out[2], out1, &n1));
    CHECK(n1 == first, "with eod %d: %lld tokens, want %d", out[2], (long long)n1, first);

    /* TP = 1 on this rank alone generates the same */
    zoe_generator *one = generator(MPI_COMM_SELF, dir, greedy, 1, NEW);
    if (one) CHECK_OK(zoe_generator_generate(one, tokens, PROMPT, -1, out1, &n1));
    CHECK(one && n1 == n && !memcmp(out, out1, sizeof out), "greedy TP=%d differs from TP=1",
          test_world_size());
    zoe_generator_destroy(one);
    zoe_generator_destroy(g);
    int32_t s5[NEW], s5one[NEW], s6[NEW];
    int64_t m5 = 0, m5one = 0, m6 = 0;
    g = generator(MPI_COMM_WORLD, dir, sampled, 5, NEW);
    one = generator(MPI_COMM_SELF, dir, sampled, 5, NEW);
    zoe_generator *other = generator(MPI_COMM_WORLD, dir, sampled, 6, NEW);
    if (g && one && other) {
        CHECK_OK(zoe_generator_generate(g, tokens, PROMPT, -1, s5, &m5));
        CHECK_OK(zoe_generator_generate(one, tokens, PROMPT, -1, s5one, &m5one));
        CHECK_OK(zoe_generator_generate(other, tokens, PROMPT, -1, s6, &m6));
        CHECK(m5 == NEW && m5one == NEW && !memcmp(s5, s5one, sizeof s5),
              "sampled TP=%d differs from TP=1", test_world_size());
        CHECK(memcmp(s5, s6, sizeof s5) != 0, "seeds 5 and 6 sampled the same tokens");
    }
    zoe_generator_destroy(g);
    zoe_generator_destroy(one);
    zoe_generator_destroy(other);
    check_window(dir, tokens, got);
    free(want), free(got), free(gd), free(wd);
}

static void check_refusals(const char *dir) {
    const zoe_generate_config base = ZOE_GENERATE_CONFIG_INITIALIZER;
    zoe_generate_config bad[6];
    for (int i = 0; i < 6; i++) {
        bad[i] = base;
        snprintf(bad[i].checkpoint, sizeof bad[i].checkpoint, "%s", dir);
    }
    bad[0].tp = test_world_size() + 1;
    bad[1].checkpoint[0] = '\0';
    snprintf(bad[2].checkpoint, sizeof bad[2].checkpoint, "%s/no-such-checkpoint", dir);
    bad[3].max_new_tokens = 0;
    bad[4].sampling.top_p = 0.0f;
    bad[5].sampling.temperature = -0.5f;
    for (int i = 0; i < 6; i++) {
        zoe_generator *g = NULL;
        const zoe_status st = zoe_generator_create(MPI_COMM_WORLD, &bad[i], &g);
        CHECK(st != ZOE_OK && !g, "bad generator configuration %d accepted", i);
        zoe_generator_destroy(g);
    }
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char dir[64] = "/tmp/zoe_test_generator_XXXXXX";
    if (test_rank() == 0) CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    char gpt[96], llama[96];
    snprintf(gpt, sizeof gpt, "%s/gpt", dir);
    snprintf(llama, sizeof llama, "%s/llama", dir);
    check_family(ZOE_MODEL_GPT, gpt);
    check_family(ZOE_MODEL_LLAMA, llama);
    check_refusals(gpt);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "removing %s", dir);
    }
    return test_finish("test_generator");
}
