/* Rank 0's view of training: a live bar on a terminal, plain lines in a log, JSON lines for
 * plots. Figures per step come from the trainer; nothing here measures but the wall clock of
 * the run (elapsed time and ETA).
 *
 * Explained in docs/train.md, "Validation". */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "runtime/clock.h"
#include "runtime/error.h"
#include "zoe/log.h"
#include "zoe/train.h"

struct zoe_progress {
    FILE *out;
    int metrics_fd; /* -1: none */
    char *metrics_path;
    off_t metrics_bytes; /* length of the complete lines written so far */
    int total, every, live;
    double started_ms;
    int evaluated; /* the bar keeps showing the latest validation loss */
    float val_loss;
};

static int live_bar(FILE *out, zoe_progress_style style) {
    if (style != ZOE_PROGRESS_AUTO) return style == ZOE_PROGRESS_BAR;
    return out && isatty(fileno(out)) && !getenv("OMPI_COMM_WORLD_SIZE");
}

/* Columns of the terminal out writes to: the tty's size, else $COLUMNS, else 80. */
static int terminal_width(FILE *out) {
    struct winsize ws;
    if (out && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *cols = getenv("COLUMNS");
    int n = cols ? atoi(cols) : 0;
    return n >= 20 && n <= 1000 ? n : 80;
}

/* The metrics file, open for writing at its end. Its "step" counts from 1, as the progress line
 * and the checkpoints' step-N do: the line of step N is written when N steps are done. A resumed
 * run (first_step > 0 steps done) keeps the lines of steps 1..first_step (a crash may have left
 * lines of steps after the checkpoint, which the resumed run writes again) and appends;
 * otherwise it starts empty. */
static int open_metrics(const char *path, int first_step) {
    if (first_step <= 0) return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *in = fopen(path, "r");
    if (in) {
        char tmp[ZOE_PATH_MAX + 16];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *out = fopen(tmp, "w");
        if (!out) {
            fclose(in);
            return -1;
        }
        char line[4096];
        int step;
        while (fgets(line, sizeof line, in))
            if (sscanf(line, "{\"step\":%d", &step) == 1 && step <= first_step) fputs(line, out);
        int ok = fclose(out) == 0;
        fclose(in);
        if (!ok || rename(tmp, path) != 0) return -1;
    }
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

zoe_status zoe_metrics_check(const char *path) {
    if (!path || !path[0]) return ZOE_OK;
    /* An existing file opened for appending is left as it is; a new one is made and removed. */
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC), made = 0;
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        made = fd >= 0;
    }
    if (fd < 0)
        return zoe_fail(ZOE_ERR_IO, "--metrics: cannot write '%s': %s", path, strerror(errno));
    close(fd);
    if (made) unlink(path);
    return ZOE_OK;
}

zoe_status zoe_metrics_check_room(const char *path, int steps) {
    if (!path || !path[0] || steps <= 0) return ZOE_OK;
    /* the directory that holds the file: the file may not exist yet */
    char dir[ZOE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return ZOE_OK; /* zoe_metrics_check names what is wrong */
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    uint64_t need = (uint64_t)steps * ZOE_METRICS_LINE_MAX;
    if (free_bytes >= need) return ZOE_OK;
    return zoe_fail(ZOE_ERR_IO,
                    "--metrics: cannot write '%s': %d steps' lines need up to %llu bytes, %llu "
                    "bytes are free there",
                    path, steps, (unsigned long long)need, (unsigned long long)free_bytes);
}

zoe_status zoe_progress_create(FILE *out, zoe_progress_style style, int total_steps, int log_every,
                               const char *metrics_path, zoe_progress **out_p) {
    return zoe_progress_create_at(out, style, total_steps, log_every, metrics_path, 0, out_p);
}

zoe_status zoe_progress_create_at(FILE *out, zoe_progress_style style, int total_steps,
                                  int log_every, const char *metrics_path, int first_step,
                                  zoe_progress **out_p) {
    if (!out_p) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_progress_create: out is NULL");
    *out_p = NULL;
    if (total_steps <= 0 || log_every <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "progress: steps %d, every %d", total_steps,
                        log_every);
    zoe_progress *p = calloc(1, sizeof *p);
    if (!p) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "progress struct (%zu bytes)", sizeof *p);
    p->out = out;
    p->total = total_steps;
    p->every = log_every;
    p->live = live_bar(out, style);
    p->metrics_fd = -1;
    p->started_ms = zoe_clock_ms();
    if (metrics_path && metrics_path[0]) {
        p->metrics_path = strdup(metrics_path);
        p->metrics_fd = open_metrics(metrics_path, first_step);
        if (!p->metrics_path || p->metrics_fd < 0) {
            int err = errno;
            zoe_progress_destroy(p);
            return zoe_fail(ZOE_ERR_IO, "--metrics: cannot write '%s': %s", metrics_path,
                            strerror(err));
        }
        off_t kept = lseek(p->metrics_fd, 0, SEEK_END); /* the lines a resumed run kept */
        p->metrics_bytes = kept > 0 ? kept : 0;
    }
    *out_p = p;
    return ZOE_OK;
}

