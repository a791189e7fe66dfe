/* Hand-filled zoe_train_config structs, fuzzed: every field gets random and boundary values
 * (0, -1, INT_MIN, INT_MAX, NaN, inf, enums out of range, strings without a terminator), and
 * validate and create must answer with a status, never a crash (tp = 0 once divided by zero).
 * What validate accepts is checked against the rules restated here; what create is given is
 * kept small in memory by drawing the shape fields from a small box, so every accepted struct
 * is also built and destroyed. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include "testing.h"
#include "zoe/train.h"

enum { VALIDATE_TRIALS = 20000, CREATE_TRIALS = 60 };

static int pick_int(test_rng *r, int lo, int hi) {
    static const int edges[] = {INT_MIN, -1, 0, 1, 2, 3, 4, 7, 8, 64, INT_MAX};
    switch (test_rng_int(r, 0, 3)) {
    case 0:
        return edges[test_rng_int(r, 0, (int)(sizeof edges / sizeof edges[0]) - 1)];
    case 1:
        return (int)test_rng_int(r, lo - 1, hi + 1);
    case 2:
        return (int)(int32_t)test_rng_next(r);
    default:
        return (int)test_rng_int(r, lo, hi);
    }
}

static float pick_float(test_rng *r, float lo, float hi) {
    static const float edges[] = {0.0f, -0.0f, -1.0f, 1.0f, 1e-30f, FLT_MAX, -FLT_MAX};
    switch (test_rng_int(r, 0, 3)) {
    case 0:
        return edges[test_rng_int(r, 0, (int)(sizeof edges / sizeof edges[0]) - 1)];
    case 1:
        return test_rng_int(r, 0, 2) == 0 ? NAN : test_rng_int(r, 0, 1) ? INFINITY : -INFINITY;
    default:
        return lo + (hi - lo) * (float)test_rng_uniform(r);
    }
}

/* Each field takes a fuzzed value with probability 1/6 (a few fields per struct, so that some
 * structs pass and the checks past the first are reached too), else keeps its default. The
 * shape box (create trials) bounds the memory a passing struct can ask for. */
static void fuzz(zoe_train_config *c, test_rng *r, int small) {
    zoe_train_config_defaults(c);
#define MAYBE if (test_rng_int(r, 0, 5) == 0)
    MAYBE c->model.layers = small ? (int)test_rng_int(r, -1, 2) : pick_int(r, 1, 4096);
    MAYBE c->model.hidden = small ? 16 * (int)test_rng_int(r, -1, 4) : pick_int(r, 1, 1 << 20);
    MAYBE c->model.heads = small ? (int)test_rng_int(r, 0, 5) : pick_int(r, 1, 4096);
    MAYBE c->model.ffn = small ? 8 * (int)test_rng_int(r, -1, 8) : pick_int(r, 0, 1 << 22);
    MAYBE c->model.seq_len = small ? (int)test_rng_int(r, -1, 33) : pick_int(r, 1, 1 << 20);
    MAYBE c->model.vocab = small ? (int)test_rng_int(r, 0, 300) : pick_int(r, 2, 1 << 24);
    MAYBE c->model.dropout = pick_float(r, 0, 1);
    MAYBE c->tp = small ? (int)test_rng_int(r, -1, 4) : pick_int(r, 1, 4096);
    MAYBE c->micro_batch = small ? (int)test_rng_int(r, -1, 3) : pick_int(r, 1, 1 << 20);
    MAYBE c->grad_accum = pick_int(r, 1, 1 << 20);
    MAYBE c->steps = pick_int(r, 1, 1000000000);
    MAYBE c->lr = pick_float(r, 0, 10);
    MAYBE c->min_lr = pick_float(r, 0, 10);
    MAYBE c->warmup = pick_int(r, 0, 1000000000);
    MAYBE c->weight_decay = pick_float(r, 0, 10);
    MAYBE c->beta1 = pick_float(r, 0, 1);
    MAYBE c->beta2 = pick_float(r, 0, 1);
    MAYBE c->eps = pick_float(r, 0, 1);
    MAYBE c->clip_grad = pick_float(r, 0, 10);
    MAYBE c->dtype = (zoe_dtype)test_rng_int(r, -2, 6);
    MAYBE c->backend = (zoe_backend)test_rng_int(r, -2, 3);
    MAYBE c->offload = (zoe_offload_mode)test_rng_int(r, -2, 3);
    MAYBE c->dpu_warmup = pick_int(r, 0, 1000000000);
    MAYBE c->recompute = pick_int(r, 0, 1);
    MAYBE c->seed = test_rng_next(r);
    MAYBE c->log_every = pick_int(r, 1, 1000000000);
    MAYBE c->bucket_mb = small ? test_rng_int(r, -1, 2) : (int64_t)test_rng_next(r);
    MAYBE c->progress = (zoe_progress_style)test_rng_int(r, -2, 4);
    MAYBE c->stall_timeout = small ? (int)test_rng_int(r, -1, 1) : pick_int(r, 0, 1000000);
    MAYBE c->stop_grace = small ? (int)test_rng_int(r, -1, 1) : pick_int(r, 0, 1000000);
    MAYBE c->eval_every = pick_int(r, 0, 1000000000);
    MAYBE c->eval_iters = pick_int(r, 1, 1000000);
    MAYBE c->split_train = pick_int(r, 0, 100), c->split_val = pick_int(r, 0, 100);
    MAYBE memset(c->model.name, 'x', sizeof c->model.name); /* no terminator */
    MAYBE memset(c->metrics, 'm', sizeof c->metrics);
#undef MAYBE
    if (small && c->backend == ZOE_BACKEND_CUDA) c->backend = ZOE_BACKEND_CPU; /* no GPU here */
}

