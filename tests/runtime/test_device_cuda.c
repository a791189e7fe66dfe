/* GPU: the CUDA device and the NCCL communicator, against the MPI communicator on the same
 * data. Skipped (exit 77) without a GPU per rank. For each dtype (fp32, bf16, fp16, int32) and
 * size (1, odd, 1 MB): all-reduce and reduce-scatter (sum and max, out of place and in place),
 * all-gather (out of place and in place), broadcast, and the refresh's grouped all-gathers; then
 * a barrier, and two communicators driven from two streams at once (the TP/DP pattern). First the
 * device's memory limit (check_limit).
 * Tolerances against the MPI result of the same inputs:
 *  - max, int32 sums, gathers, broadcasts: exact (values are moved or picked, or integer sums);
 *  - fp32 sums: both within d eps32 sum|x| of the exact sum, so 2 d eps32 sum|x| apart;
 *  - bf16/fp16 sums: NCCL rounds at each of d - 1 hops, within (d - 1) u sum|x| of the exact sum
 *    (include/zoe/comm.h); MPI rounds once, within u |sum| + d eps32 sum|x|; the sum of both. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "testing.h"

static const zoe_dtype dtypes[] = {ZOE_F32, ZOE_BF16, ZOE_F16, ZOE_I32};

typedef struct env {
    zoe_device *dev;
    zoe_stream *s;
    zoe_comm *nccl, *mpi;
    int rank, world;
} env;

static double unit_roundoff(zoe_dtype dt) {
    return dt == ZOE_BF16 ? 0x1p-8 : dt == ZOE_F16 ? 0x1p-11 : 0;
}

/* sum over ranks of |x_r[offset + i]|, for the bounds. */
static double *magnitudes(zoe_dtype dt, size_t total, size_t offset, size_t n, uint64_t seed,
                          int world) {
    char *in = malloc(total * zoe_dtype_size(dt));
    double *mag = calloc(n, sizeof(double));
    for (int r = 0; r < world; r++) {
        test_fill_rank_input(dt, r, total, seed, in);
        for (size_t i = 0; i < n; i++) mag[i] += fabs(test_get(dt, in, offset + i));
    }
    free(in);
    return mag;
}

/* got (host copy of the NCCL result) against want (the MPI result). */
static void compare(const env *e, zoe_dtype dt, zoe_reduce_op op, const void *got, const void *want,
                    const double *mag, size_t n, const char *what) {
    const double d = e->world, eps = FLT_EPSILON, u = unit_roundoff(dt);
    size_t bad = 0, worst = 0;
    double worst_excess = 0;
    for (size_t i = 0; i < n; i++) {
        double g = test_get(dt, got, i), w = test_get(dt, want, i), tol = 0;
        if (op == ZOE_REDUCE_SUM && dt == ZOE_F32) tol = 2 * d * eps * mag[i];
        if (op == ZOE_REDUCE_SUM && u > 0)
            tol = (d - 1) * u * mag[i] + u * fabs(w) * 1.01 + d * eps * mag[i];
        double excess = fabs(g - w) - tol;
        if (!(excess <= 0) && (bad++ == 0 || excess > worst_excess))
            worst_excess = excess, worst = i;
    }
    CHECK(bad == 0,
          "%s %s %s n=%zu: %zu elements outside the bound, worst [%zu] nccl %.9g mpi %.9g", what,
          zoe_dtype_name(dt), op == ZOE_REDUCE_MAX ? "max" : "sum", n, bad, worst,
          bad ? test_get(dt, got, worst) : 0.0, bad ? test_get(dt, want, worst) : 0.0);
}

static void *dev_alloc(env *e, size_t bytes) {
    void *p = NULL;
    CHECK_OK(zoe_device_alloc(e->dev, bytes ? bytes : 1, &p));
    return p;
}

static void up(env *e, void *dst, const void *src, size_t bytes) {
    CHECK_OK(zoe_memcpy_async(dst, src, bytes, ZOE_COPY_HOST_TO_DEVICE, e->s));
}

