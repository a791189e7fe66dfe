/* Training: the run configuration (flags and JSON) and the trainer that drives the model
 * (zoe/model.h) and the offload optimizer. zoe-train is built on this header alone; research
 * trainers call the same functions with their own batches (see examples/).
 *
 * Explained in docs/library.md; docs/train.md. */
#ifndef ZOE_TRAIN_H
#define ZOE_TRAIN_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include "zoe/device.h"
#include "zoe/dtype.h"
#include "zoe/cli.h" /* zoe-train reads its flags with these */
#include "zoe/model.h"
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- run configuration ---- */
typedef enum zoe_offload_mode {
    ZOE_OFFLOAD_CPU = 0,  /* optimizer state and step on the host (ZeRO-Offload) */
    ZOE_OFFLOAD_NONE = 1, /* optimizer state and step on the device */
    /* the step on the host, the state in files on drives (zoe_train_config.nvme_path),
     * streamed through a ring of buckets in host memory (docs/nvme.md) */
    ZOE_OFFLOAD_NVME = 2,
} zoe_offload_mode;

#define ZOE_PATH_MAX           1024
#define ZOE_OFFLOAD_RATIO_AUTO (-1.0f)
#define ZOE_WARMUP_AUTO        (-1) /* zoe-train's default warm-up: min(10, steps) */

/* The delayed parameter update: as --dpu-warmup says (ON: on after dpu_warmup synchronous
 * steps, off when it is 0), OFF, or AUTO (on only where the plan predicts that the host step
 * would stall the device by more than ZOE_PLAN_DPU_STALL_SHARE of the step). */
typedef enum zoe_dpu_mode {
    ZOE_DPU_ON = 0,
    ZOE_DPU_OFF = 1,
    ZOE_DPU_AUTO = 2,
} zoe_dpu_mode;

/* How rank 0 shows progress. AUTO: a live bar when stdout is a terminal, except under Open MPI,
 * whose launcher hands every rank a pseudo-terminal even when mpirun's output is a file
 * (open-mpi/ompi#7868): there AUTO means lines, and --progress=bar asks for the bar. */
typedef enum zoe_progress_style {
    ZOE_PROGRESS_AUTO = 0,
    ZOE_PROGRESS_BAR = 1,
    ZOE_PROGRESS_LINES = 2,
} zoe_progress_style;

/* Learning-rate schedules as Megatron-LM names them (--lr-decay-style). */
typedef enum zoe_lr_decay_style {
    ZOE_LR_CONSTANT = 0,
    ZOE_LR_LINEAR = 1,
    ZOE_LR_COSINE = 2,
    ZOE_LR_INVERSE_SQRT = 3,
    ZOE_LR_WSD = 4, /* warm-up, stable at lr, then decay over the last fraction */
} zoe_lr_decay_style;

/* The shape of WSD's decay (--lr-wsd-decay-style). */
typedef enum zoe_lr_wsd_style {
    ZOE_WSD_EXPONENTIAL = 0, /* 2 * 0.5^r - 1 */
    ZOE_WSD_LINEAR = 1,
    ZOE_WSD_COSINE = 2,
    ZOE_WSD_MINUS_SQRT = 3, /* 1 - sqrt(r) */
} zoe_lr_wsd_style;

/* Start every zoe_train_config from ZOE_TRAIN_CONFIG_INITIALIZER (all other fields zero, to be
 * filled by hand) or zoe_train_config_defaults (zoe-train's defaults). A field added later goes
 * at the end; validate and create refuse a struct whose size or version is not the library's. */
