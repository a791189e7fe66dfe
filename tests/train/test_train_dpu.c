/* The trainer with the delayed parameter update (DPU) follows the documented schedule
 * (include/zoe/optimizer.h) on the real model: iteration i reads w_{i-1} for i <= N + 1 and
 * w_{i-2} afterwards, and step i applies the gradient of iteration i to w_{i-1}.
 *
 * Three trainers of the same small GPT see the same batches (demo corpus, DP = world size):
 *  - dpu: dpu_warmup = N, driven like zoe-train;
 *  - reference: no DPU, but before each iteration i >= N + 2 its master weights are set to
 *    w_{i-2} (kept from two steps back) and the parameters refreshed, and after backward the
 *    master weights are put back to w_{i-1} before the synchronous step: the documented
 *    schedule built from the public optimizer calls only, with no worker thread and no
 *    second gradient buffer;
 *  - sync: no DPU, undriven.
 * Checked: the loss of every step and the final master weights (after flush) of dpu equal
 * those of the reference; the first N + 1 losses of all three are equal; and the reference
 * differs from sync by far more than the tolerance, so the comparison can tell a one-step
 * stale run from a synchronous one (or from one that is stale by another amount).
 *
 * The same for the weight prediction (ZOE_DPU_PREDICT): the reference's
 * iteration i >= N + 3 reads the prediction made after step i - 2 from that step's master and
 * moments (read back from the optimizer) with the optimizer's prediction kernel, per tensor with
 * its own weight decay, and iteration N + 2 reads w_N. (The delay compensation changes the
 * gradient inside the optimizer, which a reference of public calls cannot reach; its float64
 * reference is in test_optimizer_dpu.)
 *
 * The exact schedule (ZOE_DPU_EXACT, zoe-train's default) is not stale at all: its trainer is
 * compared with sync directly, without gradient clipping so that the speculation holds at every
 * step (a step that clips for certain is not speculated on; test_optimizer_exact covers that).
 * Checked: no step is redone and every loss and the final master weights equal sync's bit for
 * bit (so the model reads no weight after marking its gradient ready, and a bucket is handed
 * over only when final). Driven with 1.1x the schedule's lr, every step after the warm-up is
 * redone on every rank (so the trainer did speculate), the losses up to the first redo are
 * equal and every loss is within 1e-5 relative of sync's at that lr: a redo is within a few
 * ulps (the undo solves the fused step back in float64), which this lr (3e-3 without clipping,
 * where this small model's loss spikes) amplifies over the run (measured: the weights end up to
 * 1e-2 apart after 35 redone steps of a 40-step run), so the weights are not compared there, and
 * the losses only up to 5 steps after the first redo (10 were too many: on a Zen 4 CPU, whose BLAS
 * kernels round otherwise, the clipped TP=2 run's loss 9 steps after its first redo was 1.5e-5
 * apart; 5 steps after, every run measured is within 1e-5). With clipping at 1 (where these steps
 * clip) and TP where the world allows (each TP rank then sees half the norm and speculates
 * further): the same.
 *
 * Tolerance: fp32 throughout, and dpu and reference run the same kernels on the same weights
 * and batches in the same order, so they should agree to the last bit; we allow 1e-5
 * relative on the loss and 1e-5 absolute on weights of magnitude <= ~0.1 (a few hundred ulps),
 * while the stale-vs-sync gap is several percent of the loss. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config/sizing.h"
#include "engine/train/trainer_impl.h"
#include "kernels/adam.h"
#include "runtime/error.h"
#include "testing.h"
#include "zoe/data.h"
#include "zoe/train.h"

/* 20 steps: 15 stale ones after the warm-up, enough for the reference to learn (its loss falls
 * from about 5.55 to between 3.2 and 4.7 in every case at 1 and 2 ranks) and for stale and sync
 * to part by far more than the tolerance (6e-1 and more relative); 40 steps took twice the time
 * and checked nothing more (docs/testing.md: a test within a third of its timeout). */
enum { STEPS = 20, WARMUP = 5 };

typedef enum { RUN_DPU, RUN_REFERENCE, RUN_SYNC } run_kind;

/* A grid and an optimizer setup to check the schedule on. */
typedef struct dpu_case {
    int tp;
    zoe_offload_mode offload; /* CPU: host Adam on the worker; NONE: the device Adam there */
    int hidden;
    int64_t bucket_mb; /* 1 with hidden 128: the gradients span several buckets of the ring */
    zoe_dpu_schedule schedule;
    float lr_factor; /* the steps take this times the schedule's lr (0: 1) */
    int no_clip;     /* 1: no gradient clipping */
} dpu_case;

