/* The delayed parameter update follows the documented one-step-stale schedule
 * (include/zoe/optimizer.h), at 1, 2 and 4 DP ranks.
 *
 * Each rank's gradient is a deterministic function of the weights the device holds when the
 * iteration starts: g_r = a_r * w - c_r (elementwise, a_r in [0.5, 1.5]). The float64
 * reference applies AdamW with w_i = Adam(w_{i-1}, mean_r g_r(read_i)), where iteration i
 * reads read_i = w_{i-1} for i <= N + 1 and w_{i-2} afterwards (warm-up N). Checked:
 *  - at the start of every iteration the device weights equal read_i (so the refresh landed
 *    exactly when documented, no earlier and no later);
 *  - after zoe_optimizer_flush the device weights equal the last w;
 *  - the stale trajectory differs from the synchronous one by far more than the tolerance,
 *    so the check can tell them apart.
 * Cases: bucket ring with the whole partition on the host; full-buffer gradients with half of
 * it on the device (partial offload, whose device update also runs on the DPU thread); and
 * warm-up 1 with two micro-batches per step. Tensor y is flagged no_weight_decay (the update
 * in flight carries both constant sets) and the reference does not decay it. fp32 weights: 2e-5
 * absolute (fp32 arithmetic over 12 steps on weights of magnitude <= 1, as in test_optimizer_dp).
 *
 * bf16 weights (the compute-dtype gradient snapshot of docs/offload.md): the reference reads
 * the weights rounded to bf16, feeds each gradient rounded to bf16 (as the model's bf16
 * buffers hold it), and applies each delayed update to the mean gradient rounded to bf16, the
 * snapshot; lr 4e-2 and Adam with an L2 term of 0.5, so that the gradient's scale (the snapshot
 * holds the sum over micro-batches divided by their count) moves the trajectory, and two
 * micro-batches. Tolerance 2^-6 absolute on weights below 2 in magnitude: two bf16 units in the
 * last place (a rounding of the read weights may land on the other side of a tie between the
 * reference's float64 master and the optimizer's fp32 one), the bf16 sums of the DP reduce-scatter
 * within that; a snapshot without the division by the count moves the weights by more (checked).
 * dc with bf16 weights compensates the snapshot widened to fp32: the reference compensates the
 * rounded mean gradient in float64.
 */
#include "offload_test.h"

enum { NT = 3, NTOTAL = 300, STEPS = 12 };
static const size_t numel[NT] = {100, 77, 123};
static zoe_device *dev;
static zoe_stream *stream;

static void grad_of(const double *w, int r, int j, double *g) {
    test_rng rng;
    test_rng_seed(&rng, 500 + 31 * (uint64_t)r + (uint64_t)j);
    for (int i = 0; i < NTOTAL; i++) {
        double a = 0.5 + test_rng_uniform(&rng), c = 2 * test_rng_uniform(&rng) - 1;
        g[i] = a * w[i] - c;
    }
}

/* The step of ref's last constants taken once more with the moments it left (ZOE_DPU_PREDICT's
 * prediction, and w + the last step for ZOE_DPU_DC). */
static void step_again(const ref_adam *r, double lr, const zoe_optimizer_config *c, double *out) {
    double bc1 = 1 - pow(c->beta1, (double)r->step), bc2 = 1 - pow(c->beta2, (double)r->step);
    for (size_t i = 0; i < r->n; i++) {
        double wd = r->no_decay && r->no_decay[i] ? 0.0 : c->weight_decay;
        double w = c->adamw ? r->w[i] * (1 - lr * wd) : r->w[i];
        out[i] = w - lr / bc1 * r->m[i] / (sqrt(r->v[i]) / sqrt(bc2) + c->eps);
    }
}

/* The reference: weights after each step, and what each iteration reads (read[i], rounded to the
 * compute dtype), on the schedule of cfg (never stale with stale = 0). */