typedef struct zoe_train_config {
    size_t struct_size; /* sizeof(zoe_train_config) where the caller was built; set for you */
    int api_version;    /* ZOE_API_VERSION where the caller was built; set for you */
    zoe_model_config model;
    zoe_backend backend;
    int tp;          /* tensor-parallel size; dp = world / tp */
    int micro_batch; /* sequences per rank per micro-batch */
    int grad_accum;  /* micro-batches per step */
    int steps;
    float lr, min_lr;   /* peak and final learning rate */
    int warmup;         /* linear warm-up steps, then the decay; ZOE_WARMUP_AUTO: min(10, steps) */
    float weight_decay; /* decoupled (AdamW) */
    float beta1, beta2, eps;
    float clip_grad; /* global norm; 0 disables */
    zoe_dtype dtype; /* compute dtype of device weights and activations */
    zoe_offload_mode offload;
    int dpu_warmup;          /* synchronous steps before the delayed parameter update; 0: no DPU */
    int recompute;           /* recompute each layer's activations in backward */
    int tf32;                /* CUDA: TF32 tensor cores for fp32 matmuls */
    float loss_scale;        /* fp16: the initial (dynamic) loss scale */
    char data[ZOE_PATH_MAX]; /* indexed dataset prefix or a .txt file */
    uint64_t seed;
    char metrics[ZOE_PATH_MAX]; /* JSON lines, one per step; "" for none */
    int log_every;
    int64_t bucket_mb; /* gradient bucket size in MiB */
    zoe_progress_style progress;
    zoe_lr_decay_style lr_decay_style;
    int lr_decay_iters;          /* where the decay reaches min_lr; 0: steps */
    float lr_wsd_decay_fraction; /* WSD: the decay's share of lr_decay_iters */
    zoe_lr_wsd_style lr_wsd_decay_style;
    int stall_timeout; /* seconds without a completed step before the job is aborted; 0: never */
    /* Share of the optimizer state offloaded to the host (1: all, ZeRO-Offload; 0: none, like
     * --offload none); ZOE_OFFLOAD_RATIO_AUTO: the smallest share with which the plan fits,
     * which zoe-train resolves (zoe_plan_auto_offload_ratio) before creating the trainer. */
    float offload_ratio;
    zoe_dpu_mode dpu;  /* ZOE_DPU_AUTO: zoe-train asks the plan (zoe_plan_dpu_pays) */
    int no_plan_check; /* zoe-train: run even when the plan says it does not fit */
    char hardware[32]; /* the box zoe-train plans for (zoe_hardware_preset); "local": this one */
    /* checkpoints (include/zoe/checkpoint.h) */
    char save[ZOE_PATH_MAX];   /* directory of checkpoints; "" saves none */
    int save_every;            /* save every N steps (and at the end, and on a stop signal) */
    int keep_last;             /* keep the K newest complete checkpoints; 0 keeps all */
    char resume[ZOE_PATH_MAX]; /* a checkpoint, or a directory of them (its newest) */
    /* A Hugging Face model directory (GPT2LMHeadModel or LlamaForCausalLM): its config.json
     * gives the model shape and its safetensors the initial weights; "" for random ones. */
    char init_from[ZOE_PATH_MAX];
    /* Validation (zoe-train): every eval_every steps and at the end of the run, the per-token
     * mean loss over eval_iters global batches of the validation set: val_data (a dataset
     * like --data), or the last split_val percent of data's documents (--split
     * split_train,split_val, the two summing to 100; 0,0: no split). With a validation set
     * but eval_every 0, only at the end. */
    int eval_every;
    int eval_iters;
    char val_data[ZOE_PATH_MAX];
    int split_train, split_val;
    /* The delayed update's schedule (zoe_dpu_schedule of zoe/optimizer.h: 0 plain, 1 predict,
     * 2 dc, 3 exact) and the delay compensation's kappa (zoe_optimizer_config.dpu_dc_kappa). */
    int dpu_schedule;
    float dpu_dc_kappa;
    float dpu_predict_scale; /* zoe_optimizer_config.dpu_predict_scale */
    /* The dtypes the host holds the optimizer state in (zoe_optimizer_config.main_params_dtype
     * ...; docs/offload.md, "Compressed state"), as zoe_train_state_dtype values. */
    int main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
    /* The host gradient partition (zoe_optimizer_config.main_grads_dtype): ZOE_F32, or the
     * compute dtype for runs of one micro-batch a step (--main-grads-dtype). */
    zoe_dtype main_grads_dtype;
    /* The most bytes zoe allocates on each rank's device (--device-memory): an allocation past
     * it fails naming what it was for, and zoe-train refuses a run whose plan needs more
     * (zoe_device_set_memory_limit). 0: the device's memory (the GPU's; on the CPU backend no
     * limit). */
    uint64_t device_memory;
    /* Where the weights live (--offload-params; docs/offload.md, "Streamed weights"):
     * ZOE_OFFLOAD_PARAMS_NONE, on the device (each rank its TP shard); ZOE_OFFLOAD_PARAMS_CPU, in
     * host memory (each rank its 1/(tp dp) partition, the optimizer's), each layer gathered onto
     * the device just before it is used and released after. Needs the whole optimizer on the
     * host (--offload cpu, --offload-ratio 1). ZOE_OFFLOAD_PARAMS_NVME, the same partition on
     * the drives, in the state's scratch space (--offload nvme, docs/nvme.md), read ahead of each
     * layer's gather through a host ring of (prefetch + 1) layers. zoe-train turns --recompute on
     * with either unless told otherwise. */
    int offload_params;
    /* Streamed weights: layers fetched ahead of the one in use; 0 (the default): the plan's
     * (zoe-train plans first), 1 where nothing plans. */
    int prefetch_layers;
    /* Seconds from a stop signal (zoe_stop_signals_install: SIGTERM, SIGINT, SIGUSR1, mpirun's
     * SIGCONT) to the next completed step or the ranks' agreement to stop
     * (zoe_trainer_stop_requested); past it the job is aborted with one line, as a rank blocked
     * on a dead peer never reaches the step boundary (--stop-grace). 0: never. Keep it above a
     * step's time and below the scheduler's kill delay (Slurm's KillWait, 30 s by default). */
    int stop_grace;
    /* --offload nvme (docs/nvme.md, "State and weights on drives"): the directories, one per
     * drive, comma-separated, that hold each rank's scratch file of optimizer state; the state
     * is striped across them. "" with any other --offload. */
    char nvme_path[ZOE_PATH_MAX];
    /* --offload nvme: state buckets read ahead of the one the host step updates (and written
     * behind it); 0: the default, 2. */
    int nvme_ahead;
    /* The most page-locked host memory each rank pins (--pinned-memory;
     * zoe_device_set_pinned_limit): host buffers past it are pageable, with one warning each
     * (correct, slower copies), and zoe-train warns at start when the plan pins more than it or
     * than RLIMIT_MEMLOCK on a GPU. 0: no limit. */
    uint64_t pinned_memory;
    /* --offload nvme: where the host gradient partition lives (--offload-grads;
     * docs/nvme.md, "The gradient partition on drives"), a zoe_offload_grads value.
     * ZOE_OFFLOAD_GRADS_AUTO (the default): zoe-train asks the plan (on the drives only where
     * host memory cannot hold it, zoe_plan_result.drive.grads); a library caller who does not
     * plan keeps it on the host. CPU and NVME need --offload nvme. */
    int offload_grads;
} zoe_train_config;

