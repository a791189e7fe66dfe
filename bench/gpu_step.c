/* bench_gpu_step: training throughput on one GPU (scripts/gpu-check prints its table).
 *
 * Picks the largest GPT preset whose host state (18 bytes per parameter with DPU: fp32 master
 * weights, two moments, gradients, two gradient partitions' worth of staging) fits in 60% of
 * the available host memory and whose trainer can be created on the device (a smaller preset
 * is tried when the device runs out of memory), then measures on it:
 *  - ZeRO-Offload (optimizer on the host): synchronous steps, then, in the same trainer, steps
 *    with the delayed parameter update (DPU), whose host step overlaps the next step's compute;
 *  - no offload (optimizer on the device), at the same model, when it fits.
 * Per run: tokens/s, model FLOPs utilisation (6 N + 12 L h T FLOPs per token, the PaLM count,
 * over the GPU's peak in the dtype, from zoe_gpu_spec_of, or --peak-tflops), the split of a step
 * (forward, backward, gradient offload, host Adam, refresh) and, with DPU, the share of the host
 * step it hides: hidden = 1 - (time the step waits for the overlapped update) / (host Adam time).
 * The dtype is the GPU's (bf16, or fp16 before sm_80) unless --dtype names one; bf16 on the CPU.
 * One JSON object per line, the last a summary. Ratios come from one process on one GPU.
 * With --offload-params cpu the weights live on the host and stream through the GPU a layer at
 * a time (recomputation on): the model is then bounded by host memory (20 bytes per parameter
 * with DPU: the 18 above and the 2-byte weights' partition), the runs are named
 * "streamed" and "streamed+dpu", and there is no no-offload run.
 * Usage: bench_gpu_step [--backend cuda|cpu] [--model auto|NAME] [--micro N] [--steps N]
 *                       [--dtype bf16|fp16|fp32] [--peak-tflops X] [--offload-params none|cpu]
 *        (defaults: cuda, auto, 8, 4, the GPU's dtype and its peak, none) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/proc_file.h"
#include "zoe/zoe.h"
#include "zoe/train.h"

typedef struct bench_args {
    zoe_backend backend;
    char model[32];
    int micro, steps;
    zoe_dtype dtype;    /* ZOE_DTYPE_COUNT: the GPU's */
    double peak_tflops; /* 0: the GPU's in dtype */
    char gpu[288];      /* what the peak is of: the name and sm_XY */
    int streamed;       /* --offload-params cpu */
} bench_args;

typedef struct phase_sums {
    double total, forward, backward, offload, host_step, refresh, wait;
    int steps;
} phase_sums;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static double available_host_bytes(void) {
    const double kib = zoe_proc_kib("/proc/meminfo", "MemAvailable");
    return kib < 0 ? 0 : kib * 1024.0;
}

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.backend = ZOE_BACKEND_CUDA,
                      .model = "auto",
                      .micro = 8,
                      .steps = 4,
                      .dtype = ZOE_DTYPE_COUNT};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto bad;
        if (!strcmp(argv[i], "--backend") && zoe_backend_parse(v, &a->backend) == ZOE_OK) {
        } else if (!strcmp(argv[i], "--model") && strlen(v) < sizeof a->model) {
            strcpy(a->model, v);
        } else if (!strcmp(argv[i], "--micro") && (a->micro = atoi(v)) > 0) {
        } else if (!strcmp(argv[i], "--steps") && (a->steps = atoi(v)) > 0) {
        } else if (!strcmp(argv[i], "--peak-tflops") && (a->peak_tflops = atof(v)) >= 0) {
        } else if (!strcmp(argv[i], "--dtype") && zoe_dtype_parse(v, &a->dtype) == ZOE_OK &&
                   a->dtype != ZOE_I32) {
        } else if (!strcmp(argv[i], "--offload-params") &&
                   (!strcmp(v, "cpu") || !strcmp(v, "none"))) {
            a->streamed = !strcmp(v, "cpu");
        } else {
            goto bad;
        }
        i++;
        continue;
    bad:
        fprintf(stderr, "bench_gpu_step: bad argument '%s'\n", argv[i]);
        return 0;
    }
    return 1;
}

static void config_for(const bench_args *a, const zoe_model_config *m, zoe_offload_mode offload,
                       int dpu_warmup, zoe_train_config *c) {
    zoe_train_config_defaults(c);
    c->model = *m;
    c->backend = a->backend;
    c->dtype = a->dtype;
    c->micro_batch = a->micro;
    c->offload = offload;
    c->dpu_warmup = dpu_warmup;
    c->steps = 1000;
    c->progress = ZOE_PROGRESS_LINES;
    if (a->streamed && offload == ZOE_OFFLOAD_CPU) {
        c->offload_params = ZOE_OFFLOAD_PARAMS_CPU;
        c->recompute = 1;
    }
}

/* The dtype and the peak of the GPU this rank takes (one table: zoe_gpu_spec_of), unless the
 * arguments name them. 0 after a message when the GPU cannot run. */
