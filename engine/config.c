/* zoe-train's configuration: one option table serves the command line, the JSON file and
 * --help, so a key, its range and its default are written once. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/hf.h"
#include "engine/json_file.h"
#include "runtime/error.h"
#include "zoe/train.h"

typedef enum {
    OPT_INT,
    OPT_INT64,
    OPT_U64,
    OPT_FLOAT,
    OPT_PATH,
    OPT_DTYPE,
    OPT_OFFLOAD,
    OPT_BACKEND,
    OPT_FLAG,
    OPT_MODEL,
    OPT_HF,
    OPT_FAMILY,
    OPT_PROGRESS
} opt_kind;

static const char *const progress_names[] = {"auto", "bar", "lines"}; /* zoe_progress_style */

typedef struct option_spec {
    const char *name; /* without the leading "--" */
    opt_kind kind;
    size_t offset;
    double min, max;
    const char *help;
} option_spec;

#define CFG(field)   offsetof(zoe_train_config, field)
#define MODEL(field) (offsetof(zoe_train_config, model) + offsetof(zoe_model_config, field))

static const option_spec options[] = {
    {"model", OPT_MODEL, 0, 0, 0, "model preset (see --list-models)"},
    {"init-from", OPT_HF, CFG(init_from), 0, 0,
     "a Hugging Face model directory (GPT-2 or Llama): its shape and weights"},
    {"family", OPT_FAMILY, MODEL(family), 0, 0, "model family: gpt or llama"},
    {"kv-heads", OPT_INT, MODEL(kv_heads), 0, 4096, "Llama: key/value heads (0: heads)"},
    {"rope-theta", OPT_FLOAT, MODEL(rope_theta), 0, 1e9, "Llama: RoPE base (0: 10000)"},
    {"norm-eps", OPT_FLOAT, MODEL(norm_eps), 0, 0.1, "Llama: RMSNorm epsilon (0: 1e-5)"},
    {"tie-embeddings", OPT_FLAG, MODEL(tie_embeddings), 0, 1,
     "Llama: the LM head shares the embedding"},
    {"layers", OPT_INT, MODEL(layers), 1, 4096, "transformer layers"},
    {"hidden", OPT_INT, MODEL(hidden), 1, 1 << 20, "hidden size"},
    {"heads", OPT_INT, MODEL(heads), 1, 4096, "attention heads"},
    {"ffn", OPT_INT, MODEL(ffn), 0, 1 << 22, "MLP width (0: 4 x hidden)"},
    {"seq-len", OPT_INT, MODEL(seq_len), 1, 1 << 20, "sequence length"},
    {"vocab", OPT_INT, MODEL(vocab), 2, 1 << 24, "vocabulary size"},
    {"dropout", OPT_FLOAT, MODEL(dropout), 0, 0.99, "hidden dropout probability"},
    {"backend", OPT_BACKEND, CFG(backend), 0, 0, "cpu or cuda"},
    {"tp", OPT_INT, CFG(tp), 1, 4096, "tensor-parallel size (dp = ranks / tp)"},
    {"micro-batch", OPT_INT, CFG(micro_batch), 1, 1 << 20, "sequences per rank per micro-batch"},
    {"grad-accum", OPT_INT, CFG(grad_accum), 1, 1 << 20, "micro-batches per step"},
    {"steps", OPT_INT, CFG(steps), 1, 1e9, "training steps"},
    {"lr", OPT_FLOAT, CFG(lr), 0, 10, "peak learning rate"},
    {"min-lr", OPT_FLOAT, CFG(min_lr), 0, 10, "learning rate at the end of the cosine decay"},
    {"warmup", OPT_INT, CFG(warmup), 0, 1e9, "linear warm-up steps"},
    {"weight-decay", OPT_FLOAT, CFG(weight_decay), 0, 10,
     "AdamW decoupled weight decay (not on biases and LayerNorm)"},
    {"beta1", OPT_FLOAT, CFG(beta1), 0, 0.999999, "Adam beta1"},
    {"beta2", OPT_FLOAT, CFG(beta2), 0, 0.999999, "Adam beta2"},
    {"eps", OPT_FLOAT, CFG(eps), 1e-30, 1, "Adam epsilon"},
    {"clip-grad", OPT_FLOAT, CFG(clip_grad), 0, 1e9, "clip the global gradient norm (0: off)"},
    {"dtype", OPT_DTYPE, CFG(dtype), 0, 0, "compute dtype: fp32, bf16 or fp16"},
    {"offload", OPT_OFFLOAD, CFG(offload), 0, 0, "optimizer on the host (cpu) or device (none)"},
    {"dpu-warmup", OPT_INT, CFG(dpu_warmup), 0, 1e9,
     "synchronous steps before the delayed parameter update (0: no DPU)"},
    {"recompute", OPT_FLAG, CFG(recompute), 0, 1, "recompute activations in backward"},
    {"data", OPT_PATH, CFG(data), 0, 0, "indexed dataset prefix (.bin/.idx) or a .txt file"},
    {"seed", OPT_U64, CFG(seed), 0, 0, "seed of initialisation, dropout and data order"},
    {"metrics", OPT_PATH, CFG(metrics), 0, 0, "write one JSON object per step to this file"},
    {"log-every", OPT_INT, CFG(log_every), 1, 1e9, "print progress every N steps"},
    {"bucket-mb", OPT_INT64, CFG(bucket_mb), 1, 1 << 20, "gradient bucket size in MiB"},
    {"progress", OPT_PROGRESS, CFG(progress), 0, 0, "auto, bar (live) or lines"},
    {"save", OPT_PATH, CFG(save), 0, 0, "save checkpoints into this directory"},
    {"save-every", OPT_INT, CFG(save_every), 0, 1e9,
     "save every N steps (0: only at the end and on SIGTERM/SIGINT/SIGUSR1)"},
    {"keep-last", OPT_INT, CFG(keep_last), 0, 1e9, "keep the K newest checkpoints (0: all)"},
    {"resume", OPT_PATH, CFG(resume), 0, 0,
     "continue from a checkpoint, or the newest one in a directory"},
};
enum { NUM_OPTIONS = sizeof options / sizeof options[0] };