/* One whole line per step or none: a short write (a full disk, a file-size limit) is cut back
 * to the last complete line and fails the report. */
static zoe_status write_metrics_line(zoe_progress *p, const char *line, size_t n, int step) {
    ssize_t w = write(p->metrics_fd, line, n);
    if (w == (ssize_t)n) {
        p->metrics_bytes += (off_t)n;
        return ZOE_OK;
    }
    int err = w < 0 ? errno : ENOSPC;
    if (w > 0 && ftruncate(p->metrics_fd, p->metrics_bytes) == 0)
        lseek(p->metrics_fd, p->metrics_bytes, SEEK_SET);
    return zoe_fail(ZOE_ERR_IO, "--metrics '%s': writing the line of step %d failed: %s",
                    p->metrics_path, step, strerror(err));
}

/* h:mm:ss, or m:ss under an hour. */
static void format_duration(char *buf, size_t n, double seconds) {
    long s = seconds > 0 && seconds < 1e9 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
}

/* "  val 1.2345" after an evaluation, else "" */
static void format_val(char *buf, size_t n, const zoe_step_stats *s) {
    if (s->evaluated)
        snprintf(buf, n, "  val %.4f", (double)s->val_loss);
    else
        buf[0] = '\0';
}

static void print_line(zoe_progress *p, const zoe_step_stats *s, double tok_per_s,
                       const char *elapsed, const char *eta) {
    char val[32];
    format_val(val, sizeof val, s);
    fprintf(p->out,
            "step %*d/%d  loss %.4f%s  lr %.2e  norm %.3f%s  %.0f tok/s  %.1f ms "
            "(fwd %.1f  bwd %.1f  offload %.1f  host step %.1f%s  refresh %.1f)  device peak "
            "%.1f MiB  elapsed %s  eta %s",
            (int)snprintf(NULL, 0, "%d", p->total), s->step + 1, p->total, (double)s->loss, val,
            (double)s->lr, (double)s->grad_norm, s->skipped ? " SKIPPED" : "", tok_per_s,
            s->ms_total, s->ms_forward, s->ms_backward, s->ms_offload, s->ms_host_step,
            s->overlapped ? " overlapped" : "", s->ms_refresh,
            (double)s->device_peak_bytes / (1 << 20), elapsed, eta);
}

/* The live line, fitted to the terminal's width so that it redraws in place instead of
 * wrapping: step, loss, speed, elapsed<ETA always; the bar takes the room left (up to 30 cells),
 * then the norm and step time if they still fit. */
