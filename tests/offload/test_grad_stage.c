/* The accumulation's staging with the gradient partition on drives (grads_on_drives;
 * offload/state_drive.c, "The accumulation's staging"; docs/nvme.md, "The gradient partition on
 * drives"), on the CPU backend at 1 and 2 DP ranks, the drive a directory of /tmp (O_DIRECT).
 *
 * An optimizer with its state on drives and its gradient partition in host memory (the
 * reference: the host accumulation, which the other offload tests check against a float64
 * Adam) and one with the gradient on drives too train two steps of three micro-batches on the
 * same random gradients, with more buckets than staging slots, so that the staging ring wraps.
 * The buckets complete in a chosen order per micro-batch: the backward's (last bucket first) in
 * the first two, so that the second reads every bucket ahead (counted: every bucket read ahead,
 * none at its turn), and the opposite order in the third, so that the prediction fails (counted:
 * the two read ahead as the micro-batch began are taken at the end, every other bucket is read
 * at its turn). Checked after each step: the master weights and the gradient norm bit for bit
 * the reference's. Between two micro-batches of the second step, reads ahead started and then
 * dropped leave every staging slot free, and the step still matches.
 *
 * The same with the optimizer told one micro-batch a step (zoe_optimizer_config.micro_batches
 * 1), and given three: it stages in ZOE_GRAD_STAGE_SLOTS - ZOE_GRAD_STAGE_AHEAD slots (its
 * footprint says so), reads nothing ahead (counted: every bucket of the second and third
 * micro-batches read at its turn), and still matches bit for bit.
 *
 * A fault injected into a read ahead (zoe_drive_io_inject_fault at the region of the bucket the
 * second micro-batch stages fourth, read ahead while its second bucket is summed) fails the
 * micro-batch with ZOE_ERR_IO naming the scratch file and that offset, every bucket up to it
 * read ahead and none at its turn, and the optimizer is destroyed cleanly after it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "offload/optimizer_impl.h"
#include "offload_test.h"
#include "runtime/error.h"

enum { NT = 9, STEPS = 2, MICRO = 3 };
/* Buckets of about 8192 elements: no two of these tensors fit one, so 9 buckets, a tensor each,
 * more than the ZOE_GRAD_STAGE_SLOTS staging slots (checked). */
static const size_t numel[NT] = {5000, 7001, 3000, 9000, 4097, 6000, 2500, 8000, 3333};
/* the drives: a directory of /tmp, and in it one per optimizer open at once (the scratch files
 * are named by run id and rank) */
static char dir[64], drive_dir[2][80];

typedef struct run {
    zoe_device *dev;
    zoe_stream *stream;
    zoe_optimizer *opt;
} run;

/* micro_batches: zoe_optimizer_config.micro_batches (0: not said) */
static zoe_optimizer_config config(int grads_on_drives, int micro_batches) {
    zoe_optimizer_config c;
    zoe_optimizer_config_default(&c);
    c.bucket_numel = 8192;
    c.bucket_ring = 2;
    c.state_paths = drive_dir[grads_on_drives];
    c.grads_on_drives = grads_on_drives;
    c.micro_batches = micro_batches;
    return c;
}

static int open_run(run *r, zoe_grid *grid, int grads_on_drives, int micro_batches,
                    const double *w) {
    zoe_param_tensor t[NT];
    static char names[NT][8];
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        t[i] = (zoe_param_tensor){names[i], numel[i], i % 2, i % 2};
    }
    zoe_optimizer_config c = config(grads_on_drives, micro_batches);
    memset(r, 0, sizeof *r);
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &r->dev));
    CHECK_OK(zoe_stream_create(r->dev, &r->stream));
    if (!CHECK_OK(zoe_optimizer_create(grid, r->dev, r->stream, ZOE_F32, t, NT, &c, &r->opt)))
        return 0;
    write_params(r->opt, ZOE_F32, numel, NT, w);
    return CHECK_OK(zoe_optimizer_init_from_params(r->opt));
}

static void close_run(run *r) {
    zoe_optimizer_destroy(r->opt);
    zoe_stream_destroy(r->stream);
    zoe_device_destroy(r->dev);
}

/* One micro-batch whose buckets complete in `order` (each bucket's tensors marked ready
 * together, as a backward completes them), gradient g (concatenated tensors); the first error. */
