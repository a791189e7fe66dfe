/* Internal to engine/: reading a JSON file whole (run configurations, trainer.json). */
#ifndef ZOE_ENGINE_JSON_FILE_H
#define ZOE_ENGINE_JSON_FILE_H

#include <cjson/cJSON.h>
#include "zoe/status.h"

/* Parses the file at path; kind prefixes its name in messages ("config " gives "cannot open
 * config 'run.json': No such file or directory"). *out is NULL when the text is not JSON (the
 * caller says what it expected). */
zoe_status zoe_json_read_file(const char *path, const char *kind, cJSON **out);

#endif
