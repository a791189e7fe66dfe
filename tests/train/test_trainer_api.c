/* The trainer's public face: every call checks its handle (NULL is an error naming the call,
 * getters answer -1), and destroy is local. With a delayed update in flight, one rank leaves on
 * an "error path" (destroy without finalize) while the others wait at a barrier: destroy must
 * return without them (the old collective destroy all-gathered and hung there); the others then
 * destroy theirs, also without finalize. A second trainer runs to the normal finalize and
 * destroy on every rank. */
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"
#include "testing.h"
#include "zoe/train.h"

enum { SEQ = 16, BATCH = 2, VOCAB = 61, STEPS = 4 };

static void expect_null_error(zoe_status st, const char *call) {
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT, "%s(NULL) returned %d", call, (int)st);
    CHECK(strstr(zoe_last_error(), call) != NULL, "%s(NULL): message '%s' lacks the call", call,
          zoe_last_error());
}

static zoe_status run_steps(zoe_trainer *tr, test_rng *rng, int steps) {
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < BATCH * SEQ; i++)
            tokens[i] = (int32_t)test_rng_int(rng, 0, VOCAB - 1),
            targets[i] = (int32_t)test_rng_int(rng, 0, VOCAB - 1);
        ZOE_TRY(zoe_trainer_micro_batch(tr, tokens, targets, NULL));
        ZOE_TRY(zoe_trainer_step(tr, 1e-3f, NULL));
    }
    return ZOE_OK;
}

static void config(zoe_train_config *c) {
    zoe_train_config_defaults(c);
    c->model = (zoe_model_config){
        .name = "tiny", .layers = 1, .hidden = 32, .heads = 2, .seq_len = SEQ, .vocab = VOCAB};
    c->micro_batch = BATCH;
    c->dpu_warmup = 1;      /* from the second step on, an update is in flight after every step */
    c->stall_timeout = 600; /* the watchdog thread runs alongside (and under TSan) */
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int rank = test_rank(), world = test_world_size();
    test_rng rng;
    test_rng_seed(&rng, 11 + (uint64_t)rank);

    expect_null_error(zoe_trainer_flush(NULL), "zoe_trainer_flush");
    expect_null_error(zoe_trainer_finalize(NULL), "zoe_trainer_finalize");
    expect_null_error(zoe_trainer_step(NULL, 1e-3f, NULL), "zoe_trainer_step");
    int32_t tok[1] = {0};
    expect_null_error(zoe_trainer_micro_batch(NULL, tok, tok, NULL), "zoe_trainer_micro_batch");
    zoe_profile prof;
    expect_null_error(zoe_trainer_profile(NULL, &prof, 0), "zoe_trainer_profile");
    CHECK(zoe_trainer_param_count(NULL) == -1 && zoe_trainer_rank(NULL) == -1 &&
              zoe_trainer_dp_rank(NULL) == -1 && zoe_trainer_dp_size(NULL) == -1,
          "getters on NULL answer -1");
    zoe_trainer_destroy(NULL);
    CHECK(zoe_trainer_stop_requested(NULL, NULL) == 0 &&
              strstr(zoe_last_error(), "zoe_trainer_stop_requested") != NULL,
          "zoe_trainer_stop_requested(NULL): 0, naming the call ('%s')", zoe_last_error());
    zoe_trainer_caller_phase(NULL, "nothing"); /* a no-op */
    zoe_train_config c;
    config(&c);
    zoe_trainer *tr = NULL;
    expect_null_error(zoe_trainer_create(MPI_COMM_WORLD, NULL, &tr), "zoe_trainer_create");
    expect_null_error(zoe_trainer_create(MPI_COMM_NULL, &c, &tr), "zoe_trainer_create");

    /* An error path on the last rank: destroy with an update in flight, alone. */
    if (!CHECK_OK(zoe_trainer_create(MPI_COMM_WORLD, &c, &tr))) return test_finish("api");
    CHECK_OK(run_steps(tr, &rng, STEPS));
    if (rank == world - 1) zoe_trainer_destroy(tr);
    MPI_Barrier(MPI_COMM_WORLD); /* reached by the leaver only if its destroy did not wait */
    if (rank != world - 1) zoe_trainer_destroy(tr);

    /* The normal end: finalize (collective) then destroy, on every rank. */
    tr = NULL;
    if (!CHECK_OK(zoe_trainer_create(MPI_COMM_WORLD, &c, &tr))) return test_finish("api");
    CHECK(zoe_trainer_dp_size(tr) == world && zoe_trainer_rank(tr) == rank, "getters");
    CHECK(zoe_trainer_param_count(tr) > 0, "param count");
    CHECK_OK(run_steps(tr, &rng, STEPS));
    int signo = -1; /* no handlers installed, no signal: every rank goes on */
    CHECK(zoe_trainer_stop_requested(tr, &signo) == 0 && signo == 0, "stop requested: signo %d",
          signo);
    CHECK_OK(zoe_trainer_finalize(tr));
    CHECK_OK(zoe_trainer_profile(tr, &prof, 1));
    zoe_trainer_destroy(tr);
    return test_finish("test_trainer_api");
}
