/* ZOE_DPU_EXACT (docs/offload.md, "The exact schedule"): the host update of a step, started
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
 * certain): that bucket and every later one wait for the step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "offload/optimizer_impl.h"
#include "runtime/clock.h"
#include "runtime/device_impl.h"
#include "runtime/error.h"

/* A gradient sum of squares (scaled to the step) at or beyond this is treated as an overflow
 * risk: g^2 of one element could exceed the fp32 range in the second moment. */
#define SPEC_SUMSQ_LIMIT 1e30

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
        pthread_join(sp->worker, NULL);
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

/* Whether host coordinates [b0, b1) hold any parameter (not only the padding of buckets). */
static int range_has_params(const zoe_optimizer *opt, size_t b0, size_t b1) {
    size_t h_lo = opt->sz.h_lo;
    for (int s = 0; s < opt->lay.num_segments; s++) {
        const zoe_segment *sg = &opt->lay.segments[s];
        if (sg->offset + sg->len <= h_lo) continue;
        size_t a = sg->offset > h_lo ? sg->offset - h_lo : 0, e = sg->offset + sg->len - h_lo;
        if (a < b1 && e > b0) return 1;
    }
    return 0;
}

static void *spec_worker(void *arg) {
    zoe_optimizer *opt = arg;
    zoe_speculation *sp = &opt->spec;
#ifdef ZOE_HAVE_CUDA
    if (zoe_device_backend(opt->dev) == ZOE_BACKEND_CUDA)
        sp->status = zoe_cuda_set_device(zoe_device_ordinal(opt->dev));
#endif
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
        size_t b0, b1;
        host_range(opt, b, &b0, &b1);
        sp->status = zoe_host_range_update(opt, &sp->consts, opt->grad_buf, b0, b1, 0);
        if (sp->status == ZOE_OK) sp->applied[b] = 1;
        sp->ms_update += zoe_clock_ms() - t0;
    }
    if (sp->status != ZOE_OK) snprintf(sp->error, sizeof sp->error, "%s", zoe_last_error());
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
    ZOE_TRY(zoe_update_join(opt)); /* nothing of another schedule is in flight; never is */
    zoe_adam_hparams h = {.lr = lr,
                          .beta1 = opt->cfg.beta1,
                          .beta2 = opt->cfg.beta2,
                          .eps = opt->cfg.eps,
                          .weight_decay = opt->cfg.weight_decay,
                          .decoupled = opt->cfg.adamw,
                          .step = opt->stats.step + 1};
    /* The step's gradient scale when it does not clip: 1 / (micro-batches x loss scale), as
     * zoe_optimizer_step derives it, in the same operations so that the bits agree. */
    double unscale = 1.0 / ((double)(opt->micro_batches + 1) * opt->loss_scale);
    h.grad_scale = (float)(1.0 * unscale);
    zoe_adam_consts_init(&sp->consts.decayed, &h);
    h.weight_decay = 0;
    zoe_adam_consts_init(&sp->consts.exempt, &h);
    sp->unscale = unscale;
    double clip = opt->cfg.clip_norm;
    sp->certain_clip = clip > 0 ? (clip / unscale) * (clip / unscale) : INFINITY;
    sp->stopped = 0;
    sp->queued = sp->taken = sp->closing = 0;
    sp->status = ZOE_OK;
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
    if (!sp->armed || sp->stopped || !range_has_params(opt, b0, b1)) return ZOE_OK;
    size_t lo, mid, hi;
    zoe_bucket_split(&opt->lay, b, &lo, &mid, &hi);
    double all = host_sumsq; /* on the CPU backend the device share is in the host arrays */
    if (zoe_device_is_host_memory(opt) && mid > lo)
        all += zoe_sumsq_host(opt->h_grad[opt->grad_buf] + lo, mid - lo);
    if (!(all * sp->unscale * sp->unscale < SPEC_SUMSQ_LIMIT) ||
        opt->host_sumsq > sp->certain_clip) {
        sp->stopped = 1;
        return ZOE_OK;
    }
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

static int same_consts(const zoe_step_consts *a, const zoe_step_consts *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

zoe_status zoe_spec_finish(zoe_optimizer *opt, const zoe_step_consts *c, int buf, int *redone) {
    zoe_speculation *sp = &opt->spec;
    int guessed = c && same_consts(c, &sp->consts);
    *redone = 0;
    opt->stats.speculated = 0;
    for (int b = 0; b < opt->lay.num_buckets; b++) {
        size_t b0, b1;
        host_range(opt, b, &b0, &b1);
        if (sp->applied[b] && guessed) {
            opt->stats.speculated = 1;
            continue;
        }
        if (sp->applied[b]) {
            ZOE_TRY(zoe_host_range_update(opt, &sp->consts, buf, b0, b1, 1));
            *redone = 1;
        }
        if (c) ZOE_TRY(zoe_host_range_update(opt, c, buf, b0, b1, 0));
    }
    memset(sp->applied, 0, (size_t)opt->lay.num_buckets);
    return ZOE_OK;
}

zoe_status zoe_spec_cancel(zoe_optimizer *opt) {
    zoe_speculation *sp = &opt->spec;
    if (!sp->armed) return ZOE_OK;
    sp->armed = 0;
    ZOE_TRY(zoe_spec_join(opt));
    int redone = 0;
    ZOE_TRY(zoe_spec_finish(opt, NULL, opt->grad_buf, &redone));
    return zoe_stream_synchronize(opt->update_stream);
}