static void down(env *e, void *dst, const void *src, size_t bytes) {
    CHECK_OK(zoe_memcpy_async(dst, src, bytes, ZOE_COPY_DEVICE_TO_HOST, e->s));
    CHECK_OK(zoe_stream_synchronize(e->s));
}

/* The refresh's pattern: two all-gathers (halves of each rank's block) launched as one group;
 * want holds the MPI all-gather of in. */
static void grouped_all_gather(env *e, zoe_dtype dt, size_t n, const char *in, const char *want,
                               char *got, char *d_in, char *d_out) {
    const size_t W = (size_t)e->world, r = (size_t)e->rank, esz = zoe_dtype_size(dt),
                 big = n * W * esz;
    CHECK_OK(zoe_memset_async(d_out, 0xff, big, e->s));
    up(e, d_out + r * n * esz, in, n * esz);
    CHECK_OK(zoe_comm_group_start(e->nccl, e->s));
    size_t half = n / 2;
    CHECK_OK(zoe_comm_all_gather(e->nccl, d_out + r * n * esz, d_in, half, dt, e->s));
    CHECK_OK(zoe_comm_all_gather(e->nccl, d_out + (r * n + half) * esz, d_in + W * half * esz,
                                 n - half, dt, e->s));
    CHECK_OK(zoe_comm_group_end(e->nccl, e->s));
    down(e, got, d_in, big);
    int bad = 0;
    for (size_t q = 0; q < W; q++) {
        bad += memcmp(got + q * half * esz, want + q * n * esz, half * esz) != 0;
        bad += memcmp(got + (W * half + q * (n - half)) * esz, want + (q * n + half) * esz,
                      (n - half) * esz) != 0;
    }
    CHECK(bad == 0, "grouped all_gather %s n=%zu: %d blocks differ", zoe_dtype_name(dt), n, bad);
}

static void run_size(env *e, size_t n, uint64_t seed) {
    const size_t W = (size_t)e->world, r = (size_t)e->rank;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        const zoe_dtype dt = dtypes[k];
        const size_t esz = zoe_dtype_size(dt), big = n * W * esz;
        char *in = malloc(big), *want = malloc(big), *got = malloc(big);
        char *d_in = dev_alloc(e, big), *d_out = dev_alloc(e, big);
        for (int o = 0; o < 2; o++) {
            const zoe_reduce_op op = o ? ZOE_REDUCE_MAX : ZOE_REDUCE_SUM;
            /* all-reduce */
            test_fill_rank_input(dt, e->rank, n, seed, in);
            double *mag = magnitudes(dt, n, 0, n, seed, e->world);
            CHECK_OK(zoe_comm_all_reduce(e->mpi, in, want, n, dt, op, NULL));
            up(e, d_in, in, n * esz);
            CHECK_OK(zoe_memset_async(d_out, 0xff, n * esz, e->s));
            CHECK_OK(zoe_comm_all_reduce(e->nccl, d_in, d_out, n, dt, op, e->s));
            down(e, got, d_out, n * esz);
            compare(e, dt, op, got, want, mag, n, "all_reduce");
            CHECK_OK(zoe_comm_all_reduce(e->nccl, d_in, d_in, n, dt, op, e->s));
            down(e, got, d_in, n * esz);
            compare(e, dt, op, got, want, mag, n, "all_reduce in-place");
            free(mag);
            /* reduce-scatter: block r of the n * W input */
            test_fill_rank_input(dt, e->rank, n * W, seed + 1, in);
            mag = magnitudes(dt, n * W, n * r, n, seed + 1, e->world);
            CHECK_OK(zoe_comm_reduce_scatter(e->mpi, in, want, n, dt, op, NULL));
            up(e, d_in, in, big);
            CHECK_OK(zoe_memset_async(d_out, 0xff, n * esz, e->s));
            CHECK_OK(zoe_comm_reduce_scatter(e->nccl, d_in, d_out, n, dt, op, e->s));
            down(e, got, d_out, n * esz);
            compare(e, dt, op, got, want, mag, n, "reduce_scatter");
            CHECK_OK(zoe_comm_reduce_scatter(e->nccl, d_in, d_in + n * r * esz, n, dt, op, e->s));
            down(e, got, d_in + n * r * esz, n * esz);
            compare(e, dt, op, got, want, mag, n, "reduce_scatter in-place");
            free(mag);
        }
        /* all-gather, out of place and in place: exact */
        test_fill_rank_input(dt, e->rank, n, seed + 2, in);
        CHECK_OK(zoe_comm_all_gather(e->mpi, in, want, n, dt, NULL));
        up(e, d_in, in, n * esz);
        CHECK_OK(zoe_memset_async(d_out, 0xff, big, e->s));
        CHECK_OK(zoe_comm_all_gather(e->nccl, d_in, d_out, n, dt, e->s));
        down(e, got, d_out, big);
        CHECK(memcmp(got, want, big) == 0, "all_gather %s n=%zu", zoe_dtype_name(dt), n);
        CHECK_OK(zoe_memset_async(d_out, 0xff, big, e->s));
        up(e, d_out + r * n * esz, in, n * esz);
        CHECK_OK(zoe_comm_all_gather(e->nccl, d_out + r * n * esz, d_out, n, dt, e->s));
        down(e, got, d_out, big);
        CHECK(memcmp(got, want, big) == 0, "all_gather in-place %s n=%zu", zoe_dtype_name(dt), n);
        if (n >= 2) grouped_all_gather(e, dt, n, in, want, got, d_in, d_out);
        /* broadcast from the last rank: exact */
        test_fill_rank_input(dt, e->rank, n, seed + 3, in);
        memcpy(want, in, n * esz);
        CHECK_OK(zoe_comm_broadcast(e->mpi, want, n, dt, e->world - 1, NULL));
        up(e, d_in, in, n * esz);
        CHECK_OK(zoe_comm_broadcast(e->nccl, d_in, n, dt, e->world - 1, e->s));
        down(e, got, d_in, n * esz);
        CHECK(memcmp(got, want, n * esz) == 0, "broadcast %s n=%zu", zoe_dtype_name(dt), n);
        zoe_device_free(e->dev, d_in), zoe_device_free(e->dev, d_out);
        free(in), free(want), free(got);
    }
}

