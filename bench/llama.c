/* One Llama-3-8B-shaped layer (hidden 4096, 32 heads over 8 KV heads, SwiGLU width 14336) beside
 * the GPT layer of the same hidden size (32 heads, MLP 4 x 4096), forward + backward at B x T
 * tokens (default 1 x 256), fp32, TP=1 on this process's threads. The layers run one after the
 * other, each with its own weights (one layer's memory at a time).
 *
 * Prints one JSON object per layer (median times over the iterations, the share of the kernel
 * time spent in matmuls, the matmul FLOPs of a forward + backward) and a summary: the Llama
 * layer's time over the GPT layer's against the ratio of their FLOPs (matmuls and attention),
 * the goal being a time ratio no larger than the FLOP ratio, and matmuls >= 80% of each layer.
 * Usage: bench_llama [--batch B] [--seq T] [--iters N] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor_parallel/block.h"
#include "tensor_parallel/llama_block.h"
#include "bench/bench_util.h"
#include "zoe/zoe.h"

enum { HIDDEN = 4096, HEADS = 32, KV_HEADS = 8, LLAMA_FFN = 14336, GPT_FFN = 4 * HIDDEN };

static void fill_random(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((seed = seed * 1103515245u + 12345u) >> 9) * 0x1p-23f - 0.5f;
}

/* One layer of either family, its parameters, activations and scratch. */
typedef struct layer {
    int llama;
    zoe_tp_block gpt;
    zoe_tp_llama_block lb;
    zoe_tp_block_acts gpt_acts;
    zoe_tp_llama_block_acts llama_acts;
    zoe_tp_param *params[ZOE_TP_BLOCK_PARAMS];
    int np;
    float inv_freq[HIDDEN / HEADS / 2];
} layer;

/* Matmul FLOPs of a forward + backward (3 x the forward's 2 M K N per linear), and the
 * attention's score and value products (causal: half of 4 T^2 HS per head, times 3). */
static double layer_flops(int llama, int64_t B, int64_t T) {
    const double C = HIDDEN, N = (double)(B * T), HS = (double)HIDDEN / HEADS;
    const double weights = llama ? C * C + C * 2.0 * KV_HEADS * HS + C * C + 3.0 * C * LLAMA_FFN
                                 : 3.0 * C * C + C * C + 2.0 * C * GPT_FFN;
    const double attention = (double)B * HEADS * 2.0 * (double)T * (double)T * HS;
    return 3.0 * (2.0 * N * weights + attention);
}

