/* The named model shapes, one table: docs and `zoe-train --list-models` print from it. */
#include <string.h>
#include "runtime/error.h"
#include "zoe/train.h"

#define GPT2_VOCAB 50257

static const zoe_model_config presets[] = {
    {"demo", 4, 128, 4, 0, 64, 257, 0.0f,
     "zoe's own: a byte-level model that learns the demo corpus in about a minute on 2 cores"},
    {"gpt2-124m", 12, 768, 12, 0, 1024, GPT2_VOCAB, 0.0f, "GPT-2 small (Radford et al. 2019)"},
    {"gpt2-350m", 24, 1024, 16, 0, 1024, GPT2_VOCAB, 0.0f, "GPT-2 medium (Radford et al. 2019)"},
    {"1.3b", 24, 2048, 16, 0, 2048, GPT2_VOCAB, 0.0f, "GPT-3 XL shape (Brown et al. 2020)"},
    {"2.7b", 32, 2560, 32, 0, 2048, GPT2_VOCAB, 0.0f, "GPT-3 2.7B shape (Brown et al. 2020)"},
    {"6.7b", 32, 4096, 32, 0, 2048, GPT2_VOCAB, 0.0f, "GPT-3 6.7B shape (Brown et al. 2020)"},
    {"10b", 50, 4096, 32, 0, 1024, GPT2_VOCAB, 0.0f,
     "the 10B GPT-2 of the ZeRO-Offload single-GPU experiments (50 x 4096)"},
    {"13b", 40, 5120, 40, 0, 2048, GPT2_VOCAB, 0.0f, "GPT-3 13B shape (Brown et al. 2020)"},
    {"70b", 69, 9216, 72, 0, 1024, GPT2_VOCAB, 0.0f,
     "ZeRO-Offload's largest DGX-2 model with TP=16 (69 x 9216, 12*L*h^2 = 70.3B)"},
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
