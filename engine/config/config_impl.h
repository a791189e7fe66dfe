/* Internal to the engine (and its fuzz target): the configuration's JSON text, parsed.
 *
 * Explained in docs/train.md. */
#ifndef ZOE_ENGINE_CONFIG_IMPL_H
#define ZOE_ENGINE_CONFIG_IMPL_H

#include "zoe/train.h"

/* Applies a NUL-terminated JSON object to cfg, as zoe_train_config_load_json does for a file's
 * contents; messages name `path`. */
zoe_status zoe_train_config_apply_json(zoe_train_config *cfg, const char *text, const char *path);

#endif
