/* The optimizer state on drives (--offload nvme, docs/nvme.md "State and weights on drives")
 * against host-resident state, at 1, 2 and 4 ranks: the drives move bytes and never change math,
 * so everything must agree bit for bit.
 *
 * For each grid the world allows (1x1; 2x1 and 1x2; 2x2: TP x DP), each DPU schedule (off,
 * plain, predict, dc, exact; warm-up 2) and two kinds of state (fp32 weights and state; bf16
 * weights, a bf16 master and int8 moments with their scales), a run with the state on drives and
 * one with it in host memory train the same batches for STEPS steps (two micro-batches a step,
 * dropout), then save. Checked: every loss equal (memcmp), and every tensor of the model,
 * optimizer and weights-in-use files the same bytes. The exact cases clip at 1, where every step
 * clips, so the speculation's buckets are undone and redone through the drive's pages. The drive
 * is a tmpfs directory (/dev/shm: buffered I/O) or a disk directory (/tmp: O_DIRECT), or both
 * striped, case by case; the ring reads 1 or 2 buckets ahead, so that the ring wraps.
 *
 * State and streamed weights (--offload-params cpu) on top: fp32 (the master is the host
 * partition, only the moments go to the drive) and bf16 with int8 moments (the bf16 master is
 * the streamed weights and stays in host memory; under the exact schedule too).
 *
 * Resume across modes (exact schedule, fp32): saved with host state at step SAVE_AT and resumed
 * with the state and the weights on drives, and saved with the state on drives and resumed with
 * host state, ends with the uninterrupted run's losses and bytes.
 *
 * Weights on drives too (--offload-params nvme, docs/nvme.md "Weights on drives"): every case of
 * the schedule x state matrix above (under a sanitizer, the half whose gradient is on drives
 * too: each schedule once) makes a third run, with the state and the weights on drives
 * (streamed from there, recomputation as in the other two runs) and the gradient where the
 * second run has it, checked against the same host-resident run. Its optimizer holds no copy of the
 * weights in host memory: against
 * --offload-params cpu with state on drives, the pinned bytes lose the partition's weights, the
 * drive bytes gain them, and the host bytes gain less than half of them (the state ring's
 * buckets carry their weights).
 *
 * The gradient partition on drives too (--offload-grads nvme, docs/nvme.md "The gradient
 * partition on drives"): every other equality case puts it there (so each schedule and each
 * kind of state runs with it, and with the state alone on drives), as does the resume into
 * drives; with two micro-batches a step the second reads, adds and writes it back. Those runs
 * also check the footprint: the optimizer's host memory holds no gradient partition (what it
 * allocated is the state-only run's less the partition, plus the gradient's share of the ring
 * and its staging), its drives hold it, and the plan's host and drive bytes are what it allocated.
 *
 * Faults: a read error injected into the drive engine (zoe_drive_io_inject_fault) fails the next
 * step with ZOE_ERR_IO naming the scratch file, and the checkpoint saved before it still holds
 * what the host-resident run saved at that step; the same with a write error of the gradient
 * path (the accumulation's write of a bucket's partition to its region); with the weights on
 * drives the error is injected on the last rank alone, at the first weight it reads in the next
 * forward, so its weight stream's read fails, and every rank's step with it (none waits).
 *
 * All three on drives (the state, the weights and the gradient): the third run of every case
 * whose gradient is on drives, fp32 under plain and dc (the stale update writes its new master
 * over the gradient partition it read, and the refresh pages it from there beside the weights),
 * int8 under off, predict and exact; and the host save resumed into drives, so the load refills
 * all three (exact schedule, clipping every step: undo and redo read both through the pages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt_test.h"
#include "engine/train/trainer_impl.h"
#include "offload/optimizer_impl.h"
#include "runtime/error.h"
#include "zoe/plan.h"

enum { STEPS = 4, SAVE_AT = 2 };

static const char *corpus;

typedef struct nvme_case {
    int tp;
    int dpu; /* 0: off */
    zoe_dpu_schedule schedule;
    int int8;     /* 1: bf16 weights and master, int8 moments */
    int streamed; /* 1: --offload-params cpu as well */
    int where;    /* the drive: 0 tmpfs, 1 disk, 2 both striped */
    int grads;    /* 1: the gradient partition on the drives too */
    int weights;  /* 1: a third run with the weights on drives too (--offload-params nvme) */
} nvme_case;

