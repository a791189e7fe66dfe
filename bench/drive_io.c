/* bench_drive_io: the drive tier's I/O engine (runtime/drive_io.h) moving the bytes the way the
 * host step moves optimizer state, against fio moving the same bytes the same way, in one run.
 *
 * The engine's pattern: the state is `bytes` in buckets of `bucket` bytes; each bucket is read
 * in requests of `request` bytes (default: the block; `--request` = the bucket is one request
 * per bucket, as the host step issues them), updated (no compute here: the engine's part alone; the
 * host step's benchmark, `nvme`, adds it), and written back in place. Buckets i+1..i+k are read
 * ahead while bucket i is written, and the write of bucket i-k is waited for before its buffer
 * takes bucket i+k+1 (2k+1 bucket buffers). The stripe unit is the block: the engine cuts
 * requests into blocks and keeps `queue_depth` of them in flight. Bytes moved: `bytes` read +
 * `bytes` written, O_DIRECT, on one file in `dir`.
 *
 * fio moves as much with the same O_DIRECT reads and writes, block size and queue depth Q, three
 * ways: one io_uring job mixing reads and writes (--rw=rw) at iodepth Q; an io_uring read
 * stream and write stream at Q/2 each (the engine's own shape: reads ahead, writes behind);
 * Q psync jobs mixing them (the thread engine's shape). Each of the five runs `repeats` times,
 * interleaved, so other work on the machine slows all alike; the medians are printed as one
 * JSON line, with bandwidth_share = the engine's (io_uring where it runs) / the best fio.
 *
 * Usage: bench_drive_io [--dir DIR] [--bytes N] [--bucket N] [--block N] [--request N]
 *                       [--queue-depth Q] [--ahead K] [--repeats R] [--fio PATH]
 * Sizes take K, M, G suffixes (powers of 2). Defaults: /tmp, 512M, 16M, 1M, 32, 2, 5, fio.
 * On a shared disk (a VM's virtio disk beside other work) single runs vary 2-4x: keep repeats. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "bench/bench_util.h"
#include "runtime/drive_io.h"
#include "zoe/zoe.h"

enum { MAX_REPEATS = 15 };

typedef struct options {
    const char *dir, *fio;
    size_t bytes, bucket, block, request;
    int queue_depth, ahead, repeats;
} options;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_drive_io: %s: %s\n", what, zoe_last_error());
    exit(1);
}

static int parse_size(const char *s, size_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift) end++;
    if (end == s || *end || v == 0) return 0;
    *out = (size_t)v << shift;
    return 1;
}

static int parse_options(int argc, char **argv, options *o) {
    *o = (options){.dir = "/tmp",
                   .fio = "fio",
                   .bytes = 512 << 20,
                   .bucket = 16 << 20,
                   .block = 1 << 20,
                   .queue_depth = 32,
                   .ahead = 2,
                   .repeats = 5};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_drive_io: %s needs a value\n", argv[i]);
            return 0;
        }
        const char *k = argv[i], *v = argv[i + 1];
        int ok = 1;
        if (!strcmp(k, "--dir"))
            o->dir = v;
        else if (!strcmp(k, "--fio"))
            o->fio = v;
        else if (!strcmp(k, "--bytes"))
            ok = parse_size(v, &o->bytes);
        else if (!strcmp(k, "--bucket"))
            ok = parse_size(v, &o->bucket);
        else if (!strcmp(k, "--block"))
            ok = parse_size(v, &o->block);
        else if (!strcmp(k, "--request"))
            ok = parse_size(v, &o->request);
        else if (!strcmp(k, "--queue-depth"))
            ok = (o->queue_depth = atoi(v)) > 0;
        else if (!strcmp(k, "--ahead"))
            ok = (o->ahead = atoi(v)) > 0;
        else if (!strcmp(k, "--repeats"))
            ok = (o->repeats = atoi(v)) > 0 && o->repeats <= MAX_REPEATS;
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "bench_drive_io: %s %s is not valid\n", k, v);
            return 0;
        }
    }
    if (!o->request) o->request = o->block;
    if (o->block % 4096 || o->request % o->block || o->bucket % o->request ||
        o->bytes % o->bucket || o->bytes / o->bucket < (size_t)o->ahead + 1) {
        fprintf(stderr,
                "bench_drive_io: block %zu must be a multiple of 4096, request %zu of the block, "
                "bucket %zu of the request, bytes %zu of the bucket and hold more than --ahead "
                "buckets\n",
                o->block, o->request, o->bucket, o->bytes);
        return 0;
    }
    return 1;
}

typedef struct pipeline {
    zoe_drive_io *io;
    const options *o;
    int slots;                   /* 2k+1 bucket buffers */
    char **buf;                  /* [slots][bucket] */
    zoe_drive_io_ticket *ticket; /* [slots][requests per bucket] */
    size_t per_bucket;
} pipeline;