/* The values of zoe_train_config.offload_grads. */
typedef enum zoe_offload_grads {
    ZOE_OFFLOAD_GRADS_AUTO = 0,
    ZOE_OFFLOAD_GRADS_CPU = 1,
    ZOE_OFFLOAD_GRADS_NVME = 2,
} zoe_offload_grads;

/* The values of zoe_train_config.offload_params. */
typedef enum zoe_offload_params {
    ZOE_OFFLOAD_PARAMS_NONE = 0,
    ZOE_OFFLOAD_PARAMS_CPU = 1,
    ZOE_OFFLOAD_PARAMS_NVME = 2, /* streamed from the drives (--offload nvme): docs/nvme.md */
} zoe_offload_params;

/* The values of zoe_train_config's state dtype fields (--main-params-dtype fp32|bf16,
 * --exp-avg-dtype and --exp-avg-sq-dtype fp32|bf16|int8). */
typedef enum zoe_train_state_dtype {
    ZOE_STATE_FP32 = 0,
    ZOE_STATE_BF16 = 1,
    ZOE_STATE_INT8 = 2, /* the moments only: blockwise int8 (docs/offload.md) */
} zoe_train_state_dtype;

#define ZOE_TRAIN_CONFIG_INITIALIZER                                                               \
    { ZOE_STRUCT_VERSION(zoe_train_config) }
