/* bench_cpu_adam [N] [REPS] [--no-naive]: the fused host Adam step against a streaming probe that
 * moves the same bytes with trivial arithmetic, at 1 and 2 threads, in the layouts of
 * docs/offload.md ("Memory layout"); and a naive scalar AdamW for the factor gained.
 *
 * Bytes per parameter of the step, by mode:
 *   fp32          CPU backend, fp32 weights: the weights are the master. Reads gradient,
 *                 weight, m, v = 16; writes weight, m, v = 12: 28.
 *   bf16_weights  bf16 weights (CPU backend, or a GPU box's host): 28 + the bf16 weight = 30.
 *   fp32_dpu      CPU, fp32, update in flight: reads the weights the forward reads, writes the
 *                 new ones over the gradient: 28.
 *   bf16_dpu      update in flight from the bf16 gradient snapshot, the new bf16 weights over
 *                 it: reads master, m, v, snapshot = 14; writes the same = 14: 28.
 * The probe reads and writes exactly those arrays, tile by tile in the step's tiling and
 * threading, at the vector width of the step's path (AVX-512, AVX2 or scalar), with one
 * multiply-add per element and array instead of the step's arithmetic, and it stores the way the
 * step stores: plain stores to the fp32 arrays it has just read (weights or gradient, m, v), one
 * full-line non-temporal store per 64 bytes of the bf16 copy (truncated, where the step rounds;
 * write-only in bf16_weights, over the snapshot just read in bf16_dpu). It runs in two forms,
 * without and with the step's software prefetch (ZOE_ADAM_PREFETCH_AHEAD, kernels/adam.h), and
 * its figure is the faster of the two. Non-temporal stores to the fp32 arrays (read, then
 * written) were 20-30 % slower for probe and step alike on an AVX-512 Xeon, so neither uses them.
 * Each figure is the fastest of REPS runs, step and both probes interleaved so that noise from
 * other processes hits all alike, in wall time and in process CPU time (which leaves out the time
 * other processes held the cores). Default N is 16M parameters (~0.4 GB); pass 100000000 for the
 * 100M figure. The summary's worst ratios are over every mode and thread count; its bytes are the
 * largest mode's (bf16_weights), against the goal of issue 14. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/adam.h"
#include "runtime/cpu.h"
#include "runtime/host_array.h"
#include "zoe/dtype.h"

typedef struct arrays {
    size_t n;
    float *grad, *master, *m, *v;
    void *out; /* n floats' room: the bf16 weights, or the bf16 snapshot */
} arrays;

typedef enum { FP32, BF16_WEIGHTS, FP32_DPU, BF16_DPU, NUM_MODES } mode;
static const char *mode_names[] = {"fp32", "bf16_weights", "fp32_dpu", "bf16_dpu"};
static const double mode_bytes[] = {28, 30, 28, 28};

static double clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double now_ms(void) {
    return clock_ms(CLOCK_MONOTONIC);
}

/* CPU time of the whole process (every thread; idle OpenMP workers sleep with
 * OMP_WAIT_POLICY=passive): on a shared machine the time preempted by others is left out,
 * which wall time cannot do. */
static double cpu_ms(void) {
    return clock_ms(CLOCK_PROCESS_CPUTIME_ID);
}

static size_t tiles(size_t n) {
    return (n + ZOE_ADAM_TILE - 1) / ZOE_ADAM_TILE;
}

/* The optimizer's threading: static schedule over ZOE_ADAM_TILE tiles. */
static void fused_step(const arrays *a, const zoe_adam_consts *c, mode md) {
#pragma omp parallel for schedule(static)
    for (long t = 0; t < (long)tiles(a->n); t++) {
        size_t lo = (size_t)t * ZOE_ADAM_TILE;
        size_t len = lo + ZOE_ADAM_TILE < a->n ? ZOE_ADAM_TILE : a->n - lo;
        float *w = a->master + lo, *g = a->grad + lo;
        zoe_bf16 *half = (zoe_bf16 *)a->out + lo;
        switch (md) {
        case FP32:
            zoe_adam_host_to(c, w, w, a->m + lo, a->v + lo, g, ZOE_F32, NULL, ZOE_F32, len);
            break;
        case BF16_WEIGHTS:
            zoe_adam_host_to(c, w, w, a->m + lo, a->v + lo, g, ZOE_F32, half, ZOE_BF16, len);
            break;
        case FP32_DPU:
            zoe_adam_host_to(c, w, g, a->m + lo, a->v + lo, g, ZOE_F32, NULL, ZOE_F32, len);
            break;
        default:
            zoe_adam_host_to(c, w, w, a->m + lo, a->v + lo, half, ZOE_BF16, half, ZOE_BF16, len);
            break;
        }
    }
}

