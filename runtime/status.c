/* Status codes, the per-thread last error, struct-version checks, MPI errors and the errors of
 * OpenMP workers carried back to the calling thread.
 *
 * Explained in docs/architecture.md, "Where errors go". */
#include <stdarg.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "runtime/error.h"

/* Per-thread so that concurrent callers (the DPU host thread, OpenMP workers) never read each
 * other's message. Part of the logger's process-wide state. */
static _Thread_local char last_error[512];

const char *zoe_status_string(zoe_status status) {
    switch (status) {
    case ZOE_OK:
        return "ok";
    case ZOE_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case ZOE_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case ZOE_ERR_MPI:
        return "MPI error";
    case ZOE_ERR_CUDA:
        return "CUDA error";
    case ZOE_ERR_NCCL:
        return "NCCL error";
    case ZOE_ERR_IO:
        return "I/O error";
    case ZOE_ERR_UNSUPPORTED:
        return "unsupported";
    case ZOE_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

const char *zoe_last_error(void) {
    return last_error;
}

void zoe_clear_error(void) {
    last_error[0] = '\0';
}

zoe_status zoe_fail(zoe_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    /* Every allocation failure says so in the same words, whatever the call site wrote. */
    static const char oom[] = "out of memory: ";
    const size_t p = sizeof oom - 1;
    if (status == ZOE_ERR_OUT_OF_MEMORY && strncmp(last_error, oom, p - 2) != 0) {
        size_t len = strlen(last_error);
        if (len > sizeof last_error - 1 - p) len = sizeof last_error - 1 - p;
        memmove(last_error + p, last_error, len);
        last_error[p + len] = '\0';
        memcpy(last_error, oom, p);
    }
    zoe_log(ZOE_LOG_DEBUG, "%s: %s", zoe_status_string(status), last_error);
    return status;
}

zoe_status zoe_check_struct_version(const char *type, size_t caller_size, int caller_version,
                                    size_t library_size) {
    if (caller_size == library_size && caller_version == ZOE_API_VERSION) return ZOE_OK;
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                    "%s: struct_size %zu and api_version %d are not this library's %zu and %d: "
                    "start it from its _INITIALIZER or its defaults function, built against this "
                    "zoe's headers",
                    type, caller_size, caller_version, library_size, ZOE_API_VERSION);
}

zoe_status zoe_fail_mpi(int code, const char *what) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", code);
    return zoe_fail(ZOE_ERR_MPI, "%s failed: %s", what, text);
}

void zoe_worker_error_record(zoe_worker_error *e, zoe_status status) {
    if (status == ZOE_OK) return;
#pragma omp critical(zoe_worker_error)
    if (e->status == ZOE_OK) {
        e->status = status;
        snprintf(e->message, sizeof e->message, "%s", last_error);
    }
}

zoe_status zoe_worker_error_raise(const zoe_worker_error *e, const char *what) {
    if (e->status == ZOE_OK) return ZOE_OK;
    return zoe_fail(e->status, "%s: %s", what, e->message);
}
