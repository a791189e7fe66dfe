/* bench_cpu_adam [N] [REPS] [--no-naive] [--mode NAME]: the fused host Adam step against a
 * streaming probe that moves the same bytes with trivial arithmetic, at 1 and 2 threads (and at
 * OpenMP's default thread count where it is more: OMP_NUM_THREADS, else every core), in the
 * layouts of docs/offload.md ("Memory layout"); and a naive scalar AdamW for the factor gained.
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
 * the form with the lower median counts. Non-temporal stores to the fp32 arrays (read, then
 * written) were 20-30 % slower for probe and step alike on an AVX-512 Xeon, so neither uses them.
 * Step and both probes run REPS times (at least 2), interleaved, the step first in even
 * repetitions and last in odd ones (summarize() below). step_over_probe is the paired ratio: each
 * repetition's step over its own probe pass, the median per order and the geometric mean of the
 * two orders, which holds still on a machine whose memory bandwidth others share; cpu_ same in
 * process CPU time (which leaves out the time other processes held the cores). The fastest step
 * over the fastest probe (fastest_step_over_probe) is printed too: on a quiet machine it agrees,
 * on a shared one its two minima may come from different minutes. Default N is 16M parameters
 * (~0.4 GB) and REPS 15; pass N = 67108864 or more where the last-level cache is large. The
 * summary's worst ratios are over every mode and thread count; its bytes are the largest mode's
 * (bf16_weights), against the goal of issue 14.
 *
 * Whether a step can reach the probe depends on the host's balance: cached_ns_per_param is one
 * core's time per parameter with the data in cache (the arithmetic alone, cached_ns_per_param()
 * below), arithmetic_gb_s_per_core the step's bytes over it (the per-core share of memory
 * bandwidth below which the step waits on memory), probe_ns_per_param the probe's time per
 * parameter at the line's thread count, and cores_to_memory_bound the first over the last: how
 * many cores' arithmetic this machine's memory, as fast as the probe found it, keeps busy. Above
 * 1 at the machine's own core count, the step is compute-bound here. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/adam.h"
#include "kernels/adam_state.h"
#include "runtime/cpu.h"
#include "runtime/host_array.h"
#include "zoe/dtype.h"
#include "zoe/train.h"

typedef struct arrays {
    size_t n;
    float *grad, *master, *m, *v;
    void *out;                /* n floats' room: the bf16 weights, or the bf16 snapshot */
    float *m_scale, *v_scale; /* INT8_STATE: the moments' block scales */
} arrays;

/* BF16_STATE: the compressed state of kernels/adam_state.h (bf16 master, m and v, held in the
 * first half of each fp32 array), the fp32 gradient and the bf16 weights out. */
/* INT8_STATE: bf16 master and blockwise int8 m and v (their codes in the first quarter of the
 * fp32 arrays, kernels/adam_state.h), the fp32 gradient and the bf16 weights out; 14 bytes plus
 * the scales' 16 per 256 elements (0.06), which the probe leaves out. */
typedef enum { FP32, BF16_WEIGHTS, FP32_DPU, BF16_DPU, BF16_STATE, INT8_STATE, NUM_MODES } mode;
static const char *mode_names[] = {"fp32",     "bf16_weights", "fp32_dpu",
                                   "bf16_dpu", "bf16_state",   "int8_state"};
static const double mode_bytes[] = {28, 30, 28, 28, 18, 14};

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
        case BF16_STATE: {
            const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_BF16, ZOE_BF16};
            const zoe_adam_state st = {.master = (zoe_bf16 *)a->master + lo,
                                       .exp_avg = (zoe_bf16 *)a->m + lo,
                                       .exp_avg_sq = (zoe_bf16 *)a->v + lo};
            const zoe_adam_rounding r = {.seed = 1, .step = 10};
            zoe_adam_state_host(c, &r, &dt, &st, lo, g, ZOE_F32, half, ZOE_BF16, len);
            break;
        }
        case INT8_STATE: { /* a tile is a whole number of blocks */
            const zoe_adam_state_dtypes dt = {ZOE_BF16, ZOE_I8, ZOE_I8};
            const zoe_adam_state st = {.master = (zoe_bf16 *)a->master + lo,
                                       .exp_avg = (int8_t *)a->m + lo,
                                       .exp_avg_sq = (uint8_t *)a->v + lo,
                                       .exp_avg_scale = a->m_scale + lo / ZOE_ADAM_INT8_BLOCK,
                                       .exp_avg_sq_scale = a->v_scale + lo / ZOE_ADAM_INT8_BLOCK};
            const zoe_adam_rounding r = {.seed = 1, .step = 10};
            zoe_adam_state_host(c, &r, &dt, &st, lo, g, ZOE_F32, half, ZOE_BF16, len);
            break;
        }
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

