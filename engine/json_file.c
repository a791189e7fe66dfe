/* Reading a JSON file whole. */
#include "engine/json_file.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"

zoe_status zoe_json_read_file(const char *path, const char *kind, cJSON **out) {
    char name[1200];
    snprintf(name, sizeof name, "%s'%s'", kind, path);
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return zoe_fail(ZOE_ERR_IO, "cannot open %s: %s", name, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!text || got != (size_t)n) {
        free(text);
        return zoe_fail(ZOE_ERR_IO, "cannot read %s", name);
    }
    text[n] = '\0';
    *out = cJSON_Parse(text);
    free(text);
    return ZOE_OK;
}
