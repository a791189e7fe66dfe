/* Export to Hugging Face GPT-2: transformers' names, its Conv1D weights ([in, out], the
 * transpose of zoe's [out, in]), c_attn's columns [q | k | v] each head-major where zoe's QKV
 * rows are [head][q, k, v][head_dim], and no lm_head (GPT-2 ties it to wte). One tensor in
 * memory at a time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/checkpoint_impl.h"
#include "engine/safetensors.h"
#include "runtime/error.h"

typedef enum { HF_COPY, HF_TRANSPOSE, HF_QKV_WEIGHT, HF_QKV_BIAS } hf_kind;

typedef struct hf_entry {
    char hf[128], zoe[128];
    hf_kind kind;
} hf_entry;

typedef struct hf_export {
    char model_path[ZOE_PATH_MAX * 2];
    zoe_safetensors src;
    hf_entry *entries;
    int count;
    int64_t hidden, heads;
    float *scratch; /* one source tensor */
} hf_export;

static void add_entry(hf_export *x, const char *hf, const char *zoe, hf_kind kind) {
    hf_entry *e = &x->entries[x->count++];
    snprintf(e->hf, sizeof e->hf, "%s", hf);
    snprintf(e->zoe, sizeof e->zoe, "%s", zoe);
    e->kind = kind;
}

static void list_entries(hf_export *x, int layers) {
    add_entry(x, "transformer.wte.weight", "wte", HF_COPY);
    add_entry(x, "transformer.wpe.weight", "wpe", HF_COPY);
    static const struct {
        const char *hf, *zoe;
        hf_kind kind;
    } block[] = {
        {"ln_1.weight", "ln_1.weight", HF_COPY},
        {"ln_1.bias", "ln_1.bias", HF_COPY},
        {"attn.c_attn.weight", "attn.linear_qkv.weight", HF_QKV_WEIGHT},
        {"attn.c_attn.bias", "attn.linear_qkv.bias", HF_QKV_BIAS},
        {"attn.c_proj.weight", "attn.linear_proj.weight", HF_TRANSPOSE},
        {"attn.c_proj.bias", "attn.linear_proj.bias", HF_COPY},
        {"ln_2.weight", "ln_2.weight", HF_COPY},
        {"ln_2.bias", "ln_2.bias", HF_COPY},
        {"mlp.c_fc.weight", "mlp.linear_fc1.weight", HF_TRANSPOSE},
        {"mlp.c_fc.bias", "mlp.linear_fc1.bias", HF_COPY},
        {"mlp.c_proj.weight", "mlp.linear_fc2.weight", HF_TRANSPOSE},
        {"mlp.c_proj.bias", "mlp.linear_fc2.bias", HF_COPY},
    };
    for (int l = 0; l < layers; l++)
        for (size_t b = 0; b < sizeof block / sizeof block[0]; b++) {
            char hf[128], zoe[128];
            snprintf(hf, sizeof hf, "transformer.h.%d.%s", l, block[b].hf);
            snprintf(zoe, sizeof zoe, "h.%d.%s", l, block[b].zoe);
            add_entry(x, hf, zoe, block[b].kind);
        }
    add_entry(x, "transformer.ln_f.weight", "ln_f.weight", HF_COPY);
    add_entry(x, "transformer.ln_f.bias", "ln_f.bias", HF_COPY);
}

/* zoe's QKV row of (part s in {q, k, v}, head h, dim d); HF's column is s * C + h * D + d. */
static int64_t qkv_row(const hf_export *x, int64_t hf_col) {
    int64_t C = x->hidden, D = C / x->heads;
    int64_t s = hf_col / C, h = (hf_col % C) / D, d = hf_col % D;
    return h * 3 * D + s * D + d;
}

static zoe_status fill(void *user, int index, void *dst) {
    hf_export *x = user;
    const hf_entry *e = &x->entries[index];
    const zoe_st_tensor *t = zoe_safetensors_find(&x->src, e->zoe);
    ZOE_TRY(zoe_safetensors_read_data(x->model_path, &x->src, t, 0, t->end - t->begin, x->scratch));
    const float *in = x->scratch;
    float *out = dst;
    int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
    switch (e->kind) {
    case HF_COPY:
        memcpy(out, in, (size_t)(rows * cols) * sizeof(float));
        break;
    case HF_TRANSPOSE: /* zoe [out, in] -> HF [in, out] */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) out[j * rows + i] = in[i * cols + j];
        break;
    case HF_QKV_WEIGHT: /* zoe [3C, C] -> HF [C, 3C], columns reordered */
        for (int64_t j = 0; j < rows; j++) {
            int64_t r = qkv_row(x, j);
            for (int64_t i = 0; i < cols; i++) out[i * rows + j] = in[r * cols + i];
        }
        break;
    case HF_QKV_BIAS:
        for (int64_t j = 0; j < rows; j++) out[j] = in[qkv_row(x, j)];
        break;
    }
    return ZOE_OK;
}

