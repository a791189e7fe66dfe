/* The drive tier's I/O engine (runtime/drive_io.h) against an independent reference: the same
 * bytes kept in memory. Random data written and read back in random aligned pieces across
 * stripes and paths (a directory of this disk and one of a tmpfs), with more requests in flight
 * than the queue depth, on both engines, with O_DIRECT and buffered; the files themselves read
 * with pread at the places the striping rule puts each stripe. Then the faults: no room (a small
 * tmpfs mounted in a private mount namespace where this runs as root, and RLIMIT_FSIZE as
 * test_ckpt_full_disk fills a disk, everywhere), a short read of a truncated file, ENOSPC
 * mid-run, an injected EIO, and the leftovers of a killed run (removed) beside a live run's
 * (kept). At several ranks: ranks of a node sharing a drive's directory.
 *
 * The other runs are this binary again, without MPI (a fork of this process has MPI's threads,
 * and TSan starts no thread after a fork of a threaded process): a crashed run and a live one
 * (test_drive_io --run DIR RUN_ID READY_FD HOLD_FD), one in a private mount namespace
 * (--tiny-tmpfs DIR) and one that seccomp forbids io_uring (--no-uring DIR). */
#define _GNU_SOURCE /* unshare, fallocate */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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
    int queue_depth; /* 1: every request but the first waits in the FIFO for segments */
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
    c.queue_depth = cc.queue_depth;
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
    CHECK(zoe_drive_io_direct_paths(io) == (cc.direct ? num_paths : 0), "%d paths O_DIRECT",
          zoe_drive_io_direct_paths(io));
    printf("round trip: engine %s, direct %d, queue depth %d, %d paths, alignment %zu\n",
           zoe_drive_io_engine_name(io), cc.direct, cc.queue_depth, num_paths,
           zoe_drive_io_alignment(io));
    CHECK(!strcmp(zoe_drive_io_engine_name(io),
                  cc.engine == ZOE_DRIVE_IO_URING ? "io_uring" : "threads"),
          "engine %s", zoe_drive_io_engine_name(io));
    unsigned char *ref = zoe_drive_io_buffer_alloc(bytes), *got = zoe_drive_io_buffer_alloc(bytes);
    test_rng rng;
    test_rng_seed(&rng, seed);
    /* a new space reads as zeros before anything is written (nothing zeroes it at open) */
    memset(got, 0xa5, bytes);
    move_pieces(io, &rng, NULL, got, bytes, 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) nonzero += got[i] != 0;
    CHECK(nonzero == 0, "%zu bytes of a new scratch space read as non-zero", nonzero);
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

static zoe_drive_io_config one_config(const char *const *paths, int num_paths, size_t bytes,
                                      zoe_drive_io_engine engine, const char *run_id) {
    zoe_drive_io_config c = zoe_drive_io_config_init();
    c.paths = paths;
    c.num_paths = num_paths;
    c.bytes = bytes;
    c.stripe_bytes = 64 << 10;
    c.queue_depth = 4;
    c.engine = engine;
    c.run_id = run_id;
    return c;
}

/* Writes random bytes over the whole space; returns 0 when a step failed. */
static int fill_random(zoe_drive_io *io, size_t bytes, uint64_t seed) {
    unsigned char *buf = zoe_drive_io_buffer_alloc(bytes);
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)test_rng_next(&rng);
    zoe_drive_io_ticket t;
    int ok =
        CHECK_OK(zoe_drive_io_write(io, 0, buf, bytes, &t)) && CHECK_OK(zoe_drive_io_wait(io, t));
    zoe_drive_io_buffer_free(buf);
    return ok;
}

