/* Blockwise int8 moments held by the optimizer (docs/offload.md, "Blockwise int8 moments"), on
 * the CPU backend at 1, 2 and 4 DP ranks: the kernel's step (tested in test_adam_int8) driven
 * over a partition of tensors with and without weight decay, whose buckets, host share and
 * tensors start at block boundaries (a block ends in padding where its tensor does).
 *
 * Four tensors of odd sizes in buckets of 2^15, of different decay.
 * Random weights, and random gradients whose magnitudes spread over four decades within a
 * block (so that a block's smallest v is far below what its scale resolves). Checked, for a
 * bf16 master with bf16 weights and for the fp32 master in the fp32 weights, DPU off and plain:
 *  - step 1 writes the same weights, bit for bit, as the same run with bf16 and with fp32
 *    moments for the fp32 master: the master's update uses the moments before they are stored,
 *    so only the stores differ; a piece with the wrong gradient, output or decay shows here. For
 *    the bf16 master within one bf16 unit (2^-7 relative) of the bf16-moment run's: its
 *    stochastic rounding is keyed by partition coordinates, which differ between the layouts;
 *  - the moments step 1 stored, read back, are within the quantisation's bound of the fp32
 *    moments of a run with fp32 moments: per block the scale s is the power of two with
 *    absmax / s in (1/2, 1]; m (nearest on the square law) within half its code interval,
 *    s (2c + 1) / (2 * 127^2), v (stochastic, sqrt-linear) within one, s (2c + 1) / 255^2, for
 *    c = floor(127 sqrt(|m| / s)) or floor(255 sqrt(v / s)), plus 2^-20 s for fp32's own
 *    roundings; and no v reads 0 whose fp32 value is not (the floor at code 1);
 *  - the moments read back and written again, in pieces of 100 elements that cut blocks, twice
 *    over (as a checkpoint loads), read back the same bits;
 *  - over 20 steps the weights move as the fp32-moment run's do: the distance between the two
 *    runs' weights at most 0.06 of the distance the fp32-moment run moved for the fp32 master
 *    (measured 0.015-0.026 at 1, 2 and 4 ranks: the moments' relative resolution is about 1/127
 *    near a block's largest value and coarser below), 0.25 for the bf16 master (measured
 *    0.116-0.139: its stochastic rounding is keyed by partition coordinates, which int8's
 *    alignment to blocks moves, so the two runs' masters also round apart).
 * The exact schedule with int8 moments speculates, and where the guess holds gives the synchronous
 * step's bits (test_optimizer_exact redoes it); predict predicts from the state as stored; dc over
 * int8 moments: test_optimizer_dpu. */
#include "offload_test.h"

enum { NT = 4, STEPS = 20 };
static const size_t numel[NT] = {40000, 1237, 50001, 77};
static const zoe_param_tensor tensors[NT] = {{.name = "a", .numel = 40000},
                                             {.name = "b", .numel = 1237, .no_weight_decay = 1},
                                             {.name = "c", .numel = 50001},
                                             {.name = "d", .numel = 77, .no_weight_decay = 1}};
enum { TOTAL = 40000 + 1237 + 50001 + 77 };
static zoe_device *dev;
static zoe_stream *stream;
static zoe_grid *grid;

static zoe_optimizer_config config(int dpu, zoe_dtype master, zoe_dtype m, zoe_dtype v) {
    zoe_optimizer_config c;
    zoe_optimizer_config_default(&c);
    c.bucket_numel = (size_t)1 << 15;
    c.weight_decay = 0.1f;
    c.dpu_warmup = dpu ? 1 : 0;
    c.main_params_dtype = master, c.exp_avg_dtype = m, c.exp_avg_sq_dtype = v;
    return c;
}

/* The same random gradients for every run: normal, times 10^u for u uniform in [-4, 0]. */
static void gradient(int step, double *g) {
    test_rng rng;
    test_rng_seed(&rng, 500 + (uint64_t)step + 977 * (uint64_t)test_rank());
    for (size_t i = 0; i < TOTAL; i++)
        g[i] = test_rng_normal(&rng) * pow(10.0, -2.0 * test_rng_uniform(&rng));
}

typedef struct run {
    zoe_optimizer *opt;
    double *w0, *w; /* the weights at the start and now, concatenated */
} run;

static run start(zoe_dtype dt, const zoe_optimizer_config *c) {
    run r = {.w0 = malloc(TOTAL * sizeof(double)), .w = malloc(TOTAL * sizeof(double))};
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, dt, tensors, NT, c, &r.opt))) return r;
    init_random_params(r.opt, dt, numel, NT, 41, r.w0);
    return r;
}

