/* ZOE_DPU_EXACT (docs/offload.md, "Schedules", `exact`): the host update of a step, started
 * bucket by bucket while the backward of the step's last micro-batch goes on.
 *
 * Backward completes buckets from the last layer to the first; the host gradient partition of a
 * bucket is final once the bucket is drained in the last micro-batch. From then on nothing of
 * the step can change that bucket's update except three step-wide facts: the global norm (it
 * clips), the overflow flag (the step is skipped) and the learning rate. The worker updates each
 * drained bucket at once with the constants the step takes when none of them bites (clip factor
 * 1, the learning rate declared by zoe_optimizer_expect_step, the next step number), and the
 * step, once it knows, undoes and redoes the buckets where that guess was wrong. The undo solves
 * the step back from the state it left and the gradient it read (kernels/adam.h), so nothing is
 * saved: the memory is that of no DPU.
 *
 * A bucket is not handed over when its gradient is not finite (its update could not be undone)
 * or when this rank's part of the norm already exceeds the clip threshold (the step clips for
 * certain): that bucket and every later one wait for the step. With TP > 1 the TP-replicated
 * segments are left to the step (see run_set).
 *
 * With gated_forward, what the step leaves to do (those buckets, and the redone ones) is not done
 * in the step: a worker does it bucket by bucket in bucket order, which is the forward's order,
 * while the next forward runs, and the forward's zoe_optimizer_weights_ready waits for each
 * bucket it is about to read and refreshes it (the DP all-gather, on the calling thread, so
 * every rank's collectives stay in the same order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/clock.h"
#include "runtime/error.h"

/* A gradient sum of squares (scaled to the step) at or beyond this is treated as an overflow
 * risk: g^2 of one element could exceed the fp32 range in the second moment. */
#define SPEC_SUMSQ_LIMIT 1e30
/* applied[b]: 0 not updated, 1 updated by the speculation, TO_SPECULATE queued for it but
 * handed to the settling */
#define TO_SPECULATE 2

zoe_status zoe_spec_create(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    int nb = opt->lay.num_buckets;
    sp->queue = calloc((size_t)nb, sizeof *sp->queue);
    sp->applied = calloc((size_t)nb, 1);
    if (!sp->queue || !sp->applied)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "speculation queue of %d buckets", nb);
    if (pthread_mutex_init(&sp->lock, NULL) != 0)
        return zoe_fail(ZOE_ERR_INTERNAL, "speculation lock");
    if (pthread_cond_init(&sp->wake, NULL) != 0) {
        pthread_mutex_destroy(&sp->lock);
        return zoe_fail(ZOE_ERR_INTERNAL, "speculation condition variable");
    }
    sp->lock_ready = 1;
    return ZOE_OK;
}

static void close_queue(zoe_speculation *sp) {
    pthread_mutex_lock(&sp->lock);
    sp->closing = 1;
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
}

void zoe_spec_destroy(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    if (sp->worker_running) {
        close_queue(sp);
        pthread_join(sp->worker, NULL); /* a settling joins the speculation's tail itself */
    }
    if (sp->lock_ready) {
        pthread_cond_destroy(&sp->wake);
        pthread_mutex_destroy(&sp->lock);
    }
    free(sp->queue);
    free(sp->applied);
}

/* Bucket b's range in host coordinates: the part of its partition the host arrays hold. */
static void host_range(const zoe_optimizer *opt, int b, size_t *b0, size_t *b1) {
    size_t lo, mid, hi, h_lo = opt->sz.h_lo;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    lo = lo > h_lo ? lo : h_lo;
    *b0 = (lo < hi ? lo : hi) - h_lo;
    *b1 = hi - h_lo;
}

/* Which of a bucket's segments a pass covers. With TP > 1 the speculation leaves the
 * TP-replicated ones (norms, row-parallel biases) to the step: their update must come out the
 * same on every TP rank, and a redo, unlike the step, is not bit for bit, while each rank
 * decides on its own shards whether to speculate. They are a small share of the parameters. */