/* The request's wait fails with ZOE_ERR_IO and a message holding every one of the strings. */
static void check_io_error(zoe_status st, const char *what, const char *a, const char *b,
                           const char *c) {
    const char *msg = zoe_last_error();
    CHECK(st == ZOE_ERR_IO, "%s: status %d, not an I/O error (%s)", what, (int)st, msg);
    CHECK(strstr(msg, a) && strstr(msg, b) && strstr(msg, c),
          "%s: the message does not say '%s', '%s' and '%s': %s", what, a, b, c, msg);
    printf("%s: %s\n", what, msg);
}

/* A truncated file (another process, an fsck, a careless rm and recreate) reads short, and an
 * EIO (injected: a real one needs device-mapper, absent from most test machines) fails its
 * request; both name the file and the offsets, and the handle goes on working. */
static void short_read_and_eio(const char *const *paths, zoe_drive_io_engine engine) {
    const size_t stripe = 64 << 10, bytes = 6 * stripe;
    zoe_drive_io_config c = one_config(paths, 3, bytes, engine, "faults");
    zoe_drive_io *io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    if (engine == ZOE_DRIVE_IO_URING && st == ZOE_ERR_UNSUPPORTED) return; /* said above */
    if (!CHECK_OK(st) || !fill_random(io, bytes, 7)) {
        zoe_drive_io_destroy(io);
        return;
    }
    char *buf = zoe_drive_io_buffer_alloc(bytes), file[512], want[600];
    /* stripe 4 lives in file 1 at file offset 64 KiB: cut that file 8 KiB into it */
    scratch_name(file, sizeof file, paths[1], "faults", 0);
    CHECK(truncate(file, (off_t)(stripe + 8192)) == 0, "truncate %s: %s", file, strerror(errno));
    zoe_drive_io_ticket t;
    CHECK_OK(zoe_drive_io_read(io, 3 * stripe, buf, 2 * stripe, &t));
    snprintf(want, sizeof want, "%s: short read: 8192 of 65536 bytes", file);
    check_io_error(zoe_drive_io_wait(io, t), "short read", want, "file offset 65536",
                   "scratch offset 262144");

    /* EIO in the middle of a write spanning three stripes: the second stripe's segment */
    zoe_drive_io_inject_fault(io, stripe + 4096, EIO);
    CHECK_OK(zoe_drive_io_write(io, 0, buf, 3 * stripe, &t));
    scratch_name(file, sizeof file, paths[1], "faults", 0);
    snprintf(want, sizeof want, "%s: write of 65536 bytes at file offset 0", file);
    check_io_error(zoe_drive_io_wait(io, t), "EIO", want, "scratch offset 65536", strerror(EIO));
    /* one fault, one failed request: the next one succeeds */
    CHECK_OK(zoe_drive_io_write(io, 0, buf, 3 * stripe, &t));
    CHECK_OK(zoe_drive_io_wait(io, t));
    zoe_drive_io_buffer_free(buf);
    zoe_drive_io_destroy(io);
}

/* No room: RLIMIT_FSIZE fails the preallocation with EFBIG as a full disk fails it with ENOSPC
 * (test_ckpt_full_disk's way, no privileges needed); the line names the path, the bytes needed
 * and the bytes free, and no file is left. */
static void no_room_file_limit(const char *dir) {
    unsigned long long limit = test_file_size_limit(1 << 20);
    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 4 << 20, ZOE_DRIVE_IO_AUTO, "noroom");
    zoe_drive_io *io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    test_file_size_limit(limit);
    const char *msg = zoe_last_error();
    printf("no room (file size limit): %s\n", msg);
    char want[600];
    snprintf(want, sizeof want, "drive path %s: no room", dir);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && !io, "a file past the size limit was opened");
    CHECK(strstr(msg, want) && strstr(msg, "needs 4194304 bytes") && strstr(msg, "bytes are free"),
          "the refusal does not name path, bytes needed and free: %s", msg);
    char file[512];
    scratch_name(file, sizeof file, dir, "noroom", 0);
    CHECK(!file_exists(file), "%s left behind by the refusal", file);
    zoe_drive_io_destroy(io);
}