static void reference(int d, int k, int warmup, int stale, zoe_dtype dt, double snap_scale,
                      double lr, const zoe_optimizer_config *cfg, const double *w0,
                      double (*ws)[NTOTAL], double (*reads)[NTOTAL]) {
    ref_adam ref;
    ref_adam_init(&ref, w0, NTOTAL);
    unsigned char no_decay[NTOTAL] = {0};
    memset(no_decay + numel[0], 1, numel[1]); /* tensor y is exempt from weight decay */
    ref.no_decay = no_decay;
    memcpy(ws[0], w0, sizeof ws[0]);
    static double predicted[STEPS + 1][NTOTAL];
    zoe_dpu_schedule schedule = stale ? cfg->dpu_schedule : ZOE_DPU_PLAIN;
    double g[NTOTAL], gm[NTOTAL], again[NTOTAL];
    for (int i = 1; i <= STEPS; i++) {
        /* Iteration i >= N + 2 reads what step i - 2 left: its weights, or (predict) its
         * prediction when it ran in flight (i - 2 > N). */
        const double *w = !stale || i < warmup + 2                        ? ws[i - 1]
                          : schedule == ZOE_DPU_PREDICT && i - 2 > warmup ? predicted[i - 2]
                                                                          : ws[i - 2];
        double *read = reads[i];
        for (int e = 0; e < NTOTAL; e++) read[e] = round_to(dt, w[e]);
        memset(gm, 0, sizeof gm);
        for (int j = 0; j < k; j++)
            for (int r = 0; r < d; r++) {
                grad_of(read, r, j, g);
                for (int e = 0; e < NTOTAL; e++) gm[e] += round_to(dt, g[e]) / ((double)d * k);
            }
        /* The delayed updates of 16-bit weights (and of the prediction's) read the snapshot. */
        if ((dt != ZOE_F32 || schedule == ZOE_DPU_PREDICT) && stale && i > warmup)
            for (int e = 0; e < NTOTAL; e++) gm[e] = round_to(dt, gm[e]) * snap_scale;
        /* DC: a gradient taken before step i - 1 landed, compensated by that step. */
        if (schedule == ZOE_DPU_DC && i >= warmup + 2) {
            step_again(&ref, lr, cfg, again);
            double bc2 = 1 - pow(cfg->beta2, (double)ref.step), lambda = cfg->dpu_dc_kappa / lr;
            for (int e = 0; e < NTOTAL; e++) {
                double delta = again[e] - ref.w[e];
                double corr = lambda * gm[e] * gm[e] / (sqrt(ref.v[e] / bc2) + cfg->eps) * delta;
                gm[e] += fmin(fmax(corr, -fabs(gm[e])), fabs(gm[e]));
            }
        }
        ref_adam_step(&ref, gm, 1.0, lr, cfg);
        memcpy(ws[i], ref.w, sizeof ws[i]);
        step_again(&ref, lr, cfg, again);
        for (int e = 0; e < NTOTAL; e++)
            predicted[i][e] = ref.w[e] + cfg->dpu_predict_scale * (again[e] - ref.w[e]);
    }
    ref_adam_free(&ref);
}

static double max_gap(const double *a, const double *b) {
    double gap = 0;
    for (int i = 0; i < NTOTAL; i++) gap = fmax(gap, fabs(a[i] - b[i]));
    return gap;
}

static const char *schedule_name(zoe_dpu_schedule s) {
    return s == ZOE_DPU_PREDICT ? "predict" : s == ZOE_DPU_DC ? "dc" : "plain";
}

