/* The GPU decisions on the CPU: whether a build's architectures run on a GPU (machine code,
 * PTX, CMake's suffixes), which GPU each rank of a node takes from simulated device lists, the
 * spec table and the compute dtype it picks; and zoe_gpu_choose agreeing on every rank. */
#include <stdlib.h>
#include "testing.h"

static void expect_code(int cap, const char *built, int runs, const char *needle) {
    char why[768] = "";
    int got = zoe_gpu_code_check(cap, built, why, sizeof why);
    CHECK(got == runs, "sm_%d with \"%s\": %s, expected %s (%s)", cap, built,
          got ? "runs" : "refused", runs ? "runs" : "refused", why);
    if (!runs && needle) CHECK(strstr(why, needle) != NULL, "\"%s\" not in: %s", needle, why);
}

static void check_code(void) {
    expect_code(70, "80,90", 0, "-DZOE_CUDA_ARCHS=70");
    expect_code(70, "80,90", 0, "CUDA 12");
    expect_code(90, "80,90", 1, NULL);
    expect_code(86, "80", 1, NULL);      /* sm_80 machine code runs on 8.6 */
    expect_code(86, "80-real", 1, NULL); /* ... without PTX too */
    expect_code(80, "90", 0, "sm_80");
    expect_code(75, "70-real", 1, NULL);
    expect_code(70, "75-real", 0, "sm_75");
    /* PTX: compiled by the driver for any later GPU, never for an earlier one */
    expect_code(89, "80-virtual", 1, NULL);
    expect_code(80, "90-virtual", 0, "compute_90");
    expect_code(100, "80-real;90-real;90-virtual", 1, NULL);
    expect_code(100, "80-real;90-real", 0, "(no PTX)");
    expect_code(70, "80-real;90-real;90-virtual", 0,
                "machine code for sm_80, sm_90 and PTX for compute_90");
    /* arch-specific code ('a') runs on its own capability alone */
    expect_code(90, "90a-real", 1, NULL);
    expect_code(100, "90a", 0, "sm_90a");
    /* family code ('f') on its major's later minors alone */
    expect_code(103, "100f-real", 1, NULL);
    expect_code(120, "100f", 0, "sm_100f");
    /* lists nvcc resolves, or nothing: not refused */
    expect_code(70, "all", 1, NULL);
    expect_code(70, "native", 1, NULL);
    expect_code(70, "", 1, NULL);
    /* Drawn: one entry against the rule written out; a list runs iff one of its entries does. */
    test_rng rng;
    test_rng_seed(&rng, 21);
    static const char *const suffix[] = {"", "-real", "-virtual"};
    for (int i = 0; i < 2000; i++) {
        int cap = (int)test_rng_int(&rng, 5, 12) * 10 + (int)test_rng_int(&rng, 0, 9);
        int n = (int)test_rng_int(&rng, 1, 3), any = 0;
        char list[128] = "";
        for (int e = 0; e < n; e++) {
            int arch = (int)test_rng_int(&rng, 5, 12) * 10 + (int)test_rng_int(&rng, 0, 9);
            int kind = (int)test_rng_int(&rng, 0, 2);
            int sass = kind != 2 && arch / 10 == cap / 10 && arch <= cap;
            int ptx = kind != 1 && arch <= cap;
            char one[32];
            snprintf(one, sizeof one, "%d%s", arch, suffix[kind]);
            int alone = zoe_gpu_code_check(cap, one, NULL, 0);
            CHECK(alone == (sass || ptx), "sm_%d with \"%s\": %d", cap, one, alone);
            any |= alone;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", e ? ";" : "", one);
        }
        CHECK(zoe_gpu_code_check(cap, list, NULL, 0) == any, "sm_%d with \"%s\"", cap, list);
    }
}

