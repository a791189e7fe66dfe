/* GPU, end to end: zoe trains on CUDA as it does on the CPU backend. Skipped (exit 77) without a
 * GPU per rank.
 *
 * On one GPU (1 rank): the demo model and a 12-layer model, 20 steps each, ZeRO-Offload on (the
 * optimizer on the host), in bf16 and in fp16 with loss scaling, with DPU off and on (after 5
 * steps), against the CPU backend run of the same configuration on the same batches. The CPU
 * backend has no fp16, so the fp16 runs are compared with its fp32 run. At 4 ranks on 4 GPUs:
 * TP=2 x DP=2, the grid whose two NCCL communicators share each GPU, against the same grid on
 * the CPU backend. With GPUs but fewer than ranks, the trainer must refuse the grid (two ranks
 * on one GPU) with a clear message; the comparison is then skipped. On one GPU, the same run
 * twice must also give the same losses to the bit (offload on, and off: the device Adam).
 *
 * Tolerances on the loss of each step, relative:
 *  - step 0 (the initial weights, no update yet): the same model evaluated by two backends,
 *    differing in summation order and, in 16-bit storage, in where values are rounded (cuBLAS
 *    rounds each matmul output once; attention on the tensor cores rounds P to 16 bits): a
 *    bf16 rounding is 2^-8 = 0.39% relative, and the mean loss over the batch averages those
 *    errors, so 1% for bf16 and 0.3% for fp16 (2^-11 per rounding, against fp32 on the CPU);
 *  - every later step: the runs then follow two trajectories that Adam keeps close but does
 *    not keep equal (its normalised update turns a small gradient difference into a full step
 *    for components near zero), so 5% for bf16 and 3% for fp16, over 20 steps in which the
 *    loss falls by well over 5%: a wrong kernel, a lost gradient bucket or a stale refresh
 *    shows as a far larger gap within a few steps.
 * Both backends must learn (the last loss well below the first), and fp16 at a loss scale of
 * 1024 must skip no step (a skipped update would desynchronise the comparison). The measured
 * worst differences are printed, for tightening these bounds. */
#include <math.h>
#include <stdlib.h>
#include "testing.h"
#include "train_run.h"
#include "zoe/data.h"

enum { STEPS = 20 };

typedef struct shape_case {
    const char *name;
    zoe_model_config model;
} shape_case;

static void compare_runs(const char *what, zoe_dtype dt, const float *gpu, const float *cpu) {
    const double first_tol = dt == ZOE_BF16 ? 1e-2 : 3e-3, later_tol = dt == ZOE_BF16 ? 5e-2 : 3e-2;
    double worst_first = fabs(gpu[0] - cpu[0]) / fabs(cpu[0]), worst = 0;
    for (int s = 1; s < STEPS; s++) worst = fmax(worst, fabs(gpu[s] - cpu[s]) / fabs(cpu[s]));
    CHECK(worst_first <= first_tol, "%s: step 0 loss %.5f on CUDA vs %.5f on CPU (%.2e > %.0e)",
          what, gpu[0], cpu[0], worst_first, first_tol);
    CHECK(worst <= later_tol, "%s: a later loss differs by %.2e relative (> %.0e)", what, worst,
          later_tol);
    CHECK(gpu[STEPS - 1] < 0.9 * gpu[0] && cpu[STEPS - 1] < 0.9 * cpu[0],
          "%s: does not learn: CUDA %.3f -> %.3f, CPU %.3f -> %.3f", what, gpu[0], gpu[STEPS - 1],
          cpu[0], cpu[STEPS - 1]);
    if (test_rank() == 0)
        printf("%-40s loss %.4f -> %.4f (CUDA) %.4f -> %.4f (CPU); worst relative difference "
               "%.2e at step 0, %.2e later\n",
               what, gpu[0], gpu[STEPS - 1], cpu[0], cpu[STEPS - 1], worst_first, worst);
}

static void run_case(const shape_case *sc, int tp, zoe_dtype dt, int dpu, const char *corpus) {
    char what[128];
    snprintf(what, sizeof what, "%s %s TP=%d DPU %s", sc->name, zoe_dtype_name(dt), tp,
             dpu ? "on" : "off");
    train_run r = {.comm = MPI_COMM_WORLD,
                   .model = sc->model,
                   .dtype = dt,
                   .tp = tp,
                   .micro_batch = 4,
                   .steps = STEPS,
                   .dpu_warmup = dpu ? 5 : 0,
                   .loss_scale = 1024,
                   .corpus = corpus};
    float gpu[STEPS], cpu[STEPS];
    int skipped = 0;
    r.backend = ZOE_BACKEND_CUDA;
    if (!CHECK_OK(train_run_losses(&r, gpu, &skipped))) return;
    CHECK(skipped == 0, "%s: %d steps skipped on overflow at loss scale 1024", what, skipped);
    r.backend = ZOE_BACKEND_CPU;
    r.dtype = dt == ZOE_F16 ? ZOE_F32 : dt;
    if (!CHECK_OK(train_run_losses(&r, cpu, NULL))) return;
    compare_runs(what, dt, gpu, cpu);
}

