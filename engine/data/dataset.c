/* Opening datasets (mapped Megatron files, or text through text.c) and reading their
 * token stream.
 *
 * Explained in docs/data.md. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "engine/data/data_impl.h"
#include "runtime/error.h"

enum { ZOE_DATASET_NAME_MAX = 4096 };

zoe_status zoe_map_file(const char *path, zoe_mapped_file *out) {
    *out = (zoe_mapped_file){0};
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return zoe_fail(ZOE_ERR_IO, "cannot stat '%s': %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return zoe_fail(ZOE_ERR_IO, "'%s' is not a regular file", path);
    }
    zoe_status status = ZOE_OK;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            status = zoe_fail(ZOE_ERR_IO, "cannot map '%s' (%lld bytes): %s", path,
                              (long long)st.st_size, strerror(errno));
        else
            *out = (zoe_mapped_file){.data = p, .len = (size_t)st.st_size};
    }
    close(fd);
    return status;
}

void zoe_unmap_file(zoe_mapped_file *f) {
    if (f->data) munmap(f->data, f->len);
    *f = (zoe_mapped_file){0};
}

zoe_status zoe_dataset_alloc(const char *name, zoe_dataset **out) {
    *out = NULL;
    zoe_dataset *ds = calloc(1, sizeof *ds);
    char *copy = malloc(strlen(name) + 1);
    if (!ds || !copy) {
        free(ds);
        free(copy);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset '%s'", name);
    }
    ds->name = strcpy(copy, name);
    ds->bin_fd = -1;
    *out = ds;
    return ZOE_OK;
}

void zoe_dataset_destroy(zoe_dataset *ds) {
    if (!ds) return;
    zoe_unmap_file(&ds->idx_file);
    if (ds->bin_fd >= 0) close(ds->bin_fd);
    free(ds->idx_image);
    free(ds->bin_image);
    free(ds->name);
    free(ds);
}

/* PREFIX + suffix in a new string. */
static char *path_with(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix), m = strlen(suffix);
    char *p = malloc(n + m + 1);
    if (p) memcpy(p, prefix, n), memcpy(p + n, suffix, m + 1);
    return p;
}

static zoe_status map_pair(zoe_dataset *ds) {
    char *idx = path_with(ds->name, ".idx"), *bin = path_with(ds->name, ".bin");
    zoe_status st = idx && bin ? ZOE_OK : zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset '%s'", ds->name);
    if (st == ZOE_OK) st = zoe_map_file(idx, &ds->idx_file);
    struct stat sb;
    if (st == ZOE_OK && (ds->bin_fd = open(bin, O_RDONLY)) < 0)
        st = zoe_fail(ZOE_ERR_IO, "cannot open '%s': %s", bin, strerror(errno));
    if (st == ZOE_OK && (fstat(ds->bin_fd, &sb) != 0 || !S_ISREG(sb.st_mode)))
        st = zoe_fail(ZOE_ERR_IO, "'%s' is not a regular file", bin);
    if (st == ZOE_OK) ds->bin_len = (size_t)sb.st_size;
    free(idx);
    free(bin);
    return st;
}