/* A node of `ranks` ranks; gpu(q, i) is the i-th bus id rank q sees (-1 ends the list). */
static zoe_gpu_rank_view *node_of(int ranks, int visible_max, int (*gpu)(int q, int i, void *),
                                  void *arg) {
    zoe_gpu_rank_view *v = calloc((size_t)ranks, sizeof *v);
    for (int q = 0; v && q < ranks; q++) {
        v[q].rank = 100 + q; /* world ranks differ from local ones */
        for (int i = 0; i < visible_max; i++) {
            int g = gpu(q, i, arg);
            if (g < 0) break;
            snprintf(v[q].bus_ids[v[q].visible++], ZOE_GPU_BUS_ID_SIZE, "0000:%02X:00.0", g + 7);
        }
    }
    return v;
}

/* Every rank's verdict and ordinal; returns the status, the same on every rank or a failure. */
static zoe_status assign_all(const zoe_gpu_rank_view *v, int ranks, int *ordinals, char *msg,
                             size_t n) {
    zoe_status first = ZOE_OK;
    for (int q = 0; q < ranks; q++) {
        ordinals[q] = -2;
        zoe_status st = zoe_gpu_assign(v, ranks, q, "node7", &ordinals[q]);
        if (q == 0) {
            first = st;
            snprintf(msg, n, "%s", st == ZOE_OK ? "" : zoe_last_error());
        }
        CHECK(st == first, "local rank %d: status %d, rank 0: %d", q, (int)st, (int)first);
        CHECK(st == ZOE_OK || ordinals[q] == -1, "refused but ordinal %d", ordinals[q]);
    }
    return first;
}

static int one_each(int q, int i, void *arg) {
    return i == 0 ? q : -1;
}
static int all_of(int q, int i, void *arg) {
    return i < *(int *)arg ? i : -1;
}
static int first_only(int q, int i, void *arg) {
    return i == 0 ? 0 : -1;
}
static int none(int q, int i, void *arg) {
    return -1;
}
static int pairs(int q, int i, void *arg) { /* ranks 0,1 see GPUs 0,1; ranks 2,3 see 2,3 */
    return i < 2 ? 2 * (q / 2) + i : -1;
}
static int round_robin(int q, int i, void *arg) { /* ranks 0,2 see GPUs 0,1; ranks 1,3 see 2,3 */
    return i < 2 ? 2 * (q % 2) + i : -1;
}
static int rotated(int q, int i, void *arg) { /* all 8, each rank's own first */
    return i < 8 ? (q + i) % 8 : -1;
}