/* Bit-reproducible on the GPU: the same run twice gives the same losses to the bit, with the
 * optimizer on the device (the device Adam over its run table and the fixed-order device norm
 * feed every step) and with ZeRO-Offload. */
static void check_reproducible(const shape_case *sc, zoe_offload_mode offload, zoe_dtype dtype,
                               const char *corpus) {
    train_run r = {.comm = MPI_COMM_WORLD,
                   .model = sc->model,
                   .backend = ZOE_BACKEND_CUDA,
                   .dtype = dtype,
                   .tp = 1,
                   .micro_batch = 4,
                   .steps = 8,
                   .offload = offload,
                   .corpus = corpus};
    float first[8], again[8];
    if (!CHECK_OK(train_run_losses(&r, first, NULL)) ||
        !CHECK_OK(train_run_losses(&r, again, NULL)))
        return;
    CHECK(memcmp(first, again, sizeof first) == 0,
          "%s: two identical CUDA runs (offload %s) give different losses", sc->name,
          offload == ZOE_OFFLOAD_NONE ? "none" : "cpu");
}

/* Two ranks that would share a GPU: the trainer must refuse before NCCL fails. */
static void check_refusal(const char *corpus) {
    zoe_model_config demo;
    CHECK_OK(zoe_model_preset("demo", &demo));
    train_run r = {.comm = MPI_COMM_WORLD,
                   .model = demo,
                   .backend = ZOE_BACKEND_CUDA,
                   .dtype = ZOE_BF16,
                   .tp = 1,
                   .micro_batch = 1,
                   .steps = 1,
                   .corpus = corpus};
    float loss;
    CHECK(train_run_losses(&r, &loss, NULL) == ZOE_ERR_INVALID_ARGUMENT,
          "a grid with two ranks on one GPU is refused");
    CHECK(strstr(zoe_last_error(), "each rank needs its own GPU") != NULL, "message: %s",
          zoe_last_error());
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_cuda CORPUS\n");
        return 2;
    }
    /* Every rank sees the same GPUs (rank 0's first among them), fewer than the ranks. */
    int gpus = zoe_cuda_device_count(), any = 0, same = 0;
    zoe_gpu_info first_gpu = {.bus_id = ""}, rank0_gpu;
    if (gpus > 0) zoe_gpu_info_of(0, &first_gpu);
    rank0_gpu = first_gpu;
    MPI_Bcast(rank0_gpu.bus_id, sizeof rank0_gpu.bus_id, MPI_CHAR, 0, MPI_COMM_WORLD);
    same = strcmp(rank0_gpu.bus_id, first_gpu.bus_id) == 0;
    MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&gpus, &any, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (any > 0 && any < test_world_size() && same) {
        check_refusal(argv[1]);
        int failed = test_failures(), all = 0;
        MPI_Allreduce(&failed, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (all) return test_finish("test_train_cuda");
        if (test_rank() == 0) printf("test_train_cuda: the refusal is right; ");
    }
    if (test_skip_without_gpus("test_train_cuda")) return 77;
    shape_case demo = {.name = "demo"}, deep = {.name = "12 layers x 256"};
    CHECK_OK(zoe_model_preset("demo", &demo.model));
    deep.model = (zoe_model_config){.name = "deep",
                                    .layers = 12,
                                    .hidden = 256,
                                    .heads = 4,
                                    .seq_len = 128,
                                    .vocab = ZOE_BYTE_VOCAB_SIZE};
    const int world = test_world_size(), tp = world >= 4 ? 2 : 1;
    /* bf16 where the GPU has bf16 tensor cores (the trainer refuses it on a V100) */
    zoe_gpu_choice gpu;
    zoe_gpu_spec spec;
    CHECK_OK(zoe_gpu_choose(MPI_COMM_WORLD, &gpu));
    zoe_gpu_spec_of(gpu.weakest.capability, gpu.weakest.name, &spec);
    if (world == 1) {
        check_reproducible(&demo, ZOE_OFFLOAD_NONE, zoe_gpu_default_dtype(&spec), argv[1]);
        check_reproducible(&demo, ZOE_OFFLOAD_CPU, zoe_gpu_default_dtype(&spec), argv[1]);
    }
    const zoe_dtype dts[] = {ZOE_F16, ZOE_BF16};
    for (int d = 0; d < (spec.has_bf16 ? 2 : 1); d++)
        for (int dpu = 0; dpu < 2; dpu++) {
            run_case(&demo, tp, dts[d], dpu, argv[1]);
            if (world == 1) run_case(&deep, tp, dts[d], dpu, argv[1]);
        }
    return test_finish("test_train_cuda");
}