/* Fills cfg with zoe-train's defaults. The macro passes the caller's struct size and version. */
#define zoe_train_config_defaults(cfg)                                                             \
    zoe_train_config_defaults_for((cfg), sizeof(zoe_train_config), ZOE_API_VERSION)
zoe_status zoe_train_config_defaults_for(zoe_train_config *cfg, size_t struct_size,
                                         int api_version);
/* Applies a JSON file whose keys mirror the command-line options ("micro-batch" or
 * "micro_batch"); unknown keys and bad values are errors naming them. */
zoe_status zoe_train_config_load_json(zoe_train_config *cfg, const char *path);
/* Parses zoe-train's command line into cfg: --config first, then the other flags (flags win).
 * *help is set when --help was given, *list_models for --list-models. */
zoe_status zoe_train_config_parse_args(zoe_train_config *cfg, int argc, char **argv, int *help,
                                       int *list_models);
/* Checks the configuration against the world size: the struct's version, every field's range
 * (the same ranges as the flags, so a hand-filled struct is checked alike), grid and shape
 * divisibility, the data file when one is named (a trainer with its own batches names none),
 * and the headers of the --init-from directory's safetensors against the model; the message
 * names the first problem. No MPI. */
zoe_status zoe_train_config_validate(const zoe_train_config *cfg, int world_size);
/* The configuration as a JSON object with the option names as keys (what
 * zoe_train_config_load_json reads back); malloc'ed text, NULL when out of memory. */
char *zoe_train_config_json(const zoe_train_config *cfg);
/* Writes the option list with defaults (zoe-train --help). */
void zoe_train_config_print_help(FILE *out, const char *program);
/* Learning rate at 0-based step s, with W = warmup, D = lr_decay_iters (or steps), peak lr,
 * floor min_lr: warm-up lr * (s + 1) / W for s < W; then by lr_decay_style, with progress
 * p = (s - W) / (D - W) and min_lr from s >= D on:
 *   constant  lr (no floor)            linear  min_lr + (lr - min_lr) (1 - p)
 *   cosine    min_lr + (lr - min_lr) (1 + cos(pi p)) / 2
 *   inverse-square-root  max(min_lr, lr sqrt(max(W, 1) / (s + 1)))
 *   wsd       lr until A = D - round(f D) (f = lr_wsd_decay_fraction), then over r = (s - A) /
 *             (D - A) min_lr + (lr - min_lr) c(r), c by lr_wsd_decay_style. */
float zoe_train_lr_at(const zoe_train_config *cfg, int step);
/* The warm-up in steps: cfg->warmup, or min(10, steps) for ZOE_WARMUP_AUTO. */
int zoe_train_warmup(const zoe_train_config *cfg);
/* Checks the schedule: a warm-up longer than the run, or not shorter than the decay, or a WSD
 * decay overlapping the warm-up, is an error naming the values. zoe-train calls it; trainers
 * that pass their own learning rate need not. */
zoe_status zoe_train_schedule_validate(const zoe_train_config *cfg);

typedef struct zoe_step_stats zoe_step_stats;

/* ---- the trainer: grid, device, GPT and offload optimizer from one configuration ---- */
typedef struct zoe_trainer zoe_trainer;

/* Collective over world. Validates cfg against the world size first, so that every rank fails
 * alike before allocating; binds the rank's threads (hwloc) and builds the TP x DP grid, the
 * device, the model and the optimizer, with initial weights from cfg->seed. */
zoe_status zoe_trainer_create(MPI_Comm world, const zoe_train_config *cfg, zoe_trainer **out);
/* Collective over the grid, at the end of a successful run: lands a delayed update still in
 * flight (its refresh all-gathers), so the weights are the latest. Then call destroy. */
zoe_status zoe_trainer_finalize(zoe_trainer *tr);
/* Local: never communicates and always frees (NULL is a no-op), so any rank may call it on an
 * error path without the others. An update in flight is waited for but not refreshed. */
void zoe_trainer_destroy(zoe_trainer *tr);
/* Pure getters, which cannot fail: parameters of the model as built (padded vocabulary, over
 * all TP ranks), the world rank, the DP rank and size. -1 for a NULL trainer. */
