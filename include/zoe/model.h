/* Model shapes: the families zoe builds (GPT-2, Llama), the shape of one model, and the named
 * presets with the runs they are documented at. The model layer (models/) owns them; the engine's
 * run configuration (zoe/train.h) holds one.
 *
 * Explained in docs/hf.md; docs/train.md. */
#ifndef ZOE_MODEL_H
#define ZOE_MODEL_H

#include <stdint.h>
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run a preset is documented at (README, DESIGN.md, the paper it is from): its TP x DP grid,
 * and the micro-batch and recompute setting it runs with there. */
typedef struct zoe_model_grid {
    int tp, dp;
    int micro_batch;
    int recompute;
} zoe_model_grid;
#define ZOE_MODEL_MAX_GRIDS 4

typedef enum zoe_model_family {
    ZOE_MODEL_GPT = 0,   /* GPT-2: LayerNorm, learned positions, GELU MLP, biases, tied head */
    ZOE_MODEL_LLAMA = 1, /* Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases */
} zoe_model_family;

/* Llama 3's RoPE frequency scaling (Hugging Face's rope_type "llama3"); factor 0: none. */
typedef struct zoe_rope_scaling {
    float factor, low_freq_factor, high_freq_factor;
    int original_max_position;
} zoe_rope_scaling;

typedef struct zoe_model_config {
    char name[32]; /* preset name, or "custom" */
    int layers;
    int hidden;
    int heads;
    int ffn;            /* MLP width; 0 means 4 * hidden */
    int seq_len;        /* context length (learned position embeddings) */
    int vocab;          /* real vocabulary; padded internally for TP */
    float dropout;      /* hidden dropout after attention and MLP projections */
    const char *source; /* where the preset's shape comes from (static string) */
    /* the documented runs, ended by tp = 0 (none for a custom shape); a test validates every
     * preset at each of them, and zoe-plan takes micro-batch and recompute from the one at its
     * --tp unless told */
    zoe_model_grid grids[ZOE_MODEL_MAX_GRIDS];
    /* The family and its fields; zero is GPT, so GPT shapes need none of them. */
    zoe_model_family family;
    int kv_heads;       /* Llama: key/value heads (0: heads, multi-head attention) */
    float rope_theta;   /* Llama: RoPE base (0: 10000) */
    float norm_eps;     /* Llama: RMSNorm epsilon (0: 1e-5) */
    int tie_embeddings; /* Llama: the LM head is the embedding (GPT's always is) */
    zoe_rope_scaling rope_scaling;
    /* GPT: rows of the learned position table (Hugging Face's n_positions); 0: seq_len. An
     * imported GPT-2 keeps its whole table when trained at a shorter --seq-len: the forward reads
     * rows [0, seq_len), the rows past it take no gradient and no weight decay, so they come
     * back from training bit-for-bit as they went in. */
    int max_positions;
} zoe_model_config;

const char *zoe_model_family_name(zoe_model_family family);

/* Fills *out with the named preset (demo, gpt2-124m, gpt2-350m, 1.3b, 2.7b, 6.7b, 10b, 13b, 70b;
 * llama-demo, llama-3.2-1b, llama-3-8b, llama-2-7b, llama-2-70b, llama-3-70b). */
zoe_status zoe_model_preset(const char *name, zoe_model_config *out);
int zoe_model_preset_count(void);
const zoe_model_config *zoe_model_preset_at(int index);
/* Parameters of the model as defined (unpadded vocabulary, tied embeddings counted once). */
int64_t zoe_model_param_count(const zoe_model_config *model);
/* Rows of the learned position table: max_positions, or seq_len when 0 (0 for Llama's RoPE). */
int zoe_model_position_rows(const zoe_model_config *model);

#ifdef __cplusplus
}
#endif
#endif