/* In a child process (its own mount namespace, as root): a 1 MiB tmpfs refuses 4 MiB of scratch by
 * the room check before any file exists, and a write into a hole of a file whose file system was
 * filled meanwhile fails with ENOSPC naming the file and offset, on both engines; then a ramfs,
 * which refuses O_DIRECT, runs buffered. Exit 0: all good; 1: a check failed (printed); 77: no
 * mount namespace here. */
static int tiny_tmpfs_child(const char *dir) {
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", dir, "tmpfs", 0, "size=1m")) {
        printf("no private tmpfs here (%s): the file size limit covers the room check\n",
               strerror(errno));
        return 77;
    }
    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 4 << 20, ZOE_DRIVE_IO_AUTO, "tiny");
    zoe_drive_io *io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    const char *msg = zoe_last_error();
    printf("no room (1 MiB tmpfs): %s\n", msg);
    char want[600];
    snprintf(want, sizeof want, "drive path %s: no room", dir);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(msg, want) &&
              strstr(msg, "needs 4194304 bytes; 1048576 bytes are free there"),
          "the refusal does not name path, bytes needed and free: %s", msg);
    for (zoe_drive_io_engine e = ZOE_DRIVE_IO_URING; e <= ZOE_DRIVE_IO_THREADS; e++) {
        c = one_config(paths, 1, 256 << 10, e, "tiny");
        st = zoe_drive_io_open(&c, &io);
        if (e == ZOE_DRIVE_IO_URING && st == ZOE_ERR_UNSUPPORTED) continue;
        if (!CHECK_OK(st) || !fill_random(io, 256 << 10, 9)) break;
        char file[512], filler[512];
        scratch_name(file, sizeof file, dir, "tiny", 0);
        snprintf(filler, sizeof filler, "%s/filler", dir);
        int fd = open(file, O_RDWR);
        CHECK(fd >= 0 && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 128 << 10,
                                   64 << 10) == 0,
              "punching a hole in %s: %s", file, strerror(errno));
        close(fd);
        fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        char block[4096];
        memset(block, 1, sizeof block);
        while (write(fd, block, sizeof block) == (ssize_t)sizeof block) {
        }
        close(fd);
        void *buf = zoe_drive_io_buffer_alloc(64 << 10);
        memset(buf, 2, 64 << 10);
        zoe_drive_io_ticket t;
        CHECK_OK(zoe_drive_io_write(io, 128 << 10, buf, 64 << 10, &t));
        st = zoe_drive_io_wait(io, t);
        snprintf(want, sizeof want, "%s: write of 65536 bytes at file offset 131072", file);
        check_io_error(st, "ENOSPC", want, "scratch offset 131072", strerror(ENOSPC));
        zoe_drive_io_buffer_free(buf);
        zoe_drive_io_destroy(io);
        unlink(filler);
    }
    umount(dir);

    /* ramfs refuses O_DIRECT at open (as tmpfs did before Linux 6.6): buffered there */
    if (mount("ramfs", dir, "ramfs", 0, NULL)) {
        CHECK(0, "mounting a ramfs: %s", strerror(errno));
        return 1;
    }
    c = one_config(paths, 1, 256 << 10, ZOE_DRIVE_IO_AUTO, "ramfs");
    io = NULL;
    if (CHECK_OK(zoe_drive_io_open(&c, &io))) {
        CHECK(zoe_drive_io_direct_paths(io) == 0, "O_DIRECT on a ramfs");
        unsigned char *buf = zoe_drive_io_buffer_alloc(256 << 10);
        zoe_drive_io_ticket t;
        if (fill_random(io, 256 << 10, 17) &&
            CHECK_OK(zoe_drive_io_read(io, 0, buf, 256 << 10, &t)) &&
            CHECK_OK(zoe_drive_io_wait(io, t))) {
            test_rng rng;
            test_rng_seed(&rng, 17);
            size_t bad = 0;
            for (size_t i = 0; i < 256 << 10; i++)
                bad += buf[i] != (unsigned char)test_rng_next(&rng);
            CHECK(bad == 0, "%zu bytes read back differ on the ramfs", bad);
        }
        zoe_drive_io_buffer_free(buf);
    }
    zoe_drive_io_destroy(io);
    umount(dir);
    return test_failures() ? 1 : 0;
}

