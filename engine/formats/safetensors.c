/* safetensors headers: built by hand (integers printed exactly, never in exponent form, which
 * the reference reader rejects), parsed with cJSON and validated entry by entry.
 *
 * Explained in docs/checkpoint.md, "Files". */
#include "engine/formats/safetensors.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/error.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[ZOE_ST_DTYPE_COUNT] = {
    [ZOE_ST_BOOL] = {"BOOL", 1}, [ZOE_ST_U8] = {"U8", 1},   [ZOE_ST_I8] = {"I8", 1},
    [ZOE_ST_I16] = {"I16", 2},   [ZOE_ST_U16] = {"U16", 2}, [ZOE_ST_F16] = {"F16", 2},
    [ZOE_ST_BF16] = {"BF16", 2}, [ZOE_ST_I32] = {"I32", 4}, [ZOE_ST_U32] = {"U32", 4},
    [ZOE_ST_F32] = {"F32", 4},   [ZOE_ST_I64] = {"I64", 8}, [ZOE_ST_U64] = {"U64", 8},
    [ZOE_ST_F64] = {"F64", 8},
};

const char *zoe_st_dtype_name(zoe_st_dtype dtype) {
    return dtype >= 0 && dtype < ZOE_ST_DTYPE_COUNT ? dtypes[dtype].name : "unknown";
}
size_t zoe_st_dtype_size(zoe_st_dtype dtype) {
    return dtype >= 0 && dtype < ZOE_ST_DTYPE_COUNT ? dtypes[dtype].size : 0;
}
zoe_dtype zoe_st_dtype_to_zoe(zoe_st_dtype dtype) {
    return dtype == ZOE_ST_BF16 ? ZOE_BF16 : dtype == ZOE_ST_F16 ? ZOE_F16 : ZOE_F32;
}
zoe_st_dtype zoe_st_dtype_from_zoe(zoe_dtype dtype) {
    return dtype == ZOE_BF16 ? ZOE_ST_BF16 : dtype == ZOE_F16 ? ZOE_ST_F16 : ZOE_ST_F32;
}
zoe_status zoe_st_dtype_parse(const char *name, zoe_st_dtype *out) {
    for (int d = 0; d < ZOE_ST_DTYPE_COUNT; d++)
        if (strcmp(name, dtypes[d].name) == 0) {
            *out = (zoe_st_dtype)d;
            return ZOE_OK;
        }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown safetensors dtype \"%s\"", name);
}

void zoe_safetensors_init(zoe_safetensors *st) {
    memset(st, 0, sizeof *st);
}

void zoe_safetensors_free(zoe_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->count; i++) free(st->tensors[i].name);
    for (int i = 0; i < st->meta_count; i++) free(st->meta[i].key), free(st->meta[i].value);
    free(st->tensors);
    free(st->meta);
    zoe_safetensors_init(st);
}

int64_t zoe_st_tensor_numel(const zoe_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static zoe_status push_tensor(zoe_safetensors *st, const zoe_st_tensor *t) {
    if (st->count == st->capacity) {
        int cap = st->capacity ? 2 * st->capacity : 64;
        zoe_st_tensor *grown = realloc(st->tensors, (size_t)cap * sizeof *grown);
        if (!grown) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "safetensors table of %d", cap);
        st->tensors = grown, st->capacity = cap;
    }
    st->tensors[st->count] = *t;
    st->tensors[st->count].name = strdup(t->name);
    if (!st->tensors[st->count].name) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "tensor name");
    st->count++;
    return ZOE_OK;
}

zoe_status zoe_safetensors_add(zoe_safetensors *st, const char *name, zoe_st_dtype dtype, int ndim,
                               const int64_t *shape) {
    if (!name || !*name) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "safetensors: empty name");
    if (dtype < 0 || dtype >= ZOE_ST_DTYPE_COUNT || ndim < 0 || ndim > ZOE_ST_MAX_DIMS ||
        (ndim && !shape))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "safetensors: %s: dtype %d, ndim %d", name,
                        (int)dtype, ndim);
    if (zoe_safetensors_find(st, name))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "safetensors: tensor %s added twice", name);
    zoe_st_tensor t = {.name = (char *)name, .dtype = dtype, .ndim = ndim};
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "safetensors: %s: dimension %d is %lld", name,
                            d, (long long)shape[d]);
        t.shape[d] = shape[d];
    }
    t.begin = st->count ? st->tensors[st->count - 1].end : 0;
    t.end = t.begin + (uint64_t)zoe_st_tensor_numel(&t) * dtypes[dtype].size;
    ZOE_TRY(push_tensor(st, &t));
    st->data_size = t.end;
    return ZOE_OK;
}

