/* Stop requests: SIGTERM, SIGINT and SIGUSR1 set a flag that the training loop polls at step
 * boundaries. The flag is the one process-wide variable besides the logger: a signal handler
 * can reach nothing else. It is a lock-free atomic, which a handler may store (C17 7.14.1.1)
 * and the stall watchdog's thread may read (engine/train/stop_signal.h: a rank blocked in a
 * collective never reaches the boundary, and the watchdog ends it after --stop-grace).
 *
 * Under Open MPI's mpirun a SIGCONT from the launcher counts too. mpirun does not forward the
 * SIGTERM or SIGINT it gets: it kills the job, SIGCONT at once, SIGTERM odls_base_sigkill_timeout
 * seconds later and SIGKILL as long again after that. Stopping at the SIGCONT gives a save both
 * timeouts instead of one, and is the only way to save at all before the SIGKILL when the
 * timeout is long (mpirun sends nothing else for that long).
 *
 * Explained in docs/multi-node.md, "Signals"; docs/checkpoint.md, "Stopping". */
#include "engine/train/stop_signal.h"
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "zoe/checkpoint.h"

static atomic_int stop_signal = 0;
/* The launcher whose SIGCONT is a stop request (0: none); set once before the handlers. */
static volatile sig_atomic_t launcher_pid = 0;

static void on_signal(int signo, siginfo_t *info, void *context) {
    (void)context;
    /* A SIGCONT from anyone else (a shell's fg, a debugger) is a resume, nothing more. */
    if (signo == SIGCONT && (!launcher_pid || !info || info->si_pid != (pid_t)launcher_pid)) return;
    /* A second Ctrl-C means now: no save, no clean-up (only async-signal-safe calls here). */
    if (signo == SIGINT && atomic_load(&stop_signal)) {
        static const char msg[] = "zoe: second interrupt, stopping at once\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(130);
    }
    int none = 0;
    atomic_compare_exchange_strong(&stop_signal, &none, signo);
}

void zoe_stop_signals_install(void) {
    /* mpirun (or on other nodes its orted) is the ranks' parent; OMPI_COMM_WORLD_SIZE says
     * Open MPI started this process. */
    if (getenv("OMPI_COMM_WORLD_SIZE")) launcher_pid = (sig_atomic_t)getppid();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    if (launcher_pid) sigaction(SIGCONT, &sa, NULL);
}

const char *zoe_stop_signal_name(int signo) {
    if (signo == SIGCONT) return "mpirun is ending the job";
    return strsignal(signo);
}

int zoe_stop_signal_pending(void) {
    return atomic_load(&stop_signal);
}

int zoe_stop_requested(MPI_Comm comm, int *signo) {
    int mine = atomic_load(&stop_signal), any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
    if (signo) *signo = any;
    return any != 0;
}