/* Two communicators (a split of the world, as TP, and the world, as DP) on two streams of one
 * GPU, collectives issued alternately with no synchronisation between them: the ordering of
 * runtime/comm_nccl_cuda.c must keep this from deadlocking (ctest's timeout would fail it),
 * and every result must be right. */
static void two_communicators(env *e) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, e->rank % 2, e->rank, &half);
    zoe_comm *tp = NULL;
    zoe_stream *copy = NULL;
    if (!CHECK_OK(zoe_comm_create_nccl(half, e->dev, &tp))) return;
    CHECK_OK(zoe_stream_create(e->dev, &copy));
    enum { N = 1 << 16, ROUNDS = 40 };
    float *host = malloc(2 * N * sizeof(float));
    float *a = dev_alloc(e, N * sizeof(float)), *b = dev_alloc(e, N * sizeof(float));
    for (int i = 0; i < 2 * N; i++) host[i] = (float)e->rank;
    up(e, a, host, N * sizeof(float));
    CHECK_OK(zoe_memcpy_async(b, host, N * sizeof(float), ZOE_COPY_HOST_TO_DEVICE, copy));
    CHECK_OK(zoe_stream_synchronize(e->s));
    CHECK_OK(zoe_stream_synchronize(copy));
    for (int round = 0; round < ROUNDS; round++) {
        CHECK_OK(zoe_comm_all_reduce(tp, a, a, N, ZOE_F32, ZOE_REDUCE_MAX, e->s));
        CHECK_OK(zoe_comm_all_reduce(e->nccl, b, b, N, ZOE_F32, ZOE_REDUCE_MAX, copy));
    }
    CHECK_OK(zoe_memcpy_async(host, a, N * sizeof(float), ZOE_COPY_DEVICE_TO_HOST, e->s));
    CHECK_OK(zoe_memcpy_async(host + N, b, N * sizeof(float), ZOE_COPY_DEVICE_TO_HOST, copy));
    CHECK_OK(zoe_stream_synchronize(e->s));
    CHECK_OK(zoe_stream_synchronize(copy));
    /* the highest rank of this rank's parity, and the highest rank */
    const float want_tp = (float)(e->world - 1 - (e->world - 1 - e->rank) % 2);
    const float want_dp = (float)(e->world - 1);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += (host[i] != want_tp) + (host[N + i] != want_dp);
    CHECK(bad == 0, "two communicators on two streams: %d wrong", bad);
    CHECK_OK(zoe_comm_barrier(tp, e->s));
    zoe_device_free(e->dev, a), zoe_device_free(e->dev, b);
    free(host);
    zoe_stream_destroy(copy);
    zoe_comm_destroy(tp);
    MPI_Comm_free(&half);
}

