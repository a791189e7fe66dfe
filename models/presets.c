/* The named model shapes, one table: docs and `zoe-train --list-models` print from it, and
 * each row names the TP x DP grids it is documented to run at (tests/plan validates them).
 *
 * Explained in docs/train.md, "A run on your own text"; docs/plan.md. */
#include <string.h>
#include "runtime/error.h"
#include "zoe/model.h"

#define GPT2_VOCAB 50257

/* GPT rows name their family, so that the Llama fields after it read as zero (unused). */
static const zoe_model_config presets[] = {
    {.name = "demo",
     .layers = 4,
     .hidden = 128,
     .heads = 4,
     .seq_len = 64,
     .vocab = 257,
     .source = "zoe's own: a byte-level model that learns the demo corpus in about a minute on 2 "
               "cores",
     /* scripts/demo: TP=2 x DP=2 */
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 8}, {.tp = 2, .dp = 2, .micro_batch = 8}}},
    {.name = "gpt2-124m",
     .layers = 12,
     .hidden = 768,
     .heads = 12,
     .seq_len = 1024,
     .vocab = GPT2_VOCAB,
     .source = "GPT-2 small (Radford et al. 2019)",
     /* README: mpirun -np 8 --tp 2 */
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 4}, {.tp = 2, .dp = 4, .micro_batch = 4}}},
    {.name = "gpt2-350m",
     .layers = 24,
     .hidden = 1024,
     .heads = 16,
     .seq_len = 1024,
     .vocab = GPT2_VOCAB,
     .source = "GPT-2 medium (Radford et al. 2019)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 4}}},
    {.name = "1.3b",
     .layers = 24,
     .hidden = 2048,
     .heads = 16,
     .seq_len = 2048,
     .vocab = GPT2_VOCAB,
     .source = "GPT-3 XL shape (Brown et al. 2020)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 4, .recompute = 1}}},
    {.name = "2.7b",
     .layers = 32,
     .hidden = 2560,
     .heads = 32,
     .seq_len = 2048,
     .vocab = GPT2_VOCAB,
     .source = "GPT-3 2.7B shape (Brown et al. 2020)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 4, .recompute = 1}}},
    {.name = "6.7b",
     .layers = 32,
     .hidden = 4096,
     .heads = 32,
     .seq_len = 2048,
     .vocab = GPT2_VOCAB,
     .source = "GPT-3 6.7B shape (Brown et al. 2020)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 4, .recompute = 1}}},
    /* one V100-32GB with the paper's micro-batch 10 and recompute */
    {.name = "10b",
     .layers = 50,
     .hidden = 4096,
     .heads = 32,
     .seq_len = 1024,
     .vocab = GPT2_VOCAB,
     .source = "the 10B GPT-2 of the ZeRO-Offload single-GPU experiments (50 x 4096)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 10, .recompute = 1}}},
    /* DESIGN.md: 13B on a single GPU */
    {.name = "13b",
     .layers = 40,
     .hidden = 5120,
     .heads = 40,
     .seq_len = 2048,
     .vocab = GPT2_VOCAB,
     .source = "GPT-3 13B shape (Brown et al. 2020)",
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 1, .recompute = 1}}},
    /* One DGX-2 at TP=16 (micro-batch 8 is ours). The paper gives layers and hidden size, not
     * heads: 64 heads of 144 divide TP=16 (4 per GPU) and come closest to GPT-3's 128-wide
     * heads (72 heads of 128 do not divide 16); 144 is a multiple of 16 for tensor-core tiles. */
    {.name = "70b",
     .layers = 69,
     .hidden = 9216,
     .heads = 64,
     .seq_len = 1024,
     .vocab = GPT2_VOCAB,
     .source = "ZeRO-Offload's largest DGX-2 model with TP=16 (69 x 9216, 12*L*h^2 = 70.3B), 64 "
               "heads of 144",
     .grids = {{.tp = 16, .dp = 1, .micro_batch = 8, .recompute = 1}}},
};

/* ---- Llama family (the llama branch's rows; kept apart from the GPT table above) ----
 * Shapes from the models' Hugging Face config.json files (meta-llama/<model>: num_hidden_layers,
 * hidden_size, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
 * rope_theta, rms_norm_eps, tie_word_embeddings, rope_scaling) and the papers (Touvron et al.
 * 2023, "Llama 2"; Grattafiori et al. 2024, "The Llama 3 Herd of Models"). seq_len is the
 * training context (Llama 2: 4096, Llama 3: 8192). */
#define LLAMA2_VOCAB 32000
#define LLAMA3_VOCAB 128256

/* Documented runs: one GPU with recompute for the small ones, TP=8 on one 8-GPU box for 8B, and
 * the 70B models on a DGX-2 at TP=16 (8 KV heads: each replicated on 2 ranks). */
static const zoe_model_config llama_presets[] = {
    {.name = "llama-demo",
     .layers = 4,
     .hidden = 128,
     .heads = 4,
     .ffn = 352,
     .seq_len = 64,
     .vocab = 257,
     .source = "zoe's own: a byte-level Llama (GQA 4:2) for the demo corpus",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 2,
     .rope_theta = 10000.0f,
     .norm_eps = 1e-5f,
     .tie_embeddings = 1,
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 8}, {.tp = 2, .dp = 2, .micro_batch = 8}}},
    {.name = "llama-3.2-1b",
     .layers = 16,
     .hidden = 2048,
     .heads = 32,
     .ffn = 8192,
     .seq_len = 8192,
     .vocab = LLAMA3_VOCAB,
     .source = "meta-llama/Llama-3.2-1B config.json",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 8,
     .rope_theta = 500000.0f,
     .norm_eps = 1e-5f,
     .tie_embeddings = 1,
     .rope_scaling = {.factor = 32.0f,
                      .low_freq_factor = 1.0f,
                      .high_freq_factor = 4.0f,
                      .original_max_position = 8192},
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 1, .recompute = 1}}},
    {.name = "llama-3-8b",
     .layers = 32,
     .hidden = 4096,
     .heads = 32,
     .ffn = 14336,
     .seq_len = 8192,
     .vocab = LLAMA3_VOCAB,
     .source = "meta-llama/Meta-Llama-3-8B config.json",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 8,
     .rope_theta = 500000.0f,
     .norm_eps = 1e-5f,
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 1, .recompute = 1},
               {.tp = 8, .dp = 1, .micro_batch = 1, .recompute = 1}}},
    {.name = "llama-2-7b",
     .layers = 32,
     .hidden = 4096,
     .heads = 32,
     .ffn = 11008,
     .seq_len = 4096,
     .vocab = LLAMA2_VOCAB,
     .source = "meta-llama/Llama-2-7b-hf config.json",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 32,
     .rope_theta = 10000.0f,
     .norm_eps = 1e-5f,
     .grids = {{.tp = 1, .dp = 1, .micro_batch = 1, .recompute = 1}}},
    {.name = "llama-2-70b",
     .layers = 80,
     .hidden = 8192,
     .heads = 64,
     .ffn = 28672,
     .seq_len = 4096,
     .vocab = LLAMA2_VOCAB,
     .source = "meta-llama/Llama-2-70b-hf config.json",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 8,
     .rope_theta = 10000.0f,
     .norm_eps = 1e-5f,
     .grids = {{.tp = 16, .dp = 1, .micro_batch = 1, .recompute = 1}}},
    {.name = "llama-3-70b",
     .layers = 80,
     .hidden = 8192,
     .heads = 64,
     .ffn = 28672,
     .seq_len = 8192,
     .vocab = LLAMA3_VOCAB,
     .source = "meta-llama/Meta-Llama-3-70B config.json",
     .family = ZOE_MODEL_LLAMA,
     .kv_heads = 8,
     .rope_theta = 500000.0f,
     .norm_eps = 1e-5f,
     .grids = {{.tp = 16, .dp = 1, .micro_batch = 1, .recompute = 1}}},
};

