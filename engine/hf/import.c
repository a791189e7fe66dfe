/* Hugging Face import: config.json to a model shape, the name and layout mapping, the header
 * check, and the sharded read from memory-mapped safetensors files.
 *
 * Explained in docs/hf.md, "Fine-tune a Hugging Face model". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "engine/hf/hf.h"
#include "engine/formats/safetensors.h"
#include "engine/formats/json_file.h"
#include "models/gpt.h"
#include "runtime/error.h"

/* ---- config.json ---- */

static zoe_status read_json(const char *path, cJSON **out) {
    ZOE_TRY(zoe_json_read_file(path, "Hugging Face file ", (size_t)1 << 26, out));
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s is not a JSON object", path);
    }
    return ZOE_OK;
}

/* A positive integer key, or fallback when absent or null (fallback < 0: required). */
static zoe_status json_size(const cJSON *c, const char *path, const char *key, int fallback,
                            int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!v || cJSON_IsNull(v)) {
        if (fallback < 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: no \"%s\"", path, key);
        *out = fallback;
        return ZOE_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 30) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: \"%s\" is not a positive integer", path,
                        key);
    *out = v->valueint;
    return ZOE_OK;
}

static double json_number(const cJSON *c, const char *key, double fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

static const char *json_string(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int json_true(const cJSON *c, const char *key, int fallback) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : fallback;
}

static zoe_status gpt2_config(const cJSON *c, const char *path, zoe_model_config *m) {
    *m = (zoe_model_config){.family = ZOE_MODEL_GPT, .source = "Hugging Face GPT2LMHeadModel"};
    ZOE_TRY(json_size(c, path, "n_layer", -1, &m->layers));
    ZOE_TRY(json_size(c, path, "n_embd", -1, &m->hidden));
    ZOE_TRY(json_size(c, path, "n_head", -1, &m->heads));
    ZOE_TRY(json_size(c, path, "n_inner", 4 * m->hidden, &m->ffn));
    ZOE_TRY(json_size(c, path, "n_positions", -1, &m->seq_len));
    m->max_positions = m->seq_len; /* --seq-len may shorten the context, never the table */
    ZOE_TRY(json_size(c, path, "vocab_size", -1, &m->vocab));
    const char *act = json_string(c, "activation_function");
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: activation_function \"%s\" (zoe's GELU is the tanh one, gelu_new)",
                        path, act);
    const double eps = json_number(c, "layer_norm_epsilon", 1e-5);
    if (eps != 1e-5)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: layer_norm_epsilon %g (zoe's LayerNorm uses 1e-5)", path, eps);
    if (!json_true(c, "tie_word_embeddings", 1))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: an untied GPT-2 head is not supported",
                        path);
    return ZOE_OK;
}

