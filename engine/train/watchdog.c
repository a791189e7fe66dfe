/* The stall watchdog: a thread that sleeps on a condition variable, wakes about four times per
 * timeout, and aborts the job when the last completed step is older than the timeout. The
 * training thread only stores atomics; the watchdog never touches the trainer.
 *
 * The ranks of a node share one page of slots (POSIX shared memory, mapped by every rank of the
 * node and unlinked once all have it): each rank's position, and a heartbeat its watchdog
 * thread writes at every wake. A stopped or dead rank's heartbeat ages; a rank that hangs
 * (a read that never returns) keeps beating but stays where it is. So a live rank's report can
 * name the ranks that did not arrive, with no MPI call from the watchdog thread (MPI is not
 * initialised for calls from two threads, and the world is blocked in a collective anyway).
 * Ranks on other nodes are not seen: each node's live ranks name their own node's.
 *
 * A stop signal (SIGTERM, ...) ends the run at the next step boundary; a rank blocked in a
 * collective on a dead peer never gets there. After --stop-grace seconds with the signal pending
 * and neither a completed step nor the ranks' agreement to stop, the watchdog aborts the job.
 *
 * Under a network split, Open MPI's mpirun must notice the host it lost before it can end the
 * job: it sends that host's daemon the order to kill its ranks, and a TCP send to a host that
 * no longer answers is retried for many minutes, while the keepalive probes that notice a dead
 * host run only on an idle connection. So on a job across hosts the watchdog waits, after its
 * report, until mpirun's keepalive has had time to notice (launcher_split_s), and aborts only
 * then: mpirun ends the job itself on a split, and on a rank that stops the abort comes a few
 * seconds later. A rank that moves on during that wait (a step completes: a save that was
 * only slow) says so and goes on. Whatever MPI_Abort does, an alarm ends the process soon
 * after.
 *
 * Explained in docs/multi-node.md, "A rank that stops". */
#include "engine/train/watchdog.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "engine/train/stop_signal.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* One rank's slot in the node's shared page; written only by that rank. */
typedef struct watchdog_slot {
    _Atomic double heartbeat_s; /* zoe_clock_seconds (CLOCK_MONOTONIC: one clock per node) */
    _Atomic int step, micro_batch, phase, steps_done;
    int world_rank;
} watchdog_slot;

struct zoe_watchdog {
    zoe_watchdog_config cfg;
    int world_size;
    double period_s;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping;       /* under lock */
    double stop_seen_s; /* the watchdog thread's own: when it first saw a stop signal */
    _Atomic double last_step_s;
    _Atomic int stop_settled;
    const char *_Atomic caller_what; /* this rank's, while between zoe calls */
    watchdog_slot *slots;            /* node_size of them, shared with the node's other ranks */
    size_t slots_bytes;
    int node_size, node_rank;
};

static const char *phase_name(int phase) {
    static const char *const names[] = {"forward",
                                        "backward",
                                        "optimizer step",
                                        "between zoe calls (the caller's code)",
                                        "validation forward after the step",
                                        "saving a checkpoint",
                                        "loading a checkpoint",
                                        "the all-reduce that agrees on a stop signal after a step"};
    return phase >= 0 && phase <= ZOE_PHASE_STOP_CHECK ? names[phase] : "unknown";
}

/* The node's other ranks, as a live rank sees them when it gives up: those whose heartbeat
 * stopped (a stopped or dead process), and those elsewhere in the step than this one. */