static int pick_gpu(bench_args *a) {
    snprintf(a->gpu, sizeof a->gpu, "cpu");
    if (a->backend != ZOE_BACKEND_CUDA) {
        if (a->dtype == ZOE_DTYPE_COUNT) a->dtype = ZOE_BF16;
        return 1;
    }
    zoe_gpu_choice c;
    zoe_gpu_spec spec;
    char warning[256];
    if (zoe_gpu_choose(MPI_COMM_WORLD, &c) != ZOE_OK) {
        fprintf(stderr, "bench_gpu_step: %s\n", zoe_last_error());
        return 0;
    }
    zoe_gpu_spec_of(c.weakest.capability, c.weakest.name, &spec);
    if (a->dtype == ZOE_DTYPE_COUNT) a->dtype = zoe_gpu_default_dtype(&spec);
    if (zoe_gpu_check_dtype(&spec, a->dtype, 0, warning, sizeof warning) != ZOE_OK) {
        fprintf(stderr, "bench_gpu_step: %s\n", zoe_last_error());
        return 0;
    }
    if (a->peak_tflops == 0) a->peak_tflops = zoe_gpu_spec_peak_tflops(&spec, a->dtype, 0);
    snprintf(a->gpu, sizeof a->gpu, "%s (sm_%d)", c.gpu.name, c.gpu.capability);
    return 1;
}

/* `count` steps from step `first`, summed into *out. */
static zoe_status run_steps(zoe_trainer *tr, const zoe_train_config *c, const int32_t *tokens,
                            const int32_t *targets, int first, int count, phase_sums *out) {
    *out = (phase_sums){0};
    for (int s = first; s < first + count; s++) {
        zoe_step_stats st;
        double t0 = now_ms();
        zoe_status status = zoe_trainer_micro_batch(tr, tokens, targets, NULL);
        if (status == ZOE_OK) status = zoe_trainer_step(tr, zoe_train_lr_at(c, s), &st);
        if (status != ZOE_OK) return status;
        out->total += now_ms() - t0;
        out->forward += st.ms_forward, out->backward += st.ms_backward;
        out->offload += st.ms_offload, out->host_step += st.ms_host_step;
        out->refresh += st.ms_refresh;
        double wait = st.ms_optimizer - st.ms_refresh;
        out->wait += wait > 0 ? wait : 0;
        out->steps++;
    }
    return ZOE_OK;
}

