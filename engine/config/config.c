/* zoe-train's configuration: one option table serves the command line, the JSON file, --help
 * and the validation of hand-filled structs, so a key, its range and its default are written
 * once.
 *
 * Explained in docs/train.md. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "engine/config/config_impl.h"
#include "engine/hf/hf.h"
#include "engine/formats/json_file.h"
#include "runtime/error.h"
#include "zoe/optimizer.h"
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
    OPT_PROGRESS,
    OPT_CHOICE, /* an enum: the index of the value in `choices` */
    OPT_RATIO,
    OPT_DPU,
    OPT_HARDWARE,
    OPT_HF,
    OPT_FAMILY,
    OPT_SPLIT, /* --split T,V: two ints, split_train then split_val */
    OPT_SIZE   /* bytes as zoe_parse_size reads them (uint64_t), or auto (0) */
} opt_kind;

static const char *const progress_names[] = {"auto", "bar", "lines"}; /* zoe_progress_style */
static const char *const dpu_names[] = {"on", "off", "auto"};         /* zoe_dpu_mode */

typedef struct option_spec {
    const char *name; /* without the leading "--" */
    opt_kind kind;
    size_t offset;
    double min, max;
    const char *help;
} option_spec;

static const char *const decay_style_names[] = {
    "constant", "linear", "cosine", "inverse-square-root", "wsd", NULL}; /* zoe_lr_decay_style */
static const char *const wsd_style_names[] = {"exponential", "linear", "cosine", "minus-sqrt",
                                              NULL}; /* zoe_lr_wsd_style */
static const char *const dpu_schedule_names[] = {"plain", "predict", "dc", "exact",
                                                 NULL}; /* zoe_dpu_schedule */
static const char *const state_dtype_names[] = {"fp32", "bf16", "int8",
                                                NULL}; /* zoe_train_state_dtype */
static const char *const offload_params_names[] = {"none", "cpu", "nvme",
                                                   NULL};           /* zoe_offload_params */