typedef struct trajectory {
    float loss[STEPS];
    int redone[STEPS];
    float *master; /* this rank's partition after the last step */
    size_t numel;
} trajectory;

static void config(zoe_train_config *c, const dpu_case *k, int dpu_warmup) {
    zoe_train_config_defaults(c);
    c->model = (zoe_model_config){.name = "test",
                                  .layers = 2,
                                  .hidden = k->hidden,
                                  .heads = 4,
                                  .seq_len = 32,
                                  .vocab = ZOE_BYTE_VOCAB_SIZE};
    c->tp = k->tp, c->offload = k->offload, c->bucket_mb = k->bucket_mb;
    c->micro_batch = 4, c->grad_accum = 1, c->steps = STEPS;
    /* The lr of the reported 4-rank run: where staleness costs most, so the gap is wide. */
    c->lr = 3e-3f, c->min_lr = 3e-3f, c->warmup = WARMUP, c->seed = 5;
    c->dpu_warmup = dpu_warmup;
    c->dpu_schedule = (int)k->schedule;
    if (k->no_clip) c->clip_grad = 0;
}

static zoe_status read_master(zoe_optimizer *opt, float *dst) {
    return zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 0, zoe_optimizer_partition_numel(opt),
                                    dst);
}

static zoe_status write_master(zoe_optimizer *opt, const float *src) {
    return zoe_optimizer_write_state(opt, ZOE_STATE_MASTER, 0, zoe_optimizer_partition_numel(opt),
                                     src);
}

/* ZOE_DPU_PREDICT's prediction after step `step` (learning rate lr) of the reference: that step
 * taken once more from its weights w with the moments it left, per tensor with its own weight
 * decay (none on the exempt ones), by the optimizer's kernel; out = w on the padding. */
static zoe_status predict(zoe_trainer *tr, const zoe_train_config *c, float lr, long step,
                          const float *w, float *mv, float *out) {
    zoe_optimizer *opt = zoe_trainer_optimizer(tr);
    size_t n = zoe_optimizer_partition_numel(opt);
    float *m = mv, *v = mv + n;
    ZOE_TRY(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG, 0, n, m));
    ZOE_TRY(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG_SQ, 0, n, v));
    memcpy(out, w, n * sizeof(float));
    int nt = zoe_gpt_num_tensors(zoe_trainer_gpt(tr));
    zoe_param_tensor *tensors = calloc((size_t)nt, sizeof *tensors);
    if (!tensors) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor list");
    zoe_train_param_tensors(zoe_trainer_gpt(tr), zoe_grid_tp_rank(zoe_trainer_grid(tr)), tensors);
    zoe_status st = ZOE_OK;
    for (int t = 0; st == ZOE_OK && t < nt; t++) {
        size_t first, count, at;
        st = zoe_optimizer_tensor_shard(opt, t, &first, &count, &at);
        zoe_adam_hparams h = {.lr = lr,
                              .beta1 = c->beta1,
                              .beta2 = c->beta2,
                              .eps = c->eps,
                              .weight_decay = tensors[t].no_weight_decay ? 0 : c->weight_decay,
                              .decoupled = 1,
                              .grad_scale = 1,
                              .step = step};
        zoe_adam_consts k;
        zoe_adam_consts_init(&k, &h);
        if (st == ZOE_OK && count)
            st = zoe_adam_predict_host(&k, c->dpu_predict_scale, w + at, m + at, v + at, out + at,
                                       ZOE_F32, count);
    }
    free(tensors);
    return st;
}

/* Iteration i (1-based) of the reference: forward and backward at `read` once stale (w_{i-2},
 * or its prediction), with cur = w_{i-1}; the step then starts from cur. */
static zoe_status reference_iteration(zoe_trainer *tr, int i, const int32_t *tokens,
                                      const int32_t *targets, const float *read, const float *cur) {
    zoe_optimizer *opt = zoe_trainer_optimizer(tr);
    int stale = i >= WARMUP + 2;
    if (stale) {
        ZOE_TRY(write_master(opt, read));
        ZOE_TRY(zoe_optimizer_refresh_params(opt));
    }
    ZOE_TRY(zoe_trainer_micro_batch(tr, tokens, targets, NULL));
    /* The parameters stay at w_{i-2} until the step refreshes them with w_i. */
    if (stale) ZOE_TRY(write_master(opt, cur));
    return ZOE_OK;
}

