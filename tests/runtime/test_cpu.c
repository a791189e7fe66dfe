/* The CPU-feature probe against the kernel's own reading of the CPU: the flags line of
 * /proc/cpuinfo (an independent reference: the kernel runs CPUID and checks XSAVE itself).
 * test_cpu --cap NAME sets ZOE_CPU_ISA=NAME first: a level this CPU runs caps the answer, any
 * other value (a level above it, a name that is none) leaves the probe's answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cpu.h"
#include "testing.h"

static int has_flag(const char *flags, const char *name) {
    size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    const char *cap = argc > 2 && strcmp(argv[1], "--cap") == 0 ? argv[2] : NULL;
    if (cap)
        setenv("ZOE_CPU_ISA", cap, 1);
    else
        unsetenv("ZOE_CPU_ISA");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192] = "", flags[8192] = "";
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            snprintf(flags, sizeof flags, "%s", line);
            break;
        }
    if (f) fclose(f);
    CHECK(flags[0], "/proc/cpuinfo has no flags line");
    zoe_cpu_isa want = ZOE_CPU_ISA_SCALAR;
    if (has_flag(flags, "avx2") && has_flag(flags, "fma") && has_flag(flags, "f16c")) {
        want = ZOE_CPU_ISA_AVX2;
        if (has_flag(flags, "avx512f") && has_flag(flags, "avx512vl") &&
            has_flag(flags, "avx512bw") && has_flag(flags, "avx512dq"))
            want = ZOE_CPU_ISA_AVX512;
        if (want == ZOE_CPU_ISA_AVX512 && has_flag(flags, "avx512_bf16"))
            want = ZOE_CPU_ISA_AVX512_BF16;
    }
    for (int isa = 0; cap && isa < (int)want; isa++)
        if (strcmp(cap, zoe_cpu_isa_name((zoe_cpu_isa)isa)) == 0) want = (zoe_cpu_isa)isa;
    zoe_cpu_isa got = zoe_cpu_isa_best();
    CHECK(got == want, "probe says %s, /proc/cpuinfo says %s", zoe_cpu_isa_name(got),
          zoe_cpu_isa_name(want));
    for (int isa = 0; isa < ZOE_CPU_ISA_COUNT; isa++)
        CHECK(zoe_cpu_isa_supported((zoe_cpu_isa)isa) == (isa <= (int)want), "supported(%s) wrong",
              zoe_cpu_isa_name((zoe_cpu_isa)isa));
    CHECK(!zoe_cpu_isa_supported(ZOE_CPU_ISA_COUNT), "a level past the last is supported");
    CHECK(strcmp(zoe_cpu_isa_name(ZOE_CPU_ISA_COUNT), "unknown") == 0, "name out of range");
    printf("cpu: %s%s%s\n", zoe_cpu_isa_name(got), cap ? ", ZOE_CPU_ISA=" : "", cap ? cap : "");
    return test_finish("test_cpu");
}