static const char *const offload_names[] = {"cpu", "none", "nvme"}; /* zoe_offload_mode */
static const char *const offload_grads_names[] = {"auto", "cpu", "nvme",
                                                  NULL}; /* zoe_offload_grads */

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
    {"warmup", OPT_INT, CFG(warmup), -1, 1e9, "linear warm-up steps (-1: min(10, --steps))"},
    {"weight-decay", OPT_FLOAT, CFG(weight_decay), 0, 10,
     "AdamW decoupled weight decay (not on biases and LayerNorm)"},
    {"beta1", OPT_FLOAT, CFG(beta1), 0, 0.999999, "Adam beta1"},
    {"beta2", OPT_FLOAT, CFG(beta2), 0, 0.999999, "Adam beta2"},
    {"eps", OPT_FLOAT, CFG(eps), 1e-30, 1, "Adam epsilon"},
    {"clip-grad", OPT_FLOAT, CFG(clip_grad), 0, 1e9, "clip the global gradient norm (0: off)"},
    {"dtype", OPT_DTYPE, CFG(dtype), 0, 0,
     "compute dtype: fp32, bf16 or fp16 (zoe-train on CUDA, when not given: bf16 from sm_80, "
     "fp16 with loss scaling before)"},
    {"offload", OPT_OFFLOAD, CFG(offload), 0, 0,
     "optimizer on the host (cpu), the device (none), or the host with its state on drives "
     "(nvme: --nvme-path)"},
    {"dpu-warmup", OPT_INT, CFG(dpu_warmup), 0, 1e9,
     "synchronous steps before the delayed parameter update (0: no DPU)"},
    {"recompute", OPT_FLAG, CFG(recompute), 0, 1, "recompute activations in backward"},
    {"tf32", OPT_FLAG, CFG(tf32), 0, 1, "CUDA: TF32 tensor cores for fp32 matmuls"},
    {"loss-scale", OPT_FLOAT, CFG(loss_scale), 1, 1 << 24,
     "fp16: initial loss scale (halved on overflow, doubled after 1000 clean steps)"},
    {"data", OPT_PATH, CFG(data), 0, 0, "indexed dataset prefix (.bin/.idx) or a .txt file"},
    {"seed", OPT_U64, CFG(seed), 0, 0, "seed of initialisation, dropout and data order"},
    {"metrics", OPT_PATH, CFG(metrics), 0, 0, "write one JSON object per step to this file"},
    {"log-every", OPT_INT, CFG(log_every), 1, 1e9, "print progress every N steps"},
    {"bucket-mb", OPT_INT64, CFG(bucket_mb), 1, 1 << 20, "gradient bucket size in MiB"},
    {"stall-timeout", OPT_INT, CFG(stall_timeout), 0, 1e6,
     "abort the job when no step completes in S seconds, each rank saying where it waits (0: off)"},
    {"stop-grace", OPT_INT, CFG(stop_grace), 0, 1e6,
     "after SIGTERM/SIGINT/SIGUSR1, abort the job when no step boundary comes in S seconds (0: "
     "off)"},
    {"progress", OPT_PROGRESS, CFG(progress), 0, 0, "auto, bar (live) or lines"},
    {"lr-decay-style", OPT_CHOICE, CFG(lr_decay_style), 0, 0,
     "constant, linear, cosine, inverse-square-root or wsd"},
    {"lr-decay-iters", OPT_INT, CFG(lr_decay_iters), 0, 1e9,
     "steps over which lr decays to min-lr (0: --steps)"},
    {"lr-warmup-iters", OPT_INT, CFG(warmup), -1, 1e9, "linear warm-up steps (= --warmup)"},
    {"lr-wsd-decay-fraction", OPT_FLOAT, CFG(lr_wsd_decay_fraction), 1e-6, 1,
     "wsd: the decay's share of --lr-decay-iters"},
    {"lr-wsd-decay-style", OPT_CHOICE, CFG(lr_wsd_decay_style), 0, 0,
     "wsd decay: exponential, linear, cosine or minus-sqrt"},
    {"offload-ratio", OPT_RATIO, CFG(offload_ratio), 0, 1,
     "share of optimizer state on the host, 0..1, or auto (the least that fits)"},
    {"dpu", OPT_DPU, CFG(dpu), 0, 0,
     "on (after --dpu-warmup), off, or auto (where the host step would stall the device)"},
    {"dpu-schedule", OPT_CHOICE, CFG(dpu_schedule), 0, 0,
     "exact (host Adam during backward, nothing stale), or the one-step-stale plain (the "
     "paper's), predict or dc (docs/offload.md)"},
    {"dpu-dc-kappa", OPT_FLOAT, CFG(dpu_dc_kappa), 0, 1e6,
     "--dpu-schedule dc: the correction's strength (lambda = kappa / lr)"},
    {"dpu-predict-scale", OPT_FLOAT, CFG(dpu_predict_scale), 0.01, 10,
     "--dpu-schedule predict: how far along the last step the prediction goes"},
    {"main-params-dtype", OPT_CHOICE, CFG(main_params_dtype), 0, 0,
     "the host's master weights: fp32 or bf16 (stochastic rounding; docs/offload.md)"},
    {"exp-avg-dtype", OPT_CHOICE, CFG(exp_avg_dtype), 0, 0,
     "Adam's first moment on the host: fp32, bf16 or int8 (blockwise)"},
    {"exp-avg-sq-dtype", OPT_CHOICE, CFG(exp_avg_sq_dtype), 0, 0,
     "Adam's second moment on the host: fp32, bf16 or int8 (blockwise)"},
    {"main-grads-dtype", OPT_DTYPE, CFG(main_grads_dtype), 0, 0,
     "the host's gradient partition: fp32, or the compute dtype with --grad-accum 1"},
    {"offload-params", OPT_CHOICE, CFG(offload_params), 0, 0,
     "where the weights live: none (the device), cpu (the host, streamed to the device a "
     "block part at a time; turns --recompute on) or nvme (the drives of --offload nvme, "
     "streamed the same way through a host ring of units)"},
    {"prefetch-layers", OPT_INT, CFG(prefetch_layers), 0, 1024,
     "--offload-params cpu|nvme: units (a block's parts: attention in, its projection, MLP "
     "in, fc2) fetched ahead of the one in use (0: the plan's; 1 unplanned)"},
    {"nvme-path", OPT_PATH, CFG(nvme_path), 0, 0,
     "--offload nvme: directories (DIR[,DIR...], one per drive) of the optimizer state's "
     "scratch files"},
    {"nvme-ahead", OPT_INT, CFG(nvme_ahead), 0, 64,
     "--offload nvme: state buckets read ahead of the host step and written behind it (0: 2)"},
    {"offload-grads", OPT_CHOICE, CFG(offload_grads), 0, 0,
     "--offload nvme: the gradient partition on the host (cpu), on the drives (nvme), or auto: "
     "on the drives where the plan says the host cannot hold it (docs/nvme.md)"},
    {"no-plan-check", OPT_FLAG, CFG(no_plan_check), 0, 1,
     "run even when the plan says the run does not fit"},
    {"hardware", OPT_HARDWARE, CFG(hardware), 0, 0,
     "the box to plan for: local (this machine), dgx2, dgx-h100, ... (zoe-plan --help)"},
    {"save", OPT_PATH, CFG(save), 0, 0, "save checkpoints into this directory"},
    {"save-every", OPT_INT, CFG(save_every), 0, 1e9,
     "save every N steps (0: only at the end and on SIGTERM/SIGINT/SIGUSR1)"},
    {"keep-last", OPT_INT, CFG(keep_last), 0, 1e9, "keep the K newest checkpoints (0: all)"},
    {"resume", OPT_PATH, CFG(resume), 0, 0,
     "continue from a checkpoint, or the newest one in a directory"},
    {"val-data", OPT_PATH, CFG(val_data), 0, 0, "validation dataset (as --data)"},
    {"split", OPT_SPLIT, CFG(split_train), 0, 0,
     "T,V: train on the first T% of --data's documents, validate on the last V% (e.g. 98,2)"},
    {"eval-every", OPT_INT, CFG(eval_every), 0, 1e9,
     "validation loss every N steps and at the end (0: at the end, given a validation set)"},
    {"eval-iters", OPT_INT, CFG(eval_iters), 1, 1e6,
     "global batches of validation data per evaluation"},
    {"device-memory", OPT_SIZE, CFG(device_memory), 0, 0,
     "the most zoe allocates on each rank's device: 512MiB, 30GiB, bytes, or auto (the GPU's "
     "memory; on the CPU backend no limit)"},
    {"pinned-memory", OPT_SIZE, CFG(pinned_memory), 0, 0,
     "the most page-locked host memory each rank pins (past it buffers are pageable: slower "
     "copies): 16GiB, bytes, or auto (no limit)"},
};

