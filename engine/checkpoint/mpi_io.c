/* Collective MPI-IO of a global-layout safetensors file: rounds of (file view, write_all or
 * read_all) through one staging buffer, with the per-tensor checksums.
 *
 * Explained in docs/checkpoint.md, "Writing and reading: every rank its own pieces". */
#include "engine/checkpoint/mpi_io.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "engine/checkpoint/directory.h"
#include "kernels/adam_state.h"
#include "runtime/agree.h"
#include "runtime/error.h"

void ckpt_runs_free(ckpt_runs *r) {
    free(r->runs);
    memset(r, 0, sizeof *r);
}

zoe_status ckpt_runs_add(ckpt_runs *r, const ckpt_run *run) {
    if (run->n == 0) return ZOE_OK;
    if (r->count) {
        ckpt_run *last = &r->runs[r->count - 1];
        if (last->entry == run->entry && last->source == run->source &&
            last->counted == run->counted && last->gidx + last->n == run->gidx &&
            last->mem + last->n == run->mem) {
            last->n += run->n;
            return ZOE_OK;
        }
    }
    if (r->count == r->capacity) {
        int cap = r->capacity ? 2 * r->capacity : 256;
        ckpt_run *grown = realloc(r->runs, (size_t)cap * sizeof *grown);
        if (!grown) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checkpoint run list of %d", cap);
        r->runs = grown, r->capacity = cap;
    }
    r->runs[r->count++] = *run;
    return ZOE_OK;
}

/* murmur3's 64-bit finalizer: a bijection, so a changed input always changes the hash. */
static inline uint64_t fmix64(uint64_t z) {
    z ^= z >> 33;
    z *= 0xff51afd7ed558ccdull;
    z ^= z >> 33;
    z *= 0xc4ceb9fe1a85ec53ull;
    return z ^ (z >> 33);
}

uint64_t ckpt_salt(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then mixed */
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return fmix64(h);
}

uint64_t ckpt_hash_elements(uint64_t salt, uint64_t gidx, const void *data, uint64_t n,
                            size_t elem_size) {
    uint64_t sum = 0;
    const unsigned char *bytes = data;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (n > (1u << 16))
    for (uint64_t i = 0; i < n; i++) {
        uint32_t bits = 0;
        memcpy(&bits, bytes + i * elem_size, elem_size);
        uint64_t x = salt ^ ((gidx + i) * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)bits << 17);
        sum += fmix64(x);
    }
    return sum;
}

/* Bytes this process has written through checkpoints, for the crash hook. */
static void test_hooks(uint64_t written, uint64_t next) {
    const char *slow = getenv("ZOE_CKPT_TEST_SLOW_MS");
    if (slow) {
        long ms = atol(slow);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    const char *crash = getenv("ZOE_CKPT_TEST_CRASH_AT");
    if (crash && written + next > (uint64_t)atoll(crash)) raise(SIGKILL);
}

/* Collective buffering (two-phase I/O: aggregator ranks gather the pieces of a file domain and
 * write it whole) pays on parallel file systems with small strided pieces. On a node's own
 * disk each rank's pieces are few and large and the aggregators' exchange only costs: measured
 * on a 2-core box at 4 ranks (Open MPI 4.1, OMPIO), loading 166 MB took 14 s with
 * MPI_File_read_all and under 1 s with each rank reading its own view. So by default every
 * rank moves its pieces through its file view with MPI_File_write / read (the views are still
 * set collectively, round by round); ZOE_CKPT_COLLECTIVE_BUFFERING=1 selects
 * MPI_File_write_all / read_all, and the hints ask ROMIO and OMPIO for buffering accordingly. */
static int collective_buffering(void) {
    const char *cb = getenv("ZOE_CKPT_COLLECTIVE_BUFFERING");
    return cb && strcmp(cb, "1") == 0;
}

static MPI_Info open_hints(void) {
    int on = collective_buffering();
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "collective_buffering", on ? "true" : "false");
    MPI_Info_set(info, "romio_cb_write", on ? "enable" : "disable");
    MPI_Info_set(info, "romio_cb_read", on ? "enable" : "disable");
    return info;
}