/* Where a run keeps what: host memory, the state on drives, or the state and the weights. */
enum { HOST, STATE_ON_DRIVES, WEIGHTS_ON_DRIVES, MODES };
static const char *const mode_names[MODES] = {"in host memory", "state on drives",
                                              "state and weights on drives"};
/* (the gradient on drives too in either drive mode where the case asks, nvme_case.grads) */

static const char *schedule_name(const nvme_case *k) {
    if (!k->dpu) return "off";
    static const char *names[] = {"plain", "predict", "dc", "exact"};
    return names[k->schedule];
}

/* disk: a directory on the disk (made by the caller), for cases whose drive is on it. */
static void config(zoe_train_config *c, const nvme_case *k, int dp, int mode, const char *disk) {
    ckpt_test_config(c, k->tp, dp, 2, 0.1f, k->dpu ? 2 : 0);
    c->dpu = k->dpu ? ZOE_DPU_ON : ZOE_DPU_OFF;
    c->dpu_schedule = k->schedule;
    c->clip_grad = k->dpu && k->schedule == ZOE_DPU_EXACT ? 1.0f : 0.0f;
    /* Buckets of 1 MiB (256 Ki fp32 or 512 Ki bf16 elements): 4 layers of hidden 128 make 4
     * (fp32) or 2 of them, more than a ring of 3 (one read ahead) holds, so that it wraps. */
    c->model.hidden = 128;
    c->model.layers = 4;
    c->bucket_mb = 1;
    if (k->int8) {
        c->dtype = ZOE_BF16;
        c->main_params_dtype = ZOE_STATE_BF16;
        c->exp_avg_dtype = c->exp_avg_sq_dtype = ZOE_STATE_INT8;
    }
    if (k->streamed) {
        c->offload_params = ZOE_OFFLOAD_PARAMS_CPU;
        c->recompute = 1;
    }
    if (mode == HOST) return;
    c->offload = ZOE_OFFLOAD_NVME;
    c->offload_grads = k->grads ? ZOE_OFFLOAD_GRADS_NVME : ZOE_OFFLOAD_GRADS_CPU;
    if (mode == WEIGHTS_ON_DRIVES) c->offload_params = ZOE_OFFLOAD_PARAMS_NVME;
    c->nvme_ahead = 1 + k->schedule % 2;
    const char *paths[] = {"/dev/shm", disk};
    if (k->where < 2)
        snprintf(c->nvme_path, sizeof c->nvme_path, "%s", paths[k->where]);
    else
        snprintf(c->nvme_path, sizeof c->nvme_path, "%s,%s", disk, paths[0]);
}

/* The footprint of a run with the gradient partition on drives (opt): host memory holds no
 * gradient partition, the drives do, and the plan counts the same bytes. */
