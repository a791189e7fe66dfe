// DeepSpeed's CPU Adam step timed on its own (bench/deepspeed_adam.sh builds this against the
// csrc/ of a DeepSpeed sdist and torch/extension.h beside this file, no libtorch).
//   deepspeed_adam_harness N REPS
// Threads: OMP_NUM_THREADS, as DeepSpeed's step reads them. Parameters and gradient bf16 (the
// kernel gives both one type), exp_avg and exp_avg_sq bf16 (DeepSpeedCPUAdam with
// fp32_optimizer_states=False): 14 bytes per parameter moved (reads 2 + 2 + 2 + 2, writes
// 2 + 2 + 2). The arrays are allocated as zoe allocates its host arrays (2 MiB aligned, advised
// for huge pages, first touched in the step's threading) and filled as bench_cpu_adam fills
// its own; the hyper-parameters are bench_cpu_adam's (AdamW, lr 1e-4, betas 0.9/0.999, eps
// 1e-8, weight decay 0.01, step 10). Prints one JSON line: the median and fastest of REPS
// steps after one warm-up step, the median in process CPU time, and the share of parameters
// the warm-up step left unchanged (DeepSpeed stores the new bf16 parameter rounded to nearest).
#include <omp.h>
#include <sys/mman.h>
#include <time.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "torch/extension.h"

// DeepSpeed's entry points (csrc/includes/cpu_adam.h), declared here so that this file
// compiles with -Wall -Wextra apart from DeepSpeed's sources.
int create_adam_optimizer(int optimizer_id, float alpha, float betta1, float betta2, float eps,
                          float weight_decay, bool adamw_mode, bool should_log);
int ds_adam_step(int optimizer_id, size_t step, float lr, float beta1, float beta2, float epsilon,
                 float weight_decay, bool bias_correction, torch::Tensor &params,
                 torch::Tensor &grads, torch::Tensor &exp_avg, torch::Tensor &exp_avg_sq);

static double clock_ms(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double median(std::vector<double> x) {
    std::sort(x.begin(), x.end());
    size_t k = x.size();
    return k % 2 ? x[k / 2] : 0.5 * (x[k / 2 - 1] + x[k / 2]);
}

static c10::BFloat16 *alloc_bf16(size_t n) {
    const size_t huge = size_t(2) << 20, bytes = (n * 2 + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, bytes);
    if (p) (void)madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<c10::BFloat16 *>(p);
}

int main(int argc, char **argv) {
    long long n_arg = argc > 1 ? atoll(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 0;
    if (argc != 3 || n_arg <= 0 || reps < 1) {
        fprintf(stderr, "usage: deepspeed_adam_harness N REPS (N > 0, REPS >= 1)\n");
        return 2;
    }
    const size_t n = (size_t)n_arg;
    const float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    const size_t step = 10;
    c10::BFloat16 *p = alloc_bf16(n), *g = alloc_bf16(n), *m = alloc_bf16(n), *v = alloc_bf16(n);
    if (!p || !g || !m || !v) {
        fprintf(stderr, "deepspeed_adam_harness: cannot allocate 4 x %zu bf16\n", n);
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)i * 2654435761u;
        g[i] = ((float)(x >> 8) * 0x1p-24f - 0.5f) * 1e-2f;
        p[i] = (float)(x >> 9) * 0x1p-23f - 0.5f;
        m[i] = 0.0f, v[i] = 1e-6f;
    }
    torch::Tensor tp(p, (int64_t)n, torch::kBFloat16), tg(g, (int64_t)n, torch::kBFloat16);
    torch::Tensor tm(m, (int64_t)n, torch::kBFloat16), tv(v, (int64_t)n, torch::kBFloat16);
    create_adam_optimizer(0, lr, beta1, beta2, eps, wd, true, false);

    std::vector<uint16_t> before(n);
    std::memcpy(before.data(), p, n * 2);
    ds_adam_step(0, step, lr, beta1, beta2, eps, wd, true, tp, tg, tm, tv); /* warm-up */
    size_t unchanged = 0;
    for (size_t i = 0; i < n; i++) unchanged += before[i] == p[i].x;

    // Wall time, and process CPU time (all threads; OMP_WAIT_POLICY=passive keeps idle
    // workers asleep), which leaves out the time other processes held the cores.
    std::vector<double> ms(reps), cpu(reps);
    for (int r = 0; r < reps; r++) {
        double t0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        ds_adam_step(0, step, lr, beta1, beta2, eps, wd, true, tp, tg, tm, tv);
        ms[r] = clock_ms(CLOCK_MONOTONIC) - t0, cpu[r] = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
#if defined(__AVX512__)
    const char *simd = "AVX512";
#elif defined(__AVX256__)
    const char *simd = "AVX256";
#else
    const char *simd = "scalar";
#endif
    printf("{\"impl\":\"deepspeed\",\"simd\":\"%s\",\"threads\":%d,\"n\":%zu,\"reps\":%d,"
           "\"step_median_ms\":%.3f,\"step_min_ms\":%.3f,\"step_cpu_median_ms\":%.3f,"
           "\"unchanged_frac\":%.4f}\n",
           simd, omp_get_max_threads(), n, reps, median(ms),
           *std::min_element(ms.begin(), ms.end()), median(cpu), (double)unchanged / n);
    free(p), free(g), free(m), free(v);
    return 0;
}
