/* The drive tier's files and requests: creation, leftovers, preallocation and the room check,
 * striping, alignment, and the errors that name a file and an offset. The bytes move in
 * drive_io_uring.c or drive_io_threads.c.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#define _GNU_SOURCE /* O_DIRECT, statx */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "runtime/drive_io_impl.h"
#include "runtime/error.h"
#include "runtime/host_array.h"

enum {
    PAGE = 4096,
    MAX_QUEUE_DEPTH = 4096,
    MAX_RUN_ID = 64,
    MAX_STRIPE = 1 << 30,   /* a segment's length fits an SQE's 32 bits */
    OWN_NAME_RETRIES = 100, /* 1 s in steps of 10 ms */
};
static const char SCRATCH_PREFIX[] = "zoe-scratch.";

zoe_drive_io_config zoe_drive_io_config_init(void) {
    return (zoe_drive_io_config){
        .version = ZOE_DRIVE_IO_CONFIG_VERSION,
        .stripe_bytes = 1 << 20,
        .queue_depth = 32,
        .engine = ZOE_DRIVE_IO_AUTO,
        .direct = 1,
    };
}

static size_t round_up(size_t x, size_t unit) {
    return (x + unit - 1) / unit * unit;
}

static zoe_status check_config(const zoe_drive_io_config *c) {
    if (c->version != ZOE_DRIVE_IO_CONFIG_VERSION)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O: config version %d is not %d (use zoe_drive_io_config_init)",
                        c->version, ZOE_DRIVE_IO_CONFIG_VERSION);
    if (c->num_paths < 1 || c->num_paths > ZOE_DRIVE_IO_MAX_PATHS || !c->paths)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O: %d paths (1 to %d)", c->num_paths,
                        ZOE_DRIVE_IO_MAX_PATHS);
    for (int i = 0; i < c->num_paths; i++)
        if (!c->paths[i] || !c->paths[i][0])
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O: path %d is empty", i);
    if (c->bytes == 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O: 0 scratch bytes");
    if (c->stripe_bytes == 0 || c->stripe_bytes % PAGE || c->stripe_bytes > MAX_STRIPE)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O: stripe of %zu bytes is not a multiple of %d up to %d",
                        c->stripe_bytes, PAGE, MAX_STRIPE);
    if (c->queue_depth < 1 || c->queue_depth > MAX_QUEUE_DEPTH)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O: queue depth %d (1 to %d)",
                        c->queue_depth, MAX_QUEUE_DEPTH);
    if (c->engine < ZOE_DRIVE_IO_AUTO || c->engine > ZOE_DRIVE_IO_THREADS)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O: engine %d is not auto, uring or threads", (int)c->engine);
    if (c->rank < 0) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O: rank %d", c->rank);
    size_t n = c->run_id ? strlen(c->run_id) : 0;
    if (n < 1 || n > MAX_RUN_ID ||
        strspn(c->run_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789_-") != n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O: run id '%s' is not 1 to %d of [A-Za-z0-9_-]",
                        c->run_id ? c->run_id : "(null)", MAX_RUN_ID);
    return ZOE_OK;
}

/* The engine asked for, ZOE_DRIVE_IO in the environment over the config's. */
static zoe_status choose_engine(const zoe_drive_io_config *c, zoe_drive_io_engine *engine,
                                const char **why) {
    *engine = c->engine;
    *why = "the config";
    const char *env = getenv("ZOE_DRIVE_IO");
    if (!env || !env[0]) return ZOE_OK;
    *why = "ZOE_DRIVE_IO";
    if (!strcasecmp(env, "auto"))
        *engine = ZOE_DRIVE_IO_AUTO;
    else if (!strcasecmp(env, "uring") || !strcasecmp(env, "io_uring"))
        *engine = ZOE_DRIVE_IO_URING;
    else if (!strcasecmp(env, "threads"))
        *engine = ZOE_DRIVE_IO_THREADS;
    else
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "ZOE_DRIVE_IO='%s' is not auto, uring or threads",
                        env);
    return ZOE_OK;
}

/* Removes the scratch files of runs that ended without removing theirs: names starting
 * zoe-scratch. whose flock nobody holds (the kernel drops a dead process's locks). A live
 * run holds its files' flocks from creation to removal, so they are left alone; one with this
 * handle's own name is a live run with the same run id and rank: refused. The caller holds
 * the directory's flock, so no file is created between the look and the removal. */
