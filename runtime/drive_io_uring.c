/* The io_uring engine of the drive tier (liburing): one ring of queue_depth entries per handle,
 * the scratch files registered with it (fixed files spare the kernel a file table lookup and a
 * reference count per request). A request's segments are queued as read/write SQEs and started
 * with one io_uring_submit. One reaper thread per handle sleeps in io_uring_wait_cqe and, as
 * each segment completes, hands the next ones to the ring: a request of more segments than the
 * queue depth keeps the drive busy while the caller computes, and the caller never waits at
 * submission. Buffers are not registered: they are the caller's ring slots, and for requests
 * of a stripe (1 MiB by default) pinning them per request costs little next to the transfer.
 *
 * Built only where CMake found liburing (ZOE_HAVE_LIBURING); elsewhere it reports io_uring
 * unavailable and the thread engine runs.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/drive_io_impl.h"
#include "runtime/error.h"

#ifdef ZOE_HAVE_LIBURING
#include <liburing.h>

enum { STOP = -1 }; /* user_data of the NOP that tells the reaper to end */

typedef struct uring_engine {
    struct io_uring ring;
    pthread_t reaper;
    int fixed_files; /* the files are registered: SQEs name them by index */
    int broken;      /* -errno: the ring failed for good; every later segment fails */
    int stopping;    /* destroy: the reaper ends */
    int *queued;     /* [queue_depth] segments handed out and not yet submitted */
    int num_queued;
} uring_engine;

static void prepare(zoe_drive_io *io, uring_engine *e, int segment) {
    drive_segment *s = &io->segments[segment];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    /* never NULL: the ring has queue_depth + 1 entries and at most queue_depth segments exist */
    int fd = e->fixed_files ? s->file : io->files[s->file].fd;
    if (s->write)
        io_uring_prep_write(sqe, fd, s->buf + s->done, (unsigned)(s->bytes - s->done),
                            s->file_offset + s->done);
    else
        io_uring_prep_read(sqe, fd, s->buf + s->done, (unsigned)(s->bytes - s->done),
                           s->file_offset + s->done);
    if (e->fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)segment);
}

static void uring_submit(zoe_drive_io *io, int segment) {
    uring_engine *e = io->engine;
    if (!e->broken) prepare(io, e, segment);
    e->queued[e->num_queued++] = segment; /* never past queue_depth: one per segment taken */
}

/* Fails every queued segment with the ring's error; their completions may hand out more, which
 * are queued and failed in turn (a loop, not a recursion). */
static void fail_queued(zoe_drive_io *io, uring_engine *e) {
    while (e->num_queued > 0) zoe_drive_io_complete(io, e->queued[--e->num_queued], e->broken);
}

static void uring_flush(zoe_drive_io *io) {
    uring_engine *e = io->engine;
    while (e->num_queued > 0 && !e->broken) {
        int n = io_uring_submit(&e->ring);
        if (n > 0) { /* the kernel takes SQEs in order: drop the first n from the list */
            memmove(e->queued, e->queued + n, (size_t)(e->num_queued - n) * sizeof *e->queued);
            e->num_queued -= n;
            continue;
        }
        if (n == -EINTR || n == -EAGAIN) continue; /* a signal; no request memory this moment */
        /* The ring cannot take them (the CQ cannot overflow: it has twice the entries of the
         * SQ and no more than queue_depth segments are in flight): the ring is not submitted
         * again, and its segments fail, their requests saying why. */
        e->broken = n < 0 ? n : -EIO;
    }
    if (e->broken) fail_queued(io, e);
}

/* The reaper: sleeps until a completion, then (under the mutex) completes every one ready. A
 * partial transfer resubmits the rest (the kernel may split a large request); 0 bytes is the
 * end of the file. It wakes every 100 ms to see whether destroy stops it (the STOP NOP wakes it
 * at once where the ring works). */
