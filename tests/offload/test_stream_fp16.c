/* fp16 weights from a bf16 master, resident against streamed, on the CPU backend at 1, 2 and 4
 * DP ranks. The CPU backend's kernels do not compute in fp16, but its optimizer holds fp16
 * weights as a GPU's does, and the weight stream converts on its "device" with the same rule
 * (zoe_convert_stream), so the whole path of a V100's weights runs here except the CUDA kernels:
 *   - resident: the optimizer's fp16 parameter buffer, written by every step as the bf16 master
 *     converted (kernels/adam_state.h), and set so at initialisation;
 *   - streamed (params_on_host): no fp16 copy at all; the host partition is the bf16 master, and
 *     each unit fetched through offload/param_stream.c is converted to fp16 after its gather.
 * Checked after initialisation and after each of four steps (bf16 m and v, then int8 moments):
 *   - every streamed weight is bit-identical to the resident one;
 *   - every resident weight owned by this rank equals fp16(its master) (float64 reference: the
 *     master's bf16 value rounded by test_dtype's checked zoe_f32_to_f16);
 *   - the streamed optimizer's buffer is bf16 and it allocates no weight copy (params_host_bytes
 *     0), the resident one fp16;
 *   - the steps moved the weights (most elements change), so equality is not of untouched data.
 * The initial weights include fp16 subnormals and values up to 60000. And an initial weight of
 * 65504 (which a bf16 master rounds to 65536, infinite in fp16) is refused on every rank. */
#include <math.h>
#include <stdio.h>
#include "offload/param_stream.h"
#include "offload_test.h"

enum { NT = 4, STEPS = 4 };
static const float LR = 1e-2f;
static const size_t numel[NT] = {3000, 1234, 5001, 77};

typedef struct run {
    zoe_optimizer *opt;
    zoe_param_stream *ps; /* streamed only */
} run;

static zoe_optimizer_config config(zoe_dtype moments, int streamed) {
    zoe_optimizer_config c;
    zoe_optimizer_config_default(&c);
    c.main_params_dtype = ZOE_BF16;
    c.exp_avg_dtype = c.exp_avg_sq_dtype = moments;
    c.bucket_numel = 2048; /* several buckets, a tensor across two */
    c.weight_decay = 0.1f;
    c.dynamic_loss_scale = 0, c.loss_scale = 1.0f;
    c.params_on_host = streamed;
    return c;
}

/* One unit per tensor; forward in order, backward in reverse; prefetch 1. */
static void open_stream(run *r, zoe_grid *grid, zoe_device *dev, zoe_stream *stream) {
    static const zoe_param_unit units[NT] = {{0, 1}, {1, 1}, {2, 1}, {3, 1}};
    static const int fwd[NT] = {0, 1, 2, 3}, bwd[NT] = {3, 2, 1, 0};
    const zoe_param_stream_config pc = {.dtype = ZOE_F16,
                                        .numel = numel,
                                        .num_tensors = NT,
                                        .units = units,
                                        .num_units = NT,
                                        .order = {fwd, bwd},
                                        .held_unit = -1,
                                        .prefetch = 1};
    CHECK_OK(zoe_param_stream_create(r->opt, zoe_grid_dp_comm(grid), dev, stream, &pc, &r->ps));
}

/* The initial weights: uniform [-1, 1), every 97th an fp16 subnormal, every 89th up to 60000. */
static void initial_weights(double *w, size_t total) {
    test_rng rng;
    test_rng_seed(&rng, 35);
    for (size_t i = 0; i < total; i++) {
        w[i] = 2 * test_rng_uniform(&rng) - 1;
        if (i % 97 == 0) w[i] *= 3e-5;  /* below 2^-14 = 6.1e-5 */
        if (i % 89 == 0) w[i] *= 60000; /* within fp16's range */
    }
}

/* The streamed run's initial weights: each unit staged in fp16, stored into the master. */
static zoe_status init_streamed(run *r, const double *w) {
    size_t k = 0;
    for (int t = 0; t < NT; t++) {
        void *buf = NULL;
        zoe_status st = zoe_param_stream_stage(r->ps, t, &buf);
        if (st != ZOE_OK) return st;
        for (size_t i = 0; i < numel[t]; i++) store_elem(ZOE_F16, buf, i, w[k++]);
        if ((st = zoe_param_stream_store(r->ps, t)) != ZOE_OK) return st;
    }
    return zoe_optimizer_init_from_params(r->opt);
}

/* Both runs' weights as the forward reads them (fp16 bits), the resident against fp16(master),
 * the streamed against the resident. Returns the elements that differ from prev (and updates
 * it). */
static size_t compare(run *res, run *str, uint16_t *prev, const char *what) {
    size_t total = 0, moved = 0, k = 0, diff = 0, off_master = 0;
    for (int t = 0; t < NT; t++) total += numel[t];
    double *master = calloc(total, sizeof *master);
    unsigned char *owned = calloc(total, 1);
    read_owned_state(res->opt, ZOE_STATE_MASTER, numel, NT, master, owned);
    const zoe_f16 *rp = zoe_optimizer_params(res->opt);
    for (int t = 0; t < NT; t++) {
        void *w = NULL;
        size_t off = 0;
        CHECK_OK(zoe_optimizer_tensor_offset(res->opt, t, &off));
        if (!CHECK_OK(zoe_param_stream_acquire(str->ps, t, 0, &w))) break;
        const zoe_f16 *sp = w;
        for (size_t i = 0; i < numel[t]; i++, k++) {
            uint16_t a = rp[off + i], b = sp[i];
            if (a != b && diff++ < 3)
                CHECK(0, "%s: tensor %d element %zu: resident fp16 0x%04x, streamed 0x%04x", what,
                      t, i, a, b);
            if (owned[k] && a != zoe_f32_to_f16((float)master[k]) && off_master++ < 3)
                CHECK(0, "%s: tensor %d element %zu: resident fp16 0x%04x, master %a", what, t, i,
                      a, master[k]);
            moved += prev[k] != a;
            prev[k] = a;
        }
        CHECK_OK(zoe_param_stream_release(str->ps, t));
    }
    CHECK(diff == 0 && off_master == 0,
          "%s: %zu streamed weights differ from the resident ones, %zu resident from fp16(master)",
          what, diff, off_master);
    free(master), free(owned);
    return moved;
}