zoe_status zoe_dataset_open_indexed(const char *prefix, zoe_dataset **out) {
    if (!prefix || !out)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_open_indexed: NULL argument");
    *out = NULL;
    zoe_dataset *ds;
    ZOE_TRY(zoe_dataset_alloc(prefix, &ds));
    zoe_status st = map_pair(ds);
    if (st == ZOE_OK)
        st = zoe_index_parse(ds->idx_file.data, ds->idx_file.len, ds->bin_len, prefix, &ds->index);
    if (st != ZOE_OK) {
        zoe_dataset_destroy(ds);
        return st;
    }
    *out = ds;
    return ZOE_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

zoe_status zoe_dataset_open(const char *path, zoe_dataset **out) {
    if (!path || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_open: NULL argument");
    *out = NULL;
    char *idx = path_with(path, ".idx");
    if (!idx) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset '%s'", path);
    int indexed = access(idx, F_OK) == 0;
    free(idx);
    if (indexed) return zoe_dataset_open_indexed(path, out);
    if (ends_with(path, ".idx") || ends_with(path, ".bin")) {
        char *prefix = malloc(strlen(path) + 1);
        if (!prefix) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "dataset '%s'", path);
        strcpy(prefix, path)[strlen(path) - 4] = '\0';
        zoe_status st = zoe_dataset_open_indexed(prefix, out);
        free(prefix);
        return st;
    }
    return zoe_dataset_open_text(path, ZOE_SPLIT_BLANK_LINE, out);
}

const char *zoe_dataset_name(const zoe_dataset *ds) {
    return ds ? ds->name : NULL;
}
zoe_token_dtype zoe_dataset_dtype(const zoe_dataset *ds) {
    return ds ? ds->index.dtype : (zoe_token_dtype)0;
}
int64_t zoe_dataset_tokens(const zoe_dataset *ds) {
    return ds ? ds->index.tokens : -1;
}
int64_t zoe_dataset_documents(const zoe_dataset *ds) {
    return ds ? ds->index.doc_entries - 1 : -1;
}
int64_t zoe_dataset_sequences(const zoe_dataset *ds) {
    return ds ? ds->index.sequences : -1;
}

/* bytes [at, at + n) of the .bin, or a message naming the short read */
static zoe_status pread_all(const zoe_dataset *ds, void *dst, size_t n, off_t at) {
    for (size_t done = 0; done < n;) {
        ssize_t got = pread(ds->bin_fd, (char *)dst + done, n - done, at + (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return zoe_fail(ZOE_ERR_IO, "cannot read '%s.bin' at byte %lld: %s", ds->name,
                            (long long)(at + (off_t)done), strerror(errno));
        if (got == 0)
            return zoe_fail(ZOE_ERR_IO,
                            "'%s.bin' ends at byte %lld, but it held %zu bytes when opened: the "
                            "file was truncated or replaced while in use",
                            ds->name, (long long)(at + (off_t)done), ds->bin_len);
        done += (size_t)got;
    }
    return ZOE_OK;
}

static zoe_status read_file_tokens(const zoe_dataset *ds, int64_t offset, int64_t count,
                                   int32_t *out) {
    off_t at = (off_t)offset * (off_t)ds->index.token_size;
    if (ds->index.dtype == ZOE_TOKENS_INT32)
        return pread_all(ds, out, (size_t)count * sizeof *out, at);
    enum { CHUNK = 4096 };
    uint16_t chunk[CHUNK];
    for (int64_t done = 0; done < count;) {
        size_t k = (size_t)(count - done < CHUNK ? count - done : CHUNK);
        ZOE_TRY(pread_all(ds, chunk, k * sizeof *chunk, at + (off_t)done * 2));
        for (size_t i = 0; i < k; i++) out[done + (int64_t)i] = chunk[i];
        done += (int64_t)k;
    }
    return ZOE_OK;
}

zoe_status zoe_dataset_read(const zoe_dataset *ds, int64_t offset, int64_t count, int32_t *out) {
    if (!ds || (!out && count > 0))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_read: NULL argument");
    if (offset < 0 || count < 0 || count > ds->index.tokens - offset)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s': tokens [%lld, %lld) are outside the stream of %lld tokens", ds->name,
                        (long long)offset, (long long)(offset + count),
                        (long long)ds->index.tokens);
    if (count == 0) return ZOE_OK; /* an empty .bin maps to NULL: no pointer arithmetic on it */
    if (ds->parent) return zoe_dataset_read(ds->parent, ds->stream_offset + offset, count, out);
    /* Sequences lie back to back (checked on open), so the stream is the .bin itself. */
    if (!ds->bin) return read_file_tokens(ds, offset, count, out);
    const unsigned char *p = ds->bin + (size_t)offset * ds->index.token_size;
    if (ds->index.dtype == ZOE_TOKENS_INT32) {
        memcpy(out, p, (size_t)count * sizeof *out);
    } else {
        for (int64_t i = 0; i < count; i++) {
            uint16_t t;
            memcpy(&t, p + 2 * i, sizeof t);
            out[i] = t;
        }
    }
    return ZOE_OK;
}

zoe_status zoe_dataset_document(const zoe_dataset *ds, int64_t doc, int64_t *offset,
                                int64_t *length) {
    if (!ds || !offset || !length)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_document: NULL argument");
    int64_t docs = zoe_dataset_documents(ds);
    if (doc < 0 || doc >= docs)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "'%s': document %lld outside [0, %lld)", ds->name,
                        (long long)doc, (long long)docs);
    if (ds->parent) {
        ZOE_TRY(zoe_dataset_document(ds->parent, ds->first_doc + doc, offset, length));
        *offset -= ds->stream_offset;
        return ZOE_OK;
    }
    const zoe_index_view *v = &ds->index;
    int64_t first = zoe_index_load_i64(v->doc_index, doc);
    int64_t end = zoe_index_load_i64(v->doc_index, doc + 1);
    /* Stream offset of sequence s: its byte pointer over the token size (or the end). */
    int64_t begin_tok = first < v->sequences
                            ? zoe_index_load_i64(v->pointers, first) / (int64_t)v->token_size
                            : v->tokens;
    int64_t end_tok = end < v->sequences
                          ? zoe_index_load_i64(v->pointers, end) / (int64_t)v->token_size
                          : v->tokens;
    *offset = begin_tok;
    *length = end_tok - begin_tok;
    return ZOE_OK;
}

zoe_status zoe_dataset_subset(const zoe_dataset *ds, int64_t first, int64_t count,
                              zoe_dataset **out) {
    if (!ds || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_subset: NULL argument");
    *out = NULL;
    int64_t docs = zoe_dataset_documents(ds);
    if (first < 0 || count < 1 || count > docs - first)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "'%s': documents [%lld, %lld) are not a non-empty part of its %lld",
                        ds->name, (long long)first, (long long)(first + count), (long long)docs);
    /* A subset of a subset reads from the dataset with the index. */
    const zoe_dataset *root = ds->parent ? ds->parent : ds;
    int64_t root_first = first + (ds->parent ? ds->first_doc : 0);
    int64_t begin, len, last_begin, last_len;
    ZOE_TRY(zoe_dataset_document(root, root_first, &begin, &len));
    ZOE_TRY(zoe_dataset_document(root, root_first + count - 1, &last_begin, &last_len));
    char name[ZOE_DATASET_NAME_MAX];
    snprintf(name, sizeof name, "%s documents %lld-%lld", root->name, (long long)root_first,
             (long long)(root_first + count - 1));
    zoe_dataset *sub;
    ZOE_TRY(zoe_dataset_alloc(name, &sub));
    const zoe_index_view *v = &root->index;
    sub->parent = root;
    sub->first_doc = root_first;
    sub->stream_offset = begin;
    sub->index = (zoe_index_view){
        .dtype = v->dtype,
        .token_size = v->token_size,
        .sequences = zoe_index_load_i64(v->doc_index, root_first + count) -
                     zoe_index_load_i64(v->doc_index, root_first),
        .doc_entries = count + 1,
        .tokens = last_begin + last_len - begin,
    };
    *out = sub;
    return ZOE_OK;
}

zoe_status zoe_dataset_split_documents(int64_t documents, int split_train, int split_val,
                                       int64_t *train_documents) {
    if (!train_documents)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "zoe_dataset_split_documents: NULL argument");
    if (split_train < 1 || split_val < 1 || split_train > 99 || split_val > 99 ||
        split_train + split_val != 100)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--split=%d,%d is not two positive percentages summing to 100", split_train,
                        split_val);
    /* round half up, in integers: exact for any count */
    int64_t train = (documents * split_train + 50) / 100;
    if (documents < 0 || train < 1 || train >= documents)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "--split=%d,%d of %lld documents leaves %s without a document", split_train,
                        split_val, (long long)documents, train < 1 ? "training" : "validation");
    *train_documents = train;
    return ZOE_OK;
}

