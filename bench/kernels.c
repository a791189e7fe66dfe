/* bench_kernels: the CPU op table at GPT-2-124M shapes (256 tokens, C = 768, 12 heads of 64).
 *  1. matmul forward and backward GFLOP/s for qkv, proj, fc1, fc2 and the LM head, fp32 and
 *     bf16 storage, against a bare cblas_sgemm of the same products in the same run;
 *  2. one transformer layer's forward + backward (B = 1, T = 256), time split by op.
 * One JSON object per line, the last a summary. Threads: OMP_NUM_THREADS and
 * OPENBLAS_NUM_THREADS (set both to the same count). Usage: bench_kernels [reps] */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/kernels.h"
#include "zoe/zoe.h"

static double clock_seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) {
    return clock_seconds(CLOCK_MONOTONIC);
}

/* Wall seconds, and process CPU seconds: on a shared machine other processes stretch the wall
 * time of a call but not (much) the CPU time it uses, so with one thread the CPU figure is
 * the steadier one; with several it also counts idle-spinning threads. */
typedef struct span {
    double wall, cpu;
} span;

#define MAX_REPS 1000
/* Sets `into` to the span the block takes. */
#define TIMED_INTO(into, block)                                                                    \
    do {                                                                                           \
        double w0_ = now(), c0_ = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);                         \
        block;                                                                                     \
        (into).cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0_;                                \
        (into).wall = now() - w0_;                                                                 \
    } while (0)

static span best(span a, span b) {
    return (span){a.wall < b.wall ? a.wall : b.wall, a.cpu < b.cpu ? a.cpu : b.cpu};
}

static void *alloc_random(zoe_dtype dt, size_t n, unsigned seed) {
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    if (dt == ZOE_F32) return f;
    void *out = malloc(n * 2);
    zoe_convert(out, dt, f, ZOE_F32, n);
    free(f);
    return out;
}

static void check(zoe_status st, const char *what) {
    if (st == ZOE_OK) return;
    fprintf(stderr, "bench_kernels: %s failed: %s\n", what, zoe_last_error());
    exit(1);
}

typedef struct shape {
    const char *name;
    int64_t K, N;
    int bias; /* the LM head (tied to the embedding) has none */
} shape;

/* Returns the geometric-mean wall-time ratio (sgemm time / zoe time, so > 1 means zoe is
 * faster) over forward and backward of this shape; *cpu_ratio the same in CPU time. */
static double bench_matmul(zoe_kernels *k, zoe_dtype dt, const shape *s, int64_t M, int reps,
                           double *cpu_ratio) {
    const int64_t K = s->K, N = s->N;
    void *x = alloc_random(dt, (size_t)(M * K), 1), *w = alloc_random(dt, (size_t)(N * K), 2);
    void *b = alloc_random(dt, (size_t)N, 3), *y = alloc_random(dt, (size_t)(M * N), 4);
    void *dx = alloc_random(dt, (size_t)(M * K), 5), *dw = alloc_random(dt, (size_t)(N * K), 6);
    void *db = s->bias ? alloc_random(dt, (size_t)N, 7) : NULL;
    float *xf = alloc_random(ZOE_F32, (size_t)(M * K), 1),
          *wf = alloc_random(ZOE_F32, (size_t)(N * K), 2);
    float *yf = alloc_random(ZOE_F32, (size_t)(M * N), 4),
          *dxf = alloc_random(ZOE_F32, (size_t)(M * K), 5);
    float *dwf = alloc_random(ZOE_F32, (size_t)(N * K), 6);
    /* zoe and the bare sgemm alternate within each repetition, and each keeps its best time:
     * load from other processes then hits both alike. One untimed warm-up round first. */
    const span none = {INFINITY, INFINITY};
    span t_fwd = none, t_bwd = none, s_fwd = none, s_bwd = none;
    for (int r = 0; r <= reps; r++) {
        span tf, tb, sf, sb;
        TIMED_INTO(tf, check(zoe_matmul_forward(k, dt, y, x, w, s->bias ? b : NULL, M, K, N),
                             "matmul_forward"));
        TIMED_INTO(sf, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K,
                                   1.0f, xf, (int)K, wf, (int)K, 0.0f, yf, (int)N));
        TIMED_INTO(
            tb, check(zoe_matmul_backward(k, dt, dx, dw, db, y, x, w, M, K, N), "matmul_backward"));
        TIMED_INTO(sb, {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, yf,
                        (int)N, wf, (int)K, 1.0f, dxf, (int)K);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, yf,
                        (int)N, xf, (int)K, 1.0f, dwf, (int)K);
        });
        if (r == 0) continue;
        t_fwd = best(t_fwd, tf), t_bwd = best(t_bwd, tb), s_fwd = best(s_fwd, sf);
        s_bwd = best(s_bwd, sb);
    }
    const double gflop = 2e-9 * (double)M * (double)K * (double)N;
    const double rf = s_fwd.wall / t_fwd.wall, rb = s_bwd.wall / t_bwd.wall;
    printf("{\"bench\":\"matmul\",\"name\":\"%s\",\"dtype\":\"%s\",\"M\":%lld,\"K\":%lld,"
           "\"N\":%lld,\"fwd_gflops\":%.2f,\"bwd_gflops\":%.2f,\"sgemm_fwd_gflops\":%.2f,"
           "\"sgemm_bwd_gflops\":%.2f,\"fwd_vs_sgemm\":%.3f,\"bwd_vs_sgemm\":%.3f,"
           "\"fwd_vs_sgemm_cpu\":%.3f,\"bwd_vs_sgemm_cpu\":%.3f}\n",
           s->name, zoe_dtype_name(dt), (long long)M, (long long)K, (long long)N,
           gflop / t_fwd.wall, 2 * gflop / t_bwd.wall, gflop / s_fwd.wall, 2 * gflop / s_bwd.wall,
           rf, rb, s_fwd.cpu / t_fwd.cpu, s_bwd.cpu / t_bwd.cpu);
    fflush(stdout);
    free(x), free(w), free(b), free(y), free(dx), free(dw), free(db);
    free(xf), free(wf), free(yf), free(dxf), free(dwf);
    *cpu_ratio = sqrt(s_fwd.cpu / t_fwd.cpu * s_bwd.cpu / t_bwd.cpu);
    return sqrt(rf * rb);
}

