/* Streamed weights (--offload-params cpu, docs/offload.md "Streamed weights") against resident
 * ones, at 1, 2 and 4 ranks: the streams move bytes and never change math, so everything must
 * agree bit for bit.
 *
 * For each grid the world allows (1x1; 2x1 and 1x2; 2x2 and 4x1: TP x DP), each DPU schedule
 * (off, plain, predict, dc, exact; warm-up 2, so the delayed updates run from step 3 on) and two
 * kinds of state (fp32 weights and state: the master is the host partition itself; bf16 weights,
 * a bf16 master and int8 moments: the host step writes the weights beside its master), a run with
 * streamed weights and one with resident weights train the same batches for STEPS steps, with
 * two micro-batches a step and dropout (recomputation on in both, as streaming turns it on),
 * then save. Checked: every loss equal (memcmp), and every tensor of the model, optimizer and
 * weights-in-use files the same bytes. The exact cases clip at 1 where every step clips, so its
 * speculation is undone and redone as well as held (both paths of the gate the fetches wait on).
 *
 * Each block's weights stream a part at a time (tensor_parallel/layers.h: attention in, its
 * projection, MLP in, fc2), the recomputation's fc2 held on into the backward: the cases above
 * recompute; a GPT and a Llama without recomputation (exact schedule) read each part once a pass.
 *
 * The same for a Llama whose untied LM head streams with the final norm (exact schedule), and for
 * a wider GPT in 1 MiB buckets (exact schedule, clipping), whose streamed run keeps its gradient
 * buckets in the ring by bytes (docs/offload.md, "The gradient ring") and its resident run in the
 * ring of fixed slots: the buckets drain in the order they completed in both, so even the norm's
 * sum of squares adds up alike.
 *
 * With DPU off and fp32 state, downstream of both checkpoints: the generator's logits and greedy
 * tokens, and runs initialised from their Hugging Face export. Every equality case also
 * evaluates halfway, and its validation loss must agree.
 *
 * Resume across modes, under the exact and plain schedules with fp32 state: a resident run saved
 * at step SAVE_AT and resumed with streamed weights (and the other way round) ends with the
 * uninterrupted resident run's losses and bytes.
 *
 * Memory: a 16-layer model's streamed run holds its weight stream's few layers on the device, not
 * the weights: its device peak (zoe_device_memory_stats, every zoe_device_alloc byte on the CPU
 * backend) is below the resident run's by more than half the weights' bytes (a ring of 2 block
 * parts, the embedding and, with DP > 1, a gather staging of the larger unit stand for 16
 * blocks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt_test.h"
#include "engine/train/trainer_impl.h"
#include "runtime/error.h"
#include "zoe/generate.h"

enum { STEPS = 6, SAVE_AT = 3 };

static const char *corpus;

typedef struct stream_case {
    int tp;
    int dpu; /* 0: off */
    zoe_dpu_schedule schedule;
    int int8;  /* 1: bf16 weights and master, int8 moments */
    int llama; /* 1: Llama (RMSNorm, RoPE, 2 KV heads) with an untied LM head in the tail unit */
    /* 1: hidden 256 in 1 MiB buckets: a block's gradients span several buckets, which the
     * streamed run's gradient ring by bytes places around its buffer (the resident run's ring of
     * fixed slots has the same buckets) */
    int buckets;
    int no_recompute; /* 1: every block's activations kept (--no-recompute after streaming) */
} stream_case;

static const char *schedule_name(const stream_case *k) {
    if (!k->dpu) return "off";
    static const char *names[] = {"plain", "predict", "dc", "exact"};
    return names[k->schedule];
}

static void config(zoe_train_config *c, const stream_case *k, int dp, int streamed) {
    ckpt_test_config(c, k->tp, dp, 2, 0.1f, k->dpu ? 2 : 0);
    c->dpu = k->dpu ? ZOE_DPU_ON : ZOE_DPU_OFF;
    c->dpu_schedule = k->schedule;
    c->recompute = !k->no_recompute;
    c->clip_grad = k->dpu && k->schedule == ZOE_DPU_EXACT ? 1.0f : 0.0f;
    if (k->int8) {
        c->dtype = ZOE_BF16;
        c->main_params_dtype = ZOE_STATE_BF16;
        c->exp_avg_dtype = c->exp_avg_sq_dtype = ZOE_STATE_INT8;
    }
    c->offload_params = streamed ? ZOE_OFFLOAD_PARAMS_CPU : ZOE_OFFLOAD_PARAMS_NONE;
    if (k->buckets) c->model.hidden = 256, c->bucket_mb = 1;
    if (k->llama) {
        c->model.family = ZOE_MODEL_LLAMA;
        c->model.kv_heads = 2;
        c->model.tie_embeddings = 0;
        c->model.dropout = 0; /* the Llama block has none */
    }
}

