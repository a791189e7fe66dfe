/* zoe-plan: whether a training run fits a box, where its memory goes and how long a step takes,
 * before anything is allocated. Uses the public API only.
 *   zoe-plan --model 70b --hardware dgx2 --tp 16
 *   zoe-plan --search --model 70b --hardware dgx2
 *   zoe-plan --max-model --hardware v100-32g --offload-ratio 0
 *
 * Explained in docs/plan.md. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/plan.h"
#include "zoe/zoe.h"

#define EXIT_USAGE 2

typedef struct options {
    zoe_plan_config cfg;
    int json, search, max_model, top;
    int dp_given, dtype_given, ratio_auto, micro_given, recompute_given, model_given;
    int seq_given, vocab_given;
    double host_gib; /* --host-memory-gib; 0: the preset's */
    /* --drives N, --drive-tb, --drive-read-gbs, --drive-write-gbs: the box's drives instead of
     * the preset's (-1: the preset's) */
    int drives;
    double drive_tb, drive_read_gbs, drive_write_gbs;
    int all_tiers; /* --tiers all: --search and --max-model try every placement */
    /* --state auto: the smallest state whose convergence docs/offload.md documents as equal to
     * fp32's (a bf16 master with int8 moments); --search tries fp32, bf16 and that */
    int state_auto;
    char note[160]; /* where defaults came from */
} options;

static void usage(FILE *out) {
    fprintf(out,
            "usage: zoe-plan [options]\n\n"
            "Plans a zoe-train run on a box: memory per GPU and per host against capacity, and a\n"
            "time model of one step. Options (default in brackets):\n"
            "  --model NAME        preset (zoe-train --list-models) [demo]\n"
            "  --layers/--hidden/--heads/--ffn/--seq-len/--vocab N   refine the shape\n"
            "  --hardware NAME     dgx2, v100-32g, dgx-a100-80g, dgx-h100, h200, local [local]\n"
            "  --host-memory-gib N the box's host memory in GiB instead of the preset's (an\n"
            "                      H200 on a 1.5 TB host: --hardware h200 --host-memory-gib 1536)\n"
            "  --tp N              tensor-parallel size [1]\n"
            "  --dp N              data-parallel size [the box's GPUs / tp; local: 1]\n"
            "  --micro-batch N     sequences per rank per micro-batch [4]\n"
            "  --grad-accum N      micro-batches per step [1]\n"
            "  --dtype T           fp32, bf16 or fp16 [the box's: fp16 on V100, bf16 on newer "
            "GPUs, fp32 on CPU]\n"
            "  --recompute, --no-recompute   recompute activations in backward [off]\n"
            "                      (micro-batch and recompute default to the preset's documented\n"
            "                      run at this --tp, when it has one)\n"
            "  --dpu               delayed parameter update [off]\n"
            "  --offload-ratio Q   share of optimizer state on the host, 0..1, or auto [1]\n"
            "  --bucket-mb N       gradient bucket size [16]\n"
            "  --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype T\n"
            "                      the host's optimizer state: fp32 or bf16, the moments\n"
            "                      also int8 (blockwise) [fp32]\n"
            "  --state S           all three at once: fp32, bf16, int8 (a bf16 master, int8\n"
            "                      moments), or auto (int8, the smallest whose convergence\n"
            "                      docs/offload.md documents as equal; --search tries int8,\n"
            "                      bf16 and fp32) [fp32]\n"
            "  --main-grads-dtype T  the host's gradient partition: fp32, or the compute dtype\n"
            "                      (one micro-batch a step) [fp32]\n"
            "  --offload-params P  cpu: the weights live on the host and stream through a\n"
            "                      ring of device buffers, layer by layer (recompute on unless\n"
            "                      --no-recompute); nvme: they live on the box's drives and\n"
            "                      stream through a host ring too (needs --offload nvme);\n"
            "                      none: they stay on the device [none]\n"
            "  --offload S         cpu: the optimizer state on the host; nvme: on the box's\n"
            "                      drives, streamed per bucket through a host ring [cpu]\n"
            "  --offload-grads G   with --offload nvme, the gradient partition: cpu (host),\n"
            "                      nvme (drives), auto (the drives where the host cannot hold\n"
            "                      it) [auto]\n"
            "  --drives N, --drive-tb X, --drive-read-gbs X, --drive-write-gbs X\n"
            "                      the box's drives: count, TB each, achievable GB/s each\n"
            "                      [the preset's; local: none]\n"
            "  --tiers all         --search and --max-model try every placement: weights on\n"
            "                      the device, host or drives, state on the host or drives\n"
            "  --prefetch-layers N units fetched ahead with --offload-params cpu [the plan's:\n"
            "                      the fewest that hide the copies]\n"
            "  --json              one JSON object instead of the report\n"
            "  --search            every fitting TP x DP x micro-batch x recompute x DPU x\n"
            "                      offload ratio on the box, best predicted tokens/s first\n"
            "  --top N             rows --search prints [15]\n"
            "  --max-model         the largest preset (each at its documented run) and the\n"
            "                      largest GPT of GPT-3's family (as many layers as heads of\n"
            "                      128) that fit; its run: --seq-len [2048], --vocab [50257],\n"
            "                      --micro-batch [1], --[no-]recompute [on]\n");
}

