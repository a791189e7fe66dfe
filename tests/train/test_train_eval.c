/* Validation loss (zoe_trainer_eval_*), on the demo corpus split 90,10 by documents:
 *  (a) evaluating changes nothing of the run: the loss of every step and the final master
 *      weights are bit for bit those of the same run without evaluation, without the delayed
 *      parameter update and with it, on the exact schedule (the next forward reads the weights
 *      evaluated) and the plain one (the stale weights go back from a host copy), with dropout
 *      on (so the dropout counter is checked too);
 *  (b) the validation loss at the end of a DPU run (an update in flight) is the per-token mean
 *      recomputed in float64 from the logits of the same batches after zoe_trainer_finalize,
 *      i.e. with the latest weights, not the stale ones the next forward would read;
 *  (c) it is the same at the world's grid (TP = 1 and TP = 2 where the ranks allow, DP the
 *      rest) as on one rank alone taking the global batch as DP x micro-batches, before
 *      training and after a few steps;
 *  (d) evaluation runs without dropout: a model with dropout 0.3 evaluates its initial weights
 *      exactly as the same model without dropout.
 *
 * Tolerances: (a) and (d) are exact (the same kernels on the same data). (b): the trainer sums
 * fp32 per-micro-batch means times their counts in double, the reference float64 log-softmax
 * of fp32 logits: 1e-5 relative. (c): fp32 reductions in another order (TP all-reduces, the DP
 * split of the batch) give rounding-level differences, 1e-5 relative at step 0; three Adam
 * steps carry them, 2e-4 relative allowed (test_train_parallel's losses agree as closely). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "engine/train/trainer_impl.h"
#include "runtime/error.h"
#include "testing.h"
#include "zoe/data.h"
#include "zoe/plan.h"
#include "zoe/train.h"

enum { STEPS = 8, EVAL_EVERY = 2, EVAL_BATCHES = 2, SEQ = 32, GLOBAL_ROWS = 8 };

typedef struct run_spec {
    MPI_Comm comm;
    int tp, micro_batch, grad_accum;
    int dpu_warmup;   /* 0: no DPU */
    int dpu_schedule; /* zoe_dpu_schedule: exact keeps no copy, a stale one a pinned copy */
    float dropout;
    int steps;
    int eval_every; /* 0: no evaluation during the run */
    int final_eval; /* evaluate after the last step (before finalize) */
} run_spec;

typedef struct run_result {
    float loss[STEPS];
    float val[STEPS + 1]; /* val[s]: after s steps; NAN where not evaluated */
    float final_val;
    double final_ref; /* float64 recomputation after finalize (b) */
    float *master;
    size_t master_numel;
    size_t pinned_live; /* page-locked bytes held at the end (zoe_device_memory_stats) */
    double plan_pinned; /* the plan's page-locked bytes per rank for this run */
    double plan_other;  /* the plan's other host bytes per rank (the evaluation's copy) */
    size_t param_bytes; /* the parameter buffer's */
} run_result;

static void config(const run_spec *r, zoe_train_config *c) {
    zoe_train_config_defaults(c);
    c->model = (zoe_model_config){.name = "test",
                                  .layers = 2,
                                  .hidden = 64,
                                  .heads = 4,
                                  .seq_len = SEQ,
                                  .vocab = ZOE_BYTE_VOCAB_SIZE,
                                  .dropout = r->dropout};
    c->tp = r->tp, c->micro_batch = r->micro_batch, c->grad_accum = r->grad_accum;
    c->steps = r->steps, c->lr = 3e-3f, c->min_lr = 3e-4f, c->warmup = 2, c->seed = 17;
    c->dpu_warmup = r->dpu_warmup;
    c->dpu_schedule = r->dpu_schedule;
}

typedef struct datasets {
    zoe_dataset *whole, *train, *val;
} datasets;

static zoe_status open_split(const char *corpus, datasets *d) {
    int64_t train = 0;
    ZOE_TRY(zoe_dataset_open(corpus, &d->whole));
    int64_t docs = zoe_dataset_documents(d->whole);
    ZOE_TRY(zoe_dataset_split_documents(docs, 90, 10, &train));
    ZOE_TRY(zoe_dataset_subset(d->whole, 0, train, &d->train));
    return zoe_dataset_subset(d->whole, train, docs - train, &d->val);
}

static void close_split(datasets *d) {
    zoe_dataset_destroy(d->train);
    zoe_dataset_destroy(d->val);
    zoe_dataset_destroy(d->whole);
}

