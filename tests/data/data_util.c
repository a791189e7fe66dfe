#define _POSIX_C_SOURCE 200809L
#include "data_util.h"
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

void tmpdir_create(char *dir) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, 256, "%s/zoe-data-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
}

void tmpdir_remove(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

int dir_entries(const char *dir, char *list, size_t list_len) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    size_t used = 0;
    if (list_len) list[0] = '\0';
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n++;
        if (used + strlen(e->d_name) + 2 < list_len)
            used += (size_t)snprintf(list + used, list_len - used, "%s ", e->d_name);
    }
    closedir(d);
    return n;
}

void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Encodes code point c as UTF-8 into out; returns the byte count. */
static size_t put_utf8(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) return o[0] = (unsigned char)c, 1;
    if (c < 0x800)
        return o[0] = (unsigned char)(0xc0 | c >> 6), o[1] = (unsigned char)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000)
        return o[0] = (unsigned char)(0xe0 | c >> 12),
               o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f)),
               o[2] = (unsigned char)(0x80 | (c & 0x3f)), 3;
    o[0] = (unsigned char)(0xf0 | c >> 18), o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f)), o[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

void random_utf8(test_rng *rng, char *out, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t c;
        switch (test_rng_int(rng, 0, 3)) {
        case 0:
            c = (uint32_t)test_rng_int(rng, 1, 0x7f);
            break;
        case 1:
            c = (uint32_t)test_rng_int(rng, 0x80, 0x7ff);
            break;
        case 2: /* the BMP without the surrogates */
            c = (uint32_t)test_rng_int(rng, 0x800, 0xfffd);
            if (c >= 0xd800 && c <= 0xdfff) c -= 0x800;
            break;
        default:
            c = (uint32_t)test_rng_int(rng, 0x10000, 0x10ffff);
            break;
        }
        char buf[4];
        size_t k = put_utf8(c, buf);
        if (i + k > n) c = 'x', k = put_utf8(c, buf);
        memcpy(out + i, buf, k);
        i += k;
    }
}