void zoe_train_config_defaults(zoe_train_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    zoe_model_preset("demo", &cfg->model);
    cfg->backend = ZOE_BACKEND_CPU;
    cfg->tp = 1;
    cfg->micro_batch = 4;
    cfg->grad_accum = 1;
    cfg->steps = 100;
    cfg->lr = 3e-3f;
    cfg->min_lr = 3e-4f;
    cfg->warmup = 10;
    cfg->weight_decay = 0.1f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.95f;
    cfg->eps = 1e-8f;
    cfg->clip_grad = 1.0f;
    cfg->dtype = ZOE_F32;
    cfg->offload = ZOE_OFFLOAD_CPU;
    cfg->dpu_warmup = 5;
    cfg->seed = 1234;
    cfg->log_every = 1;
    cfg->bucket_mb = 16;
}

static const option_spec *find_option(const char *name) {
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const char *a = options[i].name, *b = name;
        /* '-' and '_' are the same letter, so JSON may say micro_batch */
        while (*a && (*a == *b || (*a == '-' && *b == '_'))) a++, b++;
        if (!*a && !*b) return &options[i];
    }
    return NULL;
}

static zoe_status parse_number(const option_spec *o, const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: '%s' is not a number", o->name, text);
    if ((o->kind == OPT_INT || o->kind == OPT_INT64 || o->kind == OPT_U64) && v != floor(v))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: '%s' is not an integer", o->name, text);
    if (o->kind != OPT_U64 && (v < o->min || v > o->max))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%s is out of range [%g, %g]", o->name, text,
                        o->min, o->max);
    if (o->kind == OPT_U64 && (v < 0 || v > 18446744073709549568.0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%s is out of range", o->name, text);
    *out = v;
    return ZOE_OK;
}

/* Sets one option from its text form (the command line, or a JSON value printed to text). */
static zoe_status set_option(zoe_train_config *cfg, const option_spec *o, const char *text) {
    char *base = (char *)cfg + o->offset;
    double v = 0;
    switch (o->kind) {
    case OPT_MODEL:
        return zoe_model_preset(text, &cfg->model);
    case OPT_HF:
        if (strlen(text) >= ZOE_PATH_MAX)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: path longer than %d bytes", o->name,
                            ZOE_PATH_MAX - 1);
        strcpy(base, text);
        return zoe_hf_read_config(text, &cfg->model);
    case OPT_FAMILY:
        if (strcmp(text, "gpt") == 0)
            cfg->model.family = ZOE_MODEL_GPT;
        else if (strcmp(text, "llama") == 0)
            cfg->model.family = ZOE_MODEL_LLAMA;
        else
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--family: '%s' is not gpt or llama", text);
        return ZOE_OK;
    case OPT_PATH:
        if (strlen(text) >= ZOE_PATH_MAX)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: path longer than %d bytes", o->name,
                            ZOE_PATH_MAX - 1);
        strcpy(base, text);
        return ZOE_OK;
    case OPT_DTYPE:
        if (zoe_dtype_parse(text, (zoe_dtype *)base) != ZOE_OK || *(zoe_dtype *)base == ZOE_I32)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--dtype: '%s' is not fp32, bf16 or fp16",
                            text);
        return ZOE_OK;
    case OPT_BACKEND:
        if (zoe_backend_parse(text, (zoe_backend *)base) != ZOE_OK)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--backend: '%s' is not cpu or cuda", text);
        return ZOE_OK;
    case OPT_OFFLOAD:
        if (strcmp(text, "cpu") == 0)
            *(zoe_offload_mode *)base = ZOE_OFFLOAD_CPU;
        else if (strcmp(text, "none") == 0)
            *(zoe_offload_mode *)base = ZOE_OFFLOAD_NONE;
        else
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--offload: '%s' is not cpu or none", text);
        return ZOE_OK;
    case OPT_PROGRESS: {
        for (int i = 0; i < 3; i++)
            if (strcmp(text, progress_names[i]) == 0) {
                *(zoe_progress_style *)base = (zoe_progress_style)i;
                return ZOE_OK;
            }
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--progress: '%s' is not auto, bar or lines",
                        text);
    }
    case OPT_FLAG:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            *(int *)base = 1;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            *(int *)base = 0;
        else
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: '%s' is not true or false", o->name,
                            text);
        return ZOE_OK;
    case OPT_INT:
        ZOE_TRY(parse_number(o, text, &v));
        *(int *)base = (int)v;
        return ZOE_OK;
    case OPT_INT64:
        ZOE_TRY(parse_number(o, text, &v));
        *(int64_t *)base = (int64_t)v;
        return ZOE_OK;
    case OPT_U64:
        ZOE_TRY(parse_number(o, text, &v));
        *(uint64_t *)base = (uint64_t)v;
        return ZOE_OK;
    case OPT_FLOAT:
        ZOE_TRY(parse_number(o, text, &v));
        *(float *)base = (float)v;
        return ZOE_OK;
    }
    return zoe_fail(ZOE_ERR_INTERNAL, "option kind %d", (int)o->kind);
}

