/* bench_nvme: the host step with its optimizer state on drives (--offload nvme), in one run:
 *
 * 1. against fio: the step with the state on a file of the disk (dir, O_DIRECT) moves every
 *    bucket's state in and out; bench_drive_io (bench/drive_io.c, beside this program) then runs
 *    fio over the same bytes the same way (O_DIRECT reads and writes, the state's bucket bytes,
 *    the engine's 1 MiB block and queue depth 32, the step's read-ahead) and its best fio figure
 *    is the reference: bandwidth_share = the step's bytes per second (read + written) / fio's
 *    (goal >= 0.8).
 * 2. against host memory: the step with the state on a tmpfs path (/dev/shm) over the step with
 *    the state in host memory (tmpfs_over_host: the engine's own overhead, goal <= 1.10), twice:
 *    (a) the update on every core, and (b) "a core to spare": the update on all cores but one
 *    in both runs (tmpfs_over_host_spare), so that the engine's copies, which a tmpfs makes the
 *    CPU's work (a drive's DMA does them with O_DIRECT), can run beside the update as on a host
 *    with tens of cores. Per step also the CPU time of every thread (getrusage) and the time the
 *    update waited for the drives (zoe_optimizer_stats.ms_drive_wait); cpu_tmpfs_over_host, the
 *    tmpfs step's CPU time over the host step's, is what (a) cannot beat where the host step
 *    keeps every core busy, and unlike the wall times it hardly moves with other work here.
 *
 * The optimizer: one rank, the CPU backend, fp32, `tensors` tensors of `numel` elements, each its
 * own bucket (so every bucket's state is the same bytes: 8 per element, the moments; the fp32
 * master is the parameters there), AdamW, no DPU. The optimizers step in turn, `repeats` times,
 * on the same gradient, so other work on the machine slows all alike; the medians count. OpenMP
 * workers that spin between the buckets' updates take the cores from the engine's threads: run
 * it with OMP_WAIT_POLICY=passive, as scripts/bench does (the line says the policy). Prints one
 * JSON line.
 *
 * Usage: bench_nvme [--dir DIR] [--tensors N] [--numel N] [--ahead K] [--repeats R]
 * Defaults: /tmp (a disk here), 16, 4194304 (16 x 4 Mi: 512 MiB of state on the drive), 2, 5. */
#include <cjson/cJSON.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include "bench_util.h"
#include "zoe/zoe.h"
#include "zoe/optimizer.h"

/* The runs: the state in host memory, on a tmpfs, on the disk; the first two again with the
 * update on all cores but one (the same optimizers: the modes' first three). */
enum { HOST, TMPFS, DISK, HOST_SPARE, TMPFS_SPARE, MODES, OPTIMIZERS = 3 };
enum { MAX_REPEATS = 15, MAX_TENSORS = 256 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_nvme: %s: %s\n", what, zoe_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static double cpu_seconds(void) { /* every thread of the process */
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

typedef struct options {
    const char *dir;
    int tensors, ahead, repeats;
    size_t numel;
} options;

static int parse_options(int argc, char **argv, options *o) {
    *o = (options){.dir = "/tmp", .tensors = 16, .numel = 4u << 20, .ahead = 2, .repeats = 5};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) return 0;
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--dir"))
            o->dir = v;
        else if (!strcmp(k, "--tensors"))
            o->tensors = atoi(v);
        else if (!strcmp(k, "--numel"))
            o->numel = (size_t)atoll(v);
        else if (!strcmp(k, "--ahead"))
            o->ahead = atoi(v);
        else if (!strcmp(k, "--repeats"))
            o->repeats = atoi(v);
        else
            return 0;
    }
    return o->tensors >= 1 && o->tensors <= MAX_TENSORS && o->numel >= 1024 && o->ahead >= 1 &&
           o->repeats >= 1 && o->repeats <= MAX_REPEATS;
}

