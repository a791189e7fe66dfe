#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include "testing.h"

static int failures, checks;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void test_rng_seed(test_rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t test_rng_next(test_rng *rng) {
    uint64_t *s = rng->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return result;
}

double test_rng_uniform(test_rng *rng) {
    return (double)(test_rng_next(rng) >> 11) * 0x1p-53;
}

double test_rng_normal(test_rng *rng) {
    double u1 = test_rng_uniform(rng), u2 = test_rng_uniform(rng);
    return sqrt(-2.0 * log(u1 + 1e-300)) * cos(2.0 * 3.14159265358979323846 * u2);
}

int64_t test_rng_int(test_rng *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)(test_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

void test_fill_uniform(test_rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)test_rng_uniform(rng);
}

void test_fill_rank_input(zoe_dtype dt, int r, size_t n, uint64_t seed, void *out) {
    test_rng rng;
    test_rng_seed(&rng, seed * 1000003u + (uint64_t)r);
    for (size_t i = 0; i < n; i++) {
        double v = test_rng_uniform(&rng) * 4.0 - 2.0;
        if (dt == ZOE_I32)
            ((int32_t *)out)[i] = (int32_t)test_rng_int(&rng, -1000, 1000);
        else if (dt == ZOE_F32)
            ((float *)out)[i] = (float)v;
        else if (dt == ZOE_BF16)
            ((uint16_t *)out)[i] = zoe_f32_to_bf16((float)v);
        else
            ((uint16_t *)out)[i] = zoe_f32_to_f16((float)v);
    }
}

double test_get(zoe_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case ZOE_F32:
        return ((const float *)p)[i];
    case ZOE_BF16:
        return zoe_bf16_to_f32(((const uint16_t *)p)[i]);
    case ZOE_F16:
        return zoe_f16_to_f32(((const uint16_t *)p)[i]);
    default:
        return ((const int32_t *)p)[i];
    }
}

void test_init(int *argc, char ***argv) {
    int started = 0;
    MPI_Initialized(&started);
    if (!started) MPI_Init(argc, argv);
}

int test_rank(void) {
    int r = 0, started = 0;
    MPI_Initialized(&started); /* a test's helper process without MPI is rank 0 */
    if (started) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int test_world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

int test_sanitized(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 1;
#else
    return 0;
#endif
#else
    return 0;
#endif
}

void test_check(int cond, const char *file, int line, const char *fmt, ...) {
    checks++;
    if (cond) return;
    failures++;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL rank %d %s:%d: %s\n", test_rank(), file, line, msg);
}

int test_check_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what, const char *file, int line) {
    size_t worst = 0, bad = 0;
    double worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * fabs(want[i]);
        double err = fabs(got[i] - want[i]);
        if (!(err <= tol)) bad++; /* NaN counts as bad */
        double excess = isnan(err) ? INFINITY : err - tol;
        if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    test_check(bad == 0, file, line,
               "%s: %zu of %zu elements out of tolerance (atol %.3g, rtol %.3g); worst [%zu] got "
               "%.9g want %.9g",
               what, bad, n, atol, rtol, worst, n ? got[worst] : 0.0, n ? want[worst] : 0.0);
    return bad == 0;
}

int test_check_ok(zoe_status st, const char *call, const char *file, int line) {
    test_check(st == ZOE_OK, file, line, "%s returned %s: %s", call, zoe_status_string(st),
               zoe_last_error());
    return st == ZOE_OK;
}

unsigned long long test_file_size_limit(unsigned long long bytes) {
    struct rlimit lim;
    getrlimit(RLIMIT_FSIZE, &lim);
    unsigned long long before = lim.rlim_cur;
    lim.rlim_cur = (rlim_t)bytes;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    return before;
}

int test_failures(void) {
    return failures;
}

int test_finish(const char *name) {
    int total_fail = 0, total_checks = 0;
    MPI_Allreduce(&failures, &total_fail, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&checks, &total_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (test_rank() == 0)
        printf("%s (%d ranks): %d checks, %d failed\n", name, test_world_size(), total_checks,
               total_fail);
    MPI_Finalize();
    return total_fail == 0 ? 0 : 1;
}

int test_gpu_ordinal(void) {
    zoe_gpu_choice c;
    return zoe_gpu_choose(MPI_COMM_WORLD, &c) == ZOE_OK ? c.ordinal : -1;
}

int test_skip_without_gpus(const char *name) {
    zoe_gpu_choice c;
    if (zoe_gpu_choose(MPI_COMM_WORLD, &c) == ZOE_OK) return 0;
    if (test_rank() == 0) printf("%s: skipped: %s\n", name, zoe_last_error());
    MPI_Finalize();
    return 1;
}
