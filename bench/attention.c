/* bench_attention: Llama's grouped-query attention on the tensor cores against the fp32 flash
 * kernels (CUDA cores), forward + backward, in one process on one GPU (scripts/gpu-check prints
 * the ratio in its table). The shape is one TP rank's share of a preset (default llama-3-70b at
 * TP = 8: 8 query heads, 1 KV head, head size 128) at micro-batch 1; both paths run the same
 * inputs in turn, REPS times each, alternating, and the median of each counts. The 16-bit dtype
 * is bf16 where the GPU has bf16 tensor cores, else fp16. On the CPU backend both settings run
 * the same CPU kernel (a smoke test of the bench; use a small --seq). One JSON object per line,
 * the last a summary. Usage: bench_attention [--backend cuda|cpu] [--model NAME] [--tp N]
 * [--seq T] [--reps R]   (defaults: cuda, llama-3-70b, 8, 4096, 5) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/kernels.h"
#include "runtime/error.h"
#include "zoe/gpu.h"
#include "zoe/zoe.h"

typedef struct shape {
    int64_t B, T, NH, NKV, HS;
} shape;

/* Device buffers of one attention call, filled once from a seeded draw. */
typedef struct buffers {
    void *q, *kv, *out, *dout, *dq, *dkv;
    float *lse;
} buffers;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static zoe_status fill(zoe_device *dev, zoe_stream *s, zoe_dtype dt, size_t n, unsigned seed,
                       void **out) {
    float *host = malloc(n * sizeof(float));
    void *packed = malloc(n * zoe_dtype_size(dt));
    zoe_status st = host && packed ? ZOE_OK : ZOE_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; st == ZOE_OK && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        host[i] = (float)((double)(seed >> 8) / 16777216.0 - 0.5);
    }
    if (st == ZOE_OK) st = zoe_convert(packed, dt, host, ZOE_F32, n);
    if (st == ZOE_OK) st = zoe_device_alloc(dev, n * zoe_dtype_size(dt), out);
    if (st == ZOE_OK)
        st = zoe_memcpy_async(*out, packed, n * zoe_dtype_size(dt), ZOE_COPY_HOST_TO_DEVICE, s);
    if (st == ZOE_OK) st = zoe_stream_synchronize(s);
    free(host), free(packed);
    return st;
}

/* Seconds of one forward + backward with kernels k. */
static zoe_status step_seconds(zoe_kernels *k, zoe_stream *s, zoe_dtype dt, const shape *x,
                               const buffers *b, double *out) {
    double t0 = now();
    ZOE_TRY(zoe_attention_gqa_forward(k, dt, b->out, b->lse, b->q, b->kv, x->B, x->T, x->NH, x->NKV,
                                      x->HS));
    ZOE_TRY(zoe_attention_gqa_backward(k, dt, b->dq, b->dkv, b->dout, b->q, b->kv, b->out, b->lse,
                                       x->B, x->T, x->NH, x->NKV, x->HS));
    ZOE_TRY(zoe_stream_synchronize(s));
    *out = now() - t0;
    return ZOE_OK;
}

