/* Internal to engine/: reading a JSON file whole (run configurations, trainer.json). One reader
 * for both: a directory, a device or an oversized file is refused before anything is allocated
 * for it, and text after the JSON value is an error, not ignored.
 *
 * Explained in docs/architecture.md, "engine/ inside". */
#ifndef ZOE_ENGINE_JSON_FILE_H
#define ZOE_ENGINE_JSON_FILE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include "zoe/status.h"

/* The whole regular file at path as a NUL-terminated string (*out, the caller frees), at most
 * max_bytes long; kind prefixes its name in messages ("config " gives "cannot open config
 * 'run.json': No such file or directory"). */
zoe_status zoe_json_read_text(const char *path, const char *kind, size_t max_bytes, char **out);
/* Parses text as one JSON value with nothing after it; name says whose text it is in messages.
 * *out: the value (the caller deletes it). */
zoe_status zoe_json_parse(const char *text, const char *name, cJSON **out);
/* zoe_json_read_text then zoe_json_parse. */
zoe_status zoe_json_read_file(const char *path, const char *kind, size_t max_bytes, cJSON **out);
/* 1 and *out = v's value when v is a JSON number that is an integer an int64 holds, else 0 and
 * *out untouched: a damaged or hostile file may hold any number, and the cast of a double out
 * of int64's range is undefined. */
int zoe_json_int64(const cJSON *v, int64_t *out);

#endif