/* In a child process that seccomp forbids io_uring_setup (as container runtimes' default
 * profiles do): AUTO runs the thread engine, and URING is refused saying why. Exit 0: all good;
 * 1: a check failed (printed). */
static int no_uring_child(const char *dir) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        CHECK(0, "seccomp: %s", strerror(errno));
        return 1;
    }
    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 256 << 10, ZOE_DRIVE_IO_AUTO, "noring");
    zoe_drive_io *io = NULL;
    if (CHECK_OK(zoe_drive_io_open(&c, &io))) {
        CHECK(!strcmp(zoe_drive_io_engine_name(io), "threads"), "AUTO ran %s under seccomp",
              zoe_drive_io_engine_name(io));
        fill_random(io, 256 << 10, 13);
    }
    zoe_drive_io_destroy(io);
    c.engine = ZOE_DRIVE_IO_URING;
    io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    printf("io_uring forbidden: %s\n", zoe_last_error());
    CHECK(st == ZOE_ERR_UNSUPPORTED && (strstr(zoe_last_error(), strerror(EPERM)) ||
                                        strstr(zoe_last_error(), "this build has no liburing")),
          "URING under seccomp: %s", zoe_last_error());
    zoe_drive_io_destroy(io);
    return test_failures() ? 1 : 0;
}

/* Runs this binary again as a helper without MPI; CHECKs its exit status. */
static void run_helper(const char *mode, const char *dir, int may_be_unavailable) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_drive_io", mode, dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) &&
              (WEXITSTATUS(status) == 0 || (may_be_unavailable && WEXITSTATUS(status) == 77)),
          "test_drive_io %s failed (status %d)", mode, status);
}

/* Waits until the file's flock is free: a process killed with an io_uring releases its files a
 * moment after it is reaped (the kernel tears the ring down in a work queue: 30 ms measured on
 * this test's VM). Up to 10 s. */
static void wait_unlocked(const char *file) {
    int fd = open(file, O_RDONLY);
    for (int i = 0; fd >= 0 && i < 1000 && flock(fd, LOCK_EX | LOCK_NB); i++) usleep(10000);
    if (fd >= 0) close(fd); /* drops the lock just taken */
}

/* The helper of a run on dir as run_id: opens a handle and writes random bytes, then either
 * dies by SIGKILL with its file in place (hold_fd < 0), or tells the parent it is ready by
 * writing to ready_fd and holds the handle until hold_fd reaches its end. */
static int run_child(const char *dir, const char *run_id, int ready_fd, int hold_fd) {
    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 256 << 10, ZOE_DRIVE_IO_AUTO, run_id);
    zoe_drive_io *io = NULL;
    if (zoe_drive_io_open(&c, &io) != ZOE_OK || !fill_random(io, 256 << 10, 11)) return 1;
    if (hold_fd < 0) raise(SIGKILL);
    char b = 1;
    if (write(ready_fd, &b, 1) != 1) return 1;
    while (read(hold_fd, &b, 1) > 0) {
    }
    zoe_drive_io_destroy(io);
    return 0;
}

/* Starts run_child in this binary again (test_drive_io --run DIR RUN_ID READY_FD HOLD_FD); the
 * child closes parent_end, the hold pipe's other end, or hold_fd never reaches its end. */
