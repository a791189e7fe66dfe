/* The configuration parsers on arbitrary bytes: as a JSON config file's text, and as a command
 * line (one argument per line), each followed by validate at a few world sizes. Any crash,
 * sanitizer report or hang is a finding; a refusal must come with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine/config/config_impl.h"
#include "zoe/train.h"

enum { MAX_ARGS = 64 };

static void check(zoe_status st) {
    if (st != ZOE_OK && !zoe_last_error()[0]) abort(); /* a refusal that names nothing */
}

static void validate_at_sizes(const zoe_train_config *cfg) {
    static const int worlds[] = {1, 2, 3, 8};
    for (int i = 0; i < 4; i++) check(zoe_train_config_validate(cfg, worlds[i]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    zoe_train_config cfg;
    zoe_train_config_defaults(&cfg);
    zoe_status st = zoe_train_config_apply_json(&cfg, text, "fuzz.json");
    check(st);
    if (st == ZOE_OK) validate_at_sizes(&cfg);

    /* The same bytes as argv: lines are arguments (NULs end them early, like a real argv). */
    char *argv[MAX_ARGS + 1] = {"zoe-train"};
    int argc = 1;
    for (char *line = text; line && argc < MAX_ARGS;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (strstr(line, "config") == NULL) argv[argc++] = line; /* no file reads */
        line = next;
    }
    zoe_train_config_defaults(&cfg);
    int help = 0, list = 0;
    st = zoe_train_config_parse_args(&cfg, argc, argv, &help, &list);
    check(st);
    if (st == ZOE_OK) validate_at_sizes(&cfg);
    free(text);
    return 0;
}