/* The rules validate must enforce, restated independently of the option table. */
static int acceptable(const zoe_train_config *c, int world) {
    const zoe_model_config *m = &c->model;
    if (m->layers < 1 || m->layers > 4096 || m->hidden < 1 || m->hidden > (1 << 20)) return 0;
    if (m->heads < 1 || m->heads > 4096 || m->ffn < 0 || m->ffn > (1 << 22)) return 0;
    if (m->seq_len < 1 || m->seq_len > (1 << 20) || m->vocab < 2 || m->vocab > (1 << 24)) return 0;
    if (!(m->dropout >= 0 && m->dropout <= 0.99f)) return 0;
    if (c->tp < 1 || world % c->tp || m->hidden % m->heads || m->heads % c->tp) return 0;
    if ((m->ffn ? m->ffn : 4 * m->hidden) % c->tp) return 0;
    if (c->micro_batch < 1 || c->micro_batch > (1 << 20)) return 0;
    if (c->grad_accum < 1 || c->grad_accum > (1 << 20)) return 0;
    if (c->steps < 1 || c->steps > 1000000000 || c->warmup < -1 || c->warmup > 1000000000)
        return 0; /* -1: ZOE_WARMUP_AUTO */
    if (!(c->lr >= 0 && c->lr <= 10) || !(c->min_lr >= 0 && c->min_lr <= c->lr)) return 0;
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) return 0;
    if (!(c->eps > 0 && c->eps <= 1) || !(c->weight_decay >= 0 && c->weight_decay <= 10)) return 0;
    if (!(c->clip_grad >= 0 && c->clip_grad <= 1e9f)) return 0;
    if (c->dtype != ZOE_F32 && c->dtype != ZOE_BF16 && c->dtype != ZOE_F16) return 0;
    if (c->dtype == ZOE_F16 && c->backend == ZOE_BACKEND_CPU) return 0;
    if (c->backend == ZOE_BACKEND_CUDA && m->hidden / m->heads > 256) return 0;
    if ((unsigned)c->backend > 1 || (unsigned)c->offload > 1 || (unsigned)c->progress > 2) return 0;
    if (c->dpu_warmup < 0 || c->dpu_warmup > 1000000000) return 0;
    /* the exact DPU schedule solves a step back through beta1 and beta2 */
    if (c->dpu != ZOE_DPU_OFF && c->dpu_warmup > 0 && c->dpu_schedule == ZOE_DPU_EXACT &&
        !(c->beta1 > 0 && c->beta2 > 0))
        return 0;
    if ((c->recompute != 0 && c->recompute != 1) || c->log_every < 1 || c->log_every > 1000000000)
        return 0;
    if (c->bucket_mb < 1 || c->bucket_mb > (1 << 20)) return 0;
    if (c->stall_timeout < 0 || c->stall_timeout > 1000000) return 0;
    if (c->stop_grace < 0 || c->stop_grace > 1000000) return 0;
    if (c->eval_every < 0 || c->eval_every > 1000000000) return 0;
    if (c->eval_iters < 1 || c->eval_iters > 1000000) return 0;
    int split = c->split_train || c->split_val;
    if (split && (c->split_train < 1 || c->split_val < 1 || c->split_train > 99 ||
                  c->split_val > 99 || c->split_train + c->split_val != 100))
        return 0;
    if (c->eval_every > 0 && !split) return 0; /* no --val-data in these structs */
    if (!memchr(m->name, 0, sizeof m->name) || !memchr(c->metrics, 0, sizeof c->metrics)) return 0;
    return 1;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int world = test_world_size();
    test_rng rng;
    test_rng_seed(&rng, 2026); /* the same structs on every rank: create is collective */
    int accepted = 0, built = 0;
    zoe_train_config c;
    for (int i = 0; i < VALIDATE_TRIALS; i++) {
        fuzz(&c, &rng, 0);
        int w = (int)test_rng_int(&rng, -1, 9);
        zoe_status st = zoe_train_config_validate(&c, w);
        int want = w >= 1 && acceptable(&c, w);
        CHECK((st == ZOE_OK) == want, "trial %d: validate says %d, the rules say %d (%s)", i,
              (int)st, want, zoe_last_error());
        CHECK(st == ZOE_OK || zoe_last_error()[0], "trial %d: a refusal without a message", i);
        accepted += st == ZOE_OK;
    }
    for (int i = 0; i < CREATE_TRIALS; i++) {
        fuzz(&c, &rng, 1);
        zoe_trainer *tr = NULL;
        zoe_status want = zoe_train_config_validate(&c, world);
        zoe_status st = zoe_trainer_create(MPI_COMM_WORLD, &c, &tr);
        CHECK(st == want, "create trial %d: create %d, validate %d (%s)", i, (int)st, (int)want,
              zoe_last_error());
        CHECK((st == ZOE_OK) == (tr != NULL), "create trial %d: handle and status disagree", i);
        built += tr != NULL;
        if (tr) CHECK_OK(zoe_trainer_finalize(tr));
        zoe_trainer_destroy(tr);
    }
    if (test_rank() == 0)
        printf("fuzzed %d structs through validate (%d accepted), %d through create (%d built)\n",
               VALIDATE_TRIALS, accepted, CREATE_TRIALS, built);
    CHECK(accepted > 0 && built > 0, "the fuzzer never produced a valid struct");
    return test_finish("test_config_fuzz");
}
