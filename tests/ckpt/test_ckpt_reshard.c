/* Reshard: a checkpoint saved at one grid resumes at every other grid the world allows, and at
 * another micro-batch x grad-accum split of the same global batch; the next 10 losses follow
 * the run that was never stopped. At 4 ranks: saved at TP=2 x DP=2, resumed at 1x4, 4x1, 2x1,
 * 1x2 and 1x1 (the smaller grids on sub-communicators). At 2 ranks: saved at 2x1, resumed at
 * 1x2 and 1x1. DPU on (warm-up 2): the save falls while an update is in flight, so the stale
 * weights of params-in-use.safetensors are resharded too. Dropout is 0: its masks are keyed by
 * the position in the micro-batch, which another split changes.
 *
 * Tolerance: fp32 throughout. Another grid sums the same gradients in another order (TP splits
 * the row-parallel matmuls and the softmax, DP and accumulation split the batch), a few ulps
 * per step that Adam carries forward; the measured drift over 10 steps is at most 1.2e-7
 * relative (often 0). We allow 1e-5 relative: about a hundred times that, and far below a
 * step's own loss change (1e-2), so a mis-placed shard, a missing tensor or a wrong data
 * position fails.
 *
 * The same for a Llama (4 query heads over 2 KV heads, untied head), saved at TP = world size:
 * at 4 ranks each KV head is then held by 2 ranks, and the file must hold it once, placed for
 * every other grid. */
#include <math.h>
#include <stdlib.h>
#include "ckpt_test.h"

enum { SAVE_AT = 4, STEPS = SAVE_AT + 10, ACCUM = 2 };

typedef struct grid_case {
    int ranks, tp, grad_accum;
} grid_case;

/* The Llama variant of ckpt_test_config's model. */
static void as_llama(zoe_train_config *c) {
    c->model.family = ZOE_MODEL_LLAMA;
    c->model.kv_heads = 2;
    c->model.ffn = 176;
    c->model.rope_theta = 10000.0f;
    c->model.norm_eps = 1e-5f;
    c->model.tie_embeddings = 0;
}

static void reshard(const char *corpus, int llama) {
    int world = test_world_size(), rank = test_rank();
    char root[256], dir[512], at[700];
    ckpt_test_tmpdir(MPI_COMM_WORLD, root, sizeof root);
    snprintf(dir, sizeof dir, "%s/run", root);
    int save_tp = llama ? world : 2;
    zoe_train_config c;
    ckpt_test_config(&c, save_tp, world / save_tp, ACCUM, 0.0f, 2);
    if (llama) as_llama(&c);
    float ref[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, ref));
    CHECK_OK(zoe_trainer_save(s.tr, dir, 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    ckpt_session_close(&s);

    const grid_case four[] = {{4, 1, 2}, {4, 4, 1}, {2, 2, 2}, {2, 1, 1}, {1, 1, 1}};
    const grid_case two[] = {{2, 1, 2}, {1, 1, 1}};
    const grid_case *cases = world == 4 ? four : two;
    int ncases = world == 4 ? 5 : 2;
    for (int k = 0; k < ncases; k++) {
        const grid_case *g = &cases[k];
        MPI_Comm comm;
        MPI_Comm_split(MPI_COMM_WORLD, rank < g->ranks ? 0 : MPI_UNDEFINED, rank, &comm);
        if (comm != MPI_COMM_NULL) {
            int dp = g->ranks / g->tp;
            zoe_train_config r;
            ckpt_test_config(&r, g->tp, dp, g->grad_accum, 0.0f, 2);
            if (llama) as_llama(&r);
            float got[STEPS];
            CHECK_OK(ckpt_session_open(&s, comm, &r, corpus));
            CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
            CHECK_OK(ckpt_session_steps(&s, STEPS, got));
            ckpt_session_close(&s);
            double want[STEPS - SAVE_AT], have[STEPS - SAVE_AT], worst = 0;
            for (int i = SAVE_AT; i < STEPS; i++) {
                want[i - SAVE_AT] = ref[i], have[i - SAVE_AT] = got[i];
                worst = fmax(worst, fabs(got[i] - ref[i]) / fabs(ref[i]));
            }
            char what[128];
            snprintf(what, sizeof what,
                     "%s losses saved at %dx%d, resumed at TP=%d x DP=%d (%d x %d)",
                     llama ? "Llama" : "GPT", save_tp, world / save_tp, g->tp, dp, r.micro_batch,
                     r.grad_accum);
            CHECK_CLOSE(have, want, STEPS - SAVE_AT, 0, 1e-5, what);
            if (rank == 0)
                printf("%s: worst relative difference %.2e over %d steps\n", what, worst,
                       STEPS - SAVE_AT);
            MPI_Comm_free(&comm);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        CHECK(system(cmd) == 0, "cleanup");
    }
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_ckpt_reshard CORPUS\n");
        return 2;
    }
    if (test_world_size() != 2 && test_world_size() != 4) {
        fprintf(stderr, "test_ckpt_reshard runs at 2 or 4 ranks\n");
        return 2;
    }
    reshard(argv[1], 0);
    reshard(argv[1], 1);
    return test_finish("test_ckpt_reshard");
}
