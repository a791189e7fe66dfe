/* Helper of test_watchdog_phases.sh: 2 ranks, a tiny trainer with a 2 s stall timeout, one
 * step. Then rank 1 stays in its own code (named with zoe_trainer_caller_phase) while rank 0
 * waits for it in a collective of zoe's: the all-reduce that agrees on a stop signal ("stop") or
 * a save into DIR ("save DIR"). Both watchdogs report where their rank is and abort the job;
 * the script reads the reports. Usage: watchdog_phases stop | save DIR */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "zoe/checkpoint.h"
#include "zoe/train.h"

enum { SEQ = 16, BATCH = 2, VOCAB = 61 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int save = argc == 3 && strcmp(argv[1], "save") == 0;
    if (!save && !(argc == 2 && strcmp(argv[1], "stop") == 0)) {
        fprintf(stderr, "usage: watchdog_phases stop | save DIR\n");
        MPI_Finalize();
        return 2;
    }
    zoe_train_config c;
    zoe_train_config_defaults(&c);
    c.model = (zoe_model_config){
        .name = "tiny", .layers = 1, .hidden = 32, .heads = 2, .seq_len = SEQ, .vocab = VOCAB};
    c.micro_batch = BATCH;
    c.stall_timeout = 2;
    zoe_trainer *tr = NULL;
    int32_t tokens[BATCH * SEQ], targets[BATCH * SEQ];
    for (int i = 0; i < BATCH * SEQ; i++) tokens[i] = (i * 7) % VOCAB, targets[i] = (i * 5) % VOCAB;
    if (zoe_trainer_create(MPI_COMM_WORLD, &c, &tr) != ZOE_OK ||
        zoe_trainer_micro_batch(tr, tokens, targets, NULL) != ZOE_OK ||
        zoe_trainer_step(tr, 1e-3f, NULL) != ZOE_OK) {
        fprintf(stderr, "watchdog_phases: rank %d: %s\n", rank, zoe_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 1) {
        zoe_trainer_caller_phase(tr, "sleeping in the test's own code");
        for (;;) sleep(60); /* until the watchdogs end the job */
    }
    if (save)
        zoe_trainer_save(tr, argv[2], 0, NULL, 0);
    else
        zoe_trainer_stop_requested(tr, NULL);
    fprintf(stderr, "watchdog_phases: rank 0 left the collective that rank 1 never joined\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}