int64_t zoe_trainer_param_count(const zoe_trainer *tr);
int zoe_trainer_rank(const zoe_trainer *tr);
int zoe_trainer_dp_rank(const zoe_trainer *tr);
int zoe_trainer_dp_size(const zoe_trainer *tr);
/* Declares the step to come: this rank's count of counted (not -1) targets over its
 * grad_accum micro-batches (zoe_count_targets). Collective over the DP group. The gradient and
 * the reported loss are then the mean over every counted target of the global batch (across
 * micro-batches and DP ranks), whatever the share of ignored targets in each micro-batch;
 * without it, each micro-batch's gradient is its own mean and the step averages them. */
zoe_status zoe_trainer_begin_step(zoe_trainer *tr, int64_t counted_targets);
/* Targets that count (not -1) among n. */
int64_t zoe_count_targets(const int32_t *targets, size_t n);
/* One micro-batch: forward and backward of host int32 tokens and targets [micro_batch,
 * seq_len] (targets may hold -1 to ignore a position). *loss: this rank's micro-batch mean. */
zoe_status zoe_trainer_micro_batch(zoe_trainer *tr, const int32_t *tokens, const int32_t *targets,
                                   float *loss);
/* The optimizer step over the micro-batches since the last step, at learning rate lr. Collective
 * over the grid. stats (optional) gets the step's figures: loss averaged over the global batch's
 * counted targets,
 * gradient norm, loss scale, skip, and the time split since the last step. */
zoe_status zoe_trainer_step(zoe_trainer *tr, float lr, zoe_step_stats *stats);
/* Waits for a delayed update in flight, so the device weights are the latest. Collective. */
zoe_status zoe_trainer_flush(zoe_trainer *tr);

/* zoe_stop_requested (zoe/checkpoint.h) over the trainer's ranks, at a step boundary: 1 on every
 * rank when any got a stop signal. The stall watchdog names this all-reduce when a rank waits in
 * it, and once the ranks agree, --stop-grace no longer applies (the save that follows may take
 * longer). Collective over the grid. NULL: 0, and the error recorded. */
int zoe_trainer_stop_requested(zoe_trainer *tr, int *signo);
/* What the caller's code does between zoe calls ("loading data", ...): a rank's stall report
 * names it. what must outlive the trainer (a string literal); NULL forgets it. Each zoe call
 * clears it. Local and cheap. */
void zoe_trainer_caller_phase(zoe_trainer *tr, const char *what);
/* Validation loss with the latest weights, leaving the training run exactly as it was (the
 * gradients, the optimizer's state and its delayed-update schedule, the dropout counter: the
 * losses and weights of the run are bit for bit those of a run without evaluation):
 *   zoe_trainer_eval_begin(tr)                   collective over the grid, between steps
 *   zoe_trainer_eval_micro_batch(tr, x, y) ...   collective over the TP group; any number
 *   zoe_trainer_eval_end(tr, &loss)              collective over the grid
 * begin lands a delayed update in flight so that the forwards read the weights after the last
 * step; under DPU, where the next training forward must read the stale weights, it keeps a host
 * copy of them that end puts back, with the refresh of the latest still due. Forwards run
 * without dropout. *loss: the mean over every counted (not -1) target of every rank's eval
 * micro-batches (0 when none counts). */
zoe_status zoe_trainer_eval_begin(zoe_trainer *tr);
zoe_status zoe_trainer_eval_micro_batch(zoe_trainer *tr, const int32_t *tokens,
                                        const int32_t *targets);
zoe_status zoe_trainer_eval_end(zoe_trainer *tr, float *loss);
/* Evaluation: the logits of host int32 tokens [micro_batch, seq_len] with the weights the next
 * forward would read, as host fp32 [micro_batch * seq_len, vocab] over the real vocabulary, on
 * every rank. Collective over the TP group. Leaves the gradients and the dropout counter as
 * they were (with dropout > 0 the masks of the next training forward apply: no eval mode). */
zoe_status zoe_trainer_logits(zoe_trainer *tr, const int32_t *tokens, float *logits);