static zoe_status remove_leftovers(int dirfd, const char *dir, const char *own_name) {
    int scan_fd = dup(dirfd);
    DIR *d = scan_fd >= 0 ? fdopendir(scan_fd) : NULL;
    if (!d) {
        if (scan_fd >= 0) close(scan_fd);
        return zoe_fail(ZOE_ERR_IO, "drive path %s: cannot list it: %s", dir, strerror(errno));
    }
    zoe_status st = ZOE_OK;
    struct dirent *e;
    while (st == ZOE_OK && (e = readdir(d))) {
        if (strncmp(e->d_name, SCRATCH_PREFIX, sizeof SCRATCH_PREFIX - 1)) continue;
        int fd = openat(dirfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat sb;
        if (fd < 0) continue; /* gone meanwhile, or not ours to open */
        if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
            close(fd);
            continue;
        }
        /* A dead process's io_uring releases its files a moment after the process is gone
         * (the kernel tears a ring down in a work queue): a run restarted under the same name
         * right after a crash waits that moment out before calling its predecessor live. */
        int locked = flock(fd, LOCK_EX | LOCK_NB) != 0;
        for (int i = 0; locked && !strcmp(e->d_name, own_name) && i < OWN_NAME_RETRIES; i++) {
            nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
            locked = flock(fd, LOCK_EX | LOCK_NB) != 0;
        }
        if (locked) {
            if (!strcmp(e->d_name, own_name))
                st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                              "drive path %s: %s is in use by a live run with the same run id "
                              "and rank",
                              dir, own_name);
            else
                zoe_log(ZOE_LOG_DEBUG, "drive I/O: %s/%s belongs to a live run: left alone", dir,
                        e->d_name);
        } else if (unlinkat(dirfd, e->d_name, 0) == 0) {
            zoe_log(ZOE_LOG_WARN,
                    "drive I/O: removed %s/%s (%lld bytes), the scratch file of a run that ended "
                    "without removing it; scratch files are never read as state",
                    dir, e->d_name, (long long)sb.st_size);
        }
        close(fd);
    }
    closedir(d);
    return st;
}

/* The file system's direct I/O alignment for fd (statx STATX_DIOALIGN, Linux 6.1), at least a
 * page: requests aligned to it suit every file system and the drives' 4 KiB blocks. */
static size_t direct_alignment(int fd) {
    size_t a = PAGE;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_mem_align > a) a = sx.stx_dio_mem_align;
        if (sx.stx_dio_offset_align > a) a = sx.stx_dio_offset_align;
    }
#endif
    return a;
}

/* Creates file f in dir under the directory's flock: leftovers first (their room counts as
 * free), then the room check, then the file, its flock and its preallocation. */
