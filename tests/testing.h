/* Test helpers: a seeded generator for random inputs, checks that print what failed, and the
 * MPI start-up every test shares. A test returns test_finish(), which is 0 only when no check
 * failed on any rank. */
#ifndef ZOE_TESTING_H
#define ZOE_TESTING_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "zoe/zoe.h"

/* xoshiro256** seeded by splitmix64: reproducible across ranks and runs. */
typedef struct test_rng {
    uint64_t s[4];
} test_rng;

void test_rng_seed(test_rng *rng, uint64_t seed);
uint64_t test_rng_next(test_rng *rng);
double test_rng_uniform(test_rng *rng);                      /* [0, 1) */
double test_rng_normal(test_rng *rng);                       /* N(0, 1) */
int64_t test_rng_int(test_rng *rng, int64_t lo, int64_t hi); /* [lo, hi] */
void test_fill_uniform(test_rng *rng, float *x, size_t n, float lo, float hi);
/* Collective tests: rank r's n inputs in dtype (fp32, bf16, fp16 uniform in [-2, 2), exactly
 * representable; int32 in [-1000, 1000]), the same on every rank that asks for rank r; and
 * element i of a dtype buffer as a double. */
void test_fill_rank_input(zoe_dtype dt, int r, size_t n, uint64_t seed, void *out);
double test_get(zoe_dtype dt, const void *p, size_t i);

/* Starts MPI (when not yet started) and reads the rank; every test calls it first. */
void test_init(int *argc, char ***argv);
int test_rank(void);
int test_world_size(void);
/* 1 in a build with AddressSanitizer or ThreadSanitizer (scripts/sanitize). A long test whose
 * cases repeat the same code with other numbers runs a subset there that still reaches every
 * code path; scripts/test's build runs and checks every case. */
int test_sanitized(void);

/* GPU tests: whether every rank has a GPU of its own that this build has code for
 * (zoe_gpu_choose: NCCL refuses two ranks on one GPU, "duplicate GPU"). When not, on every rank
 * alike, rank 0 prints why, MPI is finalised and the test returns 77 (ctest: skipped):
 *     if (test_skip_without_gpus("name")) return 77;
 * test_gpu_ordinal() is then the rank's GPU (collective, as zoe_gpu_choose). */
int test_skip_without_gpus(const char *name);
int test_gpu_ordinal(void);

/* A full disk without privileges: this process's files cannot grow past bytes (RLIMIT_FSIZE's
 * soft limit; a write or a reservation past it fails with EFBIG as a full disk's fails with
 * ENOSPC, and SIGXFSZ is ignored). Returns the limit before, which a second call restores. */
unsigned long long test_file_size_limit(unsigned long long bytes);

/* Records a failure (printed with file:line and rank) when cond is false. */
#define CHECK(cond, ...) test_check((cond), __FILE__, __LINE__, __VA_ARGS__)
void test_check(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* |got - want| <= atol + rtol * |want| for every element; prints the worst element. */
#define CHECK_CLOSE(got, want, n, atol, rtol, what)                                                \
    test_check_close((got), (want), (n), (atol), (rtol), (what), __FILE__, __LINE__)
int test_check_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what, const char *file, int line);
/* Checks a zoe call returned ZOE_OK; prints zoe_last_error() otherwise. */
#define CHECK_OK(call) test_check_ok((call), #call, __FILE__, __LINE__)
int test_check_ok(zoe_status st, const char *call, const char *file, int line);
int test_failures(void);

/* Reduces failures over all ranks, prints "<name>: N passed, N failed" on rank 0, finalises MPI
 * and returns the process exit code. */
int test_finish(const char *name);

#endif