/* Where this rank's compute time went since creation or the last reset: each kernel op of the
 * model and the tensor-parallel collectives, in milliseconds (on CPU the ops' own time; on
 * CUDA the time to enqueue them). */
#define ZOE_PROFILE_MAX 32
typedef struct zoe_profile {
    int count;
    struct {
        char name[32];
        double ms;
        long long calls;
    } entries[ZOE_PROFILE_MAX];
} zoe_profile;
zoe_status zoe_trainer_profile(zoe_trainer *tr, zoe_profile *out, int reset);

/* ---- one step's figures, progress display and metrics ---- */
struct zoe_step_stats {
    int step;   /* 0-based */
    float loss; /* mean over the global batch's tokens */
    float lr;
    float grad_norm;  /* global, before clipping */
    float loss_scale; /* 1 unless fp16 */
    int skipped;      /* overflow: the update was skipped */
    int overlapped;   /* DPU: this step's host update runs while compute runs: during backward
                       * and the next forward (exact, this rank), or the next step (stale) */
    int64_t tokens;   /* tokens in the global batch */
    /* ms_total: wall time of the step. forward, backward (without offload), offload (handing
     * finished gradient buckets to the optimizer: reduce-scatter, copy, host accumulation),
     * host_step (the host Adam pass; with DPU it overlaps the next step's compute, so it is not
     * part of ms_total), refresh (the all-gather of new weights), and optimizer (the time the
     * step call took: host step and refresh, or with DPU the wait for the overlapped update
     * and the refresh). */
    double ms_total, ms_forward, ms_backward, ms_offload, ms_host_step, ms_refresh, ms_optimizer;
    /* Set by the caller after an evaluation at this step (zoe_trainer_eval_end); step leaves
     * evaluated 0. */
    int evaluated;
    float val_loss;
    /* DPU exact: the update this rank speculated on during backward was redone (the norm
     * clipped, the step was skipped or took another lr than the schedule's). */
    int redone;
    /* The most bytes the device allocator held at once since the trainer was created (its
     * device_peak in zoe_memory_stats), on the fullest rank of the grid. */
    int64_t device_peak_bytes;
    /* The gradient partition on drives: the time the step's accumulation waited for the drives
     * (zoe_optimizer_stats.ms_grad_wait; inside ms_backward and ms_offload, which sum the
     * buckets as the ring hands them on); 0 otherwise. */
    double ms_grad_wait;
};

typedef struct zoe_progress zoe_progress;
/* Progress on out (a live bar or plain lines every log_every steps, as style says) and, when
 * metrics_path is not "", one JSON object per step written to that file. */
zoe_status zoe_progress_create(FILE *out, zoe_progress_style style, int total_steps, int log_every,
                               const char *metrics_path, zoe_progress **p);
/* Fails (ZOE_ERR_IO, naming the file) when the step's metrics line cannot be written whole (a
 * full disk): the file is cut back to its last complete line, and the run should stop rather
 * than go on without its record. */
zoe_status zoe_progress_report(zoe_progress *p, const zoe_step_stats *stats);
/* The same for a run resumed at first_step: the metrics file keeps its lines of earlier steps
 * and is appended to. */
zoe_status zoe_progress_create_at(FILE *out, zoe_progress_style style, int total_steps,
                                  int log_every, const char *metrics_path, int first_step,
                                  zoe_progress **p);
/* Ends the live line; closes the metrics file. */
void zoe_progress_destroy(zoe_progress *p);
/* Whether a metrics file can be written at path ("" or NULL: none wanted), found without
 * changing anything: an existing file keeps its bytes, a new one is made and removed again. So a
 * run can refuse an unwritable --metrics before it builds anything, and create the file only
 * once it knows where a resumed run's lines end. */
zoe_status zoe_metrics_check(const char *path);
/* Whether the file system of the metrics file has room for `steps` more lines (ZOE_METRICS_LINE_MAX
 * bytes each, the most a line takes): a run on a full disk is refused before it trains. */
#define ZOE_METRICS_LINE_MAX 1024
zoe_status zoe_metrics_check_room(const char *path, int steps);

#ifdef __cplusplus
}
#endif
#endif