/* " (the file needs N bytes; F bytes are free on its file system)": what a failed write of
 * path adds. */
static void room_note(const char *path, uint64_t need, char *out, size_t cap) {
    snprintf(out, cap,
             " (the file needs %" PRIu64 " bytes; %lld bytes are free on its file system)", need,
             (long long)ckpt_free_bytes(path));
}

static zoe_status mpi_fail(int rc, const char *what, const char *path, uint64_t need) {
    char msg[MPI_MAX_ERROR_STRING], room[128] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    if (need) room_note(path, need, room, sizeof room);
    return zoe_fail(ZOE_ERR_IO, "%s %s: %s%s", what, path, msg, room);
}

/* Rank 0 reserves the file's blocks before the first byte is written, so that a full disk is
 * found here, with nothing written, and not as a hole. posix_fallocate rather than
 * MPI_File_preallocate: ROMIO's generic preallocate and Open MPI's OMPIO both emulate it by
 * writing the whole range through the file (zeros, or the bytes read back), which doubles a
 * save's writes, where fallocate(2) reserves the extents in one call on ext4, XFS, tmpfs and
 * Lustre (glibc writes one byte a block where a file system lacks it, as NFS v3 does). */
static zoe_status reserve(const char *path, uint64_t bytes) {
    if (ckpt_test_hook_on("ZOE_CKPT_TEST_NO_RESERVE")) return ZOE_OK;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    int err = posix_fallocate(fd, 0, (off_t)bytes);
    close(fd);
    if (err == EINVAL || err == EOPNOTSUPP) { /* no reservation here: the checks below remain */
        zoe_log(ZOE_LOG_DEBUG, "%s: posix_fallocate: %s", path, strerror(err));
        return ZOE_OK;
    }
    if (err == 0) return ZOE_OK;
    char room[128];
    room_note(path, bytes, room, sizeof room);
    return zoe_fail(ZOE_ERR_IO, "cannot reserve the bytes of %s: %s%s", path, strerror(err), room);
}

static size_t elem_size(const zoe_safetensors *table, const ckpt_run *r) {
    return zoe_st_dtype_size(table->tensors[r->entry].dtype);
}

/* The values of an int8 moment's codes n elements of run r from skip on, through the blocks of
 * the grid that wrote them (b), written into the state to be requantised by this run's rule. */
static zoe_status requantise_run(ckpt_io *io, const ckpt_int8_blocks *b, const ckpt_run *r,
                                 uint64_t skip, uint64_t n, const void *codes) {
    float *x = malloc(n * sizeof *x);
    if (!x) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "requantising %" PRIu64 " elements", n);
    int s = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t g = (int64_t)(r->gidx + skip + i), row = g / b->cols, col = g % b->cols;
        for (int tries = 0; tries < b->shards; tries++, s = (s + 1) % b->shards) {
            const int64_t *sh = b->shard[s];
            if (row >= sh[0] && row < sh[0] + sh[1] && col >= sh[2] && col < sh[2] + sh[3]) break;
        }
        const int64_t *sh = b->shard[s];
        int64_t local = (row - sh[0]) * sh[3] + (col - sh[2]);
        const float *scale = &b->scales[s * b->blocks + local / ZOE_OPTIMIZER_INT8_BLOCK];
        zoe_status st =
            zoe_adam_moment_to_f32(ZOE_I8, b->is_v, (const char *)codes + i, scale, 0, 1, &x[i]);
        if (st != ZOE_OK) {
            free(x);
            return st;
        }
    }
    zoe_status st =
        zoe_optimizer_write_state(io->opt, (zoe_optimizer_state)r->source, r->mem + skip, n, x);
    free(x);
    return st;
}

/* Moves the run's elements between staging (in the file's dtype sdt) and this rank's memory: the
 * parameter buffer byte for byte; the optimizer state converted to and from the dtype it is held
 * in, an int8 moment's codes and scales as they are (or, reading, requantised: io->int8). */
