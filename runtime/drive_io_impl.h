/* Internal to runtime/drive_io*.c: the handle's layout and the two engines behind it.
 *
 * drive_io.c owns the files, the requests and the segments (the pieces of a request, one per
 * stripe it touches); an engine only moves a segment's bytes and reports each one done through
 * zoe_drive_io_complete(). A request is never waited for at submission: it joins a FIFO, and
 * its segments are handed to the engine as segments free up (at most queue_depth in flight),
 * from the submitting thread and from the engine's completing thread alike. Every engine call
 * below but stop is made, and zoe_drive_io_complete() is called, with io->mutex held.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#ifndef ZOE_RUNTIME_DRIVE_IO_IMPL_H
#define ZOE_RUNTIME_DRIVE_IO_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "runtime/drive_io.h"

typedef struct drive_file {
    char *path; /* <dir>/zoe-scratch.<run id>.<rank> */
    int fd;     /* -1 until created; held under an exclusive flock */
    size_t size;
    int direct; /* opened with O_DIRECT */
    int memory; /* on a memory file system (tmpfs, ramfs): the CPU copies every byte, O_DIRECT
                 * or not (a tmpfs takes O_DIRECT from Linux 6.6 and copies all the same) */
} drive_file;

typedef struct drive_segment {
    int request;           /* index into io->requests; -1: the segment is free */
    int file;              /* index into io->files */
    size_t file_offset;    /* where in the file */
    size_t scratch_offset; /* where in the rank's scratch space (for messages and faults) */
    char *buf;
    size_t bytes;
    size_t done; /* bytes moved so far (an engine resubmits the rest of a partial transfer) */
    int write;
    int next_free; /* free list link: the next free segment, or -1 */
} drive_segment;

typedef struct drive_request {
    uint64_t id; /* the ticket's id; 0: the slot is free */
    size_t offset, bytes;
    char *buf;
    size_t cut;     /* bytes handed to segments so far */
    int pending;    /* segments handed out and not yet complete */
    int next_uncut; /* the FIFO of requests with bytes left to cut: the next, or -1 */
    int write;
    zoe_status status;
    char message[512];
} drive_request;

/* An engine moves segments; each completion reaches zoe_drive_io_complete() from the engine's
 * own thread (the io_uring engine's reaper, the thread engine's workers), which then hands out
 * the next segments and wakes the waiters (io->completed). */
typedef struct drive_engine_ops {
    const char *name;
    void (*submit)(zoe_drive_io *io, int segment); /* queue a segment */
    void (*flush)(zoe_drive_io *io);               /* start what submit queued */
    void (*stop)(zoe_drive_io *io); /* nothing in flight: release the engine (without the mutex) */
} drive_engine_ops;

struct zoe_drive_io {
    size_t bytes;        /* the scratch space */
    size_t stripe_bytes; /* stripe unit */
    size_t alignment;
    int queue_depth;

    int num_files;
    drive_file *files;

    pthread_mutex_t mutex;
    pthread_cond_t completed; /* a segment completed: a request may be done */
    int mutex_ready;

    drive_segment *segments; /* [queue_depth] */
    int free_segment;        /* head of the free list, -1 when all are in flight */
    int segments_in_flight;

    drive_request *requests; /* [num_requests]: grows when every slot is taken */
    int num_requests;
    int uncut_head, uncut_tail; /* the FIFO of requests with bytes left to cut, -1 when empty */
    uint64_t next_sequence;

    int fault_armed; /* zoe_drive_io_inject_fault */
    size_t fault_offset;
    int fault_errno;

    const drive_engine_ops *ops; /* NULL until an engine runs */
    void *engine;                /* the engine's own state */
    char engine_detail[384];     /* for the log: "queue depth 32, registered files" */
};

/* A segment's transfer ended: result is the bytes moved (all of segment.bytes on success) or
 * -errno. Records a failure in the request, frees the segment, hands out the next ones (the
 * caller flushes them) and wakes the waiters. */
void zoe_drive_io_complete(zoe_drive_io *io, int segment, long long result);

/* Start an engine on io (files open, segments allocated): sets io->ops and io->engine. On
 * failure nothing is left to release; the io_uring engine's why (one line) says what failed,
 * for the log of the thread engine that runs instead. */
zoe_status zoe_drive_io_uring_start(zoe_drive_io *io, char *why, size_t why_size);
zoe_status zoe_drive_io_threads_start(zoe_drive_io *io);

/* The whole of a segment's transfer with pread/pwrite (the thread engine): the bytes moved, or
 * -errno; fewer than asked only at the end of the file. */
long long zoe_drive_io_transfer(const zoe_drive_io *io, const drive_segment *s);

#endif
