/* Internal to the engine: the stall watchdog. A thread that aborts the whole job (MPI_Abort)
 * when no step completes within the timeout, after printing this rank's step and where in it
 * the rank is. With one rank stopped (SIGSTOP, a hung read), every other rank waits in a
 * collective forever; their watchdogs end the job and say where each one waited.
 *
 * Explained in docs/multi-node.md, "A rank that stops". */
#ifndef ZOE_ENGINE_WATCHDOG_H
#define ZOE_ENGINE_WATCHDOG_H

#include <mpi.h>
#include "zoe/status.h"

typedef struct zoe_watchdog zoe_watchdog;

/* Where a rank is within a step. */
typedef enum zoe_step_phase {
    ZOE_PHASE_FORWARD = 0,
    ZOE_PHASE_BACKWARD = 1,
    ZOE_PHASE_OPTIMIZER = 2,
    ZOE_PHASE_BETWEEN = 3,    /* in the caller's code between zoe calls (data loading ...) */
    ZOE_PHASE_EVALUATION = 4, /* validation forwards after the step */
} zoe_step_phase;

/* Starts the thread; timeout_s > 0. rank, tp_rank and dp_rank go into the report. The timer
 * starts now. */
zoe_status zoe_watchdog_create(MPI_Comm world, int timeout_s, int rank, int tp_rank, int dp_rank,
                               zoe_watchdog **out);
/* Records the position (cheap: two atomic stores); step is 0-based. */
void zoe_watchdog_at(zoe_watchdog *wd, int step, int micro_batch, zoe_step_phase phase);
/* A step completed: the timer restarts. */
void zoe_watchdog_step_done(zoe_watchdog *wd, int steps_done);
/* Stops and joins the thread (local). NULL is a no-op. */
void zoe_watchdog_destroy(zoe_watchdog *wd);

#endif
