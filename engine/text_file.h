/* The one reader of small text files (JSON configs, trainer.json, Hugging Face config.json and
 * index files): the whole file into a NUL-terminated malloc'ed string. */
#ifndef ZOE_ENGINE_TEXT_FILE_H
#define ZOE_ENGINE_TEXT_FILE_H

#include "zoe/status.h"

/* *out receives the text (free it); what names the file in messages ("config" gives
 * "cannot open config 'PATH': reason"). ZOE_ERR_IO when it cannot be opened or read. */
zoe_status zoe_read_text_file(const char *path, const char *what, char **out);

#endif