static zoe_status feed(zoe_optimizer *opt, const int *order, const double *g) {
    const zoe_layout *lay = &opt->lay;
    size_t start[NT];
    for (int t = 0, k = 0; t < NT; t++) start[t] = (size_t)k, k += (int)numel[t];
    ZOE_TRY(zoe_optimizer_begin_micro_batch(opt));
    for (int i = 0; i < lay->num_buckets; i++) {
        const zoe_bucket *bk = &lay->buckets[order[i]];
        for (int t = bk->first_tensor; t < bk->first_tensor + bk->num_tensors; t++) {
            float *buf = NULL;
            ZOE_TRY(zoe_optimizer_grad_buffer(opt, t, (void **)&buf));
            for (size_t x = 0; x < numel[t]; x++) buf[x] += (float)g[start[t] + x];
            ZOE_TRY(zoe_optimizer_grad_ready(opt, t));
        }
    }
    return zoe_optimizer_end_micro_batch(opt);
}

/* The orders of the micro-batches: the backward's twice, then the opposite one. */
static void orders(int nb, int order[MICRO][64]) {
    for (int i = 0; i < nb; i++) order[0][i] = order[1][i] = nb - 1 - i, order[2][i] = i;
}

static void gradients(double *g, size_t total, int step, int micro) {
    test_rng rng;
    test_rng_seed(&rng, 100 + (uint64_t)(step * MICRO + micro));
    for (size_t i = 0; i < total; i++) g[i] = test_rng_normal(&rng);
}

/* told_one: the optimizer with the gradient on drives is told one micro-batch a step */
static void equality(zoe_grid *grid, const double *w, double *g, size_t total, int told_one) {
    run ref, drv;
    if (!open_run(&ref, grid, 0, 0, w) || !open_run(&drv, grid, 1, told_one, w)) return;
    const zoe_state_drive *d = drv.opt->drive;
    const int nb = drv.opt->lay.num_buckets;
    CHECK(drv.opt->sz.drive_grads && nb > ZOE_GRAD_STAGE_SLOTS && nb <= 64,
          "%d buckets with the gradient %s: not more than the %d staging slots", nb,
          drv.opt->sz.drive_grads ? "on drives" : "in host memory", ZOE_GRAD_STAGE_SLOTS);
    const int slots = told_one ? ZOE_GRAD_STAGE_SLOTS - ZOE_GRAD_STAGE_AHEAD : ZOE_GRAD_STAGE_SLOTS;
    zoe_optimizer_footprint f;
    CHECK_OK(zoe_optimizer_memory(drv.opt, &f));
    CHECK(drv.opt->sz.drive_stage == (size_t)slots * drv.opt->sz.drive_grad_slot && d &&
              d->stage_slots == slots &&
              f.drive_ring_bytes == (size_t)d->slots * d->slot_bytes + drv.opt->sz.drive_stage,
          "told %d micro-batches a step: %zu staging bytes (%d slots), want %d slots of %zu",
          told_one, drv.opt->sz.drive_stage, d ? d->stage_slots : -1, slots,
          drv.opt->sz.drive_grad_slot);
    int order[MICRO][64];
    orders(nb, order);
    double *a = malloc(total * sizeof(double)), *b = malloc(total * sizeof(double));
    for (int s = 0; s < STEPS && d; s++) {
        for (int m = 0; m < MICRO; m++) {
            gradients(g, total, s, m);
            CHECK_OK(feed(ref.opt, order[m], g));
            CHECK_OK(feed(drv.opt, order[m], g));
            /* predicted: every bucket read ahead; the order reversed: the two read ahead first,
             * the rest at their turn; told one micro-batch: every bucket at its turn */
            const long hits = told_one ? 0 : m == 1 ? nb : nb + 2;
            const long misses = told_one ? (long)m * nb : m == 1 ? 0 : nb - 2;
            if (m > 0)
                CHECK(d->stage_hits == hits && d->stage_misses == misses,
                      "step %d, micro-batch %d: %ld buckets read ahead, %ld at their turn (want "
                      "%ld and %ld)",
                      s, m, d->stage_hits, d->stage_misses, hits, misses);
            if (s == 1 && m == 0) { /* reads ahead started, then dropped */
                CHECK_OK(zoe_grad_stage_micro_batch(drv.opt, drv.opt->grad_buf, 1));
                int ahead = 0;
                for (int i = 0; i < ZOE_GRAD_STAGE_SLOTS; i++)
                    ahead += d->stage_state[i] == ZOE_STAGE_AHEAD;
                CHECK(ahead == (told_one ? 0 : ZOE_GRAD_STAGE_AHEAD),
                      "%d slots read ahead, want %d", ahead, told_one ? 0 : ZOE_GRAD_STAGE_AHEAD);
                CHECK_OK(zoe_grad_stage_drain(drv.opt));
                for (int i = 0; i < ZOE_GRAD_STAGE_SLOTS; i++)
                    CHECK(d->stage_state[i] == ZOE_STAGE_FREE && !d->stage_busy[i],
                          "staging slot %d not free after the drain (state %d, busy %d)", i,
                          d->stage_state[i], d->stage_busy[i]);
            }
        }
        CHECK_OK(zoe_optimizer_step(ref.opt, 1e-2f));
        CHECK_OK(zoe_optimizer_step(drv.opt, 1e-2f));
        zoe_optimizer_stats sr, sd;
        CHECK_OK(zoe_optimizer_stats_get(ref.opt, &sr));
        CHECK_OK(zoe_optimizer_stats_get(drv.opt, &sd));
        CHECK(memcmp(&sr.grad_norm, &sd.grad_norm, sizeof sr.grad_norm) == 0,
              "step %d: gradient norm %.17g with the gradient on drives, %.17g in host memory", s,
              sd.grad_norm, sr.grad_norm);
        CHECK(sr.ms_grad_wait == 0 && sd.ms_grad_wait >= 0,
              "step %d: %.3f ms waiting for the gradient's drives (%.3f without them)", s,
              sd.ms_grad_wait, sr.ms_grad_wait);
        for (size_t i = 0; i < total; i++) a[i] = b[i] = 0;
        read_owned_state(ref.opt, ZOE_STATE_MASTER, numel, NT, a, NULL);
        read_owned_state(drv.opt, ZOE_STATE_MASTER, numel, NT, b, NULL);
        size_t diff = 0;
        for (size_t i = 0; i < total; i++) diff += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
        CHECK(diff == 0, "step %d: %zu of %zu master weights differ from the host gradient's", s,
              diff, total);
    }
    free(a), free(b);
    close_run(&ref);
    close_run(&drv);
}