/* Same reads and writes, one multiply-add per array, and the weights' copy stored the way the
 * step stores it (non-temporal, truncated to bf16): a memory-speed yardstick. The mode's
 * gradient comes from g (fp32) or the bf16 buffer; the new weight goes to w or over g, and its
 * bf16 copy (if any) to the bf16 buffer. Tiles start 64-byte aligned. */
static inline float probe_grad(const float *g, const uint16_t *half, mode md, size_t i) {
    if (md != BF16_DPU) return g[i];
    uint32_t u = (uint32_t)half[i] << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static void probe_scalar(float *w, float *m, float *v, float *g, uint16_t *half, mode md, size_t lo,
                         size_t len) {
    for (size_t i = lo; i < len; i++) {
        float gi = probe_grad(g, half, md, i), x = w[i] + 1e-7f * gi;
        m[i] += 1e-7f * gi, v[i] = v[i] * 0.999999f + 1e-9f;
        *(md == FP32_DPU ? &g[i] : &w[i]) = x;
        uint32_t u;
        memcpy(&u, &x, 4);
        if (md == BF16_WEIGHTS || md == BF16_DPU) half[i] = (uint16_t)(u >> 16);
    }
}

/* The step's prefetch (kernels/adam.h) over the `count` elements from i: one per 64-byte line of
 * each fp32 input, one for the bf16 gradient. Integer arithmetic: the address may lie past the
 * arrays (a prefetch never faults). */
static inline void probe_prefetch(const float *w, const float *m, const float *v, const float *g,
                                  const uint16_t *half, mode md, size_t i, size_t count) {
    const uintptr_t ahead = ZOE_ADAM_PREFETCH_AHEAD * sizeof(float);
    for (size_t q = 0; q < count; q += 16) {
        __builtin_prefetch((const void *)((uintptr_t)(w + i + q) + ahead));
        __builtin_prefetch((const void *)((uintptr_t)(m + i + q) + ahead));
        __builtin_prefetch((const void *)((uintptr_t)(v + i + q) + ahead));
        if (md != BF16_DPU) __builtin_prefetch((const void *)((uintptr_t)(g + i + q) + ahead));
    }
    if (md == BF16_DPU) __builtin_prefetch((const void *)((uintptr_t)(half + i) + ahead / 2));
}

/* The probe's loop at the AVX2 path's width (8 lanes) and at the AVX-512 path's (16 lanes, one
 * 64-byte non-temporal store per 32 bf16 values, as the step stores them). */
ZOE_TARGET_AVX2 static inline __m256 load_bf16_avx2(const uint16_t *p) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

/* packus works within 128-bit halves: the permute puts the qwords in order 0, 2, 1, 3. */
ZOE_TARGET_AVX2 static inline void stream2_bf16_avx2(uint16_t *p, __m256 a, __m256 b) {
    __m256i hi = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16),
                                     _mm256_srli_epi32(_mm256_castps_si256(b), 16));
    _mm256_stream_si256((__m256i *)p, _mm256_permute4x64_epi64(hi, 0xD8));
}

ZOE_TARGET_AVX512 static inline __m512 load_bf16_avx512(const uint16_t *p) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