static inline float widen_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline uint16_t truncate_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static void probe_scalar(float *w, float *m, float *v, float *g, uint16_t *half, mode md, size_t lo,
                         size_t len) {
    if (md == BF16_STATE) { /* the state's 2-byte arrays in the first half of each */
        uint16_t *w16 = (uint16_t *)w, *m16 = (uint16_t *)m, *v16 = (uint16_t *)v;
        for (size_t i = lo; i < len; i++) {
            float x = widen_bf16(w16[i]) + 1e-7f * g[i];
            w16[i] = truncate_bf16(x), half[i] = truncate_bf16(x);
            m16[i] = truncate_bf16(widen_bf16(m16[i]) + 1e-7f * g[i]);
            v16[i] = truncate_bf16(widen_bf16(v16[i]) * 0.999999f + 1e-9f);
        }
        return;
    }
    if (md == INT8_STATE) { /* 1-byte moments in the first quarter of each fp32 array */
        uint16_t *w16 = (uint16_t *)w;
        uint8_t *m8 = (uint8_t *)m, *v8 = (uint8_t *)v;
        for (size_t i = lo; i < len; i++) {
            float x = widen_bf16(w16[i]) + 1e-7f * g[i];
            w16[i] = truncate_bf16(x), half[i] = truncate_bf16(x);
            m8[i] = (uint8_t)(m8[i] + (g[i] > 0)), v8[i] = (uint8_t)(v8[i] | 1);
        }
        return;
    }
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

ZOE_TARGET_AVX2 static inline void store_bf16_avx2(uint16_t *p, __m256 x) {
    __m256i h = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
    _mm_storeu_si128((__m128i *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}

ZOE_TARGET_AVX512 static inline void store_bf16_avx512(uint16_t *p, __m512 x) {
    _mm256_storeu_si256((__m256i *)p,
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16)));
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
#define P_STORE_BF16(p, x)      store_bf16_avx2(p, x)
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
#define P_STORE_BF16(p, x)      store_bf16_avx512(p, x)
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

/* One repetition's times: the step, the probe without [0] and with [1] the prefetch. */
typedef struct timing {
    double step_ms, step_cpu, probe_ms[2], probe_cpu[2];
} timing;

enum { MAX_REPS = 999 };

static void time_step(timing *t, const arrays *a, const zoe_adam_consts *c, mode md) {
    double t0 = now_ms(), c0 = cpu_ms();
    fused_step(a, c, md);
    t->step_ms = now_ms() - t0, t->step_cpu = cpu_ms() - c0;
}

static void time_probe(timing *t, const arrays *a, mode md, int prefetch) {
    double t0 = now_ms(), c0 = cpu_ms();
    probe(a, md, prefetch);
    t->probe_ms[prefetch] = now_ms() - t0, t->probe_cpu[prefetch] = cpu_ms() - c0;
}

static int compare_doubles(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *x, int count) {
    qsort(x, (size_t)count, sizeof *x, compare_doubles);
    return count % 2 ? x[count / 2] : 0.5 * (x[count / 2 - 1] + x[count / 2]);
}

/* What one mode's repetitions say, in wall and in process CPU time. The probe's form (without or
 * with the prefetch) is the one with the lower median over the repetitions, and only its passes
 * count: the faster of two passes each repetition would be a minimum over twice the step's
 * samples, which favours the probe by about half the pass-to-pass noise. Then the fastest step
 * over the fastest probe (ratio), and the paired ratio: each repetition's step over its probe
 * pass, the median over the repetitions of each order (even ones run the step first, odd ones
 * the probes first), and the geometric mean of the two medians. The pairs see the same state of
 * a shared machine's memory bandwidth, which drifts over seconds; the two orders cancel what a
 * pass leaves behind for the next (prefetcher and cache state). probe_spread is the slowest over
 * the fastest pass of the probe's form: how far the machine drifted during the runs. */
typedef struct figures {
    int probe_form;
    double step_ms, step_cpu, probe_min_ms[2], probe_ms, probe_cpu, ratio, cpu_ratio;
    double paired, paired_order[2], cpu_paired, probe_spread, step_median_ms, step_cpu_median_ms;
} figures;

static double median_of(const timing *t, int reps, int form) {
    double x[MAX_REPS];
    for (int r = 0; r < reps; r++) x[r] = t[r].probe_ms[form];
    return median(x, reps);
}

static figures summarize(const timing *t, int reps) {
    figures f = {.probe_form = median_of(t, reps, 1) < median_of(t, reps, 0),
                 .step_ms = INFINITY,
                 .step_cpu = INFINITY,
                 .probe_min_ms = {INFINITY, INFINITY},
                 .probe_ms = INFINITY,
                 .probe_cpu = INFINITY};
    const int pf = f.probe_form;
    double wall[2][MAX_REPS], cpu[2][MAX_REPS], steps[MAX_REPS], step_cpus[MAX_REPS],
        slowest_probe = 0;
    int count[2] = {0, 0};
    for (int r = 0; r < reps; r++) {
        f.step_ms = fmin(f.step_ms, t[r].step_ms), f.step_cpu = fmin(f.step_cpu, t[r].step_cpu);
        steps[r] = t[r].step_ms, step_cpus[r] = t[r].step_cpu;
        for (int k = 0; k < 2; k++) f.probe_min_ms[k] = fmin(f.probe_min_ms[k], t[r].probe_ms[k]);
        f.probe_ms = fmin(f.probe_ms, t[r].probe_ms[pf]);
        f.probe_cpu = fmin(f.probe_cpu, t[r].probe_cpu[pf]);
        slowest_probe = fmax(slowest_probe, t[r].probe_ms[pf]);
        int order = r % 2;
        wall[order][count[order]] = t[r].step_ms / t[r].probe_ms[pf];
        cpu[order][count[order]++] = t[r].step_cpu / t[r].probe_cpu[pf];
    }
    f.ratio = f.step_ms / f.probe_ms, f.cpu_ratio = f.step_cpu / f.probe_cpu;
    for (int k = 0; k < 2; k++) f.paired_order[k] = median(wall[k], count[k]);
    f.paired = sqrt(f.paired_order[0] * f.paired_order[1]);
    f.cpu_paired = sqrt(median(cpu[0], count[0]) * median(cpu[1], count[1]));
    f.probe_spread = slowest_probe / f.probe_ms;
    f.step_median_ms = median(steps, reps), f.step_cpu_median_ms = median(step_cpus, reps);
    return f;
}

/* The step's arithmetic alone: the first CACHED_N elements (two tiles, 14 to 30 bytes each: within
 * a core's L2 cache) stepped on one thread, CACHED_BATCHES times CACHED_PASSES passes, the fastest
 * batch's process CPU time per element and pass. The step's bytes over that time is the memory
 * bandwidth one core's arithmetic keeps up with: on a host whose cores each get less (a DGX-2's 48
 * share about 200 GB/s), the step waits on memory, at the probe's speed; on one whose cores get
 * more (this development VM: one core streams about 44 GB/s), on its arithmetic. The state the
 * passes leave is stepped on by the timed runs that follow, as any earlier step's would be. */
enum { CACHED_N = 2 * ZOE_ADAM_TILE, CACHED_PASSES = 10, CACHED_BATCHES = 20 };

static double cached_ns_per_param(const arrays *a, const zoe_adam_consts *c, mode md) {
    arrays slice = *a;
    slice.n = a->n < CACHED_N ? a->n : CACHED_N;
    double fastest = INFINITY;
    fused_step(&slice, c, md); /* into cache */
    for (int b = 0; b < CACHED_BATCHES; b++) {
        double c0 = cpu_ms();
        for (int p = 0; p < CACHED_PASSES; p++) fused_step(&slice, c, md);
        fastest = fmin(fastest, cpu_ms() - c0);
    }
    return fastest * 1e6 / ((double)CACHED_PASSES * (double)slice.n);
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
    a->m_scale = zoe_host_array_alloc(zoe_adam_int8_blocks(n) * 4);
    a->v_scale = zoe_host_array_alloc(zoe_adam_int8_blocks(n) * 4);
    if (!a->grad || !a->master || !a->m || !a->v || !a->out || !a->m_scale || !a->v_scale) return 0;
    for (size_t b = 0; b < zoe_adam_int8_blocks(n); b++)
        a->m_scale[b] = 1e-3f, a->v_scale[b] = 1e-6f;
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
    free(a->m_scale), free(a->v_scale);
}

int main(int argc, char **argv) {
    /* N and REPS as every zoe program reads numbers (zoe_parse_u64: " 5", "0x10", an overflow
     * are not numbers); --no-naive leaves out the naive AdamW (minutes at 64M parameters);
     * --mode NAME, given once, runs one mode only (bench/deepspeed_adam.sh: bf16_state). */
    uint64_t n_arg = (uint64_t)16 << 20, reps_arg = 15;
    int with_naive = 1, only = -1, bad_at = 0;
    if (argc > 1 && (!zoe_parse_u64(argv[1], &n_arg) || n_arg == 0 || n_arg > SIZE_MAX / 4))
        bad_at = 1;
    else if (argc > 2 &&
             (!zoe_parse_u64(argv[2], &reps_arg) || reps_arg < 2 || reps_arg > MAX_REPS))
        bad_at = 2;
    for (int i = 3; i < argc && !bad_at; i++) {
        if (strcmp(argv[i], "--no-naive") == 0) {
            with_naive = 0;
        } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc && only < 0) {
            for (int mi = 0; mi < NUM_MODES; mi++)
                if (strcmp(argv[i + 1], mode_names[mi]) == 0) only = mi;
            bad_at = only < 0 ? i + 1 : 0, i++;
        } else {
            bad_at = i;
        }
    }
    if (bad_at) {
        fprintf(stderr,
                "bench_cpu_adam: bad argument '%s'\nusage: bench_cpu_adam [N > 0] [REPS in 2..%d] "
                "[--no-naive] [--mode fp32|bf16_weights|fp32_dpu|bf16_dpu|bf16_state|int8_state]\n",
                argv[bad_at], MAX_REPS);
        return 2;
    }
    const size_t n = (size_t)n_arg;
    const int reps = (int)reps_arg;
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
    figures worst = {0};
    double cached[NUM_MODES]; /* each mode's cached_ns_per_param, measured at one thread */
    double max_bytes = 0;
    /* 1 and 2 threads, and OpenMP's default count (OMP_NUM_THREADS, else every core) where it
     * is more: on a server the step's balance against memory is that of all its cores. */
    int thread_counts[3] = {1, 2, omp_get_max_threads()}, num_counts = 0;
    for (int k = 0; k < 3; k++)
        if (thread_counts[k] <= omp_get_num_procs() &&
            (num_counts == 0 || thread_counts[k] > thread_counts[num_counts - 1]))
            thread_counts[num_counts++] = thread_counts[k];
    for (int tc = 0; tc < num_counts; tc++) {
        int threads = thread_counts[tc];
        omp_set_num_threads(threads);
        arrays a;
        if (!alloc_arrays(&a, n)) {
            fprintf(stderr, "bench_cpu_adam: cannot allocate 5 x %zu floats\n", n);
            return 1;
        }
        for (int mi = 0; mi < NUM_MODES; mi++) {
            if (only >= 0 && mi != only) continue;
            mode md = (mode)mi;
            double bytes = mode_bytes[md];
            double naive_ms = INFINITY;
            timing t[MAX_REPS];
            fused_step(&a, &c, md), probe(&a, md, 0), probe(&a, md, 1); /* warm-up */
            for (int r = 0; r < reps; r++) {
                if (r % 2 == 0) time_step(&t[r], &a, &c, md);
                for (int k = 0; k < 2; k++) time_probe(&t[r], &a, md, r % 2 == 0 ? k : 1 - k);
                if (r % 2 == 1) time_step(&t[r], &a, &c, md);
            }
            figures f = summarize(t, reps);
            /* one thread's arithmetic, measured at one thread (the runs above use every thread) */
            double cached_ns = threads == 1 ? cached_ns_per_param(&a, &c, md) : NAN;
            if (threads == 1)
                cached[md] = cached_ns;
            else
                cached_ns = cached[md];
            double probe_ns = f.probe_ms * 1e6 / (double)n;
            int naive = with_naive && threads == 1 && (md == FP32 || md == BF16_WEIGHTS);
            for (int r = 0; naive && r < (reps < 3 ? reps : 3); r++) {
                double t0 = now_ms();
                naive_adamw(&a, &h, md);
                naive_ms = fmin(naive_ms, now_ms() - t0);
            }
            if (f.ratio > worst.ratio) worst.ratio = f.ratio;
            if (f.cpu_ratio > worst.cpu_ratio) worst.cpu_ratio = f.cpu_ratio;
            if (f.paired > worst.paired) worst.paired = f.paired;
            if (f.cpu_paired > worst.cpu_paired) worst.cpu_paired = f.cpu_paired;
            if (bytes > max_bytes) max_bytes = bytes;
            printf(
                "{\"bench\":\"cpu_adam\",\"mode\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"n\":%zu,"
                "\"bytes_per_param\":%.0f,\"step_ms\":%.3f,\"probe_ms\":%.3f,"
                "\"probe_plain_ms\":%.3f,\"probe_prefetch_ms\":%.3f,\"probe_form\":\"%s\","
                "\"step_over_probe\":%.3f,\"step_first\":%.3f,\"probe_first\":%.3f,"
                "\"cpu_step_over_probe\":%.3f,\"fastest_step_over_probe\":%.3f,"
                "\"fastest_cpu_step_over_probe\":%.3f,\"probe_spread\":%.3f,\"step_gb_s\":%.2f,"
                "\"step_median_ms\":%.3f,\"step_cpu_median_ms\":%.3f,\"cached_ns_per_param\":%.3f,"
                "\"probe_ns_per_param\":%.3f,\"arithmetic_gb_s_per_core\":%.2f,"
                "\"cores_to_memory_bound\":%.2f",
                mode_names[md], zoe_cpu_isa_name(zoe_cpu_isa_best()), threads, n, bytes, f.step_ms,
                f.probe_ms, f.probe_min_ms[0], f.probe_min_ms[1],
                f.probe_form ? "prefetch" : "plain", f.paired, f.paired_order[0], f.paired_order[1],
                f.cpu_paired, f.ratio, f.cpu_ratio, f.probe_spread, bytes * n / f.step_ms * 1e-6,
                f.step_median_ms, f.step_cpu_median_ms, cached_ns, probe_ns, bytes / cached_ns,
                cached_ns / probe_ns);
            if (naive)
                printf(",\"naive_ms\":%.3f,\"naive_over_step\":%.2f", naive_ms,
                       naive_ms / f.step_ms);
            printf("}\n");
            fflush(stdout);
        }
        free_arrays(&a);
    }
    printf("{\"bench\":\"cpu_adam\",\"summary\":true,\"n\":%zu,\"worst_step_over_probe\":%.3f,"
           "\"worst_cpu_step_over_probe\":%.3f,\"worst_fastest_step_over_probe\":%.3f,"
           "\"worst_fastest_cpu_step_over_probe\":%.3f,\"goal_ratio\":1.03,"
           "\"max_bytes_per_param\":%.0f,\"goal_bytes\":30}\n",
           n, worst.paired, worst.cpu_paired, worst.ratio, worst.cpu_ratio, max_bytes);
    return 0;
}