static zoe_status move_run(ckpt_io *io, const ckpt_run *r, uint64_t skip, uint64_t n,
                           zoe_st_dtype sdt, void *staging, int to_memory) {
    size_t esz = zoe_st_dtype_size(sdt);
    if (r->source == CKPT_PARAMS && io->params_on_host) /* the partition, wherever it lives */
        return zoe_optimizer_params_copy(io->opt, r->mem + skip, n, staging, to_memory);
    if (r->source == CKPT_PARAMS) {
        char *p = (char *)io->params + (r->mem + skip) * esz;
        zoe_copy_kind kind = io->params_on_host ? ZOE_COPY_HOST_TO_HOST
                             : to_memory        ? ZOE_COPY_HOST_TO_DEVICE
                                                : ZOE_COPY_DEVICE_TO_HOST;
        ZOE_TRY(zoe_memcpy_async(to_memory ? p : staging, to_memory ? staging : p, n * esz, kind,
                                 io->stream));
        return zoe_stream_synchronize(io->stream);
    }
    int scales = r->source == CKPT_EXP_AVG_SCALES || r->source == CKPT_EXP_AVG_SQ_SCALES;
    zoe_optimizer_state which =
        scales ? (zoe_optimizer_state)(r->source - CKPT_PARAMS) : (zoe_optimizer_state)r->source;
    if (scales || sdt == ZOE_ST_I8 || sdt == ZOE_ST_U8) {
        const ckpt_int8_blocks *b = io->int8 ? &io->int8[r->entry] : NULL;
        if (to_memory && b && b->scales) return requantise_run(io, b, r, skip, n, staging);
        zoe_optimizer_held_part part = scales ? ZOE_STATE_SCALES : ZOE_STATE_CODES;
        return to_memory ? zoe_optimizer_write_held(io->opt, which, part, r->mem + skip, n, staging)
                         : zoe_optimizer_read_held(io->opt, which, part, r->mem + skip, n, staging);
    }
    zoe_dtype dt = zoe_st_dtype_to_zoe(sdt);
    return to_memory ? zoe_optimizer_write_state_as(io->opt, which, r->mem + skip, n, dt, staging)
                     : zoe_optimizer_read_state_as(io->opt, which, r->mem + skip, n, dt, staging);
}

/* What the rounds do: write memory to the file, read the file into memory, or read the file
 * back only for its checksums (after writing it). */
typedef enum round_mode { ROUND_WRITE, ROUND_READ, ROUND_VERIFY } round_mode;

typedef struct round_plan {
    int *lens;
    MPI_Aint *disps;
    int cap;
} round_plan;

