/* Helpers for the data tests: a private temporary directory, whole-file I/O and random text. */
#ifndef ZOE_TESTS_DATA_UTIL_H
#define ZOE_TESTS_DATA_UTIL_H

#include <stddef.h>
#include "testing.h"

/* Creates a fresh directory under TMPDIR (or /tmp) into dir (at least 256 bytes). */
void tmpdir_create(char *dir);
/* Removes the directory and every file in it. */
void tmpdir_remove(const char *dir);
/* Number of entries in dir (without . and ..); names of the first few go to list. */
int dir_entries(const char *dir, char *list, size_t list_len);
void write_file(const char *path, const void *data, size_t len);
/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL when it cannot be read. */
char *read_file(const char *path, size_t *len);
/* n bytes of random valid UTF-8 (ASCII, 2-, 3- and 4-byte code points), no NUL bytes. */
void random_utf8(test_rng *rng, char *out, size_t n);

#endif