static zoe_status create_file(zoe_drive_io *io, drive_file *f, const char *dir, const char *name,
                              int direct) {
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive path %s: %s", dir, strerror(errno));
    zoe_status st = ZOE_OK;
    if (flock(dirfd, LOCK_EX)) {
        st = zoe_fail(ZOE_ERR_IO, "drive path %s: flock: %s", dir, strerror(errno));
        goto out;
    }
    st = remove_leftovers(dirfd, dir, name);
    if (st != ZOE_OK) goto out;

    /* A file system that reports no size (ramfs) has no room to compare: the preallocation
     * decides there. */
    struct statvfs vfs;
    unsigned long long free_bytes = 0;
    int sized = statvfs(dir, &vfs) == 0 && vfs.f_blocks > 0;
    if (sized) free_bytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    if (sized && f->size > free_bytes) {
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "drive path %s: no room: this rank's scratch file needs %zu bytes; %llu "
                      "bytes are free there",
                      dir, f->size, free_bytes);
        goto out;
    }

    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    f->fd = openat(dirfd, name, flags | (direct ? O_DIRECT : 0), 0600);
    f->direct = direct;
    if (f->fd < 0 && direct && errno == EINVAL) {
        unlinkat(dirfd, name, 0); /* a kernel that checks O_DIRECT after creating the file */
        f->fd = openat(dirfd, name, flags, 0600);
        f->direct = 0;
        if (f->fd >= 0)
            zoe_log(ZOE_LOG_INFO,
                    "drive I/O: %s refuses O_DIRECT (tmpfs before Linux 6.6, ramfs): buffered I/O "
                    "there",
                    dir);
    }
    if (f->fd < 0) {
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive path %s: cannot create %s: %s", dir, name,
                      strerror(errno));
        goto out;
    }
    if (flock(f->fd, LOCK_EX | LOCK_NB)) {
        st = zoe_fail(ZOE_ERR_IO, "%s: flock: %s", f->path, strerror(errno));
        goto out;
    }
    int err = f->size ? posix_fallocate(f->fd, 0, (off_t)f->size) : 0;
    if (err == ENOSPC || err == EFBIG || err == EDQUOT) {
        if (statvfs(dir, &vfs) == 0) free_bytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "drive path %s: no room: this rank's scratch file needs %zu bytes; %llu "
                      "bytes are free there (%s)",
                      dir, f->size, free_bytes, strerror(err));
    } else if (err) {
        st = zoe_fail(ZOE_ERR_IO, "%s: preallocating %zu bytes: %s", f->path, f->size,
                      strerror(err));
    }
    if (st == ZOE_OK && f->direct) {
        size_t a = direct_alignment(f->fd);
        if (a > io->alignment) io->alignment = a;
    }
    struct statfs fs;
    f->memory = fstatfs(f->fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
out:
    close(dirfd); /* drops the directory's flock */
    return st;
}

/* Stripes of the space in file i of n: stripe s lives in file s % n. */
static size_t file_stripes(size_t stripes, int n, int i) {
    return stripes / (size_t)n + ((size_t)i < stripes % (size_t)n);
}

static zoe_status open_files(zoe_drive_io *io, const zoe_drive_io_config *c) {
    io->files = calloc((size_t)c->num_paths, sizeof *io->files);
    if (!io->files) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: %d files", c->num_paths);
    for (int i = 0; i < c->num_paths; i++) io->files[i].fd = -1;
    io->num_files = c->num_paths;
    size_t stripes = (c->bytes + c->stripe_bytes - 1) / c->stripe_bytes;
    for (int i = 0; i < c->num_paths; i++) {
        drive_file *f = &io->files[i];
        char name[sizeof SCRATCH_PREFIX + MAX_RUN_ID + 16];
        snprintf(name, sizeof name, "%s%s.%d", SCRATCH_PREFIX, c->run_id, c->rank);
        size_t n = strlen(c->paths[i]) + 1 + strlen(name) + 1;
        f->path = malloc(n);
        if (!f->path) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: a path of %zu bytes", n);
        snprintf(f->path, n, "%s/%s", c->paths[i], name);
        f->size = file_stripes(stripes, c->num_paths, i) * c->stripe_bytes;
        ZOE_TRY(create_file(io, f, c->paths[i], name, c->direct));
    }
    return ZOE_OK;
}

/* The first path whose bytes the CPU copies (buffered I/O, or a memory file system), or -1. */
static int copying_path(const zoe_drive_io *io) {
    for (int i = 0; i < io->num_files; i++)
        if (!io->files[i].direct || io->files[i].memory) return i;
    return -1;
}

static zoe_status start_engine(zoe_drive_io *io, const zoe_drive_io_config *c) {
    zoe_drive_io_engine want;
    const char *chooser;
    ZOE_TRY(choose_engine(c, &want, &chooser));
    char why[256] = "";
    /* Where the CPU copies the bytes, io_uring copies a buffered read whose pages are cached
     * inline, in the submitting thread (the host step's own: no overlap with its update), and
     * hands the rest (a tmpfs's requests, writes) to its kernel workers, slower than the pool
     * here (docs/nvme.md, "Engines"): AUTO runs the threads there. */
    int copying = copying_path(io);
    if (want == ZOE_DRIVE_IO_AUTO && copying >= 0) {
        want = ZOE_DRIVE_IO_THREADS;
        chooser = "auto";
        snprintf(why, sizeof why, "the CPU copies the bytes of %s (%s)", c->paths[copying],
                 io->files[copying].memory ? "a memory file system" : "buffered I/O");
    }
    if (want != ZOE_DRIVE_IO_THREADS) {
        if (zoe_drive_io_uring_start(io, why, sizeof why) == ZOE_OK) return ZOE_OK;
        if (want == ZOE_DRIVE_IO_URING)
            return zoe_fail(ZOE_ERR_UNSUPPORTED, "drive I/O: io_uring asked for (%s) but %s",
                            chooser, why);
    }
    ZOE_TRY(zoe_drive_io_threads_start(io));
    size_t n = strlen(io->engine_detail);
    if (want == ZOE_DRIVE_IO_THREADS && !strcmp(chooser, "auto"))
        snprintf(io->engine_detail + n, sizeof io->engine_detail - n, "; auto: %s", why);
    else if (want == ZOE_DRIVE_IO_THREADS)
        snprintf(io->engine_detail + n, sizeof io->engine_detail - n, "; asked for by %s", chooser);
    else
        snprintf(io->engine_detail + n, sizeof io->engine_detail - n, "; io_uring unavailable: %s",
                 why);
    return ZOE_OK;
}

