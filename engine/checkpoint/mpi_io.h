/* Internal to engine/: collective MPI-IO of one safetensors file whose tensors are in global
 * layout, each rank moving its own pieces, and the grid-independent per-tensor checksum.
 *
 * A rank's share of a file is a list of runs, each a stretch of consecutive global elements of
 * one tensor that is also consecutive in the rank's memory (its optimizer partition or its
 * parameter buffer). Runs are moved in rounds through one bounded staging buffer: each round is
 * a file view (an hindexed type of the round's runs) and one MPI_File_write_all / read_all, so
 * no rank ever holds more than the staging buffer besides its own state.
 *
 * Explained in docs/checkpoint.md, "Writing and reading: every rank its own pieces". */
#ifndef ZOE_ENGINE_CHECKPOINT_IO_H
#define ZOE_ENGINE_CHECKPOINT_IO_H

#include <mpi.h>
#include <stdint.h>
#include "engine/formats/safetensors.h"
#include "zoe/device.h"
#include "zoe/optimizer.h"

/* Where a run's elements live on this rank. */
typedef enum ckpt_source {
    CKPT_MASTER = 0,            /* the optimizer partition's fp32 master weights */
    CKPT_EXP_AVG = 1,           /* ... Adam's first moment */
    CKPT_EXP_AVG_SQ = 2,        /* ... Adam's second moment */
    CKPT_PARAMS = 3,            /* the device parameter buffer (compute dtype) */
    CKPT_EXP_AVG_SCALES = 4,    /* an int8 first moment's block scales (mem: partition blocks) */
    CKPT_EXP_AVG_SQ_SCALES = 5, /* ... second moment's */
} ckpt_source;

/* The int8 moments of one file tensor whose codes are requantised on load (the file's blocks are
 * another grid's, or this run holds the moment in another dtype): the blocks' scales as the
 * file stores them, [shards, blocks] (blocks counted per TP shard at the TP that wrote it), and
 * each shard's place in the global tensor. */
typedef struct ckpt_int8_blocks {
    float *scales;        /* [shards * blocks], NULL: the codes move as they are */
    int shards, is_v;     /* is_v: the second moment's codes (uint8) */
    int64_t blocks, cols; /* blocks per shard; the global tensor's columns */
    int64_t (*shard)[4];  /* [shards]: first row, rows, first column, columns */
} ckpt_int8_blocks;

typedef struct ckpt_run {
    int entry; /* index of the tensor in the file's table */
    ckpt_source source;
    uint64_t mem;  /* element offset in the partition (state) or the parameter buffer */
    uint64_t gidx; /* global element index of the first element within its tensor */
    uint64_t n;    /* elements */
    int counted;   /* 1: enters the checksum on this rank */
} ckpt_run;

typedef struct ckpt_runs {
    ckpt_run *runs;
    int count, capacity;
} ckpt_runs;

void ckpt_runs_free(ckpt_runs *r);
/* Appends a run, merging it into the previous one when both continue each other. */
zoe_status ckpt_runs_add(ckpt_runs *r, const ckpt_run *run);

/* What the rounds move between the file and this rank's memory. */
typedef struct ckpt_io {
    MPI_Comm comm;                /* every rank of the run */
    zoe_optimizer *opt;           /* state sources */
    void *params;                 /* the parameter buffer (compute dtype) */
    int params_on_host;           /* 1: it is host memory (streamed weights), else the device's */
    zoe_stream *stream;           /* orders copies to and from the parameter buffer */
    size_t round_bytes;           /* staging buffer size */
    uint64_t written;             /* bytes this rank wrote so far (the crash hook counts them) */
    const ckpt_int8_blocks *int8; /* reading: per file tensor, NULL: none requantised */
} ckpt_io;

/* The checksum of a tensor: the wrapping sum over its elements of a hash of (the tensor's
 * salt, the element's global index, its bits), so any set of ranks holding disjoint pieces
 * that cover the tensor computes the same value. */
uint64_t ckpt_salt(const char *name);
uint64_t ckpt_hash_elements(uint64_t salt, uint64_t gidx, const void *data, uint64_t n,
                            size_t elem_size);

/* Creates path, reserves its bytes (rank 0, posix_fallocate), writes table's header (rank 0)
 * and every rank's runs collectively, checking every write's count, syncs, then reads the runs
 * back and compares their checksums with the ones written. checksums[table->count] receives the
 * all-reduced checksums of the file's tensors. A failure names path, the bytes it needs and the
 * bytes free on its file system. */
zoe_status ckpt_file_write(ckpt_io *io, const char *path, zoe_safetensors *table,
                           const ckpt_runs *runs, uint64_t *checksums);
/* Reads every rank's runs from path, whose header file (parsed by the caller) gives the
 * offsets, and all-reduces the checksums of the file's tensors. */
zoe_status ckpt_file_read(ckpt_io *io, const char *path, const zoe_safetensors *file,
                          const ckpt_runs *runs, uint64_t *checksums);

/* Reads tensor entry of path (whose header is file) whole into dst, on every rank of comm. */
zoe_status ckpt_read_tensor(MPI_Comm comm, const char *path, const zoe_safetensors *file, int entry,
                            void *dst);

/* Test-only hooks, from the environment (documented in docs/checkpoint.md):
 * ZOE_CKPT_TEST_ROUND_BYTES sets the staging size (read by zoe_ckpt_round_bytes in
 * engine/config/sizing.c, where the plan counts it too), ZOE_CKPT_TEST_SLOW_MS sleeps before every
 * round, ZOE_CKPT_TEST_CRASH_AT kills the rank (SIGKILL) when its bytes written in this process
 * would pass that count in one save, ZOE_CKPT_TEST_NO_RESERVE=1 skips the reservation (so a
 * full disk is met by the writes themselves; ZOE_CKPT_TEST_NO_ROOM_CHECK, directory.h, skips
 * the room checks before), ZOE_CKPT_TEST_LOSE_WRITES=1 makes every data write report success
 * and write nothing (without collective buffering), for the read-back to find. */

#endif