typedef enum { RUNS_ALL, RUNS_SHARDED, RUNS_REPLICATED } run_set;

/* Segment sg's part of host coordinates [b0, b1) as [*a, *e); 0 when it has none there. */
static int segment_within(const zoe_optimizer *opt, const zoe_segment *sg, size_t b0, size_t b1,
                          size_t *a, size_t *e) {
    size_t h_lo = opt->sz.h_lo;
    if (sg->offset + sg->len <= h_lo) return 0; /* in the device share */
    size_t lo = sg->offset > h_lo ? sg->offset - h_lo : 0, hi = sg->offset + sg->len - h_lo;
    *a = lo > b0 ? lo : b0, *e = hi < b1 ? hi : b1;
    return *a < *e;
}

/* The host Adam (or its undo) over bucket b's segments of the set, in maximal runs of
 * consecutive such segments (each run a range of host coordinates). */
static zoe_status update_runs(zoe_optimizer *opt, const zoe_step_consts *c, int buf, int b,
                              run_set set, int undo) {
    size_t b0, b1;
    host_range(opt, b, &b0, &b1);
    if (set == RUNS_ALL) return zoe_host_range_update(opt, c, buf, b0, b1, undo);
    size_t ra = 0, re = 0; /* the run being gathered, empty when ra == re */
    for (int s = 0; s < opt->lay.num_segments; s++) {
        size_t a, e;
        const zoe_segment *sg = &opt->lay.segments[s];
        if (!segment_within(opt, sg, b0, b1, &a, &e)) continue;
        if (sg->replicated == (set == RUNS_REPLICATED)) {
            if (ra == re) ra = a;
            re = e;
        } else if (ra < re) {
            ZOE_TRY(zoe_host_range_update(opt, c, buf, ra, re, undo));
            ra = re = 0;
        }
    }
    return ra < re ? zoe_host_range_update(opt, c, buf, ra, re, undo) : ZOE_OK;
}

/* Whether host coordinates [b0, b1) hold any parameter of the set (not only the padding of
 * buckets). */
static int range_has_params(const zoe_optimizer *opt, size_t b0, size_t b1, run_set set) {
    for (int s = 0; s < opt->lay.num_segments; s++) {
        size_t a, e;
        const zoe_segment *sg = &opt->lay.segments[s];
        if (set != RUNS_ALL && sg->replicated != (set == RUNS_REPLICATED)) continue;
        if (segment_within(opt, sg, b0, b1, &a, &e)) return 1;
    }
    return 0;
}

