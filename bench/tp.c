/* One tensor-parallel transformer layer, forward + backward, at GPT-2-124M width (hidden 768,
 * 12 heads, ffn 3072, fp32), on the ranks of MPI_COMM_WORLD as one TP group. bench/tp.sh runs
 * it as 1 rank x 2 threads and as 2 ranks x 1 thread (TP=2) and adds the summary line.
 *
 * Prints one JSON object (rank 0): median times of forward, backward and the layer, the bytes
 * the layer handed to collectives against the formula (2 all-reduces of B*T*hidden each way),
 * and the collective share: the median time of the same 4 all-reduces issued alone, over the
 * layer time (on the CPU backend a collective blocks, so this is its cost without overlap).
 * Usage: bench_tp [--batch B] [--seq T] [--iters N] [--label NAME] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor_parallel/block.h"
#include "bench/bench_util.h"
#include "zoe/zoe.h"

static void *alloc_random(zoe_device *dev, size_t n, unsigned seed) {
    float *p = NULL;
    DIE_IF(zoe_device_alloc(dev, n * sizeof(float), (void **)&p));
    /* CPU backend: device memory is host memory */
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((seed = seed * 1103515245u + 12345u) >> 9) * 0x1p-23f - 0.5f;
    return p;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int64_t B = 2, T = 128;
    int iters = 5;
    const char *label = "run";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch"))
            B = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq"))
            T = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--label"))
            label = argv[i + 1];
    }
    if (iters < 1 || iters > 1000) iters = 5;
    zoe_device *dev;
    zoe_stream *stream;
    zoe_comm *comm;
    zoe_kernels *kernels;
    zoe_tp tp;
    zoe_tp_block blk;
    DIE_IF(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    DIE_IF(zoe_stream_create(dev, &stream));
    DIE_IF(zoe_comm_create_mpi(MPI_COMM_WORLD, &comm));
    int t = zoe_comm_size(comm), rank = zoe_comm_rank(comm);
    zoe_tp_block_config cfg = {
        .hidden = 768, .heads = 12, .ffn = 3072, .init_std = 0.02f, .proj_init_std = 0.02f / 4.9f};
    DIE_IF(zoe_tp_block_init(&blk, "h.0.", &cfg, t, rank));
    zoe_kernel_plan plan = {0};
    zoe_tp_block_plan(&blk, B, T, &plan);
    DIE_IF(zoe_kernels_create(dev, stream, &plan, &kernels));
    DIE_IF(zoe_tp_init(&tp, kernels, comm, ZOE_F32, 1234));

    zoe_tp_param *params[ZOE_TP_BLOCK_PARAMS];
    int np = zoe_tp_block_params(&blk, params);
    int64_t numel = zoe_tp_params_bind_flat(params, np, ZOE_F32, NULL, NULL);
    void *w, *g, *acts_buf, *scratch;
    DIE_IF(zoe_device_alloc(dev, (size_t)numel * 4, &w));
    DIE_IF(zoe_device_alloc(dev, (size_t)numel * 4, &g));
    DIE_IF(zoe_memset_async(g, 0, (size_t)numel * 4, stream));
    zoe_tp_params_bind_flat(params, np, ZOE_F32, w, g);
    for (int i = 0; i < np; i++) DIE_IF(zoe_tp_param_init(&tp, params[i]));
    size_t act_bytes = zoe_tp_block_acts_bytes(&blk, B, T, ZOE_F32);
    size_t scratch_bytes = zoe_tp_block_scratch_bytes(&blk, B, T, ZOE_F32);
    DIE_IF(zoe_device_alloc(dev, act_bytes, &acts_buf));
    DIE_IF(zoe_device_alloc(dev, scratch_bytes, &scratch));
    zoe_tp_block_acts acts;
    DIE_IF(zoe_tp_block_acts_bind(&blk, &acts, acts_buf, B, T, ZOE_F32));
    size_t nc = (size_t)(B * T * cfg.hidden);
    void *x = alloc_random(dev, nc, 1), *y = alloc_random(dev, nc, 2),
         *dres = alloc_random(dev, nc, 3);
    void *dout = alloc_random(dev, nc, 3); /* backward turns dres into d(x): restart from dout */

    double *fwd = malloc((size_t)iters * 8), *bwd = malloc((size_t)iters * 8);
    double *layer = malloc((size_t)iters * 8), *coll = malloc((size_t)iters * 8);
    for (int it = -1; it < iters; it++) { /* it == -1: warm-up */
        DIE_IF(zoe_memcpy_async(dres, dout, nc * 4, ZOE_COPY_DEVICE_TO_DEVICE, stream));
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        DIE_IF(zoe_tp_block_forward(&tp, &blk, &acts, y, x, (uint64_t)it, NULL));
        double t1 = MPI_Wtime();
        DIE_IF(zoe_tp_block_backward(&tp, &blk, &acts, dres, x, scratch, NULL));
        double t2 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double t3 = MPI_Wtime();
        for (int c = 0; c < 4; c++) DIE_IF(zoe_tp_all_reduce(&tp, y, y, (int64_t)nc, NULL));
        double t4 = MPI_Wtime();
        if (it >= 0) fwd[it] = t1 - t0, bwd[it] = t2 - t1, layer[it] = t2 - t0, coll[it] = t4 - t3;
    }
    /* the slowest rank decides */
    MPI_Allreduce(MPI_IN_PLACE, fwd, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, bwd, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, layer, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, coll, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double f = bench_median(fwd, iters), b = bench_median(bwd, iters),
           l = bench_median(layer, iters), c = bench_median(coll, iters);
    uint64_t formula = zoe_tp_block_comm_bytes_formula(&blk, B, T, ZOE_F32, t);
    const char *threads = getenv("OMP_NUM_THREADS");
    if (rank == 0)
        printf("{\"bench\":\"tp\",\"config\":\"%s\",\"ranks\":%d,\"threads\":%s,\"tp\":%d,"
               "\"hidden\":768,\"heads\":12,\"ffn\":3072,\"batch\":%lld,\"seq\":%lld,"
               "\"tokens\":%lld,\"dtype\":\"fp32\",\"iters\":%d,\"forward_s\":%.6f,"
               "\"backward_s\":%.6f,\"layer_s\":%.6f,\"bytes_forward\":%llu,"
               "\"bytes_backward\":%llu,\"bytes_formula_each_way\":%llu,\"allreduce_s\":%.6f,"
               "\"collective_share\":%.4f,\"tokens_per_s\":%.1f}\n",
               label, t, threads ? threads : "null", t, (long long)B, (long long)T,
               (long long)(B * T), iters, f, b, l, (unsigned long long)blk.traffic.forward,
               (unsigned long long)blk.traffic.backward, (unsigned long long)formula, c, c / l,
               (double)(B * T) / l);
    free(fwd), free(bwd), free(layer), free(coll);
    void *bufs[] = {w, g, acts_buf, scratch, x, y, dres, dout};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zoe_device_free(dev, bufs[i]);
    zoe_kernels_destroy(kernels);
    zoe_comm_destroy(comm);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    MPI_Finalize();
    return 0;
}
