/* For builds without libFuzzer: runs LLVMFuzzerTestOneInput once on every file named on the
 * command line (directories: on each file inside), so gcc builds replay the seed corpora too.
 * Arguments that start with '-' are libFuzzer options and are ignored. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                fprintf(stderr, "replay: out of memory reading %s (%zu bytes)\n", path, cap);
                return 1;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int failed = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        struct stat sb;
        if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            DIR *d = opendir(argv[i]);
            for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
                if (e->d_name[0] == '.') continue;
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
                failed |= replay_file(path), files++;
            }
            if (d) closedir(d);
        } else {
            failed |= replay_file(argv[i]), files++;
        }
    }
    printf("replayed %d inputs\n", files);
    return failed || files == 0;
}