static pid_t start_run(const char *dir, const char *run_id, int ready_fd, int hold_fd,
                       int parent_end) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (parent_end >= 0) close(parent_end);
    char ready[16], hold[16];
    snprintf(ready, sizeof ready, "%d", ready_fd);
    snprintf(hold, sizeof hold, "%d", hold_fd);
    execl("/proc/self/exe", "test_drive_io", "--run", dir, run_id, ready, hold, (char *)NULL);
    _exit(127);
}

/* A crashed run's file is removed by the next run on its path and never read (its successor
 * with the same run id reads zeros where the dead one wrote); a live run's file is left alone,
 * and a second run with a live run's own name is refused. */
static void leftovers(const char *dir) {
    char crashed[512], live[512], fresh[512];
    scratch_name(crashed, sizeof crashed, dir, "crashed", 0);
    scratch_name(live, sizeof live, dir, "live", 0);
    scratch_name(fresh, sizeof fresh, dir, "fresh", 0);
    int status = 0;
    waitpid(start_run(dir, "crashed", -1, -1, -1), &status, 0);
    CHECK(WIFSIGNALED(status) && file_exists(crashed), "the crashed run left no file (status %d)",
          status);
    wait_unlocked(crashed);
    int ready[2], hold[2];
    if (pipe(ready) || pipe(hold)) return;
    pid_t holder = start_run(dir, "live", ready[1], hold[0], hold[1]);
    close(ready[1]);
    close(hold[0]);
    char b;
    CHECK(read(ready[0], &b, 1) == 1, "the live run did not start");

    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 256 << 10, ZOE_DRIVE_IO_AUTO, "fresh");
    zoe_drive_io *io = NULL;
    CHECK_OK(zoe_drive_io_open(&c, &io));
    CHECK(!file_exists(crashed), "the crashed run's file was not removed");
    CHECK(file_exists(live) && file_exists(fresh), "the live run's file or the new one is missing");
    zoe_drive_io_destroy(io);

    c.run_id = "live";
    io = NULL;
    zoe_status st = zoe_drive_io_open(&c, &io);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), "in use by a live run"),
          "a second run with a live run's name was not refused: %s", zoe_last_error());
    CHECK(file_exists(live), "the refusal touched the live run's file");
    zoe_drive_io_destroy(io);

    /* the same name as a crashed run: its file is replaced, its bytes never read */
    waitpid(start_run(dir, "crashed", -1, -1, -1), &status, 0);
    wait_unlocked(crashed); /* 30 ms here; the engine waits up to 1 s, a loaded machine more */
    c.run_id = "crashed";
    io = NULL;
    if (CHECK_OK(zoe_drive_io_open(&c, &io))) {
        unsigned char *buf = zoe_drive_io_buffer_alloc(256 << 10);
        zoe_drive_io_ticket t;
        CHECK_OK(zoe_drive_io_read(io, 0, buf, 256 << 10, &t));
        CHECK_OK(zoe_drive_io_wait(io, t));
        size_t nonzero = 0;
        for (size_t i = 0; i < 256 << 10; i++) nonzero += buf[i] != 0;
        CHECK(nonzero == 0, "%zu bytes of the crashed run were read back", nonzero);
        zoe_drive_io_buffer_free(buf);
    }
    zoe_drive_io_destroy(io);

    close(hold[1]); /* the live run ends and removes its own file */
    waitpid(holder, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the live run failed (status %d)", status);
    CHECK(!file_exists(live) && !file_exists(crashed) && !file_exists(fresh), "files left behind");
    close(ready[0]);
}

/* ZOE_DRIVE_IO over the config's engine, AUTO's choice by what moves the bytes (dir is a disk,
 * shm a tmpfs); bad configs refused with the bad value named. */
