/* Status codes and the per-thread last error message. Every public function returns a
 * zoe_status; on failure the calling thread's last error names the bad value.
 *
 * Explained in docs/architecture.md, "Where errors go"; docs/library.md. */
#ifndef ZOE_STATUS_H
#define ZOE_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the public structs' layout. Structs a caller fills (zoe_train_config,
 * zoe_optimizer_config) carry the size and this version of the headers they were built with,
 * so that a library of another version refuses them with a message instead of misreading. */
#define ZOE_API_VERSION 1
/* The first two fields of every versioned struct's initializer. */
#define ZOE_STRUCT_VERSION(type) .struct_size = sizeof(type), .api_version = ZOE_API_VERSION

typedef enum zoe_status {
    ZOE_OK = 0,
    ZOE_ERR_INVALID_ARGUMENT, /* a value out of range or inconsistent with others */
    ZOE_ERR_OUT_OF_MEMORY,    /* host or device allocation failed */
    ZOE_ERR_MPI,              /* an MPI call failed */
    ZOE_ERR_CUDA,             /* a CUDA runtime or cuBLAS call failed */
    ZOE_ERR_NCCL,             /* an NCCL call failed */
    ZOE_ERR_IO,               /* a file could not be opened, read or written */
    ZOE_ERR_UNSUPPORTED,      /* valid request that this build or backend cannot do */
    ZOE_ERR_INTERNAL,         /* a broken invariant: a bug in zoe */
} zoe_status;

/* A static English name for a status code ("invalid argument"). */
const char *zoe_status_string(zoe_status status);

/* The message of the last failure on the calling thread ("tp=3 does not divide world size 8"),
 * or "" when none. Valid until the thread's next failing call. */
const char *zoe_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
