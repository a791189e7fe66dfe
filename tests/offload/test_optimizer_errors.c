/* Bad input: every refusal returns ZOE_ERR_INVALID_ARGUMENT with a message that names the bad
 * value (ZOE_ERR_UNSUPPORTED for a combination not built), leaves *out NULL, and leaves a
 * working optimizer as it was. */
#include "offload_test.h"

static zoe_device *dev;
static zoe_stream *stream;
static zoe_grid *grid;

static const zoe_param_tensor tensors[] = {{"wte", 64, 0, 0}, {"ln_f", 8, 1, 1}};

static void expect(zoe_status st, const char *needle, const char *what) {
    CHECK(st == ZOE_ERR_INVALID_ARGUMENT, "%s: status %d, want invalid argument", what, (int)st);
    CHECK(strstr(zoe_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
          zoe_last_error(), needle);
}

typedef void (*mutate_fn)(zoe_optimizer_config *);
static void ratio(zoe_optimizer_config *c) {
    c->partial_ratio = 1.5f;
}
static void beta1(zoe_optimizer_config *c) {
    c->beta1 = 1.0f;
}
static void beta2(zoe_optimizer_config *c) {
    c->beta2 = -0.5f;
}
static void eps(zoe_optimizer_config *c) {
    c->eps = 0;
}
static void wd(zoe_optimizer_config *c) {
    c->weight_decay = -0.25f;
}
static void bucket(zoe_optimizer_config *c) {
    c->bucket_numel = 0;
}
static void ring(zoe_optimizer_config *c) {
    c->bucket_ring = 0;
}
static void warmup(zoe_optimizer_config *c) {
    c->dpu_warmup = -3;
}
static void scale(zoe_optimizer_config *c) {
    c->loss_scale = -2;
}
static void window(zoe_optimizer_config *c) {
    c->dynamic_loss_scale = 1, c->loss_scale_window = 0;
}
static void mode(zoe_optimizer_config *c) {
    c->grad_mode = (zoe_grad_mode)9;
}
static void schedule(zoe_optimizer_config *c) {
    c->dpu_schedule = (zoe_dpu_schedule)7;
}
static void kappa(zoe_optimizer_config *c) {
    c->dpu_dc_kappa = -1;
}
static void micro_batches(zoe_optimizer_config *c) {
    c->micro_batches = -2;
}
static void exact_beta1(zoe_optimizer_config *c) {
    c->dpu_warmup = 2, c->dpu_schedule = ZOE_DPU_EXACT, c->beta1 = 0;
}

static void config_errors(void) {
    const struct {
        mutate_fn f;
        const char *needle;
    } cases[] = {{ratio, "partial offload ratio 1.5 outside [0, 1]"},
                 {beta1, "beta1 1"},
                 {beta2, "beta2 -0.5"},
                 {eps, "eps 0"},
                 {wd, "weight_decay -0.25"},
                 {bucket, "bucket_numel 0"},
                 {ring, "bucket_ring 0"},
                 {warmup, "dpu_warmup -3"},
                 {scale, "loss_scale -2"},
                 {window, "loss_scale_window 0"},
                 {mode, "gradient mode 9"},
                 {schedule, "unknown DPU schedule 7"},
                 {kappa, "dpu_dc_kappa -1"},
                 {micro_batches, "micro_batches -2 is negative"},
                 {exact_beta1, "beta1 0 and beta2 0.999 must be > 0"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zoe_optimizer_config cfg;
        zoe_optimizer_config_default(&cfg);
        cases[i].f(&cfg);
        zoe_optimizer *opt = (zoe_optimizer *)&cfg; /* poison: must come back NULL */
        expect(zoe_optimizer_create(grid, dev, stream, ZOE_BF16, tensors, 2, &cfg, &opt),
               cases[i].needle, cases[i].needle);
        CHECK(opt == NULL, "%s: *out not NULL after a failure", cases[i].needle);
    }
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    zoe_optimizer *opt = NULL;
    /* The delay compensation runs wherever the host update reads the gradient (a bf16
     * snapshot, compressed state, a bf16 gradient partition: test_optimizer_dpu); only a GPU's
     * device share refuses it (test_optimizer_cuda). */
    cfg.dpu_warmup = 2, cfg.dpu_schedule = ZOE_DPU_DC;
    cfg.main_params_dtype = ZOE_BF16, cfg.exp_avg_dtype = cfg.exp_avg_sq_dtype = ZOE_I8;
    cfg.main_grads_dtype = ZOE_BF16;
    CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_BF16, tensors, 2, &cfg, &opt));
    zoe_optimizer_destroy(opt);
    opt = NULL;
    zoe_optimizer_config_default(&cfg);
    expect(zoe_optimizer_create(grid, dev, stream, ZOE_I32, tensors, 2, &cfg, &opt), "int32",
           "int32 compute dtype");
    zoe_param_tensor empty[] = {{"wte", 64, 0, 0}, {"ln_f", 0, 1, 1}};
    expect(zoe_optimizer_create(grid, dev, stream, ZOE_F32, empty, 2, &cfg, &opt),
           "tensor 1 ('ln_f') has numel 0", "empty tensor");
    zoe_param_tensor unnamed[] = {{NULL, 4, 0, 0}};
    expect(zoe_optimizer_create(grid, dev, stream, ZOE_F32, unnamed, 1, &cfg, &opt),
           "tensor 0 has no name", "unnamed tensor");
    expect(zoe_optimizer_create(grid, dev, stream, ZOE_F32, tensors, 0, &cfg, &opt),
           "num_tensors 0", "no tensors");
}