#define LR 1e-2f

/* Steps from .. to - 1 with the gradients of gradient(); each declared first (expect_step, as
 * zoe-train does for the exact schedule), which only the exact schedule reads. */
static void steps(run *r, zoe_dtype dt, int from, int to) {
    double *g = malloc(TOTAL * sizeof(double));
    size_t start[NT];
    for (int t = 0, k = 0; t < NT; t++) start[t] = (size_t)k, k += (int)numel[t];
    for (int s = from; s < to && r->opt; s++) {
        gradient(s, g);
        CHECK_OK(zoe_optimizer_begin_micro_batch(r->opt));
        CHECK_OK(zoe_optimizer_expect_step(r->opt, LR));
        for (int t = NT - 1; t >= 0; t--) {
            void *buf = NULL;
            CHECK_OK(zoe_optimizer_grad_buffer(r->opt, t, &buf));
            for (size_t i = 0; buf && i < numel[t]; i++) store_elem(dt, buf, i, g[start[t] + i]);
            CHECK_OK(zoe_optimizer_grad_ready(r->opt, t));
        }
        CHECK_OK(zoe_optimizer_end_micro_batch(r->opt));
        CHECK_OK(zoe_optimizer_step(r->opt, LR));
    }
    if (r->opt) {
        CHECK_OK(zoe_optimizer_flush(r->opt));
        read_params(r->opt, dt, numel, NT, r->w);
    }
    free(g);
}

static void finish(run *r) {
    zoe_optimizer_destroy(r->opt);
    free(r->w0), free(r->w);
}

/* Partition coordinate of each concatenated element this rank owns, else SIZE_MAX. */
static void partition_coords(zoe_optimizer *opt, size_t *coord) {
    for (size_t i = 0; i < TOTAL; i++) coord[i] = SIZE_MAX;
    for (int t = 0, k = 0; t < NT; k += (int)numel[t], t++) {
        size_t first, count, poff;
        CHECK_OK(zoe_optimizer_tensor_shard(opt, t, &first, &count, &poff));
        for (size_t i = 0; i < count; i++) coord[k + first + i] = poff + i;
    }
}

/* The moment which of the int8 run q against the fp32 moments f (concatenated, whole), on the
 * elements q's rank owns, within the quantisation bound of the header. */
static void check_moment(zoe_optimizer *q, zoe_optimizer_state which, const double *f,
                         const unsigned char *f_owned, const char *what) {
    size_t pn = zoe_optimizer_partition_numel(q), nb = (pn + 255) / 256;
    size_t *coord = malloc(TOTAL * sizeof(size_t));
    double *absmax = calloc(nb ? nb : 1, sizeof(double)), *got = malloc(TOTAL * sizeof(double));
    unsigned char *owned = calloc(TOTAL, 1);
    partition_coords(q, coord);
    read_owned_state(q, which, numel, NT, got, owned);
    for (size_t i = 0; i < TOTAL; i++)
        if (coord[i] != SIZE_MAX && fabs(f[i]) > absmax[coord[i] / 256])
            absmax[coord[i] / 256] = fabs(f[i]);
    int is_v = which == ZOE_STATE_EXP_AVG_SQ, bad = 0, zeros = 0;
    double codes = is_v ? 255.0 : 127.0, worst = 0;
    size_t compared = 0;
    for (size_t i = 0; i < TOTAL; i++) {
        if (coord[i] == SIZE_MAX || !f_owned[i]) continue;
        double a = absmax[coord[i] / 256];
        if (!(a > 0)) continue; /* a block of zero gradients: nothing to bound */
        double s = ldexp(1.0, (int)ceil(log2(a)));
        double c = floor(codes * sqrt(fabs(f[i]) / s));
        double bound = s * (2 * c + 1) / (codes * codes) * (is_v ? 1.0 : 0.5) + ldexp(s, -20);
        double err = fabs(got[i] - f[i]);
        if (err / bound > worst) worst = err / bound;
        if (err > bound) bad++;
        if (is_v && f[i] > 0 && got[i] == 0) zeros++;
        compared++;
    }
    CHECK(bad == 0 && zeros == 0 && compared > TOTAL / 8,
          "%s: %d of %zu elements outside the quantisation bound (worst %.3f of it), %d v read 0",
          what, bad, compared, worst, zeros);
    if (test_rank() == 0)
        printf("%s: %zu compared, worst %.3f of the bound\n", what, compared, worst);
    free(coord), free(absmax), free(got), free(owned);
}