static void choice_and_bad_input(const char *dir, const char *shm) {
    const char *paths[] = {dir};
    zoe_drive_io_config c = one_config(paths, 1, 64 << 10, ZOE_DRIVE_IO_AUTO, "choice");
    zoe_drive_io *io = NULL;
    setenv("ZOE_DRIVE_IO", "threads", 1);
    if (CHECK_OK(zoe_drive_io_open(&c, &io)))
        CHECK(!strcmp(zoe_drive_io_engine_name(io), "threads"),
              "ZOE_DRIVE_IO=threads ran the %s engine", zoe_drive_io_engine_name(io));
    zoe_drive_io_destroy(io);
    io = NULL;
    unsetenv("ZOE_DRIVE_IO");
    /* AUTO: the threads where the CPU copies the bytes (a tmpfs, buffered I/O); on a disk with
     * O_DIRECT io_uring, where it runs (the seccomp child checks where it does not) */
    c.paths = (const char *[]){shm};
    if (CHECK_OK(zoe_drive_io_open(&c, &io)))
        CHECK(!strcmp(zoe_drive_io_engine_name(io), "threads"), "AUTO on a tmpfs ran %s",
              zoe_drive_io_engine_name(io));
    zoe_drive_io_destroy(io);
    io = NULL;
    c.paths = paths;
    c.direct = 0;
    if (CHECK_OK(zoe_drive_io_open(&c, &io)))
        CHECK(!strcmp(zoe_drive_io_engine_name(io), "threads"), "AUTO with buffered I/O ran %s",
              zoe_drive_io_engine_name(io));
    zoe_drive_io_destroy(io);
    io = NULL;
    c.direct = 1;
    zoe_drive_io_config uring = c;
    uring.engine = ZOE_DRIVE_IO_URING;
    struct statfs fs;
    int disk = statfs(dir, &fs) == 0 && fs.f_type != TMPFS_MAGIC && fs.f_type != RAMFS_MAGIC;
    if (!disk) printf("%s is a memory file system here: AUTO on a disk not checked\n", dir);
    if (disk && zoe_drive_io_open(&uring, &io) == ZOE_OK) { /* io_uring runs here */
        zoe_drive_io_destroy(io);
        io = NULL;
        if (CHECK_OK(zoe_drive_io_open(&c, &io)))
            CHECK(!strcmp(zoe_drive_io_engine_name(io), "io_uring"),
                  "AUTO on a disk with O_DIRECT ran %s", zoe_drive_io_engine_name(io));
        zoe_drive_io_destroy(io);
        io = NULL;
    }
    setenv("ZOE_DRIVE_IO", "posix-aio", 1);
    CHECK(zoe_drive_io_open(&c, &io) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "ZOE_DRIVE_IO='posix-aio'"),
          "a bad ZOE_DRIVE_IO was taken: %s", zoe_last_error());
    unsetenv("ZOE_DRIVE_IO");
    struct {
        zoe_drive_io_config c;
        const char *named;
    } bad[] = {
        {one_config(paths, 1, 64 << 10, ZOE_DRIVE_IO_AUTO, "a/b"), "run id 'a/b'"},
        {one_config(paths, 1, 0, ZOE_DRIVE_IO_AUTO, "x"), "0 scratch bytes"},
        {one_config(paths, 0, 64 << 10, ZOE_DRIVE_IO_AUTO, "x"), "0 paths"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(zoe_drive_io_open(&bad[i].c, &io) == ZOE_ERR_INVALID_ARGUMENT && !io &&
                  strstr(zoe_last_error(), bad[i].named),
              "bad config %zu: %s", i, zoe_last_error());
    }
    c.stripe_bytes = 5000;
    CHECK(zoe_drive_io_open(&c, &io) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "stripe of 5000 bytes"),
          "a stripe of 5000 bytes was taken: %s", zoe_last_error());
    c = one_config((const char *[]){"/nonexistent/drive"}, 1, 64 << 10, ZOE_DRIVE_IO_AUTO, "x");
    CHECK(zoe_drive_io_open(&c, &io) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "drive path /nonexistent/drive"),
          "a missing path was taken: %s", zoe_last_error());
}

