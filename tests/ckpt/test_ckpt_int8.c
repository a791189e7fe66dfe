/* Checkpoints of int8 moments (docs/checkpoint.md, "Compressed state"), at 1, 2 and 4 ranks.
 *
 * Resume bit for bit: bf16 weights, a bf16 master and int8 m and v, at TP = 1 and (where the
 * world allows) TP = 2, DPU off and under every schedule (warm-up 2, so the save at step 4 falls
 * while a delayed update is in flight, or with exact while the step's update is still settling
 * behind the forward's gate): plain, predict and dc (delay compensation, over the fp32
 * gradient partition and over the 2-byte one, main_grads_dtype bf16 with one micro-batch a
 * step), and exact over both gradient dtypes with its speculation held and with it undone and
 * redone (see EXACT_CLIP_REDOES). None of them needs more in the file than the state and
 * trainer.json: dc and predict recompute the last step from the master and moments as stored and
 * the last lr (trainer.json), exact leaves nothing speculated once the step is settled, and the
 * stale schedules' weights in use go to params-in-use.safetensors. A run saved at step 4 and
 * resumed by a fresh trainer gives the never-stopped run's losses and, at the end, the same bytes
 * in every tensor of model and optimizer files. The file holds the int8 moments' values in F32 (a
 * block's scale is the partition's, not a tensor's), exact; the load writes them back through the
 * blocks twice, so that a block written in several pieces gets its own codes and scale back (with
 * one pass the TP = 2 cases parted at the first step after the resume when blocks still held
 * several tensors: checked when this test was written).
 *
 * Conversion, at another grid (TP x DP swapped where the world allows): int8 moments saved,
 * loaded into fp32 state and saved again hold the same values in every tensor (the values of
 * int8 codes are fp32 numbers); fp32 and bf16 state saved and loaded into int8 moments train on
 * (quantised on load), as does int8 loaded into bf16 state. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include "ckpt_test.h"
#include "engine/config/sizing.h"
#include "engine/train/trainer_impl.h"
#include "kernels/adam_state.h"
#include "models/gpt.h"

enum { STEPS = 7, SAVE_AT = 4 };

static void int8_state(zoe_train_config *c) {
    c->dtype = ZOE_BF16;
    c->main_params_dtype = ZOE_STATE_BF16;
    c->exp_avg_dtype = c->exp_avg_sq_dtype = ZOE_STATE_INT8;
}

/* One resume case: a DPU schedule (dpu_warmup 2 when on), the host gradient partition's dtype
 * (fp32 with grad-accum 2, or bf16 with one micro-batch a step: main_grads_dtype accumulates
 * nothing) and the clip threshold, which decides which path of the exact schedule runs. */
typedef struct resume_case_spec {
    int tp;
    int dpu; /* 0: DPU off; 1: on, with schedule */
    zoe_dpu_schedule schedule;
    zoe_dtype grads_dtype; /* ZOE_F32 or ZOE_BF16 */
    float clip_grad;
} resume_case_spec;

/* The clip thresholds of the exact cases. The model's gradients fit in one bucket, so a rank
 * speculates on it when its own part of the norm is below the clip, and the guess holds when
 * the global norm is too. The norms after the warm-up are 2.0 .. 2.2: with no clip (0) every
 * speculation holds; with 1.8, a rank whose part of the norm (over DP or TP > 1) is below it
 * speculates and the step clips, so its update is undone (the undo over int8 moments and the
 * gradient as stored, 2-byte or fp32) and redone; at one rank the clip is certain at the bucket
 * and nothing speculates. The test checks that each path ran (a change of numerics that moved
 * the norms would fail it rather than quietly test less). */
#define EXACT_CLIP_HOLDS  0.0f
#define EXACT_CLIP_REDOES 1.8f

static const char *schedule_name(const resume_case_spec *k) {
    if (!k->dpu) return "off";
    switch (k->schedule) {
    case ZOE_DPU_PLAIN:
        return "plain";
    case ZOE_DPU_PREDICT:
        return "predict";
    case ZOE_DPU_DC:
        return "dc";
    case ZOE_DPU_EXACT:
        return k->clip_grad > 0 ? "exact (clipping)" : "exact (no clip)";
    }
    return "?";
}