zoe_status zoe_safetensors_set_meta(zoe_safetensors *st, const char *key, const char *value) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta[i].key, key) == 0) {
            char *v = strdup(value);
            if (!v) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "metadata value");
            free(st->meta[i].value);
            st->meta[i].value = v;
            return ZOE_OK;
        }
    zoe_st_meta *grown = realloc(st->meta, (size_t)(st->meta_count + 1) * sizeof *grown);
    if (!grown) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "metadata table");
    st->meta = grown;
    zoe_st_meta m = {strdup(key), strdup(value)};
    if (!m.key || !m.value) {
        free(m.key), free(m.value);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "metadata entry");
    }
    st->meta[st->meta_count++] = m;
    return ZOE_OK;
}

const char *zoe_safetensors_meta(const zoe_safetensors *st, const char *key) {
    for (int i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

const zoe_st_tensor *zoe_safetensors_find(const zoe_safetensors *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

/* ---- building a header ---- */

typedef struct text_buf {
    char *data;
    size_t len, cap;
    int failed;
} text_buf;

static void put(text_buf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->data = grown, b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void put_str(text_buf *b, const char *s) {
    put(b, s, strlen(s));
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void put_json_string(text_buf *b, const char *s) {
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(b, esc, 6);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    put(b, "\"", 1);
}

zoe_status zoe_safetensors_header(zoe_safetensors *st, char **out, size_t *len) {
    text_buf b = {0};
    char num[64];
    put(&b, "        {", 9); /* the length prefix's 8 bytes, filled in at the end */
    int first = 1;
    if (st->meta_count) {
        put_str(&b, "\"__metadata__\":{");
        for (int i = 0; i < st->meta_count; i++) {
            if (i) put(&b, ",", 1);
            put_json_string(&b, st->meta[i].key);
            put(&b, ":", 1);
            put_json_string(&b, st->meta[i].value);
        }
        put(&b, "}", 1);
        first = 0;
    }
    for (int i = 0; i < st->count; i++) {
        const zoe_st_tensor *t = &st->tensors[i];
        if (!first) put(&b, ",", 1);
        first = 0;
        put_json_string(&b, t->name);
        put_str(&b, ":{\"dtype\":\"");
        put_str(&b, dtypes[t->dtype].name);
        put_str(&b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t->shape[d]);
            put_str(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", t->begin,
                 t->end);
        put_str(&b, num);
    }
    put(&b, "}", 1);
    while (!b.failed && b.len % ZOE_ST_ALIGN) put(&b, " ", 1);
    if (b.failed) {
        free(b.data);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "safetensors header");
    }
    uint64_t n = b.len - 8;
    for (int i = 0; i < 8; i++) b.data[i] = (char)((n >> (8 * i)) & 0xff);
    st->data_offset = b.len;
    *out = b.data;
    *len = b.len;
    return ZOE_OK;
}

/* ---- parsing and validating ---- */

/* A JSON number that is a non-negative integer a double holds exactly. */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

static zoe_status parse_entry(const cJSON *item, const char *what, zoe_st_tensor *t) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s: entry is not an object", what,
                        name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: tensor %s: needs \"dtype\" (string), \"shape\" and \"data_offsets\" "
                        "(arrays)",
                        what, name);
    for (const cJSON *k = item->child; k; k = k->next)
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") &&
            strcmp(k->string, "data_offsets"))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s: unknown key \"%s\"", what,
                            name, k->string);
    if (zoe_st_dtype_parse(dtype->valuestring, &t->dtype) != ZOE_OK)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s: unknown dtype \"%s\"", what, name,
                        dtype->valuestring);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ZOE_ST_MAX_DIMS)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s: %d dimensions (at most %d)", what,
                        name, ndim, ZOE_ST_MAX_DIMS);
    t->ndim = ndim;
    double numel = 1;
    for (int d = 0; d < ndim; d++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(shape, d), &v))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s: dimension %d is not a non-negative integer", what, name,
                            d);
        t->shape[d] = (int64_t)v;
        numel *= (double)v;
    }
    if (cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &t->end) || t->end < t->begin)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: tensor %s: data_offsets must be [begin, end] with 0 <= begin <= end",
                        what, name);
    if (numel * (double)dtypes[t->dtype].size != (double)(t->end - t->begin))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: tensor %s: %s shape holds %.0f bytes but data_offsets span %" PRIu64,
                        what, name, dtypes[t->dtype].name, numel * (double)dtypes[t->dtype].size,
                        t->end - t->begin);
    return ZOE_OK;
}