/* The memory limit on a GPU: by default the GPU's memory (cudaMemGetInfo's total, against
 * cudaGetDeviceProperties' here); more than that refused; under a limit of what is held plus
 * 64 MiB, 48 MiB is allocated and 32 MiB more refused without changing the count, while 128 MiB
 * of page-locked host memory does not count. */
static void check_limit(zoe_device *dev, int ordinal) {
    zoe_gpu_info gpu;
    if (!CHECK_OK(zoe_gpu_info_of(ordinal, &gpu))) return;
    const size_t total = zoe_device_memory_limit(dev), mib = (size_t)1 << 20;
    CHECK((double)total == gpu.memory_bytes, "default limit %zu bytes, the GPU has %.0f", total,
          gpu.memory_bytes);
    CHECK(zoe_device_set_memory_limit(dev, total + 1) == ZOE_ERR_INVALID_ARGUMENT &&
              strstr(zoe_last_error(), "is more than GPU"),
          "a limit above the GPU's memory refused: %s", zoe_last_error());
    zoe_memory_stats m;
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    const size_t held = m.device_bytes;
    CHECK_OK(zoe_device_set_memory_limit(dev, held + 64 * mib));
    void *a = NULL, *b = NULL, *pinned = NULL;
    CHECK_OK(zoe_device_alloc_for(dev, 48 * mib, "the first buffer", &a));
    CHECK(zoe_device_alloc_for(dev, 32 * mib, "the second buffer", &b) == ZOE_ERR_OUT_OF_MEMORY &&
              b == NULL && strstr(zoe_last_error(), "for the second buffer would need"),
          "32 MiB past the limit refused: %s", zoe_last_error());
    CHECK_OK(zoe_host_alloc(dev, 128 * mib, &pinned));
    CHECK_OK(zoe_device_memory_stats(dev, &m));
    CHECK(m.device_bytes == held + 48 * mib, "held %zu, want %zu", m.device_bytes, held + 48 * mib);
    zoe_host_free(dev, pinned);
    zoe_device_free(dev, a);
    CHECK_OK(zoe_device_set_memory_limit(dev, 0));
    CHECK(zoe_device_memory_limit(dev) == total, "0 restores the GPU's memory");
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    if (test_skip_without_gpus("test_device_cuda")) return 77;
    env e = {.rank = test_rank(), .world = test_world_size()};
    CHECK_OK(zoe_device_create(ZOE_BACKEND_CUDA, test_gpu_ordinal(), &e.dev));
    check_limit(e.dev, test_gpu_ordinal());
    CHECK_OK(zoe_stream_create(e.dev, &e.s));
    CHECK_OK(zoe_comm_create_mpi(MPI_COMM_WORLD, &e.mpi));
    if (CHECK_OK(zoe_comm_create_for_device(MPI_COMM_WORLD, e.dev, &e.nccl))) {
        CHECK(strcmp(zoe_comm_backend_name(e.nccl), "nccl") == 0, "nccl backend");
        const size_t sizes[] = {1, 1001, (size_t)1 << 18};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) run_size(&e, sizes[i], 31 + i);
        CHECK_OK(zoe_comm_barrier(e.nccl, e.s));
        two_communicators(&e);
        zoe_comm_destroy(e.nccl);
    }
    zoe_comm_destroy(e.mpi);
    zoe_stream_destroy(e.s);
    zoe_device_destroy(e.dev);
    return test_finish("test_device_cuda");
}