static void describe_peers(const zoe_watchdog *wd, double now, char *out, size_t cap) {
    const watchdog_slot *me = &wd->slots[wd->node_rank];
    size_t n = 0;
    char silent[256] = "", elsewhere[512] = "";
    size_t ns = 0, ne = 0;
    for (int j = 0; j < wd->node_size; j++) {
        const watchdog_slot *p = &wd->slots[j];
        if (j == wd->node_rank) continue;
        double age = now - atomic_load(&p->heartbeat_s);
        int step = atomic_load(&p->step), phase = atomic_load(&p->phase);
        if (age > 2 * wd->period_s + 0.5) {
            if (ns < sizeof silent)
                ns += (size_t)snprintf(silent + ns, sizeof silent - ns, "%s%d (silent %.0f s)",
                                       ns ? ", " : "", p->world_rank, age);
        } else if (step != atomic_load(&me->step) || phase != atomic_load(&me->phase)) {
            if (ne < sizeof elsewhere)
                ne += (size_t)snprintf(elsewhere + ne, sizeof elsewhere - ne,
                                       "%srank %d at step %d, %s", ne ? "; " : "", p->world_rank,
                                       step + 1, phase_name(phase));
        }
    }
    if (ns)
        n += (size_t)snprintf(out + n, cap - n,
                              "; did not arrive: rank %s, stopped or dead (no heartbeat)", silent);
    if (ne && n < cap) n += (size_t)snprintf(out + n, cap - n, "; elsewhere: %s", elsewhere);
    const int others = wd->node_size - 1, away = wd->world_size - wd->node_size;
    if (!ns && !ne && others > 0 && n < cap)
        n += (size_t)(others == 1 ? snprintf(out + n, cap - n,
                                             "; the other rank of this node is alive here too")
                                  : snprintf(out + n, cap - n,
                                             "; the %d other ranks of this node are alive here too",
                                             others));
    if (away > 0 && n < cap)
        snprintf(out + n, cap - n, "; the %d rank%s on other nodes %s not seen from here", away,
                 away == 1 ? "" : "s", away == 1 ? "is" : "are");
}

/* Prints this rank's report (why: what expired) and ends the job, unless the rank moves on (a
 * step completes, or the ranks agree to stop) while the watchdog holds the abort back: then it
 * says so and returns. */
static void report_and_abort(zoe_watchdog *wd, const char *why, const char *cause) {
    const watchdog_slot *me = &wd->slots[wd->node_rank];
    const double step_at_report = atomic_load(&wd->last_step_s);
    const int settled_at_report = atomic_load(&wd->stop_settled);
    char peers[1024], where[160], when[96] = "";
    describe_peers(wd, zoe_clock_seconds(), peers, sizeof peers);
    const char *caller = atomic_load(&wd->caller_what);
    int phase = atomic_load(&me->phase);
    if (phase == ZOE_PHASE_BETWEEN && caller)
        snprintf(where, sizeof where, "between zoe calls (the caller's code: %s)", caller);
    else
        snprintf(where, sizeof where, "%s", phase_name(phase));
    /* The other live ranks' watchdogs fire within a wake period of this one (their last steps
     * ended together): give them time to say where they are before the job is torn down; and
     * across hosts, give mpirun the time to notice a host it lost (the file's comment). */
    double hold = 2;
    if (wd->node_size < wd->world_size && wd->cfg.launcher_split_s > 0) {
        hold += wd->cfg.launcher_split_s;
        snprintf(when, sizeof when, " in %.0f s (after mpirun's keepalive) unless it moves on",
                 hold);
    }
    /* One fprintf: ranks' lines do not interleave. */
    fprintf(stderr,
            "zoe: rank %d (tp %d, dp %d): %s: %d steps done, now at step %d, micro-batch %d, "
            "%s%s; %s; aborting the job%s\n",
            wd->cfg.rank, wd->cfg.tp_rank, wd->cfg.dp_rank, why, atomic_load(&me->steps_done),
            atomic_load(&me->step) + 1, atomic_load(&me->micro_batch), where, peers, cause, when);
    fflush(stderr);
    struct timespec pause = {.tv_sec = (time_t)hold};
    nanosleep(&pause, NULL);
    /* Slow, not stuck (a save on a loaded machine): the report stands, the run goes on. */
    if (atomic_load(&wd->last_step_s) != step_at_report ||
        atomic_load(&wd->stop_settled) != settled_at_report) {
        fprintf(stderr,
                "zoe: rank %d (tp %d, dp %d): it moved on after the report above: the "
                "run goes on\n",
                wd->cfg.rank, wd->cfg.tp_rank, wd->cfg.dp_rank);
        fflush(stderr);
        return;
    }
    alarm(10); /* SIGALRM's default action ends the process if MPI_Abort cannot */
    MPI_Abort(wd->cfg.world, 3);
    abort(); /* MPI_Abort does not return; if it did, the process must still end */
}