static int same_consts(const zoe_step_consts *a, const zoe_step_consts *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static void *spec_worker(void *arg) {
    zoe_optimizer *opt = arg;
    zoe_speculation *sp = &opt->spec;
    sp->status = zoe_worker_device(opt);
    for (;;) {
        pthread_mutex_lock(&sp->lock);
        while (sp->taken == sp->queued && !sp->closing) pthread_cond_wait(&sp->wake, &sp->lock);
        if (sp->taken == sp->queued) { /* closing, and nothing left */
            pthread_mutex_unlock(&sp->lock);
            break;
        }
        int b = sp->queue[sp->taken++];
        pthread_mutex_unlock(&sp->lock);
        if (sp->status != ZOE_OK) continue; /* drain the queue; the step reports the error */
        double t0 = zoe_clock_ms();
        sp->status = update_runs(opt, &sp->run_consts, opt->grad_buf, b, (run_set)sp->run_set, 0);
        if (sp->status == ZOE_OK) sp->applied[b] = 1;
        sp->ms_update += zoe_clock_ms() - t0;
    }
    if (sp->status != ZOE_OK) snprintf(sp->error, sizeof sp->error, "%s", zoe_last_error());
    return NULL;
}

/* Bucket b as the step decided (c NULL: skipped): undone where the speculation applied other
 * constants (guess), then updated with c where it is not yet. */
static zoe_status settle_bucket(zoe_optimizer *opt, const zoe_step_consts *c,
                                const zoe_step_consts *guess, run_set spec_set, int buf, int b,
                                int *redone, int *held) {
    zoe_speculation *sp = &opt->spec;
    if (sp->applied[b] && c && same_consts(c, guess)) {
        *held = 1;
        sp->applied[b] = 0;
        /* what the speculation left out, if anything */
        return spec_set == RUNS_SHARDED ? update_runs(opt, c, buf, b, RUNS_REPLICATED, 0) : ZOE_OK;
    }
    if (sp->applied[b]) {
        ZOE_TRY(update_runs(opt, guess, buf, b, spec_set, 1));
        *redone = 1;
    }
    sp->applied[b] = 0;
    return c ? update_runs(opt, c, buf, b, RUNS_ALL, 0) : ZOE_OK;
}

/* The settling worker: every bucket in bucket order, each published when its new weights are
 * where the refresh reads them (on CUDA: the update stream synchronised). */
static void *settle_worker(void *arg) {
    zoe_optimizer *opt = arg;
    zoe_speculation *sp = &opt->spec;
    zoe_status st = zoe_worker_device(opt);
    double t0 = zoe_clock_ms();
    if (sp->tail_running) { /* the speculation's last buckets, still running at the step */
        pthread_join(sp->spec_tail, NULL);
        sp->tail_running = 0;
        if (st == ZOE_OK && sp->status != ZOE_OK) st = zoe_fail(sp->status, "%s", sp->error);
    }
    int redone = 0, held = 0;
    for (int b = 0; b < opt->lay.num_buckets; b++) {
        if (st == ZOE_OK && sp->applied[b] == TO_SPECULATE) {
            st = update_runs(opt, &sp->settle_guess, sp->settle_buf, b, (run_set)sp->settle_set, 0);
            sp->applied[b] = 1;
        }
        if (st == ZOE_OK)
            st = settle_bucket(opt, sp->settle_skip ? NULL : &sp->settle_consts, &sp->settle_guess,
                               (run_set)sp->settle_set, sp->settle_buf, b, &redone, &held);
        if (st == ZOE_OK) st = zoe_stream_synchronize(opt->update_stream);
        pthread_mutex_lock(&sp->lock);
        if (st != ZOE_OK && sp->settle_status == ZOE_OK) {
            sp->settle_status = st;
            snprintf(sp->error, sizeof sp->error, "%s", zoe_last_error());
        }
        sp->done_upto = b;
        pthread_cond_broadcast(&sp->wake);
        pthread_mutex_unlock(&sp->lock);
    }
    sp->ms_settle = zoe_clock_ms() - t0 + sp->ms_update; /* the speculation's too */
    return NULL;
}

zoe_status zoe_optimizer_expect_step(zoe_optimizer *opt, float lr) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "expect_step: optimizer is NULL");
    if (!(lr >= 0.0f) || !isfinite(lr))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "expect_step: learning rate %g is not a finite value >= 0", (double)lr);
    if (!opt->in_micro_batch)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "expect_step outside a micro-batch: call it after "
                        "zoe_optimizer_begin_micro_batch of the step's last micro-batch");
    for (int t = 0; t < opt->lay.num_tensors; t++)
        if (opt->tensor_ready[t])
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "expect_step after grad_ready of tensor '%s' in this micro-batch: "
                            "call it before the first",
                            opt->lay.names[t]);
    zoe_speculation *sp = &opt->spec;
    if (!sp->queue || opt->iteration + 1 <= opt->cfg.dpu_warmup) return ZOE_OK;
    /* The step's gradient scale when it does not clip: 1 / (micro-batches x loss scale), as
     * zoe_optimizer_step derives it, in the same operations so that the bits agree. */
    double unscale = 1.0 / ((double)(opt->micro_batches + 1) * opt->loss_scale);
    zoe_step_consts_of(opt, lr, (float)(1.0 * unscale), opt->stats.step + 1, &sp->consts);
    sp->unscale = unscale;
    double clip = opt->cfg.clip_norm;
    sp->certain_clip = clip > 0 ? (clip / unscale) * (clip / unscale) : INFINITY;
    sp->stopped = 0;
    sp->spec_set = zoe_grid_tp_size(opt->grid) > 1 ? RUNS_SHARDED : RUNS_ALL;
    sp->expected = 1; /* the worker starts at the first bucket, once a settling is finished */
    return ZOE_OK;
}

