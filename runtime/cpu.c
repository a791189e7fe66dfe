/* The CPU-feature probe: CPUID for the instructions, XGETBV for the operating system's
 * support of the wider registers. gcc's and clang's __builtin_cpu_supports know different
 * feature names (clang 14 has no "f16c"), so the probe reads the bits itself.
 *
 * Explained in docs/train.md, "Threads" (ZOE_CPU_ISA). */
#include "runtime/cpu.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "zoe/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0: which register states the OS saves on a context switch. */
static unsigned long long read_xcr0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static zoe_cpu_isa probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return ZOE_CPU_ISA_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1,
              f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return ZOE_CPU_ISA_SCALAR;
    const unsigned long long xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return ZOE_CPU_ISA_SCALAR; /* XMM and YMM state */
    if (__get_cpuid_max(0, 0) < 7) return ZOE_CPU_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1,
              avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    if (!(avx2 && fma && f16c)) return ZOE_CPU_ISA_SCALAR;
    const unsigned max_subleaf = a;
    const int zmm_state = (xcr0 & 0xe6) == 0xe6; /* opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (!(zmm_state && avx512f && avx512dq && avx512bw && avx512vl)) return ZOE_CPU_ISA_AVX2;
    if (max_subleaf < 1) return ZOE_CPU_ISA_AVX512;
    __cpuid_count(7, 1, a, b, c, d);
    const int avx512_bf16 = (a >> 5) & 1;
    return avx512_bf16 ? ZOE_CPU_ISA_AVX512_BF16 : ZOE_CPU_ISA_AVX512;
}
#else
static zoe_cpu_isa probe(void) {
    return ZOE_CPU_ISA_SCALAR;
}
#endif

/* The answer never changes within a process: probed once, then read (CPUID traps to the
 * hypervisor in a VM, and the conversions ask per chunk). */
static pthread_once_t probed = PTHREAD_ONCE_INIT;
static zoe_cpu_isa best = ZOE_CPU_ISA_SCALAR;

/* ZOE_CPU_ISA=scalar|avx2|avx512|avx512_bf16 caps the level: every path this CPU has, run by
 * the whole program (the tests at avx2 on an AVX-512 machine; a benchmark's A/B of two paths). */
static void probe_once(void) {
    best = probe();
    const char *cap = getenv("ZOE_CPU_ISA");
    if (!cap || !*cap) return;
    for (int isa = 0; isa < ZOE_CPU_ISA_COUNT; isa++)
        if (strcmp(cap, zoe_cpu_isa_name((zoe_cpu_isa)isa)) == 0) {
            if (isa > (int)best)
                zoe_log(ZOE_LOG_WARN, "ZOE_CPU_ISA=%s: this CPU runs only up to %s", cap,
                        zoe_cpu_isa_name(best));
            else
                best = (zoe_cpu_isa)isa;
            return;
        }
    zoe_log(ZOE_LOG_WARN, "ZOE_CPU_ISA='%s' is not scalar, avx2, avx512 or avx512_bf16; using %s",
            cap, zoe_cpu_isa_name(best));
}

zoe_cpu_isa zoe_cpu_isa_best(void) {
    pthread_once(&probed, probe_once);
    return best;
}

int zoe_cpu_isa_supported(zoe_cpu_isa isa) {
    return isa >= ZOE_CPU_ISA_SCALAR && isa <= zoe_cpu_isa_best();
}

const char *zoe_cpu_isa_name(zoe_cpu_isa isa) {
    static const char *const names[] = {"scalar", "avx2", "avx512", "avx512_bf16"};
    return isa >= 0 && isa < ZOE_CPU_ISA_COUNT ? names[isa] : "unknown";
}
