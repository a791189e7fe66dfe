/* zoe-ckpt: inspects, verifies and exports checkpoints. Uses the public API only.
 *   zoe-ckpt info DIR            step, model shape, the grid it was written at, file sizes
 *   zoe-ckpt verify DIR          every file's header and every tensor's checksum
 *   zoe-ckpt export --hf OUT [--force] DIR  a Hugging Face GPT-2 or Llama directory
 *                                (config.json, model.safetensors); an OUT that holds a model
 *                                already is refused unless --force
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

#define USAGE "usage: zoe-ckpt info DIR | verify DIR | export --hf OUT [--force] DIR"

/* Bad usage: one line naming what is wrong (the word, where there is one), then the usage. */
static int usage(const char *what, const char *word) {
    if (word)
        fprintf(stderr, "zoe-ckpt: %s '%s' (%s)\n", what, word, USAGE);
    else
        fprintf(stderr, "zoe-ckpt: %s (%s)\n", what, USAGE);
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

/* Whether dir holds a model already (an export's or any Hugging Face one's files). */
static int holds_model(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors",
                                        "model.safetensors.index.json", "pytorch_model.bin"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            return 1;
        }
    }
    return 0;
}

/* zoe-ckpt export --hf OUT [--force] DIR, the options in any order. */
static int export_hf(int argc, char **argv) {
    const char *out = NULL, *dir = NULL;
    int force = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--hf") == 0) {
            if (out || i + 1 >= argc) return usage("export: --hf needs one OUT directory", NULL);
            out = argv[++i];
        } else if (strcmp(argv[i], "--force") == 0 && !force) {
            force = 1;
        } else if (strncmp(argv[i], "--", 2) == 0) {
            return usage("export: unknown or repeated option", argv[i]);
        } else if (!dir) {
            dir = argv[i];
        } else {
            return usage("export: unexpected argument", argv[i]);
        }
    }
    if (!out || !dir) return usage("export needs --hf OUT and a checkpoint DIR", NULL);
    if (!force && holds_model(out)) {
        fprintf(stderr,
                "zoe-ckpt: export: '%s' holds a model already (config.json or weights); "
                "--force overwrites it\n",
                out);
        return EXIT_USAGE;
    }
    if (zoe_checkpoint_export_hf(dir, out) != ZOE_OK) return failed(EXIT_USAGE);
    char cls[128];
    exported_class(out, cls, sizeof cls);
    printf("zoe-ckpt: wrote a Hugging Face %s to %s (transformers.%s.from_pretrained(\"%s\"))\n",
           cls, out, cls, out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("%s\n", USAGE);
        return 0;
    }
    if (argc < 2) return usage("no command", NULL);
    const char *cmd = argv[1];
    if (strcmp(cmd, "export") == 0) return export_hf(argc, argv);
    if (strcmp(cmd, "info") != 0 && strcmp(cmd, "verify") != 0)
        return usage("unknown command", cmd);
    if (argc < 3)
        return usage(strcmp(cmd, "info") == 0 ? "info needs a checkpoint DIR"
                                              : "verify needs a checkpoint DIR",
                     NULL);
    if (argc > 3) return usage("unexpected argument", argv[3]);
    if (strcmp(cmd, "info") == 0)
        return zoe_checkpoint_info(argv[2], stdout) == ZOE_OK ? 0 : failed(EXIT_USAGE);
    char dir[ZOE_PATH_MAX];
    if (zoe_checkpoint_resolve(argv[2], dir, sizeof dir) != ZOE_OK) return failed(EXIT_USAGE);
    if (zoe_checkpoint_verify(dir, stdout) != ZOE_OK) return failed(EXIT_BAD_CHECKPOINT);
    printf("zoe-ckpt: %s verified\n", dir);
    return 0;
}