static void dpu_case(zoe_grid *grid, zoe_dtype dt, int warmup, int k, zoe_grad_mode mode,
                     float partial, zoe_dpu_schedule schedule) {
    int d = zoe_grid_dp_size(grid), me = zoe_grid_dp_rank(grid);
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.dpu_warmup = warmup;
    cfg.dpu_schedule = schedule;
    cfg.dpu_dc_kappa = 4.0f; /* strong enough to move the trajectory by far more than tol */
    cfg.grad_mode = mode;
    cfg.partial_ratio = partial;
    cfg.bucket_numel = 120;
    cfg.weight_decay = dt == ZOE_F32 ? 0.01f : 0.5f;
    cfg.adamw = dt == ZOE_F32;
    cfg.clip_norm = 0;
    const double tol = dt == ZOE_F32 ? 2e-5 : 0x1p-6, gap_wanted = dt == ZOE_F32 ? 100 * tol : tol;
    const double lr = dt == ZOE_F32 ? 1e-2 : 4e-2; /* bf16: a gap wider than its tolerance */
    zoe_param_tensor t[NT] = {{"x", 100, 0, 0}, {"y", 77, 0, 1}, {"z", 123, 0, 0}};
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, t, NT, &cfg, &opt))) return;
    static double stale[STEPS + 1][NTOTAL], sync[STEPS + 1][NTOTAL], unscaled[STEPS + 1][NTOTAL],
        plain[STEPS + 1][NTOTAL], reads[STEPS + 1][NTOTAL], scratch[STEPS + 1][NTOTAL];
    double w0[NTOTAL], w[NTOTAL], g[NTOTAL];
    test_rng rng;
    test_rng_seed(&rng, 77);
    for (int i = 0; i < NTOTAL; i++) w0[i] = round_to(dt, 2 * test_rng_uniform(&rng) - 1);
    reference(d, k, warmup, 1, dt, 1.0, lr, &cfg, w0, stale, reads);
    reference(d, k, warmup, 0, dt, 1.0, lr, &cfg, w0, sync, scratch);
    write_params(opt, dt, numel, NT, w0);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    char what[160];
    for (int i = 1; i <= STEPS; i++) {
        read_params(opt, dt, numel, NT, w);
        snprintf(what, sizeof what,
                 "%s %s warmup %d k %d %s partial %.1f: weights read by iteration %d",
                 schedule_name(schedule), zoe_dtype_name(dt), warmup, k,
                 mode == ZOE_GRAD_BUCKETS ? "buckets" : "full", partial, i);
        CHECK_CLOSE(w, reads[i], NTOTAL, tol, 0, what);
        for (int j = 0; j < k; j++) {
            grad_of(w, me, j, g);
            feed_micro_batch(opt, dt, numel, NT, g);
        }
        CHECK_OK(zoe_optimizer_step(opt, (float)lr));
    }
    CHECK_OK(zoe_optimizer_flush(opt));
    read_params(opt, dt, numel, NT, w);
    double want[NTOTAL];
    for (int e = 0; e < NTOTAL; e++) want[e] = round_to(dt, stale[STEPS][e]);
    snprintf(what, sizeof what, "%s %s warmup %d: weights after flush (the master's)",
             schedule_name(schedule), zoe_dtype_name(dt), warmup);
    CHECK_CLOSE(w, want, NTOTAL, tol, 0, what);
    /* A variant in bf16 comes closer to the synchronous run than bf16's tolerance (predict:
     * 0.011 against 0.016); it is told apart from the paper's schedule below instead. */
    double gap = max_gap(stale[STEPS], sync[STEPS]);
    if (schedule == ZOE_DPU_PLAIN || dt == ZOE_F32)
        CHECK(gap > gap_wanted, "%s %s: stale and synchronous trajectories differ by only %g",
              schedule_name(schedule), zoe_dtype_name(dt), gap);
    if (dt != ZOE_F32 && k > 1) { /* a snapshot of the sum, not the mean, is told apart */
        reference(d, k, warmup, 1, dt, (double)k, lr, &cfg, w0, unscaled, scratch);
        double off = max_gap(stale[STEPS], unscaled[STEPS]);
        CHECK(off > 2 * tol, "a snapshot without the 1/k moves the weights by only %g", off);
    }
    if (schedule != ZOE_DPU_PLAIN) { /* the variant is told apart from the paper's schedule */
        zoe_optimizer_config paper = cfg;
        paper.dpu_schedule = ZOE_DPU_PLAIN;
        reference(d, k, warmup, 1, dt, 1.0, lr, &paper, w0, plain, scratch);
        double off = max_gap(stale[STEPS], plain[STEPS]);
        CHECK(off > gap_wanted, "%s and plain trajectories differ by only %g",
              schedule_name(schedule), off);
    }
    zoe_optimizer_destroy(opt);
}

