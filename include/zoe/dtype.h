/* Element types and the one place where bf16/fp16 <-> fp32 conversion is defined
 * (round to nearest even; NaN stays NaN; fp16 keeps subnormals and overflows to inf).
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#ifndef ZOE_DTYPE_H
#define ZOE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "zoe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zoe_dtype {
    ZOE_F32 = 0,
    ZOE_BF16 = 1,
    ZOE_F16 = 2,
    ZOE_I32 = 3,
    /* 8-bit codes; only the host Adam's blockwise moments use it (kernels/adam_state.h) */
    ZOE_I8 = 4,
    ZOE_DTYPE_COUNT
} zoe_dtype;

typedef uint16_t zoe_bf16;
typedef uint16_t zoe_f16;

/* Bytes per element, or 0 for an unknown dtype. */
size_t zoe_dtype_size(zoe_dtype dtype);
/* 1 for the floating-point dtypes (fp32, bf16, fp16), 0 otherwise. */
int zoe_dtype_is_float(zoe_dtype dtype);
/* "fp32", "bf16", "fp16", "int32", "int8", or "unknown". */
const char *zoe_dtype_name(zoe_dtype dtype);
/* Parses "fp32"/"f32"/"float32", "bf16", "fp16"/"f16"/"float16", "int32". */
zoe_status zoe_dtype_parse(const char *name, zoe_dtype *out);

static inline uint32_t zoe_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float zoe_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline zoe_bf16 zoe_f32_to_bf16(float f) {
    uint32_t u = zoe_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (zoe_bf16)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (zoe_bf16)(u >> 16);
}
static inline float zoe_bf16_to_f32(zoe_bf16 h) {
    return zoe_f32_from_bits((uint32_t)h << 16);
}

zoe_f16 zoe_f32_to_f16(float f);
float zoe_f16_to_f32(zoe_f16 h);

/* Bulk conversions (SIMD where the CPU has it). n elements; buffers must not overlap. */
void zoe_convert_f32_to_bf16(zoe_bf16 *dst, const float *src, size_t n);
void zoe_convert_bf16_to_f32(float *dst, const zoe_bf16 *src, size_t n);
void zoe_convert_f32_to_f16(zoe_f16 *dst, const float *src, size_t n);
void zoe_convert_f16_to_f32(float *dst, const zoe_f16 *src, size_t n);
/* Any float dtype to any float dtype (fp32/bf16/fp16); same dtype is a copy. */
zoe_status zoe_convert(void *dst, zoe_dtype dst_dtype, const void *src, zoe_dtype src_dtype,
                       size_t n);

#ifdef __cplusplus
}
#endif
#endif