static zoe_status move_rounds(ckpt_io *io, MPI_File fh, const char *path,
                              const zoe_safetensors *file, const ckpt_runs *runs, round_mode mode,
                              uint64_t *checksums) {
    const int write = mode == ROUND_WRITE;
    /* test hook: every write reports success and writes nothing, as a write lost without an
     * error would (the read-back must find it) */
    const int lose_writes = write && ckpt_test_hook_on("ZOE_CKPT_TEST_LOSE_WRITES");
    const uint64_t file_bytes = file->data_offset + file->data_size;
    size_t budget = io->round_bytes;
    int collective = collective_buffering();
    uint64_t total = 0;
    for (int i = 0; i < runs->count; i++)
        total += runs->runs[i].n * elem_size(file, &runs->runs[i]);
    long long mine = (long long)((total + budget - 1) / budget), rounds = 0;
    MPI_Allreduce(&mine, &rounds, 1, MPI_LONG_LONG, MPI_MAX, io->comm);
    /* Page-locked on a GPU: the parameter buffer's pieces copy to and from it at the link's
     * rate, without the driver staging a pageable buffer through its own. */
    zoe_device *dev = zoe_stream_device(io->stream);
    void *pinned = NULL;
    zoe_status st = zoe_host_alloc_for(dev, budget, "the checkpoint's staging buffer", &pinned);
    char *staging = st == ZOE_OK ? pinned : NULL;
    round_plan plan = {0};
    int ri = 0;
    uint64_t skip = 0; /* elements of runs[ri] already moved */
    for (long long round = 0; round < rounds; round++) {
        /* This round's pieces: whole or partial runs, until the staging buffer is full. */
        int nb = 0, first = ri;
        uint64_t first_skip = skip;
        size_t used = 0;
        while (st == ZOE_OK && ri < runs->count && used < budget) {
            const ckpt_run *r = &runs->runs[ri];
            size_t esz = elem_size(file, r);
            uint64_t n = r->n - skip, fit = (budget - used) / esz;
            if (fit == 0) break;
            if (n > fit) n = fit;
            if (nb == plan.cap) {
                plan.cap = plan.cap ? 2 * plan.cap : 256;
                int *l = realloc(plan.lens, (size_t)plan.cap * sizeof *l);
                if (l) plan.lens = l;
                MPI_Aint *d = realloc(plan.disps, (size_t)plan.cap * sizeof *d);
                if (d) plan.disps = d;
                if (!l || !d) st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "round plan");
                if (st != ZOE_OK) break;
            }
            const zoe_st_tensor *t = &file->tensors[r->entry];
            plan.disps[nb] = (MPI_Aint)(file->data_offset + t->begin + (r->gidx + skip) * esz);
            plan.lens[nb++] = (int)(n * esz);
            if (write && st == ZOE_OK)
                st = move_run(io, r, skip, n, file->tensors[r->entry].dtype, staging + used, 0);
            used += n * esz;
            skip += n;
            if (skip == r->n) ri++, skip = 0;
        }
        /* Every rank takes part in every round's collectives, failed or not, so none hangs. */
        st = zoe_agree(io->comm, st);
        if (st != ZOE_OK) break;
        if (write) test_hooks(io->written, used);
        MPI_Datatype view = MPI_BYTE;
        if (nb) {
            MPI_Type_create_hindexed(nb, plan.lens, plan.disps, MPI_BYTE, &view);
            MPI_Type_commit(&view);
        }
        int rc = MPI_File_set_view(fh, 0, MPI_BYTE, view, "native", MPI_INFO_NULL);
        MPI_Status status;
        int got = 0, lose = write && !collective && lose_writes;
        if (rc == MPI_SUCCESS && collective)
            rc = write ? MPI_File_write_all(fh, staging, (int)used, MPI_BYTE, &status)
                       : MPI_File_read_all(fh, staging, (int)used, MPI_BYTE, &status);
        else if (rc == MPI_SUCCESS && !lose)
            rc = write ? MPI_File_write(fh, staging, (int)used, MPI_BYTE, &status)
                       : MPI_File_read(fh, staging, (int)used, MPI_BYTE, &status);
        if (nb) MPI_Type_free(&view);
        if (rc != MPI_SUCCESS)
            st = mpi_fail(rc, write ? "writing" : "reading", path, write ? file_bytes : 0);
        /* Open MPI's OMPIO returns MPI_SUCCESS from a write that met a full disk: only the
         * count says that bytes are missing. */
        if (st == ZOE_OK && lose)
            got = (int)used;
        else if (st == ZOE_OK)
            MPI_Get_count(&status, MPI_BYTE, &got);
        if (st == ZOE_OK && (size_t)got != used && write) {
            char room[128];
            room_note(path, file_bytes, room, sizeof room);
            st = zoe_fail(ZOE_ERR_IO, "writing %s: %d of %zu bytes written%s", path, got, used,
                          room);
        } else if (st == ZOE_OK && (size_t)got != used)
            st = zoe_fail(ZOE_ERR_IO, "%s: read %d of %zu bytes (truncated?)", path, got, used);
        if (write) io->written += used;
        /* Checksums (and, reading, the copy into memory) piece by piece. */
        size_t at = 0;
        for (int i = first; st == ZOE_OK && i < runs->count && at < used; i++) {
            const ckpt_run *r = &runs->runs[i];
            size_t esz = elem_size(file, r);
            uint64_t s0 = i == first ? first_skip : 0;
            uint64_t n = r->n - s0;
            if (n * esz > used - at) n = (used - at) / esz;
            if (r->counted)
                checksums[r->entry] += ckpt_hash_elements(ckpt_salt(file->tensors[r->entry].name),
                                                          r->gidx + s0, staging + at, n, esz);
            if (mode == ROUND_READ)
                st = move_run(io, r, s0, n, file->tensors[r->entry].dtype, staging + at, 1);
            at += n * esz;
        }
    }
    free(plan.lens);
    free(plan.disps);
    if (staging) zoe_host_free(dev, staging);
    return st;
}