/* Starts the speculation's worker; a settling of the last step is finished by then (the
 * backward's first gradient buffer finished it). */
static zoe_status arm(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    ZOE_TRY(zoe_spec_complete(opt));
    sp->queued = sp->taken = sp->closing = 0;
    sp->status = ZOE_OK;
    sp->run_consts = sp->consts, sp->run_set = sp->spec_set;
    sp->ms_update = 0;
    memset(sp->applied, 0, (size_t)opt->lay.num_buckets);
    if (pthread_create(&sp->worker, NULL, spec_worker, opt) != 0)
        return zoe_fail(ZOE_ERR_INTERNAL, "could not start the speculative update thread");
    sp->worker_running = 1;
    sp->armed = 1;
    return ZOE_OK;
}

zoe_status zoe_spec_offer(zoe_optimizer *opt, int b, double host_sumsq) {
    zoe_speculation *sp = &opt->spec;
    size_t b0, b1;
    host_range(opt, b, &b0, &b1);
    if (!sp->expected || sp->stopped || !range_has_params(opt, b0, b1, (run_set)sp->spec_set))
        return ZOE_OK;
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    double all = host_sumsq; /* on the CPU backend the device share is in the host arrays */
    if (zoe_device_is_host_memory(opt) && mid > lo)
        all += zoe_sumsq_host(zoe_host_grad_f32(opt, opt->grad_buf, lo), mid - lo);
    if (!(all * sp->unscale * sp->unscale < SPEC_SUMSQ_LIMIT) ||
        opt->host_sumsq > sp->certain_clip) {
        sp->stopped = 1;
        return ZOE_OK;
    }
    if (!sp->armed) ZOE_TRY(arm(opt));
    pthread_mutex_lock(&sp->lock);
    sp->queue[sp->queued++] = b;
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
    return ZOE_OK;
}

zoe_status zoe_spec_join(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    if (!sp->worker_running) return ZOE_OK;
    close_queue(sp);
    pthread_join(sp->worker, NULL);
    sp->worker_running = 0;
    if (sp->status != ZOE_OK)
        return zoe_fail(sp->status, "speculative host update failed: %s", sp->error);
    return ZOE_OK;
}