static void call_errors(void) {
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    zoe_optimizer *opt = NULL;
    if (!CHECK_OK(zoe_optimizer_create(grid, dev, stream, ZOE_F32, tensors, 2, &cfg, &opt))) return;
    size_t numel[] = {64, 8};
    double w[72], after[72];
    for (int i = 0; i < 72; i++) w[i] = 0.01 * i - 0.3;
    write_params(opt, ZOE_F32, numel, 2, w);
    CHECK_OK(zoe_optimizer_init_from_params(opt));
    void *buf = NULL;
    size_t off;
    expect(zoe_optimizer_step(opt, 1e-3f), "no micro-batch ended", "step without gradients");
    expect(zoe_optimizer_grad_buffer(opt, 0, &buf), "outside a micro-batch", "buffer outside");
    expect(zoe_optimizer_tensor_offset(opt, 2, &off), "tensor index 2 outside [0, 2)", "offset");
    CHECK_OK(zoe_optimizer_begin_micro_batch(opt));
    expect(zoe_optimizer_begin_micro_batch(opt), "was not ended", "begin twice");
    expect(zoe_optimizer_grad_buffer(opt, -1, &buf), "tensor index -1", "negative index");
    CHECK_OK(zoe_optimizer_grad_ready(opt, 1));
    expect(zoe_optimizer_grad_ready(opt, 1), "tensor 1 ('ln_f') was already marked ready",
           "ready twice");
    expect(zoe_optimizer_step(opt, 1e-3f), "inside a micro-batch", "step inside");
    CHECK_OK(zoe_optimizer_end_micro_batch(opt));
    expect(zoe_optimizer_step(opt, NAN), "learning rate nan", "NaN lr");
    expect(zoe_optimizer_step(opt, -1e-3f), "learning rate -0.001", "negative lr");
    float state[4];
    expect(zoe_optimizer_read_state(opt, ZOE_STATE_MASTER, 70, 100, state), "outside the partition",
           "state range");
    expect(zoe_optimizer_read_state(opt, (zoe_optimizer_state)7, 0, 1, state), "unknown state 7",
           "state kind");
    expect(zoe_optimizer_set_step(opt, -4), "step count -4", "negative step");
    /* Nothing above changed the weights. */
    read_params(opt, ZOE_F32, numel, 2, after);
    for (int i = 0; i < 72; i++)
        CHECK(after[i] == (float)w[i], "weight %d changed by a refused call: %g -> %g", i, w[i],
              after[i]);
    zoe_optimizer_destroy(opt);
}

/* Out of memory says so, with the bytes asked for: a device (host memory on CPU) allocation and
 * an optimizer over a tensor no machine holds. */
static void expect_oom(zoe_status st, const char *bytes, const char *what) {
    CHECK(st == ZOE_ERR_OUT_OF_MEMORY, "%s: status %d, want out of memory", what, (int)st);
    CHECK(strncmp(zoe_last_error(), "out of memory", 13) == 0, "%s: message '%s'", what,
          zoe_last_error());
    CHECK(strstr(zoe_last_error(), bytes) && strstr(zoe_last_error(), " bytes"),
          "%s: message '%s' lacks the %s bytes", what, zoe_last_error(), bytes);
}

static void oom_errors(void) {
    void *p = NULL;
    expect_oom(zoe_device_alloc(dev, (size_t)1 << 62, &p), "4611686018427387904", "device alloc");
    CHECK(p == NULL, "device alloc: pointer set after a failure");
    expect_oom(zoe_host_alloc(dev, (size_t)1 << 62, &p), "4611686018427387904", "host alloc");
    zoe_param_tensor huge[] = {{"wte", (size_t)1 << 60, 0, 0}};
    zoe_optimizer_config cfg;
    zoe_optimizer_config_default(&cfg);
    zoe_optimizer *opt = NULL;
    /* the flat fp32 parameter buffer of 2^60 elements comes first: 2^62 bytes */
    expect_oom(zoe_optimizer_create(grid, dev, stream, ZOE_F32, huge, 1, &cfg, &opt),
               "4611686018427387904", "optimizer of 2^60 parameters");
    CHECK(opt == NULL, "optimizer: handle set after a failure");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev));
    CHECK_OK(zoe_stream_create(dev, &stream));
    CHECK_OK(zoe_grid_create(MPI_COMM_WORLD, 1, &grid));
    config_errors();
    call_errors();
    oom_errors();
    zoe_grid_destroy(grid);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return test_finish("test_optimizer_errors");
}