/* ---- dc over compressed state: each update against float64 from the state it started from ----
 * The stored state rounds (a bf16 master and v stochastically, int8 moments by blocks), so a
 * trajectory of float64 state drifts from it by more than dc's effect. Instead every step is
 * checked on its own: the state the previous update left is read back (zoe_optimizer_settle,
 * then zoe_optimizer_read_state: widened to fp32 exactly as stored), and float64 recomputes from
 * it the compensation of the gradient (DC-ASGD with the previous step recomputed from the read
 * master and moments, lambda = kappa / the previous lr) and the AdamW step, which the next
 * read-back must match within the rounding of the stored dtype:
 *  - master: bf16 stochastic rounding, below one unit in the last place, 2^-7 |w|; fp32: 2^-20 |w|;
 *  - m: bf16 to nearest, 2^-8 |m|; v: bf16 stochastic, 2^-7 |v|;
 *  - int8 (kernels/adam_state.h): per block of 256 partition coordinates the scale s < 2 absmax,
 *    m within half a code interval on the square law, s (2c + 1) / (2 * 127^2) <= s * 255 / 32258,
 *    v (stochastic) within one, s (2c + 1) / 255^2 <= s * 511 / 65025;
 * plus the fp32 arithmetic: an absolute 1e-5 (1e-6 for the master, 1e-9 for v) for the step's
 * own (relative errors near 1e-6 of terms of magnitude <= 2, cancelling in m), and the
 * correction's, carried to first order into m, v and the master (dc_reference): the last step
 * recomputed in fp32 is a difference of two values of magnitude |w| (2^-22 (|w| + |delta|)),
 * which the gain lambda g^2 / sqrt(v) multiplies by thousands where v is small (without it the
 * fp32-state case misses by up to 80 times the 2^-20 bound). The master's new value is computed
 * from the unrounded new moments, so its bound does not include theirs. The gradients are the same
 * on every rank and have 6 significant bits, so the bf16 sums of the DP reduce-scatter (at most 4
 * terms) and the snapshot hold them exactly. The steps alternate lr between 2e-2 and 3e-2 (lambda
 * must take the previous one); kappa = 4. A check that could not tell: at every compensated step
 * more than a fifth of the elements must have an m whose uncompensated value lies outside the bound
 * (measured at step 8: 0.86 of them with int8 moments, 0.99-1.00 with bf16 and fp32; the worst
 * element used 0.92-0.98 of the bf16 master's bound, 0.64 of int8's). Tensors of 40000, 1237, 30001
 * and 77 elements (two of them exempt from decay) in buckets of 2^15: each tensor starts at an
 * int8 block (padding between them, which the check skips), and a rank's partition spans several
 * tiles of the host step. */
enum { CNT = 4, CTOTAL = 40000 + 1237 + 30001 + 77, CSTEPS = 8 };
static const size_t cnumel[CNT] = {40000, 1237, 30001, 77};

typedef struct dc_state {
    float *w, *m, *v;
} dc_state;

static void read_dc_state(zoe_optimizer *opt, size_t pn, dc_state *st) {
    int due = 0;
    CHECK_OK(zoe_optimizer_settle(opt, &due)); /* the update lands; its refresh stays due */
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 0, pn, st->w));
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG, 0, pn, st->m));
    CHECK_OK(zoe_optimizer_read_state(opt, ZOE_STATE_EXP_AVG_SQ, 0, pn, st->v));
}

/* One element's update in float64 (master, m, v), and how far the optimizer's fp32 arithmetic
 * may land from it, to first order (err). */
typedef struct dc_ref {
    double x[3], err[3];
} dc_ref;

/* The update of step t (lr) of element j from state s on gradient g, compensated (dc) for the
 * step before (lr_prev, t - 1). */
static dc_ref dc_reference(const zoe_optimizer_config *c, const dc_state *s, size_t j, double g,
                           double wd, int dc, double lr, double lr_prev, long t) {
    double w0 = s->w[j], m0 = s->m[j], v0 = s->v[j], eg = 0;
    if (dc) {
        double bc1 = 1 - pow(c->beta1, (double)(t - 1)), bc2 = 1 - pow(c->beta2, (double)(t - 1));
        double denom = sqrt(v0) / sqrt(bc2) + c->eps;
        double delta = w0 * (1 - lr_prev * wd) - lr_prev / bc1 * m0 / denom - w0;
        double gain = c->dpu_dc_kappa / lr_prev * g * g / denom, corr = gain * delta;
        /* delta is a difference of fp32 values of magnitude |w| (a few roundings of 2^-24 |w|),
         * which the gain multiplies by thousands where v is small; then the gain's own
         * roundings. A clamped correction has none, unless fp32 may land on the other side. */
        eg = gain * ldexp(fabs(w0) + fabs(delta), -22) + ldexp(fabs(corr), -21);
        if (fabs(corr) > fabs(g) + eg) eg = 0;
        g += fmin(fmax(corr, -fabs(g)), fabs(g));
    }
    double bc1 = 1 - pow(c->beta1, (double)t), bc2 = 1 - pow(c->beta2, (double)t);
    dc_ref r;
    double m = c->beta1 * m0 + (1 - c->beta1) * g, v = c->beta2 * v0 + (1 - c->beta2) * g * g;
    double denom = sqrt(v) / sqrt(bc2) + c->eps;
    r.x[0] = w0 * (1 - lr * wd) - lr / bc1 * m / denom, r.x[1] = m, r.x[2] = v;
    r.err[1] = (1 - c->beta1) * eg;
    r.err[2] = (1 - c->beta2) * (2 * fabs(g) + eg) * eg;
    r.err[0] = v > 0 ? lr / bc1 *
                           (r.err[1] / denom +
                            fabs(m) * r.err[2] / (2 * sqrt(v) * sqrt(bc2) * denom * denom))
                     : 0;
    return r;
}

