/* Text generation from a checkpoint: the model rebuilt at any TP that divides it (one replica:
 * the world is the TP group), its weights loaded from the checkpoint, the prompt prefilled
 * through a key-value cache and then one token per step, sampled with temperature, top-k and
 * top-p from a seed. zoe-generate is built on this header.
 *
 * Explained in docs/generate.md. */
#ifndef ZOE_GENERATE_H
#define ZOE_GENERATE_H

#include <mpi.h>
#include <stdint.h>
#include "zoe/device.h"
#include "zoe/model.h"
#include "zoe/status.h"
#include "zoe/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sampling ----
 * From logits z over a vocabulary of V: temperature 0 is greedy (the argmax, ties to the lowest
 * id). Otherwise, in float64: z / temperature; with top_k > 0 only the k largest (ties to the
 * lower id) stay; softmax; with top_p < 1 only the smallest set of most probable tokens whose
 * probability sums to at least top_p stays (at least one token); renormalised; then the token
 * whose cumulative probability (in id order) first exceeds u, the step's uniform draw. */
typedef struct zoe_sampling {
    float temperature; /* >= 0 */
    int top_k;         /* 0: no limit */
    float top_p;       /* (0, 1]; 1: no limit */
} zoe_sampling;

/* Fails naming the first parameter out of range. */
zoe_status zoe_sampling_check(const zoe_sampling *s);
/* The distribution a step samples from: probs[V] (zero outside the kept set; a one-hot at the
 * argmax for temperature 0). Fails naming a parameter out of range. */
zoe_status zoe_sampling_distribution(const float *logits, int32_t V, const zoe_sampling *s,
                                     double *probs);
/* The token for uniform draw u in [0, 1). work: V doubles of scratch. */
zoe_status zoe_sample_token(const float *logits, int32_t V, const zoe_sampling *s, double u,
                            double *work, int32_t *token);
/* The uniform draw of step `step` of seed `seed`: a counter-based hash, so a run is reproduced
 * from (seed, step) alone. */
double zoe_sampling_uniform(uint64_t seed, uint64_t step);

/* ---- the generator ---- */
typedef struct zoe_generate_config {
    size_t struct_size; /* set by the initializer */
    int api_version;
    char checkpoint[ZOE_PATH_MAX]; /* a checkpoint directory, or a directory of them (newest) */
    zoe_backend backend;
    int tp;                /* tensor-parallel size: the world size (0: the world size) */
    int max_new_tokens;    /* > 0 */
    zoe_sampling sampling; /* ZOE_GENERATE_CONFIG_INITIALIZER: greedy */
    uint64_t seed;
} zoe_generate_config;

#define ZOE_GENERATE_CONFIG_INITIALIZER                                                            \
    {                                                                                              \
        ZOE_STRUCT_VERSION(zoe_generate_config), .max_new_tokens = 64, .sampling = {               \
            .temperature = 0.0f,                                                                   \
            .top_k = 0,                                                                            \
            .top_p = 1.0f                                                                          \
        }                                                                                          \
    }

typedef struct zoe_generator zoe_generator;

/* Collective over world. Checks the configuration (a message naming the bad value; a world size
 * other than tp is refused: generation runs one replica), resolves and reads the checkpoint's
 * trainer.json, builds the model at TP = world size and loads the weights (every tensor's
 * checksum verified). */
zoe_status zoe_generator_create(MPI_Comm world, const zoe_generate_config *cfg,
                                zoe_generator **out);
void zoe_generator_destroy(zoe_generator *g);
/* The checkpoint's model shape (vocab, seq_len) and its data's tokenizer kind: 1 when it was
 * trained on zoe's byte tokens (a .txt corpus or a 257-token vocabulary), 0 otherwise. */
const zoe_model_config *zoe_generator_model(const zoe_generator *g);
int zoe_generator_byte_tokens(const zoe_generator *g);
/* Collective. Generates after prompt[0..n_prompt) (n_prompt >= 1) into out (max_new_tokens
 * entries); *n_out is the count. Stops after max_new_tokens or at eod (>= 0; not written to out).
 * The model sees at most its context: a longer prompt enters by its last seq_len tokens, and when
 * the cache is full it is rebuilt from the newest seq_len / 2 tokens (one prefill per seq_len / 2
 * new tokens). Every rank returns the same tokens: rank 0 samples and broadcasts. */
zoe_status zoe_generator_generate(zoe_generator *g, const int32_t *prompt, int64_t n_prompt,
                                  int32_t eod, int32_t *out, int64_t *n_out);
/* Collective. The logits of tokens[0..n) (n within the context) as one sequence through the KV
 * cache, in prefill chunks: host fp32 [n, vocab] over the real vocabulary on every rank.
 * Scoring text and tests use it. */
zoe_status zoe_generator_logits(zoe_generator *g, const int32_t *tokens, int64_t n, float *logits);

#ifdef __cplusplus
}
#endif
#endif