/* Read back, written again in pieces that cut blocks, twice: the same bits. */
static void check_rewrite(zoe_optimizer *q, const char *what) {
    size_t pn = zoe_optimizer_partition_numel(q);
    float *a = malloc((pn ? pn : 1) * sizeof(float)), *b = malloc((pn ? pn : 1) * sizeof(float));
    for (int which = ZOE_STATE_EXP_AVG; which <= ZOE_STATE_EXP_AVG_SQ; which++) {
        CHECK_OK(zoe_optimizer_read_state(q, (zoe_optimizer_state)which, 0, pn, a));
        for (int pass = 0; pass < 2; pass++)
            for (size_t x = 0; x < pn; x += 100)
                CHECK_OK(zoe_optimizer_write_state(q, (zoe_optimizer_state)which, x,
                                                   pn - x < 100 ? pn - x : 100, a + x));
        CHECK_OK(zoe_optimizer_read_state(q, (zoe_optimizer_state)which, 0, pn, b));
        CHECK(memcmp(a, b, pn * sizeof(float)) == 0, "%s: state %d written back differs", what,
              which);
    }
    free(a), free(b);
}

static double distance(const double *x, const double *y) {
    double s = 0;
    for (size_t i = 0; i < TOTAL; i++) s += (x[i] - y[i]) * (x[i] - y[i]);
    return sqrt(s);
}