static void print_run(const char *run, const zoe_model_config *m, int64_t params,
                      const bench_args *a, const phase_sums *p, double hidden, double *tokens_s) {
    const int micro = a->micro;
    const double peak_tflops = a->peak_tflops;
    const double n = p->steps, tokens = (double)micro * m->seq_len, ms = p->total / n;
    const double flops =
        (6.0 * (double)params + 12.0 * m->layers * m->hidden * m->seq_len) * tokens / (ms / 1e3);
    *tokens_s = tokens / (ms / 1e3);
    printf("{\"bench\":\"gpu_step\",\"run\":\"%s\",\"model\":\"%s\",\"params\":%lld,"
           "\"gpu\":\"%s\",\"peak_tflops\":%.1f,"
           "\"micro_batch\":%d,\"seq\":%d,\"dtype\":\"%s\",\"steps\":%d,\"ms_step\":%.1f,"
           "\"tokens_per_s\":%.0f,\"tflops\":%.1f,\"mfu\":%.3f,\"ms_forward\":%.1f,"
           "\"ms_backward\":%.1f,\"ms_grad_offload\":%.1f,\"ms_host_adam\":%.1f,"
           "\"ms_refresh\":%.1f,\"ms_wait_update\":%.1f,\"dpu_hidden\":%.3f}\n",
           run, m->name, (long long)params, a->gpu, peak_tflops, micro, m->seq_len,
           zoe_dtype_name(a->dtype), p->steps, ms, *tokens_s, flops / 1e12,
           peak_tflops > 0 ? flops / 1e12 / peak_tflops : 0.0, p->forward / n, p->backward / n,
           p->offload / n, p->host_step / n, p->refresh / n, p->wait / n, hidden);
    fflush(stdout);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    bench_args a;
    if (!parse_args(argc, argv, &a)) return 2;
    if (!pick_gpu(&a)) {
        MPI_Finalize();
        return 2;
    }
    const double host = available_host_bytes();
    int n = zoe_model_preset_count(), order[64], count = 0;
    for (int i = 0; i < n && count < 64; i++) {
        const zoe_model_config *m = zoe_model_preset_at(i);
        if (strcmp(a.model, "auto")
                ? !strcmp(m->name, a.model)
                : (a.streamed ? 20.0 : 18.0) * (double)zoe_model_param_count(m) <= 0.6 * host)
            order[count++] = i;
    }
    /* largest first */
    for (int i = 0; i < count; i++)
        for (int j = i + 1; j < count; j++)
            if (zoe_model_param_count(zoe_model_preset_at(order[j])) >
                zoe_model_param_count(zoe_model_preset_at(order[i]))) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    zoe_trainer *tr = NULL;
    zoe_train_config c;
    const zoe_model_config *m = NULL;
    const int sync_steps = a.steps, warm = 1;
    zoe_status st = ZOE_ERR_OUT_OF_MEMORY;
    /* Out of memory: the next smaller preset; any other failure ends the benchmark. */
    for (int i = 0; i < count && st == ZOE_ERR_OUT_OF_MEMORY; i++) {
        m = zoe_model_preset_at(order[i]);
        config_for(&a, m, ZOE_OFFLOAD_CPU, warm + sync_steps, &c);
        fprintf(stderr, "bench_gpu_step: trying %s (%.2fB parameters) ...\n", m->name,
                (double)zoe_model_param_count(m) / 1e9);
        st = zoe_trainer_create(MPI_COMM_WORLD, &c, &tr);
        if (st != ZOE_OK) fprintf(stderr, "bench_gpu_step: %s: %s\n", m->name, zoe_last_error());
    }
    if (st != ZOE_OK) {
        fprintf(stderr, "bench_gpu_step: no preset runs (%.0f GB of host memory available)\n",
                host / 1e9);
        MPI_Finalize();
        return 1;
    }
    const int64_t params = zoe_trainer_param_count(tr);
    const size_t tok_n = (size_t)a.micro * (size_t)m->seq_len;
    int32_t *tokens = malloc(tok_n * sizeof(int32_t)), *targets = malloc(tok_n * sizeof(int32_t));
    unsigned seed = 1;
    for (size_t i = 0; i < tok_n; i++) tokens[i] = (int32_t)(rand_r(&seed) % (unsigned)m->vocab);
    for (size_t i = 0; i < tok_n; i++) targets[i] = tokens[(i + 1) % tok_n];

    /* Offload: one warm-up step, the synchronous steps, one DPU warm-up step, the DPU steps. */
    phase_sums sync, dpu, none, skip;
    double tps_sync = 0, tps_dpu = 0, tps_none = 0;
    st = run_steps(tr, &c, tokens, targets, 0, warm, &skip);
    if (st == ZOE_OK) st = run_steps(tr, &c, tokens, targets, warm, sync_steps, &sync);
    if (st == ZOE_OK) st = run_steps(tr, &c, tokens, targets, warm + sync_steps, 1, &skip);
    if (st == ZOE_OK) st = run_steps(tr, &c, tokens, targets, warm + sync_steps + 1, a.steps, &dpu);
    if (st == ZOE_OK) st = zoe_trainer_flush(tr);
    zoe_trainer_destroy(tr);
    if (st != ZOE_OK) {
        fprintf(stderr, "bench_gpu_step: %s with offload: %s\n", m->name, zoe_last_error());
        MPI_Finalize();
        return 1;
    }
    const double host_adam = sync.host_step / sync.steps;
    const double hidden = host_adam > 0 ? 1.0 - (dpu.wait / dpu.steps) / host_adam : 0.0;
    print_run(a.streamed ? "streamed" : "offload", m, params, &a, &sync, 0.0, &tps_sync);
    print_run(a.streamed ? "streamed+dpu" : "offload+dpu", m, params, &a, &dpu,
              hidden < 0 ? 0 : hidden, &tps_dpu);

    /* No offload at the same model, when it fits on the device. */
    config_for(&a, m, ZOE_OFFLOAD_NONE, 0, &c);
    tr = NULL;
    if (!a.streamed && zoe_trainer_create(MPI_COMM_WORLD, &c, &tr) == ZOE_OK) {
        st = run_steps(tr, &c, tokens, targets, 0, warm, &skip);
        if (st == ZOE_OK) st = run_steps(tr, &c, tokens, targets, warm, a.steps, &none);
        zoe_trainer_destroy(tr);
        if (st == ZOE_OK) print_run("no-offload", m, params, &a, &none, 0.0, &tps_none);
    }
    if (!a.streamed && (!tr || st != ZOE_OK))
        printf("{\"bench\":\"gpu_step\",\"run\":\"no-offload\",\"model\":\"%s\",\"fits\":false,"
               "\"why\":\"%s\"}\n",
               m->name, zoe_last_error());
    printf("{\"bench\":\"gpu_step\",\"summary\":true,\"streamed\":%s,\"model\":\"%s\","
           "\"params\":%lld,"
           "\"tokens_per_s_offload\":%.0f,\"tokens_per_s_offload_dpu\":%.0f,"
           "\"tokens_per_s_no_offload\":%.0f,\"offload_dpu_vs_no_offload\":%.3f,"
           "\"dpu_hidden\":%.3f}\n",
           a.streamed ? "true" : "false", m->name, (long long)params, tps_sync, tps_dpu, tps_none,
           tps_none > 0 ? tps_dpu / tps_none : 0.0, hidden < 0 ? 0 : hidden);
    free(tokens), free(targets);
    MPI_Finalize();
    return 0;
}
