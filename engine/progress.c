/* Rank 0's view of training: a live bar on a terminal, plain lines in a log, JSON lines for
 * plots. Figures per step come from the trainer; nothing here measures. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/error.h"
#include "zoe/train.h"

struct zoe_progress {
    FILE *out;
    FILE *metrics;
    int total, every, live;
};

static int live_bar(FILE *out, zoe_progress_style style) {
    if (style != ZOE_PROGRESS_AUTO) return style == ZOE_PROGRESS_BAR;
    return out && isatty(fileno(out)) && !getenv("OMPI_COMM_WORLD_SIZE");
}

/* A resumed run's metrics: the lines of steps before first_step stay (a crash may have left
 * lines of steps after the checkpoint, which the resumed run writes again), then appending. */
static FILE *open_metrics(const char *path, int first_step) {
    if (first_step <= 0) return fopen(path, "w");
    FILE *in = fopen(path, "r");
    char tmp[ZOE_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = in ? fopen(tmp, "w") : NULL;
    if (in && out) {
        char line[4096];
        int step;
        while (fgets(line, sizeof line, in))
            if (sscanf(line, "{\"step\":%d", &step) == 1 && step < first_step) fputs(line, out);
        int ok = fclose(out) == 0;
        fclose(in);
        if (ok && rename(tmp, path) != 0) return NULL;
    } else if (in) {
        fclose(in);
        return NULL;
    }
    return fopen(path, "a");
}

zoe_status zoe_progress_create(FILE *out, zoe_progress_style style, int total_steps, int log_every,
                               const char *metrics_path, zoe_progress **out_p) {
    return zoe_progress_create_at(out, style, total_steps, log_every, metrics_path, 0, out_p);
}

zoe_status zoe_progress_create_at(FILE *out, zoe_progress_style style, int total_steps,
                                  int log_every, const char *metrics_path, int first_step,
                                  zoe_progress **out_p) {
    *out_p = NULL;
    if (total_steps <= 0 || log_every <= 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "progress: steps %d, every %d", total_steps,
                        log_every);
    zoe_progress *p = calloc(1, sizeof *p);
    if (!p) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "progress struct");
    p->out = out;
    p->total = total_steps;
    p->every = log_every;
    p->live = live_bar(out, style);
    if (metrics_path && metrics_path[0]) {
        p->metrics = open_metrics(metrics_path, first_step);
        if (!p->metrics) {
            free(p);
            return zoe_fail(ZOE_ERR_IO, "cannot write metrics '%s': %s", metrics_path,
                            strerror(errno));
        }
    }
    *out_p = p;
    return ZOE_OK;
}

static void print_line(zoe_progress *p, const zoe_step_stats *s, double tok_per_s) {
    fprintf(p->out,
            "step %*d/%d  loss %.4f  lr %.2e  norm %.3f%s  %.0f tok/s  %.1f ms "
            "(fwd %.1f  bwd %.1f  offload %.1f  host step %.1f%s  refresh %.1f)",
            (int)snprintf(NULL, 0, "%d", p->total), s->step + 1, p->total, (double)s->loss,
            (double)s->lr, (double)s->grad_norm, s->skipped ? " SKIPPED" : "", tok_per_s,
            s->ms_total, s->ms_forward, s->ms_backward, s->ms_offload, s->ms_host_step,
            s->overlapped ? " overlapped" : "", s->ms_refresh);
}

zoe_status zoe_progress_report(zoe_progress *p, const zoe_step_stats *s) {
    double tok_per_s = s->ms_total > 0 ? (double)s->tokens / (s->ms_total / 1e3) : 0;
    if (p->metrics) {
        fprintf(p->metrics,
                "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"loss_scale\":%g,"
                "\"skipped\":%d,\"tokens\":%lld,\"tokens_per_s\":%.1f,\"ms\":%.3f,"
                "\"ms_forward\":%.3f,\"ms_backward\":%.3f,\"ms_offload\":%.3f,"
                "\"ms_host_step\":%.3f,\"ms_refresh\":%.3f,\"ms_optimizer\":%.3f,"
                "\"overlapped\":%d}\n",
                s->step, (double)s->loss, (double)s->lr, (double)s->grad_norm,
                (double)s->loss_scale, s->skipped, (long long)s->tokens, tok_per_s, s->ms_total,
                s->ms_forward, s->ms_backward, s->ms_offload, s->ms_host_step, s->ms_refresh,
                s->ms_optimizer, s->overlapped);
        if (fflush(p->metrics) != 0) return zoe_fail(ZOE_ERR_IO, "writing metrics failed");
    }
    if (!p->out) return ZOE_OK;
    int last = s->step + 1 == p->total;
    if (p->live) {
        /* One line redrawn in place: a bar of 20 cells, then the step's figures. */
        int filled = (int)(20.0 * (s->step + 1) / p->total);
        fprintf(p->out, "\r\033[K[");
        for (int i = 0; i < 20; i++) fputc(i < filled ? '#' : '.', p->out);
        fprintf(p->out, "] ");
        print_line(p, s, tok_per_s);
        if (last) fputc('\n', p->out);
    } else if ((s->step + 1) % p->every == 0 || s->step == 0 || last) {
        print_line(p, s, tok_per_s);
        fputc('\n', p->out);
    }
    fflush(p->out);
    return ZOE_OK;
}

void zoe_progress_destroy(zoe_progress *p) {
    if (!p) return;
    if (p->metrics) fclose(p->metrics);
    free(p);
}