/* The validation loss of one batch (the loader's first), as an evaluation between steps. */
static zoe_status eval_loss(ckpt_session *s, float *loss) {
    ZOE_TRY(zoe_loader_fetch(s->loader, 0, 0, s->tokens, s->targets));
    ZOE_TRY(zoe_trainer_eval_begin(s->tr));
    ZOE_TRY(zoe_trainer_eval_micro_batch(s->tr, s->tokens, s->targets));
    return zoe_trainer_eval_end(s->tr, loss);
}

/* Trains from a fresh trainer (or the checkpoint `resume`) up to step `to`, with an evaluation
 * halfway (its loss into *val, when given: under a stale schedule it puts the weights in use
 * back), saving into root (the checkpoint's directory into saved). */
static zoe_status run(MPI_Comm comm, const zoe_train_config *c, const char *resume, int to,
                      const char *root, char saved[300], float *losses, size_t *device_peak,
                      float *val) {
    ckpt_session s;
    zoe_status st = ckpt_session_open(&s, comm, c, corpus);
    if (st == ZOE_OK && resume) st = zoe_trainer_load(s.tr, resume, NULL, 0);
    if (st == ZOE_OK && val) st = ckpt_session_steps(&s, to / 2, losses);
    if (st == ZOE_OK && val) st = eval_loss(&s, val);
    if (st == ZOE_OK) st = ckpt_session_steps(&s, to, losses);
    if (st == ZOE_OK) st = zoe_trainer_save(s.tr, root, 0, saved, 300);
    zoe_memory_stats ms = {0};
    if (st == ZOE_OK && device_peak) st = zoe_device_memory_stats(zoe_trainer_device(s.tr), &ms);
    if (device_peak) *device_peak = ms.device_peak;
    ckpt_session_close(&s);
    return st;
}

/* What the checkpoints of both modes give downstream: the generator (which streams for the
 * streamed run's checkpoint, its trainer.json naming the mode) scores a sequence and generates
 * greedily alike; and their Hugging Face export, imported with streamed and with resident weights
 * (a unit at a time through the stream's buffers, or into the parameter buffer), trains alike. */
