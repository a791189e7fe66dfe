/* Internal: asynchronous reads and writes of one rank's scratch space on NVMe drives (the drive
 * tier: optimizer state and weights past host memory).
 *
 * One zoe_drive_io per rank owns one preallocated file per path (one path per drive), named
 * zoe-scratch.<run id>.<rank> and held under an exclusive flock for its whole life. The rank's
 * logical scratch space [0, bytes) is striped across the files in units of stripe_bytes: stripe
 * s lives in file s % num_paths at file offset (s / num_paths) * stripe_bytes. A request is
 * split at stripe boundaries into segments; at most queue_depth segments are in flight.
 *
 * Two engines move the bytes: io_uring through liburing (where the build has it and the kernel
 * lets a ring be set up: seccomp in containers often does not), and a pool of threads calling
 * pread/pwrite. AUTO runs the threads where the CPU copies the bytes (a memory file system, or
 * buffered I/O). ZOE_DRIVE_IO=uring|threads|auto in the environment overrides the config's
 * choice; the log says which engine runs and why.
 *
 * Files are opened with O_DIRECT (the page cache would double the host memory the drive tier
 * exists to save, and its write-back would decide when bytes move); a file system that refuses
 * O_DIRECT (tmpfs before Linux 6.6) falls back to buffered I/O for that path with one log
 * line. Buffers, offsets and lengths align to zoe_drive_io_alignment().
 *
 * Faults: a failed, short or refused read or write fails its ticket's zoe_drive_io_wait() with
 * ZOE_ERR_IO and a message naming the file, the file offset, the logical offset and the error.
 * Every call takes the handle's lock: two threads may submit and wait on one handle (the weight
 * stream's reads beside the host step's stream, docs/nvme.md "Weights on drives"); a ticket is
 * waited for once, by one thread.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#ifndef ZOE_RUNTIME_DRIVE_IO_H
#define ZOE_RUNTIME_DRIVE_IO_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/status.h"

#define ZOE_DRIVE_IO_CONFIG_VERSION 1
enum { ZOE_DRIVE_IO_MAX_PATHS = 64 };

typedef struct zoe_drive_io zoe_drive_io; /* opaque: one per rank, owns its files */

typedef enum zoe_drive_io_engine {
    ZOE_DRIVE_IO_AUTO = 0, /* io_uring where it works and the drives move the bytes, else threads */
    ZOE_DRIVE_IO_URING,    /* io_uring or fail (ZOE_ERR_UNSUPPORTED, saying why) */
    ZOE_DRIVE_IO_THREADS,  /* the thread pool */
} zoe_drive_io_engine;

typedef struct zoe_drive_io_config {
    int version;              /* ZOE_DRIVE_IO_CONFIG_VERSION, from zoe_drive_io_config_init() */
    const char *const *paths; /* directories, one per drive (1..ZOE_DRIVE_IO_MAX_PATHS) */
    int num_paths;
    size_t bytes;               /* this rank's scratch bytes, striped across the paths */
    size_t stripe_bytes;        /* stripe unit, a multiple of 4096 (default 1 MiB) */
    int queue_depth;            /* segments in flight, 1..4096 (default 32) */
    zoe_drive_io_engine engine; /* default AUTO */
    int direct;         /* 1: O_DIRECT where the file system takes it (default); 0: buffered */
    int rank;           /* names the files: zoe-scratch.<run id>.<rank> */
    const char *run_id; /* [A-Za-z0-9_-], 1..64 characters */
} zoe_drive_io_config;

zoe_drive_io_config zoe_drive_io_config_init(void);

/* Creates and preallocates one file per path (posix_fallocate), after removing the leftovers
 * of runs that ended without removing theirs (files named zoe-scratch.* whose flock nobody
 * holds; a live run's files are never touched). A path without room: ZOE_ERR_INVALID_ARGUMENT
 * with one line naming the path, the bytes needed and the bytes free (bad input: exit 2). The
 * files are new (O_EXCL), so the whole space reads as zeros until written: no pass of zeros is
 * needed. */
zoe_status zoe_drive_io_open(const zoe_drive_io_config *cfg, zoe_drive_io **out);

/* Buffers, offsets and lengths of requests align to this (4096, or the file systems' direct
 * I/O alignment where it is larger). */
size_t zoe_drive_io_alignment(const zoe_drive_io *io);
/* Which engine runs: "io_uring" or "threads". */
const char *zoe_drive_io_engine_name(const zoe_drive_io *io);
/* How many of the paths run O_DIRECT (the others refused it, or direct = 0). */
int zoe_drive_io_direct_paths(const zoe_drive_io *io);

typedef struct zoe_drive_io_ticket {
    uint64_t id; /* 0: no request */
} zoe_drive_io_ticket;

/* Start moving bytes between buf and the scratch space at offset; the ticket is waited for
 * exactly once. buf must stay untouched (write) or unread (read) until then. A request that
 * does not align, or runs past the scratch space: ZOE_ERR_INVALID_ARGUMENT, nothing started. */
zoe_status zoe_drive_io_read(zoe_drive_io *io, size_t offset, void *buf, size_t bytes,
                             zoe_drive_io_ticket *t);
zoe_status zoe_drive_io_write(zoe_drive_io *io, size_t offset, const void *buf, size_t bytes,
                              zoe_drive_io_ticket *t);
/* Blocks until the request is done: ZOE_OK, or ZOE_ERR_IO naming the file and offset. */
zoe_status zoe_drive_io_wait(zoe_drive_io *io, zoe_drive_io_ticket t);

/* Waits for every request in flight, closes and removes the scratch files. NULL is a no-op. */
void zoe_drive_io_destroy(zoe_drive_io *io);

/* A host buffer aligned for any zoe_drive_io (4096 bytes, 2 MiB from 4 MiB up, as
 * zoe_host_array_alloc), its size rounded up to 4096; NULL when out of memory. */
void *zoe_drive_io_buffer_alloc(size_t bytes);
void zoe_drive_io_buffer_free(void *p);

/* Tests only: the next segment that covers logical byte `offset` completes with -err (EIO)
 * instead of its result, so the error path past the kernel is tested on both engines (a real
 * EIO needs device-mapper, which a test machine rarely has). */
void zoe_drive_io_inject_fault(zoe_drive_io *io, size_t offset, int err);

#endif
