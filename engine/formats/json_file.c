/* Reading a JSON file whole.
 *
 * Explained in docs/architecture.md, "engine/ inside". */
#include "engine/formats/json_file.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/error.h"

zoe_status zoe_json_read_text(const char *path, const char *kind, size_t max_bytes, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return zoe_fail(ZOE_ERR_IO, "cannot open %s'%s': %s", kind, path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return zoe_fail(ZOE_ERR_IO, "%s'%s' is %s, not a JSON file", kind, path,
                        S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    }
    if ((size_t)sb.st_size > max_bytes) {
        fclose(f);
        return zoe_fail(ZOE_ERR_IO, "%s'%s' is %lld bytes, more than the %zu it may be", kind, path,
                        (long long)sb.st_size, max_bytes);
    }
    size_t n = (size_t)sb.st_size;
    char *text = malloc(n + 1);
    size_t got = text ? fread(text, 1, n, f) : 0;
    fclose(f);
    if (!text)
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "out of memory reading %s'%s' (%zu bytes)", kind,
                        path, n + 1);
    if (got != n) {
        free(text);
        return zoe_fail(ZOE_ERR_IO, "cannot read %s'%s'", kind, path);
    }
    text[n] = '\0';
    *out = text;
    return ZOE_OK;
}

zoe_status zoe_json_parse(const char *text, const char *name, cJSON **out) {
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (*out) return ZOE_OK;
    /* cJSON stops at the first byte it cannot take: a syntax error, or text after a whole value
     * (which require_null_terminated refuses). */
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    cJSON *prefix = NULL;
    int complete = at > 0 && (prefix = cJSON_ParseWithLength(text, at)) != NULL;
    cJSON_Delete(prefix);
    if (complete)
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s: text after the JSON object at byte %zu",
                        name, at);
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "%s is not valid JSON (byte %zu)", name, at);
}

zoe_status zoe_json_read_file(const char *path, const char *kind, size_t max_bytes, cJSON **out) {
    *out = NULL;
    char *text = NULL;
    ZOE_TRY(zoe_json_read_text(path, kind, max_bytes, &text));
    char name[1200];
    snprintf(name, sizeof name, "%s'%s'", kind, path);
    zoe_status st = zoe_json_parse(text, name, out);
    free(text);
    return st;
}

int zoe_json_int64(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -9.2e18 && v->valuedouble <= 9.2e18) ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}
