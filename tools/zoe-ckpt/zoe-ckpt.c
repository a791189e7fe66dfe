/* zoe-ckpt: inspects, verifies and exports checkpoints. Uses the public API only.
 *   zoe-ckpt info DIR            step, model shape, the grid it was written at, file sizes
 *   zoe-ckpt verify DIR          every file's header and every tensor's checksum
 *   zoe-ckpt export --hf OUT DIR a Hugging Face GPT-2 or Llama directory (config.json,
 *                                model.safetensors)
 * DIR is a checkpoint or a directory of them (its newest complete one). Exit status: 0 ok,
 * 1 a checkpoint failed verification, 2 bad usage or a checkpoint that cannot be read. */
#include <stdio.h>
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
        printf("zoe-ckpt: wrote a Hugging Face GPT-2 model to %s "
               "(transformers.GPT2LMHeadModel.from_pretrained(\"%s\"))\n",
               argv[3], argv[3]);
        return 0;
    }
    return usage();
}