static void check_assign(void) {
    int ord[64], eight = 8, two = 2;
    char msg[512];
    zoe_gpu_rank_view *v = node_of(8, 8, one_each, NULL);
    CHECK(assign_all(v, 8, ord, msg, sizeof msg) == ZOE_OK, "8 ranks x 1 GPU each: %s", msg);
    for (int q = 0; q < 8; q++) CHECK(ord[q] == 0, "one GPU each: rank %d takes %d", q, ord[q]);
    CHECK(zoe_gpu_count_distinct(v, 8) == 8, "8 distinct GPUs: %d", zoe_gpu_count_distinct(v, 8));
    free(v);

    v = node_of(8, 8, all_of, &eight);
    CHECK(assign_all(v, 8, ord, msg, sizeof msg) == ZOE_OK, "8 ranks see all 8: %s", msg);
    for (int q = 0; q < 8; q++) CHECK(ord[q] == q, "all visible: rank %d takes %d", q, ord[q]);
    CHECK(zoe_gpu_count_distinct(v, 8) == 8, "8 GPUs seen by all: %d",
          zoe_gpu_count_distinct(v, 8));
    free(v);

    v = node_of(2, 8, first_only, NULL);
    CHECK(assign_all(v, 2, ord, msg, sizeof msg) == ZOE_ERR_INVALID_ARGUMENT,
          "2 ranks on one GPU accepted");
    CHECK(strstr(msg, "ranks 100 and 101") && strstr(msg, "0000:07:00.0") && strstr(msg, "node7"),
          "sharing message: %s", msg);
    free(v);

    v = node_of(4, 8, all_of, &two);
    CHECK(assign_all(v, 4, ord, msg, sizeof msg) == ZOE_ERR_INVALID_ARGUMENT,
          "4 ranks on 2 GPUs accepted");
    CHECK(strstr(msg, "ranks 100 and 102") && strstr(msg, "at most 2 rank(s)"), "4 on 2: %s", msg);
    free(v);

    v = node_of(3, 8, none, NULL);
    CHECK(assign_all(v, 3, ord, msg, sizeof msg) == ZOE_ERR_UNSUPPORTED, "no GPU accepted");
    CHECK(strstr(msg, "rank 100") && strstr(msg, "sees no GPU"), "no GPU: %s", msg);
    free(v);

    static const struct {
        const char *what;
        int (*gpu)(int, int, void *);
        int ranks, want[8];
    } ok[] = {{"pairs", pairs, 4, {0, 1, 0, 1}},
              {"round robin", round_robin, 4, {0, 0, 1, 1}},
              {"rotated lists", rotated, 8, {0, 0, 0, 0, 0, 0, 0, 0}}};
    for (size_t c = 0; c < sizeof ok / sizeof ok[0]; c++) {
        v = node_of(ok[c].ranks, 8, ok[c].gpu, NULL);
        CHECK(assign_all(v, ok[c].ranks, ord, msg, sizeof msg) == ZOE_OK, "%s: %s", ok[c].what,
              msg);
        for (int q = 0; q < ok[c].ranks; q++)
            CHECK(ord[q] == ok[c].want[q], "%s: rank %d takes %d, expected %d", ok[c].what, q,
                  ord[q], ok[c].want[q]);
        free(v);
    }

    /* Drawn: L ranks that all see the same G GPUs fit iff L <= G, each on its local rank's. */
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int i = 0; i < 200; i++) {
        int gpus = (int)test_rng_int(&rng, 1, 16), ranks = (int)test_rng_int(&rng, 1, 16);
        v = node_of(ranks, 16, all_of, &gpus);
        zoe_status st = assign_all(v, ranks, ord, msg, sizeof msg);
        CHECK((st == ZOE_OK) == (ranks <= gpus), "%d ranks on %d GPUs: %s", ranks, gpus, msg);
        for (int q = 0; st == ZOE_OK && q < ranks; q++)
            CHECK(ord[q] == q, "%d on %d: rank %d takes %d", ranks, gpus, q, ord[q]);
        CHECK(zoe_gpu_count_distinct(v, ranks) == gpus, "distinct %d of %d",
              zoe_gpu_count_distinct(v, ranks), gpus);
        free(v);
    }
}

