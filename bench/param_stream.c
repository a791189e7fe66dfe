/* bench_param_stream: the step with streamed weights (--offload-params cpu) against the step with
 * resident weights, side by side in one run: two trainers of the same model (gpt2-124m, fp32,
 * micro-batch 4, seq 64, recomputation on in both, no DPU, one rank) step in turn on the same
 * batches, so that a machine loaded by other work slows both alike. Prints one JSON object per
 * mode (median and best ms per step, units fetched per step, device peak bytes) and a last one
 * with the ratio of the medians (goal: <= 1.15).
 * Usage: bench_param_stream [steps] [prefetch_layers] [DIR [bucket_mb [preset [layers]]]]
 * (defaults 6, 1, zoe-train's bucket size, gpt2-124m and its layers; the first step of each is a
 * warm-up and not counted). A bucket is never smaller than the largest tensor (wte), so
 * gpt2-124m has 4 buckets, all of which the state's ring holds: a deep narrow model with small
 * buckets shows what the weights on drives take off the host.
 *
 * With DIR, the weights on drives (docs/nvme.md, "Weights on drives"): both trainers stream and
 * keep the optimizer state on DIR (--offload nvme), one streaming the weights from host memory
 * (--offload-params cpu), the other from DIR (nvme); each line adds its optimizer's footprint
 * (host, pinned and drive bytes), and the last gives the ratio drives to host. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "engine/train/trainer_impl.h" /* zoe_trainer_optimizer, for the footprint */
#include "zoe/train.h"
#include "zoe/zoe.h"

enum { MODES = 2 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_param_stream: %s: %s\n", what, zoe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int steps = argc > 1 ? atoi(argv[1]) : 6, prefetch = argc > 2 ? atoi(argv[2]) : 1;
    const char *drive = argc > 3 ? argv[3] : NULL;
    int bucket_mb = argc > 4 ? atoi(argv[4]) : 0, layers = argc > 6 ? atoi(argv[6]) : 0;
    const char *preset = argc > 5 ? argv[5] : "gpt2-124m";
    if (steps < 2 || prefetch < 0 || bucket_mb < 0) {
        fprintf(stderr, "usage: bench_param_stream [steps >= 2] [prefetch_layers >= 0] [DIR "
                        "[bucket_mb]]\n");
        return 2;
    }
    zoe_trainer *tr[MODES];
    zoe_train_config cfg[MODES];
    for (int m = 0; m < MODES; m++) {
        zoe_train_config *c = &cfg[m];
        zoe_train_config_defaults(c);
        if (zoe_model_preset(preset, &c->model) != ZOE_OK) die("preset");
        if (layers > 0) c->model.layers = layers;
        c->model.seq_len = 64;
        c->micro_batch = 4;
        c->dtype = ZOE_F32;
        c->dpu_warmup = 0;
        c->recompute = 1;
        c->steps = steps;
        c->offload_params = m ? ZOE_OFFLOAD_PARAMS_CPU : ZOE_OFFLOAD_PARAMS_NONE;
        c->prefetch_layers = prefetch;
        if (drive) {
            c->offload = ZOE_OFFLOAD_NVME;
            snprintf(c->nvme_path, sizeof c->nvme_path, "%s", drive);
            c->offload_params = m ? ZOE_OFFLOAD_PARAMS_NVME : ZOE_OFFLOAD_PARAMS_CPU;
            if (bucket_mb) c->bucket_mb = bucket_mb;
        }
        if (zoe_trainer_create(MPI_COMM_WORLD, c, &tr[m]) != ZOE_OK) die("trainer");
    }
    size_t n = (size_t)cfg[0].micro_batch * (size_t)cfg[0].model.seq_len;
    int32_t *tokens = malloc(n * sizeof *tokens), *targets = malloc(n * sizeof *targets);
    double *ms[MODES];
    for (int m = 0; m < MODES; m++) ms[m] = calloc((size_t)steps, sizeof(double));
    if (!tokens || !targets || !ms[0] || !ms[1]) die("buffers");
    srand(1);
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < n; i++) tokens[i] = rand() % cfg[0].model.vocab;
        for (size_t i = 0; i < n; i++) targets[i] = rand() % cfg[0].model.vocab;
        for (int m = 0; m < MODES; m++) {
            double t0 = now();
            if (zoe_trainer_micro_batch(tr[m], tokens, targets, NULL) != ZOE_OK) die("micro-batch");
            if (zoe_trainer_step(tr[m], 1e-4f, NULL) != ZOE_OK) die("step");
            ms[m][s] = 1e3 * (now() - t0);
        }
    }
    const char *names[2][MODES] = {{"resident", "streamed"}, {"streamed", "streamed_from_drives"}};
    double median[MODES];
    for (int m = 0; m < MODES; m++) {
        qsort(ms[m] + 1, (size_t)steps - 1, sizeof(double), by_value); /* step 0: warm-up */
        median[m] = ms[m][1 + (steps - 1) / 2];
        zoe_optimizer_footprint fp;
        if (zoe_optimizer_memory(zoe_trainer_optimizer(tr[m]), &fp) != ZOE_OK) die("footprint");
        printf("{\"bench\":\"param_stream\",\"mode\":\"%s\",\"model\":\"%s\",\"layers\":%d,"
               "\"micro_batch\":4,\"seq_len\":64,\"steps\":%d,\"prefetch_layers\":%d,"
               "\"ms_step_median\":%.1f,\"ms_step_best\":%.1f,\"host_bytes\":%zu,"
               "\"pinned_bytes\":%zu,\"drive_bytes\":%zu}\n",
               names[drive != NULL][m], preset, cfg[m].model.layers, steps - 1, prefetch, median[m],
               ms[m][1], fp.host_bytes, fp.pinned_bytes, fp.drive_bytes);
    }
    if (drive)
        printf("{\"bench\":\"param_stream\",\"ratio_drives_to_host\":%.3f}\n",
               median[1] / median[0]);
    else
        printf("{\"bench\":\"param_stream\",\"ratio_streamed_to_resident\":%.3f,\"goal\":1.15}\n",
               median[1] / median[0]);
    for (int m = 0; m < MODES; m++) {
        if (zoe_trainer_finalize(tr[m]) != ZOE_OK) die("finalize");
        zoe_trainer_destroy(tr[m]);
        free(ms[m]);
    }
    free(tokens), free(targets);
    MPI_Finalize();
    return 0;
}