static zoe_status build(hf_export *x, int layers, zoe_safetensors *out) {
    size_t largest = 1;
    for (int i = 0; i < x->count; i++) {
        const zoe_st_tensor *t = zoe_safetensors_find(&x->src, x->entries[i].zoe);
        if (!t || t->dtype != ZOE_ST_F32)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: no F32 tensor %s for a %d-layer GPT",
                            x->model_path, x->entries[i].zoe, layers);
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 1};
        if (x->entries[i].kind == HF_TRANSPOSE || x->entries[i].kind == HF_QKV_WEIGHT)
            shape[0] = t->shape[1], shape[1] = t->shape[0];
        ZOE_TRY(zoe_safetensors_add(out, x->entries[i].hf, ZOE_ST_F32, t->ndim, shape));
        if (t->end - t->begin > largest) largest = (size_t)(t->end - t->begin);
    }
    ZOE_TRY(zoe_safetensors_set_meta(out, "format", "pt"));
    x->scratch = malloc(largest);
    return x->scratch ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "export buffer");
}

static int json_int(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valueint : 0;
}

static char *hf_config(const cJSON *model) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    int vocab = json_int(model, "vocab");
    cJSON_AddNumberToObject(c, "vocab_size", vocab);
    cJSON_AddNumberToObject(c, "n_positions", json_int(model, "seq_len"));
    cJSON_AddNumberToObject(c, "n_embd", json_int(model, "hidden"));
    cJSON_AddNumberToObject(c, "n_layer", json_int(model, "layers"));
    cJSON_AddNumberToObject(c, "n_head", json_int(model, "heads"));
    cJSON_AddNumberToObject(c, "n_inner", json_int(model, "ffn"));
    cJSON_AddStringToObject(c, "activation_function", "gelu_new"); /* zoe's tanh GELU */
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    cJSON_AddNumberToObject(c, "resid_pdrop", cJSON_IsNumber(dropout) ? dropout->valuedouble : 0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddNumberToObject(c, "bos_token_id", vocab - 1); /* zoe's end-of-document token */
    cJSON_AddNumberToObject(c, "eos_token_id", vocab - 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

zoe_status zoe_checkpoint_export_hf(const char *path, const char *out_dir) {
    char dir[ZOE_PATH_MAX], out[ZOE_PATH_MAX * 2];
    ZOE_TRY(zoe_checkpoint_resolve(path, dir, sizeof dir));
    cJSON *root = NULL;
    ZOE_TRY(ckpt_read_trainer_json(dir, &root));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    int layers = json_int(model, "layers");
    hf_export x = {.hidden = json_int(model, "hidden"), .heads = json_int(model, "heads")};
    snprintf(x.model_path, sizeof x.model_path, "%s/%s", dir, CKPT_MODEL_FILE);
    x.entries =
        layers > 0 && x.heads > 0 ? calloc((size_t)(12 * layers + 4), sizeof *x.entries) : NULL;
    zoe_status st = x.entries ? zoe_safetensors_read_header(x.model_path, &x.src)
                              : zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s/%s: bad model shape", dir,
                                         CKPT_TRAINER_FILE);
    zoe_safetensors hf;
    zoe_safetensors_init(&hf);
    if (st == ZOE_OK) list_entries(&x, layers);
    if (st == ZOE_OK) st = build(&x, layers, &hf);
    if (st == ZOE_OK && mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        st = zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", out_dir, strerror(errno));
    if (st == ZOE_OK) {
        snprintf(out, sizeof out, "%s/model.safetensors", out_dir);
        st = zoe_safetensors_write_stream(out, &hf, fill, &x);
    }
    if (st == ZOE_OK) {
        char *config = hf_config(model);
        snprintf(out, sizeof out, "%s/config.json", out_dir);
        st = config ? ckpt_write_text(out, config) : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "config");
        free(config);
    }
    zoe_safetensors_free(&hf);
    zoe_safetensors_free(&x.src);
    free(x.entries);
    free(x.scratch);
    cJSON_Delete(root);
    return st;
}
