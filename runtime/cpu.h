/* Internal: the one CPU-feature probe of the project. Every SIMD path (the kernels' inner
 * loops, the host Adam, the dtype conversions, the benchmarks) asks here which instruction set
 * this CPU runs, so a level means the same everywhere.
 *
 * Explained in docs/train.md, "Threads" (ZOE_CPU_ISA). */
#ifndef ZOE_RUNTIME_CPU_H
#define ZOE_RUNTIME_CPU_H

/* Instruction-set levels, each including the one below. */
typedef enum zoe_cpu_isa {
    ZOE_CPU_ISA_SCALAR = 0, /* the compiler's baseline (SSE2 on x86-64), any CPU */
    ZOE_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    ZOE_CPU_ISA_AVX512 = 2, /* AVX-512 F/VL/BW/DQ, with the AVX2 level */
    /* the AVX-512 level and AVX512_BF16 (fp32 to bf16 in one instruction: Cooper Lake, Sapphire
     * Rapids, Zen 4 and later) */
    ZOE_CPU_ISA_AVX512_BF16 = 3,
    ZOE_CPU_ISA_COUNT
} zoe_cpu_isa;

/* The highest level this CPU and its operating system (saved vector registers) support, or the
 * lower one that the environment variable ZOE_CPU_ISA names (read once per process). */
zoe_cpu_isa zoe_cpu_isa_best(void);
/* Whether this CPU runs level isa. */
int zoe_cpu_isa_supported(zoe_cpu_isa isa);
/* "scalar", "avx2", "avx512", "avx512_bf16"; "unknown" for a value out of range. */
const char *zoe_cpu_isa_name(zoe_cpu_isa isa);

/* Function attributes that compile one function for a level, understood by gcc and clang. */
#define ZOE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ZOE_TARGET_AVX512                                                                          \
    __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))

#endif