static zoe_status llama_config(const cJSON *c, const char *path, zoe_model_config *m) {
    *m = (zoe_model_config){.family = ZOE_MODEL_LLAMA, .source = "Hugging Face LlamaForCausalLM"};
    ZOE_TRY(json_size(c, path, "num_hidden_layers", -1, &m->layers));
    ZOE_TRY(json_size(c, path, "hidden_size", -1, &m->hidden));
    ZOE_TRY(json_size(c, path, "num_attention_heads", -1, &m->heads));
    ZOE_TRY(json_size(c, path, "num_key_value_heads", m->heads, &m->kv_heads));
    ZOE_TRY(json_size(c, path, "intermediate_size", -1, &m->ffn));
    ZOE_TRY(json_size(c, path, "max_position_embeddings", 2048, &m->seq_len));
    ZOE_TRY(json_size(c, path, "vocab_size", -1, &m->vocab));
    int head_dim = 0;
    ZOE_TRY(json_size(c, path, "head_dim", m->hidden / m->heads, &head_dim));
    if (head_dim * m->heads != m->hidden)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: head_dim %d x %d heads is not hidden_size %d", path, head_dim,
                        m->heads, m->hidden);
    m->rope_theta = (float)json_number(c, "rope_theta", 10000.0);
    m->norm_eps = (float)json_number(c, "rms_norm_eps", 1e-6);
    m->tie_embeddings = json_true(c, "tie_word_embeddings", 0);
    const char *act = json_string(c, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: hidden_act \"%s\" (zoe's SwiGLU is silu)",
                        path, act);
    if (json_true(c, "attention_bias", 0) || json_true(c, "mlp_bias", 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: Llama biases are not supported", path);
    /* transformers 5 writes rope_parameters (the theta inside, rope_type "default" when
     * unscaled); earlier versions rope_theta beside rope_scaling. */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    if (cJSON_IsObject(rs)) {
        m->rope_theta = (float)json_number(rs, "rope_theta", m->rope_theta);
        const char *type = json_string(rs, "rope_type");
        if (type && strcmp(type, "default") == 0) rs = NULL;
    } else {
        rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    }
    if (rs && !cJSON_IsNull(rs)) {
        const char *type = json_string(rs, "rope_type");
        if (!type) type = json_string(rs, "type");
        if (!type || strcmp(type, "llama3") != 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: rope_scaling type \"%s\" (zoe has Llama 3's, \"llama3\")", path,
                            type ? type : "(none)");
        m->rope_scaling = (zoe_rope_scaling){
            .factor = (float)json_number(rs, "factor", 0),
            .low_freq_factor = (float)json_number(rs, "low_freq_factor", 1),
            .high_freq_factor = (float)json_number(rs, "high_freq_factor", 4),
            .original_max_position = (int)json_number(rs, "original_max_position_embeddings", 0)};
        if (!(m->rope_scaling.factor > 0) || m->rope_scaling.original_max_position <= 0 ||
            !(m->rope_scaling.high_freq_factor > m->rope_scaling.low_freq_factor))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: incomplete llama3 rope_scaling", path);
    }
    return ZOE_OK;
}

zoe_status zoe_hf_config_text(const char *dir, char **out) {
    char path[ZOE_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *c = NULL;
    ZOE_TRY(read_json(path, &c));
    *out = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return *out ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s as text", path);
}

zoe_status zoe_hf_read_config(const char *dir, zoe_model_config *out) {
    char path[ZOE_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *c = NULL;
    ZOE_TRY(read_json(path, &c));
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const cJSON *first = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    const char *name = cJSON_IsString(first) ? first->valuestring : NULL;
    zoe_status st;
    if (name && strcmp(name, "GPT2LMHeadModel") == 0)
        st = gpt2_config(c, path, out);
    else if (name && strcmp(name, "LlamaForCausalLM") == 0)
        st = llama_config(c, path, out);
    else
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "%s: architecture \"%s\" is not GPT2LMHeadModel or LlamaForCausalLM", path,
                      name ? name : "(none)");
    if (st == ZOE_OK) snprintf(out->name, sizeof out->name, "%s", "hf");
    cJSON_Delete(c);
    return st;
}

/* ---- the mapping ---- */

typedef struct name_rule {
    const char *zoe, *hf, *hf2;
    zoe_hf_kind kind;
} name_rule;

static const name_rule gpt2_block[] = {
    {"ln_1.weight", "ln_1.weight", NULL, ZOE_HF_COPY},
    {"ln_1.bias", "ln_1.bias", NULL, ZOE_HF_COPY},
    {"attn.linear_qkv.weight", "attn.c_attn.weight", NULL, ZOE_HF_QKV_WEIGHT},
    {"attn.linear_qkv.bias", "attn.c_attn.bias", NULL, ZOE_HF_QKV_BIAS},
    {"attn.linear_proj.weight", "attn.c_proj.weight", NULL, ZOE_HF_TRANSPOSE},
    {"attn.linear_proj.bias", "attn.c_proj.bias", NULL, ZOE_HF_COPY},
    {"ln_2.weight", "ln_2.weight", NULL, ZOE_HF_COPY},
    {"ln_2.bias", "ln_2.bias", NULL, ZOE_HF_COPY},
    {"mlp.linear_fc1.weight", "mlp.c_fc.weight", NULL, ZOE_HF_TRANSPOSE},
    {"mlp.linear_fc1.bias", "mlp.c_fc.bias", NULL, ZOE_HF_COPY},
    {"mlp.linear_fc2.weight", "mlp.c_proj.weight", NULL, ZOE_HF_TRANSPOSE},
    {"mlp.linear_fc2.bias", "mlp.c_proj.bias", NULL, ZOE_HF_COPY},
};
static const name_rule gpt2_top[] = {
    {"wte", "transformer.wte.weight", NULL, ZOE_HF_COPY},
    {"wpe", "transformer.wpe.weight", NULL, ZOE_HF_COPY},
    {"ln_f.weight", "transformer.ln_f.weight", NULL, ZOE_HF_COPY},
    {"ln_f.bias", "transformer.ln_f.bias", NULL, ZOE_HF_COPY},
};
static const name_rule llama_block[] = {
    {"ln_1.weight", "input_layernorm.weight", NULL, ZOE_HF_COPY},
    {"attn.linear_q.weight", "self_attn.q_proj.weight", NULL, ZOE_HF_COPY},
    {"attn.linear_kv.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", ZOE_HF_KV},
    {"attn.linear_proj.weight", "self_attn.o_proj.weight", NULL, ZOE_HF_COPY},
    {"ln_2.weight", "post_attention_layernorm.weight", NULL, ZOE_HF_COPY},
    {"mlp.linear_fc1.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", ZOE_HF_GATE_UP},
    {"mlp.linear_fc2.weight", "mlp.down_proj.weight", NULL, ZOE_HF_COPY},
};
static const name_rule llama_top[] = {
    {"wte", "model.embed_tokens.weight", NULL, ZOE_HF_COPY},
    {"ln_f.weight", "model.norm.weight", NULL, ZOE_HF_COPY},
    {"lm_head.weight", "lm_head.weight", NULL, ZOE_HF_COPY},
};

#define COUNT(a) ((int)(sizeof a / sizeof a[0]))

zoe_status zoe_hf_source_of(const zoe_model_config *m, const char *name, int64_t rows, int64_t cols,
                            zoe_hf_source *out) {
    const bool llama = m->family == ZOE_MODEL_LLAMA;
    const name_rule *top = llama ? llama_top : gpt2_top, *block = llama ? llama_block : gpt2_block;
    const int ntop = llama ? COUNT(llama_top) : COUNT(gpt2_top);
    const int nblock = llama ? COUNT(llama_block) : COUNT(gpt2_block);
    const name_rule *rule = NULL;
    char prefix[64] = "";
    int layer, used = 0;
    if (sscanf(name, "h.%d.%n", &layer, &used) == 1 && used > 0) {
        snprintf(prefix, sizeof prefix, llama ? "model.layers.%d." : "transformer.h.%d.", layer);
        for (int i = 0; i < nblock; i++)
            if (strcmp(block[i].zoe, name + used) == 0) rule = &block[i];
    } else {
        for (int i = 0; i < ntop; i++)
            if (strcmp(top[i].zoe, name) == 0) rule = &top[i];
    }
    if (!rule)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe tensor %s has no Hugging Face %s name", name,
                        llama ? "Llama" : "GPT-2");
    zoe_hf_source s = {.kind = rule->kind, .count = rule->hf2 ? 2 : 1, .ndim = cols == 1 ? 1 : 2};
    snprintf(s.hf[0], sizeof s.hf[0], "%s%s", prefix, rule->hf);
    if (rule->hf2) snprintf(s.hf[1], sizeof s.hf[1], "%s%s", prefix, rule->hf2);
    const int64_t C = m->hidden;
    switch (rule->kind) {
    case ZOE_HF_COPY: /* the vocabulary's real rows; the position table's as HF has it */
        s.shape[0][0] =
            strcmp(name, "wte") == 0 || strcmp(name, "lm_head.weight") == 0 ? m->vocab : rows;
        s.shape[0][1] = cols;
        break;
    case ZOE_HF_TRANSPOSE:
    case ZOE_HF_QKV_WEIGHT:
        s.shape[0][0] = cols, s.shape[0][1] = rows;
        break;
    case ZOE_HF_QKV_BIAS:
        s.shape[0][0] = rows, s.shape[0][1] = 1;
        break;
    case ZOE_HF_KV:
    case ZOE_HF_GATE_UP:
        s.shape[0][0] = s.shape[1][0] = rows / 2;
        s.shape[0][1] = s.shape[1][1] = C;
        break;
    }
    *out = s;
    return ZOE_OK;
}

void zoe_hf_row_origin(const zoe_model_config *m, const zoe_hf_source *s, int64_t i, int *which,
                       int64_t *index, int *transposed) {
    const int64_t C = m->hidden, D = C / m->heads;
    *which = 0, *index = i, *transposed = 0;
    switch (s->kind) {
    case ZOE_HF_COPY:
        if (i >= s->shape[0][0]) *index = -1;
        break;
    case ZOE_HF_TRANSPOSE:
        *transposed = 1;
        break;
    case ZOE_HF_QKV_WEIGHT:
    case ZOE_HF_QKV_BIAS: { /* zoe row [head][part][d] <- HF column part * C + head * D + d */
        const int64_t h = i / (3 * D), part = (i / D) % 3, d = i % D;
        *index = part * C + h * D + d;
        *transposed = s->kind == ZOE_HF_QKV_WEIGHT;
        break;
    }
    case ZOE_HF_KV: { /* zoe row [kv head][k, v][d] <- k_proj or v_proj row kv head * D + d */
        const int64_t h = i / (2 * D), part = (i / D) % 2, d = i % D;
        *which = (int)part, *index = h * D + d;
        break;
    }
    case ZOE_HF_GATE_UP: /* zoe row [feature][gate, up] */
        *which = (int)(i % 2), *index = i / 2;
        break;
    }
}

/* ---- the files ---- */

/* One safetensors file of the directory, its header and (when loading) its mapping. */
typedef struct hf_file {
    char path[ZOE_PATH_MAX + 160];
    zoe_safetensors st;
    const unsigned char *map;
    size_t map_len;
    unsigned char *used; /* per tensor: claimed by a zoe tensor */
} hf_file;

typedef struct hf_dir {
    const char *path;
    hf_file *files;
    int count;
} hf_dir;

static void dir_free(hf_dir *d) {
    for (int i = 0; i < d->count; i++) {
        if (d->files[i].map) munmap((void *)d->files[i].map, d->files[i].map_len);
        zoe_safetensors_free(&d->files[i].st);
        free(d->files[i].used);
    }
    free(d->files);
    d->files = NULL, d->count = 0;
}

static zoe_status add_file(hf_dir *d, const char *dir, const char *name) {
    for (int i = 0; i < d->count; i++) {
        const char *base = strrchr(d->files[i].path, '/');
        if (base && strcmp(base + 1, name) == 0) return ZOE_OK;
    }
    hf_file *grown = realloc(d->files, (size_t)(d->count + 1) * sizeof *grown);
    if (!grown) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "file table");
    d->files = grown;
    hf_file *f = &d->files[d->count];
    memset(f, 0, sizeof *f);
    zoe_safetensors_init(&f->st);
    snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
    d->count++;
    ZOE_TRY(zoe_safetensors_read_header(f->path, &f->st));
    f->used = calloc((size_t)f->st.count + 1, 1);
    return f->used ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor table of %s", f->path);
}