/* The names of an OPT_CHOICE option's values, NULL-terminated. */
static const char *const *choices(const option_spec *o) {
    if (o->offset == CFG(dpu_schedule)) return dpu_schedule_names;
    if (o->offset == CFG(offload_params)) return offload_params_names;
    if (o->offset == CFG(offload_grads)) return offload_grads_names;
    if (o->offset == CFG(main_params_dtype) || o->offset == CFG(exp_avg_dtype) ||
        o->offset == CFG(exp_avg_sq_dtype))
        return state_dtype_names;
    return o->offset == CFG(lr_decay_style) ? decay_style_names : wsd_style_names;
}
enum { NUM_OPTIONS = sizeof options / sizeof options[0] };

zoe_status zoe_train_config_defaults_for(zoe_train_config *cfg, size_t struct_size,
                                         int api_version) {
    if (!cfg) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_train_config_defaults: cfg is NULL");
    ZOE_TRY(zoe_check_struct_version("zoe_train_config", struct_size, api_version, sizeof *cfg));
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->api_version = ZOE_API_VERSION;
    zoe_model_preset("demo", &cfg->model);
    cfg->backend = ZOE_BACKEND_CPU;
    cfg->tp = 1;
    cfg->micro_batch = 4;
    cfg->grad_accum = 1;
    cfg->steps = 100;
    cfg->lr = 3e-3f;
    cfg->min_lr = 3e-4f;
    cfg->warmup = ZOE_WARMUP_AUTO;
    cfg->eval_iters = 10;
    cfg->weight_decay = 0.1f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.95f;
    cfg->eps = 1e-8f;
    cfg->clip_grad = 1.0f;
    cfg->dtype = ZOE_F32;
    cfg->offload = ZOE_OFFLOAD_CPU;
    cfg->dpu_warmup = 5;
    cfg->loss_scale = 65536.0f;
    cfg->seed = 1234;
    cfg->log_every = 1;
    cfg->bucket_mb = 16;
    cfg->offload_ratio = 1.0f;
    cfg->stop_grace = 20; /* under Slurm's default KillWait (30 s): the abort's line is seen */
    cfg->dpu = ZOE_DPU_ON;
    cfg->dpu_schedule = ZOE_DPU_EXACT; /* docs/offload.md: no convergence cost, no memory */
    cfg->dpu_dc_kappa = 1.0f;
    cfg->dpu_predict_scale = 1.5f;
    snprintf(cfg->hardware, sizeof cfg->hardware, "local");
    cfg->lr_decay_style = ZOE_LR_COSINE;
    cfg->lr_wsd_decay_fraction = 0.1f;
    cfg->lr_wsd_decay_style = ZOE_WSD_EXPONENTIAL;
    return ZOE_OK;
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

/* A size as zoe_parse_size reads it back: in the largest binary unit that holds it whole. */
static void format_size(uint64_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
    for (int u = 0; u < 4; u++) {
        uint64_t unit = (uint64_t)1 << (10 * (4 - u));
        if (bytes >= unit && bytes % unit == 0) {
            snprintf(buf, n, "%llu%s", (unsigned long long)(bytes / unit), units[u]);
            return;
        }
    }
    snprintf(buf, n, "%llu", (unsigned long long)bytes);
}

static zoe_status parse_number(const option_spec *o, const char *text, double *out) {
    double v = 0;
    if (!zoe_parse_number(text, &v))
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

/* "T,V" (two decimal integers) into split[0], split[1]; "none" is 0,0 (no split). */
static zoe_status parse_split(const option_spec *o, const char *text, int split[2]) {
    if (strcmp(text, "none") == 0) {
        split[0] = split[1] = 0;
        return ZOE_OK;
    }
    long v[2];
    const char *t = text;
    for (int i = 0; i < 2; i++) {
        char *end;
        errno = 0;
        v[i] = isdigit((unsigned char)*t) ? strtol(t, &end, 10) : -1;
        if (v[i] < 0 || errno || *end != (i == 0 ? ',' : '\0') || v[i] > 100)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--%s: '%s' is not two percentages T,V summing to 100 (e.g. 98,2)",
                            o->name, text);
        t = end + 1;
    }
    if (v[0] < 1 || v[1] < 1 || v[0] + v[1] != 100)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--%s=%s is not two positive percentages summing to 100", o->name, text);
    split[0] = (int)v[0], split[1] = (int)v[1];
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
        /* "" is none, as zoe_train_config_json writes an unset one */
        return text[0] ? zoe_hf_read_config(text, &cfg->model) : ZOE_OK;
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
        if (zoe_dtype_parse(text, (zoe_dtype *)base) != ZOE_OK ||
            !zoe_dtype_is_float(*(zoe_dtype *)base))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: '%s' is not fp32, bf16 or fp16",
                            o->name, text);
        return ZOE_OK;
    case OPT_BACKEND:
        if (zoe_backend_parse(text, (zoe_backend *)base) != ZOE_OK)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--backend: '%s' is not cpu or cuda", text);
        return ZOE_OK;
    case OPT_OFFLOAD:
        for (int i = 0; i <= ZOE_OFFLOAD_NVME; i++)
            if (strcmp(text, offload_names[i]) == 0) {
                *(zoe_offload_mode *)base = (zoe_offload_mode)i;
                return ZOE_OK;
            }
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--offload: '%s' is not cpu, none or nvme", text);
    case OPT_PROGRESS: {
        for (int i = 0; i < 3; i++)
            if (strcmp(text, progress_names[i]) == 0) {
                *(zoe_progress_style *)base = (zoe_progress_style)i;
                return ZOE_OK;
            }
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--progress: '%s' is not auto, bar or lines",
                        text);
    }
    case OPT_CHOICE:
        for (int i = 0; choices(o)[i]; i++)
            if (strcmp(text, choices(o)[i]) == 0) {
                *(int *)base = i;
                /* Streamed weights: activations are what fills the device, so recomputation
                 * comes with them (set before the other options: an explicit one wins). */
                if (o->offset == CFG(offload_params) && i != ZOE_OFFLOAD_PARAMS_NONE)
                    cfg->recompute = 1;
                return ZOE_OK;
            }
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s: '%s' is not one of: %s", o->name, text,
                        o->help);
    case OPT_HARDWARE:
        if (strlen(text) >= sizeof cfg->hardware)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--hardware: '%s' is too long", text);
        strcpy(base, text);
        return ZOE_OK;
    case OPT_DPU:
        for (int i = 0; i < 3; i++)
            if (strcmp(text, dpu_names[i]) == 0) {
                *(zoe_dpu_mode *)base = (zoe_dpu_mode)i;
                return ZOE_OK;
            }
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--dpu: '%s' is not on, off or auto", text);
    case OPT_RATIO:
        if (strcmp(text, "auto") == 0) {
            *(float *)base = ZOE_OFFLOAD_RATIO_AUTO;
            return ZOE_OK;
        }
        ZOE_TRY(parse_number(o, text, &v));
        *(float *)base = (float)v;
        return ZOE_OK;
    case OPT_SPLIT:
        return parse_split(o, text, (int *)base);
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
        if (!zoe_parse_u64(text, (uint64_t *)(void *)base))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--%s: '%s' is not an integer in [0, 2^64 - 1]", o->name, text);
        return ZOE_OK;
    case OPT_FLOAT:
        ZOE_TRY(parse_number(o, text, &v));
        *(float *)base = (float)v;
        return ZOE_OK;
    case OPT_SIZE: {
        uint64_t bytes = 0; /* auto */
        if (strcmp(text, "auto") != 0 && (!zoe_parse_size(text, &bytes) || bytes == 0))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--%s: '%s' is not a size (bytes, or a number with KiB, MiB, GiB or "
                            "TiB: 512MiB, 30GiB) or auto",
                            o->name, text);
        memcpy(base, &bytes, sizeof bytes);
        return ZOE_OK;
    }
    }
    return zoe_fail(ZOE_ERR_INTERNAL, "option kind %d", (int)o->kind);
}

