/* zoe-train refuses a run the plan says does not fit, before it allocates: the 13b preset on
 * this machine (about 600 GiB on the CPU backend) exits 2 with the plan's binding figure, and
 * the process never grows past a small resident size (measured by wait4 as the child's peak
 * RSS). Arguments: the zoe-train binary and a data file. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testing.h"

enum { MAX_RSS_KIB = 128 * 1024 }; /* an idle zoe-train with MPI and BLAS loaded: ~20 MiB */

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK(argc == 3, "usage: %s ZOE_TRAIN DATA", argv[0]);
    if (argc != 3) return test_finish("test_plan_refuse");
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        execl(argv[1], argv[1], "--model", "13b", "--data", argv[2], "--steps", "1", "--warmup", "0", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    char out[8192];
    size_t got = 0;
    ssize_t n;
    while (got + 1 < sizeof out && (n = read(pipefd[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(pipefd[0]);
    int status = 0;
    struct rusage ru;
    CHECK(wait4(pid, &status, 0, &ru) == pid, "wait4");
    printf("%s", out);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "zoe-train --model 13b exited %d",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(strstr(out, "does not fit: host: 1 rank x") != NULL, "no binding figure in the refusal");
    CHECK(ru.ru_maxrss < MAX_RSS_KIB, "zoe-train grew to %ld KiB before refusing", ru.ru_maxrss);
    printf("peak RSS %ld KiB\n", ru.ru_maxrss);
    return test_finish("test_plan_refuse");
}
