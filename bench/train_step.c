/* bench_train_step: one training step of gpt2-124m (fp32, micro-batch 4, seq 64) on 1 rank with
 * the machine's threads: ms per step, tokens/s, the split by phase and by op, the step's
 * GFLOP/s (6 x params x tokens), and, in the same run, the GFLOP/s of a large square sgemm on
 * the same threads; the last line gives the ratio (goal: >= 0.70).
 * Usage: bench_train_step [steps] [dpu_warmup]   (defaults 5 and 0, no DPU: on a CPU-only
 * machine the delayed update's host thread competes with the step for the same cores). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "zoe/zoe.h"
#include "zoe/train.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_train_step: %s: %s\n", what, zoe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* GFLOP/s of a square sgemm, best of 7 after a warm-up call, on the BLAS threads. */
static double sgemm_gflops(int n) {
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
    float *c = malloc(sizeof(float) * (size_t)n * n);
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.01f, c[i] = 0;
    double best = 1e30;
    for (int r = 0; r < 8; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now() - t0;
        if (r > 0 && t < best) best = t; /* the first call warms the pool */
    }
    free(a), free(b), free(c);
    return 2.0 * n * (double)n * n / best / 1e9;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int steps = argc > 1 ? atoi(argv[1]) : 5, dpu = argc > 2 ? atoi(argv[2]) : 0;
    if (steps < 1 || dpu < 0) {
        fprintf(stderr, "usage: bench_train_step [steps >= 1] [dpu_warmup >= 0]\n");
        return 2;
    }
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    if (zoe_model_preset("gpt2-124m", &cfg.model) != ZOE_OK) die("preset");
    cfg.model.seq_len = 64;
    cfg.micro_batch = 4;
    cfg.dtype = ZOE_F32;
    cfg.dpu_warmup = dpu;
    cfg.steps = steps + dpu + 1;
    zoe_trainer *tr = NULL;
    if (zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr) != ZOE_OK) die("trainer");
    int threads = omp_get_max_threads();
    size_t n = (size_t)cfg.micro_batch * (size_t)cfg.model.seq_len;
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    unsigned seed = 1;
    for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)(rand_r(&seed) % cfg.model.vocab);
    for (size_t i = 0; i < n; i++) targets[i] = tokens[(i + 1) % n];

    /* warm-up: the synchronous steps, and the first DPU step */
    zoe_step_stats s, sum = {0};
    for (int i = 0; i < dpu + 1; i++)
        if (zoe_trainer_micro_batch(tr, tokens, targets, NULL) || zoe_trainer_step(tr, 1e-4f, &s))
            die("warm-up step");
    zoe_profile prof;
    zoe_trainer_profile(tr, &prof, 1);
    double t0 = now();
    for (int i = 0; i < steps; i++) {
        if (zoe_trainer_micro_batch(tr, tokens, targets, NULL) || zoe_trainer_step(tr, 1e-4f, &s))
            die("step");
        sum.ms_forward += s.ms_forward, sum.ms_backward += s.ms_backward;
        sum.ms_offload += s.ms_offload, sum.ms_host_step += s.ms_host_step;
        sum.ms_refresh += s.ms_refresh, sum.ms_optimizer += s.ms_optimizer;
    }
    double ms = (now() - t0) * 1e3 / steps;
    zoe_trainer_profile(tr, &prof, 0);
    double params = (double)zoe_trainer_param_count(tr), tokens_per_step = (double)n;
    double gflops = 6.0 * params * tokens_per_step / (ms / 1e3) / 1e9;
    printf("{\"bench\":\"train_step\",\"model\":\"gpt2-124m\",\"params\":%.0f,\"micro_batch\":%d,"
           "\"seq\":%d,\"dtype\":\"fp32\",\"threads\":%d,\"omp_wait_policy\":\"%s\",\"dpu\":%s,"
           "\"steps\":%d,"
           "\"ms_per_step\":%.1f,\"tokens_per_s\":%.1f,\"gflops\":%.2f}\n",
           params, cfg.micro_batch, cfg.model.seq_len, threads,
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default",
           dpu ? "true" : "false", steps, ms, tokens_per_step / (ms / 1e3), gflops);
    printf("{\"bench\":\"train_step\",\"phase_ms\":{\"forward\":%.1f,\"backward\":%.1f,"
           "\"grad_offload\":%.1f,\"host_step\":%.1f,\"refresh\":%.1f,\"optimizer_call\":%.1f}}\n",
           sum.ms_forward / steps, sum.ms_backward / steps, sum.ms_offload / steps,
           sum.ms_host_step / steps, sum.ms_refresh / steps, sum.ms_optimizer / steps);
    for (int i = 0; i < prof.count; i++)
        printf("{\"bench\":\"train_step\",\"op\":\"%s\",\"ms_per_step\":%.2f,\"share\":%.3f}\n",
               prof.entries[i].name, prof.entries[i].ms / steps, prof.entries[i].ms / steps / ms);
    double peak = sgemm_gflops(2048);
    printf("{\"bench\":\"train_step\",\"sgemm_2048_gflops\":%.2f,\"threads\":%d}\n", peak, threads);
    printf("{\"bench\":\"train_step\",\"summary\":true,\"ms_per_step\":%.1f,\"step_gflops\":%.2f,"
           "\"sgemm_gflops\":%.2f,\"ratio\":%.3f,\"goal\":0.70}\n",
           ms, gflops, peak, gflops / peak);
    free(tokens), free(targets);
    zoe_trainer_finalize(tr);
    zoe_trainer_destroy(tr);
    MPI_Finalize();
    return 0;
}
