/* The thread engine of the drive tier: a pool of workers, each taking the next queued segment
 * and moving it with pread/pwrite. It runs where io_uring cannot (no liburing in the build, a
 * kernel or seccomp policy that refuses io_uring_setup) or is not wanted (ZOE_DRIVE_IO=threads).
 * One worker per segment in flight (at most 64): a blocking pread keeps one request at the
 * drive, so the queue depth the drive sees is the number of busy workers.
 *
 * Explained in docs/nvme.md, "The I/O engine". */
#include <stdio.h>
#include <stdlib.h>
#include "runtime/drive_io_impl.h"
#include "runtime/error.h"

enum { MAX_WORKERS = 64 };

typedef struct thread_engine {
    pthread_t workers[MAX_WORKERS];
    int num_workers;
    pthread_cond_t work; /* a segment was queued, or stop */
    int *queue;          /* [queue_depth] ring of queued segments */
    int head, count;
    int stopping;
} thread_engine;

static void *worker(void *arg) {
    zoe_drive_io *io = arg;
    thread_engine *e = io->engine;
    pthread_mutex_lock(&io->mutex);
    for (;;) {
        while (e->count == 0 && !e->stopping) pthread_cond_wait(&e->work, &io->mutex);
        if (e->count == 0) break;
        int s = e->queue[e->head];
        e->head = (e->head + 1) % io->queue_depth;
        e->count--;
        pthread_mutex_unlock(&io->mutex);
        long long result = zoe_drive_io_transfer(io, &io->segments[s]);
        pthread_mutex_lock(&io->mutex);
        zoe_drive_io_complete(io, s, result);
    }
    pthread_mutex_unlock(&io->mutex);
    return NULL;
}

static void threads_submit(zoe_drive_io *io, int segment) {
    thread_engine *e = io->engine;
    e->queue[(e->head + e->count) % io->queue_depth] = segment;
    e->count++; /* never past queue_depth: at most queue_depth segments are taken */
    pthread_cond_signal(&e->work);
}

static void threads_flush(zoe_drive_io *io) {
    (void)io;
}

static void threads_stop(zoe_drive_io *io) {
    thread_engine *e = io->engine;
    pthread_mutex_lock(&io->mutex);
    e->stopping = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&io->mutex);
    for (int i = 0; i < e->num_workers; i++) pthread_join(e->workers[i], NULL);
    pthread_cond_destroy(&e->work);
    free(e->queue);
    free(e);
    io->engine = NULL;
}

static const drive_engine_ops threads_ops = {
    .name = "threads",
    .submit = threads_submit,
    .flush = threads_flush,
    .stop = threads_stop,
};

zoe_status zoe_drive_io_threads_start(zoe_drive_io *io) {
    thread_engine *e = calloc(1, sizeof *e);
    int *queue = calloc((size_t)io->queue_depth, sizeof *queue);
    if (!e || !queue || pthread_cond_init(&e->work, NULL)) {
        free(e);
        free(queue);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "drive I/O: the thread engine");
    }
    e->queue = queue;
    io->engine = e;
    io->ops = &threads_ops;
    int want = io->queue_depth < MAX_WORKERS ? io->queue_depth : MAX_WORKERS;
    for (; e->num_workers < want; e->num_workers++)
        if (pthread_create(&e->workers[e->num_workers], NULL, worker, io)) break;
    if (e->num_workers == 0) {
        threads_stop(io);
        io->ops = NULL;
        return zoe_fail(ZOE_ERR_INTERNAL, "drive I/O: no worker thread could be started");
    }
    snprintf(io->engine_detail, sizeof io->engine_detail, "%d workers, pread/pwrite",
             e->num_workers);
    return ZOE_OK;
}