static void check_spec(void) {
    zoe_gpu_spec s;
    int found;
    found = zoe_gpu_spec_of(70, "Tesla V100-SXM2-32GB", &s);
    CHECK(found && s.fp16_tflops == 125 && s.fp32_tflops == 15.7 && !s.has_bf16 && !s.has_tf32,
          "V100: %g fp16, %g fp32, bf16 %d, tf32 %d", s.fp16_tflops, s.fp32_tflops, s.has_bf16,
          s.has_tf32);
    found = zoe_gpu_spec_of(80, "NVIDIA A100-SXM4-80GB", &s);
    CHECK(found && s.bf16_tflops == 312 && s.fp16_tflops == 312 && s.tf32_tflops == 156 &&
              s.fp32_tflops == 19.5 && s.has_bf16 && s.has_tf32,
          "A100: %g bf16, %g tf32, %g fp32", s.bf16_tflops, s.tf32_tflops, s.fp32_tflops);
    found = zoe_gpu_spec_of(90, "NVIDIA H200", &s);
    CHECK(found && s.bf16_tflops == 989 && s.fp32_tflops == 67 && s.tf32_tflops == 494,
          "H200: %g bf16, %g fp32, %g tf32", s.bf16_tflops, s.fp32_tflops, s.tf32_tflops);
    found = zoe_gpu_spec_of(90, NULL, &s);
    CHECK(found && s.bf16_tflops == 989, "sm_90 unnamed: %g", s.bf16_tflops);
    found = zoe_gpu_spec_of(90, "NVIDIA H100 PCIe", &s);
    CHECK(found && s.bf16_tflops == 756, "H100 PCIe: %g", s.bf16_tflops);
    found = zoe_gpu_spec_of(86, "NVIDIA A40", &s);
    CHECK(found && s.has_bf16 && s.bf16_tflops > 100, "sm_86");
    found = zoe_gpu_spec_of(89, "NVIDIA L40S", &s);
    CHECK(found && s.has_bf16 && s.bf16_tflops > 300, "sm_89");
    found = zoe_gpu_spec_of(61, "Tesla P40", &s);
    CHECK(!found && !s.has_bf16 && s.fp16_tflops == 0, "sm_61");
    found = zoe_gpu_spec_of(120, "a later GPU", &s);
    CHECK(!found && s.has_bf16 && s.has_tf32 && s.bf16_tflops == 0, "sm_120 derived");
    zoe_gpu_spec_of(80, NULL, &s);
    CHECK(zoe_gpu_spec_peak_tflops(&s, ZOE_BF16, 0) == 312 &&
              zoe_gpu_spec_peak_tflops(&s, ZOE_F32, 1) == 156 &&
              zoe_gpu_spec_peak_tflops(&s, ZOE_F32, 0) == 19.5,
          "A100 peaks by dtype");
    zoe_gpu_spec_of(70, NULL, &s);
    CHECK(zoe_gpu_spec_peak_tflops(&s, ZOE_F32, 1) == 15.7, "V100: --tf32 leaves fp32 at 15.7");

    /* The dtype: on every capability the default is accepted; bf16 only with bf16 cores. */
    char warn[256];
    for (int cap = 30; cap <= 130; cap++) {
        zoe_gpu_spec_of(cap, NULL, &s);
        zoe_dtype d = zoe_gpu_default_dtype(&s);
        CHECK(d == (cap >= 80 ? ZOE_BF16 : ZOE_F16), "sm_%d defaults to %s", cap,
              zoe_dtype_name(d));
        CHECK(zoe_gpu_check_dtype(&s, d, 0, warn, sizeof warn) == ZOE_OK && !warn[0],
              "sm_%d refuses its default %s: %s", cap, zoe_dtype_name(d), warn);
        zoe_status st = zoe_gpu_check_dtype(&s, ZOE_BF16, 0, warn, sizeof warn);
        CHECK((st == ZOE_OK) == (cap >= 80), "sm_%d: bf16 %s", cap, st ? "refused" : "accepted");
        if (st != ZOE_OK)
            CHECK(strstr(zoe_last_error(), "--dtype fp16") != NULL, "bf16 refusal: %s",
                  zoe_last_error());
        CHECK(zoe_gpu_check_dtype(&s, ZOE_F32, 1, warn, sizeof warn) == ZOE_OK &&
                  (warn[0] != 0) == (cap < 80),
              "sm_%d --tf32 warning: '%s'", cap, warn);
        CHECK(zoe_gpu_check_dtype(&s, ZOE_F16, 0, warn, sizeof warn) == ZOE_OK && !warn[0],
              "sm_%d fp16", cap);
    }
}

/* Whatever this machine has, every rank returns the same verdict; without a GPU it says so. */
static void check_choose(void) {
    zoe_gpu_choice c;
    zoe_status st = zoe_gpu_choose(MPI_COMM_WORLD, &c);
    int lo = (int)st, hi = (int)st;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi, "zoe_gpu_choose: statuses %d..%d across ranks", lo, hi);
    if (zoe_cuda_device_count() == 0)
        CHECK(st != ZOE_OK && (strstr(zoe_last_error(), "sees no GPU") ||
                               strstr(zoe_last_error(), "built without CUDA")),
              "no GPU here, but: %d %s", (int)st, zoe_last_error());
    else if (st == ZOE_OK)
        CHECK(c.ordinal >= 0 && c.gpu.capability >= 30 && c.node_gpus >= 1 && c.node_index >= 0 &&
                  c.node_index < c.node_gpus && c.weakest.capability <= c.gpu.capability,
              "choice: ordinal %d, sm_%d, %d GPUs, weakest sm_%d", c.ordinal, c.gpu.capability,
              c.node_gpus, c.weakest.capability);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    check_code();
    check_assign();
    check_spec();
    check_choose();
    return test_finish("test_gpu");
}
