/* Training: model shapes and presets, the run configuration (flags and JSON), and the trainer
 * that drives the GPT model and the offload optimizer. zoe-train is built on this header alone;
 * research trainers call the same functions with their own batches (see examples/). */
#ifndef ZOE_TRAIN_H
#define ZOE_TRAIN_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model shapes ---- */
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
} zoe_model_config;

/* Fills *out with the named preset (demo, gpt2-124m, gpt2-350m, 1.3b, 2.7b, 6.7b, 10b, 13b, 70b).
 */
zoe_status zoe_model_preset(const char *name, zoe_model_config *out);
int zoe_model_preset_count(void);
const zoe_model_config *zoe_model_preset_at(int index);
/* Parameters of the model as defined (unpadded vocabulary, tied embeddings counted once). */
int64_t zoe_model_param_count(const zoe_model_config *model);

/* ---- run configuration ---- */
typedef enum zoe_offload_mode {
    ZOE_OFFLOAD_CPU = 0,  /* optimizer state and step on the host (ZeRO-Offload) */
    ZOE_OFFLOAD_NONE = 1, /* optimizer state and step on the device */
} zoe_offload_mode;

#define ZOE_PATH_MAX 1024

typedef struct zoe_train_config {
    zoe_model_config model;
    zoe_backend backend;
    int tp;          /* tensor-parallel size; dp = world / tp */
    int micro_batch; /* sequences per rank per micro-batch */
    int grad_accum;  /* micro-batches per step */
    int steps;
    float lr, min_lr;   /* peak and final learning rate */
    int warmup;         /* linear warm-up steps, then cosine decay to min_lr at `steps` */
    float weight_decay; /* decoupled (AdamW) */
    float beta1, beta2, eps;
    float clip_grad; /* global norm; 0 disables */
    zoe_dtype dtype; /* compute dtype of device weights and activations */
    zoe_offload_mode offload;
    int dpu_warmup;          /* steps before the delayed parameter update starts; -1 disables DPU */
    int recompute;           /* recompute each layer's activations in backward */
    char data[ZOE_PATH_MAX]; /* indexed dataset prefix or a .txt file */
    uint64_t seed;
    char metrics[ZOE_PATH_MAX]; /* JSON lines, one per step; "" for none */
    int log_every;
    int64_t bucket_mb; /* gradient bucket size in MiB */
} zoe_train_config;

void zoe_train_config_defaults(zoe_train_config *cfg);
/* Applies a JSON file whose keys mirror the command-line options ("micro-batch" or
 * "micro_batch"); unknown keys and bad values are errors naming them. */
zoe_status zoe_train_config_load_json(zoe_train_config *cfg, const char *path);
/* Parses zoe-train's command line into cfg: --config first, then the other flags (flags win).
 * *help is set when --help was given, *list_models for --list-models. */
zoe_status zoe_train_config_parse_args(zoe_train_config *cfg, int argc, char **argv, int *help,
                                       int *list_models);
/* Checks the configuration against the world size (grid and shape divisibility, ranges,
 * the data file); the message names the first problem. Pure: no allocation, no MPI. */
zoe_status zoe_train_config_validate(const zoe_train_config *cfg, int world_size);
/* Writes the option list with defaults (zoe-train --help). */
void zoe_train_config_print_help(FILE *out, const char *program);
/* Learning rate at a step: linear warm-up from 0, then cosine to min_lr at cfg->steps. */
float zoe_train_lr_at(const zoe_train_config *cfg, int step);

/* ---- one step's figures, progress display and metrics ---- */
typedef struct zoe_step_stats {
    int step;   /* 0-based */
    float loss; /* mean over the global batch's tokens */
    float lr;
    float grad_norm;  /* global, before clipping */
    float loss_scale; /* 1 unless fp16 */
    int skipped;      /* overflow: the update was skipped */
    int64_t tokens;   /* tokens in the global batch */
    double ms_total, ms_forward, ms_backward, ms_offload, ms_host_step, ms_refresh;
} zoe_step_stats;

typedef struct zoe_progress zoe_progress;
/* Progress on out (a live bar when out is a terminal, plain lines otherwise, every log_every
 * steps) and, when metrics_path is not "", one JSON object per step appended to that file. */
zoe_status zoe_progress_create(FILE *out, int total_steps, int log_every, const char *metrics_path,
                               zoe_progress **p);
zoe_status zoe_progress_report(zoe_progress *p, const zoe_step_stats *stats);
/* Ends the live line; closes the metrics file. */
void zoe_progress_destroy(zoe_progress *p);

#ifdef __cplusplus
}
#endif
#endif