static void outputs_case(MPI_Comm comm, char dir[2][300], const char *what) {
    enum { N = 12, NEW = 8 };
    int32_t prompt[N];
    for (int i = 0; i < N; i++) prompt[i] = (int32_t)(31 * i + 7) % ZOE_BYTE_VOCAB_SIZE;
    float *logits[2];
    int32_t tokens[2][NEW];
    int64_t made[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        zoe_generate_config gc = ZOE_GENERATE_CONFIG_INITIALIZER;
        snprintf(gc.checkpoint, sizeof gc.checkpoint, "%s", dir[m]);
        gc.max_new_tokens = NEW;
        logits[m] = calloc((size_t)N * ZOE_BYTE_VOCAB_SIZE, sizeof(float));
        zoe_generator *g = NULL;
        zoe_status st = zoe_generator_create(comm, &gc, &g);
        if (st == ZOE_OK) st = zoe_generator_logits(g, prompt, N, logits[m]);
        if (st == ZOE_OK) st = zoe_generator_generate(g, prompt, N, -1, tokens[m], &made[m]);
        CHECK(st == ZOE_OK, "%s: generator of the %s checkpoint: %s", what,
              m ? "streamed" : "resident", zoe_last_error());
        zoe_generator_destroy(g);
    }
    CHECK(memcmp(logits[0], logits[1], (size_t)N * ZOE_BYTE_VOCAB_SIZE * sizeof(float)) == 0,
          "%s: the generator's logits differ between the checkpoints", what);
    CHECK(made[0] == NEW && made[1] == NEW && memcmp(tokens[0], tokens[1], sizeof tokens[0]) == 0,
          "%s: greedy generation differs between the checkpoints", what);
    free(logits[0]), free(logits[1]);

    char hf[256];
    ckpt_test_tmpdir(comm, hf, sizeof hf);
    int rank;
    MPI_Comm_rank(comm, &rank);
    zoe_status st = rank == 0 ? zoe_checkpoint_export_hf(dir[0], hf) : ZOE_OK;
    CHECK(st == ZOE_OK, "%s: export: %s", what, zoe_last_error());
    MPI_Barrier(comm);
    float losses[2][2];
    char root[2][256], saved[2][300];
    for (int m = 0; m < 2; m++) {
        stream_case k = {.tp = 1};
        zoe_train_config c;
        int world;
        MPI_Comm_size(comm, &world);
        config(&c, &k, world, m);
        snprintf(c.init_from, sizeof c.init_from, "%s", hf);
        ckpt_test_tmpdir(comm, root[m], sizeof root[m]);
        CHECK(run(comm, &c, NULL, 2, root[m], saved[m], losses[m], NULL, NULL) == ZOE_OK,
              "%s: init from the export, %s: %s", what, m ? "streamed" : "resident",
              zoe_last_error());
    }
    CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0,
          "%s: runs from the export differ (%.9g, %.9g)", what, (double)losses[0][1],
          (double)losses[1][1]);
    ckpt_test_same_files(saved[0], saved[1], what);
    for (int m = 0; m < 2; m++) ckpt_test_rmdir(comm, root[m]);
    ckpt_test_rmdir(comm, hf);
}

static void equality_case(MPI_Comm comm, const stream_case *k, int dp) {
    char what[128], root[2][256], dir[2][300];
    snprintf(what, sizeof what, "%s, TP %d x DP %d, DPU %s, %s state%s%s",
             k->llama ? "Llama" : "GPT", k->tp, dp, schedule_name(k), k->int8 ? "int8" : "fp32",
             k->buckets ? ", 1 MiB buckets" : "", k->no_recompute ? ", no recompute" : "");
    float losses[2][STEPS], val[2];
    for (int streamed = 0; streamed < 2; streamed++) {
        zoe_train_config c;
        config(&c, k, dp, streamed);
        ckpt_test_tmpdir(comm, root[streamed], sizeof root[streamed]);
        zoe_status st = run(comm, &c, NULL, STEPS, root[streamed], dir[streamed], losses[streamed],
                            NULL, &val[streamed]);
        CHECK(st == ZOE_OK, "%s, %s weights: %s", what, streamed ? "streamed" : "resident",
              zoe_last_error());
    }
    CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0,
          "%s: losses differ (step 0: %.9g resident, %.9g streamed; last: %.9g, %.9g)", what,
          (double)losses[0][0], (double)losses[1][0], (double)losses[0][STEPS - 1],
          (double)losses[1][STEPS - 1]);
    CHECK(memcmp(&val[0], &val[1], sizeof val[0]) == 0,
          "%s: validation loss %.9g resident, %.9g "
          "streamed",
          what, (double)val[0], (double)val[1]);
    ckpt_test_same_files(dir[0], dir[1], what);
    if (!k->dpu && !k->int8 && !k->llama) outputs_case(comm, dir, what);
    for (int i = 0; i < 2; i++) ckpt_test_rmdir(comm, root[i]);
}

/* Saved at SAVE_AT in mode `from`, resumed in the other, against the uninterrupted run in `from`.
 */