/* The model preset goes first so that explicit shape options refine it, whatever the order. */
static zoe_status apply_json_item(zoe_train_config *cfg, const cJSON *item, const char *path) {
    const option_spec *o = find_option(item->string);
    if (!o) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: unknown key \"%s\"", path, item->string);
    char text[64];
    const char *value = text;
    if (cJSON_IsString(item))
        value = item->valuestring;
    else if (cJSON_IsBool(item))
        snprintf(text, sizeof text, "%s", cJSON_IsTrue(item) ? "true" : "false");
    else if (cJSON_IsNumber(item))
        snprintf(text, sizeof text, "%.17g", item->valuedouble);
    else
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: key \"%s\" needs a string, number or bool",
                        path, item->string);
    zoe_status st = set_option(cfg, o, value);
    if (st != ZOE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zoe_last_error());
        return zoe_fail(st, "%s: %s", path, msg);
    }
    return ZOE_OK;
}

zoe_status zoe_train_config_load_json(zoe_train_config *cfg, const char *path) {
    cJSON *root = NULL;
    ZOE_TRY(zoe_json_read_file(path, "config ", &root));
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "config '%s' is not a JSON object", path);
    }
    zoe_status st = ZOE_OK;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model) st = apply_json_item(cfg, model, path);
    for (const cJSON *item = root->child; item && st == ZOE_OK; item = item->next)
        if (item != model) st = apply_json_item(cfg, item, path);
    cJSON_Delete(root);
    return st;
}