static void fault(zoe_grid *grid, const double *w, double *g, size_t total) {
    run r;
    if (!open_run(&r, grid, 1, 0, w)) return;
    const zoe_state_drive *d = r.opt->drive;
    const int nb = r.opt->lay.num_buckets;
    int order[MICRO][64];
    orders(nb, order);
    gradients(g, total, 0, 0);
    CHECK_OK(feed(r.opt, order[0], g));
    int target = order[1][3]; /* read ahead when the second bucket of micro-batch 1 is staged */
    size_t at = d->grad_offset[target];
    zoe_drive_io_inject_fault(d->io, at, 5 /* EIO */);
    gradients(g, total, 0, 1);
    zoe_status st = feed(r.opt, order[1], g);
    char offset[64];
    CHECK(st == ZOE_ERR_IO, "the micro-batch after a read ahead's fault returned %s",
          zoe_status_string(st));
    CHECK(strstr(zoe_last_error(), "zoe-scratch") && strstr(zoe_last_error(), "read of"),
          "the error does not name the scratch file's read: %s", zoe_last_error());
    snprintf(offset, sizeof offset, "(scratch offset %zu)", at);
    CHECK(strstr(zoe_last_error(), offset) != NULL, "the error does not name offset %zu: %s", at,
          zoe_last_error());
    CHECK(d->stage_misses == 0 && d->stage_hits == 4,
          "up to the fault: %ld buckets read ahead, %ld at their turn (want 4 and 0)",
          d->stage_hits, d->stage_misses);
    close_run(&r);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (test_rank() == 0) {
        snprintf(dir, sizeof dir, "/tmp/zoe-stage-XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
        for (int i = 0; i < 2 && dir[0]; i++) {
            snprintf(drive_dir[i], sizeof drive_dir[i], "%s/%d", dir, i);
            if (mkdir(drive_dir[i], 0700) != 0) dir[0] = 0;
        }
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++) snprintf(drive_dir[i], sizeof drive_dir[i], "%s/%d", dir, i);
    CHECK(dir[0] != 0, "no directory for the drive under /tmp");
    zoe_grid *grid = NULL;
    if (dir[0] && CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid))) {
        size_t total = 0;
        for (int t = 0; t < NT; t++) total += numel[t];
        double *w = malloc(total * sizeof(double)), *g = malloc(total * sizeof(double));
        test_rng rng;
        test_rng_seed(&rng, 7);
        for (size_t i = 0; i < total; i++) w[i] = 2 * test_rng_uniform(&rng) - 1;
        equality(grid, w, g, total, 0);
        equality(grid, w, g, total, 1);
        fault(grid, w, g, total);
        free(w), free(g);
        zoe_grid_destroy(grid);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 2 && test_rank() == 0 && dir[0]; i++) rmdir(drive_dir[i]);
    if (test_rank() == 0 && dir[0]) rmdir(dir);
    return test_finish("test_grad_stage");
}
