/* The safetensors format, the one reader and writer of it in zoe (checkpoints, Hugging Face
 * export and import): an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"key": "value"}}, then the data section, whose byte offsets the header
 * gives relative to its start. A valid file's tensors tile the data section exactly: sorted by
 * offset, each begins where the previous ends, and each holds numel x dtype size bytes.
 *
 * The header is built and parsed in memory, so that MPI ranks can compute the same header
 * independently and write the data section collectively (engine/checkpoint/mpi_io.c); the
 * small-file helpers below read and write whole files with plain POSIX calls.
 *
 * Explained in docs/checkpoint.md, "Files". */
#ifndef ZOE_ENGINE_SAFETENSORS_H
#define ZOE_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "zoe/dtype.h"
#include "zoe/status.h"

typedef enum zoe_st_dtype {
    ZOE_ST_BOOL = 0,
    ZOE_ST_U8,
    ZOE_ST_I8,
    ZOE_ST_I16,
    ZOE_ST_U16,
    ZOE_ST_F16,
    ZOE_ST_BF16,
    ZOE_ST_I32,
    ZOE_ST_U32,
    ZOE_ST_F32,
    ZOE_ST_I64,
    ZOE_ST_U64,
    ZOE_ST_F64,
    ZOE_ST_DTYPE_COUNT
} zoe_st_dtype;

/* "F32", "BF16" ... as the format spells them. */
const char *zoe_st_dtype_name(zoe_st_dtype dtype);
size_t zoe_st_dtype_size(zoe_st_dtype dtype);
zoe_status zoe_st_dtype_parse(const char *name, zoe_st_dtype *out);
/* zoe's dtype of an F32, BF16 or F16 tensor (any other: ZOE_F32, which callers refuse before),
 * and the safetensors dtype of zoe's fp32, bf16 or fp16. */
zoe_dtype zoe_st_dtype_to_zoe(zoe_st_dtype dtype);
zoe_st_dtype zoe_st_dtype_from_zoe(zoe_dtype dtype);

#define ZOE_ST_MAX_DIMS 8
/* Headers longer than this are refused (the reference implementation's limit). */
#define ZOE_ST_MAX_HEADER ((uint64_t)100 << 20)
/* The data section starts at a multiple of this (the header is padded with spaces). */
#define ZOE_ST_ALIGN 8

typedef struct zoe_st_tensor {
    char *name;
    zoe_st_dtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[ZOE_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
} zoe_st_tensor;

typedef struct zoe_st_meta {
    char *key, *value;
} zoe_st_meta;

/* A file's table of contents. Tensors are kept in the order they were added or, for a parsed
 * file, in the order of their data offsets. */
typedef struct zoe_safetensors {
    zoe_st_tensor *tensors;
    int count, capacity;
    zoe_st_meta *meta;
    int meta_count;
    uint64_t data_offset; /* file offset of the data section: 8 + header length */
    uint64_t data_size;   /* bytes of the data section */
} zoe_safetensors;

void zoe_safetensors_init(zoe_safetensors *st);
void zoe_safetensors_free(zoe_safetensors *st);

/* Appends a tensor placed right after the previous one. shape may be NULL when ndim is 0. */
zoe_status zoe_safetensors_add(zoe_safetensors *st, const char *name, zoe_st_dtype dtype, int ndim,
                               const int64_t *shape);
/* Adds or replaces a __metadata__ string. */
zoe_status zoe_safetensors_set_meta(zoe_safetensors *st, const char *key, const char *value);
/* The value of a __metadata__ key, or NULL. */
const char *zoe_safetensors_meta(const zoe_safetensors *st, const char *key);

/* The tensor of that name, or NULL. */
const zoe_st_tensor *zoe_safetensors_find(const zoe_safetensors *st, const char *name);
int64_t zoe_st_tensor_numel(const zoe_st_tensor *t);

/* The file's first data_offset bytes: the length prefix and the JSON, padded with spaces so
 * that data_offset is a multiple of ZOE_ST_ALIGN. Deterministic: the same table gives the same
 * bytes on every rank. *out is malloc'ed; sets st->data_offset. */
zoe_status zoe_safetensors_header(zoe_safetensors *st, char **out, size_t *len);

/* Parses and validates a header: prefix holds the file's first prefix_len bytes (at least
 * 8 + N), file_size is the file's length, what names the file in messages. Checks the length
 * prefix against the file, the JSON, every entry's keys, dtype, shape and offsets, that the
 * tensors tile the data section to the file's end, and that names are unique. */
zoe_status zoe_safetensors_parse(const void *prefix, size_t prefix_len, uint64_t file_size,
                                 const char *what, zoe_safetensors *out);
/* Opens path, reads and parses its header. */
zoe_status zoe_safetensors_read_header(const char *path, zoe_safetensors *out);
/* Reads count bytes of tensor t's data starting at byte offset within it. */
zoe_status zoe_safetensors_read_data(const char *path, const zoe_safetensors *st,
                                     const zoe_st_tensor *t, uint64_t offset, uint64_t count,
                                     void *dst);
/* Writes a whole file: the header of st, then data[i] (st->tensors[i]'s bytes) for each
 * tensor, into path (created or truncated) and fsyncs it. For files small enough to hold in
 * memory tensor by tensor (exports, tests); checkpoints write collectively instead. */
zoe_status zoe_safetensors_write_file(const char *path, zoe_safetensors *st,
                                      const void *const *data);
/* The same with each tensor's bytes produced on demand: fill(user, i, dst) writes tensor i's
 * bytes into dst (one buffer, reused, of the largest tensor's size), so only one tensor is in
 * memory at a time. */
typedef zoe_status (*zoe_st_fill)(void *user, int index, void *dst);
zoe_status zoe_safetensors_write_stream(const char *path, zoe_safetensors *st, zoe_st_fill fill,
                                        void *user);

#endif