static void issue(pipeline *p, size_t bucket, int write) {
    int s = (int)(bucket % (size_t)p->slots);
    for (size_t r = 0; r < p->per_bucket; r++) {
        size_t off = bucket * p->o->bucket + r * p->o->request;
        char *b = p->buf[s] + r * p->o->request;
        zoe_drive_io_ticket *t = &p->ticket[(size_t)s * p->per_bucket + r];
        zoe_status st = write ? zoe_drive_io_write(p->io, off, b, p->o->request, t)
                              : zoe_drive_io_read(p->io, off, b, p->o->request, t);
        if (st != ZOE_OK) die(write ? "write" : "read");
    }
}

static void finish(pipeline *p, size_t bucket) {
    int s = (int)(bucket % (size_t)p->slots);
    for (size_t r = 0; r < p->per_bucket; r++)
        if (zoe_drive_io_wait(p->io, p->ticket[(size_t)s * p->per_bucket + r]) != ZOE_OK)
            die("wait");
}

/* CPU seconds of this process so far, every thread (the reaper, the workers) included. */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* One pass of the host step's I/O over every bucket; returns bytes per second moved, and adds
 * the CPU seconds it took to *cpu. */
static double engine_pass(pipeline *p, double *cpu) {
    size_t n = p->o->bytes / p->o->bucket, k = (size_t)p->o->ahead;
    double t0 = now(), c0 = cpu_seconds();
    for (size_t j = 0; j <= k && j < n; j++) issue(p, j, 0);
    for (size_t i = 0; i < n; i++) {
        finish(p, i);   /* bucket i is in host memory */
        issue(p, i, 1); /* (updated) and written behind */
        if (i >= k) finish(p, i - k);
        if (i + k + 1 < n) issue(p, i + k + 1, 0);
    }
    for (size_t i = n > k ? n - k : 0; i < n; i++) finish(p, i);
    *cpu += cpu_seconds() - c0;
    return 2.0 * (double)p->o->bytes / (now() - t0);
}

static zoe_drive_io *open_engine(const options *o, zoe_drive_io_engine engine) {
    zoe_drive_io_config c = zoe_drive_io_config_init();
    const char *paths[] = {o->dir};
    c.paths = paths;
    c.num_paths = 1;
    c.bytes = o->bytes;
    c.stripe_bytes = o->block;
    c.queue_depth = o->queue_depth;
    c.engine = engine;
    char run_id[64]; /* two benchmarks side by side each have their own files */
    snprintf(run_id, sizeof run_id, "bench-%s-%d",
             engine == ZOE_DRIVE_IO_URING ? "uring" : "threads", (int)getpid());
    c.run_id = run_id;
    zoe_drive_io *io = NULL;
    if (zoe_drive_io_open(&c, &io) != ZOE_OK) return NULL;
    return io;
}

/* Writes every byte once, untimed: a preallocated extent reads as zeros without touching the
 * drive, which would flatter the reads. */
static void fill(pipeline *p) {
    for (int s = 0; s < p->slots; s++) memset(p->buf[s], 0x5a + s, p->o->bucket);
    size_t n = p->o->bytes / p->o->bucket;
    for (size_t i = 0; i < n; i++) {
        issue(p, i, 1);
        finish(p, i);
    }
}