static zoe_status train(const dpu_case *k, run_kind kind, const char *corpus, trajectory *out) {
    zoe_train_config c;
    config(&c, k, kind == RUN_DPU ? WARMUP : 0);
    zoe_trainer *tr = NULL;
    zoe_dataset *ds = NULL;
    zoe_loader *loader = NULL;
    float *prev = NULL, *cur = NULL, *pred_old = NULL, *pred_new = NULL, *mv = NULL;
    size_t n = (size_t)c.micro_batch * (size_t)c.model.seq_len;
    int32_t *tokens = malloc(n * sizeof(int32_t)), *targets = malloc(n * sizeof(int32_t));
    zoe_status st = tokens && targets ? zoe_trainer_create(MPI_COMM_WORLD, &c, &tr)
                                      : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "token buffers");
    if (st == ZOE_OK) st = zoe_dataset_open(corpus, &ds);
    if (st == ZOE_OK) {
        zoe_loader_config lc = {.seq_len = c.model.seq_len,
                                .micro_batch = c.micro_batch,
                                .dp_size = zoe_trainer_dp_size(tr),
                                .dp_rank = zoe_trainer_dp_rank(tr),
                                .grad_accum = 1,
                                .seed = 11,
                                .vocab_size = c.model.vocab};
        st = zoe_loader_create(ds, &lc, &loader);
    }
    if (st == ZOE_OK) {
        out->numel = zoe_optimizer_partition_numel(zoe_trainer_optimizer(tr));
        out->master = malloc(out->numel * sizeof(float));
        prev = malloc(out->numel * sizeof(float)), cur = malloc(out->numel * sizeof(float));
        pred_old = malloc(out->numel * sizeof(float)),
        pred_new = malloc(out->numel * sizeof(float));
        mv = malloc(2 * out->numel * sizeof(float));
        if (!out->master || !prev || !cur || !pred_old || !pred_new || !mv)
            st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "weight copies");
    }
    if (st == ZOE_OK && kind == RUN_REFERENCE) st = read_master(zoe_trainer_optimizer(tr), cur);
    for (int s = 0; st == ZOE_OK && s < STEPS; s++) {
        out->loss[s] = NAN;
        zoe_step_stats stats;
        st = zoe_loader_fetch(loader, s, 0, tokens, targets);
        if (st != ZOE_OK) break;
        /* Predict: iteration i >= N + 3 reads the prediction made after step i - 2 (step N + 1
         * was the first in flight); iteration N + 2 reads w_N. */
        int predicted = k->schedule == ZOE_DPU_PREDICT && s + 1 >= WARMUP + 3;
        if (kind == RUN_REFERENCE)
            st = reference_iteration(tr, s + 1, tokens, targets, predicted ? pred_old : prev, cur);
        else
            st = zoe_trainer_micro_batch(tr, tokens, targets, NULL);
        float lr = zoe_train_lr_at(&c, s) * (k->lr_factor > 0 ? k->lr_factor : 1.0f);
        if (st == ZOE_OK) st = zoe_trainer_step(tr, lr, &stats);
        if (st == ZOE_OK) out->loss[s] = stats.loss, out->redone[s] = stats.redone;
        if (st == ZOE_OK && kind == RUN_REFERENCE) { /* prev := w_s, cur := w_{s+1} */
            float *t = prev;
            prev = cur, cur = t;
            st = read_master(zoe_trainer_optimizer(tr), cur);
            t = pred_old, pred_old = pred_new, pred_new = t;
            if (st == ZOE_OK && k->schedule == ZOE_DPU_PREDICT)
                st = predict(tr, &c, zoe_train_lr_at(&c, s), s + 1, cur, mv, pred_new);
        }
    }
    if (st == ZOE_OK) st = zoe_trainer_finalize(tr);
    if (st == ZOE_OK) st = read_master(zoe_trainer_optimizer(tr), out->master);
    free(prev), free(cur), free(pred_old), free(pred_new), free(mv), free(tokens), free(targets);
    zoe_loader_destroy(loader);
    zoe_dataset_destroy(ds);
    zoe_trainer_destroy(tr);
    return st;
}