/* Ranks of one node share a drive: each opens its own file in the same directory at the same
 * moment, and no rank's sweep for leftovers takes another's live file; each reads back its own
 * bytes. */
static void shared_path(void) {
    char dir[64] = "/tmp/zoe_drive_io_shared.XXXXXX";
    if (test_rank() == 0 && !mkdtemp(dir)) dir[0] = 0;
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!dir[0]) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    const char *paths[] = {dir};
    const size_t bytes = 256 << 10;
    zoe_drive_io_config c = one_config(paths, 1, bytes, ZOE_DRIVE_IO_AUTO, "shared");
    c.rank = test_rank();
    zoe_drive_io *io = NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    int opened = CHECK_OK(zoe_drive_io_open(&c, &io)) && fill_random(io, bytes, 50 + c.rank);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < test_world_size(); r++) {
        char file[512];
        scratch_name(file, sizeof file, dir, "shared", r);
        CHECK(file_exists(file), "rank %d's live file is gone", r);
    }
    if (opened) {
        unsigned char *got = zoe_drive_io_buffer_alloc(bytes), *want = malloc(bytes);
        test_rng rng;
        test_rng_seed(&rng, 50 + (uint64_t)c.rank);
        for (size_t i = 0; i < bytes; i++) want[i] = (unsigned char)test_rng_next(&rng);
        zoe_drive_io_ticket t;
        CHECK_OK(zoe_drive_io_read(io, 0, got, bytes, &t));
        CHECK_OK(zoe_drive_io_wait(io, t));
        CHECK(memcmp(got, want, bytes) == 0, "rank %d read back other bytes", c.rank);
        zoe_drive_io_buffer_free(got);
        free(want);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zoe_drive_io_destroy(io);
    MPI_Barrier(MPI_COMM_WORLD);
    if (test_rank() == 0) CHECK(rmdir(dir) == 0, "%s not empty after every rank's destroy", dir);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--tiny-tmpfs")) return tiny_tmpfs_child(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--no-uring")) return no_uring_child(argv[2]);
    if (argc == 6 && !strcmp(argv[1], "--run"))
        return run_child(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    test_init(&argc, &argv);
    if (test_world_size() > 1) { /* several ranks: what they share; the rest is per rank */
        shared_path();
        return test_finish("test_drive_io");
    }
    char disk_a[] = "/tmp/zoe_drive_io_a.XXXXXX", disk_b[] = "/tmp/zoe_drive_io_b.XXXXXX",
         shm[] = "/dev/shm/zoe_drive_io.XXXXXX";
    if (!mkdtemp(disk_a) || !mkdtemp(disk_b) || !mkdtemp(shm)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    const char *three[] = {disk_a, shm, disk_b};
    const case_config cases[] = {
        {ZOE_DRIVE_IO_THREADS, 1, 8}, {ZOE_DRIVE_IO_THREADS, 0, 8}, {ZOE_DRIVE_IO_URING, 1, 8},
        {ZOE_DRIVE_IO_URING, 0, 8},   {ZOE_DRIVE_IO_THREADS, 1, 1}, {ZOE_DRIVE_IO_URING, 1, 1},
    };
    unsetenv("ZOE_DRIVE_IO");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        round_trip(three, 3, cases[i], 100 + i);
        round_trip(three, 1, cases[i], 200 + i);
    }
    for (zoe_drive_io_engine e = ZOE_DRIVE_IO_URING; e <= ZOE_DRIVE_IO_THREADS; e++)
        short_read_and_eio(three, e);
    choice_and_bad_input(disk_a, shm);
    no_room_file_limit(disk_a);
    run_helper("--tiny-tmpfs", disk_b, 1); /* 77: no private tmpfs (not root) */
    run_helper("--no-uring", disk_b, 0);
    leftovers(disk_b);
    rmdir(disk_a);
    rmdir(disk_b);
    rmdir(shm);
    return test_finish("test_drive_io");
}
