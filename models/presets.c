/* The named model shapes, one table: docs and `zoe-train --list-models` print from it, and
 * each row names the TP x DP grids it is documented to run at (tests/plan validates them). */
#include <string.h>
#include "runtime/error.h"
#include "zoe/train.h"

#define GPT2_VOCAB 50257

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

int zoe_model_preset_count(void) {
    return (int)(sizeof presets / sizeof presets[0]);
}

const zoe_model_config *zoe_model_preset_at(int index) {
    return index >= 0 && index < zoe_model_preset_count() ? &presets[index] : NULL;
}

zoe_status zoe_model_preset(const char *name, zoe_model_config *out) {
    for (int i = 0; name && i < zoe_model_preset_count(); i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i];
            return ZOE_OK;
        }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "unknown model '%s' (zoe-train --list-models shows the presets)",
                    name ? name : "(null)");
}

int64_t zoe_model_param_count(const zoe_model_config *m) {
    int64_t h = m->hidden, f = m->ffn ? m->ffn : 4 * (int64_t)m->hidden;
    /* per layer: 2 LayerNorms, QKV and proj with biases, fc1 and fc2 with biases */
    int64_t layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h);
    return (int64_t)m->vocab * h + (int64_t)m->seq_len * h + m->layers * layer + 2 * h;
}
