/* Internal: the one clock every layer times its work with (monotonic, wall time).
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_RUNTIME_CLOCK_H
#define ZOE_RUNTIME_CLOCK_H

#include <time.h>

static inline double zoe_clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double zoe_clock_ms(void) {
    return 1e3 * zoe_clock_seconds();
}

#endif