zoe_status zoe_train_config_parse_args(zoe_train_config *cfg, int argc, char **argv, int *help,
                                       int *list_models) {
    *help = *list_models = 0;
    /* Pass 0: --config; pass 1: --model or --init-from (a shape); pass 2: everything else. */
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *arg = argv[i];
            if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
                *help = 1;
                continue;
            }
            if (strcmp(arg, "--list-models") == 0) {
                *list_models = 1;
                continue;
            }
            if (strncmp(arg, "--", 2) != 0)
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unexpected argument '%s'", arg);
            char name[64];
            const char *eq = strchr(arg + 2, '=');
            size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, arg + 2, len);
            name[len] = '\0';
            const char *value = eq ? eq + 1 : NULL;
            int is_config = strcmp(name, "config") == 0;
            const option_spec *o = is_config ? NULL : find_option(name);
            if (!is_config && (!o || strchr(name, '_')))
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown option '--%s' (see --help)",
                                name);
            if (!value && o && o->kind == OPT_FLAG) value = "true";
            if (!value) {
                if (i + 1 >= argc)
                    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "option '--%s' needs a value", name);
                value = argv[++i];
            }
            if (pass == 0 && is_config)
                ZOE_TRY(zoe_train_config_load_json(cfg, value));
            else if (pass == 1 && o && (o->kind == OPT_MODEL || o->kind == OPT_HF))
                ZOE_TRY(set_option(cfg, o, value));
            else if (pass == 2 && o && o->kind != OPT_MODEL && o->kind != OPT_HF)
                ZOE_TRY(set_option(cfg, o, value));
        }
    }
    return ZOE_OK;
}

static int data_exists(const char *path) {
    struct stat st;
    char name[ZOE_PATH_MAX + 8];
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return 1;
    snprintf(name, sizeof name, "%s.idx", path);
    if (stat(name, &st) != 0) return 0;
    snprintf(name, sizeof name, "%s.bin", path);
    return stat(name, &st) == 0;
}

zoe_status zoe_train_config_validate(const zoe_train_config *c, int world_size) {
    const zoe_model_config *m = &c->model;
    if (world_size % c->tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--tp=%d does not divide the %d ranks", c->tp,
                        world_size);
    if (m->hidden % m->heads != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--hidden=%d is not divisible by --heads=%d",
                        m->hidden, m->heads);
    if (m->heads % c->tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--heads=%d is not divisible by --tp=%d",
                        m->heads, c->tp);
    const int kv = m->kv_heads ? m->kv_heads : m->heads;
    if (m->family == ZOE_MODEL_LLAMA && m->heads % kv != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--heads=%d is not divisible by --kv-heads=%d",
                        m->heads, kv);
    if (m->family == ZOE_MODEL_LLAMA && kv % c->tp != 0 && c->tp % kv != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--kv-heads=%d and --tp=%d: neither divides the other", kv, c->tp);
    if (m->family == ZOE_MODEL_LLAMA && m->dropout > 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--dropout=%g: the Llama block has no dropout (use 0)", (double)m->dropout);
    if (m->family == ZOE_MODEL_LLAMA && (m->hidden / m->heads) % 2 != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "head size %d is odd (RoPE pairs dimensions)",
                        m->hidden / m->heads);
    int ffn = m->ffn ? m->ffn : 4 * m->hidden;
    if (ffn % c->tp != 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "MLP width %d is not divisible by --tp=%d", ffn,
                        c->tp);
    if (c->min_lr > c->lr)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--min-lr=%g is above --lr=%g", c->min_lr, c->lr);
    if (c->dtype == ZOE_F16 && c->backend == ZOE_BACKEND_CPU)
        return zoe_fail(
            ZOE_ERR_INVALID_ARGUMENT,
            "--dtype=fp16 needs --backend=cuda (the CPU backend computes in fp32 or bf16)");
    if (c->data[0] && !data_exists(c->data))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--data: '%s' is neither a file nor a prefix of PREFIX.bin and PREFIX.idx",
                        c->data);
    if (c->init_from[0]) ZOE_TRY(zoe_hf_check(c->init_from, m, c->tp));
    return ZOE_OK;
}

static void format_value(const zoe_train_config *cfg, const option_spec *o, char *buf, size_t n) {
    const char *base = (const char *)cfg + o->offset;
    switch (o->kind) {
    case OPT_MODEL:
        snprintf(buf, n, "%s", cfg->model.name);
        break;
    case OPT_PATH:
    case OPT_HF:
        snprintf(buf, n, "%s", *base ? base : "(none)");
        break;
    case OPT_FAMILY:
        snprintf(buf, n, "%s", zoe_model_family_name(cfg->model.family));
        break;
    case OPT_DTYPE:
        snprintf(buf, n, "%s", zoe_dtype_name(*(const zoe_dtype *)base));
        break;
    case OPT_BACKEND:
        snprintf(buf, n, "%s", zoe_backend_name(*(const zoe_backend *)base));
        break;
    case OPT_OFFLOAD:
        snprintf(buf, n, "%s", *(const zoe_offload_mode *)base == ZOE_OFFLOAD_CPU ? "cpu" : "none");
        break;
    case OPT_FLAG:
        snprintf(buf, n, "%s", *(const int *)base ? "on" : "off");
        break;
    case OPT_PROGRESS:
        snprintf(buf, n, "%s", progress_names[*(const zoe_progress_style *)base]);
        break;
    case OPT_INT:
        snprintf(buf, n, "%d", *(const int *)base);
        break;
    case OPT_INT64:
        snprintf(buf, n, "%lld", (long long)*(const int64_t *)base);
        break;
    case OPT_U64:
        snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)base);
        break;
    case OPT_FLOAT:
        snprintf(buf, n, "%g", (double)*(const float *)base);
        break;
    }
}