/* One optimizer of the bench's tensors, its state where `paths` says (NULL: host memory). */
static zoe_optimizer *create(zoe_grid *grid, zoe_device *dev, zoe_stream *s, const options *o,
                             const char *paths) {
    zoe_param_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][16];
    for (int i = 0; i < o->tensors; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        t[i] = (zoe_param_tensor){.name = names[i], .numel = o->numel};
    }
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.bucket_numel = o->numel;
    cfg.weight_decay = 0.01f;
    cfg.state_paths = paths;
    cfg.state_ahead = o->ahead;
    zoe_optimizer *opt = NULL;
    if (zoe_optimizer_create(grid, dev, s, ZOE_F32, t, o->tensors, &cfg, &opt) != ZOE_OK)
        die("optimizer");
    float *w = zoe_optimizer_params(opt);
    for (size_t i = 0; i < zoe_optimizer_params_numel(opt); i++)
        w[i] = 0.01f * (float)((i * 2654435761u) % 1000) - 5.0f;
    if (zoe_optimizer_init_from_params(opt) != ZOE_OK) die("init");
    return opt;
}

typedef struct step_time {
    double wall, cpu, drive_wait; /* seconds */
} step_time;

/* One step: a micro-batch of the same pseudo-random gradients, then the step (timed) with the
 * update on `threads` OpenMP threads. */
static step_time step(zoe_optimizer *opt, const options *o, int threads) {
    if (zoe_optimizer_begin_micro_batch(opt) != ZOE_OK) die("begin");
    for (int t = o->tensors - 1; t >= 0; t--) {
        float *g = NULL;
        if (zoe_optimizer_grad_buffer(opt, t, (void **)&g) != ZOE_OK) die("grad buffer");
        for (size_t i = 0; i < o->numel; i++)
            g[i] = 1e-3f * (float)(((i + (size_t)t) * 40503u) % 2000) - 1.0f;
        if (zoe_optimizer_grad_ready(opt, t) != ZOE_OK) die("grad ready");
    }
    if (zoe_optimizer_end_micro_batch(opt) != ZOE_OK) die("end");
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    double t0 = now(), c0 = cpu_seconds();
    if (zoe_optimizer_step(opt, 1e-4f) != ZOE_OK) die("step");
    step_time t = {.wall = now() - t0, .cpu = cpu_seconds() - c0};
    omp_set_num_threads(saved);
    zoe_optimizer_stats st;
    if (zoe_optimizer_stats_get(opt, &st) != ZOE_OK) die("stats");
    t.drive_wait = 1e-3 * st.ms_drive_wait;
    return t;
}