static void check_footprint(zoe_optimizer *opt, const zoe_train_config *c, int world,
                            const char *what) {
    zoe_optimizer_footprint mem;
    CHECK(zoe_optimizer_memory(opt, &mem) == ZOE_OK, "%s: memory: %s", what, zoe_last_error());
    const zoe_state_sizes *z = &opt->sz;
    CHECK(z->drive_grads && mem.grads_bytes > 0, "%s: the gradient is not on the drives", what);
    /* the gradient's share of host memory: its part of each ring slot and the staging, a few
     * buckets' partitions whatever the model (here the ring may hold every bucket) */
    size_t grad_ring = (size_t)z->drive_slots * z->drive_grad_slot + z->drive_stage;
    size_t bucket = (opt->lay.max_part * zoe_dtype_size(z->grad_dtype) + 4095) / 4096 * 4096;
    int ring_slots = 2 * (c->nvme_ahead > 0 ? c->nvme_ahead : 2) + 1;
    CHECK(grad_ring <= (size_t)(ring_slots + ZOE_GRAD_STAGE_SLOTS) * bucket,
          "%s: %zu host bytes of gradient ring and staging: more than %d buckets of %zu", what,
          grad_ring, ring_slots + ZOE_GRAD_STAGE_SLOTS, bucket);
    zoe_optimizer_config state_only = opt->cfg;
    state_only.grads_on_drives = 0;
    zoe_state_sizes zs;
    zoe_state_sizes_of(ZOE_BACKEND_CPU, opt->dtype, &opt->lay, opt->dp_size, &state_only, &zs);
    zoe_optimizer_footprint f;
    zoe_state_sizes_bytes(&zs, &opt->lay, opt->dtype, &f);
    CHECK(mem.host_bytes + mem.grads_bytes == f.host_bytes + grad_ring,
          "%s: host bytes %zu with the gradient on drives, %zu without (partition %zu, ring %zu)",
          what, mem.host_bytes, f.host_bytes, mem.grads_bytes, grad_ring);
    CHECK(mem.drive_bytes >= f.drive_bytes + mem.grads_bytes,
          "%s: drive bytes %zu with the gradient, %zu without: not its %zu bytes", what,
          mem.drive_bytes, f.drive_bytes, mem.grads_bytes);
    zoe_hardware hw;
    zoe_plan_config pc;
    zoe_plan_result r;
    zoe_status st = zoe_hardware_local(0, &hw);
    if (st == ZOE_OK) st = zoe_hardware_drives_of_paths(c->nvme_path, &hw);
    if (st == ZOE_OK) st = zoe_plan_config_from_train(c, world, &hw, &pc);
    if (st == ZOE_OK) st = zoe_plan(&pc, &r);
    CHECK(st == ZOE_OK, "%s: plan: %s", what, zoe_last_error());
    /* the plan sizes the ring at its default read-ahead (zoe-plan has no --nvme-ahead) */
    CHECK(st != ZOE_OK || c->nvme_ahead != 2 ||
              (r.drive.grads && r.host.optimizer_per_rank == (double)mem.host_bytes &&
               r.drive.per_rank == (double)mem.drive_bytes),
          "%s: the plan's host %.0f and drive %.0f bytes (gradient %s), allocated %zu and %zu",
          what, r.host.optimizer_per_rank, r.drive.per_rank, r.drive.grads ? "on drives" : "host",
          mem.host_bytes, mem.drive_bytes);
}

/* Trains from a fresh trainer (or the checkpoint `resume`) up to step `to`, saving into root
 * (the checkpoint's directory into saved); with the gradient on drives, checks the footprint. */
static zoe_status run(MPI_Comm comm, const zoe_train_config *c, const char *resume, int to,
                      const char *root, char saved[300], float *losses) {
    ckpt_session s;
    zoe_status st = ckpt_session_open(&s, comm, c, corpus);
    if (st == ZOE_OK && resume) st = zoe_trainer_load(s.tr, resume, NULL, 0);
    if (st == ZOE_OK) st = ckpt_session_steps(&s, to, losses);
    if (st == ZOE_OK) st = zoe_trainer_save(s.tr, root, 0, saved, 300);
    int world = 0;
    MPI_Comm_size(comm, &world);
    if (st == ZOE_OK && c->offload_grads == ZOE_OFFLOAD_GRADS_NVME)
        check_footprint(zoe_trainer_optimizer(s.tr), c, world, "footprint");
    ckpt_session_close(&s);
    return st;
}

static void equality_case(MPI_Comm comm, const nvme_case *k, int dp, const char *disk) {
    char what[160], root[MODES][256], dir[MODES][300];
    snprintf(what, sizeof what, "TP %d x DP %d, DPU %s, %s state%s%s, drive %s", k->tp, dp,
             schedule_name(k), k->int8 ? "int8" : "fp32", k->grads ? " and gradient" : "",
             k->streamed ? ", streamed weights" : "",
             k->where == 0   ? "tmpfs"
             : k->where == 1 ? "disk"
                             : "disk+tmpfs");
    float losses[MODES][STEPS];
    const int modes = k->weights ? MODES : WEIGHTS_ON_DRIVES;
    for (int m = 0; m < modes; m++) {
        zoe_train_config c;
        config(&c, k, dp, m, disk);
        ckpt_test_tmpdir(comm, root[m], sizeof root[m]);
        zoe_status st = run(comm, &c, NULL, STEPS, root[m], dir[m], losses[m]);
        CHECK(st == ZOE_OK, "%s, %s: %s", what, mode_names[m], zoe_last_error());
    }
    for (int m = 1; m < modes; m++) {
        char against[200];
        snprintf(against, sizeof against, "%s, %s", what, mode_names[m]);
        CHECK(memcmp(losses[0], losses[m], sizeof losses[0]) == 0,
              "%s: losses differ (step 0: %.9g host, %.9g drives; last: %.9g, %.9g)", against,
              (double)losses[0][0], (double)losses[m][0], (double)losses[0][STEPS - 1],
              (double)losses[m][STEPS - 1]);
        ckpt_test_same_files(dir[0], dir[m], against);
    }
    for (int m = 0; m < modes; m++) ckpt_test_rmdir(comm, root[m]);
}