static void check_case(const dpu_case *k, const char *corpus) {
    static trajectory dpu, ref, sync;
    dpu.master = ref.master = sync.master = NULL;
    char what[160];
    int dp = test_world_size() / k->tp;
    snprintf(what, sizeof what, "%s: TP=%d x DP=%d, offload %s, hidden %d, buckets of %lld MiB",
             k->schedule == ZOE_DPU_PREDICT ? "predict" : "plain", k->tp, dp,
             k->offload == ZOE_OFFLOAD_CPU ? "cpu" : "none", k->hidden, (long long)k->bucket_mb);
    if (CHECK_OK(train(k, RUN_DPU, corpus, &dpu)) &&
        CHECK_OK(train(k, RUN_REFERENCE, corpus, &ref)) &&
        CHECK_OK(train(k, RUN_SYNC, corpus, &sync))) {
        double d[STEPS], r[STEPS], y[STEPS];
        for (int s = 0; s < STEPS; s++) d[s] = dpu.loss[s], r[s] = ref.loss[s], y[s] = sync.loss[s];
        char label[256];
        snprintf(label, sizeof label, "%s: loss per step, DPU trainer vs stale-schedule reference",
                 what);
        CHECK_CLOSE(d, r, STEPS, 0, 1e-5, label);
        snprintf(label, sizeof label, "%s: loss of the synchronous steps, sync vs reference", what);
        CHECK_CLOSE(y, r, WARMUP + 1, 0, 1e-5, label);
        double worst_w = 0;
        int same_size = dpu.numel == ref.numel;
        CHECK(same_size, "%s: partitions of %zu and %zu elements", what, dpu.numel, ref.numel);
        for (size_t e = 0; same_size && e < dpu.numel; e++)
            worst_w = fmax(worst_w, fabs((double)dpu.master[e] - (double)ref.master[e]));
        CHECK(worst_w <= 1e-5, "%s: master weights after flush differ by %.3g", what, worst_w);
        double worst = 0, gap = 0, tail_d = 0, tail_y = 0;
        for (int s = 0; s < STEPS; s++) {
            worst = fmax(worst, fabs(d[s] - r[s]) / fabs(r[s]));
            gap = fmax(gap, fabs(y[s] - r[s]) / fabs(r[s]));
        }
        for (int s = STEPS - 10; s < STEPS; s++) tail_d += d[s] / 10, tail_y += y[s] / 10;
        CHECK(gap > 100 * 1e-5, "%s: stale reference and sync differ by only %.2e", what, gap);
        CHECK(r[STEPS - 1] < r[0] - 0.5, "%s: the reference learns: loss %.3f -> %.3f", what, r[0],
              r[STEPS - 1]);
        if (test_rank() == 0)
            printf("%s: DPU vs reference: worst loss difference %.2e relative, worst weight %.2e; "
                   "reference vs sync up to %.2e relative; reference loss %.3f -> %.3f; mean loss "
                   "of the last 10 steps: DPU %.4f, sync %.4f\n",
                   what, worst, worst_w, gap, r[0], r[STEPS - 1], tail_d, tail_y);
    }
    free(dpu.master), free(ref.master), free(sync.master);
}