/* The document holding stream position pos (documents are contiguous and in order). */
static int64_t document_at(const zoe_dataset *ds, int64_t pos) {
    int64_t lo = 0, hi = zoe_dataset_documents(ds) - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2, off = 0, len = 0;
        zoe_dataset_document(ds, mid, &off, &len);
        if (off <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

zoe_status zoe_dataset_check_tokens(const zoe_dataset *ds, int32_t vocab_size) {
    int64_t total = zoe_dataset_tokens(ds);
    if (total == 0)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dataset '%s' holds no tokens", ds->name);
    enum { CHUNK = 1 << 16 };
    int32_t *chunk = malloc(CHUNK * sizeof *chunk);
    if (!chunk) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "token check of '%s'", ds->name);
    zoe_status st = ZOE_OK;
    for (int64_t off = 0; st == ZOE_OK && off < total; off += CHUNK) {
        int64_t n = total - off < CHUNK ? total - off : CHUNK;
        st = zoe_dataset_read(ds, off, n, chunk);
        for (int64_t i = 0; st == ZOE_OK && i < n; i++)
            if (chunk[i] < 0 || chunk[i] >= vocab_size)
                st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                              "dataset '%s': token %d at stream position %lld (document %lld) is "
                              "outside the vocabulary [0, %d) (--vocab)",
                              ds->name, chunk[i], (long long)(off + i),
                              (long long)document_at(ds, off + i), vocab_size);
    }
    free(chunk);
    return st;
}