/* model.safetensors.index.json's shards, or model.safetensors. */
static zoe_status dir_open(hf_dir *d, const char *dir) {
    memset(d, 0, sizeof *d);
    d->path = dir;
    char path[ZOE_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct stat sb;
    zoe_status st = ZOE_OK;
    if (stat(path, &sb) == 0) {
        cJSON *idx = NULL;
        ZOE_TRY(read_json(path, &idx));
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(map))
            st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: no \"weight_map\" object", path);
        for (const cJSON *e = map ? map->child : NULL; st == ZOE_OK && e; e = e->next)
            st = cJSON_IsString(e) && !strchr(e->valuestring, '/')
                     ? add_file(d, dir, e->valuestring)
                     : zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: bad file for %s", path, e->string);
        cJSON_Delete(idx);
    } else {
        st = add_file(d, dir, "model.safetensors");
    }
    if (st != ZOE_OK) dir_free(d);
    return st;
}

/* The tensor of that name in any file of the directory. */
static zoe_status dir_find(hf_dir *d, const char *name, hf_file **file, const zoe_st_tensor **t) {
    for (int i = 0; i < d->count; i++) {
        const zoe_st_tensor *found = zoe_safetensors_find(&d->files[i].st, name);
        if (found) {
            *file = &d->files[i], *t = found;
            d->files[i].used[found - d->files[i].st.tensors] = 1;
            return ZOE_OK;
        }
    }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "%s: missing tensor %s (in none of its %d safetensors files)", d->path, name,
                    d->count);
}