static void print_bar(zoe_progress *p, const zoe_step_stats *s, double tok_per_s,
                      const char *elapsed, const char *eta) {
    char text[192], tail[96], bar[32], val[32];
    int width = terminal_width(p->out) - 1;
    format_val(val, sizeof val,
               &(zoe_step_stats){.evaluated = p->evaluated, .val_loss = p->val_loss});
    int n = snprintf(text, sizeof text, " %d/%d  loss %.4f%s  %.1fk tok/s  %s<%s", s->step + 1,
                     p->total, (double)s->loss, val, tok_per_s / 1e3, elapsed, eta);
    int cells = width - n - 2;
    cells = cells > 30 ? 30 : cells;
    bar[0] = '\0';
    if (cells >= 5) {
        int filled = (int)((double)cells * (s->step + 1) / p->total);
        bar[0] = '[';
        for (int i = 0; i < cells; i++) bar[1 + i] = i < filled ? '#' : '.';
        bar[cells + 1] = ']';
        bar[cells + 2] = '\0';
    }
    int tn = snprintf(tail, sizeof tail, "  norm %.3f  %.0f ms%s", (double)s->grad_norm,
                      s->ms_total, s->skipped ? " SKIPPED" : "");
    int used = (int)strlen(bar) + n;
    char line[320];
    snprintf(line, sizeof line, "%s%s%s", bar, text, used + tn <= width ? tail : "");
    if ((int)strlen(line) > width) line[width > 0 ? width : 0] = '\0';
    fprintf(p->out, "\r\033[K%s", line);
}

zoe_status zoe_progress_report(zoe_progress *p, const zoe_step_stats *s) {
    if (!p || !s) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_progress_report: NULL argument");
    double tok_per_s = s->ms_total > 0 ? (double)s->tokens / (s->ms_total / 1e3) : 0;
    if (p->metrics_fd >= 0) {
        char line[ZOE_METRICS_LINE_MAX];
        int n = snprintf(line, sizeof line,
                         "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,"
                         "\"loss_scale\":%g,\"skipped\":%d,\"tokens\":%lld,\"tokens_per_s\":%.1f,"
                         "\"ms\":%.3f,\"ms_forward\":%.3f,\"ms_backward\":%.3f,"
                         "\"ms_offload\":%.3f,\"ms_host_step\":%.3f,\"ms_refresh\":%.3f,"
                         "\"ms_optimizer\":%.3f,\"overlapped\":%d,\"redone\":%d,"
                         "\"device_peak_bytes\":%lld",
                         s->step + 1, (double)s->loss, (double)s->lr, (double)s->grad_norm,
                         (double)s->loss_scale, s->skipped, (long long)s->tokens, tok_per_s,
                         s->ms_total, s->ms_forward, s->ms_backward, s->ms_offload, s->ms_host_step,
                         s->ms_refresh, s->ms_optimizer, s->overlapped, s->redone,
                         (long long)s->device_peak_bytes);
        /* the accumulation's wait for the drives only where the gradient is on them */
        if (n > 0 && n < (int)sizeof line && s->ms_grad_wait > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, ",\"ms_grad_wait\":%.3f",
                          s->ms_grad_wait);
        /* the validation loss only on the lines of steps that were evaluated */
        if (n > 0 && n < (int)sizeof line && s->evaluated)
            n += snprintf(line + n, sizeof line - (size_t)n, ",\"val_loss\":%.6f",
                          (double)s->val_loss);
        if (n > 0 && n < (int)sizeof line - 2) {
            n += snprintf(line + n, sizeof line - (size_t)n, "}\n");
            ZOE_TRY(write_metrics_line(p, line, (size_t)n, s->step + 1));
        }
    }
    if (s->evaluated) p->evaluated = 1, p->val_loss = s->val_loss;
    if (!p->out) return ZOE_OK;
    int last = s->step + 1 >= p->total;
    double elapsed_s = (zoe_clock_ms() - p->started_ms) / 1e3;
    double eta_s = elapsed_s / (s->step + 1) * (p->total - s->step - 1);
    char elapsed[32], eta[32];
    format_duration(elapsed, sizeof elapsed, elapsed_s);
    format_duration(eta, sizeof eta, eta_s);
    if (p->live) {
        print_bar(p, s, tok_per_s, elapsed, eta);
        if (last) fputc('\n', p->out);
    } else if ((s->step + 1) % p->every == 0 || s->step == 0 || last || s->evaluated) {
        print_line(p, s, tok_per_s, elapsed, eta);
        fputc('\n', p->out);
    }
    fflush(p->out);
    return ZOE_OK;
}

void zoe_progress_destroy(zoe_progress *p) {
    if (!p) return;
    if (p->metrics_fd >= 0) close(p->metrics_fd);
    free(p->metrics_path);
    free(p);
}
