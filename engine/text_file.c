/* Small text files, read whole. */
#include "engine/text_file.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/error.h"

zoe_status zoe_read_text_file(const char *path, const char *what, char **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return zoe_fail(ZOE_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!text || got != (size_t)n) {
        free(text);
        return zoe_fail(ZOE_ERR_IO, "cannot read %s '%s'", what, path);
    }
    text[n] = '\0';
    *out = text;
    return ZOE_OK;
}