/* Whether --help lists OPTION ("--tp"): the help is the list of options, so an option without a
 * value at the end of the line is told apart from one that does not exist. */
static int listed_in_help(const char *option) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return 1; /* no memory to tell: let the option's own check speak */
    usage(f);
    fclose(f);
    int listed = 0;
    size_t len = strlen(option);
    for (const char *p = strstr(text, option); p && !listed; p = strstr(p + 1, option))
        listed = !(islower((unsigned char)p[len]) || p[len] == '-');
    free(text);
    return listed;
}

static int parse_int(const char *name, const char *text, int min, int *out) {
    double v = 0;
    if (!zoe_parse_number(text, &v) || v != floor(v) || v < min || v > (1 << 24)) {
        fprintf(stderr, "zoe-plan: --%s=%s is not an integer >= %d\n", name, text, min);
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* --state S: the three state dtypes at once; int8 is a bf16 master with int8 moments (the master
 * is fp32 or bf16). */
static void set_state(zoe_plan_config *c, int state) {
    c->exp_avg_dtype = c->exp_avg_sq_dtype = state;
    c->main_params_dtype = state == ZOE_STATE_INT8 ? ZOE_STATE_BF16 : state;
}

/* cfg's micro-batch and recompute from its model's documented run at cfg's TP, where the model
 * has one and the flags leave them (streamed weights keep recompute on); 1 when it has one. */
static int documented_run(const options *o, zoe_plan_config *cfg) {
    for (int g = 0; g < ZOE_MODEL_MAX_GRIDS && cfg->model.grids[g].tp; g++) {
        const zoe_model_grid *run = &cfg->model.grids[g];
        if (run->tp != cfg->tp) continue;
        if (!o->micro_given) cfg->micro_batch = run->micro_batch;
        if (!o->recompute_given && !cfg->offload_params) cfg->recompute = run->recompute;
        return 1;
    }
    return 0;
}

static int parse_options(int argc, char **argv, options *o) {
    const char *hardware = "local";
    memset(o, 0, sizeof *o);
    zoe_plan_config_init(&o->cfg);
    o->top = 15;
    o->drives = -1;
    o->drive_tb = o->drive_read_gbs = o->drive_write_gbs = -1;
    /* the model first, so that shape options refine it whatever their order */
    for (int i = 1; i < argc; i++) {
        const char *model = NULL;
        int found = zoe_cli_value(argc, argv, &i, "--model", ZOE_CLI_ONCE, &model);
        if (found < 0 || (found && zoe_model_preset(model, &o->cfg.model) != ZOE_OK)) {
            fprintf(stderr, "zoe-plan: %s (see --help)\n", zoe_last_error());
            return 0;
        }
        o->model_given |= found;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        int *flag = strcmp(a, "--json") == 0        ? &o->json
                    : strcmp(a, "--search") == 0    ? &o->search
                    : strcmp(a, "--max-model") == 0 ? &o->max_model
                    : strcmp(a, "--recompute") == 0 ? &o->cfg.recompute
                    : strcmp(a, "--dpu") == 0       ? &o->cfg.dpu
                                                    : NULL;
        if (flag || strcmp(a, "--no-recompute") == 0) {
            if (zoe_cli_once(argv, i, a) != 0) {
                fprintf(stderr, "zoe-plan: %s (see --help)\n", zoe_last_error());
                return 0;
            }
        }
        if (flag) {
            *flag = 1;
            o->recompute_given |= flag == &o->cfg.recompute;
            continue;
        }
        if (strcmp(a, "--no-recompute") == 0) {
            o->cfg.recompute = 0, o->recompute_given = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "zoe-plan: unexpected argument '%s' (see --help)\n", a);
            return 0;
        }
        char option[64], *eq;
        snprintf(option, sizeof option, "%s", a);
        if ((eq = strchr(option, '='))) *eq = '\0';
        const char *name = option + 2, *v = NULL;
        if (!listed_in_help(option)) {
            fprintf(stderr, "zoe-plan: unknown option '%s' (see --help)\n", a);
            return 0;
        }
        int found = zoe_cli_value(argc, argv, &i, option, ZOE_CLI_ONCE, &v);
        if (found != 1) { /* 0: a name too long for option[], so no option of ours */
            fprintf(stderr, "zoe-plan: %s (see --help)\n",
                    found < 0 ? zoe_last_error() : "unknown option");
            return 0;
        }
        zoe_model_config *m = &o->cfg.model;
        int ok = 1, bucket = 0;
        if (strcmp(name, "model") == 0)
            continue;
        else if (strcmp(name, "hardware") == 0)
            hardware = v;
        else if (strcmp(name, "layers") == 0)
            ok = parse_int(name, v, 1, &m->layers);
        else if (strcmp(name, "hidden") == 0)
            ok = parse_int(name, v, 1, &m->hidden);
        else if (strcmp(name, "heads") == 0)
            ok = parse_int(name, v, 1, &m->heads);
        else if (strcmp(name, "ffn") == 0)
            ok = parse_int(name, v, 0, &m->ffn);
        else if (strcmp(name, "seq-len") == 0)
            ok = parse_int(name, v, 1, &m->seq_len), o->seq_given = 1;
        else if (strcmp(name, "vocab") == 0)
            ok = parse_int(name, v, 2, &m->vocab), o->vocab_given = 1;
        else if (strcmp(name, "host-memory-gib") == 0) {
            ok = zoe_parse_number(v, &o->host_gib) && o->host_gib > 0 && o->host_gib < 1e9;
            if (!ok) fprintf(stderr, "zoe-plan: --host-memory-gib=%s is not a positive size\n", v);
        } else if (strcmp(name, "prefetch-layers") == 0)
            ok = parse_int(name, v, 1, &o->cfg.prefetch_layers);
        else if (strcmp(name, "offload-params") == 0) {
            int nvme = strcmp(v, "nvme") == 0;
            ok = strcmp(v, "cpu") == 0 || strcmp(v, "none") == 0 || nvme;
            if (!ok)
                fprintf(stderr, "zoe-plan: --offload-params: '%s' is not cpu, nvme or none\n", v);
            o->cfg.offload_params = nvme ? ZOE_PLAN_WEIGHTS_ON_DRIVES : strcmp(v, "cpu") == 0;
        } else if (strcmp(name, "offload") == 0) {
            ok = strcmp(v, "cpu") == 0 || strcmp(v, "nvme") == 0;
            if (!ok) fprintf(stderr, "zoe-plan: --offload: '%s' is not cpu or nvme\n", v);
            o->cfg.state_on_drives = strcmp(v, "nvme") == 0;
        } else if (strcmp(name, "offload-grads") == 0) {
            int nvme = strcmp(v, "nvme") == 0, cpu = strcmp(v, "cpu") == 0;
            ok = nvme || cpu || strcmp(v, "auto") == 0;
            if (!ok)
                fprintf(stderr, "zoe-plan: --offload-grads: '%s' is not cpu, nvme or auto\n", v);
            o->cfg.grads_on_drives = nvme ? 1 : cpu ? 0 : ZOE_PLAN_GRADS_AUTO;
        } else if (strcmp(name, "tiers") == 0) {
            ok = o->all_tiers = strcmp(v, "all") == 0;
            if (!ok) fprintf(stderr, "zoe-plan: --tiers: '%s' is not all\n", v);
        } else if (strcmp(name, "drives") == 0)
            ok = parse_int(name, v, 0, &o->drives);
        else if (strcmp(name, "drive-tb") == 0 || strcmp(name, "drive-read-gbs") == 0 ||
                 strcmp(name, "drive-write-gbs") == 0) {
            double *x = name[6] == 't'   ? &o->drive_tb
                        : name[6] == 'r' ? &o->drive_read_gbs
                                         : &o->drive_write_gbs;
            ok = zoe_parse_number(v, x) && *x > 0 && *x < 1e6;
            if (!ok) fprintf(stderr, "zoe-plan: --%s=%s is not a positive figure\n", name, v);
        } else if (strcmp(name, "tp") == 0)
            ok = parse_int(name, v, 1, &o->cfg.tp);
        else if (strcmp(name, "dp") == 0)
            ok = parse_int(name, v, 1, &o->cfg.dp), o->dp_given = 1;
        else if (strcmp(name, "micro-batch") == 0)
            ok = parse_int(name, v, 1, &o->cfg.micro_batch), o->micro_given = 1;
        else if (strcmp(name, "grad-accum") == 0)
            ok = parse_int(name, v, 1, &o->cfg.grad_accum);
        else if (strcmp(name, "top") == 0)
            ok = parse_int(name, v, 1, &o->top);
        else if (strcmp(name, "bucket-mb") == 0)
            ok = parse_int(name, v, 1, &bucket), o->cfg.bucket_mb = bucket;
        else if (strcmp(name, "dtype") == 0) {
            ok = zoe_dtype_parse(v, &o->cfg.dtype) == ZOE_OK && o->cfg.dtype != ZOE_I32;
            if (!ok) fprintf(stderr, "zoe-plan: --dtype: '%s' is not fp32, bf16 or fp16\n", v);
            o->dtype_given = 1;
        } else if (strcmp(name, "main-params-dtype") == 0 || strcmp(name, "exp-avg-dtype") == 0 ||
                   strcmp(name, "exp-avg-sq-dtype") == 0 || strcmp(name, "state") == 0) {
            /* int8: the moments only; --state int8 is a bf16 master with int8 moments */
            int all = strcmp(name, "state") == 0, master = name[0] == 'm';
            int bf16 = strcmp(v, "bf16") == 0, int8 = !master && strcmp(v, "int8") == 0;
            o->state_auto = all && strcmp(v, "auto") == 0;
            ok = bf16 || int8 || strcmp(v, "fp32") == 0 || o->state_auto;
            if (!ok)
                fprintf(stderr, "zoe-plan: --%s: '%s' is not fp32%s%s\n", name, v,
                        master ? " or bf16 (the master weights)" : ", bf16",
                        all      ? ", int8 or auto"
                        : master ? ""
                                 : " or int8");
            int d = bf16 ? ZOE_STATE_BF16 : int8 || o->state_auto ? ZOE_STATE_INT8 : ZOE_STATE_FP32;
            if (all)
                set_state(&o->cfg, d);
            else if (master)
                o->cfg.main_params_dtype = d;
            else if (strcmp(name, "exp-avg-dtype") == 0)
                o->cfg.exp_avg_dtype = d;
            else
                o->cfg.exp_avg_sq_dtype = d;
        } else if (strcmp(name, "main-grads-dtype") == 0) {
            ok = zoe_dtype_parse(v, &o->cfg.main_grads_dtype) == ZOE_OK &&
                 zoe_dtype_is_float(o->cfg.main_grads_dtype);
            if (!ok)
                fprintf(stderr, "zoe-plan: --main-grads-dtype: '%s' is not fp32, bf16 or fp16\n",
                        v);
        } else if (strcmp(name, "offload-ratio") == 0) {
            double q = 0;
            o->ratio_auto = strcmp(v, "auto") == 0;
            ok = o->ratio_auto || (zoe_parse_number(v, &q) && q >= 0 && q <= 1);
            if (!ok) fprintf(stderr, "zoe-plan: --offload-ratio=%s is not auto or in [0, 1]\n", v);
            o->cfg.offload_ratio = (float)q;
        } else {
            fprintf(stderr, "zoe-plan: unknown option '%s' (see --help)\n", a);
            return 0;
        }
        if (!ok) return 0;
    }
    if (zoe_hardware_preset(hardware, &o->cfg.hardware) != ZOE_OK) {
        fprintf(stderr, "zoe-plan: %s\n", zoe_last_error());
        return 0;
    }
    if (o->host_gib > 0) o->cfg.hardware.host_bytes = o->host_gib * 1024.0 * 1024.0 * 1024.0;
    zoe_hardware *box = &o->cfg.hardware;
    if (o->drives >= 0 || o->drive_tb > 0 || o->drive_read_gbs > 0 || o->drive_write_gbs > 0)
        box->drive_source = "as given on the command line";
    if (o->drives >= 0) box->drives = o->drives;
    if (o->drive_tb > 0) box->drive_bytes = o->drive_tb * 1e12;
    if (o->drive_read_gbs > 0) box->drive_read_bandwidth = o->drive_read_gbs * 1e9;
    if (o->drive_write_gbs > 0) box->drive_write_bandwidth = o->drive_write_gbs * 1e9;
    const zoe_hardware *hw = &o->cfg.hardware;
    if (o->max_model && o->model_given) {
        fprintf(stderr, "zoe-plan: --max-model scales GPT-3's family of shapes and judges every "
                        "preset: --model has no place in it (--seq-len, --vocab set the shape)\n");
        return 0;
    }
    if (o->cfg.prefetch_layers && !o->cfg.offload_params) {
        fprintf(stderr, "zoe-plan: --prefetch-layers=%d needs --offload-params cpu\n",
                o->cfg.prefetch_layers);
        return 0;
    }
    if (o->max_model) { /* a real training shape unless told otherwise */
        if (!o->seq_given) o->cfg.model.seq_len = ZOE_PLAN_MAX_MODEL_SEQ_LEN;
        if (!o->vocab_given) o->cfg.model.vocab = ZOE_PLAN_MAX_MODEL_VOCAB;
        if (!o->micro_given) o->cfg.micro_batch = ZOE_PLAN_MAX_MODEL_MICRO_BATCH;
        if (!o->recompute_given) o->cfg.recompute = ZOE_PLAN_MAX_MODEL_RECOMPUTE;
    }
    /* streamed weights leave the device to activations: recomputed unless told */
    if (o->cfg.offload_params && !o->recompute_given) o->cfg.recompute = 1;
    if (!o->dtype_given) o->cfg.dtype = hw->dtype;
    if (!o->dp_given) o->cfg.dp = hw->gpus >= o->cfg.tp ? hw->gpus / o->cfg.tp : 1;
    if (!o->max_model && !(o->micro_given && o->recompute_given) && documented_run(o, &o->cfg))
        snprintf(o->note, sizeof o->note,
                 "micro-batch %d and recompute %s: the %s preset's documented run at TP=%d",
                 o->cfg.micro_batch, o->cfg.recompute ? "on" : "off", o->cfg.model.name, o->cfg.tp);
    return 1;
}

static int plan_one(const options *o) {
    zoe_plan_config cfg = o->cfg;
    if (o->ratio_auto && zoe_plan_auto_offload_ratio(&cfg, &cfg.offload_ratio) != ZOE_OK) {
        fprintf(stderr, "zoe-plan: %s\n", zoe_last_error());
        return EXIT_USAGE;
    }
    zoe_plan_result r;
    if (zoe_plan(&cfg, &r) != ZOE_OK) {
        fprintf(stderr, "zoe-plan: %s\n", zoe_last_error());
        return EXIT_USAGE;
    }
    if (o->json) {
        zoe_plan_write_json(stdout, &cfg, &r);
    } else {
        if (o->note[0])
            printf("zoe-plan: %s (--micro-batch, --[no-]recompute override)\n", o->note);
        if (o->ratio_auto)
            printf("zoe-plan: --offload-ratio auto chose %g\n", (double)cfg.offload_ratio);
        zoe_plan_print(stdout, &cfg, &r);
    }
    return 0;
}

/* The state dtypes in a word: fp32, bf16, int8 (a bf16 master, int8 moments), or mixed. */
static const char *state_name(const zoe_plan_config *k) {
    int m = k->main_params_dtype, a = k->exp_avg_dtype, b = k->exp_avg_sq_dtype;
    if (m == a && a == b) return m == ZOE_STATE_BF16 ? "bf16" : "fp32";
    return m == ZOE_STATE_BF16 && a == ZOE_STATE_INT8 && b == ZOE_STATE_INT8 ? "int8" : "mixed";
}

/* Where the weights live, in a word for the search's table and in words for the reports. */
static const char *weights_tier(const zoe_plan_config *k) {
    return k->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES ? "drives"
           : k->offload_params                             ? "host"
                                                           : "gpu";
}

static const char *weights_words(const zoe_plan_config *k) {
    return k->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES ? "streamed from the drives"
           : k->offload_params                             ? "streamed from the host"
                                                           : "resident on the device";
}

/* The placements --tiers all tries: the weights on the device, the host or the drives, the
 * optimizer state on the host or the drives (the weights on the drives need the state there). */
typedef struct placement {
    int offload_params, state_on_drives;
} placement;
static const placement placements[] = {
    {0, 0}, {1, 0}, {0, 1}, {1, 1}, {ZOE_PLAN_WEIGHTS_ON_DRIVES, 1}};
enum { NUM_PLACEMENTS = sizeof placements / sizeof placements[0] };

/* The placements to try: every one the box holds with --tiers all (those on drives where it has
 * some), else the one given. */
static int placements_of(const options *o, placement *out) {
    if (!o->all_tiers) {
        out[0] = (placement){o->cfg.offload_params, o->cfg.state_on_drives};
        return 1;
    }
    int n = 0;
    for (int i = 0; i < NUM_PLACEMENTS; i++)
        if (!placements[i].state_on_drives || o->cfg.hardware.drives > 0) out[n++] = placements[i];
    return n;
}

typedef struct candidate {
    zoe_plan_config cfg;
    zoe_plan_result r;
} candidate;

static int by_throughput(const void *a, const void *b) {
    double x = ((const candidate *)a)->r.time.tokens_per_second;
    double y = ((const candidate *)b)->r.time.tokens_per_second;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every fitting combination on the box's GPUs (all of them: tp x dp = GPUs; local: tp x dp as
 * given), best predicted tokens/s first. */
static int search(const options *o) {
    static const int batches[] = {1, 2, 4, 8, 16, 32};
    static const float ratios[] = {1.0f, 0.75f, 0.5f, 0.25f, 0.0f};
    int ranks = o->cfg.hardware.gpus > 0 ? o->cfg.hardware.gpus : o->cfg.tp * o->cfg.dp;
    static const int auto_states[] = {ZOE_STATE_INT8, ZOE_STATE_BF16, ZOE_STATE_FP32};
    const size_t nratios = sizeof ratios / sizeof ratios[0], states = o->state_auto ? 3 : 1;
    placement where[NUM_PLACEMENTS];
    const int nplaces = placements_of(o, where);
    size_t cap = 4096, n = 0, tried = 0;
    candidate *c = malloc(cap * sizeof *c);
    if (!c) {
        fprintf(stderr, "zoe-plan: out of memory for %zu candidates\n", cap);
        return EXIT_FAILURE;
    }
    for (int w = 0; w < nplaces; w++)
        for (int tp = 1; tp <= ranks; tp++) {
            if (ranks % tp) continue;
            for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
                for (int rc = 0; rc < 2; rc++)
                    for (int dpu = 0; dpu < 2; dpu++)
                        for (size_t q = 0; q < nratios * states; q++) {
                            candidate k = {.cfg = o->cfg};
                            if (o->state_auto) /* int8 moments, bf16 state, fp32 state */
                                set_state(&k.cfg, auto_states[q / nratios]);
                            k.cfg.tp = tp, k.cfg.dp = ranks / tp;
                            k.cfg.micro_batch = batches[b];
                            k.cfg.recompute = rc, k.cfg.dpu = dpu;
                            k.cfg.offload_ratio = ratios[q % nratios];
                            k.cfg.offload_params = where[w].offload_params;
                            k.cfg.state_on_drives = where[w].state_on_drives;
                            /* streamed weights, and the drives, keep the whole optimizer state off
                             * the device */
                            if ((k.cfg.offload_params || k.cfg.state_on_drives) &&
                                k.cfg.offload_ratio < 1.0f)
                                continue;
                            tried++;
                            if (zoe_plan(&k.cfg, &k.r) != ZOE_OK || !k.r.fits) continue;
                            if (n == cap) {
                                candidate *more = realloc(c, 2 * cap * sizeof *c);
                                if (!more) {
                                    fprintf(stderr, "zoe-plan: out of memory for %zu candidates\n",
                                            2 * cap);
                                    free(c);
                                    return EXIT_FAILURE;
                                }
                                c = more, cap *= 2;
                            }
                            c[n++] = k;
                        }
        }
    if (!n) {
        fprintf(stderr, "zoe-plan --search: none of %zu combinations fits %s on %s\n", tried,
                o->cfg.model.name, o->cfg.hardware.name);
        free(c);
        return 1;
    }
    qsort(c, n, sizeof *c, by_throughput);
    if (o->json) {
        for (size_t i = 0; i < n && i < (size_t)o->top; i++)
            zoe_plan_write_json(stdout, &c[i].cfg, &c[i].r);
        free(c);
        return 0;
    }
    printf("zoe-plan --search: %s on %s, %zu of %zu combinations fit; best predicted first\n",
           o->cfg.model.name, o->cfg.hardware.name, n, tried);
    printf("%4s %4s %6s %9s %4s %7s %7s %9s %5s %9s %9s %9s %9s %10s  %s\n", "tp", "dp", "micro",
           "recompute", "dpu", "offload", "weights", "optimizer", "state", "GPU GiB", "host GiB",
           "drives TB", "step s", "tokens/s", "binds");
    for (size_t i = 0; i < n && i < (size_t)o->top; i++) {
        const zoe_plan_config *k = &c[i].cfg;
        const zoe_plan_result *r = &c[i].r;
        printf("%4d %4d %6d %9s %4s %7.2f %7s %9s %5s %9.1f %9.1f %9.2f %9.3f %10.0f  %s\n", k->tp,
               k->dp, k->micro_batch, k->recompute ? "on" : "off", k->dpu ? "on" : "off",
               (double)k->offload_ratio, weights_tier(k),
               !k->state_on_drives ? "host"
               : r->drive.grads    ? "drives+g"
                                   : "drives",
               state_name(k), r->gpu.total / (1 << 30), r->host.total / (1 << 30),
               r->drive.total / 1e12, r->time.step, r->time.tokens_per_second, r->time.bound);
    }
    free(c);
    return 0;
}

/* What stops GPT-3's family at `scaled`: the memory its next member (tp more layers and heads)
 * overflows. */
static const char *next_binds(const zoe_plan_config *cfg, const zoe_model_config *scaled) {
    zoe_plan_config k = *cfg;
    zoe_plan_family_member(scaled, scaled->layers + cfg->tp, &k.model);
    zoe_plan_result r;
    if (k.model.hidden > 65536) return "the family's widest, hidden 65536";
    if (zoe_plan(&k, &r) != ZOE_OK) return "its plan fails";
    const int drives = cfg->state_on_drives && !r.drive.fits;
    return !r.fits_host && !r.fits_gpu ? "host and GPU memory"
           : !r.fits_host              ? "host memory"
           : !r.fits_gpu               ? (drives ? "GPU memory and the drives" : "GPU memory")
                                       : "the drives";
}

/* --max-model: every preset at its documented run at this TP (its own sequence and vocabulary;
 * the --max-model run's micro-batch and recompute where it has none), and GPT-3's family at the
 * --max-model run. */
static int max_model(const options *o) {
    const zoe_model_config *best_preset = NULL;
    zoe_plan_config preset_cfg = o->cfg;
    int preset_documented = 0;
    for (int i = 0; i < zoe_model_preset_count(); i++) {
        zoe_plan_config k = o->cfg;
        k.model = *zoe_model_preset_at(i);
        int documented = documented_run(o, &k);
        zoe_plan_result r;
        if (zoe_plan(&k, &r) == ZOE_OK && r.fits &&
            (!best_preset || zoe_model_param_count(&k.model) > zoe_model_param_count(best_preset)))
            best_preset = zoe_model_preset_at(i), preset_cfg = k, preset_documented = documented;
    }
    zoe_model_config scaled;
    zoe_plan_result r;
    int have_scaled = zoe_plan_max_model(&o->cfg, &scaled, &r) == ZOE_OK;
    const zoe_plan_config *c = &o->cfg;
    const char *binds = have_scaled ? next_binds(c, &scaled) : "";
    const char *params = c->offload_params == ZOE_PLAN_WEIGHTS_ON_DRIVES ? "nvme"
                         : c->offload_params                             ? "cpu"
                                                                         : "none";
    if (o->json) {
        printf("{\"hardware\":\"%s\",\"tp\":%d,\"dp\":%d,\"offload_ratio\":%g,\"state\":\"%s\","
               "\"main_grads_dtype\":\"%s\",\"dtype\":\"%s\",\"offload_params\":\"%s\","
               "\"offload\":\"%s\","
               "\"seq_len\":%d,\"vocab\":%d,\"micro_batch\":%d,\"recompute\":%s,"
               "\"family\":\"gpt-3: layers = heads, head dim %d\","
               "\"largest_preset\":\"%s\",\"largest_preset_params\":%lld,"
               "\"largest_preset_micro_batch\":%d,\"largest_preset_recompute\":%s,"
               "\"scaled_layers\":%d,\"scaled_hidden\":%d,\"scaled_params\":%lld",
               c->hardware.name, c->tp, c->dp, (double)c->offload_ratio, state_name(c),
               zoe_dtype_name(c->main_grads_dtype), zoe_dtype_name(c->dtype), params,
               c->state_on_drives ? "nvme" : "cpu", c->model.seq_len, c->model.vocab,
               c->micro_batch, c->recompute ? "true" : "false", ZOE_PLAN_FAMILY_HEAD_DIM,
               best_preset ? best_preset->name : "",
               best_preset ? (long long)zoe_model_param_count(best_preset) : 0LL,
               preset_cfg.micro_batch, preset_cfg.recompute ? "true" : "false",
               have_scaled ? scaled.layers : 0, have_scaled ? scaled.hidden : 0,
               have_scaled ? (long long)zoe_model_param_count(&scaled) : 0LL);
        if (have_scaled)
            printf(",\"scaled_gpu_bytes\":%.0f,\"scaled_host_bytes\":%.0f,\"scaled_binds\":\"%s\","
                   "\"scaled_memory_binds\":\"%s\",\"scaled_step\":%g,"
                   "\"scaled_tokens_per_second\":%g,\"scaled_mfu\":%g",
                   r.gpu.total, r.host.total, r.time.bound, binds, r.time.step,
                   r.time.tokens_per_second, r.mfu);
        if (have_scaled && c->state_on_drives)
            printf(",\"scaled_drive_bytes\":%.0f,\"scaled_grads_on_drives\":%s,"
                   "\"scaled_drive_seconds\":%g",
                   r.drive.total, r.drive.grads ? "true" : "false", r.drive.seconds);
        printf("}\n");
        if (!best_preset && !have_scaled)
            fprintf(stderr, "zoe-plan --max-model: no preset and no scaled GPT fits: %s\n",
                    zoe_last_error());
        return best_preset || have_scaled ? 0 : 1;
    }
    printf("zoe-plan --max-model on %s, TP %d x DP %d, micro-batch %d x seq %d, vocabulary %d, "
           "%s, recompute %s, %s (ratio %g), %s optimizer state%s, %s gradient partition, weights "
           "%s:\n",
           c->hardware.name, c->tp, c->dp, c->micro_batch, c->model.seq_len, c->model.vocab,
           zoe_dtype_name(c->dtype), c->recompute ? "on" : "off",
           c->offload_ratio > 0 ? "with offload" : "without offload", (double)c->offload_ratio,
           state_name(c), c->state_on_drives ? " on the drives" : "",
           zoe_dtype_name(c->main_grads_dtype), weights_words(c));
    if (best_preset)
        printf("  largest preset: %s (%.2fB parameters) at %s: micro-batch %d x seq %d, "
               "recompute %s\n",
               best_preset->name, (double)zoe_model_param_count(best_preset) / 1e9,
               preset_documented ? "its documented run"
                                 : "the run above with its own sequence and vocabulary",
               preset_cfg.micro_batch, preset_cfg.model.seq_len,
               preset_cfg.recompute ? "on" : "off");
    else
        printf("  no preset fits\n");
    if (!have_scaled) {
        printf("  no GPT of GPT-3's family fits: %s\n", zoe_last_error());
        return best_preset ? 0 : 1;
    }
    printf("  largest GPT of GPT-3's family (as many layers as heads of %d): %d layers x hidden "
           "%d: %.2fB parameters; GPU %.1f GiB, host %.1f GiB (the next, %d layers, does not "
           "fit: %s)\n",
           ZOE_PLAN_FAMILY_HEAD_DIM, scaled.layers, scaled.hidden,
           (double)zoe_model_param_count(&scaled) / 1e9, r.gpu.total / (1 << 30),
           r.host.total / (1 << 30), scaled.layers + c->tp, binds);
    if (strcmp(r.time.bound, "not probed"))
        printf("  its step: %.2f s, %.0f tokens/s, MFU %.1f%%; %s binds\n", r.time.step,
               r.time.tokens_per_second, 100.0 * r.mfu, r.time.bound);
    if (c->state_on_drives)
        printf("  drives: %.2f of %.2f TB available (%d x %.2f TB), the gradient partition on the "
               "%s; busy %.1f s a step (%.1f the host step, %.1f the weights)\n",
               r.drive.total / 1e12, r.drive.available / 1e12, c->hardware.drives,
               c->hardware.drive_bytes / 1e12, r.drive.grads ? "drives" : "host", r.drive.seconds,
               r.drive.host_step, r.drive.stream);
    if (c->state_on_drives && r.drive.grads)
        printf("  zoe-train puts the gradient partition on the drives with --offload nvme "
               "(--offload-grads auto decides as this plan does; docs/nvme.md)\n");
    if (c->offload_params && strcmp(r.time.bound, "not probed"))
        printf("  streamed weights: %d + 1 layer parts in a ring (%.2f GiB with the embedding%s), "
               "%.1f host bytes per parameter; copies hide behind compute from micro-batch %d%s\n",
               r.stream.prefetch, r.stream.ring / (1 << 30),
               !c->prefetch_layers && !r.stream.prefetch_from_plan
                   ? "; one ahead, the fewest: the plan's prefetch does not fit"
                   : "",
               r.stream.host_bytes_per_param, r.stream.hide_micro_batch,
               r.stream.hide_fits ? " (which fits)" : " (which does not fit)");
    return 0;
}

int main(int argc, char **argv) {
    options o;
    if (!parse_options(argc, argv, &o)) return EXIT_USAGE;
    if (o.search) return search(&o);
    if (o.max_model) {
        placement where[NUM_PLACEMENTS];
        const int n = placements_of(&o, where);
        int rc = 0;
        for (int i = 0; i < n; i++) {
            options at = o;
            at.cfg.offload_params = where[i].offload_params;
            at.cfg.state_on_drives = where[i].state_on_drives;
            /* streamed weights leave the device to activations: recomputed unless told */
            if (at.cfg.offload_params && !at.recompute_given) at.cfg.recompute = 1;
            const int r = max_model(&at);
            if (r > rc) rc = r;
        }
        return rc;
    }
    return plan_one(&o);
}
