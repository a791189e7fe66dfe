/* zoe-train refuses a run the plan says does not fit, before it allocates: the 13b preset on
 * this machine (about 300 GiB on the CPU backend) exits 2 with the plan's binding figure, and
 * the process never grows past a small resident size (measured by wait4 as the child's peak
 * RSS). Arguments: the zoe-train binary and a data file. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testing.h"

/* What refusing may add to the resident size of a zoe-train that only starts (MPI, BLAS and,
 * in a CUDA build, the CUDA libraries loaded: 20 to 250 MiB): far below the 348 GiB the run
 * would take. */
enum { MAX_GROWTH_KIB = 64 * 1024 };

/* Runs zoe-train with args; its output into out, its exit status and peak RSS (KiB) back. */
static void run(char *const args[], char *out, size_t cap, int *status, long *max_rss) {
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        execv(args[0], args);
        _exit(127);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < cap && (n = read(pipefd[0], out + got, cap - 1 - got)) > 0) got += (size_t)n;
    out[got] = '\0';
    close(pipefd[0]);
    struct rusage ru;
    CHECK(wait4(pid, status, 0, &ru) == pid, "wait4");
    *max_rss = ru.ru_maxrss;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK(argc == 3, "usage: %s ZOE_TRAIN DATA", argv[0]);
    if (argc != 3) return test_finish("test_plan_refuse");
    char out[8192];
    int status = 0;
    long base_rss = 0, rss = 0;
    char *const idle[] = {argv[1], "--list-models", NULL};
    run(idle, out, sizeof out, &status, &base_rss);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "zoe-train --list-models failed");
    char *const refused[] = {argv[1],   "--model", "13b",      "--data", argv[2],
                             "--steps", "1",       "--warmup", "0",      NULL};
    run(refused, out, sizeof out, &status, &rss);
    printf("%s", out);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2, "zoe-train --model 13b exited %d",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(strstr(out, "does not fit: host: 1 rank x") != NULL, "no binding figure in the refusal");
    CHECK(rss < base_rss + MAX_GROWTH_KIB,
          "zoe-train grew to %ld KiB before refusing (%ld KiB when it only lists the presets)", rss,
          base_rss);
    printf("peak RSS %ld KiB (%ld KiB when it only lists the presets)\n", rss, base_rss);
    return test_finish("test_plan_refuse");
}
