/* Internal to kernels/cpu: the CPU context, its workspace, loading and storing fp32/bf16 data
 * as fp32, ISA dispatch for the vectorised inner loops, and a vectorisable exp.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_KERNELS_CPU_UTIL_H
#define ZOE_KERNELS_CPU_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/cpu/cpu_ops.h"
#include "runtime/cpu.h"

struct zoe_cpu_kernels {
    zoe_kernel_plan plan;
    int threads; /* every OpenMP region runs with exactly this many threads */
    zoe_cpu_isa isa;
    float *thread_scratch; /* threads slices of thread_floats each, 64-byte aligned */
    size_t thread_floats;
    void *shared; /* scratch used outside (or read-only inside) parallel regions */
    size_t shared_bytes;
};

/* Elements per chunk of the element-wise loops: bf16 chunks are converted through stack
 * buffers of this many floats, so no op needs more than a few KiB of stack. */
#define ZOE_CPU_CHUNK 1024

static inline int64_t zoe_cpu_min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

static inline int64_t zoe_cpu_chunk_count(int64_t n) {
    return (n + ZOE_CPU_CHUNK - 1) / ZOE_CPU_CHUNK;
}
/* Length of chunk c of n elements. */
static inline int64_t zoe_cpu_chunk_len(int64_t n, int64_t c) {
    int64_t left = n - c * ZOE_CPU_CHUNK;
    return left < ZOE_CPU_CHUNK ? left : ZOE_CPU_CHUNK;
}

static inline float *zoe_cpu_thread_scratch(const zoe_cpu_kernels *ck, int thread) {
    return ck->thread_scratch + (size_t)thread * ck->thread_floats;
}

/* Workspace each op family needs, in floats per thread and bytes shared; create plans the
 * maximum over families. */
size_t zoe_cpu_matmul_thread_floats(const zoe_kernel_plan *plan);
size_t zoe_cpu_layernorm_thread_floats(const zoe_kernel_plan *plan);
size_t zoe_cpu_layernorm_shared_bytes(const zoe_kernel_plan *plan);
size_t zoe_cpu_attention_thread_floats(const zoe_kernel_plan *plan);
size_t zoe_cpu_embedding_thread_floats(const zoe_kernel_plan *plan);
size_t zoe_cpu_embedding_shared_bytes(const zoe_kernel_plan *plan);

/* OpenBLAS (pthreads build) owns the cores only inside a top-level cblas_sgemm. Code that
 * calls sgemm from inside an OpenMP region brackets the region with these, so each call runs
 * on its calling thread and the pool stays idle (no oversubscription). */
int zoe_cpu_blas_serial_begin(void);
void zoe_cpu_blas_serial_end(int saved_threads);

/* ---- fp32 views of fp32 or bf16 storage ----
 * load: n elements from src[off] as fp32: the storage itself for fp32, converted into buf for
 * bf16. out: where to compute n outputs for dst[off]: the storage itself for fp32, buf for
 * bf16; store then writes buf back (no-op for fp32 when computed in place). */
static inline const float *zoe_cpu_load(const void *src, zoe_dtype dt, int64_t off, int64_t n,
                                        float *buf) {
    if (dt == ZOE_F32) return (const float *)src + off;
    zoe_convert_bf16_to_f32(buf, (const zoe_bf16 *)src + off, (size_t)n);
    return buf;
}

static inline float *zoe_cpu_out(void *dst, zoe_dtype dt, int64_t off, float *buf) {
    return dt == ZOE_F32 ? (float *)dst + off : buf;
}

/* inout: like load, but for values that are updated and stored back (accumulation). */
static inline float *zoe_cpu_inout(void *dst, zoe_dtype dt, int64_t off, int64_t n, float *buf) {
    if (dt == ZOE_F32) return (float *)dst + off;
    zoe_convert_bf16_to_f32(buf, (const zoe_bf16 *)dst + off, (size_t)n);
    return buf;
}

static inline void zoe_cpu_store(void *dst, zoe_dtype dt, int64_t off, const float *val,
                                 int64_t n) {
    if (dt == ZOE_F32) {
        float *d = (float *)dst + off;
        if (d != val) memcpy(d, val, (size_t)n * sizeof(float));
    } else {
        zoe_convert_f32_to_bf16((zoe_bf16 *)dst + off, val, (size_t)n);
    }
}

/* A rows x cols block of a row-major matrix (row stride ld) at (r0, c0) as a contiguous fp32
 * tile [rows, cols]; and the reverse, overwriting or adding into the storage. */
void zoe_cpu_load_tile(float *tile, const void *src, zoe_dtype dt, int64_t ld, int64_t r0,
                       int64_t c0, int64_t rows, int64_t cols);
void zoe_cpu_store_tile(const zoe_cpu_kernels *ck, void *dst, zoe_dtype dt, int64_t ld, int64_t r0,
                        int64_t c0, const float *tile, int64_t rows, int64_t cols, int accumulate);

/* ---- ISA dispatch ----
 * ZOE_CPU_MULTIVERSION(name, params, args) compiles the always-inline function name##_body
 * three times (baseline, AVX2+FMA, AVX-512; the AVX512_BF16 level runs the AVX-512 one) and
 * defines `static void name params` that calls the variant for the context's ISA. params must
 * start with `zoe_cpu_isa isa`; args repeats the parameter names. The bodies are plain loops with
 * `#pragma omp simd`: the compiler vectorises each variant for its target. */
#define ZOE_CPU_INLINE static inline __attribute__((always_inline))

#define ZOE_CPU_MULTIVERSION(name, params, args)                                                   \
    static void name##_base params {                                                               \
        name##_body args;                                                                          \
    }                                                                                              \
    ZOE_TARGET_AVX2 static void name##_avx2 params {                                               \
        name##_body args;                                                                          \
    }                                                                                              \
    ZOE_TARGET_AVX512 static void name##_avx512 params {                                           \
        name##_body args;                                                                          \
    }                                                                                              \
    static void name params {                                                                      \
        switch (isa) {                                                                             \
        case ZOE_CPU_ISA_AVX512_BF16:                                                              \
        case ZOE_CPU_ISA_AVX512:                                                                   \
            name##_avx512 args;                                                                    \
            break;                                                                                 \
        case ZOE_CPU_ISA_AVX2:                                                                     \
            name##_avx2 args;                                                                      \
            break;                                                                                 \
        default:                                                                                   \
            name##_base args;                                                                      \
            break;                                                                                 \
        }                                                                                          \
    }

/* acc[0, n) += x[0, n), vectorised for isa. */
void zoe_cpu_accumulate(zoe_cpu_isa isa, float *acc, const float *x, int64_t n);
/* dst[off, off + n) += x in fp32, whatever the storage (buf: n floats for bf16). */
void zoe_cpu_add_into(const zoe_cpu_kernels *ck, zoe_dtype dt, void *dst, int64_t off,
                      const float *x, int64_t n, float *buf);

/* exp(x) for fp32 in plain arithmetic the vectoriser handles (no libm call): x = n ln2 + r,
 * |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation < 2e-9 relative), 2^n by
 * the exponent bits. Relative error about 2 ulp; inputs below -87 give ~0, above 88 give
 * ~FLT_MAX instead of inf. */
ZOE_CPU_INLINE float zoe_cpu_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in fp32 arithmetic. */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 split in two for an exact product */
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