/* Which JSON type a key takes: numbers for numeric options, true/false for flags, strings for
 * the rest (a quoted number or a number for a path is a mistake worth naming). */
static const char *json_type_needed(const option_spec *o) {
    switch (o->kind) {
    case OPT_INT:
    case OPT_INT64:
    case OPT_FLOAT:
        return "a number";
    case OPT_U64:
        return "a number or a string of digits";
    case OPT_FLAG:
        return "true or false";
    case OPT_RATIO:
        return "a number or \"auto\"";
    case OPT_SIZE:
        return "a number of bytes or a string (\"512MiB\", \"auto\")";
    default:
        return "a string";
    }
}

static int json_type_ok(const option_spec *o, const cJSON *item) {
    switch (o->kind) {
    case OPT_INT:
    case OPT_INT64:
    case OPT_FLOAT:
        return cJSON_IsNumber(item);
    case OPT_U64:
        return cJSON_IsNumber(item) ||
               (cJSON_IsString(item) && isdigit((unsigned char)item->valuestring[0]));
    case OPT_FLAG:
        return cJSON_IsBool(item);
    case OPT_RATIO:
    case OPT_SIZE:
        return cJSON_IsNumber(item) || cJSON_IsString(item);
    default:
        return cJSON_IsString(item);
    }
}

/* The number as the file wrote it for KEY ("1e999"), into out: cJSON keeps only the double, and
 * one that overflowed to inf must be quoted as the user wrote it. Keys are unique (checked before).
 */
static void json_number_as_written(const char *json, const char *key, char *out, size_t cap) {
    size_t n = strlen(key);
    snprintf(out, cap, "%s", "(a number out of range)");
    for (const char *p = strstr(json, key); p; p = strstr(p + 1, key)) {
        if (p == json || p[-1] != '"' || p[n] != '"') continue;
        const char *v = p + n + 1;
        while (isspace((unsigned char)*v)) v++;
        if (*v++ != ':') continue;
        while (isspace((unsigned char)*v)) v++;
        size_t len = strspn(v, "0123456789+-.eE");
        if (len == 0) continue;
        snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), v);
        return;
    }
}