zoe_status zoe_drive_io_open(const zoe_drive_io_config *c, zoe_drive_io **out) {
    if (!c || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_drive_io_open: NULL argument");
    *out = NULL;
    ZOE_TRY(check_config(c));
    zoe_drive_io *io = calloc(1, sizeof *io);
    if (!io) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: the handle");
    io->bytes = c->bytes;
    io->stripe_bytes = c->stripe_bytes;
    io->alignment = PAGE;
    io->queue_depth = c->queue_depth;
    io->free_segment = -1;
    io->uncut_head = io->uncut_tail = -1;
    zoe_status st = ZOE_OK;
    if (pthread_mutex_init(&io->mutex, NULL) || pthread_cond_init(&io->completed, NULL)) {
        st = zoe_fail(ZOE_ERR_INTERNAL, "drive I/O: mutex");
        goto fail;
    }
    io->mutex_ready = 1;
    st = open_files(io, c);
    if (st != ZOE_OK) goto fail;
    if (c->stripe_bytes % io->alignment) {
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "drive I/O: stripe of %zu bytes is not a multiple of the paths' direct I/O "
                      "alignment, %zu bytes",
                      c->stripe_bytes, io->alignment);
        goto fail;
    }
    io->segments = calloc((size_t)c->queue_depth, sizeof *io->segments);
    io->num_requests = c->queue_depth;
    io->requests = calloc((size_t)io->num_requests, sizeof *io->requests);
    if (!io->segments || !io->requests) {
        st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: %d segments", c->queue_depth);
        goto fail;
    }
    for (int i = c->queue_depth - 1; i >= 0; i--) {
        io->segments[i].request = -1; /* free */
        io->segments[i].next_free = io->free_segment;
        io->free_segment = i;
    }
    st = start_engine(io, c);
    if (st != ZOE_OK) goto fail;
    int direct = zoe_drive_io_direct_paths(io);
    zoe_log(ZOE_LOG_INFO,
            "drive I/O: %s engine (%s), %zu bytes on %d path%s in stripes of %zu, %s, aligned to "
            "%zu",
            io->ops->name, io->engine_detail, io->bytes, io->num_files,
            io->num_files > 1 ? "s" : "", io->stripe_bytes,
            direct == io->num_files ? "O_DIRECT"
            : direct                ? "O_DIRECT on some paths"
                                    : "buffered",
            io->alignment);
    *out = io;
    return ZOE_OK;
fail:
    zoe_drive_io_destroy(io);
    return st;
}

size_t zoe_drive_io_alignment(const zoe_drive_io *io) {
    return io->alignment;
}
const char *zoe_drive_io_engine_name(const zoe_drive_io *io) {
    return io->ops->name;
}

int zoe_drive_io_direct_paths(const zoe_drive_io *io) {
    int n = 0;
    for (int i = 0; i < io->num_files; i++) n += io->files[i].direct;
    return n;
}

/* A free request slot (growing the table when every slot is taken), marked in use. */
static int take_request(zoe_drive_io *io) {
    for (int i = 0; i < io->num_requests; i++)
        if (io->requests[i].id == 0) return i;
    int n = io->num_requests * 2;
    drive_request *r = realloc(io->requests, (size_t)n * sizeof *r);
    if (!r) return -1;
    memset(r + io->num_requests, 0, (size_t)(n - io->num_requests) * sizeof *r);
    io->requests = r;
    int slot = io->num_requests;
    io->num_requests = n;
    return slot;
}

