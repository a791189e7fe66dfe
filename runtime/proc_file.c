/* Reading one "Key: value kB" figure of a Linux /proc file.
 *
 * Explained in docs/plan.md, "Memory: from the code that allocates". */
#include "runtime/proc_file.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double zoe_proc_kib(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            kib = atof(line + n + 1);
            break;
        }
    fclose(f);
    return kib;
}