/* The trainer's validation loss over the first EVAL_BATCHES global batches. */
static zoe_status evaluate(zoe_trainer *tr, const zoe_loader *val, int accum, int32_t *x,
                           int32_t *y, float *loss) {
    ZOE_TRY(zoe_trainer_eval_begin(tr));
    for (int b = 0; b < EVAL_BATCHES; b++)
        for (int m = 0; m < accum; m++) {
            ZOE_TRY(zoe_loader_fetch(val, b, m, x, y));
            ZOE_TRY(zoe_trainer_eval_micro_batch(tr, x, y));
        }
    return zoe_trainer_eval_end(tr, loss);
}

/* The same batches' mean token loss in float64 from the trainer's logits (the weights the next
 * forward reads), summed over the DP group. */
static zoe_status reference_loss(zoe_trainer *tr, MPI_Comm comm, int tp, const zoe_loader *val,
                                 int micro, int accum, int32_t *x, int32_t *y, double *out) {
    const int V = ZOE_BYTE_VOCAB_SIZE;
    size_t n = (size_t)micro * SEQ;
    float *logits = malloc(n * V * sizeof(float));
    if (!logits) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "logits");
    double sums[2] = {0, 0};
    zoe_status st = ZOE_OK;
    for (int b = 0; st == ZOE_OK && b < EVAL_BATCHES; b++)
        for (int m = 0; st == ZOE_OK && m < accum; m++) {
            st = zoe_loader_fetch(val, b, m, x, y);
            if (st == ZOE_OK) st = zoe_trainer_logits(tr, x, logits);
            for (size_t i = 0; st == ZOE_OK && i < n; i++) {
                if (y[i] < 0) continue;
                const float *row = logits + i * V;
                double mx = row[0], z = 0;
                for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
                for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
                sums[0] += log(z) + mx - (double)row[y[i]];
                sums[1] += 1;
            }
        }
    free(logits);
    ZOE_TRY(st);
    /* one TP rank per DP group contributes */
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank % tp != 0) sums[0] = sums[1] = 0;
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm);
    *out = sums[0] / sums[1];
    return ZOE_OK;
}

static zoe_status run(const run_spec *r, const char *corpus, run_result *out) {
    zoe_train_config c;
    config(r, &c);
    for (int s = 0; s <= STEPS; s++) out->val[s] = NAN;
    datasets d = {0};
    zoe_trainer *tr = NULL;
    zoe_loader *loader = NULL, *val = NULL;
    size_t n = (size_t)r->micro_batch * SEQ;
    int32_t *x = malloc(n * sizeof(int32_t)), *y = malloc(n * sizeof(int32_t));
    zoe_status st = x && y ? open_split(corpus, &d) : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "batch");
    if (st == ZOE_OK) st = zoe_trainer_create(r->comm, &c, &tr);
    zoe_loader_config lc = {.seq_len = SEQ,
                            .micro_batch = r->micro_batch,
                            .dp_size = st == ZOE_OK ? zoe_trainer_dp_size(tr) : 1,
                            .dp_rank = st == ZOE_OK ? zoe_trainer_dp_rank(tr) : 0,
                            .grad_accum = r->grad_accum,
                            .seed = c.seed,
                            .vocab_size = c.model.vocab};
    if (st == ZOE_OK) st = zoe_loader_create(d.train, &lc, &loader);
    if (st == ZOE_OK) st = zoe_loader_create(d.val, &lc, &val);
    if (st == ZOE_OK && r->eval_every > 0)
        st = evaluate(tr, val, r->grad_accum, x, y, &out->val[0]);
    for (int s = 0; st == ZOE_OK && s < r->steps; s++) {
        zoe_step_stats stats;
        for (int m = 0; st == ZOE_OK && m < r->grad_accum; m++) {
            st = zoe_loader_fetch(loader, s, m, x, y);
            if (st == ZOE_OK) st = zoe_trainer_micro_batch(tr, x, y, NULL);
        }
        if (st == ZOE_OK) st = zoe_trainer_step(tr, zoe_train_lr_at(&c, s), &stats);
        if (st == ZOE_OK) out->loss[s] = stats.loss;
        if (st == ZOE_OK && r->eval_every > 0 && (s + 1) % r->eval_every == 0)
            st = evaluate(tr, val, r->grad_accum, x, y, &out->val[s + 1]);
    }
    if (st == ZOE_OK && r->final_eval) st = evaluate(tr, val, r->grad_accum, x, y, &out->final_val);
    if (st == ZOE_OK) st = zoe_trainer_finalize(tr);
    if (st == ZOE_OK && r->final_eval)
        st = reference_loss(tr, r->comm, r->tp, val, r->micro_batch, r->grad_accum, x, y,
                            &out->final_ref);
    if (st == ZOE_OK) {
        zoe_memory_stats ms = {0};
        st = zoe_device_memory_stats(zoe_trainer_device(tr), &ms);
        out->pinned_live = ms.pinned_bytes;
        int world = 0;
        MPI_Comm_size(r->comm, &world);
        zoe_hardware hw;
        zoe_plan_config pc;
        zoe_plan_result plan;
        if (st == ZOE_OK) st = zoe_hardware_local(0, &hw);
        if (st == ZOE_OK) st = zoe_plan_config_from_train(&c, world, &hw, &pc);
        pc.evaluates = r->eval_every > 0 || r->final_eval;
        if (st == ZOE_OK) st = zoe_plan(&pc, &plan);
        out->plan_pinned = plan.host.pinned_per_rank;
        out->plan_other = plan.host.other_per_rank;
        out->param_bytes =
            zoe_optimizer_params_numel(zoe_trainer_optimizer(tr)) * zoe_dtype_size(c.dtype);
    }
    if (st == ZOE_OK) {
        zoe_optimizer *opt = zoe_trainer_optimizer(tr);
        out->master_numel = zoe_optimizer_partition_numel(opt);
        out->master = malloc(out->master_numel * sizeof(float));
        st = out->master ? zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 0, out->master_numel,
                                                    out->master)
                         : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "master copy");
    }
    free(x), free(y);
    zoe_loader_destroy(loader);
    zoe_loader_destroy(val);
    zoe_trainer_destroy(tr);
    close_split(&d);
    return st;
}