enum {
    GPT_PRESETS = sizeof presets / sizeof presets[0],
    LLAMA_PRESETS = sizeof llama_presets / sizeof llama_presets[0],
};

const char *zoe_model_family_name(zoe_model_family family) {
    return family == ZOE_MODEL_LLAMA ? "llama" : "gpt";
}

int zoe_model_preset_count(void) {
    return GPT_PRESETS + LLAMA_PRESETS;
}

const zoe_model_config *zoe_model_preset_at(int index) {
    if (index >= 0 && index < GPT_PRESETS) return &presets[index];
    if (index >= GPT_PRESETS && index < GPT_PRESETS + LLAMA_PRESETS)
        return &llama_presets[index - GPT_PRESETS];
    return NULL;
}

zoe_status zoe_model_preset(const char *name, zoe_model_config *out) {
    for (int i = 0; name && i < zoe_model_preset_count(); i++)
        if (strcmp(zoe_model_preset_at(i)->name, name) == 0) {
            *out = *zoe_model_preset_at(i);
            return ZOE_OK;
        }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "unknown model '%s' (zoe-train --list-models shows the presets)",
                    name ? name : "(null)");
}

/* Llama: per layer 2 RMSNorms, q and proj (h x h), k and v (h x kv_heads * head_dim each),
 * gate, up and down (h x f); the final norm, the embedding and an untied head. */
static int64_t llama_param_count(const zoe_model_config *m) {
    const int64_t h = m->hidden, f = m->ffn, kv = m->kv_heads ? m->kv_heads : m->heads;
    const int64_t kv_width = kv * (h / m->heads);
    const int64_t layer = 2 * h + 2 * h * h + 2 * h * kv_width + 3 * h * f;
    return (int64_t)m->vocab * h * (m->tie_embeddings ? 1 : 2) + m->layers * layer + h;
}

int zoe_model_position_rows(const zoe_model_config *m) {
    if (m->family == ZOE_MODEL_LLAMA) return 0;
    return m->max_positions ? m->max_positions : m->seq_len;
}

int64_t zoe_model_param_count(const zoe_model_config *m) {
    if (m->family == ZOE_MODEL_LLAMA) return llama_param_count(m);
    int64_t h = m->hidden, f = m->ffn ? m->ffn : 4 * (int64_t)m->hidden;
    /* per layer: 2 LayerNorms, QKV and proj with biases, fc1 and fc2 with biases */
    int64_t layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
    return (int64_t)m->vocab * h + (int64_t)zoe_model_position_rows(m) * h + m->layers * layer +
           2 * h;
}