/* A stop signal that is still pending: how long since it came (or since the last step, if one
 * completed after it); 0 when none is pending, or the ranks agreed to stop. */
static double stop_pending_s(zoe_watchdog *wd, double now) {
    if (!zoe_stop_signal_pending() || atomic_load(&wd->stop_settled)) return 0;
    if (wd->stop_seen_s == 0) wd->stop_seen_s = now;
    double since = atomic_load(&wd->last_step_s);
    return now - (since > wd->stop_seen_s ? since : wd->stop_seen_s);
}

static void *watch(void *arg) {
    zoe_watchdog *wd = arg;
    watchdog_slot *me = &wd->slots[wd->node_rank];
    pthread_mutex_lock(&wd->lock);
    while (!wd->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)(wd->period_s * 1e9);
        until.tv_sec += ns / 1000000000L, until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&wd->wake, &wd->lock, &until);
        if (wd->stopping) break;
        double now = zoe_clock_seconds();
        atomic_store(&me->heartbeat_s, now);
        double idle = now - atomic_load(&wd->last_step_s);
        char why[160];
        if (wd->cfg.stall_timeout_s > 0 && idle > wd->cfg.stall_timeout_s) {
            snprintf(why, sizeof why, "no step completed in %.0f s (--stall-timeout %d)", idle,
                     wd->cfg.stall_timeout_s);
            report_and_abort(wd, why,
                             "a rank that stopped or hangs holds the others in a collective");
        }
        double waited = wd->cfg.stop_grace_s > 0 ? stop_pending_s(wd, now) : 0;
        if (waited > wd->cfg.stop_grace_s && wd->cfg.stop_grace_s > 0) {
            snprintf(why, sizeof why,
                     "%s, and no step completed in the %.0f s since (--stop-grace %d)",
                     zoe_stop_signal_name(zoe_stop_signal_pending()), waited, wd->cfg.stop_grace_s);
            report_and_abort(wd, why,
                             "a rank that died or hangs holds this one in a collective, so the "
                             "run cannot stop at a step boundary and save");
        }
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

/* Maps the node's page of slots: its first rank creates a uniquely named segment, the others
 * open it by the name it broadcasts, and once all have mapped it the name is removed, so
 * nothing is left behind however the job ends. Collective over the node's ranks. */
static zoe_status map_node_slots(zoe_watchdog *wd) {
    MPI_Comm node;
    MPI_Comm_split_type(wd->cfg.world, MPI_COMM_TYPE_SHARED, wd->cfg.rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &wd->node_size);
    MPI_Comm_rank(node, &wd->node_rank);
    wd->slots_bytes = (size_t)wd->node_size * sizeof(watchdog_slot);
    char name[64] = "";
    int fd = -1, ok = 1;
    if (wd->node_rank == 0) {
        snprintf(name, sizeof name, "/zoe-watchdog-%ld-%d", (long)getpid(), wd->cfg.rank);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        ok = fd >= 0 && ftruncate(fd, (off_t)wd->slots_bytes) == 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, node);
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, node);
    if (ok && wd->node_rank != 0) fd = shm_open(name, O_RDWR, 0600);
    void *map = ok && fd >= 0
                    ? mmap(NULL, wd->slots_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
    if (fd >= 0) close(fd);
    int mapped = map != MAP_FAILED, all = 0;
    MPI_Allreduce(&mapped, &all, 1, MPI_INT, MPI_MIN, node);
    if (wd->node_rank == 0 && name[0]) shm_unlink(name);
    int world_rank = wd->cfg.rank;
    if (mapped) wd->slots = map;
    if (all) {
        watchdog_slot *me = &wd->slots[wd->node_rank];
        me->world_rank = world_rank;
        atomic_store(&me->heartbeat_s, zoe_clock_seconds());
        atomic_store(&me->phase, ZOE_PHASE_BETWEEN);
    }
    MPI_Barrier(node); /* every slot filled before any watchdog may read it */
    MPI_Comm_free(&node);
    if (!all)
        return zoe_fail(ZOE_ERR_INTERNAL,
                        "stall watchdog: could not share %zu bytes of memory between the ranks "
                        "of a node (shm_open %s)",
                        wd->slots_bytes, name);
    return ZOE_OK;
}