/* The grids the world allows: TP 1, and TP 2 when the ranks divide by it. */
static int grid_count(void) {
    return test_world_size() % 2 == 0 ? 2 : 1;
}

static void check_unchanged(const char *corpus) {
    static const struct {
        const char *name;
        int warmup, schedule;
    } dpus[] = {
        {"off", 0, ZOE_DPU_EXACT}, {"exact", 2, ZOE_DPU_EXACT}, {"plain", 2, ZOE_DPU_PLAIN}};
    int world = test_world_size();
    for (int g = 0; g < grid_count(); g++)
        for (size_t k = 0; k < sizeof dpus / sizeof dpus[0]; k++) {
            int tp = g ? 2 : 1, dp = world / tp;
            const char *dpu = dpus[k].name;
            run_spec plain = {.comm = MPI_COMM_WORLD,
                              .tp = tp,
                              .micro_batch = GLOBAL_ROWS / dp > 0 ? GLOBAL_ROWS / dp : 1,
                              .grad_accum = 1,
                              .dpu_warmup = dpus[k].warmup,
                              .dpu_schedule = dpus[k].schedule,
                              .dropout = 0.1f,
                              .steps = STEPS};
            run_spec evaluated = plain;
            evaluated.eval_every = EVAL_EVERY;
            static run_result a, b;
            if (!CHECK_OK(run(&plain, corpus, &a)) || !CHECK_OK(run(&evaluated, corpus, &b))) {
                free(a.master), free(b.master);
                return;
            }
            CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0,
                  "TP=%d DPU %s: the losses differ with evaluation (step 8: %.9g vs %.9g)", tp, dpu,
                  (double)a.loss[STEPS - 1], (double)b.loss[STEPS - 1]);
            CHECK(a.master_numel == b.master_numel &&
                      memcmp(a.master, b.master, a.master_numel * sizeof(float)) == 0,
                  "TP=%d DPU %s: the final weights differ with evaluation", tp, dpu);
            for (int s = 0; s <= STEPS; s += EVAL_EVERY)
                CHECK(isfinite(b.val[s]) && b.val[s] > 0,
                      "TP=%d: no validation loss after %d "
                      "steps (%g)",
                      tp, s, (double)b.val[s]);
            CHECK(b.val[STEPS] < b.val[0], "TP=%d: validation loss %g after training, %g before",
                  tp, (double)b.val[STEPS], (double)b.val[0]);
            /* Evaluation pins nothing, measured and planned; the stale schedule's copy of the
             * parameter buffer is pageable host memory, which the plan adds, nothing otherwise. */
            double added = (double)b.pinned_live - (double)a.pinned_live,
                   planned = b.plan_pinned - a.plan_pinned, other = b.plan_other - a.plan_other;
            CHECK(added == 0 && planned == 0,
                  "TP=%d DPU %s: evaluation added %.0f page-locked bytes, the plan %.0f", tp, dpu,
                  added, planned);
            int stale = dpus[k].warmup > 0 && dpus[k].schedule != ZOE_DPU_EXACT;
            CHECK(other == (stale ? (double)b.param_bytes : 0.0),
                  "TP=%d DPU %s: the plan adds %.0f host bytes for evaluation, want %.0f", tp, dpu,
                  other, stale ? (double)b.param_bytes : 0.0);
            free(a.master), free(b.master);
            a.master = b.master = NULL;
        }
}