static void run(int llama, int64_t B, int64_t T, int iters, double *layer_s) {
    zoe_device *dev;
    zoe_stream *stream;
    zoe_comm *comm;
    zoe_kernels *k;
    zoe_tp tp;
    layer L = {.llama = llama};
    DIE_IF(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    DIE_IF(zoe_stream_create(dev, &stream));
    DIE_IF(zoe_comm_create_mpi(MPI_COMM_SELF, &comm));
    zoe_kernel_plan plan = {0};
    if (llama) {
        zoe_tp_llama_block_config c = {.hidden = HIDDEN,
                                       .heads = HEADS,
                                       .kv_heads = KV_HEADS,
                                       .ffn = LLAMA_FFN,
                                       .norm_eps = 1e-5f,
                                       .init_std = 0.02f,
                                       .proj_init_std = 0.02f};
        DIE_IF(zoe_tp_llama_block_init(&L.lb, "h.0.", &c, 1, 0));
        zoe_tp_llama_block_plan(&L.lb, B, T, &plan);
        L.np = zoe_tp_llama_block_params(&L.lb, L.params);
        for (int i = 0; i < HIDDEN / HEADS / 2; i++) L.inv_freq[i] = 1.0f / (float)(i + 1);
        zoe_tp_llama_block_bind_context(&L.lb, L.inv_freq, NULL); /* CPU: host memory */
    } else {
        zoe_tp_block_config c = {.hidden = HIDDEN,
                                 .heads = HEADS,
                                 .ffn = GPT_FFN,
                                 .init_std = 0.02f,
                                 .proj_init_std = 0.02f};
        DIE_IF(zoe_tp_block_init(&L.gpt, "h.0.", &c, 1, 0));
        zoe_tp_block_plan(&L.gpt, B, T, &plan);
        L.np = zoe_tp_block_params(&L.gpt, L.params);
    }
    DIE_IF(zoe_kernels_create(dev, stream, &plan, &k));
    DIE_IF(zoe_tp_init(&tp, k, comm, ZOE_F32, 1234));
    const int64_t numel = zoe_tp_params_bind_flat(L.params, L.np, ZOE_F32, NULL, NULL);
    void *w, *g, *acts, *scratch;
    DIE_IF(zoe_device_alloc(dev, (size_t)numel * 4, &w));
    DIE_IF(zoe_device_alloc(dev, (size_t)numel * 4, &g));
    fill_random(w, (size_t)numel, 7); /* values do not change the time; Philox would take long */
    for (int64_t i = 0; i < numel; i++) ((float *)w)[i] *= 0.04f;
    DIE_IF(zoe_memset_async(g, 0, (size_t)numel * 4, stream));
    zoe_tp_params_bind_flat(L.params, L.np, ZOE_F32, w, g);
    const size_t act_bytes = llama ? zoe_tp_llama_block_acts_bytes(&L.lb, B, T, ZOE_F32)
                                   : zoe_tp_block_acts_bytes(&L.gpt, B, T, ZOE_F32);
    const size_t scratch_bytes = llama ? zoe_tp_llama_block_scratch_bytes(&L.lb, B, T, ZOE_F32)
                                       : zoe_tp_block_scratch_bytes(&L.gpt, B, T, ZOE_F32);
    DIE_IF(zoe_device_alloc(dev, act_bytes, &acts));
    DIE_IF(zoe_device_alloc(dev, scratch_bytes, &scratch));
    if (llama)
        DIE_IF(zoe_tp_llama_block_acts_bind(&L.lb, &L.llama_acts, acts, B, T, ZOE_F32));
    else
        DIE_IF(zoe_tp_block_acts_bind(&L.gpt, &L.gpt_acts, acts, B, T, ZOE_F32));
    const size_t nc = (size_t)(B * T * HIDDEN);
    float *x = malloc(nc * 4), *y = malloc(nc * 4), *dres = malloc(nc * 4), *dout = malloc(nc * 4);
    fill_random(x, nc, 1), fill_random(dout, nc, 3);
    double *fwd = malloc((size_t)iters * 8), *bwd = malloc((size_t)iters * 8);
    double *tot = malloc((size_t)iters * 8), mm = 0, all = 0;
    for (int it = -1; it < iters; it++) { /* it == -1: warm-up */
        memcpy(dres, dout, nc * 4);
        if (it == 0) zoe_kernels_profile_reset(k);
        const double t0 = MPI_Wtime();
        if (llama)
            DIE_IF(zoe_tp_llama_block_forward(&tp, &L.lb, &L.llama_acts, y, x, NULL));
        else
            DIE_IF(zoe_tp_block_forward(&tp, &L.gpt, &L.gpt_acts, y, x, 1, NULL));
        const double t1 = MPI_Wtime();
        if (llama)
            DIE_IF(zoe_tp_llama_block_backward(&tp, &L.lb, &L.llama_acts, dres, x, scratch, NULL));
        else
            DIE_IF(zoe_tp_block_backward(&tp, &L.gpt, &L.gpt_acts, dres, x, scratch, NULL));
        const double t2 = MPI_Wtime();
        if (it >= 0) fwd[it] = t1 - t0, bwd[it] = t2 - t1, tot[it] = t2 - t0;
    }
    zoe_kernel_profile prof;
    zoe_kernels_profile(k, &prof);
    for (int op = 0; op < ZOE_KOP_COUNT; op++) all += prof.seconds[op];
    mm = prof.seconds[ZOE_KOP_matmul_forward] + prof.seconds[ZOE_KOP_matmul_backward];
    const double f = bench_median(fwd, iters), b = bench_median(bwd, iters),
                 l = bench_median(tot, iters);
    const double flops = layer_flops(llama, B, T);
    printf("{\"bench\":\"llama\",\"layer\":\"%s\",\"hidden\":%d,\"heads\":%d,\"kv_heads\":%d,"
           "\"ffn\":%d,\"tokens\":%lld,\"dtype\":\"fp32\",\"iters\":%d,\"forward_s\":%.4f,"
           "\"backward_s\":%.4f,\"layer_s\":%.4f,\"gflop\":%.1f,\"gflops\":%.1f,"
           "\"matmul_share\":%.3f}\n",
           llama ? "llama" : "gpt", HIDDEN, HEADS, llama ? KV_HEADS : HEADS,
           llama ? LLAMA_FFN : GPT_FFN, (long long)(B * T), iters, f, b, l, flops / 1e9,
           flops / 1e9 / l, all > 0 ? mm / all : 0.0);
    fflush(stdout);
    *layer_s = l;
    free(fwd), free(bwd), free(tot), free(x), free(y), free(dres), free(dout);
    void *bufs[] = {w, g, acts, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zoe_device_free(dev, bufs[i]);
    zoe_kernels_destroy(k);
    zoe_comm_destroy(comm);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int64_t B = 1, T = 256;
    int iters = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            B = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq"))
            T = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
    }
    if (iters < 1 || iters > 100) iters = 3;
    double gpt_s, llama_s;
    run(0, B, T, iters, &gpt_s);
    run(1, B, T, iters, &llama_s);
    const double flop_ratio = layer_flops(1, B, T) / layer_flops(0, B, T);
    printf("{\"bench\":\"llama\",\"summary\":true,\"time_ratio_llama_over_gpt\":%.3f,"
           "\"flop_ratio_llama_over_gpt\":%.3f,\"excess_over_flops\":%.3f}\n",
           llama_s / gpt_s, flop_ratio, llama_s / gpt_s / flop_ratio);
    MPI_Finalize();
    return 0;
}