/* Tensors an HF file may hold that zoe does not take: old GPT-2 files' causal-mask buffers, and
 * the copy of a tied head. */
static bool ignorable(const zoe_model_config *m, const char *name) {
    const size_t n = strlen(name);
    const bool mask = (n > 9 && strcmp(name + n - 9, ".attn.bias") == 0) ||
                      (n > 16 && strcmp(name + n - 16, ".attn.masked_bias") == 0);
    const bool tied_head =
        strcmp(name, "lm_head.weight") == 0 && (m->family == ZOE_MODEL_GPT || m->tie_embeddings);
    return (m->family == ZOE_MODEL_GPT && mask) || tied_head;
}

static zoe_status check_one(hf_dir *d, const zoe_model_config *m, const char *name, int64_t rows,
                            int64_t cols) {
    zoe_hf_source s;
    ZOE_TRY(zoe_hf_source_of(m, name, rows, cols, &s));
    for (int k = 0; k < s.count; k++) {
        hf_file *f = NULL;
        const zoe_st_tensor *t = NULL;
        ZOE_TRY(dir_find(d, s.hf[k], &f, &t));
        if (t->dtype != ZOE_ST_F32 && t->dtype != ZOE_ST_BF16 && t->dtype != ZOE_ST_F16)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s has dtype %s (zoe reads F32, BF16, F16)", f->path,
                            s.hf[k], zoe_st_dtype_name(t->dtype));
        const int64_t want0 = s.shape[k][0], want1 = s.shape[k][1];
        const int64_t got0 = t->ndim >= 1 ? t->shape[0] : 1, got1 = t->ndim == 2 ? t->shape[1] : 1;
        if (t->ndim != s.ndim || got0 != want0 || got1 != want1)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s has shape [%lld, %lld] (ndim %d), the model needs "
                            "[%lld, %lld] (ndim %d)",
                            f->path, s.hf[k], (long long)got0, (long long)got1, t->ndim,
                            (long long)want0, (long long)want1, s.ndim);
    }
    return ZOE_OK;
}