static zoe_status parse_meta(zoe_safetensors *st, const cJSON *meta, const char *what) {
    if (!cJSON_IsObject(meta))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: __metadata__ is not an object", what);
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: __metadata__ \"%s\" is not a string",
                            what, m->string);
        ZOE_TRY(zoe_safetensors_set_meta(st, m->string, m->valuestring));
    }
    return ZOE_OK;
}

static int by_offset(const void *a, const void *b) {
    const zoe_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static zoe_status parse_json(zoe_safetensors *st, const cJSON *root, const char *what) {
    if (!cJSON_IsObject(root))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header is not a JSON object", what);
    for (const cJSON *item = root->child; item; item = item->next) {
        if (!item->string || !*item->string)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header entry without a name", what);
        if (strcmp(item->string, "__metadata__") == 0) {
            ZOE_TRY(parse_meta(st, item, what));
            continue;
        }
        if (zoe_safetensors_find(st, item->string))
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: tensor %s appears twice", what,
                            item->string);
        zoe_st_tensor t = {.name = item->string};
        ZOE_TRY(parse_entry(item, what, &t));
        ZOE_TRY(push_tensor(st, &t));
    }
    if (st->count > 1) qsort(st->tensors, (size_t)st->count, sizeof *st->tensors, by_offset);
    uint64_t at = 0;
    for (int i = 0; i < st->count; i++) {
        const zoe_st_tensor *t = &st->tensors[i];
        if (t->begin != at)
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s begins at data byte %" PRIu64 ", not %" PRIu64
                            " (tensors must tile the data without gaps or overlaps)",
                            what, t->name, t->begin, at);
        at = t->end;
    }
    if (at != st->data_size)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: the tensors cover %" PRIu64 " data bytes but the file has %" PRIu64
                        " (truncated or padded?)",
                        what, at, st->data_size);
    return ZOE_OK;
}

zoe_status zoe_safetensors_parse(const void *prefix, size_t prefix_len, uint64_t file_size,
                                 const char *what, zoe_safetensors *out) {
    zoe_safetensors_init(out);
    const unsigned char *p = prefix;
    if (prefix_len < 8 || file_size < 8)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %" PRIu64 " bytes, too short for a header",
                        what, file_size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)p[i] << (8 * i);
    if (n < 2 || n > ZOE_ST_MAX_HEADER || n > file_size - 8)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: header length %" PRIu64 " is impossible for a file of %" PRIu64
                        " bytes (limit %" PRIu64 ")",
                        what, n, file_size, ZOE_ST_MAX_HEADER);
    if (prefix_len < 8 + n)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header of %" PRIu64 " bytes not read whole",
                        what, n);
    if (p[8] != '{')
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header does not start with '{'", what);
    if (memchr(p + 8, 0, n))
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header holds a NUL byte", what);
    const char *json = (const char *)p + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    if (!root) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: header is not valid JSON", what);
    /* Only the padding (spaces) may follow the object. */
    for (; end && end < json + n; end++)
        if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r') {
            cJSON_Delete(root);
            return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: bytes after the header's JSON", what);
        }
    out->data_offset = 8 + n;
    out->data_size = file_size - out->data_offset;
    zoe_status st = parse_json(out, root, what);
    cJSON_Delete(root);
    if (st != ZOE_OK) zoe_safetensors_free(out);
    return st;
}

static zoe_status read_exact(int fd, void *dst, size_t n, uint64_t offset, const char *path) {
    char *p = dst;
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return zoe_fail(ZOE_ERR_IO, "%s: read at byte %" PRIu64 " failed: %s", path, offset,
                            got < 0 ? strerror(errno) : "end of file");
        p += got, n -= (size_t)got, offset += (uint64_t)got;
    }
    return ZOE_OK;
}

