/* Internal to the engine: the stall watchdog. A thread that aborts the whole job (MPI_Abort)
 * when no step completes within the timeout, after printing this rank's step and where in it
 * the rank is. With one rank stopped (SIGSTOP, a hung read), every other rank waits in a
 * collective forever; their watchdogs end the job and say where each one waited. It also ends a
 * rank that got a stop signal (SIGTERM ...) but reaches no step boundary within a grace: a
 * scheduler's SIGTERM would otherwise wait for its SIGKILL.
 *
 * Explained in docs/multi-node.md, "A rank that stops" and "Signals". */
#ifndef ZOE_ENGINE_WATCHDOG_H
#define ZOE_ENGINE_WATCHDOG_H

#include <mpi.h>
#include "zoe/status.h"

typedef struct zoe_watchdog zoe_watchdog;

/* Where a rank is within a step, or between steps. */
typedef enum zoe_step_phase {
    ZOE_PHASE_FORWARD = 0,
    ZOE_PHASE_BACKWARD = 1,
    ZOE_PHASE_OPTIMIZER = 2,
    ZOE_PHASE_BETWEEN = 3,    /* in the caller's code between zoe calls (data loading ...) */
    ZOE_PHASE_EVALUATION = 4, /* validation forwards after the step */
    ZOE_PHASE_SAVE = 5,       /* writing a checkpoint (collective MPI-IO) */
    ZOE_PHASE_LOAD = 6,       /* reading a checkpoint */
    ZOE_PHASE_STOP_CHECK = 7, /* the all-reduce that agrees on a stop signal after a step */
} zoe_step_phase;

typedef struct zoe_watchdog_config {
    MPI_Comm world;
    int stall_timeout_s; /* no step for this long aborts the job; 0: never */
    int stop_grace_s;    /* a stop signal and then no step or stop for this long aborts; 0: never */
    int rank, tp_rank, dp_rank; /* for the report */
    /* How long the launcher takes to notice a host cut off from it (Open MPI's mpirun: its TCP
     * keepalive, zoe_launcher_split_seconds); 0: it does not, or not soon. */
    double launcher_split_s;
} zoe_watchdog_config;

/* Starts the thread; at least one of the two timeouts > 0. The timers start now. */
zoe_status zoe_watchdog_create(const zoe_watchdog_config *c, zoe_watchdog **out);
/* Records the position (cheap: atomic stores); step is 0-based. Clears the caller's phase. */
void zoe_watchdog_at(zoe_watchdog *wd, int step, int micro_batch, zoe_step_phase phase);
/* Between zoe calls: what the caller does now (a string that outlives the watchdog, or NULL),
 * for this rank's own report. */
void zoe_watchdog_caller_phase(zoe_watchdog *wd, const char *what);
/* A step completed: the timer restarts. */
void zoe_watchdog_step_done(zoe_watchdog *wd, int steps_done);
/* The ranks agreed to stop (or a save began): a stop signal no longer needs a step boundary. */
void zoe_watchdog_stop_settled(zoe_watchdog *wd);
/* Stops and joins the thread (local). NULL is a no-op. */
void zoe_watchdog_destroy(zoe_watchdog *wd);

#endif