static void unmap_node_slots(zoe_watchdog *wd) {
    if (wd->slots) munmap(wd->slots, wd->slots_bytes);
    wd->slots = NULL;
}

zoe_status zoe_watchdog_create(const zoe_watchdog_config *c, zoe_watchdog **out) {
    *out = NULL;
    if (c->stall_timeout_s < 0 || c->stop_grace_s < 0 ||
        (c->stall_timeout_s == 0 && c->stop_grace_s == 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "watchdog: stall timeout %d s and stop grace %d s: want one positive",
                        c->stall_timeout_s, c->stop_grace_s);
    zoe_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "watchdog (%zu bytes)", sizeof *wd);
    /* wake about four times per timeout, at least once a second */
    double period = 1.0;
    if (c->stall_timeout_s > 0 && c->stall_timeout_s / 4.0 < period)
        period = c->stall_timeout_s / 4.0;
    if (c->stop_grace_s > 0 && c->stop_grace_s / 4.0 < period) period = c->stop_grace_s / 4.0;
    *wd = (zoe_watchdog){.cfg = *c, .period_s = period};
    MPI_Comm_size(c->world, &wd->world_size);
    zoe_status st = map_node_slots(wd);
    if (st != ZOE_OK) {
        unmap_node_slots(wd);
        free(wd);
        return st;
    }
    atomic_store(&wd->last_step_s, zoe_clock_seconds());
    pthread_mutex_init(&wd->lock, NULL);
    pthread_cond_init(&wd->wake, NULL);
    if (pthread_create(&wd->thread, NULL, watch, wd) != 0) {
        pthread_cond_destroy(&wd->wake);
        pthread_mutex_destroy(&wd->lock);
        unmap_node_slots(wd);
        free(wd);
        return zoe_fail(ZOE_ERR_INTERNAL, "could not start the stall watchdog thread");
    }
    *out = wd;
    return ZOE_OK;
}

void zoe_watchdog_at(zoe_watchdog *wd, int step, int micro_batch, zoe_step_phase phase) {
    if (!wd) return;
    watchdog_slot *me = &wd->slots[wd->node_rank];
    atomic_store(&me->step, step);
    atomic_store(&me->micro_batch, micro_batch);
    atomic_store(&me->phase, (int)phase);
    atomic_store(&wd->caller_what, NULL);
}

void zoe_watchdog_caller_phase(zoe_watchdog *wd, const char *what) {
    if (!wd) return;
    atomic_store(&wd->slots[wd->node_rank].phase, ZOE_PHASE_BETWEEN);
    atomic_store(&wd->caller_what, what);
}

void zoe_watchdog_stop_settled(zoe_watchdog *wd) {
    if (wd) atomic_store(&wd->stop_settled, 1);
}

void zoe_watchdog_step_done(zoe_watchdog *wd, int steps_done) {
    if (!wd) return;
    atomic_store(&wd->slots[wd->node_rank].steps_done, steps_done);
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
    unmap_node_slots(wd);
    free(wd);
}