/* The bound of the header on element j of state a (0 master, 1 m, 2 v) of dtype dt: the stored
 * rounding of reference r, its arithmetic error and slack; absmax: the reference's per block of
 * 256 (int8). */
static double dc_bound(zoe_dtype dt, int a, const dc_ref *r, const double *absmax, size_t j) {
    double slack = a == 0 ? 1e-6 : a == 2 ? 1e-9 : 1e-5, ref = fabs(r->x[a]);
    slack += r->err[a];
    if (dt == ZOE_F32) return ldexp(ref, -20) + slack;
    if (dt == ZOE_BF16) return ldexp(ref, a == 1 ? -8 : -7) + slack;
    double s = 2 * absmax[j / 256] * (1 + 1e-6);
    return (a == 2 ? s * 511 / 65025 : s * 255 / 32258) + slack;
}

static void dc_compressed_case(zoe_grid *grid, zoe_dtype master, zoe_dtype md, zoe_dtype vd,
                               zoe_dtype grads) {
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    cfg.dpu_warmup = 1, cfg.dpu_schedule = ZOE_DPU_DC, cfg.dpu_dc_kappa = 4.0f;
    cfg.bucket_numel = (size_t)1 << 15;
    cfg.weight_decay = 0.1f, cfg.clip_norm = 0;
    cfg.main_params_dtype = master, cfg.exp_avg_dtype = md, cfg.exp_avg_sq_dtype = vd;
    cfg.main_grads_dtype = grads;
    zoe_param_tensor t[CNT] = {
        {"a", 40000, 0, 0}, {"b", 1237, 0, 1}, {"c", 30001, 0, 0}, {"d", 77, 0, 1}};
    char what[160];
    snprintf(what, sizeof what, "dc, bf16 weights, %s master, %s/%s moments, %s gradients",
             zoe_dtype_name(master), zoe_dtype_name(md), zoe_dtype_name(vd), zoe_dtype_name(grads));
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_BF16, t, CNT, &cfg, &opt))) return;
    size_t pn = zoe_optimizer_partition_numel(opt);
    /* per partition coordinate: its element in the concatenation (or none: padding), its decay */
    size_t *elem = malloc(pn * sizeof *elem);
    double *wd = calloc(pn, sizeof *wd), *g = malloc(CTOTAL * sizeof *g);
    double *absmax[2] = {calloc(pn / 256 + 1, sizeof(double)),
                         calloc(pn / 256 + 1, sizeof(double))};
    dc_ref *ref = malloc(pn * sizeof *ref), *plain = malloc(pn * sizeof *plain);
    dc_state s = {malloc(pn * sizeof(float)), malloc(pn * sizeof(float)),
                  malloc(pn * sizeof(float))};
    for (size_t j = 0; j < pn; j++) elem[j] = SIZE_MAX;
    for (int k = 0, at = 0; k < CNT; at += (int)cnumel[k], k++) {
        size_t first, count, poff;
        CHECK_OK(zoe_optimizer_tensor_shard(opt, k, &first, &count, &poff));
        for (size_t i = 0; i < count; i++) {
            elem[poff + i] = (size_t)at + first + i;
            wd[poff + i] = t[k].no_weight_decay ? 0.0 : cfg.weight_decay;
        }
    }
    double w0[CTOTAL];
    init_random_params(opt, ZOE_BF16, cnumel, CNT, 91, w0);
    double lr_prev = 0;
    for (int i = 1; i <= CSTEPS; i++) {
        double lr = i % 2 ? 2e-2 : 3e-2;
        int dc = i >= cfg.dpu_warmup + 2; /* late: taken before the previous update landed */
        read_dc_state(opt, pn, &s);
        test_rng rng;
        test_rng_seed(&rng, 900 + (uint64_t)i); /* the same on every rank */
        for (size_t e = 0; e < CTOTAL; e++) {
            double mant = (double)(32 + test_rng_int(&rng, 0, 31)) / 32; /* 6 significant bits */
            g[e] = (test_rng_uniform(&rng) < 0.5 ? -1 : 1) *
                   ldexp(mant, -(int)test_rng_int(&rng, 0, 2));
        }
        for (size_t j = 0; j < pn; j++) {
            if (elem[j] == SIZE_MAX) continue;
            ref[j] = dc_reference(&cfg, &s, j, g[elem[j]], wd[j], dc, lr, lr_prev, i);
            plain[j] = dc_reference(&cfg, &s, j, g[elem[j]], wd[j], 0, lr, lr_prev, i);
        }
        feed_micro_batch(opt, ZOE_BF16, cnumel, CNT, g);
        CHECK_OK(zoe_optimizer_step(opt, (float)lr));
        read_dc_state(opt, pn, &s);
        memset(absmax[0], 0, (pn / 256 + 1) * sizeof(double));
        memset(absmax[1], 0, (pn / 256 + 1) * sizeof(double));
        for (size_t j = 0; j < pn; j++) {
            if (elem[j] == SIZE_MAX) continue;
            absmax[0][j / 256] = fmax(absmax[0][j / 256], fabs(ref[j].x[1]));
            absmax[1][j / 256] = fmax(absmax[1][j / 256], ref[j].x[2]);
        }
        size_t bad[3] = {0}, told = 0, owned = 0, worst_j[3] = {0};
        double worst[3] = {0};
        const zoe_dtype dts[3] = {master, md, vd};
        for (size_t j = 0; j < pn; j++) {
            if (elem[j] == SIZE_MAX) continue;
            owned++;
            const double got[3] = {s.w[j], s.m[j], s.v[j]};
            for (int a = 0; a < 3; a++) {
                double r =
                    fabs(got[a] - ref[j].x[a]) / dc_bound(dts[a], a, &ref[j], absmax[a == 2], j);
                if (r > 1) bad[a]++;
                if (r > worst[a]) worst[a] = r, worst_j[a] = j;
            }
            if (fabs(plain[j].x[1] - ref[j].x[1]) > dc_bound(md, 1, &ref[j], absmax[0], j)) told++;
        }
        const char *names[3] = {"master", "m", "v"};
        const float *held[3] = {s.w, s.m, s.v};
        for (int a = 0; a < 3; a++)
            CHECK(bad[a] == 0,
                  "%s, step %d (%s): %zu of %zu %s outside the bound, worst %.3g of it at "
                  "coordinate %zu (%.9g, want %.9g)",
                  what, i, dc ? "compensated" : "not late", bad[a], owned, names[a], worst[a],
                  worst_j[a], held[a][worst_j[a]], ref[worst_j[a]].x[a]);
        if (dc)
            CHECK(told * 5 > owned, "%s, step %d: only %zu of %zu m tell dc from no compensation",
                  what, i, told, owned);
        if (dc && i == CSTEPS && test_rank() == 0)
            printf("%s: step %d within the bounds (worst %.2f %.2f %.2f of them); %.2f of m tell "
                   "dc apart\n",
                   what, i, worst[0], worst[1], worst[2], (double)told / (double)owned);
        lr_prev = lr;
    }
    CHECK_OK(zoe_optimizer_flush(opt));
    zoe_optimizer_destroy(opt);
    free(elem), free(wd), free(g), free(absmax[0]), free(absmax[1]);
    free(ref), free(plain), free(s.w), free(s.m), free(s.v);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_grid *grid = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    for (zoe_dpu_schedule s = ZOE_DPU_PLAIN; s <= ZOE_DPU_DC; s++) {
        dpu_case(grid, ZOE_F32, 3, 1, ZOE_GRAD_BUCKETS, 0.0f, s);
        dpu_case(grid, ZOE_F32, 3, 1, ZOE_GRAD_FULL_BUFFER, 0.5f, s);
        dpu_case(grid, ZOE_F32, 1, 2, ZOE_GRAD_BUCKETS, 0.0f, s);
    }
    /* bf16 weights: dc compensates a widened fp32 copy of the bf16 snapshot. */
    for (zoe_dpu_schedule s = ZOE_DPU_PLAIN; s <= ZOE_DPU_DC; s++) {
        dpu_case(grid, ZOE_BF16, 3, 2, ZOE_GRAD_BUCKETS, 0.0f, s);
        dpu_case(grid, ZOE_BF16, 1, 2, ZOE_GRAD_FULL_BUFFER, 0.5f, s);
    }
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    dc_compressed_case(grid, F, F, F, F); /* fp32 state over the bf16 snapshot */
    dc_compressed_case(grid, B, B, B, F);
    dc_compressed_case(grid, B, Q, Q, F);
    dc_compressed_case(grid, F, Q, Q, F);
    dc_compressed_case(grid, B, Q, Q, B); /* the bf16 gradient partition */
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_dpu");
}