/* The buffers of one transformer layer (B, T, C, NH), storage dt. */
typedef struct layer {
    zoe_dtype dt;
    int64_t B, T, C, NH, BT;
    void *x, *ln1, *qkv, *att, *proj, *res1, *ln2, *fc1, *gel, *fc2, *out;
    void *w_qkv, *w_proj, *w_fc1, *w_fc2, *b_qkv, *b_proj, *b_fc1, *b_fc2, *g1, *be1, *g2, *be2;
    void *d_a, *d_b, *d_c, *d_big, *d_big2; /* activation gradients (reused) */
    void *dw_qkv, *dw_proj, *dw_fc1, *dw_fc2, *db_qkv, *db_proj, *db_fc1, *db_fc2, *dg, *dbe;
    float *mean1, *rstd1, *mean2, *rstd2, *lse;
} layer;

enum { OP_LAYERNORM, OP_MATMUL, OP_ATTENTION, OP_GELU, OP_RESIDUAL, OP_COUNT };
static const char *op_names[OP_COUNT] = {"layernorm", "matmul", "attention", "gelu", "residual"};

static void layer_init(layer *L, zoe_dtype dt, int64_t B, int64_t T, int64_t C, int64_t NH) {
    memset(L, 0, sizeof *L);
    L->dt = dt, L->B = B, L->T = T, L->C = C, L->NH = NH, L->BT = B * T;
    const size_t bt = (size_t)L->BT, c = (size_t)C;
    unsigned seed = 100;
    void **acts[] = {&L->x,   &L->ln1, &L->att, &L->proj, &L->res1, &L->ln2,
                     &L->fc2, &L->out, &L->d_a, &L->d_b,  &L->d_c};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        *acts[i] = alloc_random(dt, bt * c, seed++);
    L->qkv = alloc_random(dt, bt * 3 * c, seed++);
    L->fc1 = alloc_random(dt, bt * 4 * c, seed++);
    L->gel = alloc_random(dt, bt * 4 * c, seed++);
    L->d_big = alloc_random(dt, bt * 4 * c, seed++);
    L->d_big2 = alloc_random(dt, bt * 4 * c, seed++);
    L->w_qkv = alloc_random(dt, 3 * c * c, seed++), L->dw_qkv = alloc_random(dt, 3 * c * c, seed++);
    L->w_proj = alloc_random(dt, c * c, seed++), L->dw_proj = alloc_random(dt, c * c, seed++);
    L->w_fc1 = alloc_random(dt, 4 * c * c, seed++), L->dw_fc1 = alloc_random(dt, 4 * c * c, seed++);
    L->w_fc2 = alloc_random(dt, 4 * c * c, seed++), L->dw_fc2 = alloc_random(dt, 4 * c * c, seed++);
    L->b_qkv = alloc_random(dt, 3 * c, seed++), L->db_qkv = alloc_random(dt, 3 * c, seed++);
    L->b_proj = alloc_random(dt, c, seed++), L->db_proj = alloc_random(dt, c, seed++);
    L->b_fc1 = alloc_random(dt, 4 * c, seed++), L->db_fc1 = alloc_random(dt, 4 * c, seed++);
    L->b_fc2 = alloc_random(dt, c, seed++), L->db_fc2 = alloc_random(dt, c, seed++);
    L->g1 = alloc_random(dt, c, seed++), L->be1 = alloc_random(dt, c, seed++);
    L->g2 = alloc_random(dt, c, seed++), L->be2 = alloc_random(dt, c, seed++);
    L->dg = alloc_random(dt, c, seed++), L->dbe = alloc_random(dt, c, seed++);
    L->mean1 = alloc_random(ZOE_F32, bt, seed++), L->rstd1 = alloc_random(ZOE_F32, bt, seed++);
    L->mean2 = alloc_random(ZOE_F32, bt, seed++), L->rstd2 = alloc_random(ZOE_F32, bt, seed++);
    L->lse = alloc_random(ZOE_F32, (size_t)(B * NH * T), seed++);
}