static zoe_status finish_checksums(ckpt_io *io, int count, uint64_t *checksums, zoe_status st) {
    ZOE_TRY(zoe_agree(io->comm, st));
    MPI_Allreduce(MPI_IN_PLACE, checksums, count, MPI_UINT64_T, MPI_SUM, io->comm);
    return ZOE_OK;
}

/* Opens path collectively, errors returned (not fatal) whatever the library's default. */
static zoe_status open_file(ckpt_io *io, const char *path, int amode, MPI_File *fh) {
    MPI_Info info = open_hints();
    int rc = MPI_File_open(io->comm, path, amode, info, fh);
    MPI_Info_free(&info);
    if (rc == MPI_SUCCESS) MPI_File_set_errhandler(*fh, MPI_ERRORS_RETURN);
    zoe_status st = rc == MPI_SUCCESS
                        ? ZOE_OK
                        : mpi_fail(rc, amode & MPI_MODE_CREATE ? "creating" : "opening", path, 0);
    st = zoe_agree(io->comm, st);
    if (st != ZOE_OK && rc == MPI_SUCCESS) MPI_File_close(fh);
    return st;
}

/* After the file is written and synced, through the same handle: its size, and the checksums
 * of what every rank reads back against those of what it wrote. A write lost without an error
 * (a hole where a full disk refused it) reads back as zeros and changes its tensor's sum. */
static zoe_status verify_written(ckpt_io *io, MPI_File fh, const char *path,
                                 const zoe_safetensors *table, const ckpt_runs *runs,
                                 const uint64_t *written) {
    uint64_t bytes = table->data_offset + table->data_size;
    uint64_t *back = calloc((size_t)table->count, sizeof *back);
    zoe_status st = back ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "checksums");
    int rank;
    MPI_Comm_rank(io->comm, &rank);
    struct stat sb = {0};
    if (st == ZOE_OK && rank == 0 && (stat(path, &sb) != 0 || (uint64_t)sb.st_size != bytes))
        st = zoe_fail(ZOE_ERR_IO, "%s: %lld bytes after writing, not %" PRIu64, path,
                      (long long)sb.st_size, bytes);
    zoe_status read = move_rounds(io, fh, path, table, runs, ROUND_VERIFY, back);
    st = finish_checksums(io, table->count, back, st != ZOE_OK ? st : read);
    for (int i = 0; st == ZOE_OK && i < table->count; i++)
        if (back[i] != written[i]) {
            char room[128];
            room_note(path, bytes, room, sizeof room);
            st = zoe_fail(ZOE_ERR_IO,
                          "%s: tensor %s reads back with checksum %016" PRIx64 ", %016" PRIx64
                          " was written: a write was lost%s",
                          path, table->tensors[i].name, back[i], written[i], room);
        }
    free(back);
    return st;
}

