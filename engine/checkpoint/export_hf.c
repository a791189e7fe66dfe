/* Export to Hugging Face, GPT-2 or Llama: transformers' names and layouts through the one
 * mapping of engine/hf/hf.h (GPT-2's Conv1D weights transposed and c_attn's columns regrouped,
 * Llama's k/v and gate/up split out of zoe's fused rows), the vocabulary's padding rows
 * dropped, and no lm_head when the head is tied. One source tensor in memory at a time.
 *
 * Explained in docs/hf.md, "Export". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "engine/checkpoint/directory.h"
#include "engine/hf/hf.h"
#include "engine/formats/safetensors.h"
#include "runtime/error.h"

/* One HF tensor of the output: part `part` of zoe tensor `zoe`'s mapping. */
typedef struct hf_entry {
    const zoe_st_tensor *zoe;
    zoe_hf_source src;
    int part;
} hf_entry;

typedef struct hf_export {
    char model_path[ZOE_PATH_MAX * 2];
    zoe_model_config model;
    zoe_safetensors src;
    hf_entry *entries;
    int count;
    float *scratch; /* one source tensor */
} hf_export;

/* HF tensor `index` of the output: the rows of its zoe tensor that map to it, placed at their
 * HF row (or column, transposed). */
static zoe_status fill(void *user, int index, void *dst) {
    hf_export *x = user;
    const hf_entry *e = &x->entries[index];
    const zoe_st_tensor *t = e->zoe;
    ZOE_TRY(zoe_safetensors_read_data(x->model_path, &x->src, t, 0, t->end - t->begin, x->scratch));
    const float *in = x->scratch;
    float *out = dst;
    const int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
    const int64_t hcols = e->src.shape[e->part][1];
    for (int64_t i = 0; i < rows; i++) {
        int which, transposed;
        int64_t at;
        zoe_hf_row_origin(&x->model, &e->src, i, &which, &at, &transposed);
        if (which != e->part || at < 0) continue; /* the other part, or vocabulary padding */
        for (int64_t j = 0; j < cols; j++)
            out[transposed ? j * hcols + at : at * hcols + j] = in[i * cols + j];
    }
    return ZOE_OK;
}

static zoe_status build(hf_export *x, zoe_safetensors *out) {
    size_t largest = 1;
    x->entries = calloc(2 * (size_t)x->src.count + 1, sizeof *x->entries);
    if (!x->entries) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "export table");
    for (int i = 0; i < x->src.count; i++) {
        const zoe_st_tensor *t = &x->src.tensors[i];
        if (t->dtype != ZOE_ST_F32)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s is not F32", x->model_path,
                            t->name);
        zoe_hf_source src;
        ZOE_TRY(
            zoe_hf_source_of(&x->model, t->name, t->shape[0], t->ndim > 1 ? t->shape[1] : 1, &src));
        for (int k = 0; k < src.count; k++) {
            x->entries[x->count++] = (hf_entry){.zoe = t, .src = src, .part = k};
            ZOE_TRY(zoe_safetensors_add(out, src.hf[k], ZOE_ST_F32, src.ndim, src.shape[k]));
        }
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

static double json_double(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The model shape trainer.json records (engine/checkpoint/checkpoint.c). */
static zoe_model_config model_of(const cJSON *model) {
    zoe_model_config m = {.layers = json_int(model, "layers"),
                          .hidden = json_int(model, "hidden"),
                          .heads = json_int(model, "heads"),
                          .ffn = json_int(model, "ffn"),
                          .seq_len = json_int(model, "seq_len"),
                          /* absent (0, so seq_len) in checkpoints from before the field */
                          .max_positions = json_int(model, "max_positions"),
                          .vocab = json_int(model, "vocab"),
                          .dropout = (float)json_double(model, "dropout")};
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(model, "family");
    if (cJSON_IsString(family) && strcmp(family->valuestring, "llama") == 0) {
        m.family = ZOE_MODEL_LLAMA;
        m.kv_heads = json_int(model, "kv_heads");
        m.rope_theta = (float)json_double(model, "rope_theta");
        m.norm_eps = (float)json_double(model, "norm_eps");
        m.tie_embeddings = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "tie_embeddings"));
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(model, "rope_scaling");
        if (cJSON_IsObject(rs))
            m.rope_scaling =
                (zoe_rope_scaling){.factor = (float)json_double(rs, "factor"),
                                   .low_freq_factor = (float)json_double(rs, "low_freq_factor"),
                                   .high_freq_factor = (float)json_double(rs, "high_freq_factor"),
                                   .original_max_position = json_int(rs, "original_max_position")};
    }
    return m;
}

static void gpt2_config(cJSON *c, const zoe_model_config *m) {
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"),
                         cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    cJSON_AddNumberToObject(c, "vocab_size", m->vocab);
    cJSON_AddNumberToObject(c, "n_positions", zoe_model_position_rows(m));
    cJSON_AddNumberToObject(c, "n_embd", m->hidden);
    cJSON_AddNumberToObject(c, "n_layer", m->layers);
    cJSON_AddNumberToObject(c, "n_head", m->heads);
    cJSON_AddNumberToObject(c, "n_inner", m->ffn);
    cJSON_AddStringToObject(c, "activation_function", "gelu_new"); /* zoe's tanh GELU */
    cJSON_AddNumberToObject(c, "resid_pdrop", m->dropout);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
}

