/* Resume bit for bit: a run saved at step 4 and resumed continues exactly like a run that was
 * never stopped, and saving does not disturb the run that saves. At every TP x DP grid the
 * world allows (TP = 1 and 2), DPU off and on (warm-up 2: with the one-step-stale `predict`
 * schedule the save at step 4 falls while a delayed update is in flight; with zoe-train's
 * default `exact` it falls while the step's update is still settling, and nothing is in flight
 * once settled: in fp32 without clipping every delayed step's speculation holds, in bf16 at
 * the clip of 1 and more than one rank a rank's speculation is undone and redone), dropout 0.1
 * and gradient accumulation 2. Compared exactly:
 * every loss, and the bytes of every tensor of model.safetensors and optimizer.safetensors
 * saved at the end, in fp32 and in bf16 (whose master and DPU staging live apart from the
 * weights). The reference run saves nothing until after its last step.
 * Under a sanitizer (test_sanitized) each grid runs three of its nine (DPU, dtype) cases, a
 * different three per grid: the grids scripts/sanitize runs (TP=1 at one rank, TP=1 and TP=2 at
 * two) together run all nine, and each grid every DPU schedule and every dtype. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "ckpt_test.h"

enum { STEPS = 8, SAVE_AT = 4 };

/* bf16_state: the optimizer state held in bf16 (stochastic rounding keyed by the step, so a
 * resumed run rounds as the one never stopped); its stale schedule is plain (predict needs fp32
 * state). */
static void one_case(const char *corpus, const char *root, int tp, int dpu, zoe_dtype dtype,
                     int bf16_state) {
    int dp = test_world_size() / tp;
    zoe_train_config c;
    ckpt_test_config(&c, tp, dp, 2, 0.1f, dpu ? 2 : 0);
    /* dpu: 0 off, 1 stale, 2 exact */
    c.dpu_schedule = dpu != 1 ? ZOE_DPU_EXACT : bf16_state ? ZOE_DPU_PLAIN : ZOE_DPU_PREDICT;
    c.dtype = dtype; /* fp32: the master is the weights; bf16: a separate master (and snapshot) */
    /* The exact schedule's two paths across a save (one bucket: a rank speculates when its part
     * of the norm is below the clip). fp32 without clipping: every delayed step speculates and
     * its guess holds. bf16 at the clip of 1: at 2 and 4 ranks a rank whose part of the norm is
     * below 1 speculates, the step clips (the norms are 2.0 .. 2.2), and its update is undone
     * and redone; at one rank the clip is certain and nothing speculates. Checked below, so that
     * a change that moved the norms fails rather than quietly tests less. */
    const int exact_holds = dpu == 2 && dtype == ZOE_F32;
    if (exact_holds) c.clip_grad = 0;
    if (bf16_state) c.main_params_dtype = c.exp_avg_dtype = c.exp_avg_sq_dtype = ZOE_STATE_BF16;
    char ref_dir[512], run_dir[512], res_dir[512], at[600], end_ref[600], end_run[600],
        end_res[600];
    char dt[32];
    snprintf(dt, sizeof dt, "%s%s", zoe_dtype_name(dtype), bf16_state ? "-bf16state" : "");
    snprintf(ref_dir, sizeof ref_dir, "%s/ref-tp%d-dpu%d-%s", root, tp, dpu, dt);
    snprintf(run_dir, sizeof run_dir, "%s/run-tp%d-dpu%d-%s", root, tp, dpu, dt);
    snprintf(res_dir, sizeof res_dir, "%s/res-tp%d-dpu%d-%s", root, tp, dpu, dt);
    float ref[STEPS], saver[STEPS], resumed[STEPS];
    ckpt_session s;
    /* the run that is never stopped */
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    CHECK_OK(zoe_trainer_save(s.tr, ref_dir, 0, end_ref, sizeof end_ref));
    int redone = 0;
    MPI_Allreduce(&s.redone_steps, &redone, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (exact_holds)
        CHECK(s.speculated_steps == STEPS - 2 && redone == 0,
              "exact, no clip: %d of the %d delayed steps speculated and held, %d redone",
              s.speculated_steps, STEPS - 2, redone);
    else if (dpu == 2 && test_world_size() > 1)
        CHECK(redone > 0, "exact, clip 1: %d rank-steps redone at %d ranks", redone,
              test_world_size());
    ckpt_session_close(&s);
    /* the run that saves at 4 and 6 and goes on */
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, saver));
    CHECK_OK(zoe_trainer_save(s.tr, run_dir, 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT + 2, saver));
    CHECK_OK(zoe_trainer_save(s.tr, run_dir, 0, NULL, 0));
    CHECK_OK(ckpt_session_steps(&s, STEPS, saver));
    CHECK_OK(zoe_trainer_save(s.tr, run_dir, 0, end_run, sizeof end_run));
    ckpt_session_close(&s);
    /* a new process's view: a fresh trainer resumed from step 4 */
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
    CHECK(zoe_trainer_steps_done(s.tr) == SAVE_AT, "resumed at step %d",
          zoe_trainer_steps_done(s.tr));
    CHECK_OK(ckpt_session_steps(&s, STEPS, resumed));
    CHECK_OK(zoe_trainer_save(s.tr, res_dir, 0, end_res, sizeof end_res));
    ckpt_session_close(&s);

    for (int i = 0; i < STEPS; i++) {
        CHECK(saver[i] == ref[i], "TP=%d x DP=%d DPU %d: saving changed step %d: %.9g vs %.9g", tp,
              dp, dpu, i, saver[i], ref[i]);
        if (i >= SAVE_AT)
            CHECK(resumed[i] == ref[i], "TP=%d x DP=%d DPU %d: resumed step %d: %.9g vs %.9g", tp,
                  dp, dpu, i, resumed[i], ref[i]);
    }
    if (test_rank() == 0) {
        const char *files[] = {"model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++) {
            CHECK(ckpt_test_same_tensors(end_ref, end_run, files[f]),
                  "TP=%d x DP=%d DPU %d: %s of the saving run", tp, dp, dpu, files[f]);
            CHECK(ckpt_test_same_tensors(end_ref, end_res, files[f]),
                  "TP=%d x DP=%d DPU %d: %s of the resumed run", tp, dp, dpu, files[f]);
        }
        char p[700];
        struct stat sb;
        snprintf(p, sizeof p, "%s/params-in-use.safetensors", at);
        CHECK((stat(p, &sb) == 0) == (dpu == 1),
              "params-in-use.safetensors is written exactly when an update is in flight (DPU %d)",
              dpu);
        printf("TP=%d x DP=%d, %s, DPU %s, dropout 0.1, grad-accum 2: resumed at step %d, losses "
               "%.4f .. %.4f equal, weights and moments equal\n",
               tp, dp, dt,
               dpu == 1 ? (bf16_state ? "plain" : "predict")
               : dpu    ? "exact"
                        : "off",
               SAVE_AT, ref[0], ref[STEPS - 1]);
    }
}