static void *reaper(void *arg) {
    zoe_drive_io *io = arg;
    uring_engine *e = io->engine;
    for (;;) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec tick = {.tv_nsec = 100 * 1000 * 1000};
        int ret = io_uring_wait_cqe_timeout(&e->ring, &cqe, &tick);
        pthread_mutex_lock(&io->mutex);
        if (ret < 0 && ret != -ETIME && ret != -EINTR && ret != -EAGAIN && !e->broken) {
            /* the ring is unusable: fail what is in flight rather than hang */
            e->broken = ret;
            for (int s = 0; s < io->queue_depth; s++)
                if (io->segments[s].request >= 0) e->queued[e->num_queued++] = s;
            fail_queued(io, e);
        }
        unsigned head, seen = 0;
        if (ret == 0) {
            io_uring_for_each_cqe(&e->ring, head, cqe) {
                seen++;
                int s = (int)(int64_t)io_uring_cqe_get_data64(cqe);
                if (s == STOP) continue;
                drive_segment *seg = &io->segments[s];
                int res = cqe->res;
                if (res > 0 && seg->done + (size_t)res < seg->bytes) {
                    seg->done += (size_t)res;
                    uring_submit(io, s);
                } else {
                    zoe_drive_io_complete(io, s,
                                          res < 0 ? res : (long long)(seg->done + (size_t)res));
                }
            }
            io_uring_cq_advance(&e->ring, seen);
        }
        uring_flush(io); /* what the completions handed out */
        int stop = e->stopping && io->segments_in_flight == 0;
        pthread_mutex_unlock(&io->mutex);
        if (stop) return NULL;
    }
}

static void uring_stop(zoe_drive_io *io) {
    uring_engine *e = io->engine;
    pthread_mutex_lock(&io->mutex);
    e->stopping = 1;
    if (!e->broken) { /* wakes the reaper now rather than at its next tick */
        struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring); /* the ring's spare entry */
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, (uint64_t)(int64_t)STOP);
        int ret;
        do ret = io_uring_submit(&e->ring);
        while (ret == -EINTR || ret == -EAGAIN);
    }
    pthread_mutex_unlock(&io->mutex);
    pthread_join(e->reaper, NULL);
    io_uring_queue_exit(&e->ring);
    free(e->queued);
    free(e);
    io->engine = NULL;
}

static const drive_engine_ops uring_ops = {
    .name = "io_uring",
    .submit = uring_submit,
    .flush = uring_flush,
    .stop = uring_stop,
};

zoe_status zoe_drive_io_uring_start(zoe_drive_io *io, char *why, size_t why_size) {
    uring_engine *e = calloc(1, sizeof *e);
    int *queued = calloc((size_t)io->queue_depth, sizeof *queued);
    if (!e || !queued) {
        free(e);
        free(queued);
        snprintf(why, why_size, "out of memory");
        return ZOE_ERR_OUT_OF_MEMORY;
    }
    e->queued = queued;
    int ret = io_uring_queue_init((unsigned)io->queue_depth + 1, &e->ring, 0); /* + the STOP */
    if (ret < 0) {
        snprintf(why, why_size, "io_uring_queue_init: %s", strerror(-ret));
        free(queued);
        free(e);
        return ZOE_ERR_UNSUPPORTED;
    }
    /* the reaper's timed wait must not take an SQE beside the submitting thread */
    int ext_arg = (e->ring.features & IORING_FEAT_EXT_ARG) != 0;
    struct io_uring_probe *probe = io_uring_get_probe_ring(&e->ring);
    int ops_ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                 io_uring_opcode_supported(probe, IORING_OP_WRITE);
    if (probe) io_uring_free_probe(probe);
    if (!ops_ok || !ext_arg) {
        snprintf(why, why_size, "this kernel's io_uring has no %s (Linux %s)",
                 ops_ok ? "timed wait beside a submitter (EXT_ARG)" : "READ/WRITE",
                 ops_ok ? "5.11" : "5.6");
        io_uring_queue_exit(&e->ring);
        free(queued);
        free(e);
        return ZOE_ERR_UNSUPPORTED;
    }
    int fds[ZOE_DRIVE_IO_MAX_PATHS];
    for (int i = 0; i < io->num_files; i++) fds[i] = io->files[i].fd;
    e->fixed_files = io_uring_register_files(&e->ring, fds, (unsigned)io->num_files) == 0;
    io->engine = e;
    if (pthread_create(&e->reaper, NULL, reaper, io)) {
        snprintf(why, why_size, "no reaper thread could be started");
        io_uring_queue_exit(&e->ring);
        free(queued);
        free(e);
        io->engine = NULL;
        return ZOE_ERR_UNSUPPORTED;
    }
    io->ops = &uring_ops;
    snprintf(io->engine_detail, sizeof io->engine_detail, "queue depth %d%s", io->queue_depth,
             e->fixed_files ? ", registered files" : "");
    return ZOE_OK;
}

#else

zoe_status zoe_drive_io_uring_start(zoe_drive_io *io, char *why, size_t why_size) {
    (void)io;
    snprintf(why, why_size, "this build has no liburing");
    return ZOE_ERR_UNSUPPORTED;
}

#endif
