/* Progress and metrics under faults: a metrics path that cannot be written is refused at
 * create; a full disk (/dev/full) or a file-size limit hit mid-line fails that step's report
 * with a message naming the file and the step, and the file holds whole lines only; a file
 * system without room for the run's lines is refused up front; the live bar fits the terminal's
 * width and shows elapsed time and ETA, as do the plain lines; an unknown ZOE_LOG warns once. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "testing.h"
#include "zoe/train.h"

enum { STEPS = 40 };

static zoe_step_stats stats_at(test_rng *r, int step) {
    return (zoe_step_stats){.step = step,
                            .loss = (float)(5.0 * test_rng_uniform(r)),
                            .lr = 1e-3f,
                            .grad_norm = (float)test_rng_uniform(r),
                            .loss_scale = 1,
                            .tokens = 4096,
                            .ms_total = 10 + 90 * test_rng_uniform(r),
                            .ms_forward = 3,
                            .ms_backward = 6};
}

/* Reports steps until one fails: its step (STEPS when none did), its message in why. */
static int report_until_failure(const char *metrics, test_rng *r, char *why, size_t cap) {
    zoe_progress *p = NULL;
    if (!CHECK_OK(zoe_progress_create(NULL, ZOE_PROGRESS_LINES, STEPS, 10, metrics, &p))) return -1;
    int s = 0;
    for (; s < STEPS; s++) {
        zoe_step_stats st = stats_at(r, s);
        if (zoe_progress_report(p, &st) != ZOE_OK) {
            snprintf(why, cap, "%s", zoe_last_error());
            break;
        }
    }
    zoe_progress_destroy(p);
    return s;
}

/* Reports STEPS steps into a progress on out; every report must succeed. */
static void report_all(FILE *out, zoe_progress_style style, const char *metrics, test_rng *r) {
    zoe_progress *p = NULL;
    if (!CHECK_OK(zoe_progress_create(out, style, STEPS, 10, metrics, &p))) return;
    for (int s = 0; s < STEPS; s++) {
        zoe_step_stats st = stats_at(r, s);
        CHECK_OK(zoe_progress_report(p, &st));
    }
    zoe_progress_destroy(p);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    static char buf[1 << 16];
    *len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[*len] = '\0';
    return buf;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

int main(int argc, char **argv) {
    setenv("ZOE_LOG", "chatty", 1); /* before anything logs: read once, on first use */
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 3);
    char dir[] = "/tmp/zoe_progress_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], errlog[256];
    snprintf(errlog, sizeof errlog, "%s/stderr", dir);
    /* stderr to a file, to count the warnings */
    fflush(stderr);
    int saved_err = dup(2);
    FILE *err = freopen(errlog, "w", stderr);
    CHECK(err != NULL, "redirect stderr");

    /* refused at create */
    zoe_progress *p = NULL;
    snprintf(path, sizeof path, "%s/missing/m.jsonl", dir);
    CHECK(zoe_progress_create(NULL, ZOE_PROGRESS_LINES, STEPS, 1, path, &p) == ZOE_ERR_IO,
          "metrics in a missing directory");
    CHECK(strstr(zoe_last_error(), path) && strstr(zoe_last_error(), "No such file"),
          "message '%s'", zoe_last_error());
    CHECK(zoe_progress_create(NULL, ZOE_PROGRESS_LINES, STEPS, 1, dir, &p) == ZOE_ERR_IO,
          "metrics path that is a directory");

    /* a full disk: the first report fails, naming the file and the step */
    char why[512] = "";
    CHECK(report_until_failure("/dev/full", &rng, why, sizeof why) == 0,
          "a report on a full disk succeeded");
    CHECK(strstr(why, "--metrics '/dev/full': writing the line of step 1 failed: No space left") !=
              NULL,
          "message '%s'", why);
    /* a file-size limit reached mid-line: the reports before it succeed, the one cut fails, the
     * file holds whole lines only */
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1000; /* a few lines of about 300 bytes, the next one cut */
    setrlimit(RLIMIT_FSIZE, &lim);
    int failed_at = report_until_failure(path, &rng, why, sizeof why);
    setrlimit(RLIMIT_FSIZE, &old);
    size_t len;
    char *m = slurp(path, &len);
    int lines = count(m, "\n");
    CHECK(failed_at >= 2 && failed_at < STEPS && lines == failed_at,
          "failed at step %d with %d lines kept", failed_at, lines);
    char want[600];
    snprintf(want, sizeof want, "--metrics '%s': writing the line of step %d failed", path,
             failed_at + 1); /* the metrics count steps from 1, as the progress line does */
    CHECK(strstr(why, want) != NULL, "message '%s', not '%s'", why, want);
    CHECK(len > 0 && len <= 1000 && m[len - 1] == '\n', "metrics end in a whole line (%zu bytes)",
          len);
    CHECK(count(m, "{\"step\":") == lines && count(m, "}\n") == lines, "every line is whole");
    /* room for the lines of a run, up front */
    CHECK_OK(zoe_metrics_check_room(path, 10));
    CHECK(zoe_metrics_check_room(path, 1 << 30) == ZOE_ERR_IO &&
              strstr(zoe_last_error(), "1073741824 steps' lines need up to"),
          "a run of 2^30 steps' lines fits: %s", zoe_last_error());

    /* the live bar in 60 columns (not a tty: $COLUMNS), and the plain lines */
    setenv("COLUMNS", "60", 1);
    snprintf(path, sizeof path, "%s/out", dir);
    FILE *out = fopen(path, "w");
    report_all(out, ZOE_PROGRESS_BAR, "", &rng);
    fclose(out);
    m = slurp(path, &len);
    int redraws = 0, widest = 0;
    for (char *seg = strtok(m, "\r\n"); seg; seg = strtok(NULL, "\r\n")) {
        if (strncmp(seg, "\033[K", 3) == 0) seg += 3;
        int w = (int)strlen(seg);
        widest = w > widest ? w : widest;
        redraws++;
        CHECK(strchr(seg, '<') != NULL, "bar without elapsed<eta: '%s'", seg);
    }
    CHECK(redraws == STEPS && widest <= 59, "%d redraws, widest %d columns (60)", redraws, widest);
    out = fopen(path, "w");
    report_all(out, ZOE_PROGRESS_LINES, "", &rng);
    fclose(out);
    m = slurp(path, &len);
    CHECK(count(m, "\n") == STEPS / 10 + 1, "plain lines: every 10 steps and the first");
    CHECK(count(m, " elapsed ") == STEPS / 10 + 1 && count(m, " eta ") == STEPS / 10 + 1,
          "plain lines carry elapsed and eta");
    CHECK(strncmp(m, "step  1/40  loss ", 17) == 0, "plain line starts 'step  1/40  loss': %.20s",
          m);

    /* the warnings, counted */
    fflush(stderr);
    dup2(saved_err, 2);
    m = slurp(errlog, &len);
    CHECK(count(m, "--metrics") == 0, "metrics failures are errors, not warnings:\n%s", m);
    CHECK(count(m, "ZOE_LOG='chatty'") == 1, "one warning for ZOE_LOG:\n%s", m);
    if (test_failures()) fputs(m, stderr); /* checks that failed while stderr was the file */
    unlink(errlog), unlink(path);
    snprintf(path, sizeof path, "%s/m.jsonl", dir);
    unlink(path), rmdir(dir);
    return test_finish("test_progress");
}