/* Saved at SAVE_AT with state on drives (from = 1) or in host memory, resumed the other way,
 * against the uninterrupted run in the saving mode. The drives hold the gradient partition too;
 * a host save resumes with the weights on drives as well, so that the load refills all three. */
static void resume_case(MPI_Comm comm, const nvme_case *k, int dp, int from, const char *disk) {
    char what[160], root[3][256], dir[2][300], saved[300];
    snprintf(what, sizeof what, "TP %d x DP %d: saved %s, resumed %s", k->tp, dp,
             from ? "with state on drives" : "without drives",
             from ? "without" : "with state, weights and gradient on drives");
    zoe_train_config c[2];
    for (int m = 0; m < 2; m++)
        config(&c[m], k, dp, !m ? HOST : from ? STATE_ON_DRIVES : WEIGHTS_ON_DRIVES, disk);
    c[1].offload_grads = ZOE_OFFLOAD_GRADS_NVME; /* the gradient on drives too */
    for (int i = 0; i < 3; i++) ckpt_test_tmpdir(comm, root[i], sizeof root[i]);
    float whole[STEPS], resumed[STEPS];
    CHECK(run(comm, &c[from], NULL, STEPS, root[0], dir[0], whole) == ZOE_OK, "%s: whole: %s", what,
          zoe_last_error());
    CHECK(run(comm, &c[from], NULL, SAVE_AT, root[1], saved, resumed) == ZOE_OK,
          "%s: first half: %s", what, zoe_last_error());
    CHECK(run(comm, &c[!from], saved, STEPS, root[2], dir[1], resumed) == ZOE_OK,
          "%s: second half: %s", what, zoe_last_error());
    CHECK(memcmp(whole, resumed, sizeof whole) == 0, "%s: losses differ (last %.9g, %.9g)", what,
          (double)whole[STEPS - 1], (double)resumed[STEPS - 1]);
    ckpt_test_same_files(dir[0], dir[1], what);
    for (int i = 0; i < 3; i++) ckpt_test_rmdir(comm, root[i]);
}

/* An error of the drive in the step after a save: a read of the state, and (grads) a write
 * of the gradient path, the accumulation's of the bucket whose region comes first. The step
 * fails naming the scratch file, and each save holds what a host-resident run saves at that
 * step. */
static void fault_grads_case(MPI_Comm comm, int tp, int dp, const char *disk) {
    nvme_case k = {.tp = tp, .where = 1};
    zoe_train_config c[2];
    for (int m = 0; m < 2; m++) config(&c[m], &k, dp, m ? STATE_ON_DRIVES : HOST, disk);
    char root[3][256], dir[3][300];
    for (int i = 0; i < 3; i++) ckpt_test_tmpdir(comm, root[i], sizeof root[i]);
    CHECK(run(comm, &c[0], NULL, SAVE_AT, root[0], dir[0], NULL) == ZOE_OK, "fault: host: %s",
          zoe_last_error());
    for (int grads = 0; grads < 2; grads++) {
        const char *what = grads ? "a write of the gradient" : "a read of the state";
        c[1].offload_grads = grads ? ZOE_OFFLOAD_GRADS_NVME : ZOE_OFFLOAD_GRADS_CPU;
        ckpt_session s;
        zoe_status st = ckpt_session_open(&s, comm, &c[1], corpus);
        if (st == ZOE_OK) st = ckpt_session_steps(&s, SAVE_AT, NULL);
        if (st == ZOE_OK) st = zoe_trainer_save(s.tr, root[1 + grads], 0, dir[1 + grads], 300);
        CHECK(st == ZOE_OK, "fault (%s): the run before the fault: %s", what, zoe_last_error());
        if (st == ZOE_OK) {
            zoe_optimizer *opt = zoe_trainer_optimizer(s.tr);
            zoe_drive_io_inject_fault(opt->drive->io, grads ? opt->drive->grad_offset[0] : 0,
                                      5 /* EIO */);
            st = ckpt_session_steps(&s, SAVE_AT + 1, NULL);
            CHECK(st == ZOE_ERR_IO, "fault: the step after %s error returned %s", what,
                  zoe_status_string(st));
            CHECK(strstr(zoe_last_error(), "zoe-scratch") != NULL,
                  "fault (%s): the error does not name the scratch file: %s", what,
                  zoe_last_error());
            CHECK(!grads || strstr(zoe_last_error(), "write of") != NULL,
                  "fault (%s): not the gradient's write: %s", what, zoe_last_error());
        }
        ckpt_session_close(&s);
        ckpt_test_same_files(dir[0], dir[1 + grads], "fault: the checkpoint before it");
    }
    for (int i = 0; i < 3; i++) ckpt_test_rmdir(comm, root[i]);
}