/* Cuts the FIFO's requests into segments, one per stripe touched, while segments are free,
 * and queues them on the engine (the caller flushes). */
static void hand_out(zoe_drive_io *io) {
    while (io->uncut_head >= 0 && io->free_segment >= 0) {
        int slot = io->uncut_head;
        drive_request *r = &io->requests[slot];
        size_t pos = r->offset + r->cut;
        size_t stripe = pos / io->stripe_bytes, within = pos % io->stripe_bytes;
        size_t n = io->stripe_bytes - within;
        if (n > r->bytes - r->cut) n = r->bytes - r->cut;
        int s = io->free_segment;
        drive_segment *seg = &io->segments[s];
        io->free_segment = seg->next_free;
        io->segments_in_flight++;
        *seg = (drive_segment){
            .request = slot,
            .file = (int)(stripe % (size_t)io->num_files),
            .file_offset = stripe / (size_t)io->num_files * io->stripe_bytes + within,
            .scratch_offset = pos,
            .buf = r->buf + r->cut,
            .bytes = n,
            .write = r->write,
            .next_free = -1,
        };
        r->cut += n;
        r->pending++;
        if (r->cut == r->bytes) { /* all cut: off the FIFO */
            io->uncut_head = r->next_uncut;
            if (io->uncut_head < 0) io->uncut_tail = -1;
        }
        io->ops->submit(io, s);
    }
}

static zoe_status submit(zoe_drive_io *io, size_t offset, char *buf, size_t bytes, int write,
                         zoe_drive_io_ticket *t) {
    const char *what = write ? "write" : "read";
    if (!io || !t) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "drive I/O %s: NULL argument", what);
    t->id = 0;
    size_t a = io->alignment;
    if (!buf || bytes == 0 || offset % a || bytes % a || (uintptr_t)buf % a)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O %s of %zu bytes at %zu into %p: offset, length and buffer "
                        "must be non-zero multiples of %zu",
                        what, bytes, offset, (void *)buf, a);
    if (offset > io->bytes || bytes > io->bytes - offset)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O %s of %zu bytes at %zu: past the %zu scratch bytes", what, bytes,
                        offset, io->bytes);
    pthread_mutex_lock(&io->mutex);
    int slot = take_request(io);
    if (slot < 0) {
        pthread_mutex_unlock(&io->mutex);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: %d requests", io->num_requests * 2);
    }
    uint64_t id = (++io->next_sequence << 24) | (uint64_t)(slot + 1);
    io->requests[slot] = (drive_request){
        .id = id,
        .offset = offset,
        .bytes = bytes,
        .buf = buf,
        .next_uncut = -1,
        .write = write,
        .status = ZOE_OK,
    };
    if (io->uncut_tail >= 0)
        io->requests[io->uncut_tail].next_uncut = slot;
    else
        io->uncut_head = slot;
    io->uncut_tail = slot;
    hand_out(io);
    io->ops->flush(io);
    pthread_mutex_unlock(&io->mutex);
    t->id = id;
    return ZOE_OK;
}

zoe_status zoe_drive_io_read(zoe_drive_io *io, size_t offset, void *buf, size_t bytes,
                             zoe_drive_io_ticket *t) {
    return submit(io, offset, buf, bytes, 0, t);
}

zoe_status zoe_drive_io_write(zoe_drive_io *io, size_t offset, const void *buf, size_t bytes,
                              zoe_drive_io_ticket *t) {
    return submit(io, offset, (char *)buf, bytes, 1, t); /* an engine's write only reads buf */
}