/* ZOE_DPU_EXACT: the DPU trainer against the synchronous one. */
static void check_exact(const dpu_case *k, const char *corpus) {
    static trajectory dpu, sync;
    dpu.master = sync.master = NULL;
    char what[160];
    int redo = k->lr_factor != 1.0f || !k->no_clip; /* a redo may happen: within 1e-5 */
    snprintf(what, sizeof what, "exact, lr x%.1f, %s: TP=%d x DP=%d, offload %s, hidden %d",
             (double)k->lr_factor, k->no_clip ? "no clipping" : "clip 1", k->tp,
             test_world_size() / k->tp, k->offload == ZOE_OFFLOAD_CPU ? "cpu" : "none", k->hidden);
    if (CHECK_OK(train(k, RUN_DPU, corpus, &dpu)) && CHECK_OK(train(k, RUN_SYNC, corpus, &sync))) {
        int all[STEPS], everywhere[STEPS];
        MPI_Allreduce(dpu.redone, all, STEPS, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(dpu.redone, everywhere, STEPS, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        double d[STEPS], y[STEPS];
        int redone = 0, redone_everywhere = 0, first_redo = STEPS, equal = 1;
        for (int s = 0; s < STEPS; s++) {
            d[s] = dpu.loss[s], y[s] = sync.loss[s];
            redone += all[s], redone_everywhere += everywhere[s];
            if (all[s] && s < first_redo) first_redo = s;
            /* a step's loss is computed before its update: equal up to the first redo */
            if (s <= first_redo && dpu.loss[s] != sync.loss[s]) equal = 0;
        }
        /* After a redo the trajectories part by ulps, which this lr amplifies: 5 steps on. */
        int horizon = redo && first_redo + 5 < STEPS ? first_redo + 5 : STEPS;
        double worst_loss = 0;
        for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, fabs(d[s] - y[s]) / y[s]);
        char label[256];
        snprintf(label, sizeof label, "%s: loss per step, exact DPU vs sync", what);
        CHECK_CLOSE(d, y, horizon, 0, redo ? 1e-5 : 0, label);
        CHECK(equal, "%s: losses differ before the first redone step (%d)", what, first_redo);
        int same_size = dpu.numel == sync.numel;
        CHECK(same_size, "%s: partitions of %zu and %zu elements", what, dpu.numel, sync.numel);
        double worst_w = 0;
        for (size_t e = 0; same_size && e < dpu.numel; e++)
            worst_w = fmax(worst_w, fabs((double)dpu.master[e] - (double)sync.master[e]));
        if (k->lr_factor != 1.0f)
            CHECK(redone_everywhere == STEPS - WARMUP, "%s: %d of %d steps redone on every rank",
                  what, redone_everywhere, STEPS - WARMUP);
        else if (!redo)
            CHECK(redone == 0 && worst_w == 0, "%s: %d steps redone, master weights differ by %.3g",
                  what, redone, worst_w);
        if (test_rank() == 0)
            printf("%s: %d of %d steps redone on some rank (first at step %d), worst loss "
                   "difference %.2e relative, worst weight difference %.2e\n",
                   what, redone, STEPS, first_redo, worst_loss, worst_w);
    }
    free(dpu.master), free(sync.master);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* stale: plain and predict against their references; exact: against sync (two ctest
     * tests of this binary, each within its timeout under the sanitizers) */
    if (argc < 3 || (strcmp(argv[2], "stale") != 0 && strcmp(argv[2], "exact") != 0)) {
        fprintf(stderr, "usage: test_train_dpu CORPUS stale|exact\n");
        return 2;
    }
    int stale = strcmp(argv[2], "stale") == 0;
    int world = test_world_size(), tp = world % 2 == 0 ? 2 : 1;
    /* DP over every rank with the host Adam and a multi-bucket ring; then TP where the world
     * allows, with the device Adam on the worker thread. */
    const dpu_case cases[] = {{.tp = 1,
                               .offload = ZOE_OFFLOAD_CPU,
                               .hidden = 128,
                               .bucket_mb = 1,
                               .schedule = ZOE_DPU_PLAIN},
                              {.tp = tp,
                               .offload = ZOE_OFFLOAD_NONE,
                               .hidden = 64,
                               .bucket_mb = 16,
                               .schedule = ZOE_DPU_PLAIN},
                              {.tp = 1,
                               .offload = ZOE_OFFLOAD_CPU,
                               .hidden = 128,
                               .bucket_mb = 1,
                               .schedule = ZOE_DPU_PREDICT},
                              {.tp = tp,
                               .offload = ZOE_OFFLOAD_NONE,
                               .hidden = 64,
                               .bucket_mb = 16,
                               .schedule = ZOE_DPU_PREDICT}};
    for (size_t i = 0; stale && i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], argv[1]);
    const dpu_case exact[] = {{.tp = 1,
                               .offload = ZOE_OFFLOAD_CPU,
                               .hidden = 128,
                               .bucket_mb = 1,
                               .schedule = ZOE_DPU_EXACT,
                               .lr_factor = 1.0f,
                               .no_clip = 1},
                              {.tp = tp,
                               .offload = ZOE_OFFLOAD_NONE,
                               .hidden = 64,
                               .bucket_mb = 16,
                               .schedule = ZOE_DPU_EXACT,
                               .lr_factor = 1.0f,
                               .no_clip = 1},
                              {.tp = 1,
                               .offload = ZOE_OFFLOAD_CPU,
                               .hidden = 128,
                               .bucket_mb = 1,
                               .schedule = ZOE_DPU_EXACT,
                               .lr_factor = 1.1f,
                               .no_clip = 1},
                              {.tp = tp,
                               .offload = ZOE_OFFLOAD_CPU,
                               .hidden = 128,
                               .bucket_mb = 1,
                               .schedule = ZOE_DPU_EXACT,
                               .lr_factor = 1.0f}};
    for (size_t i = 0; !stale && i < sizeof exact / sizeof exact[0]; i++)
        check_exact(&exact[i], argv[1]);
    return test_finish("test_train_dpu");
}