/* fio's ways of moving `bytes` read and `bytes` written, O_DIRECT, in blocks of the block
 * size, with the engine's queue depth Q. */
enum fio_way { FIO_MIXED_URING, FIO_STREAMS_URING, FIO_MIXED_PSYNC };

/* fio's bytes per second (reads + writes), or -1. */
static double fio_pass(const options *o, const char *file, enum fio_way way) {
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd,
                     "%s --filename=%s --direct=1 --bs=%zu --group_reporting "
                     "--output-format=json",
                     o->fio, file, o->block);
    size_t region = o->bytes / (size_t)o->queue_depth / o->block * o->block;
    if (way == FIO_MIXED_URING) /* one job, reads and writes mixed at depth Q */
        snprintf(cmd + n, sizeof cmd - (size_t)n,
                 " --name=mixed --ioengine=io_uring --iodepth=%d --rw=rw --rwmixread=50 "
                 "--size=%zu --io_size=%zu",
                 o->queue_depth, o->bytes, 2 * o->bytes);
    else if (way == FIO_STREAMS_URING) /* a read stream and a write stream, depth Q/2 each */
        snprintf(cmd + n, sizeof cmd - (size_t)n,
                 " --ioengine=io_uring --iodepth=%d --size=%zu --name=read --rw=read "
                 "--name=write --rw=write",
                 (o->queue_depth + 1) / 2, o->bytes);
    else /* Q synchronous jobs, each mixing reads and writes over its own 1/Q of the file */
        snprintf(cmd + n, sizeof cmd - (size_t)n,
                 " --name=psync --ioengine=psync --numjobs=%d --rw=rw --rwmixread=50 "
                 "--size=%zu --offset_increment=%zu --io_size=%zu",
                 o->queue_depth, region, region, 2 * region);
    strncat(cmd, " 2>/dev/null", sizeof cmd - strlen(cmd) - 1);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    for (size_t n; text && (n = fread(text + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (cap - len < 4096) text = realloc(text, cap *= 2);
    }
    int rc = pclose(f);
    if (!text) return -1;
    text[len] = 0;
    /* fio may print notes before the JSON */
    cJSON *root = rc == 0 && strchr(text, '{') ? cJSON_Parse(strchr(text, '{')) : NULL;
    free(text);
    cJSON *job = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "jobs"), 0);
    cJSON *rd = cJSON_GetObjectItem(job, "read"), *wr = cJSON_GetObjectItem(job, "write");
    double bw = -1;
    if (rd && wr)
        bw = cJSON_GetNumberValue(cJSON_GetObjectItem(rd, "bw_bytes")) +
             cJSON_GetNumberValue(cJSON_GetObjectItem(wr, "bw_bytes"));
    cJSON_Delete(root);
    return bw;
}

/* fio's file, written once (untimed) for the same reason as fill(). */
static int write_fio_file(const options *o, const char *file) {
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 0;
    char *b = zoe_drive_io_buffer_alloc(o->bucket);
    memset(b, 0x3c, o->bucket);
    int ok = b != NULL;
    for (size_t done = 0; ok && done < o->bytes; done += o->bucket)
        ok = write(fd, b, o->bucket) == (ssize_t)o->bucket;
    ok = ok && fsync(fd) == 0;
    zoe_drive_io_buffer_free(b);
    close(fd);
    return ok;
}

static pipeline make_pipeline(zoe_drive_io *io, const options *o) {
    pipeline p = {
        .io = io, .o = o, .slots = 2 * o->ahead + 1, .per_bucket = o->bucket / o->request};
    p.buf = calloc((size_t)p.slots, sizeof *p.buf);
    p.ticket = calloc((size_t)p.slots * p.per_bucket, sizeof *p.ticket);
    if (!p.buf || !p.ticket) die("out of memory");
    for (int s = 0; s < p.slots; s++)
        if (!(p.buf[s] = zoe_drive_io_buffer_alloc(o->bucket))) die("out of memory");
    return p;
}