/* A read error of the drive in the step after a save: the step fails naming the scratch file,
 * and the save holds what a host-resident run saves at that step. weights: with the weights on
 * drives, the error on the last rank alone, at the first weight it reads (its piece of the first
 * tensor it holds any of), so that its weight stream's read fails: every rank's step must fail
 * with that read's error, naming its offset, none left waiting in the fetch's gather over DP or
 * in the forward's collectives over TP. */
static void fault_case(MPI_Comm comm, int tp, int dp, int weights, const char *disk) {
    nvme_case k = {.tp = tp, .where = 1};
    zoe_train_config c[2];
    for (int m = 0; m < 2; m++) config(&c[m], &k, dp, m ? STATE_ON_DRIVES + weights : HOST, disk);
    char root[2][256], dir[2][300];
    for (int i = 0; i < 2; i++) ckpt_test_tmpdir(comm, root[i], sizeof root[i]);
    CHECK(run(comm, &c[0], NULL, SAVE_AT, root[0], dir[0], NULL) == ZOE_OK, "fault: host: %s",
          zoe_last_error());
    ckpt_session s;
    zoe_status st = ckpt_session_open(&s, comm, &c[1], corpus);
    if (st == ZOE_OK) st = ckpt_session_steps(&s, SAVE_AT, NULL);
    if (st == ZOE_OK) st = zoe_trainer_save(s.tr, root[1], 0, dir[1], 300);
    CHECK(st == ZOE_OK, "fault: the run before the fault: %s", zoe_last_error());
    if (st == ZOE_OK) {
        zoe_optimizer *opt = zoe_trainer_optimizer(s.tr);
        int rank, ranks;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &ranks);
        unsigned long long at = 0;
        if (weights) {
            size_t first, count = 0, x = 0, off = 0, contiguous;
            zoe_status got = ZOE_OK;
            for (int t = 0; got == ZOE_OK && count == 0; t++)
                got = zoe_optimizer_tensor_shard(opt, t, &first, &count, &x);
            CHECK(got == ZOE_OK, "fault: this rank holds no weight: %s", zoe_last_error());
            CHECK(zoe_weights_drive_offset(opt, x, &off, &contiguous) == ZOE_OK, "fault: %s",
                  zoe_last_error());
            at = off / 4096 * 4096; /* where the read of its run starts */
            MPI_Bcast(&at, 1, MPI_UNSIGNED_LONG_LONG, ranks - 1, comm);
        }
        if (!weights || rank == ranks - 1)
            zoe_drive_io_inject_fault(opt->drive->io, (size_t)at, 5 /* EIO */);
        st = ckpt_session_steps(&s, SAVE_AT + 1, NULL);
        CHECK(st == ZOE_ERR_IO, "fault: the step after the injected read error returned %s",
              zoe_status_string(st));
        CHECK(strstr(zoe_last_error(), "zoe-scratch") != NULL,
              "fault: the error does not name the scratch file: %s", zoe_last_error());
        char offset[64];
        snprintf(offset, sizeof offset, "(scratch offset %llu)", at);
        CHECK(!weights || strstr(zoe_last_error(), offset) != NULL,
              "fault: the weight stream's read at %llu did not fail: %s", at, zoe_last_error());
    }
    ckpt_session_close(&s);
    ckpt_test_same_files(dir[0], dir[1], "fault: the checkpoint before it");
    for (int i = 0; i < 2; i++) ckpt_test_rmdir(comm, root[i]);
}

/* The optimizer's footprint with the weights on drives against streamed weights in host memory
 * (state on drives in both): the partition's weights leave pinned memory for the drives, and the
 * host ring of 3 buckets grows by less than half what they take (24 layers: some 10 buckets of
 * 1 MiB per TP shard at TP 2, 20 at TP 1). */