/* bench_drive_io's best fio figure (bytes per second) for the state's pattern, or -1. */
static double fio_reference(const char *self, const options *o, size_t bytes, size_t bucket) {
    char dir[1024], cmd[2048];
    snprintf(dir, sizeof dir, "%s", self);
    snprintf(cmd, sizeof cmd,
             "%s/bench_drive_io --dir %s --bytes %zu --bucket %zu --block 1M --queue-depth 32 "
             "--ahead %d --repeats %d",
             dirname(dir), o->dir, bytes, bucket, o->ahead, o->repeats);
    FILE *f = popen(cmd, "r");
    char line[4096] = "";
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) pclose(f);
        return -1;
    }
    if (pclose(f) != 0) return -1;
    fputs(line, stderr); /* its own figures, for the record */
    cJSON *root = cJSON_Parse(line);
    const char *fio[] = {"fio_io_uring_mixed_MBps", "fio_io_uring_streams_MBps",
                         "fio_psync_mixed_MBps"};
    double best = -1;
    for (int i = 0; i < 3; i++) {
        double v = cJSON_GetNumberValue(cJSON_GetObjectItem(root, fio[i]));
        best = v > best ? v : best;
    }
    cJSON_Delete(root);
    return best * 1e6;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    options o;
    if (!parse_options(argc, argv, &o)) {
        fprintf(stderr,
                "usage: bench_nvme [--dir DIR] [--tensors 1..%d] [--numel N >= 1024] "
                "[--ahead K >= 1] [--repeats 1..%d]\n",
                MAX_TENSORS, MAX_REPEATS);
        return 2;
    }
    zoe_grid *grid = NULL;
    zoe_device *dev = NULL;
    zoe_stream *s = NULL;
    if (zoe_grid_create(MPI_COMM_WORLD, 1, &grid) != ZOE_OK ||
        zoe_device_create(ZOE_BACKEND_CPU, 0, &dev) != ZOE_OK ||
        zoe_stream_create(dev, &s) != ZOE_OK)
        die("grid, device and stream");
    const int cores = omp_get_max_threads(), spare = cores > 1 ? cores - 1 : 1;
    const char *paths[OPTIMIZERS] = {[HOST] = NULL, [TMPFS] = "/dev/shm", [DISK] = o.dir};
    const int optimizer[MODES] = {HOST, TMPFS, DISK, [HOST_SPARE] = HOST, [TMPFS_SPARE] = TMPFS};
    const int threads[MODES] = {cores, cores, cores, [HOST_SPARE] = spare, [TMPFS_SPARE] = spare};
    zoe_optimizer *opt[OPTIMIZERS];
    for (int i = 0; i < OPTIMIZERS; i++) opt[i] = create(grid, dev, s, &o, paths[i]);
    zoe_optimizer_footprint fp;
    if (zoe_optimizer_memory(opt[DISK], &fp) != ZOE_OK) die("footprint");
    for (int m = 0; m < MODES; m++) step(opt[optimizer[m]], &o, threads[m]); /* warm-up */
    double wall[MODES][MAX_REPEATS], cpu[MODES][MAX_REPEATS], wait[MODES][MAX_REPEATS];
    for (int r = 0; r < o.repeats; r++)
        for (int m = 0; m < MODES; m++) {
            step_time t = step(opt[optimizer[m]], &o, threads[m]);
            wall[m][r] = t.wall, cpu[m][r] = t.cpu, wait[m][r] = t.drive_wait;
        }
    double ms[MODES], cpu_ms[MODES], wait_ms[MODES];
    for (int m = 0; m < MODES; m++) {
        ms[m] = 1e3 * bench_median(wall[m], o.repeats);
        cpu_ms[m] = 1e3 * bench_median(cpu[m], o.repeats);
        wait_ms[m] = 1e3 * bench_median(wait[m], o.repeats);
    }
    for (int i = 0; i < OPTIMIZERS; i++) zoe_optimizer_destroy(opt[i]);
    /* every bucket's state is one region: the moments, 8 bytes per element (4096-aligned) */
    size_t bucket = fp.drive_bytes / (size_t)o.tensors;
    double step_bps = 2.0 * (double)fp.drive_bytes / (1e-3 * ms[DISK]);
    double fio_bps = fio_reference(argv[0], &o, fp.drive_bytes, bucket);
    if (fio_bps <= 0) die("bench_drive_io (fio) failed: is fio installed?");
    struct utsname u;
    uname(&u);
    double load[1] = {-1};
    getloadavg(load, 1);
    const char *engine = getenv("ZOE_DRIVE_IO"), *policy = getenv("OMP_WAIT_POLICY");
    printf("{\"bench\": \"nvme\", \"host\": \"%s\", \"cores\": %d, \"loadavg\": %.1f, "
           "\"drive_io\": \"%s\", \"omp_wait_policy\": \"%s\", \"dir\": \"%s\", \"state_bytes\": "
           "%zu, \"bucket_bytes\": %zu, "
           "\"ahead\": %d, \"repeats\": %d, \"step_ms_host\": %.1f, \"step_ms_tmpfs\": %.1f, "
           "\"step_ms_disk\": %.1f, \"step_MBps_disk\": %.1f, \"fio_best_MBps\": %.1f, "
           "\"bandwidth_share\": %.3f, \"tmpfs_over_host\": %.3f, \"cpu_ms_host\": %.1f, "
           "\"cpu_ms_tmpfs\": %.1f, \"wait_ms_tmpfs\": %.1f, \"cpu_tmpfs_over_host\": %.3f, "
           "\"spare_threads\": %d, \"step_ms_host_spare\": %.1f, \"step_ms_tmpfs_spare\": %.1f, "
           "\"wait_ms_tmpfs_spare\": %.1f, \"tmpfs_over_host_spare\": %.3f}\n",
           u.nodename, cores, load[0], engine && engine[0] ? engine : "auto",
           policy && policy[0] ? policy : "default", o.dir, fp.drive_bytes, bucket, o.ahead,
           o.repeats, ms[HOST], ms[TMPFS], ms[DISK], step_bps / 1e6, fio_bps / 1e6,
           step_bps / fio_bps, ms[TMPFS] / ms[HOST], cpu_ms[HOST], cpu_ms[TMPFS], wait_ms[TMPFS],
           cpu_ms[TMPFS] / cpu_ms[HOST], spare, ms[HOST_SPARE], ms[TMPFS_SPARE],
           wait_ms[TMPFS_SPARE], ms[TMPFS_SPARE] / ms[HOST_SPARE]);
    zoe_stream_destroy(s);
    zoe_device_destroy(dev);
    zoe_grid_destroy(grid);
    MPI_Finalize();
    return 0;
}