static zoe_status apply_json_item(zoe_train_config *cfg, const cJSON *item, const char *json,
                                  const char *path) {
    const option_spec *o = find_option(item->string);
    if (!o) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: unknown key \"%s\"", path, item->string);
    if (!json_type_ok(o, item))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: key \"%s\" needs %s", path, item->string,
                        json_type_needed(o));
    char text[64];
    const char *value = text;
    if (cJSON_IsString(item))
        value = item->valuestring;
    else if (cJSON_IsBool(item))
        snprintf(text, sizeof text, "%s", cJSON_IsTrue(item) ? "true" : "false");
    else if (isfinite(item->valuedouble))
        snprintf(text, sizeof text, "%.17g", item->valuedouble);
    else
        json_number_as_written(json, item->string, text, sizeof text);
    zoe_status st = set_option(cfg, o, value);
    if (st != ZOE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zoe_last_error());
        return zoe_fail(st, "%s: %s", path, msg);
    }
    return ZOE_OK;
}

/* Every key once: "micro-batch" and "micro_batch" name the same option, so both are a repeat. */
static zoe_status check_duplicate_keys(const cJSON *root, const char *path) {
    for (const cJSON *a = root->child; a; a = a->next)
        for (const cJSON *b = root->child; b != a; b = b->next) {
            const option_spec *oa = find_option(a->string), *ob = find_option(b->string);
            if (strcmp(a->string, b->string) == 0 || (oa && oa == ob))
                return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: key \"%s\" is given twice%s%s%s",
                                path, a->string, strcmp(a->string, b->string) ? " (also as \"" : "",
                                strcmp(a->string, b->string) ? b->string : "",
                                strcmp(a->string, b->string) ? "\")" : "");
        }
    return ZOE_OK;
}

static int is_offload_params(const option_spec *o) {
    return o && o->kind == OPT_CHOICE && o->offset == CFG(offload_params);
}

/* The order a JSON config's keys apply in, whatever their place: the model preset first (explicit
 * shape options refine it), then --offload-params (it turns --recompute on, which an explicit
 * one overrides), then the rest. */
static int json_rank(const option_spec *o) {
    return o && o->kind == OPT_MODEL ? 0 : is_offload_params(o) ? 1 : 2;
}

zoe_status zoe_train_config_apply_json(zoe_train_config *cfg, const char *text, const char *path) {
    cJSON *root = NULL;
    char name[ZOE_PATH_MAX + 16];
    snprintf(name, sizeof name, "config '%s'", path);
    ZOE_TRY(zoe_json_parse(text, name, &root));
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "config '%s' is not a JSON object", path);
    }
    zoe_status st = check_duplicate_keys(root, path);
    for (int rank = 0; rank < 3; rank++)
        for (const cJSON *item = root->child; item && st == ZOE_OK; item = item->next)
            if (json_rank(find_option(item->string)) == rank)
                st = apply_json_item(cfg, item, text, path);
    cJSON_Delete(root);
    return st;
}

zoe_status zoe_train_config_load_json(zoe_train_config *cfg, const char *path) {
    if (!cfg || !path)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_train_config_load_json: NULL argument");
    char *text = NULL;
    ZOE_TRY(zoe_json_read_text(path, "config ", (size_t)1 << 20, &text));
    zoe_status st = zoe_train_config_apply_json(cfg, text, path);
    free(text);
    return st;
}

