/* The loader on a real TP x DP grid over the demo corpus: every rank builds its loader from its
 * own dp coordinates only; the TP ranks of a DP group read identical tokens (compared over the
 * TP communicator), the DP ranks' rows of a step are disjoint, and one epoch's rows over all
 * DP groups are distinct (gathered over the DP communicator). Argument: the corpus path. */
#include <stdlib.h>
#include "testing.h"
#include "zoe/data.h"

enum { SEQ_LEN = 64, MICRO = 2, ACCUM = 2 };

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void check_grid(const zoe_dataset *ds, int tp) {
    zoe_grid *g;
    if (!CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, tp, &g))) return;
    int dp = zoe_grid_dp_size(g);
    zoe_loader_config cfg = {.seq_len = SEQ_LEN,
                             .micro_batch = MICRO,
                             .dp_size = dp,
                             .dp_rank = zoe_grid_dp_rank(g),
                             .grad_accum = ACCUM,
                             .seed = 99,
                             .vocab_size = ZOE_BYTE_VOCAB_SIZE};
    zoe_loader *l;
    if (!CHECK_OK(zoe_loader_create(ds, &cfg, &l))) {
        zoe_grid_destroy(g);
        return;
    }
    /* Three steps of the first epoch, enough to catch overlap without a long test. */
    enum { STEPS = 3, ROWS = STEPS * ACCUM * MICRO };
    int64_t mine[ROWS], *all = malloc(sizeof(int64_t) * ROWS * (size_t)dp);
    int32_t x[MICRO * SEQ_LEN], y[MICRO * SEQ_LEN], *peer_x = malloc(sizeof x * (size_t)tp);
    int i = 0;
    for (int64_t step = 0; step < STEPS; step++)
        for (int m = 0; m < ACCUM; m++) {
            for (int k = 0; k < MICRO * SEQ_LEN; k++) x[k] = y[k] = -1;
            CHECK_OK(zoe_loader_fetch(l, step, m, x, y));
            for (int b = 0; b < MICRO; b++)
                CHECK_OK(zoe_loader_sequence_index(l, step, m, b, &mine[i++]));
            MPI_Allgather(x, MICRO * SEQ_LEN, MPI_INT32_T, peer_x, MICRO * SEQ_LEN, MPI_INT32_T,
                          zoe_grid_tp_comm(g));
            int differ = 0;
            for (int p = 0; p < tp; p++)
                differ += memcmp(peer_x + p * MICRO * SEQ_LEN, x, sizeof x) != 0;
            CHECK(differ == 0, "tp=%d step %lld micro %d: %d TP peers read other tokens", tp,
                  (long long)step, m, differ);
        }
    MPI_Allgather(mine, ROWS, MPI_INT64_T, all, ROWS, MPI_INT64_T, zoe_grid_dp_comm(g));
    qsort(all, (size_t)ROWS * (size_t)dp, sizeof *all, cmp_i64);
    int repeats = 0;
    for (int k = 1; k < ROWS * dp; k++) repeats += all[k] == all[k - 1];
    CHECK(repeats == 0, "tp=%d dp=%d: %d sequences read by two DP ranks", tp, dp, repeats);
    free(all);
    free(peer_x);
    zoe_loader_destroy(l);
    zoe_grid_destroy(g);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_loader_mpi DEMO_CORPUS\n");
        return 2;
    }
    zoe_dataset *ds;
    if (CHECK_OK(zoe_dataset_open_text(argv[1], ZOE_SPLIT_BLANK_LINE, &ds))) {
        int world = test_world_size();
        for (int tp = 1; tp <= world; tp++)
            if (world % tp == 0) check_grid(ds, tp);
        zoe_dataset_destroy(ds);
    }
    return test_finish("test_loader_mpi");
}
