/* The host array allocator (runtime/host_array.h): small arrays 64-byte aligned, large ones
 * 2 MiB aligned, every byte writable (valgrind and ASan see the whole size), and, where the
 * kernel offers transparent huge pages ("always" or "madvise" in
 * /sys/kernel/mm/transparent_hugepage/enabled), the large array's mapping eligible for them
 * (its /proc/self/smaps entry says "THPeligible: 1": the kernel's own reading of the advice). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/host_array.h"
#include "testing.h"

static int thp_offered(void) {
    char mode[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
    fclose(f);
    return strstr(mode, "[always]") || strstr(mode, "[madvise]");
}

/* The THPeligible line of the smaps entry that holds address p; -1 when none is found. */
static int thp_eligible(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int inside = 0, eligible = -1;
    const uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = a >= lo && a < hi;
        else if (inside && sscanf(line, "THPeligible: %d", &eligible) == 1)
            break;
    }
    fclose(f);
    return eligible;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    test_rng rng;
    test_rng_seed(&rng, 5);
    const size_t sizes[] = {
        1, 63, 4096, ZOE_HOST_ARRAY_HUGE_MIN - 1, ZOE_HOST_ARRAY_HUGE_MIN, (size_t)9 << 20 | 12345};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t bytes = sizes[k];
        unsigned char *p = zoe_host_array_alloc(bytes);
        CHECK(p != NULL, "%zu bytes not allocated", bytes);
        if (!p) continue;
        const size_t align = bytes >= ZOE_HOST_ARRAY_HUGE_MIN ? (size_t)2 << 20 : 64;
        CHECK((uintptr_t)p % align == 0, "%zu bytes at %p: not %zu-byte aligned", bytes, (void *)p,
              align);
        const unsigned char fill = (unsigned char)(1 + test_rng_uniform(&rng) * 254);
        memset(p, fill, bytes);
        CHECK(p[0] == fill && p[bytes - 1] == fill, "%zu bytes: the ends do not hold", bytes);
        if (bytes >= ZOE_HOST_ARRAY_HUGE_MIN && thp_offered()) {
            int eligible = thp_eligible(p);
            CHECK(eligible == 1 || eligible == -1,
                  "%zu bytes: smaps says THPeligible %d, huge pages were not advised", bytes,
                  eligible);
        }
        free(p);
    }
    printf("transparent huge pages %s\n", thp_offered() ? "offered" : "not offered");
    return test_finish("test_host_array");
}