zoe_status zoe_train_config_parse_args(zoe_train_config *cfg, int argc, char **argv, int *help,
                                       int *list_models) {
    *help = *list_models = 0;
    /* Pass 0: --config; pass 1: --model or --init-from (a shape), --offload-params; pass 2:
     * everything else. */
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
            char flag[sizeof name + 2];
            snprintf(flag, sizeof flag, "--%s", name);
            if (!value && o && o->kind == OPT_FLAG) {
                if (zoe_cli_once(argv, i, flag) != 0) return ZOE_ERR_INVALID_ARGUMENT;
                value = "true";
            } else if (zoe_cli_value(argc, argv, &i, flag, ZOE_CLI_ONCE, &value) != 1) {
                return ZOE_ERR_INVALID_ARGUMENT;
            }
            int early = o && (o->kind == OPT_MODEL || o->kind == OPT_HF || is_offload_params(o));
            if (pass == 0 && is_config)
                ZOE_TRY(zoe_train_config_load_json(cfg, value));
            else if (pass == 1 && early)
                ZOE_TRY(set_option(cfg, o, value));
            else if (pass == 2 && o && !early)
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

/* One table row against the value a struct holds (however it was filled): the same ranges and
 * names as the flags and the JSON keys, so a hand-filled struct gets the same message. */
static zoe_status check_option(const zoe_train_config *c, const option_spec *o) {
    const char *base = (const char *)c + o->offset;
    switch (o->kind) {
    case OPT_INT: {
        int v;
        memcpy(&v, base, sizeof v);
        if (v < o->min || v > o->max)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%d is out of range [%g, %g]", o->name,
                            v, o->min, o->max);
        return ZOE_OK;
    }
    case OPT_INT64: {
        int64_t v;
        memcpy(&v, base, sizeof v);
        if ((double)v < o->min || (double)v > o->max)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%lld is out of range [%g, %g]", o->name,
                            (long long)v, o->min, o->max);
        return ZOE_OK;
    }
    case OPT_FLOAT: {
        float v;
        memcpy(&v, base, sizeof v);
        if (!(v >= o->min && v <= o->max)) /* NaN fails too */
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%g is out of range [%g, %g]", o->name,
                            (double)v, o->min, o->max);
        return ZOE_OK;
    }
    case OPT_FLAG: {
        int v;
        memcpy(&v, base, sizeof v);
        if (v != 0 && v != 1)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%d is not 0 or 1", o->name, v);
        return ZOE_OK;
    }
    case OPT_DTYPE: {
        zoe_dtype v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_F32 && v != ZOE_BF16 && v != ZOE_F16)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%d is not fp32, bf16 or fp16", o->name,
                            (int)v);
        return ZOE_OK;
    }
    case OPT_BACKEND: {
        zoe_backend v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_BACKEND_CPU && v != ZOE_BACKEND_CUDA)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--backend=%d is not cpu or cuda", (int)v);
        return ZOE_OK;
    }
    case OPT_OFFLOAD: {
        zoe_offload_mode v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_OFFLOAD_CPU && v != ZOE_OFFLOAD_NONE && v != ZOE_OFFLOAD_NVME)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--offload=%d is not cpu, none or nvme",
                            (int)v);
        return ZOE_OK;
    }
    case OPT_PROGRESS: {
        zoe_progress_style v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_PROGRESS_AUTO && v != ZOE_PROGRESS_BAR && v != ZOE_PROGRESS_LINES)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--progress=%d is not auto, bar or lines",
                            (int)v);
        return ZOE_OK;
    }
    case OPT_PATH:
        if (!memchr(base, '\0', ZOE_PATH_MAX))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s is not a string shorter than %d bytes",
                            o->name, ZOE_PATH_MAX);
        return ZOE_OK;
    case OPT_MODEL:
        if (!memchr(c->model.name, '\0', sizeof c->model.name))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "model name is not a string shorter than %zu bytes",
                            sizeof c->model.name);
        return ZOE_OK;
    case OPT_U64:
        return ZOE_OK; /* every seed is a seed */
    case OPT_SIZE:
        return ZOE_OK; /* every size is a cap (0: the device's memory) */
    case OPT_CHOICE: {
        int v, n = 0;
        memcpy(&v, base, sizeof v);
        while (choices(o)[n]) n++;
        if (v < 0 || v >= n)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%d is not one of: %s", o->name, v,
                            o->help);
        return ZOE_OK;
    }
    case OPT_RATIO: {
        float v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_OFFLOAD_RATIO_AUTO && !(v >= o->min && v <= o->max))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s=%g is not auto or in [%g, %g]", o->name,
                            (double)v, o->min, o->max);
        return ZOE_OK;
    }
    case OPT_DPU: {
        zoe_dpu_mode v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_DPU_ON && v != ZOE_DPU_OFF && v != ZOE_DPU_AUTO)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--dpu=%d is not on, off or auto", (int)v);
        return ZOE_OK;
    }
    case OPT_HF:
        if (!memchr(base, '\0', ZOE_PATH_MAX))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--%s is not a string shorter than %d bytes",
                            o->name, ZOE_PATH_MAX);
        return ZOE_OK;
    case OPT_FAMILY: {
        zoe_model_family v;
        memcpy(&v, base, sizeof v);
        if (v != ZOE_MODEL_GPT && v != ZOE_MODEL_LLAMA)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--family=%d is not gpt or llama", (int)v);
        return ZOE_OK;
    }
    case OPT_SPLIT:
        if ((c->split_train || c->split_val) &&
            (c->split_train < 1 || c->split_val < 1 || c->split_train > 99 || c->split_val > 99 ||
             c->split_train + c->split_val != 100))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--%s=%d,%d is not two positive percentages summing to 100", o->name,
                            c->split_train, c->split_val);
        return ZOE_OK;
    case OPT_HARDWARE:
        if (!memchr(base, '\0', sizeof c->hardware))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--hardware is not a string shorter than %zu bytes",
                            sizeof c->hardware);
        return ZOE_OK;
    }
    return zoe_fail(ZOE_ERR_INTERNAL, "option kind %d", (int)o->kind);
}

/* --offload nvme and its options (docs/nvme.md). */
static zoe_status check_nvme(const zoe_train_config *c) {
    if (c->offload_params == ZOE_OFFLOAD_PARAMS_NVME && c->offload != ZOE_OFFLOAD_NVME)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload-params=nvme with --offload=%s: the weights on drives live in "
                        "the state's scratch space (use --offload nvme --nvme-path DIR)",
                        c->offload == ZOE_OFFLOAD_NONE ? "none" : "cpu");
    if (c->offload_grads < ZOE_OFFLOAD_GRADS_AUTO || c->offload_grads > ZOE_OFFLOAD_GRADS_NVME)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--offload-grads=%d is not auto, cpu or nvme",
                        c->offload_grads);
    if (c->offload != ZOE_OFFLOAD_NVME && c->offload_grads != ZOE_OFFLOAD_GRADS_AUTO)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload-grads=%s without --offload nvme: the gradient partition goes "
                        "to the state's drives",
                        offload_grads_names[c->offload_grads]);
    if (c->offload != ZOE_OFFLOAD_NVME) {
        if (c->nvme_path[0])
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--nvme-path=%s without --offload nvme: nothing would live there",
                            c->nvme_path);
        return ZOE_OK;
    }
    if (!c->nvme_path[0])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload=nvme without --nvme-path: give the drives' directories "
                        "(DIR[,DIR...])");
    for (const char *p = c->nvme_path; *p; p++)
        if (*p == ',' && (p == c->nvme_path || p[1] == ',' || p[1] == '\0'))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--nvme-path=%s: an empty directory name",
                            c->nvme_path);
    if (c->offload_ratio != 1.0f)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload=nvme with --offload-ratio=%s: the drives hold the whole "
                        "partition's state (use --offload-ratio 1)",
                        c->offload_ratio == ZOE_OFFLOAD_RATIO_AUTO ? "auto" : "below 1");
    return ZOE_OK;
}