static void check_moments(zoe_grid *grid, zoe_device *dev, zoe_stream *stream, zoe_dtype moments) {
    const int rank = zoe_grid_dp_rank(grid);
    zoe_param_tensor t[NT];
    char names[NT][16];
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "p%d", i);
        t[i] = (zoe_param_tensor){.name = names[i], .numel = numel[i], .no_weight_decay = i == 3};
    }
    run res = {0}, str = {0};
    zoe_optimizer_config rc = config(moments, 0), sc = config(moments, 1);
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F16, t, NT, &rc, &res.opt)) ||
        !CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F16, t, NT, &sc, &str.opt)))
        goto done;
    open_stream(&str, grid, dev, stream);
    if (!str.ps) goto done;
    zoe_optimizer_footprint rf, sf;
    CHECK_OK(zoe_optimizer_memory(res.opt, &rf));
    CHECK_OK(zoe_optimizer_memory(str.opt, &sf));
    CHECK(zoe_optimizer_params_dtype(str.opt) == ZOE_BF16 &&
              zoe_optimizer_params_dtype(res.opt) == ZOE_F16 && sf.params_host_bytes == 0 &&
              zoe_optimizer_params_on_host(str.opt) && !zoe_optimizer_params_on_host(res.opt),
          "%s moments: streamed buffer %s with %zu bytes of weight copy, resident %s",
          zoe_dtype_name(moments), zoe_dtype_name(zoe_optimizer_params_dtype(str.opt)),
          sf.params_host_bytes, zoe_dtype_name(zoe_optimizer_params_dtype(res.opt)));

    size_t total = 0;
    for (int i = 0; i < NT; i++) total += numel[i];
    double *w = malloc(total * sizeof *w), *g = malloc(total * sizeof *g);
    uint16_t *prev = calloc(total, sizeof *prev);
    initial_weights(w, total);
    write_params(res.opt, ZOE_F16, numel, NT, w);
    CHECK_OK(zoe_optimizer_init_from_params(res.opt));
    CHECK_OK(init_streamed(&str, w));
    char what[64];
    snprintf(what, sizeof what, "%s moments, initial", zoe_dtype_name(moments));
    compare(&res, &str, prev, what);
    test_rng rng;
    test_rng_seed(&rng, 1000 + (uint64_t)rank);
    for (int s = 1; s <= STEPS; s++) {
        for (size_t i = 0; i < total; i++) g[i] = (2 * test_rng_uniform(&rng) - 1) * 0.1;
        feed_micro_batch(res.opt, ZOE_F16, numel, NT, g);
        feed_micro_batch(str.opt, ZOE_F16, numel, NT, g);
        CHECK_OK(zoe_optimizer_step(res.opt, LR));
        CHECK_OK(zoe_optimizer_step(str.opt, LR));
        snprintf(what, sizeof what, "%s moments, step %d", zoe_dtype_name(moments), s);
        size_t moved = compare(&res, &str, prev, what);
        /* lr 1e-2 moves |w| < 1 by far more than fp16's half unit; the large ones may not */
        CHECK(moved > total / 2, "%s: %zu of %zu weights moved", what, moved, total);
    }
    free(w), free(g), free(prev);
done:
    zoe_param_stream_destroy(str.ps);
    zoe_optimizer_destroy(str.opt);
    zoe_optimizer_destroy(res.opt);
}

/* 65504 rounds to a bf16 master of 65536: refused on every rank, whichever owns it. */
static void check_refused(zoe_grid *grid, zoe_device *dev, zoe_stream *stream) {
    zoe_param_tensor t[NT];
    for (int i = 0; i < NT; i++) t[i] = (zoe_param_tensor){.name = "p", .numel = numel[i]};
    zoe_optimizer_config c = config(ZOE_BF16, 0);
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F16, t, NT, &c, &opt))) return;
    size_t total = 0;
    for (int i = 0; i < NT; i++) total += numel[i];
    double *w = malloc(total * sizeof *w);
    initial_weights(w, total);
    w[total - 5] = -65504;
    write_params(opt, ZOE_F16, numel, NT, w);
    zoe_status st = zoe_optimizer_init_from_params(opt);
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT && strstr(zoe_last_error(), "beyond fp16's range"),
          "initial weight -65504 with a bf16 master: %s (%s)", zoe_status_string(st),
          zoe_last_error());
    free(w);
    zoe_optimizer_destroy(opt);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    zoe_device *dev = NULL;
    zoe_stream *stream = NULL;
    zoe_grid *grid = NULL;
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    if (grid) {
        check_moments(grid, dev, stream, ZOE_BF16);
        check_moments(grid, dev, stream, ZOE_I8);
        check_refused(grid, dev, stream);
    }
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_stream_fp16");
}
