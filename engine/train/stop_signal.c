/* Stop requests: SIGTERM, SIGINT and SIGUSR1 set a flag that the training loop polls at step
 * boundaries. The flag is the one process-wide variable besides the logger: a signal handler
 * can reach nothing else, and it may only store a sig_atomic_t.
 *
 * Explained in docs/multi-node.md, "Signals"; docs/checkpoint.md, "Stopping". */
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "zoe/checkpoint.h"

static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int signo) {
    /* A second Ctrl-C means now: no save, no clean-up (only async-signal-safe calls here). */
    if (signo == SIGINT && stop_signal) {
        static const char msg[] = "zoe: second interrupt, stopping at once\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(130);
    }
    stop_signal = signo;
}

void zoe_stop_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

int zoe_stop_requested(MPI_Comm comm, int *signo) {
    int mine = stop_signal, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
    if (signo) *signo = any;
    return any != 0;
}