static void resume_case(MPI_Comm comm, const stream_case *k, int dp, int from) {
    char what[160], root[3][256], dir[2][300];
    snprintf(what, sizeof what, "TP %d x DP %d, DPU %s: saved %s, resumed %s", k->tp, dp,
             schedule_name(k), from ? "streamed" : "resident", from ? "resident" : "streamed");
    zoe_train_config c[2];
    for (int m = 0; m < 2; m++) config(&c[m], k, dp, m);
    for (int i = 0; i < 3; i++) ckpt_test_tmpdir(comm, root[i], sizeof root[i]);
    float whole[STEPS], resumed[STEPS];
    char saved[300];
    CHECK(run(comm, &c[from], NULL, STEPS, root[0], dir[0], whole, NULL, NULL) == ZOE_OK,
          "%s: whole run: %s", what, zoe_last_error());
    CHECK(run(comm, &c[from], NULL, SAVE_AT, root[1], saved, resumed, NULL, NULL) == ZOE_OK,
          "%s: first half: %s", what, zoe_last_error());
    CHECK(run(comm, &c[!from], saved, STEPS, root[2], dir[1], resumed, NULL, NULL) == ZOE_OK,
          "%s: second half: %s", what, zoe_last_error());
    CHECK(memcmp(whole, resumed, sizeof whole) == 0, "%s: losses differ (last %.9g, %.9g)", what,
          (double)whole[STEPS - 1], (double)resumed[STEPS - 1]);
    ckpt_test_same_files(dir[0], dir[1], what);
    for (int i = 0; i < 3; i++) ckpt_test_rmdir(comm, root[i]);
}

static void memory_case(MPI_Comm comm, int tp, int dp) {
    stream_case k = {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_EXACT};
    size_t peak[2] = {0, 0}, weights = 0;
    for (int streamed = 0; streamed < 2; streamed++) {
        zoe_train_config c;
        config(&c, &k, dp, streamed);
        c.model.layers = 16;
        char root[256], saved[300];
        ckpt_test_tmpdir(comm, root, sizeof root);
        CHECK(run(comm, &c, NULL, 2, root, saved, NULL, &peak[streamed], NULL) == ZOE_OK,
              "memory, TP %d x DP %d: %s", tp, dp, zoe_last_error());
        ckpt_test_rmdir(comm, root);
        if (!streamed) {
            zoe_trainer *tr = NULL;
            CHECK(zoe_trainer_create(comm, &c, &tr) == ZOE_OK, "%s", zoe_last_error());
            weights = zoe_optimizer_params_numel(zoe_trainer_optimizer(tr)) * sizeof(float);
            zoe_trainer_destroy(tr);
        }
    }
    CHECK(peak[1] + weights / 2 < peak[0],
          "memory, TP %d x DP %d: device peak %zu bytes streamed, %zu resident, weights %zu", tp,
          dp, peak[1], peak[0], weights);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) return fprintf(stderr, "usage: test_train_stream CORPUS\n"), 2;
    corpus = argv[1];
    MPI_Comm comm = MPI_COMM_WORLD;
    int world;
    MPI_Comm_size(comm, &world);
    const int tps[2] = {world == 4 ? 2 : 1, world}; /* 1x1; 1x2, 2x1; 2x2, 4x1 */
    for (int g = 0; g < (world == 1 ? 1 : 2); g++) {
        int tp = tps[g], dp = world / tp;
        for (int int8 = 0; int8 < 2; int8++)
            for (int s = -1; s <= ZOE_DPU_EXACT; s++) {
                stream_case k = {.tp = tp,
                                 .dpu = s >= 0,
                                 .schedule = s >= 0 ? (zoe_dpu_schedule)s : ZOE_DPU_PLAIN,
                                 .int8 = int8};
                equality_case(comm, &k, dp);
            }
        stream_case llama = {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_EXACT, .llama = 1};
        equality_case(comm, &llama, dp);
        stream_case buckets = {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_EXACT, .buckets = 1};
        equality_case(comm, &buckets, dp);
        /* without recomputation each block's parts are read once per pass, in the forward's
         * order and then the reverse (zoe_gpt_pass_order) */
        for (int llama_kept = 0; llama_kept < 2; llama_kept++) {
            stream_case kept = {.tp = tp,
                                .dpu = 1,
                                .schedule = ZOE_DPU_EXACT,
                                .llama = llama_kept,
                                .no_recompute = 1};
            equality_case(comm, &kept, dp);
        }
        const zoe_dpu_schedule resumed[2] = {ZOE_DPU_EXACT, ZOE_DPU_PLAIN};
        for (int r = 0; r < 2; r++) {
            stream_case k = {.tp = tp, .dpu = 1, .schedule = resumed[r]};
            for (int from = 0; from < 2; from++) resume_case(comm, &k, dp, from);
        }
        memory_case(comm, tp, dp);
    }
    return test_finish("test_train_stream");
}
