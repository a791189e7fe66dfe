/* The demo check of zoe-generate (run by test_generate_cli.sh on a model it trained briefly on
 * the demo corpus): for prompts cut from the corpus at document starts, the continuation the
 * generator samples (its defaults: temperature 0.8, top-p 0.95) has a lower per-token loss under
 * the model than random text of the same length, drawn uniformly from the bytes the corpus uses,
 * after the same prompt. Losses are the mean over the continuation's tokens of -log softmax,
 * in float64, from the generator's own cached logits (zoe_generator_logits, which
 * test_generate_decode checks against full forwards). Prints the mean losses, and the corpus's
 * own continuation's for scale.
 * usage: generate_score CHECKPOINT CORPUS */
#include <math.h>
#include <stdlib.h>
#include "data_util.h"
#include "testing.h"
#include "zoe/generate.h"

enum { PROMPTS = 4, PROMPT_LEN = 24, NEW = 64 };

/* Mean -log p(seq[i] | seq[..i]) over i in [first, n), from logits [n, vocab]. */
static double mean_loss(const float *logits, int32_t vocab, const int32_t *seq, int64_t first,
                        int64_t n) {
    double total = 0.0;
    for (int64_t i = first; i < n; i++) {
        const float *row = logits + (size_t)(i - 1) * (size_t)vocab;
        double m = -INFINITY, s = 0.0;
        for (int32_t c = 0; c < vocab; c++) m = fmax(m, row[c]);
        for (int32_t c = 0; c < vocab; c++) s += exp(row[c] - m);
        total += log(s) + m - row[seq[i]];
    }
    return total / (double)(n - first);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    size_t len = 0;
    char *corpus = argc == 3 ? read_file(argv[2], &len) : NULL;
    CHECK(corpus && len > 10000, "usage: generate_score CHECKPOINT CORPUS (corpus unreadable)");
    zoe_generate_config cfg = ZOE_GENERATE_CONFIG_INITIALIZER;
    if (argc == 3) snprintf(cfg.checkpoint, sizeof cfg.checkpoint, "%s", argv[1]);
    cfg.max_new_tokens = NEW;
    cfg.sampling = (zoe_sampling){.temperature = 0.8f, .top_k = 0, .top_p = 0.95f};
    cfg.seed = 11;
    zoe_generator *g = NULL;
    if (!corpus || !CHECK_OK(zoe_generator_create(MPI_COMM_WORLD, &cfg, &g)))
        return test_finish("generate_score");
    const int32_t vocab = zoe_generator_model(g)->vocab;
    int used[256] = {0}, alphabet[256], na = 0;
    for (size_t i = 0; i < len; i++) used[(unsigned char)corpus[i]] = 1;
    for (int b = 0; b < 256; b++)
        if (used[b]) alphabet[na++] = b;
    float *logits = malloc((size_t)(PROMPT_LEN + NEW) * (size_t)vocab * sizeof(float));
    test_rng rng;
    test_rng_seed(&rng, 21);
    double gen = 0, rnd = 0, real = 0;
    size_t at = 0;
    for (int p = 0; p < PROMPTS; p++) {
        /* the p-th document start after a tenth, a third, ... of the corpus */
        at = len / (size_t)(p + 2);
        while (at + 2 < len && !(corpus[at] == '\n' && corpus[at + 1] == '\n')) at++;
        at += 2;
        int32_t seq[PROMPT_LEN + NEW], out[NEW];
        for (int i = 0; i < PROMPT_LEN; i++) seq[i] = (unsigned char)corpus[at + (size_t)i];
        int64_t n = 0;
        CHECK_OK(zoe_generator_generate(g, seq, PROMPT_LEN, -1, out, &n));
        CHECK(n == NEW, "generated %lld tokens, want %d", (long long)n, NEW);
        for (int i = 0; i < NEW; i++) seq[PROMPT_LEN + i] = out[i];
        CHECK_OK(zoe_generator_logits(g, seq, PROMPT_LEN + NEW, logits));
        gen += mean_loss(logits, vocab, seq, PROMPT_LEN, PROMPT_LEN + NEW) / PROMPTS;
        for (int i = 0; i < NEW; i++) seq[PROMPT_LEN + i] = alphabet[test_rng_int(&rng, 0, na - 1)];
        CHECK_OK(zoe_generator_logits(g, seq, PROMPT_LEN + NEW, logits));
        rnd += mean_loss(logits, vocab, seq, PROMPT_LEN, PROMPT_LEN + NEW) / PROMPTS;
        for (int i = 0; i < NEW; i++)
            seq[PROMPT_LEN + i] = (unsigned char)corpus[at + PROMPT_LEN + (size_t)i];
        CHECK_OK(zoe_generator_logits(g, seq, PROMPT_LEN + NEW, logits));
        real += mean_loss(logits, vocab, seq, PROMPT_LEN, PROMPT_LEN + NEW) / PROMPTS;
    }
    if (test_rank() == 0)
        printf("per-token loss (nats) over %d continuations of %d tokens: generated %.3f, "
               "corpus %.3f, random text over the corpus's %d bytes %.3f\n",
               PROMPTS, NEW, gen, real, na, rnd);
    CHECK(gen < rnd, "generated text's loss %.3f is not below random text's %.3f", gen, rnd);
    CHECK(real < rnd, "the corpus's own loss %.3f is not below random text's %.3f", real, rnd);
    free(logits);
    free(corpus);
    zoe_generator_destroy(g);
    return test_finish("generate_score");
}
