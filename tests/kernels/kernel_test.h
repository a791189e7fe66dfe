/* Helpers shared by the kernel tests: a CPU context, float64 host copies of storage buffers
 * (inputs rounded to the storage dtype first, so the float64 reference sees exactly what the
 * kernel sees), NaN poisoning, per-element tolerances, and central finite differences. */
#ifndef ZOE_TESTS_KERNEL_TEST_H
#define ZOE_TESTS_KERNEL_TEST_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"
#include "testing.h"

typedef struct kt_env {
    zoe_device *dev;
    zoe_stream *stream;
    zoe_kernels *k;
} kt_env;

/* A CPU context planned for plan whose ops run on `threads` OpenMP threads (the test fails when
 * it cannot be created). Tests use more threads than ctest's OMP_NUM_THREADS=1 so that the
 * parallel partitions (tiles, row blocks, partial sums) are exercised. */
void kt_setup(kt_env *env, const zoe_kernel_plan *plan, int threads);
void kt_teardown(kt_env *env);

/* Unit roundoff of fp32 (2^-24) and of bf16 (2^-8): the relative error of one rounding. */
#define KT_U32 0x1p-24
#define KT_U16 0x1p-8
double kt_unit(zoe_dtype dt);

double *kt_vec(size_t n); /* calloc'd float64, freed with free() */
/* n values uniform in [lo, hi), never exactly zero. */
double *kt_random(test_rng *rng, size_t n, double lo, double hi);
/* A storage buffer of n elements in dt holding vals; vals is rounded to dt in place. */
void *kt_to_storage(zoe_dtype dt, double *vals, size_t n);
/* A storage buffer of n elements filled with NaN. */
void *kt_poisoned(zoe_dtype dt, size_t n);
void kt_from_storage(double *out, const void *buf, zoe_dtype dt, size_t n);
/* float64 copy of a storage buffer (freed with free()). */
double *kt_read(const void *buf, zoe_dtype dt, size_t n);

/* The largest |x[i]|, and a calloc'd vector of n copies of v (a uniform tolerance). */
double kt_max_abs(const double *x, size_t n);
double *kt_const_tol(size_t n, double v);

/* |got - want| <= abs_tol[i] (NULL: 0) + rel * |want| for every i; NaN fails. Prints the worst
 * element on failure. */
int kt_check(const double *got, const double *want, const double *abs_tol, double rel, size_t n,
             const char *what);
/* Same for a buffer in storage dtype dt. */
int kt_check_storage(const void *got, zoe_dtype dt, const double *want, const double *abs_tol,
                     double rel, size_t n, const char *what);

/* Central finite difference of f at x[i]: (f(x + h e_i) - f(x - h e_i)) / 2h, h relative to
 * |x[i]|, f evaluated in float64. */
typedef double (*kt_scalar_fn)(void *ctx);
double kt_fd(kt_scalar_fn f, void *ctx, double *x, size_t i);
/* Checks grad[i] against kt_fd at `samples` random entries (all when n <= samples), to
 * relative 1e-6 of the larger of |grad| and scale. */
void kt_check_fd(test_rng *rng, kt_scalar_fn f, void *ctx, double *x, const double *grad, size_t n,
                 size_t samples, double scale, const char *what);

#endif