zoe_status zoe_safetensors_read_header(const char *path, zoe_safetensors *out) {
    zoe_safetensors_init(out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    unsigned char len8[8];
    char *buf = NULL;
    zoe_status st =
        fstat(fd, &sb) == 0 ? ZOE_OK : zoe_fail(ZOE_ERR_IO, "%s: %s", path, strerror(errno));
    uint64_t size = st == ZOE_OK ? (uint64_t)sb.st_size : 0, n = 0;
    if (st == ZOE_OK && size < 8)
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: %" PRIu64 " bytes, too short for a header",
                      path, size);
    if (st == ZOE_OK) st = read_exact(fd, len8, 8, 0, path);
    for (int i = 0; st == ZOE_OK && i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
    if (st == ZOE_OK && (n > ZOE_ST_MAX_HEADER || n > size - 8))
        st = zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                      "%s: header length %" PRIu64 " is impossible for a file of %" PRIu64 " bytes",
                      path, n, size);
    if (st == ZOE_OK && !(buf = malloc(8 + n)))
        st = zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s: header of %" PRIu64 " bytes", path, n);
    if (st == ZOE_OK) st = read_exact(fd, buf, 8 + n, 0, path);
    if (st == ZOE_OK) st = zoe_safetensors_parse(buf, 8 + n, size, path, out);
    free(buf);
    close(fd);
    return st;
}

zoe_status zoe_safetensors_read_data(const char *path, const zoe_safetensors *st,
                                     const zoe_st_tensor *t, uint64_t offset, uint64_t count,
                                     void *dst) {
    if (offset > t->end - t->begin || count > t->end - t->begin - offset)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT,
                        "%s: tensor %s: bytes [%" PRIu64 ", %" PRIu64 ") outside its %" PRIu64,
                        path, t->name, offset, offset + count, t->end - t->begin);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zoe_fail(ZOE_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    zoe_status s = read_exact(fd, dst, (size_t)count, st->data_offset + t->begin + offset, path);
    close(fd);
    return s;
}

static zoe_status write_all(int fd, const void *src, size_t n, const char *path) {
    const char *p = src;
    while (n) {
        ssize_t put_n = write(fd, p, n);
        if (put_n < 0 && errno == EINTR) continue;
        if (put_n <= 0) return zoe_fail(ZOE_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        p += put_n, n -= (size_t)put_n;
    }
    return ZOE_OK;
}

zoe_status zoe_safetensors_write_stream(const char *path, zoe_safetensors *st, zoe_st_fill fill,
                                        void *user) {
    char *header = NULL;
    size_t len = 0, largest = 1;
    for (int i = 0; i < st->count; i++)
        if (st->tensors[i].end - st->tensors[i].begin > largest)
            largest = (size_t)(st->tensors[i].end - st->tensors[i].begin);
    ZOE_TRY(zoe_safetensors_header(st, &header, &len));
    void *buf = malloc(largest);
    int fd = buf ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    zoe_status s = !buf ? zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "%s: buffer of %zu bytes", path, largest)
                   : fd < 0 ? zoe_fail(ZOE_ERR_IO, "cannot create %s: %s", path, strerror(errno))
                            : write_all(fd, header, len, path);
    for (int i = 0; s == ZOE_OK && i < st->count; i++) {
        s = fill(user, i, buf);
        if (s == ZOE_OK)
            s = write_all(fd, buf, (size_t)(st->tensors[i].end - st->tensors[i].begin), path);
    }
    if (s == ZOE_OK && fsync(fd) != 0)
        s = zoe_fail(ZOE_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && s == ZOE_OK)
        s = zoe_fail(ZOE_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    free(buf);
    free(header);
    return s;
}

typedef struct arrays {
    const zoe_safetensors *st;
    const void *const *data;
} arrays;

static zoe_status fill_from_array(void *user, int index, void *dst) {
    const arrays *a = user;
    const zoe_st_tensor *t = &a->st->tensors[index];
    memcpy(dst, a->data[index], (size_t)(t->end - t->begin));
    return ZOE_OK;
}

zoe_status zoe_safetensors_write_file(const char *path, zoe_safetensors *st,
                                      const void *const *data) {
    arrays a = {st, data};
    return zoe_safetensors_write_stream(path, st, fill_from_array, &a);
}