static void one_case(zoe_dtype dt, zoe_dtype master, int dpu) {
    const zoe_dtype F = ZOE_F32, B = ZOE_BF16, Q = ZOE_I8;
    char what[96];
    snprintf(what, sizeof what, "%s weights, %s master, DPU %d", zoe_dtype_name(dt),
             zoe_dtype_name(master), dpu);
    zoe_optimizer_config cq = config(dpu, master, Q, Q), cb = config(dpu, master, B, B),
                         cf = config(dpu, master, F, F);
    run q = start(dt, &cq), b = start(dt, &cb), f = start(dt, &cf);
    if (!q.opt || !b.opt || !f.opt) return;
    steps(&q, dt, 0, 1), steps(&b, dt, 0, 1), steps(&f, dt, 0, 1);
    if (master == ZOE_F32)
        CHECK(memcmp(q.w, b.w, TOTAL * sizeof(double)) == 0 &&
                  memcmp(q.w, f.w, TOTAL * sizeof(double)) == 0,
              "%s: step 1 wrote other weights than bf16 and fp32 moments", what);
    else /* the partition's coordinates, which key the rounding, are the int8 layout's */
        for (size_t i = 0; i < TOTAL; i++)
            if (fabs(q.w[i] - b.w[i]) > ldexp(fabs(b.w[i]), -7)) {
                CHECK(0, "%s: element %zu after step 1: %g with int8 moments, %g with bf16", what,
                      i, q.w[i], b.w[i]);
                break;
            }
    /* The fp32 moments whole: each element is owned by one DP rank, zero elsewhere. */
    double *fm = calloc(TOTAL, sizeof(double)), *fv = calloc(TOTAL, sizeof(double));
    unsigned char *owned = calloc(TOTAL, 1);
    read_owned_state(f.opt, ZOE_STATE_EXP_AVG, numel, NT, fm, owned);
    read_owned_state(f.opt, ZOE_STATE_EXP_AVG_SQ, numel, NT, fv, owned);
    MPI_Allreduce(MPI_IN_PLACE, fm, TOTAL, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, fv, TOTAL, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    memset(owned, 1, TOTAL);
    char sub[128];
    snprintf(sub, sizeof sub, "%s: m after step 1", what);
    check_moment(q.opt, ZOE_STATE_EXP_AVG, fm, owned, sub);
    snprintf(sub, sizeof sub, "%s: v after step 1", what);
    check_moment(q.opt, ZOE_STATE_EXP_AVG_SQ, fv, owned, sub);
    check_rewrite(q.opt, what);
    steps(&q, dt, 1, STEPS), steps(&f, dt, 1, STEPS);
    double moved = distance(f.w, f.w0), apart = distance(q.w, f.w);
    double within = master == ZOE_F32 ? 0.06 : 0.25;
    CHECK(apart <= within * moved,
          "%s: after %d steps %.4g apart from fp32 moments, which moved %.4g", what, STEPS, apart,
          moved);
    if (test_rank() == 0)
        printf("%s: after %d steps %.4f of the fp32-moment run's displacement apart\n", what, STEPS,
               apart / moved);
    free(fm), free(fv), free(owned);
    finish(&q), finish(&b), finish(&f);
}

/* The exact schedule over int8 moments (and a gradient partition of grads) speculates; with
 * nothing to redo (no clipping, the declared lr) its weights are the synchronous run's bits. */
static void exact_speculates(zoe_dtype grads) {
    zoe_optimizer_config ce = config(1, ZOE_BF16, ZOE_I8, ZOE_I8),
                         cs = config(0, ZOE_BF16, ZOE_I8, ZOE_I8);
    ce.dpu_schedule = ZOE_DPU_EXACT;
    ce.clip_norm = cs.clip_norm = 0;
    ce.main_grads_dtype = cs.main_grads_dtype = grads;
    run e = start(ZOE_BF16, &ce), s = start(ZOE_BF16, &cs);
    if (!e.opt || !s.opt) return;
    steps(&e, ZOE_BF16, 0, 4), steps(&s, ZOE_BF16, 0, 4);
    zoe_optimizer_stats st;
    CHECK_OK(zoe_optimizer_stats_get(e.opt, &st));
    CHECK(memcmp(e.w, s.w, TOTAL * sizeof(double)) == 0 && st.speculated > 0 &&
              st.redone_total == 0,
          "exact schedule with int8 moments, %s gradients: weights %s the synchronous run's, "
          "speculated %d, redone %ld",
          zoe_dtype_name(grads), memcmp(e.w, s.w, TOTAL * sizeof(double)) ? "differ from" : "equal",
          st.speculated, st.redone_total);
    finish(&e), finish(&s);
}

/* The gradient partition in the compute dtype (main_grads_dtype bf16), which takes a bf16 master
 * with int8 moments from 8.03 to 6.03 host bytes per parameter: with one micro-batch a step, the
 * reduced bf16 gradient times 1 / dp_size (a power of two at 1, 2 and 4 ranks) is stored exactly,
 * so the run equals the fp32-partition run bit for bit, weights and norms, DPU off and plain; a
 * second micro-batch in a step is refused, and so is a dtype other than the compute dtype. */
static void bf16_gradients(int dpu, zoe_dtype m, zoe_dtype v) {
    zoe_optimizer_config c32 = config(dpu, ZOE_BF16, m, v), c16 = c32;
    c16.main_grads_dtype = ZOE_BF16;
    run a = start(ZOE_BF16, &c32), b = start(ZOE_BF16, &c16);
    if (!a.opt || !b.opt) return;
    steps(&a, ZOE_BF16, 0, 6), steps(&b, ZOE_BF16, 0, 6);
    zoe_optimizer_stats sa, sb;
    CHECK_OK(zoe_optimizer_stats_get(a.opt, &sa));
    CHECK_OK(zoe_optimizer_stats_get(b.opt, &sb));
    CHECK(memcmp(a.w, b.w, TOTAL * sizeof(double)) == 0 && sa.grad_norm == sb.grad_norm,
          "bf16 gradient partition, %s/%s moments, DPU %d: weights %s, norm %.9g vs %.9g",
          zoe_dtype_name(m), zoe_dtype_name(v), dpu,
          memcmp(a.w, b.w, TOTAL * sizeof(double)) ? "differ" : "equal", sa.grad_norm,
          sb.grad_norm);
    zoe_optimizer_footprint fa, fb;
    CHECK_OK(zoe_optimizer_memory(a.opt, &fa));
    CHECK_OK(zoe_optimizer_memory(b.opt, &fb));
    size_t pn = zoe_optimizer_partition_numel(b.opt);
    CHECK(fa.host_bytes - fb.host_bytes == 2 * pn, "the bf16 partition saves %zu bytes of %zu",
          fa.host_bytes - fb.host_bytes, 2 * pn);
    /* a second micro-batch in one step */
    double *g = malloc(TOTAL * sizeof(double));
    gradient(0, g);
    feed_micro_batch(b.opt, ZOE_BF16, numel, NT, g);
    CHECK_OK(zoe_optimizer_begin_micro_batch(b.opt));
    zoe_status st = ZOE_OK;
    for (int t = NT - 1; t >= 0 && st == ZOE_OK; t--) st = zoe_optimizer_grad_ready(b.opt, t);
    if (st == ZOE_OK) st = zoe_optimizer_end_micro_batch(b.opt);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), "a second micro-batch"),
          "a second micro-batch with a bf16 gradient partition: status %d, '%s'", (int)st,
          zoe_last_error());
    free(g);
    finish(&a), finish(&b);
    if (test_rank() == 0 && st != ZOE_OK)
        printf("bf16 gradient partition, %s/%s moments, DPU %d: the fp32 partition's bits, %zu "
               "host bytes fewer\n",
               zoe_dtype_name(m), zoe_dtype_name(v), dpu, fa.host_bytes - fb.host_bytes);
}