ZOE_TARGET_AVX512 static inline void stream2_bf16_avx512(uint16_t *p, __m512 a, __m512 b) {
    __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(a), 16));
    __m256i hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(b), 16));
    _mm512_stream_si512((__m512i *)p, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

#define PV                      __m256
#define PW                      8
#define P_SET1(x)               _mm256_set1_ps(x)
#define P_ADD(a, b)             _mm256_add_ps(a, b)
#define P_MUL(a, b)             _mm256_mul_ps(a, b)
#define P_LOAD(p)               _mm256_loadu_ps(p)
#define P_STORE(p, x)           _mm256_storeu_ps(p, x)
#define P_LOAD_BF16(p)          load_bf16_avx2(p)
#define P_STREAM2_BF16(p, a, b) stream2_bf16_avx2(p, a, b)
#define P_TARGET                ZOE_TARGET_AVX2
#define PROBE_FN(name)          name##_avx2
#include "cpu_adam_probe.h"

#define PV                      __m512
#define PW                      16
#define P_SET1(x)               _mm512_set1_ps(x)
#define P_ADD(a, b)             _mm512_add_ps(a, b)
#define P_MUL(a, b)             _mm512_mul_ps(a, b)
#define P_LOAD(p)               _mm512_loadu_ps(p)
#define P_STORE(p, x)           _mm512_storeu_ps(p, x)
#define P_LOAD_BF16(p)          load_bf16_avx512(p)
#define P_STREAM2_BF16(p, a, b) stream2_bf16_avx512(p, a, b)
#define P_TARGET                ZOE_TARGET_AVX512
#define PROBE_FN(name)          name##_avx512
#include "cpu_adam_probe.h"

/* The probe at the width of the step's path (zoe_cpu_isa_best), with or without the prefetch. */
static void probe(const arrays *a, mode md, int prefetch) {
    zoe_cpu_isa isa = zoe_cpu_isa_best();
#pragma omp parallel for schedule(static)
    for (long t = 0; t < (long)tiles(a->n); t++) {
        size_t lo = (size_t)t * ZOE_ADAM_TILE;
        size_t len = lo + ZOE_ADAM_TILE < a->n ? ZOE_ADAM_TILE : a->n - lo;
        float *w = a->master + lo, *m = a->m + lo, *v = a->v + lo, *g = a->grad + lo;
        uint16_t *half = (uint16_t *)a->out + lo;
        if (isa >= ZOE_CPU_ISA_AVX512)
            probe_tile_avx512(w, m, v, g, half, md, prefetch, len);
        else if (isa == ZOE_CPU_ISA_AVX2)
            probe_tile_avx2(w, m, v, g, half, md, prefetch, len);
        else
            probe_scalar(w, m, v, g, half, md, 0, len);
    }
}

/* AdamW as it is usually first written: one thread, bias corrections per element. */
static void naive_adamw(const arrays *a, const zoe_adam_hparams *h, mode md) {
    for (size_t i = 0; i < a->n; i++) {
        float g = a->grad[i] * h->grad_scale;
        a->m[i] = h->beta1 * a->m[i] + (1 - h->beta1) * g;
        a->v[i] = h->beta2 * a->v[i] + (1 - h->beta2) * g * g;
        float mhat = a->m[i] / (1 - powf(h->beta1, (float)h->step));
        float vhat = a->v[i] / (1 - powf(h->beta2, (float)h->step));
        a->master[i] -= h->lr * (mhat / (sqrtf(vhat) + h->eps) + h->weight_decay * a->master[i]);
        if (md == BF16_WEIGHTS) ((zoe_bf16 *)a->out)[i] = zoe_f32_to_bf16(a->master[i]);
    }
}

static int alloc_arrays(arrays *a, size_t n) {
    a->n = n;
    /* As zoe allocates them (runtime/host_array.h: huge pages for large arrays). */
    a->grad = zoe_host_array_alloc(n * 4), a->master = zoe_host_array_alloc(n * 4);
    a->m = zoe_host_array_alloc(n * 4), a->v = zoe_host_array_alloc(n * 4);
    a->out = zoe_host_array_alloc(n * 4);
    if (!a->grad || !a->master || !a->m || !a->v || !a->out) return 0;
        /* First touch in the tiling and thread count of the runs that follow. */
#pragma omp parallel for schedule(static)
    for (long t = 0; t < (long)tiles(n); t++) {
        size_t lo = (size_t)t * ZOE_ADAM_TILE, hi = lo + ZOE_ADAM_TILE < n ? lo + ZOE_ADAM_TILE : n;
        for (size_t i = lo; i < hi; i++) {
            uint32_t x = (uint32_t)i * 2654435761u;
            a->grad[i] = ((float)(x >> 8) * 0x1p-24f - 0.5f) * 1e-2f;
            a->master[i] = (float)(x >> 9) * 0x1p-23f - 0.5f;
            a->m[i] = 0, a->v[i] = 1e-6f;
            ((float *)a->out)[i] = 0;
        }
    }
    return 1;
}

static void free_arrays(arrays *a) {
    free(a->grad), free(a->master), free(a->m), free(a->v), free(a->out);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)16 << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    /* --no-naive leaves out the naive AdamW (minutes at 64M parameters). */
    const int with_naive = argc <= 3;
    if (n == 0 || reps < 1 || (argc > 3 && strcmp(argv[3], "--no-naive") != 0) || argc > 4) {
        fprintf(stderr, "usage: bench_cpu_adam [N > 0] [REPS >= 1] [--no-naive]\n");
        return 2;
    }
    zoe_adam_hparams h = {.lr = 1e-4f,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .eps = 1e-8f,
                          .weight_decay = 0.01f,
                          .decoupled = 1,
                          .grad_scale = 1.0f,
                          .step = 10};
    zoe_adam_consts c;
    zoe_adam_consts_init(&c, &h);
    double worst_ratio = 0, worst_cpu_ratio = 0, max_bytes = 0;
    int max_threads = omp_get_num_procs() < 2 ? omp_get_num_procs() : 2;
    for (int threads = 1; threads <= max_threads; threads++) {
        omp_set_num_threads(threads);
        arrays a;
        if (!alloc_arrays(&a, n)) {
            fprintf(stderr, "bench_cpu_adam: cannot allocate 5 x %zu floats\n", n);
            return 1;
        }
        for (int mi = 0; mi < NUM_MODES; mi++) {
            mode md = (mode)mi;
            double bytes = mode_bytes[md];
            double step_ms = INFINITY, naive_ms = INFINITY, step_cpu = INFINITY;
            /* [0] without, [1] with the prefetch; the probe's figure is the faster of the two. */
            double probe_ms[2] = {INFINITY, INFINITY}, probe_cpu[2] = {INFINITY, INFINITY};
            fused_step(&a, &c, md), probe(&a, md, 0), probe(&a, md, 1); /* warm-up */
            for (int r = 0; r < reps; r++) {
                double t0 = now_ms(), c0 = cpu_ms();
                fused_step(&a, &c, md);
                step_ms = fmin(step_ms, now_ms() - t0), step_cpu = fmin(step_cpu, cpu_ms() - c0);
                for (int pf = 0; pf < 2; pf++) {
                    t0 = now_ms(), c0 = cpu_ms();
                    probe(&a, md, pf);
                    probe_ms[pf] = fmin(probe_ms[pf], now_ms() - t0);
                    probe_cpu[pf] = fmin(probe_cpu[pf], cpu_ms() - c0);
                }
            }
            double best_probe_ms = fmin(probe_ms[0], probe_ms[1]);
            double best_probe_cpu = fmin(probe_cpu[0], probe_cpu[1]);
            int naive = with_naive && threads == 1 && (md == FP32 || md == BF16_WEIGHTS);
            for (int r = 0; naive && r < (reps < 3 ? reps : 3); r++) {
                double t0 = now_ms();
                naive_adamw(&a, &h, md);
                naive_ms = fmin(naive_ms, now_ms() - t0);
            }
            double ratio = step_ms / best_probe_ms, cpu_ratio = step_cpu / best_probe_cpu;
            if (ratio > worst_ratio) worst_ratio = ratio;
            if (cpu_ratio > worst_cpu_ratio) worst_cpu_ratio = cpu_ratio;
            if (bytes > max_bytes) max_bytes = bytes;
            printf(
                "{\"bench\":\"cpu_adam\",\"mode\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"n\":%zu,"
                "\"bytes_per_param\":%.0f,\"step_ms\":%.3f,\"probe_ms\":%.3f,"
                "\"probe_plain_ms\":%.3f,\"probe_prefetch_ms\":%.3f,\"step_over_probe\":%.3f,"
                "\"step_cpu_ms\":%.3f,\"probe_cpu_ms\":%.3f,\"cpu_step_over_probe\":%.3f,"
                "\"step_gb_s\":%.2f",
                mode_names[md], zoe_cpu_isa_name(zoe_cpu_isa_best()), threads, n, bytes, step_ms,
                best_probe_ms, probe_ms[0], probe_ms[1], ratio, step_cpu, best_probe_cpu, cpu_ratio,
                bytes * n / step_ms * 1e-6);
            if (naive)
                printf(",\"naive_ms\":%.3f,\"naive_over_step\":%.2f", naive_ms, naive_ms / step_ms);
            printf("}\n");
            fflush(stdout);
        }
        free_arrays(&a);
    }
    printf("{\"bench\":\"cpu_adam\",\"summary\":true,\"n\":%zu,\"worst_step_over_probe\":%.3f,"
           "\"worst_cpu_step_over_probe\":%.3f,\"goal_ratio\":1.03,\"max_bytes_per_param\":%.0f,"
           "\"goal_bytes\":30}\n",
           n, worst_ratio, worst_cpu_ratio, max_bytes);
    return 0;
}
