/* Internal: recording failures. zoe_fail() stores the message for zoe_last_error() and returns
 * the status so a failing path reads `return zoe_fail(ZOE_ERR_..., "tp=%d ...", tp);`.
 *
 * Explained in docs/architecture.md, "Where errors go". */
#ifndef ZOE_RUNTIME_ERROR_H
#define ZOE_RUNTIME_ERROR_H

#include <stddef.h>
#include "zoe/log.h"
#include "zoe/status.h"

zoe_status zoe_fail(zoe_status status, const char *fmt, ...) ZOE_PRINTF(2, 3);
void zoe_clear_error(void);
/* An MPI call returned code (not MPI_SUCCESS): ZOE_ERR_MPI with "<what> failed: <the MPI
 * library's MPI_Error_string for the code>". */
zoe_status zoe_fail_mpi(int code, const char *what);

/* The first failure among the workers of a parallel region (OpenMP threads keep their own
 * last error): a worker whose call failed records the status and its message; after the region
 * the caller raises it on its own thread, so the caller's message says what went wrong. */
typedef struct zoe_worker_error {
    zoe_status status; /* ZOE_OK until a worker records a failure */
    char message[512];
} zoe_worker_error;

/* On the failing worker, right after the call: keeps the first status and zoe_last_error(). */
void zoe_worker_error_record(zoe_worker_error *e, zoe_status status);
/* After the region: ZOE_OK, or the first failure as "<what>: <worker's message>". */
zoe_status zoe_worker_error_raise(const zoe_worker_error *e, const char *what);

/* A caller's versioned struct (its struct_size and api_version, as its headers set them) against
 * this library's: ZOE_OK, or ZOE_ERR_INVALID_ARGUMENT naming the struct and both versions. */
zoe_status zoe_check_struct_version(const char *type, size_t caller_size, int caller_version,
                                    size_t library_size);

/* Propagates a failing status from a call whose own message is already recorded. */
#define ZOE_TRY(expr)                                                                              \
    do {                                                                                           \
        zoe_status zoe_try_status_ = (expr);                                                       \
        if (zoe_try_status_ != ZOE_OK) return zoe_try_status_;                                     \
    } while (0)

#endif
