/* Writing the Megatron indexed format: tokens stream into PREFIX.bin.tmp.PID as documents
 * arrive, the sizes stay in memory, and finish writes the .idx and renames both into place
 * (.bin first, so a present .idx always has its .bin).
 *
 * Explained in docs/data.md. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "zoe/log.h"
#include "engine/data/data_impl.h"
#include "runtime/error.h"

enum { WRITE_CHUNK = 1 << 16 }; /* tokens converted per fwrite */

struct zoe_dataset_writer {
    zoe_token_dtype dtype;
    char *bin_path, *idx_path, *bin_tmp, *idx_tmp;
    FILE *bin;
    int32_t *sizes;    /* one per sequence: a document that is not empty is one sequence */
    int64_t *doc_ends; /* per document, the sequence count at its end */
    int64_t documents, sequences, capacity, tokens;
    int finished;
    unsigned char chunk[WRITE_CHUNK * 4];
};

static char *format_path(const char *prefix, const char *suffix, long pid) {
    size_t n = strlen(prefix) + strlen(suffix) + 32;
    char *p = malloc(n);
    if (p) {
        if (pid >= 0)
            snprintf(p, n, "%s%s.tmp.%ld", prefix, suffix, pid);
        else
            snprintf(p, n, "%s%s", prefix, suffix);
    }
    return p;
}

/* Removes PREFIX.bin.tmp.PID and PREFIX.idx.tmp.PID left by runs that were killed (PID no
 * longer alive); a live PID's files belong to a conversion still running and stay. */
static void remove_stale_temporaries(const char *prefix) {
    const char *slash = strrchr(prefix, '/');
    size_t dir_len = slash ? (size_t)(slash - prefix) : 0;
    const char *base = slash ? slash + 1 : prefix;
    size_t base_len = strlen(base);
    char dir[4096] = ".";
    if (slash && dir_len == 0) snprintf(dir, sizeof dir, "/");
    if (slash && dir_len > 0) snprintf(dir, sizeof dir, "%.*s", (int)dir_len, prefix);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *name = e->d_name, *rest;
        if (strncmp(name, base, base_len) != 0) continue;
        rest = name + base_len;
        if (strncmp(rest, ".bin.tmp.", 9) != 0 && strncmp(rest, ".idx.tmp.", 9) != 0) continue;
        char *end;
        long pid = strtol(rest + 9, &end, 10);
        if (*end || pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (remove(path) == 0)
            zoe_log(ZOE_LOG_INFO, "removed '%s', left by a conversion that was killed", path);
    }
    closedir(d);
}

zoe_status zoe_dataset_writer_create(const char *prefix, zoe_token_dtype dtype,
                                     zoe_dataset_writer **out) {
    if (!out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_writer_create: out is NULL");
    *out = NULL;
    if (!prefix || !prefix[0])
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "output prefix is empty: give a path such as data/corpus");
    struct stat sb;
    size_t plen = strlen(prefix);
    if (prefix[plen - 1] == '/' || (stat(prefix, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "output prefix '%s' is a directory: give a file prefix inside it, such "
                        "as %s%scorpus",
                        prefix, prefix, prefix[plen - 1] == '/' ? "" : "/");
    if (zoe_token_size(dtype) == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s': token dtype code %d unsupported", prefix,
                        (int)dtype);
    zoe_dataset_writer *w = calloc(1, sizeof *w);
    if (!w) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset writer for '%s'", prefix);
    long pid = (long)getpid();
    w->dtype = dtype;
    w->bin_path = format_path(prefix, ".bin", -1);
    w->idx_path = format_path(prefix, ".idx", -1);
    w->bin_tmp = format_path(prefix, ".bin", pid);
    w->idx_tmp = format_path(prefix, ".idx", pid);
    if (!w->bin_path || !w->idx_path || !w->bin_tmp || !w->idx_tmp) {
        zoe_dataset_writer_destroy(w);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset writer for '%s'", prefix);
    }
    remove_stale_temporaries(prefix);
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        zoe_status st = zoe_fail(ZOE_ERR_IO, "cannot create '%s' (for '%s'): %s", w->bin_tmp,
                                 w->bin_path, strerror(errno));
        zoe_dataset_writer_destroy(w);
        return st;
    }
    *out = w;
    return ZOE_OK;
}

void zoe_dataset_writer_destroy(zoe_dataset_writer *w) {
    if (!w) return;
    if (w->bin) fclose(w->bin);
    if (!w->finished && w->bin_tmp) remove(w->bin_tmp);
    if (!w->finished && w->idx_tmp) remove(w->idx_tmp);
    free(w->bin_path);
    free(w->idx_path);
    free(w->bin_tmp);
    free(w->idx_tmp);
    free(w->sizes);
    free(w->doc_ends);
    free(w);
}

void zoe_dataset_writer_temp_paths(const zoe_dataset_writer *w, const char **bin,
                                   const char **idx) {
    *bin = w ? w->bin_tmp : NULL;
    *idx = w ? w->idx_tmp : NULL;
}

int64_t zoe_dataset_writer_documents(const zoe_dataset_writer *w) {
    return w ? w->documents : -1;
}
int64_t zoe_dataset_writer_tokens(const zoe_dataset_writer *w) {
    return w ? w->tokens : -1;
}

static zoe_status check_tokens(const zoe_dataset_writer *w, const int32_t *tokens, int64_t n) {
    int32_t max = w->dtype == ZOE_TOKENS_UINT16 ? UINT16_MAX : INT32_MAX;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > max)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "'%s': token %d (document %lld, position %lld) does not fit %s",
                            w->bin_path, tokens[i], (long long)w->documents, (long long)i,
                            zoe_token_dtype_name(w->dtype));
    return ZOE_OK;
}

