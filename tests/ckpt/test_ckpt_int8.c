/* Checkpoints of int8 moments (docs/checkpoint.md, "Compressed state"), at 1, 2 and 4 ranks.
 *
 * Resume bit for bit: bf16 weights, a bf16 master and int8 m and v, at TP = 1 and (where the
 * world allows) TP = 2, DPU off and plain (warm-up 2, so the save at step 4 falls while a
 * delayed update is in flight). A run saved at step 4 and resumed by a fresh trainer gives the
 * never-stopped run's losses and, at the end, the same bytes in every tensor of model and
 * optimizer files. The file holds the int8 moments' values in F32 (a block's scale is the
 * partition's, not a tensor's), exact; the load writes them back through the blocks twice, so
 * that a block written in several pieces gets its own codes and scale back (with one pass the
 * TP = 2 cases parted at the first step after the resume when blocks still held several
 * tensors: checked when this test was written).
 *
 * Conversion, at another grid (TP x DP swapped where the world allows): int8 moments saved,
 * loaded into fp32 state and saved again hold the same values in every tensor (the values of
 * int8 codes are fp32 numbers); fp32 and bf16 state saved and loaded into int8 moments train on
 * (quantised on load), as does int8 loaded into bf16 state. */
#include <math.h>
#include <stdlib.h>
#include "ckpt_test.h"

enum { STEPS = 7, SAVE_AT = 4 };

static void int8_state(zoe_train_config *c) {
    c->dtype = ZOE_BF16;
    c->main_params_dtype = ZOE_STATE_BF16;
    c->exp_avg_dtype = c->exp_avg_sq_dtype = ZOE_STATE_INT8;
}

static void resume_case(const char *corpus, const char *root, int tp, int dpu) {
    int dp = test_world_size() / tp;
    zoe_train_config c;
    ckpt_test_config(&c, tp, dp, 2, 0.1f, dpu ? 2 : 0);
    c.dpu_schedule = ZOE_DPU_PLAIN;
    int8_state(&c);
    char ref_dir[512], res_dir[512], at[600], end_ref[600], end_res[600];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref-tp%d-dpu%d", root, tp, dpu);
    snprintf(res_dir, sizeof res_dir, "%s/res-tp%d-dpu%d", root, tp, dpu);
    float ref[STEPS], resumed[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, ref));
    CHECK_OK(zoe_trainer_save(s.tr, ref_dir, 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    CHECK_OK(zoe_trainer_save(s.tr, ref_dir, 0, end_ref, sizeof end_ref));
    ckpt_session_close(&s);
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
    CHECK_OK(ckpt_session_steps(&s, STEPS, resumed));
    CHECK_OK(zoe_trainer_save(s.tr, res_dir, 0, end_res, sizeof end_res));
    ckpt_session_close(&s);
    for (int i = SAVE_AT; i < STEPS; i++)
        CHECK(resumed[i] == ref[i], "int8 TP=%d x DP=%d DPU %d: resumed step %d: %.9g vs %.9g", tp,
              dp, dpu, i, resumed[i], ref[i]);
    if (test_rank() == 0) {
        const char *files[] = {"model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++)
            CHECK(ckpt_test_same_tensors(end_ref, end_res, files[f]),
                  "int8 TP=%d x DP=%d DPU %d: %s of the resumed run", tp, dp, dpu, files[f]);
        printf("int8 moments, TP=%d x DP=%d, DPU %s: resumed at step %d, losses %.4f .. %.4f "
               "equal, weights and moments equal\n",
               tp, dp, dpu ? "plain" : "off", SAVE_AT, ref[0], ref[STEPS - 1]);
    }
}

/* Saves a run of configuration from at step SAVE_AT into dir; *at gets the checkpoint. */
static void save_run(const char *corpus, const zoe_train_config *from, const char *dir, char *at,
                     size_t cap) {
    float loss[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, from, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, loss));
    CHECK_OK(zoe_trainer_save(s.tr, dir, 0, at, cap));
    ckpt_session_close(&s);
}

/* Loads at into configuration to, saves it into dir (when not NULL) and trains on: the loss at
 * the last step. */
static float load_run(const char *corpus, const zoe_train_config *to, const char *at,
                      const char *dir, char *saved, size_t cap) {
    float loss[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, to, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
    if (dir) CHECK_OK(zoe_trainer_save(s.tr, dir, 0, saved, cap));
    CHECK_OK(ckpt_session_steps(&s, STEPS, loss));
    ckpt_session_close(&s);
    return loss[STEPS - 1];
}

static void convert_case(const char *corpus, const char *root) {
    int world = test_world_size(), tp = world >= 2 ? 2 : 1;
    zoe_train_config q, f, b; /* int8 moments at TP 1; fp32 and bf16 state at TP tp */
    ckpt_test_config(&q, 1, world, 1, 0.0f, 0);
    int8_state(&q);
    ckpt_test_config(&f, tp, world / tp, 1, 0.0f, 0);
    f.dtype = ZOE_BF16;
    b = f;
    b.main_params_dtype = b.exp_avg_dtype = b.exp_avg_sq_dtype = ZOE_STATE_BF16;
    char d[4][512], at_q[600], at_qf[600], at_f[600], at_b[600];
    const char *names[] = {"int8", "int8-as-fp32", "fp32", "bf16"};
    for (int i = 0; i < 4; i++) snprintf(d[i], sizeof d[i], "%s/convert-%s", root, names[i]);
    save_run(corpus, &q, d[0], at_q, sizeof at_q);
    float as_fp32 = load_run(corpus, &f, at_q, d[1], at_qf, sizeof at_qf);
    if (test_rank() == 0)
        for (int k = 0; k < 2; k++) {
            const char *files[] = {"model.safetensors", "optimizer.safetensors"};
            int bf16_q = 0, bf16_f = 0;
            CHECK(ckpt_test_same_values(at_q, at_qf, files[k], &bf16_q, &bf16_f),
                  "%s: int8 moments saved, loaded as fp32 state at TP=%d and saved again differs",
                  files[k], tp);
        }
    float as_bf16 = load_run(corpus, &b, at_q, NULL, NULL, 0);
    save_run(corpus, &f, d[2], at_f, sizeof at_f);
    save_run(corpus, &b, d[3], at_b, sizeof at_b);
    float from_fp32 = load_run(corpus, &q, at_f, NULL, NULL, 0);
    float from_bf16 = load_run(corpus, &q, at_b, NULL, NULL, 0);
    CHECK(isfinite(as_fp32) && isfinite(as_bf16) && isfinite(from_fp32) && isfinite(from_bf16),
          "converted runs: losses %g %g %g %g", as_fp32, as_bf16, from_fp32, from_bf16);
    if (test_rank() == 0)
        printf("int8 moments saved at TP=1 x DP=%d, resumed as fp32 state at TP=%d: the same "
               "values; the last losses of int8 -> fp32 %.4f, int8 -> bf16 %.4f, fp32 -> int8 "
               "%.4f, bf16 -> int8 %.4f\n",
               world, tp, as_fp32, as_bf16, from_fp32, from_bf16);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) return fprintf(stderr, "usage: test_ckpt_int8 CORPUS\n"), 2;
    char root[256];
    ckpt_test_tmpdir(MPI_COMM_WORLD, root, sizeof root);
    for (int tp = 1; tp <= 2; tp++) {
        if (test_world_size() % tp) continue;
        resume_case(argv[1], root, tp, 0);
        resume_case(argv[1], root, tp, 1);
    }
    convert_case(argv[1], root);
    ckpt_test_rmdir(MPI_COMM_WORLD, root);
    return test_finish("test_ckpt_int8");
}