zoe_status zoe_train_config_validate(const zoe_train_config *c, int world_size) {
    if (!c) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_train_config_validate: cfg is NULL");
    ZOE_TRY(
        zoe_check_struct_version("zoe_train_config", c->struct_size, c->api_version, sizeof *c));
    if (world_size < 1)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "world size %d is not a number of ranks",
                        world_size);
    for (int i = 0; i < NUM_OPTIONS; i++) ZOE_TRY(check_option(c, &options[i]));
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
    if (c->offload_ratio != ZOE_OFFLOAD_RATIO_AUTO &&
        !(c->offload_ratio >= 0.0f && c->offload_ratio <= 1.0f))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--offload-ratio=%g is outside [0, 1]",
                        (double)c->offload_ratio);
    if (c->min_lr > c->lr && c->lr_decay_style != ZOE_LR_CONSTANT) /* constant never reads it */
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--min-lr=%g is above --lr=%g", c->min_lr, c->lr);
    if (c->dpu != ZOE_DPU_OFF && c->dpu_warmup > 0 && c->dpu_schedule == ZOE_DPU_EXACT &&
        !(c->beta1 > 0 && c->beta2 > 0))
        return zoe_fail(
            ZOE_ERR_INVALID_ARGUMENT,
            "--beta1=%g --beta2=%g: --dpu-schedule exact undoes a step from the moments "
            "it left and needs both > 0 (or --dpu off)",
            (double)c->beta1, (double)c->beta2);
    if (c->offload_params == ZOE_OFFLOAD_PARAMS_CPU && c->offload == ZOE_OFFLOAD_NONE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload-params=cpu with --offload=none: the streamed weights live in "
                        "the host optimizer's partition (use --offload cpu)");
    if (c->offload_params != ZOE_OFFLOAD_PARAMS_NONE && c->offload_ratio != 1.0f)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--offload-params=%s with --offload-ratio=%s: the device share's Adam "
                        "writes its weights into a device copy, which streamed weights do not "
                        "keep (use --offload-ratio 1)",
                        c->offload_params == ZOE_OFFLOAD_PARAMS_CPU ? "cpu" : "nvme",
                        c->offload_ratio == ZOE_OFFLOAD_RATIO_AUTO ? "auto" : "below 1");
    ZOE_TRY(check_nvme(c));
    if (c->main_params_dtype == ZOE_STATE_INT8)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--main-params-dtype=int8: the master weights are fp32 or bf16 (int8 is "
                        "for the moments, --exp-avg-dtype and --exp-avg-sq-dtype)");

    if (c->main_grads_dtype != ZOE_F32) {
        const char *g = zoe_dtype_name(c->main_grads_dtype);
        if (c->main_grads_dtype != c->dtype)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--main-grads-dtype=%s with --dtype=%s: the gradient partition is fp32 "
                            "or the compute dtype",
                            g, zoe_dtype_name(c->dtype));
        if (c->grad_accum != 1)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--main-grads-dtype=%s with --grad-accum=%d: micro-batches accumulate "
                            "in fp32 (a %s partition holds one)",
                            g, c->grad_accum, g);
        if (c->backend == ZOE_BACKEND_CPU &&
            (c->offload == ZOE_OFFLOAD_NONE ||
             (c->offload_ratio < 1 && c->offload_ratio != ZOE_OFFLOAD_RATIO_AUTO)))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "--main-grads-dtype=%s with --offload-ratio below 1 on the CPU "
                            "backend: its device share accumulates in fp32 (not built)",
                            g);
    }
    if (c->dtype == ZOE_F16 && c->backend == ZOE_BACKEND_CPU)
        return zoe_fail(
            ZOE_ERR_INVALID_ARGUMENT,
            "--dtype=fp16 needs --backend=cuda (the CPU backend computes in fp32 or bf16)");
    /* What a backend cannot run is refused here, before anything is allocated. */
    if (c->backend == ZOE_BACKEND_CUDA && m->hidden / m->heads > 256)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--hidden=%d / --heads=%d is a head dim of %d; the CUDA attention kernels "
                        "take at most 256",
                        m->hidden, m->heads, m->hidden / m->heads);
    if (c->tf32 && c->dtype != ZOE_F32)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "--tf32 is for --dtype=fp32 (got %s)",
                        zoe_dtype_name(c->dtype));
    if (c->data[0] && !data_exists(c->data))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--data: '%s' is neither a file nor a prefix of PREFIX.bin and PREFIX.idx",
                        c->data);
    if (c->val_data[0] && !data_exists(c->val_data))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--val-data: '%s' is neither a file nor a prefix of PREFIX.bin and "
                        "PREFIX.idx",
                        c->val_data);
    if (c->val_data[0] && c->split_train)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--split=%d,%d and --val-data '%s' are two validation sets: give one",
                        c->split_train, c->split_val, c->val_data);
    if (c->eval_every > 0 && !c->val_data[0] && !c->split_train)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--eval-every=%d without a validation set: give --val-data PREFIX or "
                        "--split T,V (e.g. 98,2)",
                        c->eval_every);
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
        snprintf(buf, n, "%s", offload_names[*(const zoe_offload_mode *)base]);
        break;
    case OPT_FLAG:
        snprintf(buf, n, "%s", *(const int *)base ? "on" : "off");
        break;
    case OPT_HARDWARE:
        snprintf(buf, n, "%s", base);
        break;
    case OPT_SPLIT:
        if (cfg->split_train || cfg->split_val)
            snprintf(buf, n, "%d,%d", cfg->split_train, cfg->split_val);
        else
            snprintf(buf, n, "none");
        break;
    case OPT_DPU:
        snprintf(buf, n, "%s", dpu_names[*(const zoe_dpu_mode *)base]);
        break;
    case OPT_RATIO:
        if (*(const float *)base == ZOE_OFFLOAD_RATIO_AUTO)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%g", (double)*(const float *)base);
        break;
    case OPT_PROGRESS:
        snprintf(buf, n, "%s", progress_names[*(const zoe_progress_style *)base]);
        break;
    case OPT_CHOICE:
        snprintf(buf, n, "%s", choices(o)[*(const int *)base]);
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
    case OPT_SIZE: {
        uint64_t bytes;
        memcpy(&bytes, base, sizeof bytes);
        if (bytes)
            format_size(bytes, buf, n);
        else
            snprintf(buf, n, "auto");
        break;
    }
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
            "Trains GPT-2 and Llama-family language models with tensor parallelism (--tp) x data\n"
            "parallelism (the rest of the ranks) and ZeRO-Offload. Each option at most once;\n"
            "flags win over --config. Options (default in brackets):\n",
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