zoe_status zoe_spec_finish(zoe_optimizer *opt, const zoe_step_consts *c, int buf, int defer,
                           int *redone) {
    zoe_speculation *sp = &opt->spec;
    *redone = 0;
    opt->stats.speculated = 0;
    int armed = sp->armed, queued = sp->queued;
    sp->expected = sp->armed = 0;
    if (defer) {
        sp->settle_skip = c == NULL;
        if (c) sp->settle_consts = *c;
        sp->settle_guess = sp->run_consts, sp->settle_set = sp->run_set;
        sp->settle_buf = buf;
        sp->done_upto = -1, sp->next_refresh = 0;
        sp->settle_status = ZOE_OK;
        /* The buckets queued but not yet taken by the speculation's worker pass to the settling
         * (applied = TO_SPECULATE), which runs them in bucket order, the forward's, so the next
         * forward waits for each only when it needs it; the worker finishes the bucket it has
         * (the settling joins it first). The settling does to such a bucket exactly what the
         * worker would have (its speculative update, then the settling's), so the result does
         * not depend on how far the worker got. */
        if (sp->worker_running) {
            pthread_mutex_lock(&sp->lock);
            for (int i = sp->taken; i < sp->queued; i++) sp->applied[sp->queue[i]] = TO_SPECULATE;
            sp->queued = sp->taken;
            sp->closing = 1;
            pthread_cond_signal(&sp->wake);
            pthread_mutex_unlock(&sp->lock);
            sp->spec_tail = sp->worker;
            sp->worker_running = 0;
            sp->tail_running = 1;
        }
        int any = armed && queued > 0, guessed = c && same_consts(c, &sp->run_consts);
        opt->stats.speculated = any && guessed;
        *redone = any && !guessed;
        if (pthread_create(&sp->worker, NULL, settle_worker, opt) != 0) {
            if (sp->tail_running) pthread_join(sp->spec_tail, NULL);
            sp->tail_running = 0;
            return zoe_fail(ZOE_ERR_INTERNAL, "could not start the settling update thread");
        }
        sp->worker_running = 1;
        sp->settling = 1;
        return ZOE_OK;
    }
    int held = 0;
    for (int b = 0; b < opt->lay.num_buckets; b++)
        ZOE_TRY(
            settle_bucket(opt, c, &sp->run_consts, (run_set)sp->run_set, buf, b, redone, &held));
    opt->stats.speculated = held;
    return ZOE_OK;
}

/* Waits until the settling worker has published bucket b, then refreshes every bucket up to b
 * not yet refreshed, in bucket order. The last one ends the settling. */
static zoe_status settle_through(zoe_optimizer *opt, int b) {
    zoe_speculation *sp = &opt->spec;
    double t0 = zoe_clock_ms();
    pthread_mutex_lock(&sp->lock);
    while (sp->done_upto < b && sp->settle_status == ZOE_OK)
        pthread_cond_wait(&sp->wake, &sp->lock);
    zoe_status st = sp->settle_status;
    pthread_mutex_unlock(&sp->lock);
    sp->ms_gated += zoe_clock_ms() - t0;
    if (st != ZOE_OK) {
        pthread_join(sp->worker, NULL);
        sp->worker_running = sp->settling = 0;
        return zoe_fail(st, "settling host update failed: %s", sp->error);
    }
    for (; sp->next_refresh <= b; sp->next_refresh++)
        ZOE_TRY(zoe_refresh_bucket(opt, sp->next_refresh));
    if (sp->next_refresh == opt->lay.num_buckets) {
        pthread_join(sp->worker, NULL);
        sp->worker_running = sp->settling = 0;
        ZOE_TRY(zoe_event_record(opt->refreshed, opt->stream));
    }
    return ZOE_OK;
}

zoe_status zoe_spec_complete(zoe_optimizer *opt) {
    return opt->spec.settling ? settle_through(opt, opt->lay.num_buckets - 1) : ZOE_OK;
}

zoe_status zoe_optimizer_weights_ready(zoe_optimizer *opt, int first, int n) {
    if (!opt) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weights_ready: optimizer is NULL");
    if (first < 0 || n < 0 || first > opt->lay.num_tensors - n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "weights_ready: tensors [%d, %d) outside [0, %d)",
                        first, first + n, opt->lay.num_tensors);
    if (!opt->spec.settling || n == 0) return ZOE_OK;
    int last = 0;
    for (int t = first; t < first + n; t++)
        last = opt->lay.bucket_of[t] > last ? opt->lay.bucket_of[t] : last;
    return settle_through(opt, last);
}

zoe_status zoe_spec_cancel(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    ZOE_TRY(zoe_spec_complete(opt));
    if (!sp->expected) return ZOE_OK;
    ZOE_TRY(zoe_spec_join(opt));
    int redone = 0; /* put back here and now, never deferred */
    ZOE_TRY(zoe_spec_finish(opt, NULL, opt->grad_buf, 0, &redone));
    return zoe_stream_synchronize(opt->update_stream);
}