/* Every tensor of the model zoe builds from m, at its global shape (the vocabulary padded as
 * the model pads it), against the directory; then no tensor of the files may be left over. */
static zoe_status with_model_tensors(const zoe_model_config *m, hf_dir *d) {
    zoe_tp_embedding emb;
    ZOE_TRY(zoe_tp_embedding_init(&emb, "", m->vocab, 0, m->hidden, zoe_model_position_rows(m),
                                  0.02f, 1, 0));
    ZOE_TRY(check_one(d, m, "wte", emb.vocab.padded, m->hidden));
    if (m->family == ZOE_MODEL_GPT)
        ZOE_TRY(check_one(d, m, "wpe", zoe_model_position_rows(m), m->hidden));
    const int64_t C = m->hidden, F = m->ffn ? m->ffn : 4 * (int64_t)C;
    for (int l = 0; l < m->layers; l++) {
        char name[96];
        if (m->family == ZOE_MODEL_LLAMA) {
            const int64_t D = C / m->heads, KV = m->kv_heads ? m->kv_heads : m->heads;
            const struct {
                const char *n;
                int64_t r, c;
            } t[] = {{"ln_1.weight", C, 1},
                     {"attn.linear_q.weight", C, C},
                     {"attn.linear_kv.weight", 2 * KV * D, C},
                     {"attn.linear_proj.weight", C, C},
                     {"ln_2.weight", C, 1},
                     {"mlp.linear_fc1.weight", 2 * F, C},
                     {"mlp.linear_fc2.weight", C, F}};
            for (int i = 0; i < COUNT(t); i++) {
                snprintf(name, sizeof name, "h.%d.%s", l, t[i].n);
                ZOE_TRY(check_one(d, m, name, t[i].r, t[i].c));
            }
        } else {
            const struct {
                const char *n;
                int64_t r, c;
            } t[] = {{"ln_1.weight", C, 1},
                     {"ln_1.bias", C, 1},
                     {"attn.linear_qkv.weight", 3 * C, C},
                     {"attn.linear_qkv.bias", 3 * C, 1},
                     {"attn.linear_proj.weight", C, C},
                     {"attn.linear_proj.bias", C, 1},
                     {"ln_2.weight", C, 1},
                     {"ln_2.bias", C, 1},
                     {"mlp.linear_fc1.weight", F, C},
                     {"mlp.linear_fc1.bias", F, 1},
                     {"mlp.linear_fc2.weight", C, F},
                     {"mlp.linear_fc2.bias", C, 1}};
            for (int i = 0; i < COUNT(t); i++) {
                snprintf(name, sizeof name, "h.%d.%s", l, t[i].n);
                ZOE_TRY(check_one(d, m, name, t[i].r, t[i].c));
            }
        }
    }
    ZOE_TRY(check_one(d, m, "ln_f.weight", C, 1));
    if (m->family == ZOE_MODEL_GPT) ZOE_TRY(check_one(d, m, "ln_f.bias", C, 1));
    if (m->family == ZOE_MODEL_LLAMA && !m->tie_embeddings)
        ZOE_TRY(check_one(d, m, "lm_head.weight", emb.vocab.padded, C));
    for (int i = 0; i < d->count; i++)
        for (int t = 0; t < d->files[i].st.count; t++)
            if (!d->files[i].used[t] && !ignorable(m, d->files[i].st.tensors[t].name))
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                                "%s: tensor %s is not part of the %s model zoe builds",
                                d->files[i].path, d->files[i].st.tensors[t].name,
                                zoe_model_family_name(m->family));
    return ZOE_OK;
}