char *zoe_train_config_json(const zoe_train_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; root && i < NUM_OPTIONS; i++) {
        const option_spec *o = &options[i];
        const char *base = (const char *)cfg + o->offset;
        char value[64];
        format_value(cfg, o, value, sizeof value);
        if (o->kind == OPT_FLOAT) /* every digit of the float */
            snprintf(value, sizeof value, "%.9g", (double)*(const float *)base);
        if (o->kind == OPT_MODEL &&
            zoe_model_preset(cfg->model.name, &(zoe_model_config){0}) != ZOE_OK)
            continue; /* a custom shape: its keys follow */
        if (o->kind == OPT_FLAG)
            cJSON_AddBoolToObject(root, o->name, *(const int *)base);
        else if (o->kind == OPT_PATH || o->kind == OPT_HF)
            cJSON_AddStringToObject(root, o->name, base);
        else if (o->kind == OPT_INT || o->kind == OPT_INT64 || o->kind == OPT_FLOAT)
            cJSON_AddRawToObject(root, o->name, value);
        else
            cJSON_AddStringToObject(root, o->name, value); /* enums, and the u64 seed exactly */
    }
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

void zoe_train_config_print_help(FILE *out, const char *program) {
    zoe_train_config d;
    zoe_train_config_defaults(&d);
    fprintf(out,
            "usage: mpirun -np N %s [options]\n\n"
            "Trains a GPT with tensor parallelism (--tp) x data parallelism (the rest of the\n"
            "ranks) and ZeRO-Offload. Options (default in brackets):\n",
            program);
    fprintf(out, "  --%-14s %s\n", "config FILE",
            "JSON file whose keys mirror these options; flags win");
    for (int i = 0; i < NUM_OPTIONS; i++) {
        char value[64];
        format_value(&d, &options[i], value, sizeof value);
        fprintf(out, "  --%-14s %s [%s]\n", options[i].name, options[i].help, value);
    }
    fprintf(out, "  --%-14s %s\n  --%-14s %s\n", "list-models", "print the model presets", "help",
            "print this help");
}

float zoe_train_lr_at(const zoe_train_config *c, int step) {
    if (c->warmup > 0 && step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    int decay = c->steps - c->warmup;
    if (decay <= 0) return c->lr;
    double progress = (double)(step - c->warmup) / (double)decay;
    if (progress > 1) progress = 1;
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)(c->min_lr + (c->lr - c->min_lr) * cosine);
}
