/* The io_uring engine of the drive tier (liburing): one ring of queue_depth entries per handle,
 * the scratch files registered with it (fixed files spare the kernel a file table lookup and a
 * reference count per request). A request's segments are queued as read/write SQEs and started
 * with one io_uring_submit; completions are reaped by the caller's own thread when it waits, so
 * no thread is spent on the drive. Buffers are not registered: they are the caller's ring slots,
 * and for requests of a stripe (1 MiB by default) pinning them per request costs little next to
 * the transfer (measured in docs/nvme.md).
 *
 * Built only where CMake found liburing (ZOE_HAVE_LIBURING); elsewhere it reports io_uring
 * unavailable and the thread engine runs.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/drive_io_impl.h"
#include "runtime/error.h"

#ifdef ZOE_HAVE_LIBURING
#include <liburing.h>

typedef struct uring_engine {
    struct io_uring ring;
    int fixed_files; /* the files are registered: SQEs name them by index */
    int broken;      /* -errno: io_uring_submit failed for good; every later segment fails */
    int *queued;     /* [queue_depth] segments prepared and not yet submitted */
    int num_queued;
} uring_engine;

static void prepare(zoe_drive_io *io, uring_engine *e, int segment) {
    drive_segment *s = &io->segments[segment];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
    /* never NULL: the ring has queue_depth entries and at most queue_depth segments exist */
    int fd = e->fixed_files ? s->file : io->files[s->file].fd;
    if (s->write)
        io_uring_prep_write(sqe, fd, s->buf + s->done, (unsigned)(s->bytes - s->done),
                            s->file_offset + s->done);
    else
        io_uring_prep_read(sqe, fd, s->buf + s->done, (unsigned)(s->bytes - s->done),
                           s->file_offset + s->done);
    if (e->fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, (uint64_t)segment);
    e->queued[e->num_queued++] = segment;
}

static void uring_submit(zoe_drive_io *io, int segment) {
    uring_engine *e = io->engine;
    if (e->broken) {
        zoe_drive_io_complete(io, segment, e->broken);
        return;
    }
    prepare(io, e, segment);
}

static void uring_flush(zoe_drive_io *io) {
    uring_engine *e = io->engine;
    while (e->num_queued > 0) {
        int n = io_uring_submit(&e->ring);
        if (n > 0) { /* the kernel takes SQEs in order: drop the first n from the list */
            memmove(e->queued, e->queued + n, (size_t)(e->num_queued - n) * sizeof *e->queued);
            e->num_queued -= n;
            continue;
        }
        if (n == -EINTR || n == -EAGAIN) continue; /* a signal; no request memory this moment */
        /* The ring cannot take them (the CQ cannot overflow: it has twice the entries of the
         * SQ and no more than queue_depth segments are in flight): fail those segments, their
         * requests say why, and every later one; the ring is not submitted again. */
        e->broken = n < 0 ? n : -EIO;
        for (int i = 0; i < e->num_queued; i++) zoe_drive_io_complete(io, e->queued[i], e->broken);
        e->num_queued = 0;
    }
}

/* Reaps every completion ready, waiting for one when none is. A partial transfer resubmits
 * the rest (the kernel may split a large request); 0 bytes is the end of the file. */
static void uring_wait_any(zoe_drive_io *io) {
    uring_engine *e = io->engine;
    uring_flush(io);
    if (io->segments_in_flight == 0) return;
    struct io_uring_cqe *cqe;
    int ret;
    do ret = io_uring_wait_cqe(&e->ring, &cqe);
    while (ret == -EINTR);
    if (ret < 0) return; /* the caller waits again */
    unsigned head, seen = 0;
    int resubmitted = 0;
    io_uring_for_each_cqe(&e->ring, head, cqe) {
        int s = (int)io_uring_cqe_get_data64(cqe);
        drive_segment *seg = &io->segments[s];
        int res = cqe->res;
        seen++;
        if (res > 0 && seg->done + (size_t)res < seg->bytes) {
            seg->done += (size_t)res;
            prepare(io, e, s);
            resubmitted = 1;
        } else {
            zoe_drive_io_complete(io, s, res < 0 ? res : (long long)(seg->done + (size_t)res));
        }
    }
    io_uring_cq_advance(&e->ring, seen);
    if (resubmitted) uring_flush(io);
}

static void uring_stop(zoe_drive_io *io) {
    uring_engine *e = io->engine;
    io_uring_queue_exit(&e->ring);
    free(e->queued);
    free(e);
    io->engine = NULL;
}

static const drive_engine_ops uring_ops = {
    .name = "io_uring",
    .submit = uring_submit,
    .flush = uring_flush,
    .wait_any = uring_wait_any,
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
    int ret = io_uring_queue_init((unsigned)io->queue_depth, &e->ring, 0);
    if (ret < 0) {
        snprintf(why, why_size, "io_uring_queue_init: %s", strerror(-ret));
        free(queued);
        free(e);
        return ZOE_ERR_UNSUPPORTED;
    }
    struct io_uring_probe *probe = io_uring_get_probe_ring(&e->ring);
    int ops_ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                 io_uring_opcode_supported(probe, IORING_OP_WRITE);
    if (probe) io_uring_free_probe(probe);
    if (!ops_ok) {
        snprintf(why, why_size, "this kernel's io_uring has no READ/WRITE (Linux 5.6)");
        io_uring_queue_exit(&e->ring);
        free(queued);
        free(e);
        return ZOE_ERR_UNSUPPORTED;
    }
    int fds[ZOE_DRIVE_IO_MAX_PATHS];
    for (int i = 0; i < io->num_files; i++) fds[i] = io->files[i].fd;
    e->fixed_files = io_uring_register_files(&e->ring, fds, (unsigned)io->num_files) == 0;
    io->engine = e;
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
