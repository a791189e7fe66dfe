/* The plan against measurement on the CPU backend: a real run's peak resident memory (VmHWM,
 * summed over the ranks) is within 10% of the plan's host total, and each rank's device-layer
 * peak allocation within 5% of the plan's device total. One configuration per process (VmHWM is the
 * process's peak), given on the command line: test_plan_memory MODEL LAYERS SEQ MICRO_BATCH DTYPE
 * DPU TP [HOST_TOLERANCE] (LAYERS 0: the preset's; HOST_TOLERANCE the peak RSS's, 0.10 unless
 * given). Random tokens; three steps, so that under DPU (warm-up 1) an update runs overlapped and
 * the second gradient buffer is in use. The rank's memory before the trainer is created is the
 * plan's rank base (measured, as zoe-train does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/train/trainer_impl.h"
#include "runtime/proc_file.h"
#include "testing.h"
#include "zoe/plan.h"
#include "zoe/train.h"

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK(argc == 8 || argc == 9, "usage: %s MODEL LAYERS SEQ MICRO_BATCH DTYPE DPU TP [TOL]",
          argv[0]);
    if (argc != 8 && argc != 9) return test_finish("test_plan_memory");
    const double host_tol = argc == 9 ? atof(argv[8]) : 0.10;
    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    CHECK_OK(zoe_model_preset(argv[1], &cfg.model));
    if (atoi(argv[2]) > 0) cfg.model.layers = atoi(argv[2]);
    cfg.model.seq_len = atoi(argv[3]);
    cfg.micro_batch = atoi(argv[4]);
    CHECK_OK(zoe_dtype_parse(argv[5], &cfg.dtype));
    cfg.dpu_warmup = atoi(argv[6]) ? 1 : 0;
    cfg.tp = atoi(argv[7]);
    cfg.steps = 3;
    int world = test_world_size();

    zoe_hardware hw;
    CHECK_OK(zoe_hardware_local(0, &hw));
    CHECK_OK(zoe_hardware_measure_rank_base(&hw));
    zoe_plan_config pc;
    CHECK_OK(zoe_plan_config_from_train(&cfg, world, &hw, &pc));
    zoe_plan_result plan;
    CHECK_OK(zoe_plan(&pc, &plan));

    zoe_trainer *tr = NULL;
    CHECK_OK(zoe_trainer_create(MPI_COMM_WORLD, &cfg, &tr));
    size_t n = (size_t)cfg.micro_batch * (size_t)cfg.model.seq_len;
    int32_t *tokens = malloc(n * sizeof *tokens), *targets = malloc(n * sizeof *targets);
    test_rng rng;
    test_rng_seed(&rng, 1000 + (uint64_t)test_rank());
    for (int step = 0; tr && step < cfg.steps; step++) {
        for (size_t i = 0; i < n; i++) {
            tokens[i] = (int32_t)test_rng_int(&rng, 0, cfg.model.vocab - 1);
            targets[i] = (int32_t)test_rng_int(&rng, 0, cfg.model.vocab - 1);
        }
        CHECK_OK(zoe_trainer_micro_batch(tr, tokens, targets, NULL));
        CHECK_OK(zoe_trainer_step(tr, 1e-3f, NULL));
    }
    if (tr) CHECK_OK(zoe_trainer_flush(tr));
    zoe_memory_stats ms = {0};
    if (tr) CHECK_OK(zoe_device_memory_stats(zoe_trainer_device(tr), &ms));
    double hwm = zoe_proc_kib("/proc/self/status", "VmHWM") * 1024.0, hwm_total = hwm;
    MPI_Allreduce(MPI_IN_PLACE, &hwm_total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double host_err = (hwm_total - plan.host.total) / plan.host.total;
    double dev_err = ((double)ms.device_peak - plan.gpu.total) / plan.gpu.total;
    printf("rank %d: %s (%d layers, seq %d, micro-batch %d, %s, DPU %s) TP %d x DP %d: peak RSS "
           "%.1f MiB (plan: up to %.1f; base %.1f), all ranks %.1f MiB vs plan %.1f MiB "
           "(%+.1f%%); device peak %.1f MiB vs plan %.1f MiB (%+.1f%%)\n",
           test_rank(), cfg.model.name, cfg.model.layers, cfg.model.seq_len, cfg.micro_batch,
           zoe_dtype_name(cfg.dtype), cfg.dpu_warmup ? "on" : "off", cfg.tp, world / cfg.tp,
           hwm / 1048576, plan.host.per_rank / 1048576, hw.rank_base_bytes / 1048576,
           hwm_total / 1048576, plan.host.total / 1048576, 100 * host_err,
           (double)ms.device_peak / 1048576, plan.gpu.total / 1048576, 100 * dev_err);
    CHECK(host_err >= -host_tol && host_err <= host_tol, "peak RSS %+.1f%% off the plan",
          100 * host_err);
    CHECK(hwm <= (1 + host_tol) * plan.host.per_rank,
          "rank %d's peak RSS above the plan's fullest rank", test_rank());
    CHECK(dev_err >= -0.05 && dev_err <= 0.05, "device peak %+.1f%% off the plan", 100 * dev_err);
    free(tokens), free(targets);
    zoe_trainer_destroy(tr);
    return test_finish("test_plan_memory");
}