static void resume_case(const char *corpus, const char *root, const resume_case_spec *k) {
    int tp = k->tp, dp = test_world_size() / tp;
    zoe_train_config c;
    ckpt_test_config(&c, tp, dp, k->grads_dtype == ZOE_F32 ? 2 : 1, 0.1f, k->dpu ? 2 : 0);
    c.dpu_schedule = k->schedule;
    int8_state(&c);
    c.main_grads_dtype = k->grads_dtype;
    c.clip_grad = k->clip_grad;
    const char *sched = schedule_name(k), *grads = zoe_dtype_name(k->grads_dtype);
    char ref_dir[512], res_dir[512], at[600], end_ref[600], end_res[600];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref-tp%d-dpu%d-%d-%s-clip%g", root, tp, k->dpu,
             (int)k->schedule, grads, (double)k->clip_grad);
    snprintf(res_dir, sizeof res_dir, "%s/res-tp%d-dpu%d-%d-%s-clip%g", root, tp, k->dpu,
             (int)k->schedule, grads, (double)k->clip_grad);
    float ref[STEPS], resumed[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, ref));
    CHECK_OK(zoe_trainer_save(s.tr, ref_dir, 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    CHECK_OK(zoe_trainer_save(s.tr, ref_dir, 0, end_ref, sizeof end_ref));
    /* the paths of the exact schedule this case is meant to take (see EXACT_CLIP_REDOES) */
    int paths[2] = {s.speculated_steps, s.redone_steps}, all[2];
    MPI_Allreduce(paths, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ckpt_session_close(&s);
    if (k->dpu && k->schedule == ZOE_DPU_EXACT && k->clip_grad <= 0)
        CHECK(paths[0] == STEPS - 2 && all[1] == 0,
              "exact, no clip: %d of the %d delayed steps speculated and held on this rank, %d "
              "redone",
              paths[0], STEPS - 2, all[1]);
    if (k->dpu && k->schedule == ZOE_DPU_EXACT && k->clip_grad > 0 && test_world_size() > 1)
        CHECK(all[1] > 0, "exact, clip %g: %d rank-steps redone (undone and done again)",
              (double)k->clip_grad, all[1]);
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &c, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
    CHECK_OK(ckpt_session_steps(&s, STEPS, resumed));
    CHECK_OK(zoe_trainer_save(s.tr, res_dir, 0, end_res, sizeof end_res));
    ckpt_session_close(&s);
    for (int i = SAVE_AT; i < STEPS; i++)
        CHECK(resumed[i] == ref[i],
              "int8 TP=%d x DP=%d DPU %s, %s grads: resumed step %d: %.9g vs %.9g", tp, dp, sched,
              grads, i, resumed[i], ref[i]);
    if (test_rank() == 0) {
        const char *files[] = {"model.safetensors", "optimizer.safetensors"};
        for (int f = 0; f < 2; f++)
            CHECK(ckpt_test_same_tensors(end_ref, end_res, files[f]),
                  "int8 TP=%d x DP=%d DPU %s, %s grads: %s of the resumed run", tp, dp, sched,
                  grads, files[f]);
        printf("int8 moments, TP=%d x DP=%d, DPU %s, %s grads: resumed at step %d, losses %.4f .. "
               "%.4f equal, weights and moments equal (%d steps held, %d redone over the ranks)\n",
               tp, dp, sched, grads, SAVE_AT, ref[0], ref[STEPS - 1], all[0], all[1]);
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

/* Loads at into configuration to on the ranks of comm and saves it at once into dir: *saved
 * gets the checkpoint. */
static void load_save(MPI_Comm comm, const char *corpus, const zoe_train_config *to, const char *at,
                      const char *dir, char *saved, size_t cap) {
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, comm, to, corpus));
    CHECK_OK(zoe_trainer_load(s.tr, at, NULL, 0));
    CHECK_OK(zoe_trainer_save(s.tr, dir, 0, saved, cap));
    ckpt_session_close(&s);
}

static long long file_bytes(const char *dir, const char *file) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* The moments as held (docs/checkpoint.md, "Compressed state"): int8 m and v at TP = 1 x DP =
 * world, saved at step SAVE_AT of a run that goes on to STEPS (the reference).
 * - The same TP at another DP (TP = 1 x DP = world / 2 on half the ranks, the micro-batch
 *   doubled: the same global batch) loads codes and scales bit for bit: saved again at once,
 *   the optimizer file is the same.
 * - An older checkpoint (the moments' values in F32, no scales: ckpt_test_write_legacy_int8)
 *   loads into the same codes and scales (saved again: the same file) and resumes bit for bit.
 * - The bytes: the optimizer file as held against the older one, 2 + 8 / 256 bytes per
 *   parameter (two 1-byte codes, two 4-byte scales per block of 256) against 8; the test model's
 *   one-dimensional tensors (64 elements: one block each) and the header add a little, so the
 *   ratio must lie in [0.2539, 0.27].
 * - Another TP (TP = 2 x DP = world / 2, the micro-batch doubled) dequantises through the file's
 * blocks and requantises at its own: it trains on with losses within RESHARD_TOL of the reference's
 *   (measured: see docs/checkpoint.md). */
#define RESHARD_TOL 5e-3
/* Every int8 moment of at_int8 (written at TP tp by configuration c) against the F32 values
 * that at_f32 holds after loading it into fp32 state at another TP: walked shard by shard, each
 * local element k of shard s (the model described at TP tp) is code[global] x scale[s, k / 256]
 * (signed for m), bit for bit; the load finds each element's shard the other way round. */
static int dequantised_match(const zoe_train_config *c, int tp, const char *at_int8,
                             const char *at_f32) {
    zoe_gpt_config gc = zoe_train_gpt_config(c);
    zoe_gpt *described[2] = {NULL, NULL};
    int ok = tp <= 2;
    for (int r = 0; ok && r < tp; r++) ok = zoe_gpt_describe(&gc, tp, r, &described[r]) == ZOE_OK;
    char pi[700], pf[700], name[300];
    snprintf(pi, sizeof pi, "%s/optimizer.safetensors", at_int8);
    snprintf(pf, sizeof pf, "%s/optimizer.safetensors", at_f32);
    const char *suffix[2] = {".exp_avg", ".exp_avg_sq"};
    long long checked = 0;
    for (int t = 0; ok && t < zoe_gpt_num_tensors(described[0]); t++)
        for (int m = 0; ok && m < 2; m++) {
            const zoe_tp_param *p0 = zoe_gpt_tensor(described[0], t);
            snprintf(name, sizeof name, "%s%s", p0->name, suffix[m]);
            size_t ncodes = 0, nvalues = 0, nscales = 0;
            void *codes = ckpt_test_read_tensor(pi, name, &ncodes);
            float *values = ckpt_test_read_tensor(pf, name, &nvalues);
            snprintf(name, sizeof name, "%s%s.scales", p0->name, suffix[m]);
            float *scales = ckpt_test_read_tensor(pi, name, &nscales);
            int shards = tp / p0->replicas;
            int64_t nb = (p0->local_numel + 255) / 256, gc_cols = p0->global_shape[1];
            ok = codes && values && scales && nvalues == 4 * ncodes &&
                 nscales == (size_t)(shards * nb) * 4;
            for (int sh = 0; ok && sh < shards; sh++) {
                const zoe_tp_param *p = zoe_gpt_tensor(described[sh * p0->replicas], t);
                for (int64_t k = 0; ok && k < p->local_numel; k++) {
                    int64_t row = p->local_offset[0] + k / p->local_shape[1];
                    int64_t g = row * gc_cols + p->local_offset[1] + k % p->local_shape[1];
                    if ((size_t)g >= ncodes) continue; /* a padding row of the vocabulary */
                    float scale = scales[sh * nb + k / 256], want;
                    if (m == 0) {
                        int code = ((const int8_t *)codes)[g];
                        want = (code < 0 ? -1.0f : 1.0f) *
                               zoe_adam_int8_m_unit(code < 0 ? -code : code) * scale;
                    } else {
                        want = zoe_adam_int8_v_unit(((const uint8_t *)codes)[g]) * scale;
                    }
                    ok = memcmp(&want, &values[g], sizeof want) == 0;
                    if (!ok)
                        fprintf(stderr, "%s%s element %lld: %g, the file's blocks give %g\n",
                                p0->name, suffix[m], (long long)g, values[g], want);
                    checked++;
                }
            }
            free(codes), free(values), free(scales);
        }
    for (int r = 0; r < 2; r++) zoe_gpt_destroy(described[r]);
    return ok && checked > 0;
}

/* Loads at (written by configuration from, whose run went on to the losses ref) into
 * configuration to, at another TP, and trains on: losses within RESHARD_TOL of ref. */
static void reshard(const char *corpus, const zoe_train_config *from, const zoe_train_config *to,
                    const char *at, const float *ref) {
    float resumed[STEPS];
    ckpt_session r;
    CHECK_OK(ckpt_session_open(&r, MPI_COMM_WORLD, to, corpus));
    CHECK_OK(zoe_trainer_load(r.tr, at, NULL, 0));
    CHECK_OK(ckpt_session_steps(&r, STEPS, resumed));
    ckpt_session_close(&r);
    double worst = 0;
    for (int i = SAVE_AT; i < STEPS; i++) {
        double diff = fabs((double)resumed[i] - (double)ref[i]);
        worst = diff > worst ? diff : worst;
        CHECK(diff <= RESHARD_TOL, "int8 resharded TP %d -> %d: step %d loss %.6f vs %.6f",
              from->tp, to->tp, i, resumed[i], ref[i]);
    }
    if (test_rank() == 0)
        printf("int8 moments saved at TP=%d, resumed at TP=%d (requantised): losses within %.2e "
               "of the un-resharded run (tolerance %.0e)\n",
               from->tp, to->tp, worst, RESHARD_TOL);
}

static void held_case(const char *corpus, const char *root) {
    int world = test_world_size();
    zoe_train_config q, q_dp, q_tp;
    ckpt_test_config(&q, 1, world, 1, 0.0f, 0);
    int8_state(&q);
    ckpt_test_config(&q_dp, 1, world / 2 ? world / 2 : 1, 1, 0.0f, 0);
    int8_state(&q_dp);
    ckpt_test_config(&q_tp, 2, world / 2 ? world / 2 : 1, 1, 0.0f, 0);
    int8_state(&q_tp);
    char d[5][512], at[600], at_legacy[600], at_dp[600], again[600], again_legacy[600];
    const char *names[] = {"held", "held-legacy", "held-dp", "held-again", "held-again-legacy"};
    for (int i = 0; i < 5; i++) snprintf(d[i], sizeof d[i], "%s/%s", root, names[i]);
    float ref[STEPS];
    ckpt_session s;
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &q, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, ref));
    CHECK_OK(zoe_trainer_save(s.tr, d[0], 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    ckpt_session_close(&s);

    snprintf(at_legacy, sizeof at_legacy, "%s/step-legacy", d[1]);
    int written = 1;
    if (test_rank() == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", d[1]);
        written = system(cmd) == 0 && ckpt_test_write_legacy_int8(at, at_legacy);
    }
    MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(written, "older checkpoint written from %s", at);
    load_save(MPI_COMM_WORLD, corpus, &q, at_legacy, d[4], again_legacy, sizeof again_legacy);
    float from_legacy = load_run(corpus, &q, at_legacy, NULL, NULL, 0);
    CHECK(from_legacy == ref[STEPS - 1], "resumed from the older format: %.9g vs %.9g", from_legacy,
          ref[STEPS - 1]);
    if (world >= 2) {
        MPI_Comm half;
        MPI_Comm_split(MPI_COMM_WORLD, test_rank() < world / 2 ? 0 : MPI_UNDEFINED, test_rank(),
                       &half);
        if (half != MPI_COMM_NULL) {
            load_save(half, corpus, &q_dp, at, d[2], at_dp, sizeof at_dp);
            MPI_Comm_free(&half);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    load_save(MPI_COMM_WORLD, corpus, &q, at, d[3], again, sizeof again);
    if (test_rank() == 0) {
        CHECK(ckpt_test_same_tensors(at, again, "optimizer.safetensors"),
              "int8 moments loaded and saved at the same grid: the same codes and scales");
        CHECK(ckpt_test_same_tensors(at, again_legacy, "optimizer.safetensors"),
              "int8 moments from an older checkpoint (F32 values): the same codes and scales");
        if (world >= 2)
            CHECK(ckpt_test_same_tensors(at, at_dp, "optimizer.safetensors"),
                  "int8 moments saved at DP %d, loaded at DP %d and saved: the same bytes", world,
                  world / 2);
        long long held = file_bytes(at, "optimizer.safetensors"),
                  legacy = file_bytes(at_legacy, "optimizer.safetensors");
        double ratio = (double)held / (double)legacy;
        CHECK(held > 0 && legacy > 0 && ratio >= (2 + 8.0 / 256) / 8 && ratio <= 0.27,
              "optimizer file as held %lld bytes, as F32 values %lld: ratio %.4f", held, legacy,
              ratio);
        printf("int8 moments as held: optimizer file %lld bytes, %lld as F32 values (ratio %.4f, "
               "2 + 8/256 against 8 bytes a parameter: %.4f); loaded at the same TP (DP %d and "
               "%d) and from the older format: the same codes and scales\n",
               held, legacy, ratio, (2 + 8.0 / 256) / 8, world, world >= 2 ? world / 2 : world);
    }
    if (world < 2) return; /* another TP needs two ranks */
    reshard(corpus, &q, &q_tp, at, ref);
    /* and back: blocks of two shards, split by rows and by columns, into one */
    snprintf(d[0], sizeof d[0], "%s/held-tp2", root);
    CHECK_OK(ckpt_session_open(&s, MPI_COMM_WORLD, &q_tp, corpus));
    CHECK_OK(ckpt_session_steps(&s, SAVE_AT, ref));
    CHECK_OK(zoe_trainer_save(s.tr, d[0], 0, at, sizeof at));
    CHECK_OK(ckpt_session_steps(&s, STEPS, ref));
    ckpt_session_close(&s);
    reshard(corpus, &q_tp, &q, at, ref);
    zoe_train_config f = q;
    f.main_params_dtype = f.exp_avg_dtype = f.exp_avg_sq_dtype = ZOE_STATE_FP32;
    char as_f32[600];
    snprintf(d[1], sizeof d[1], "%s/held-tp2-as-fp32", root);
    load_save(MPI_COMM_WORLD, corpus, &f, at, d[1], as_f32, sizeof as_f32);
    if (test_rank() == 0)
        CHECK(dequantised_match(&q_tp, 2, at, as_f32),
              "int8 moments written at TP 2, loaded into fp32 state at TP 1: the values of the "
              "file's codes through its blocks");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) return fprintf(stderr, "usage: test_ckpt_int8 CORPUS\n"), 2;
    char root[256];
    ckpt_test_tmpdir(MPI_COMM_WORLD, root, sizeof root);
    for (int tp = 1; tp <= 2; tp++) {
        if (test_world_size() % tp) continue;
        /* Under a sanitizer each grid runs its share of the cases, a different share per grid:
         * the grids scripts/sanitize runs (TP=1 at one rank, TP=1 and TP=2 at two) together run
         * all of them, and the redone ones at two ranks, where they redo. */
        const int grid = test_world_size() == 1 ? 0 : tp;
        const zoe_dtype f32 = ZOE_F32, bf16 = ZOE_BF16;
        const float holds = EXACT_CLIP_HOLDS, redoes = EXACT_CLIP_REDOES;
        /* in this order so that the sanitizer's two-rank grids get the redone exact cases */
        const resume_case_spec cases[] = {
            {.tp = tp, .dpu = 0, .schedule = ZOE_DPU_PLAIN, .grads_dtype = f32, .clip_grad = 1},
            {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_PLAIN, .grads_dtype = f32, .clip_grad = 1},
            {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_DC, .grads_dtype = f32, .clip_grad = 1},
            {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_PREDICT, .grads_dtype = bf16, .clip_grad = 1},
            {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_DC, .grads_dtype = bf16, .clip_grad = 1},
            {.tp = tp,
             .dpu = 1,
             .schedule = ZOE_DPU_EXACT,
             .grads_dtype = f32,
             .clip_grad = redoes},
            {.tp = tp,
             .dpu = 1,
             .schedule = ZOE_DPU_EXACT,
             .grads_dtype = bf16,
             .clip_grad = holds},
            {.tp = tp,
             .dpu = 1,
             .schedule = ZOE_DPU_EXACT,
             .grads_dtype = bf16,
             .clip_grad = redoes},
        };
        for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
            if (!test_sanitized() || i % 3 == grid) resume_case(argv[1], root, &cases[i]);
    }
    convert_case(argv[1], root);
    held_case(argv[1], root);
    ckpt_test_rmdir(MPI_COMM_WORLD, root);
    return test_finish("test_ckpt_int8");
}