static int decay_iters(const zoe_train_config *c) {
    return c->lr_decay_iters > 0 ? c->lr_decay_iters : c->steps;
}

/* WSD's decay starts here: the last round(f D) steps of the decay horizon D. */
static int wsd_anneal_start(const zoe_train_config *c) {
    int d = decay_iters(c);
    return d - (int)lround((double)c->lr_wsd_decay_fraction * d);
}

int zoe_train_warmup(const zoe_train_config *c) {
    if (c->warmup != ZOE_WARMUP_AUTO) return c->warmup;
    /* the default: 10 steps, or fewer in a shorter run, leaving the decay at least one step */
    int d = decay_iters(c), w = c->steps < 10 ? c->steps : 10;
    return c->lr_decay_style != ZOE_LR_CONSTANT && w >= d ? (d > 1 ? d - 1 : 0) : w;
}

zoe_status zoe_train_schedule_validate(const zoe_train_config *c) {
    int d = decay_iters(c), w = zoe_train_warmup(c);
    if (w > c->steps)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--lr-warmup-iters=%d is longer than the run (--steps=%d)", w, c->steps);
    if (c->lr_decay_style != ZOE_LR_CONSTANT && w >= d)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--lr-warmup-iters=%d is not shorter than the decay (--lr-decay-iters=%d)",
                        w, d);
    if (c->lr_decay_style == ZOE_LR_WSD && (wsd_anneal_start(c) < w || wsd_anneal_start(c) >= d))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--lr-wsd-decay-fraction=%g: the decay (steps %d to %d) must follow the "
                        "warm-up (%d steps) and last at least one step",
                        (double)c->lr_wsd_decay_fraction, wsd_anneal_start(c), d, w);
    return ZOE_OK;
}

float zoe_train_lr_at(const zoe_train_config *c, int step) {
    const double pi = 3.14159265358979323846, lr = c->lr, min_lr = c->min_lr;
    int w = zoe_train_warmup(c), d = decay_iters(c);
    if (w > 0 && step < w) return (float)(lr * (double)(step + 1) / (double)w);
    if (c->lr_decay_style == ZOE_LR_CONSTANT) return c->lr;
    if (step >= d) return c->min_lr;
    if (c->lr_decay_style == ZOE_LR_INVERSE_SQRT)
        return (float)fmax(min_lr, lr * sqrt((double)(w > 1 ? w : 1) / (double)(step + 1)));
    double coeff;
    if (c->lr_decay_style == ZOE_LR_WSD) {
        int a = wsd_anneal_start(c);
        if (step < a) return c->lr;
        double r = (double)(step - a) / (double)(d - a);
        switch (c->lr_wsd_decay_style) {
        case ZOE_WSD_LINEAR:
            coeff = 1 - r;
            break;
        case ZOE_WSD_COSINE:
            coeff = 0.5 * (1 + cos(pi * r));
            break;
        case ZOE_WSD_MINUS_SQRT:
            coeff = 1 - sqrt(r);
            break;
        default:
            coeff = 2 * pow(0.5, r) - 1;
        }
    } else {
        double p = d > w ? (double)(step - w) / (double)(d - w) : 1.0;
        coeff = c->lr_decay_style == ZOE_LR_LINEAR ? 1 - p : 0.5 * (1 + cos(pi * p));
    }
    return (float)(min_lr + (lr - min_lr) * coeff);
}
