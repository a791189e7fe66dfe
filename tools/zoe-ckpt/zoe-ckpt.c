/* zoe-ckpt: inspects, verifies and exports checkpoints. Uses the public API only.
 *   zoe-ckpt info DIR            step, model shape, the grid it was written at, file sizes
 *   zoe-ckpt verify DIR          every file's header and every tensor's checksum
 *   zoe-ckpt export --hf OUT DIR a Hugging Face GPT-2 or Llama directory (config.json,
 *                                model.safetensors)
 * DIR is a checkpoint or a directory of them (its newest complete one). Exit status: 0 ok,
 * 1 a checkpoint failed verification, 2 bad usage or a checkpoint that cannot be read.
 *
 * Explained in docs/checkpoint.md; docs/hf.md, "Export". */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/checkpoint.h"
#include "zoe/zoe.h"

#define EXIT_BAD_CHECKPOINT 1
#define EXIT_USAGE          2

static int usage(void) {
    fprintf(stderr, "usage: zoe-ckpt info DIR | verify DIR | export --hf OUT DIR\n");
    return EXIT_USAGE;
}

static int failed(int code) {
    fprintf(stderr, "zoe-ckpt: %s\n", zoe_last_error());
    return code;
}

/* The transformers class the export wrote (config.json's architectures[0]) into cls. */
static void exported_class(const char *out_dir, char *cls, size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    snprintf(cls, cap, "the model");
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char text[1 << 14];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    const cJSON *arch =
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    if (cJSON_IsString(arch)) snprintf(cls, cap, "%s", arch->valuestring);
    cJSON_Delete(root);
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: zoe-ckpt info DIR | verify DIR | export --hf OUT DIR\n");
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "info") == 0)
        return zoe_checkpoint_info(argv[2], stdout) == ZOE_OK ? 0 : failed(EXIT_USAGE);
    if (argc == 3 && strcmp(argv[1], "verify") == 0) {
        char dir[ZOE_PATH_MAX];
        if (zoe_checkpoint_resolve(argv[2], dir, sizeof dir) != ZOE_OK) return failed(EXIT_USAGE);
        if (zoe_checkpoint_verify(dir, stdout) != ZOE_OK) return failed(EXIT_BAD_CHECKPOINT);
        printf("zoe-ckpt: %s verified\n", dir);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "export") == 0 && strcmp(argv[2], "--hf") == 0) {
        if (zoe_checkpoint_export_hf(argv[4], argv[3]) != ZOE_OK) return failed(EXIT_USAGE);
        char cls[128];
        exported_class(argv[3], cls, sizeof cls);
        printf(
            "zoe-ckpt: wrote a Hugging Face %s to %s (transformers.%s.from_pretrained(\"%s\"))\n",
            cls, argv[3], cls, argv[3]);
        return 0;
    }
    return usage();
}