int main(int argc, char **argv) {
    zoe_backend backend = ZOE_BACKEND_CUDA;
    const char *model = "llama-3-70b";
    int tp = 8, reps = 5;
    int64_t seq = 4096;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v)
            backend = !strcmp(v, "cpu") ? ZOE_BACKEND_CPU : ZOE_BACKEND_CUDA, i++;
        else if (!strcmp(a, "--model") && v)
            model = v, i++;
        else if (!strcmp(a, "--tp") && v)
            tp = atoi(v), i++;
        else if (!strcmp(a, "--seq") && v)
            seq = atoll(v), i++;
        else if (!strcmp(a, "--reps") && v)
            reps = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bench_attention [--backend cuda|cpu] [--model NAME] [--tp N] "
                            "[--seq T] [--reps R]\n");
            return 2;
        }
    }
    zoe_model_config m;
    if (zoe_model_preset(model, &m) != ZOE_OK || tp < 1 || seq < 1 || reps < 1 || reps > 99) {
        fprintf(stderr, "bench_attention: %s\n",
                tp < 1 || seq < 1 || reps < 1 || reps > 99 ? "--tp, --seq and --reps must be "
                                                             "positive (--reps at most 99)"
                                                           : zoe_last_error());
        return 2;
    }
    int64_t kv = m.kv_heads ? m.kv_heads : m.heads;
    if (m.heads % tp || (kv % tp && tp % kv)) {
        fprintf(stderr, "bench_attention: --tp=%d does not split %s's %d heads, %lld KV heads\n",
                tp, model, m.heads, (long long)kv);
        return 2;
    }
    /* KV heads fewer than TP ranks are replicated, one per rank (tensor_parallel/). */
    shape x = {.B = 1,
               .T = seq,
               .NH = m.heads / tp,
               .NKV = kv >= tp ? kv / tp : 1,
               .HS = m.hidden / m.heads};
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    zoe_status st = zoe_device_create(backend, 0, &dev);
    if (st == ZOE_OK) st = zoe_stream_create(dev, &s);
    zoe_dtype dt = ZOE_BF16;
    char gpu[288] = "cpu";
    if (st == ZOE_OK && backend == ZOE_BACKEND_CUDA) {
        zoe_gpu_info info;
        st = zoe_gpu_info_of(0, &info);
        zoe_gpu_spec spec;
        if (st == ZOE_OK) {
            zoe_gpu_spec_of(info.capability, info.name, &spec);
            dt = zoe_gpu_default_dtype(&spec);
            snprintf(gpu, sizeof gpu, "%s sm_%d", info.name, info.capability);
        }
    }
    zoe_kernels *k[2] = {NULL, NULL}; /* [0] tensor cores where the plan takes them, [1] flash */
    for (int f = 0; st == ZOE_OK && f < 2; f++) {
        zoe_kernel_plan plan = {.max_rows = x.B * x.T,
                                .max_dim = (x.NH + 2 * x.NKV) * x.HS,
                                .max_seq = x.T,
                                .max_heads = x.NH,
                                .max_head_dim = x.HS,
                                .attention_flash = f};
        st = zoe_kernels_create(dev, s, &plan, &k[f]);
    }
    buffers b = {0};
    size_t nq = (size_t)(x.B * x.T * x.NH * x.HS), nkv = (size_t)(x.B * x.T * x.NKV * 2 * x.HS);
    if (st == ZOE_OK) st = fill(dev, s, dt, nq, 1, &b.q);
    if (st == ZOE_OK) st = fill(dev, s, dt, nkv, 2, &b.kv);
    if (st == ZOE_OK) st = fill(dev, s, dt, nq, 3, &b.dout);
    if (st == ZOE_OK) st = fill(dev, s, dt, nq, 4, &b.out);
    if (st == ZOE_OK) st = fill(dev, s, dt, nq, 5, &b.dq);
    if (st == ZOE_OK) st = fill(dev, s, dt, nkv, 6, &b.dkv);
    if (st == ZOE_OK)
        st = zoe_device_alloc(dev, (size_t)(x.B * x.NH * x.T) * sizeof(float), (void **)&b.lse);
    double secs[2][100], warm;
    for (int f = 0; st == ZOE_OK && f < 2; f++) st = step_seconds(k[f], s, dt, &x, &b, &warm);
    for (int r = 0; st == ZOE_OK && r < reps; r++)
        for (int j = 0; st == ZOE_OK && j < 2; j++) {
            int f = r % 2 ? 1 - j : j; /* alternate which goes first */
            st = step_seconds(k[f], s, dt, &x, &b, &secs[f][r]);
        }
    if (st != ZOE_OK) {
        fprintf(stderr, "bench_attention: %s\n", zoe_last_error());
    } else {
        /* causal: half the T x T scores; QK^T and PV forward, four products backward */
        double flops =
            4.0 * 3.0 * (double)x.B * (double)x.NH * (double)x.T * (double)x.T * (double)x.HS / 2.0;
        double med[2];
        const char *names[2] = {"tensor_cores", "flash_fp32"};
        for (int f = 0; f < 2; f++) {
            qsort(secs[f], (size_t)reps, sizeof(double), cmp_double);
            med[f] = secs[f][reps / 2];
            printf("{\"bench\":\"attention\",\"path\":\"%s\",\"gpu\":\"%s\",\"model\":\"%s\","
                   "\"tp\":%d,\"dtype\":\"%s\",\"seq\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
                   "\"head_dim\":%lld,\"ms\":%.3f,\"tflops\":%.2f}\n",
                   names[f], gpu, model, tp, zoe_dtype_name(dt), (long long)x.T, (long long)x.NH,
                   (long long)x.NKV, (long long)x.HS, 1e3 * med[f], flops / med[f] / 1e12);
        }
        printf("{\"bench\":\"attention\",\"summary\":true,\"gpu\":\"%s\",\"flash_over_tensor_"
               "cores\":%.2f}\n",
               gpu, med[1] / med[0]);
    }
    void *bufs[] = {b.q, b.kv, b.out, b.dout, b.dq, b.dkv, b.lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) zoe_device_free(dev, bufs[i]);
    zoe_kernels_destroy(k[0]);
    zoe_kernels_destroy(k[1]);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    return st == ZOE_OK ? 0 : 1;
}