static void footprint_case(MPI_Comm comm, int tp, int dp, const char *disk) {
    nvme_case k = {.tp = tp, .where = 1};
    zoe_train_config c[2];
    zoe_optimizer_footprint f[2];
    size_t weights = 0;
    for (int m = 0; m < 2; m++) {
        config(&c[m], &k, dp, m ? WEIGHTS_ON_DRIVES : STATE_ON_DRIVES, disk);
        if (!m) c[m].offload_params = ZOE_OFFLOAD_PARAMS_CPU;
        c[m].model.layers = 24;
        ckpt_session s;
        zoe_status st = ckpt_session_open(&s, comm, &c[m], corpus);
        CHECK(st == ZOE_OK, "footprint: %s", zoe_last_error());
        if (st == ZOE_OK) {
            zoe_optimizer *opt = zoe_trainer_optimizer(s.tr);
            zoe_optimizer_memory(opt, &f[m]);
            weights = zoe_optimizer_partition_numel(opt) * sizeof(float); /* the fp32 master */
        }
        ckpt_session_close(&s);
    }
    CHECK(f[0].pinned_bytes - f[1].pinned_bytes == weights,
          "footprint: pinned bytes %zu streamed from host, %zu from drives: not the %zu bytes of "
          "the weights less",
          f[0].pinned_bytes, f[1].pinned_bytes, weights);
    CHECK(f[1].drive_bytes >= f[0].drive_bytes + weights,
          "footprint: drive bytes %zu, %zu: the weights' %zu bytes not among them",
          f[0].drive_bytes, f[1].drive_bytes, weights);
    CHECK(f[1].host_bytes > f[0].host_bytes && f[1].host_bytes - f[0].host_bytes < weights / 2,
          "footprint: host bytes %zu streamed from host, %zu from drives: the ring's share of "
          "the %zu bytes of weights is not between 0 and half",
          f[0].host_bytes, f[1].host_bytes, weights);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (argc < 2) return fprintf(stderr, "usage: test_train_nvme CORPUS\n"), 2;
    corpus = argv[1];
    MPI_Comm comm = MPI_COMM_WORLD;
    int world;
    MPI_Comm_size(comm, &world);
    char disk[256]; /* a directory on the disk for the drive files (/tmp is not a tmpfs here) */
    ckpt_test_tmpdir(comm, disk, sizeof disk);
    const int tps[2] = {world == 4 ? 2 : 1, world}; /* 1x1; 1x2, 2x1; 2x2 */
    for (int g = 0; g < (world == 1 ? 1 : world == 4 ? 1 : 2); g++) {
        int tp = tps[g], dp = world / tp, n = 0;
        for (int int8 = 0; int8 < 2; int8++)
            for (int s = -1; s <= ZOE_DPU_EXACT; s++, n++) {
                nvme_case k = {.tp = tp,
                               .dpu = s >= 0,
                               .schedule = s >= 0 ? (zoe_dpu_schedule)s : ZOE_DPU_PLAIN,
                               .int8 = int8,
                               .where = n % 3,
                               .grads = n % 2,
                               /* under a sanitizer the weights' run only where the gradient
                                * is on drives too (each schedule once, fp32 or int8) */
                               .weights = !test_sanitized() || n % 2 == 1};
                equality_case(comm, &k, dp, disk);
            }
        const nvme_case streamed[3] = {
            {.tp = tp, .streamed = 1, .where = 1},
            {.tp = tp, .streamed = 1, .int8 = 1, .where = 0},
            {.tp = tp, .streamed = 1, .int8 = 1, .dpu = 1, .schedule = ZOE_DPU_EXACT, .where = 2},
        };
        for (int i = 0; i < 3; i++) equality_case(comm, &streamed[i], dp, disk);
        nvme_case k = {.tp = tp, .dpu = 1, .schedule = ZOE_DPU_EXACT, .where = 1};
        for (int from = 0; from < 2; from++) resume_case(comm, &k, dp, from, disk);
        fault_grads_case(comm, tp, dp, disk); /* a read of the state, a write of the gradient */
        fault_case(comm, tp, dp, 1, disk);    /* the weights' read, on one rank */
        footprint_case(comm, tp, dp, disk);
    }
    ckpt_test_rmdir(comm, disk);
    return test_finish("test_train_nvme");
}