static void free_pipeline(pipeline *p) {
    for (int s = 0; s < p->slots; s++) zoe_drive_io_buffer_free(p->buf[s]);
    free(p->buf);
    free(p->ticket);
    zoe_drive_io_destroy(p->io);
}

int main(int argc, char **argv) {
    options o;
    if (!parse_options(argc, argv, &o)) return 2;
    enum { URING, THREADS, FIO, RUNS = FIO + 3 };
    static const char *const names[RUNS] = {"engine_io_uring", "engine_threads",
                                            "fio_io_uring_mixed", "fio_io_uring_streams",
                                            "fio_psync_mixed"};
    zoe_drive_io *uring = open_engine(&o, ZOE_DRIVE_IO_URING);
    if (!uring) fprintf(stderr, "bench_drive_io: io_uring: %s\n", zoe_last_error());
    zoe_drive_io *threads = open_engine(&o, ZOE_DRIVE_IO_THREADS);
    if (!threads) die("opening the thread engine");
    pipeline pu = uring ? make_pipeline(uring, &o) : (pipeline){0};
    pipeline pt = make_pipeline(threads, &o);
    char fio_file[1024];
    snprintf(fio_file, sizeof fio_file, "%s/zoe-bench-fio.%d", o.dir, (int)getpid());
    if (!write_fio_file(&o, fio_file)) {
        fprintf(stderr, "bench_drive_io: writing %s: %s\n", fio_file, strerror(errno));
        return 1;
    }
    if (uring) fill(&pu);
    fill(&pt);

    double bw[RUNS][MAX_REPEATS], cpu[2] = {0, 0};
    for (int r = 0; r < o.repeats; r++) {
        bw[URING][r] = uring ? engine_pass(&pu, &cpu[URING]) : -1;
        bw[THREADS][r] = engine_pass(&pt, &cpu[THREADS]);
        for (int w = 0; w < 3; w++) bw[FIO + w][r] = fio_pass(&o, fio_file, (enum fio_way)w);
    }
    unlink(fio_file);
    if (uring) free_pipeline(&pu); /* removes the scratch files */
    free_pipeline(&pt);
    double med[RUNS];
    for (int i = 0; i < RUNS; i++) med[i] = bench_median(bw[i], o.repeats);
    double fio_best = 0;
    for (int w = FIO; w < RUNS; w++) fio_best = med[w] > fio_best ? med[w] : fio_best;
    if (med[FIO] <= 0 || med[FIO + 1] <= 0 || med[FIO + 2] <= 0) {
        fprintf(stderr, "bench_drive_io: '%s' failed (is fio installed? --fio PATH)\n", o.fio);
        return 1;
    }
    double ours = uring ? med[URING] : med[THREADS];
    struct utsname u;
    uname(&u);
    double load = -1; /* other work on the machine: the figures mean little without it */
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf && fscanf(lf, "%lf", &load) != 1) load = -1;
    if (lf) fclose(lf);
    printf("{\"bench\": \"drive_io\", \"host\": \"%s\", \"dir\": \"%s\", \"bytes\": %zu, "
           "\"bucket\": %zu, \"request\": %zu, \"block\": %zu, \"queue_depth\": %d, \"ahead\": %d, "
           "\"repeats\": %d, \"loadavg\": %.1f, \"engine\": \"%s\"",
           u.nodename, o.dir, o.bytes, o.bucket, o.request, o.block, o.queue_depth, o.ahead,
           o.repeats, load, uring ? "io_uring" : "threads");
    for (int i = 0; i < RUNS; i++) printf(", \"%s_MBps\": %.1f", names[i], med[i] / 1e6);
    /* CPU seconds per GB moved: what the engine costs the host step's cores */
    double gb = 2.0 * (double)o.bytes * o.repeats / 1e9;
    printf(", \"cpu_s_per_GB_io_uring\": %.3f, \"cpu_s_per_GB_threads\": %.3f", cpu[URING] / gb,
           cpu[THREADS] / gb);
    printf(", \"bandwidth_share\": %.3f, \"bandwidth_share_threads\": %.3f}\n", ours / fio_best,
           med[THREADS] / fio_best);
    return 0;
}