zoe_status ckpt_file_write(ckpt_io *io, const char *path, zoe_safetensors *table,
                           const ckpt_runs *runs, uint64_t *checksums) {
    char *header = NULL;
    size_t len = 0;
    ZOE_TRY(zoe_safetensors_header(table, &header, &len));
    memset(checksums, 0, (size_t)table->count * sizeof *checksums);
    const uint64_t bytes = table->data_offset + table->data_size;
    int rank;
    MPI_Comm_rank(io->comm, &rank);
    MPI_File fh; /* read and write: the file is read back through it */
    zoe_status st = open_file(io, path, MPI_MODE_CREATE | MPI_MODE_RDWR, &fh);
    if (st != ZOE_OK) {
        free(header);
        return st;
    }
    if (rank == 0) st = reserve(path, bytes);
    st = zoe_agree(io->comm, st);
    /* The full size first, so a truncated file is never mistaken for a complete one. */
    int rc = st == ZOE_OK ? MPI_File_set_size(fh, (MPI_Offset)bytes) : MPI_SUCCESS;
    if (rc != MPI_SUCCESS) st = mpi_fail(rc, "sizing", path, bytes);
    if (st == ZOE_OK && rank == 0) {
        MPI_Status status;
        int got = 0;
        rc = MPI_File_write_at(fh, 0, header, (int)len, MPI_BYTE, &status);
        if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &got);
        if (rc != MPI_SUCCESS || (size_t)got != len)
            st =
                mpi_fail(rc != MPI_SUCCESS ? rc : MPI_ERR_IO, "writing the header of", path, bytes);
    }
    free(header);
    st = zoe_agree(io->comm, st);
    double t0 = MPI_Wtime();
    if (st == ZOE_OK) st = move_rounds(io, fh, path, table, runs, ROUND_WRITE, checksums);
    double t1 = MPI_Wtime();
    rc = MPI_File_sync(fh);
    if (rc != MPI_SUCCESS && st == ZOE_OK) st = mpi_fail(rc, "syncing", path, bytes);
    st = finish_checksums(io, table->count, checksums, st);
    double t2 = MPI_Wtime();
    if (st == ZOE_OK) st = verify_written(io, fh, path, table, runs, checksums);
    zoe_log(ZOE_LOG_DEBUG, "wrote %s: %d runs in %.3f s, sync %.3f s, read back %.3f s", path,
            runs->count, t1 - t0, t2 - t1, MPI_Wtime() - t2);
    MPI_File_close(&fh);
    return st;
}

zoe_status ckpt_file_read(ckpt_io *io, const char *path, const zoe_safetensors *file,
                          const ckpt_runs *runs, uint64_t *checksums) {
    memset(checksums, 0, (size_t)file->count * sizeof *checksums);
    MPI_File fh;
    ZOE_TRY(open_file(io, path, MPI_MODE_RDONLY, &fh));
    double t0 = MPI_Wtime();
    zoe_status st = move_rounds(io, fh, path, file, runs, ROUND_READ, checksums);
    zoe_log(ZOE_LOG_DEBUG, "read %s: %d runs in %.3f s", path, runs->count, MPI_Wtime() - t0);
    MPI_File_close(&fh);
    return finish_checksums(io, file->count, checksums, st);
}

zoe_status ckpt_read_tensor(MPI_Comm comm, const char *path, const zoe_safetensors *file, int entry,
                            void *dst) {
    ckpt_io io = {.comm = comm};
    MPI_File fh;
    ZOE_TRY(open_file(&io, path, MPI_MODE_RDONLY, &fh));
    const zoe_st_tensor *t = &file->tensors[entry];
    uint64_t bytes = t->end - t->begin, done = 0;
    zoe_status st = ZOE_OK;
    while (st == ZOE_OK && done < bytes) {
        int n = bytes - done > (1u << 30) ? 1 << 30 : (int)(bytes - done), got = 0;
        MPI_Status status;
        int rc = MPI_File_read_at_all(fh, (MPI_Offset)(file->data_offset + t->begin + done),
                                      (char *)dst + done, n, MPI_BYTE, &status);
        if (rc != MPI_SUCCESS) st = mpi_fail(rc, "reading", path, 0);
        if (st == ZOE_OK) MPI_Get_count(&status, MPI_BYTE, &got);
        if (st == ZOE_OK && got != n)
            st = zoe_fail(ZOE_ERR_IO, "%s: read %d of %d bytes of %s (truncated?)", path, got, n,
                          t->name);
        done += (uint64_t)n;
    }
    MPI_File_close(&fh);
    return zoe_agree(comm, st);
}