/* A checkpoint written with one state dtype resumes with another. The file holds the moments as
 * the host held them (BF16 tensors from bf16 state, F32 from fp32) and the master in fp32; bf16
 * state widens exactly to fp32, so bf16 -> load as fp32 -> save gives the same values in every
 * tensor; fp32 -> load as bf16 rounds to nearest, and the run goes on. At a grid other than the
 * saving one (TP x DP swapped where the world allows). */
static void convert_case(const char *corpus, const char *root) {
    int world = test_world_size();
    zoe_train_config c16, c32;
    ckpt_test_config(&c16, 1, world, 1, 0.0f, 2);
    c16.dtype = ZOE_BF16;
    c16.main_params_dtype = c16.exp_avg_dtype = c16.exp_avg_sq_dtype = ZOE_STATE_BF16;
    int tp = world >= 2 ? 2 : 1;
    ckpt_test_config(&c32, tp, world / tp, 1, 0.0f, 2);
    c32.dtype = ZOE_BF16;
    char dir16[512], dir32[512], at16[600], at32[600];
    snprintf(dir16, sizeof dir16, "%s/convert-bf16", root);
    snprintf(dir32, sizeof dir32, "%s/convert-fp32", root);
    float loss[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c16, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, loss));
    CHECK_OK(zoe_trainer_save(s.tr, dir16, 0, at16, sizeof at16));
    ckpt_session_close(&s);
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c32, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at16, NULL, 0));
    CHECK_OK(zoe_trainer_save(s.tr, dir32, 0, at32, sizeof at32));
    CHECK_OK(ckpt_session_steps(&s, STEPS, loss)); /* fp32 state goes on from bf16's */
    ckpt_session_close(&s);
    if (test_rank() == 0)
        for (int f = 0; f < 2; f++) {
            const char *files[] = {"model.safetensors", "optimizer.safetensors"};
            int bf16_in16 = 0, bf16_in32 = 0;
            CHECK(ckpt_test_same_values(at16, at32, files[f], &bf16_in16, &bf16_in32),
                  "%s: bf16 state saved, loaded as fp32 at TP=%d and saved again differs", files[f],
                  tp);
            /* the moments as held: every optimizer tensor BF16 from bf16 state, none from fp32;
             * the master always F32 */
            CHECK(bf16_in32 == 0, "%s: %d BF16 tensors saved from fp32 state", files[f], bf16_in32);
            CHECK(f == 0 ? bf16_in16 == 0 : bf16_in16 > 0 && bf16_in16 % 2 == 0,
                  "%s: %d BF16 tensors saved from bf16 state", files[f], bf16_in16);
        }
    /* and back: the fp32 checkpoint into bf16 state, which trains on */
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c16, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at32, NULL, 0));
    CHECK_OK(ckpt_session_steps(&s, STEPS, loss));
    CHECK(isfinite(loss[STEPS - 1]), "bf16 state resumed from fp32: loss %g", loss[STEPS - 1]);
    ckpt_session_close(&s);
    if (test_rank() == 0)
        printf("bf16 state saved at TP=1 x DP=%d, resumed as fp32 state at TP=%d x DP=%d: the same "
               "tensors; and back into bf16 state, loss %.4f at step %d\n",
               world, tp, world / tp, loss[STEPS - 1], STEPS);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_ckpt_resume CORPUS\n");
        return 2;
    }
    char root[256];
    ckpt_test_tmpdir(MPI_COMM_WORLD, root, sizeof root);
    const struct {
        zoe_dtype dtype;
        int bf16_state;
    } dtypes[] = {{ZOE_F32, 0}, {ZOE_BF16, 0}, {ZOE_BF16, 1}};
    for (int tp = 1; tp <= 2; tp++) {
        if (test_world_size() % tp) continue;
        const int grid = test_world_size() == 1 ? 0 : tp; /* 0, 1, 2: the sanitizer's share */
        for (int dpu = 0; dpu <= 2; dpu++)
            for (int d = 0; d < 3; d++)
                if (!test_sanitized() || (dpu + d) % 3 == grid)
                    one_case(argv[1], root, tp, dpu, dtypes[d].dtype, dtypes[d].bf16_state);
    }
    convert_case(argv[1], root);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", root);
        CHECK(system(cmd) == 0, "cleanup");
    }
    return test_finish("test_ckpt_resume");
}