void zoe_drive_io_complete(zoe_drive_io *io, int segment, long long result) {
    drive_segment *s = &io->segments[segment];
    drive_request *r = &io->requests[s->request];
    if (io->fault_armed && io->fault_offset >= s->scratch_offset &&
        io->fault_offset - s->scratch_offset < s->bytes) {
        io->fault_armed = 0;
        result = -io->fault_errno;
    }
    const char *what = s->write ? "write" : "read";
    if (result != (long long)s->bytes && r->status == ZOE_OK) {
        r->status = ZOE_ERR_IO;
        const char *path = io->files[s->file].path;
        if (result < 0)
            snprintf(r->message, sizeof r->message,
                     "%s: %s of %zu bytes at file offset %zu (scratch offset %zu) failed: %s", path,
                     what, s->bytes, s->file_offset, s->scratch_offset, strerror((int)-result));
        else
            snprintf(r->message, sizeof r->message,
                     "%s: short %s: %lld of %zu bytes at file offset %zu (scratch offset %zu)%s",
                     path, what, result, s->bytes, s->file_offset, s->scratch_offset,
                     s->write ? " (the drive is full?)"
                              : " (the file is shorter than preallocated: truncated or replaced?)");
    }
    r->pending--;
    s->request = -1;
    s->next_free = io->free_segment;
    io->free_segment = segment;
    io->segments_in_flight--;
    hand_out(io);
    pthread_cond_broadcast(&io->completed);
}

zoe_status zoe_drive_io_wait(zoe_drive_io *io, zoe_drive_io_ticket t) {
    if (!io) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_drive_io_wait: NULL handle");
    int slot = (int)(t.id & 0xffffff) - 1;
    pthread_mutex_lock(&io->mutex);
    if (t.id == 0 || slot < 0 || slot >= io->num_requests || io->requests[slot].id != t.id) {
        pthread_mutex_unlock(&io->mutex);
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "drive I/O: ticket %" PRIu64 " is not in flight (waited for twice?)", t.id);
    }
    drive_request *q = &io->requests[slot];
    while (q->pending > 0 || q->cut < q->bytes) {
        pthread_cond_wait(&io->completed, &io->mutex);
        q = &io->requests[slot]; /* the table may have grown meanwhile */
    }
    drive_request r = io->requests[slot];
    io->requests[slot].id = 0;
    pthread_mutex_unlock(&io->mutex);
    if (r.status != ZOE_OK) return zoe_fail(r.status, "%s", r.message);
    return ZOE_OK;
}

void zoe_drive_io_inject_fault(zoe_drive_io *io, size_t offset, int err) {
    pthread_mutex_lock(&io->mutex);
    io->fault_armed = 1;
    io->fault_offset = offset;
    io->fault_errno = err;
    pthread_mutex_unlock(&io->mutex);
}

long long zoe_drive_io_transfer(const zoe_drive_io *io, const drive_segment *s) {
    int fd = io->files[s->file].fd;
    size_t done = 0;
    while (done < s->bytes) {
        off_t at = (off_t)(s->file_offset + done);
        ssize_t n = s->write ? pwrite(fd, s->buf + done, s->bytes - done, at)
                             : pread(fd, s->buf + done, s->bytes - done, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -(long long)errno;
        if (n == 0) break; /* the end of the file: a short transfer */
        done += (size_t)n;
    }
    return (long long)done;
}

void zoe_drive_io_destroy(zoe_drive_io *io) {
    if (!io) return;
    if (io->ops) {
        pthread_mutex_lock(&io->mutex);
        while (io->segments_in_flight > 0 || io->uncut_head >= 0)
            pthread_cond_wait(&io->completed, &io->mutex);
        pthread_mutex_unlock(&io->mutex);
        io->ops->stop(io);
    }
    for (int i = 0; i < io->num_files; i++) {
        drive_file *f = &io->files[i];
        if (f->fd >= 0) {
            /* removed while the flock is held, so no sweep mistakes it for a leftover */
            if (unlink(f->path))
                zoe_log(ZOE_LOG_WARN, "drive I/O: removing %s: %s", f->path, strerror(errno));
            close(f->fd);
        }
        free(f->path);
    }
    free(io->files);
    free(io->segments);
    free(io->requests);
    if (io->mutex_ready) {
        pthread_cond_destroy(&io->completed);
        pthread_mutex_destroy(&io->mutex);
    }
    free(io);
}

void *zoe_drive_io_buffer_alloc(size_t bytes) {
    size_t n = round_up(bytes ? bytes : 1, PAGE);
    if (n >= ZOE_HOST_ARRAY_HUGE_MIN) return zoe_host_array_alloc(n);
    return aligned_alloc(PAGE, n);
}

void zoe_drive_io_buffer_free(void *p) {
    free(p);
}