static zoe_status write_tokens(zoe_dataset_writer *w, const int32_t *tokens, int64_t n) {
    size_t size = zoe_token_size(w->dtype);
    for (int64_t done = 0; done < n;) {
        size_t k = (size_t)(n - done < WRITE_CHUNK ? n - done : WRITE_CHUNK);
        for (size_t i = 0; i < k; i++) {
            if (w->dtype == ZOE_TOKENS_UINT16) {
                uint16_t t = (uint16_t)tokens[done + (int64_t)i];
                memcpy(w->chunk + 2 * i, &t, 2);
            } else {
                memcpy(w->chunk + 4 * i, &tokens[done + (int64_t)i], 4);
            }
        }
        if (fwrite(w->chunk, size, k, w->bin) != k)
            return zoe_fail(ZOE_ERR_IO, "cannot write '%s': %s", w->bin_tmp, strerror(errno));
        done += (int64_t)k;
    }
    return ZOE_OK;
}

zoe_status zoe_dataset_writer_add_document(zoe_dataset_writer *w, const int32_t *tokens,
                                           int64_t n) {
    if (!w || (n > 0 && !tokens))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_writer_add_document: NULL argument");
    if (w->finished || !w->bin)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s': writer already finished or failed",
                        w->bin_path);
    if (n < 0 || n > INT32_MAX)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s': document %lld has %lld tokens (the index stores int32 sizes)",
                        w->bin_path, (long long)w->documents, (long long)n);
    ZOE_TRY(check_tokens(w, tokens, n));
    if (w->documents == w->capacity) {
        int64_t cap = w->capacity ? 2 * w->capacity : 1024;
        int32_t *sizes = realloc(w->sizes, (size_t)cap * sizeof *sizes);
        if (sizes) w->sizes = sizes;
        int64_t *ends = realloc(w->doc_ends, (size_t)cap * sizeof *ends);
        if (ends) w->doc_ends = ends;
        if (!sizes || !ends)
            return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': index of %lld documents", w->idx_path,
                            (long long)cap);
        w->capacity = cap;
    }
    ZOE_TRY(write_tokens(w, tokens, n));
    /* An empty document holds no sequence, only its place among the documents (Megatron's
     * builder adds one with no sequence lengths alike). */
    if (n > 0) w->sizes[w->sequences++] = (int32_t)n;
    w->doc_ends[w->documents++] = w->sequences;
    w->tokens += n;
    return ZOE_OK;
}

static zoe_status write_index(const zoe_dataset_writer *w) {
    size_t len = zoe_index_image_size(w->sequences, w->documents);
    unsigned char *image = malloc(len);
    if (!image) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "'%s': %zu bytes", w->idx_path, len);
    zoe_index_image_write(image, w->dtype, w->sizes, w->sequences, w->doc_ends, w->documents);
    FILE *f = fopen(w->idx_tmp, "wb");
    int ok = f && fwrite(image, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (f && fclose(f) != 0 && ok) ok = 0, err = errno;
    free(image);
    if (!ok) return zoe_fail(ZOE_ERR_IO, "cannot write '%s': %s", w->idx_tmp, strerror(err));
    return ZOE_OK;
}

zoe_status zoe_dataset_writer_finish(zoe_dataset_writer *w) {
    if (!w) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_writer_finish: NULL writer");
    if (w->finished || !w->bin)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s': writer already finished or failed",
                        w->bin_path);
    int ok = fflush(w->bin) == 0 && fsync(fileno(w->bin)) == 0;
    int err = errno;
    if (fclose(w->bin) != 0 && ok) ok = 0, err = errno;
    w->bin = NULL;
    if (!ok) return zoe_fail(ZOE_ERR_IO, "cannot write '%s': %s", w->bin_tmp, strerror(err));
    ZOE_TRY(write_index(w));
    if (rename(w->bin_tmp, w->bin_path) != 0)
        return zoe_fail(ZOE_ERR_IO, "cannot rename '%s' to '%s': %s", w->bin_tmp, w->bin_path,
                        strerror(errno));
    if (rename(w->idx_tmp, w->idx_path) != 0) {
        zoe_status st = zoe_fail(ZOE_ERR_IO, "cannot rename '%s' to '%s': %s", w->idx_tmp,
                                 w->idx_path, strerror(errno));
        remove(w->bin_path); /* never leave a .bin without its .idx */
        return st;
    }
    w->finished = 1;
    return ZOE_OK;
}
