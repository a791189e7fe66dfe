/* The stall watchdog: a thread that sleeps on a condition variable, wakes about four times per
 * timeout, and aborts the job when the last completed step is older than the timeout. The
 * training thread only stores atomics; the watchdog never touches the trainer.
 *
 * Explained in docs/multi-node.md, "A rank that stops". */
#include "engine/train/watchdog.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "runtime/clock.h"
#include "runtime/error.h"

struct zoe_watchdog {
    MPI_Comm world;
    int timeout_s, rank, tp_rank, dp_rank;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping; /* under lock */
    _Atomic double last_step_s;
    _Atomic int step, micro_batch, phase, steps_done;
};

static const char *phase_name(int phase) {
    static const char *const names[] = {"forward", "backward", "optimizer step",
                                        "between zoe calls (data loading or the caller's code)",
                                        "validation forward after the step"};
    return phase >= 0 && phase <= ZOE_PHASE_EVALUATION ? names[phase] : "unknown";
}

static void report_and_abort(zoe_watchdog *wd, double idle_s) {
    /* One fprintf: ranks' lines do not interleave. */
    fprintf(stderr,
            "zoe: rank %d (tp %d, dp %d): no step completed in %.0f s (--stall-timeout %d): "
            "%d steps done, now at step %d, micro-batch %d, %s; a rank that stopped or hangs "
            "holds the others in a collective; aborting the job\n",
            wd->rank, wd->tp_rank, wd->dp_rank, idle_s, wd->timeout_s, atomic_load(&wd->steps_done),
            atomic_load(&wd->step) + 1, atomic_load(&wd->micro_batch),
            phase_name(atomic_load(&wd->phase)));
    fflush(stderr);
    /* The other live ranks' watchdogs fire within a wake period of this one (their last steps
     * ended together): give them time to say where they are before the job is torn down. */
    struct timespec grace = {.tv_sec = 2};
    nanosleep(&grace, NULL);
    MPI_Abort(wd->world, 3);
    abort(); /* MPI_Abort does not return; if it did, the process must still end */
}

static void *watch(void *arg) {
    zoe_watchdog *wd = arg;
    double period_s = wd->timeout_s / 4.0 < 1.0 ? wd->timeout_s / 4.0 : 1.0;
    pthread_mutex_lock(&wd->lock);
    while (!wd->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)(period_s * 1e9);
        until.tv_sec += ns / 1000000000L, until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&wd->wake, &wd->lock, &until);
        if (wd->stopping) break;
        double idle = zoe_clock_seconds() - atomic_load(&wd->last_step_s);
        if (idle > wd->timeout_s) report_and_abort(wd, idle);
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

zoe_status zoe_watchdog_create(MPI_Comm world, int timeout_s, int rank, int tp_rank, int dp_rank,
                               zoe_watchdog **out) {
    *out = NULL;
    if (timeout_s <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "stall timeout %d s must be positive", timeout_s);
    zoe_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "watchdog (%zu bytes)", sizeof *wd);
    *wd = (zoe_watchdog){.world = world,
                         .timeout_s = timeout_s,
                         .rank = rank,
                         .tp_rank = tp_rank,
                         .dp_rank = dp_rank};
    atomic_store(&wd->last_step_s, zoe_clock_seconds());
    atomic_store(&wd->phase, ZOE_PHASE_BETWEEN);
    pthread_mutex_init(&wd->lock, NULL);
    pthread_cond_init(&wd->wake, NULL);
    if (pthread_create(&wd->thread, NULL, watch, wd) != 0) {
        pthread_cond_destroy(&wd->wake);
        pthread_mutex_destroy(&wd->lock);
        free(wd);
        return zoe_fail(ZOE_ERR_INTERNAL, "could not start the stall watchdog thread");
    }
    *out = wd;
    return ZOE_OK;
}

void zoe_watchdog_at(zoe_watchdog *wd, int step, int micro_batch, zoe_step_phase phase) {
    if (!wd) return;
    atomic_store(&wd->step, step);
    atomic_store(&wd->micro_batch, micro_batch);
    atomic_store(&wd->phase, (int)phase);
}

void zoe_watchdog_step_done(zoe_watchdog *wd, int steps_done) {
    if (!wd) return;
    atomic_store(&wd->steps_done, steps_done);
    atomic_store(&wd->last_step_s, zoe_clock_seconds());
    zoe_watchdog_at(wd, steps_done, 0, ZOE_PHASE_BETWEEN);
}

void zoe_watchdog_destroy(zoe_watchdog *wd) {
    if (!wd) return;
    pthread_mutex_lock(&wd->lock);
    wd->stopping = 1;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(wd->thread, NULL);
    pthread_cond_destroy(&wd->wake);
    pthread_mutex_destroy(&wd->lock);
    free(wd);
}