zoe_status zoe_hf_check(const char *dir, const zoe_model_config *m, int tp) {
    const int kv = m->kv_heads ? m->kv_heads : m->heads;
    if (tp <= 0 || m->heads % tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %d heads not divisible by --tp=%d", dir,
                        m->heads, tp);
    if (m->family == ZOE_MODEL_LLAMA && kv % tp != 0 && tp % kv != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: %d KV heads and --tp=%d: neither divides the other", dir, kv, tp);
    hf_dir d;
    ZOE_TRY(dir_open(&d, dir));
    zoe_status st = with_model_tensors(m, &d);
    dir_free(&d);
    return st;
}

/* ---- the sharded read ---- */

static zoe_status map_file(hf_file *f) {
    if (f->map) return ZOE_OK;
    int fd = open(f->path, O_RDONLY);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open %s: %s", f->path, strerror(errno));
    f->map_len = (size_t)(f->st.data_offset + f->st.data_size);
    void *p = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return zoe_fail(ZOE_ERR_IO, "cannot map %s: %s", f->path, strerror(errno));
    f->map = p;
    return ZOE_OK;
}

/* Shard rows [0, local rows) of p as fp32 in out, each read from its HF row or column. */
static zoe_status read_shard(const zoe_model_config *m, hf_dir *d, const zoe_tp_param *p,
                             float *out) {
    zoe_hf_source s;
    ZOE_TRY(zoe_hf_source_of(m, p->name, p->global_shape[0], p->global_shape[1], &s));
    hf_file *files[2] = {NULL, NULL};
    const zoe_st_tensor *ts[2] = {NULL, NULL};
    for (int k = 0; k < s.count; k++) {
        ZOE_TRY(dir_find(d, s.hf[k], &files[k], &ts[k]));
        ZOE_TRY(map_file(files[k]));
    }
    const int64_t lr = p->local_shape[0], lc = p->local_shape[1];
    for (int64_t i = 0; i < lr; i++) {
        int which, transposed;
        int64_t index;
        zoe_hf_row_origin(m, &s, p->local_offset[0] + i, &which, &index, &transposed);
        float *row = out + i * lc;
        if (index < 0) {
            memset(row, 0, (size_t)lc * sizeof(float));
            continue;
        }
        const zoe_st_tensor *t = ts[which];
        const unsigned char *base = files[which]->map + files[which]->st.data_offset + t->begin;
        const size_t es = zoe_st_dtype_size(t->dtype);
        const int64_t hcols = t->ndim == 2 ? t->shape[1] : 1;
        const zoe_dtype dt = zoe_st_dtype_to_zoe(t->dtype);
        if (!transposed) {
            ZOE_TRY(zoe_convert(row, ZOE_F32,
                                base + (size_t)(index * hcols + p->local_offset[1]) * es, dt,
                                (size_t)lc));
        } else {
            for (int64_t j = 0; j < lc; j++)
                ZOE_TRY(zoe_convert(&row[j], ZOE_F32,
                                    base + (size_t)((p->local_offset[1] + j) * hcols + index) * es,
                                    dt, 1));
        }
    }
    return ZOE_OK;
}

zoe_status zoe_hf_load(zoe_gpt *g, const char *dir) {
    return zoe_hf_load_tensors(g, dir, 0, zoe_gpt_num_tensors(g));
}

zoe_status zoe_hf_load_tensors(zoe_gpt *g, const char *dir, int first, int n) {
    const zoe_model_config *m = zoe_gpt_shape(g);
    zoe_tp *tp = zoe_gpt_tp(g);
    if (first < 0 || n < 0 || first > zoe_gpt_num_tensors(g) - n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "import of tensors [%d, %d) outside [0, %d)",
                        first, first + n, zoe_gpt_num_tensors(g));
    ZOE_TRY(zoe_hf_check(dir, m, tp->size));
    hf_dir d;
    ZOE_TRY(dir_open(&d, dir));
    size_t largest = 1;
    for (int t = first; t < first + n; t++)
        if ((size_t)zoe_gpt_tensor(g, t)->local_numel > largest)
            largest = (size_t)zoe_gpt_tensor(g, t)->local_numel;
    const size_t es = zoe_dtype_size(tp->dtype);
    float *vals = malloc(largest * sizeof(float));
    void *stage = NULL;
    zoe_status st =
        vals ? zoe_host_alloc_for(tp->device, largest * es, "the import's staging buffer", &stage)
             : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "import buffer");
    for (int t = first; st == ZOE_OK && t < first + n; t++) {
        const zoe_tp_param *p = zoe_gpt_tensor(g, t);
        st = read_shard(m, &d, p, vals);
        if (st == ZOE_OK) st = zoe_convert(stage, tp->dtype, vals, ZOE_F32, (size_t)p->local_numel);
        if (st == ZOE_OK)
            st = zoe_memcpy_async(p->data, stage, (size_t)p->local_numel * es,
                                  ZOE_COPY_HOST_TO_DEVICE, tp->stream);
        if (st == ZOE_OK) st = zoe_stream_synchronize(tp->stream); /* before stage is reused */
    }
    zoe_host_free(tp->device, stage);
    free(vals);
    dir_free(&d);
    return st;
}
