/* Shared by the MPI benchmarks of bench/: abort every rank on a failed call, and the median of
 * the iterations' times. */
#ifndef ZOE_BENCH_UTIL_H
#define ZOE_BENCH_UTIL_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "zoe/status.h"

#define DIE_IF(st)                                                                                 \
    do {                                                                                           \
        zoe_status s_ = (st);                                                                      \
        if (s_ != ZOE_OK) {                                                                        \
            fprintf(stderr, "%s: %s failed: %s\n", __FILE__, #st, zoe_last_error());               \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