static void check_latest_weights(const char *corpus) {
    int world = test_world_size();
    int tp = grid_count() == 2 ? 2 : 1, dp = world / tp;
    run_spec r = {.comm = MPI_COMM_WORLD,
                  .tp = tp,
                  .micro_batch = GLOBAL_ROWS / dp > 0 ? GLOBAL_ROWS / dp : 1,
                  .grad_accum = 1,
                  .dpu_warmup = 2,
                  .steps = 6,
                  .final_eval = 1};
    static run_result res;
    if (!CHECK_OK(run(&r, corpus, &res))) return;
    double rel = fabs(res.final_val - res.final_ref) / res.final_ref;
    CHECK(rel <= 1e-5,
          "TP=%d DPU: validation loss %.7f, float64 recomputation with the latest "
          "weights %.7f (relative %.2g)",
          tp, (double)res.final_val, res.final_ref, rel);
    free(res.master);
}

static void check_grids(const char *corpus) {
    int world = test_world_size();
    /* every rank alone: DP 1, the global batch as micro-batches of the grid's size */
    for (int g = 0; g < grid_count(); g++) {
        int tp = g ? 2 : 1, dp = world / tp;
        int micro = GLOBAL_ROWS / dp > 0 ? GLOBAL_ROWS / dp : 1;
        run_spec grid = {.comm = MPI_COMM_WORLD,
                         .tp = tp,
                         .micro_batch = micro,
                         .grad_accum = 1,
                         .steps = 3,
                         .eval_every = 3};
        run_spec alone = grid;
        alone.comm = MPI_COMM_SELF, alone.tp = 1, alone.grad_accum = dp;
        static run_result a, b;
        if (!CHECK_OK(run(&grid, corpus, &a)) || !CHECK_OK(run(&alone, corpus, &b))) return;
        double r0 = fabs(a.val[0] - b.val[0]) / b.val[0], r3 = fabs(a.val[3] - b.val[3]) / b.val[3];
        CHECK(r0 <= 1e-5, "TP=%d x DP=%d: validation loss %.7f before training, %.7f on one rank",
              tp, dp, (double)a.val[0], (double)b.val[0]);
        CHECK(r3 <= 2e-4, "TP=%d x DP=%d: validation loss %.7f after 3 steps, %.7f on one rank", tp,
              dp, (double)a.val[3], (double)b.val[3]);
        free(a.master), free(b.master);
    }
}

static void check_no_dropout(const char *corpus) {
    run_spec with = {.comm = MPI_COMM_WORLD,
                     .tp = 1,
                     .micro_batch =
                         GLOBAL_ROWS / test_world_size() > 0 ? GLOBAL_ROWS / test_world_size() : 1,
                     .grad_accum = 1,
                     .dropout = 0.3f,
                     .steps = 1,
                     .eval_every = 1};
    run_spec without = with;
    without.dropout = 0;
    static run_result a, b;
    if (!CHECK_OK(run(&with, corpus, &a)) || !CHECK_OK(run(&without, corpus, &b))) return;
    CHECK(a.val[0] == b.val[0], "validation loss %.9g with dropout 0.3, %.9g without",
          (double)a.val[0], (double)b.val[0]);
    CHECK(a.loss[0] != b.loss[0], "training loss %.9g with dropout 0.3 and without: the same",
          (double)a.loss[0]);
    free(a.master), free(b.master);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_train_eval CORPUS\n");
        return 2;
    }
    check_unchanged(argv[1]);
    check_latest_weights(argv[1]);
    check_grids(argv[1]);
    check_no_dropout(argv[1]);
    return test_finish("test_train_eval");
}