static void layer_free(layer *L) {
    void *all[] = {L->x,      L->ln1,     L->qkv,    L->att,    L->proj,   L->res1,    L->ln2,
                   L->fc1,    L->gel,     L->fc2,    L->out,    L->w_qkv,  L->w_proj,  L->w_fc1,
                   L->w_fc2,  L->b_qkv,   L->b_proj, L->b_fc1,  L->b_fc2,  L->g1,      L->be1,
                   L->g2,     L->be2,     L->d_a,    L->d_b,    L->d_c,    L->d_big,   L->d_big2,
                   L->dw_qkv, L->dw_proj, L->dw_fc1, L->dw_fc2, L->db_qkv, L->db_proj, L->db_fc1,
                   L->db_fc2, L->dg,      L->dbe,    L->mean1,  L->rstd1,  L->mean2,   L->rstd2,
                   L->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

#define TIMED(op, call)                                                                            \
    do {                                                                                           \
        double t0_ = now();                                                                        \
        check(call, #call);                                                                        \
        t[op] += now() - t0_;                                                                      \
    } while (0)

/* One forward + backward of the layer, adding each op's seconds into t. */
static void layer_step(zoe_kernels *k, layer *L, double *t) {
    const zoe_dtype dt = L->dt;
    const int64_t BT = L->BT, C = L->C, HS = C / L->NH;
    /* forward */
    TIMED(OP_LAYERNORM,
          zoe_layernorm_forward(k, dt, L->ln1, L->mean1, L->rstd1, L->x, L->g1, L->be1, BT, C));
    TIMED(OP_MATMUL, zoe_matmul_forward(k, dt, L->qkv, L->ln1, L->w_qkv, L->b_qkv, BT, C, 3 * C));
    TIMED(OP_ATTENTION,
          zoe_attention_forward(k, dt, L->att, L->lse, L->qkv, L->B, L->T, L->NH, HS));
    TIMED(OP_MATMUL, zoe_matmul_forward(k, dt, L->proj, L->att, L->w_proj, L->b_proj, BT, C, C));
    TIMED(OP_RESIDUAL, zoe_residual_forward(k, dt, L->res1, L->x, L->proj, BT * C));
    TIMED(OP_LAYERNORM,
          zoe_layernorm_forward(k, dt, L->ln2, L->mean2, L->rstd2, L->res1, L->g2, L->be2, BT, C));
    TIMED(OP_MATMUL, zoe_matmul_forward(k, dt, L->fc1, L->ln2, L->w_fc1, L->b_fc1, BT, C, 4 * C));
    TIMED(OP_GELU, zoe_gelu_forward(k, dt, L->gel, L->fc1, BT * 4 * C));
    TIMED(OP_MATMUL, zoe_matmul_forward(k, dt, L->fc2, L->gel, L->w_fc2, L->b_fc2, BT, 4 * C, C));
    TIMED(OP_RESIDUAL, zoe_residual_forward(k, dt, L->out, L->res1, L->fc2, BT * C));
    /* backward: d_a is the gradient arriving at the layer output (and flowing to res1) */
    TIMED(OP_MATMUL, zoe_matmul_backward(k, dt, L->d_big, L->dw_fc2, L->db_fc2, L->d_a, L->gel,
                                         L->w_fc2, BT, 4 * C, C));
    TIMED(OP_GELU, zoe_gelu_backward(k, dt, L->d_big2, L->d_big, L->fc1, BT * 4 * C));
    TIMED(OP_MATMUL, zoe_matmul_backward(k, dt, L->d_b, L->dw_fc1, L->db_fc1, L->d_big2, L->ln2,
                                         L->w_fc1, BT, C, 4 * C));
    TIMED(OP_LAYERNORM, zoe_layernorm_backward(k, dt, L->d_a, L->dg, L->dbe, L->d_b, L->res1, L->g2,
                                               L->mean2, L->rstd2, BT, C));
    TIMED(OP_MATMUL, zoe_matmul_backward(k, dt, L->d_c, L->dw_proj, L->db_proj, L->d_a, L->att,
                                         L->w_proj, BT, C, C));
    TIMED(OP_ATTENTION, zoe_attention_backward(k, dt, L->d_big, L->d_c, L->qkv, L->att, L->lse,
                                               L->B, L->T, L->NH, HS));
    TIMED(OP_MATMUL, zoe_matmul_backward(k, dt, L->d_b, L->dw_qkv, L->db_qkv, L->d_big, L->ln1,
                                         L->w_qkv, BT, C, 3 * C));
    TIMED(OP_LAYERNORM, zoe_layernorm_backward(k, dt, L->d_a, L->dg, L->dbe, L->d_b, L->x, L->g1,
                                               L->mean1, L->rstd1, BT, C));
    TIMED(OP_RESIDUAL, zoe_add(k, dt, L->d_c, L->d_a, BT * C));
    /* keep the activation gradients bounded across repetitions */
    TIMED(OP_RESIDUAL, zoe_scale(k, dt, L->d_a, 0.5f, BT * C));
}

static double bench_layer(zoe_kernels *k, zoe_dtype dt, int64_t B, int64_t T, int reps) {
    layer L;
    layer_init(&L, dt, B, T, 768, 12);
    double t[OP_COUNT] = {0}, total = 0;
    layer_step(k, &L, t); /* warm-up */
    memset(t, 0, sizeof t);
    for (int r = 0; r < reps; r++) layer_step(k, &L, t);
    for (int i = 0; i < OP_COUNT; i++) total += t[i];
    printf("{\"bench\":\"layer\",\"dtype\":\"%s\",\"B\":%lld,\"T\":%lld,\"C\":768,\"NH\":12,"
           "\"fwd_bwd_ms\":%.3f",
           zoe_dtype_name(dt), (long long)B, (long long)T, 1e3 * total / reps);
    for (int i = 0; i < OP_COUNT; i++)
        printf(",\"%s_ms\":%.3f,\"%s_share\":%.3f", op_names[i], 1e3 * t[i] / reps, op_names[i],
               t[i] / total);
    printf("}\n");
    fflush(stdout);
    layer_free(&L);
    return 1e3 * total / reps;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_kernels [reps 1..%d]\n", MAX_REPS);
        return 2;
    }
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernels *k;
    check(zoe_device_create(ZOE_BACKEND_CPU, 0, &dev), "device");
    check(zoe_stream_create(dev, &stream), "stream");
    const zoe_kernel_plan plan = {
        .max_rows = 256, .max_dim = 50304, .max_seq = 256, .max_heads = 12, .max_head_dim = 64};
    check(zoe_kernels_create(dev, stream, &plan, &k), "zoe_kernels_create");
    const int64_t M = 256;
    const shape shapes[] = {{"qkv", 768, 2304, 1},
                            {"proj", 768, 768, 1},
                            {"fc1", 768, 3072, 1},
                            {"fc2", 3072, 768, 1},
                            {"lm_head", 768, 50304, 0}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    /* geometric means over the shapes of the per-shape ratios (sgemm time / zoe time) */
    double ratio[2], cpu_ratio[2], layer_ms[2];
    for (int d = 0; d < 2; d++) {
        zoe_dtype dt = d ? ZOE_BF16 : ZOE_F32;
        double log_wall = 0, log_cpu = 0;
        for (int i = 0; i < nshapes; i++) {
            double cpu;
            const int r = i == nshapes - 1 ? (reps + 1) / 2 : reps; /* the LM head is 65x qkv */
            log_wall += log(bench_matmul(k, dt, &shapes[i], M, r, &cpu));
            log_cpu += log(cpu);
        }
        ratio[d] = exp(log_wall / nshapes);
        cpu_ratio[d] = exp(log_cpu / nshapes);
    }
    for (int d = 0; d < 2; d++) layer_ms[d] = bench_layer(k, d ? ZOE_BF16 : ZOE_F32, 1, 256, reps);
    printf("{\"summary\":\"kernels\",\"omp_threads\":%d,\"blas_threads\":%d,"
           "\"matmul_vs_sgemm_ratio\":%.3f,\"matmul_vs_sgemm_ratio_bf16\":%.3f,"
           "\"matmul_vs_sgemm_cpu_ratio\":%.3f,\"matmul_vs_sgemm_cpu_ratio_bf16\":%.3f,"
           "\"layer_fwd_bwd_ms_fp32\":%.3f,\"layer_fwd_bwd_ms_bf16\":%.3f}\n",
           omp_get_max_threads(), openblas_get_num_threads(), ratio[0], ratio[1], cpu_ratio[0],
           cpu_ratio[1], layer_ms[0], layer_ms[1]);
    zoe_kernels_destroy(k);
    zoe_stream_destroy(stream);
    zoe_device_destroy(dev);
    return 0;
}