static void llama_config(cJSON *c, const zoe_model_config *m) {
    cJSON_AddItemToArray(cJSON_AddArrayToObject(c, "architectures"),
                         cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(c, "model_type", "llama");
    cJSON_AddNumberToObject(c, "vocab_size", m->vocab);
    cJSON_AddNumberToObject(c, "max_position_embeddings", m->seq_len);
    cJSON_AddNumberToObject(c, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(c, "intermediate_size", m->ffn);
    cJSON_AddNumberToObject(c, "num_hidden_layers", m->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", m->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", m->kv_heads ? m->kv_heads : m->heads);
    cJSON_AddNumberToObject(c, "head_dim", m->hidden / m->heads);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "rms_norm_eps", m->norm_eps > 0 ? m->norm_eps : 1e-5);
    cJSON_AddNumberToObject(c, "rope_theta", m->rope_theta > 0 ? m->rope_theta : 10000.0);
    const zoe_rope_scaling *rs = &m->rope_scaling;
    if (rs->factor > 0) {
        cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        cJSON_AddNumberToObject(r, "factor", rs->factor);
        cJSON_AddNumberToObject(r, "low_freq_factor", rs->low_freq_factor);
        cJSON_AddNumberToObject(r, "high_freq_factor", rs->high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", rs->original_max_position);
    }
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tie_embeddings);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
}

/* config.json of the export. A model zoe initialised gets what zoe knows of it, and no token
 * ids (zoe has no tokenizer to take them from; transformers' own defaults apply). An imported
 * model (imported: its config.json, which the checkpoint keeps) gets that config back, every key
 * as it was (its token ids, its context length rather than the training --seq-len, its rope
 * scaling, tie flag and whatever else transformers reads), with the keys of zoe's own config
 * added where it lacks them; only the dtype is zoe's, the fp32 of the weights written. */
static char *hf_config(const zoe_model_config *m, const cJSON *imported) {
    cJSON *c = imported ? cJSON_Duplicate(imported, 1) : cJSON_CreateObject();
    cJSON *own = cJSON_CreateObject();
    if (!c || !own) {
        cJSON_Delete(c);
        cJSON_Delete(own);
        return NULL;
    }
    if (m->family == ZOE_MODEL_LLAMA)
        llama_config(own, m);
    else
        gpt2_config(own, m);
    for (const cJSON *k = own->child; k; k = k->next)
        if (!cJSON_HasObjectItem(c, k->string))
            cJSON_AddItemToObject(c, k->string, cJSON_Duplicate(k, 1));
    cJSON_Delete(own);
    int dtype_key = cJSON_HasObjectItem(c, "dtype"); /* transformers 5's name of torch_dtype */
    cJSON_DeleteItemFromObjectCaseSensitive(c, "dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "torch_dtype");
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    if (dtype_key) cJSON_AddStringToObject(c, "dtype", "float32");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* mkdir -p: every missing directory of path, each 0755. */
static zoe_status make_dirs(const char *path) {
    char p[ZOE_PATH_MAX * 2];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1;; c++) {
        int end = *c == '\0';
        if (*c == '/' || end) {
            *c = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            if (end) break;
            *c = '/';
        }
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zoe_fail(ZOE_ERR_IO, "%s is not a directory", path);
    return ZOE_OK;
}

zoe_status zoe_checkpoint_export_hf(const char *path, const char *out_dir) {
    char dir[ZOE_PATH_MAX], out[ZOE_PATH_MAX * 2];
    cJSON *root = NULL;
    ZOE_TRY(ckpt_open(path, dir, sizeof dir, &root));
    hf_export x = {.model = model_of(cJSON_GetObjectItemCaseSensitive(root, "model"))};
    snprintf(x.model_path, sizeof x.model_path, "%s/%s", dir, CKPT_MODEL_FILE);
    zoe_status st =
        x.model.layers > 0 && x.model.heads > 0
            ? zoe_safetensors_read_header(x.model_path, &x.src)
            : zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s/%s: bad model shape", dir, CKPT_TRAINER_FILE);
    zoe_safetensors hf;
    zoe_safetensors_init(&hf);
    if (st == ZOE_OK) st = build(&x, &hf);
    if (st == ZOE_OK) st = make_dirs(out_dir);
    int writing = st == ZOE_OK;
    /* Each file under a temporary name, renamed once it is complete and synced: a full disk
     * leaves the files that were there and no partial one. */
    char tmp[ZOE_PATH_MAX * 2 + 8];
    snprintf(out, sizeof out, "%s/model.safetensors", out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (st == ZOE_OK) st = zoe_safetensors_write_stream(tmp, &hf, fill, &x);
    if (st == ZOE_OK) st = ckpt_replace(tmp, out);
    if (st != ZOE_OK && writing) unlink(tmp);
    if (st == ZOE_OK) {
        const cJSON *imported = cJSON_GetObjectItemCaseSensitive(root, "hf_config");
        char *config = hf_config(&x.model, cJSON_IsObject(imported) ? imported : NULL);
        snprintf(out, sizeof out, "%s/config.json", out_dir);
        snprintf(tmp, sizeof tmp, "%s.tmp", out);
        st = config ? ckpt_write_text(tmp, config) : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "config");
        if (st == ZOE_OK) st = ckpt_replace(tmp, out);
        if (st != ZOE_OK) unlink(tmp);
        free(config);
    }
    if (st != ZOE_OK && writing) { /* how much room the export wanted */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zoe_last_error());
        st = zoe_fail(st, "%s (the export needs %llu bytes; %lld bytes are free in %s)", msg,
                      (unsigned long long)(hf.data_offset + hf.data_size),
                      (long long)ckpt_free_bytes(out_dir), out_dir);
    }
    zoe_safetensors_free(&hf);
    zoe_safetensors_free(&x.src);
    free(x.entries);
    free(x.scratch);
    cJSON_Delete(root);
    return st;
}