/* STEPS steps whose gradient depends on the weights the forward reads (the parameters: under
 * the predict schedule the prediction), g = a (w - c) with a in [0.5, 1.5) and c in [-1, 1)
 * drawn per element and rank, as a model's loss would. */
#define FORWARD_LR 0.1f
static void forward_steps(run *r) {
    double *g = malloc(TOTAL * sizeof(double)), *w = malloc(TOTAL * sizeof(double));
    for (int s = 0; s < STEPS; s++) {
        read_params(r->opt, ZOE_BF16, numel, NT, w);
        test_rng rng;
        test_rng_seed(&rng, 700 + 13 * (uint64_t)test_rank());
        for (size_t i = 0; i < TOTAL; i++) {
            double a = 0.5 + test_rng_uniform(&rng), c = 2 * test_rng_uniform(&rng) - 1;
            g[i] = a * (w[i] - c);
        }
        feed_micro_batch(r->opt, ZOE_BF16, numel, NT, g);
        CHECK_OK(zoe_optimizer_step(r->opt, FORWARD_LR));
    }
    CHECK_OK(zoe_optimizer_flush(r->opt));
    read_params(r->opt, ZOE_BF16, numel, NT, r->w);
    free(g), free(w);
}

/* The weight prediction over compressed state: the update in flight leaves, instead of its
 * weights, the prediction of the next ones, computed from the master and moments as stored.
 * Against the fp32-state run of the same schedule (the prediction from unrounded state, an
 * independent code path), at a learning rate (FORWARD_LR) where staleness matters: within 0.03
 * of that run's displacement after 20 steps (measured 0.004-0.007 at 1, 2 and 4 ranks), while
 * the same state under the plain schedule ends 0.1 or more from it (measured 0.17-0.21), so
 * that a missing or wrong prediction shows. */
static void predict_case(zoe_dtype m, zoe_dtype v) {
    zoe_optimizer_config cq = config(1, ZOE_BF16, m, v), cp = cq,
                         c32 = config(1, ZOE_F32, ZOE_F32, ZOE_F32);
    cq.dpu_schedule = c32.dpu_schedule = ZOE_DPU_PREDICT;
    run q = start(ZOE_BF16, &cq), p = start(ZOE_BF16, &cp), f = start(ZOE_BF16, &c32);
    if (!q.opt || !p.opt || !f.opt) return;
    forward_steps(&q), forward_steps(&p), forward_steps(&f);
    double moved = distance(f.w, f.w0), apart = distance(q.w, f.w), plain = distance(p.w, f.w);
    CHECK(apart <= 0.03 * moved && plain >= 0.1 * moved,
          "predict, %s/%s moments: %.4f of the fp32-state predict run's displacement apart, the "
          "plain schedule %.4f (want <= 0.03 and >= 0.1)",
          zoe_dtype_name(m), zoe_dtype_name(v), apart / moved, plain / moved);
    if (test_rank() == 0)
        printf("predict, bf16 master, %s/%s moments: %.4f of the fp32-state predict run's "
               "displacement apart; the plain schedule %.4f\n",
               zoe_dtype_name(m), zoe_dtype_name(v), apart / moved, plain / moved);
    finish(&q), finish(&p), finish(&f);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    one_case(ZOE_BF16, ZOE_BF16, 0);
    one_case(ZOE_BF16, ZOE_BF16, 1);
    one_case(ZOE_F32, ZOE_F32, 0);
    exact_speculates(ZOE_F32);
    exact_speculates(ZOE_BF16);
    bf16_gradients(0, ZOE_I8, ZOE_I8);
    bf16_gradients(1, ZOE_I8, ZOE_I8);
    bf16_gradients(0, ZOE_BF16, ZOE_BF16);
    zoe_optimizer_config wrong = config(0, ZOE_F32, ZOE_F32, ZOE_F32);
    wrong.main_grads_dtype = ZOE_BF16;
    zoe_optimizer *opt = NULL;
    zoe_status st = zoe_optimizer_create(grid, dev, stream, ZOE_F32, tensors, NT, &wrong, &opt);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && !opt &&
              strstr(zoe_last_error(), "main_grads_dtype bf16 with compute dtype fp32"),
          "a bf16 gradient partition under fp32 compute: status %d, '%s'", (int)st,
          zoe_last_error());
    zoe_optimizer_destroy(opt);
    predict_case(ZOE_I8, ZOE_I8);
    predict_case(ZOE_BF16, ZOE_BF16);
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_int8");
}
