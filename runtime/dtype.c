/* The dtypes: sizes, names, parsing, and the conversions between fp32 and bf16/fp16 (round to
 * nearest even), vectorised where runtime/cpu.h says the CPU can.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <immintrin.h>
#include <strings.h>
#include "runtime/cpu.h"
#include "runtime/error.h"
#include "zoe/dtype.h"

size_t zoe_dtype_size(zoe_dtype dtype) {
    switch (dtype) {
    case ZOE_F32:
        return 4;
    case ZOE_BF16:
        return 2;
    case ZOE_F16:
        return 2;
    case ZOE_I32:
        return 4;
    case ZOE_I8:
        return 1;
    default:
        return 0;
    }
}

int zoe_dtype_is_float(zoe_dtype dtype) {
    return dtype == ZOE_F32 || dtype == ZOE_BF16 || dtype == ZOE_F16;
}

const char *zoe_dtype_name(zoe_dtype dtype) {
    switch (dtype) {
    case ZOE_F32:
        return "fp32";
    case ZOE_BF16:
        return "bf16";
    case ZOE_F16:
        return "fp16";
    case ZOE_I32:
        return "int32";
    case ZOE_I8:
        return "int8";
    default:
        return "unknown";
    }
}

zoe_status zoe_dtype_parse(const char *name, zoe_dtype *out) {
    static const struct {
        const char *name;
        zoe_dtype dtype;
    } names[] = {{"fp32", ZOE_F32},  {"f32", ZOE_F32},       {"float32", ZOE_F32},
                 {"bf16", ZOE_BF16}, {"bfloat16", ZOE_BF16}, {"fp16", ZOE_F16},
                 {"f16", ZOE_F16},   {"float16", ZOE_F16},   {"int32", ZOE_I32},
                 {"i32", ZOE_I32}};
    if (!name || !out) return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "dtype name is NULL");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(name, names[i].name) == 0) {
            *out = names[i].dtype;
            return ZOE_OK;
        }
    return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "unknown dtype '%s' (expected fp32, bf16 or fp16)",
                    name);
}

zoe_f16 zoe_f32_to_f16(float f) {
    uint32_t u = zoe_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (zoe_f16)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN */
    if (abs >= 0x477ff000u) return (zoe_f16)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) {
        /* Subnormal half (or zero): value = m * 2^-24. Shift the 24-bit significand right and
         * round to nearest even on the bits shifted out. */
        if (abs < 0x33000000u) return (zoe_f16)sign; /* below half of the smallest subnormal */
        uint32_t exp = abs >> 23;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (half & 1u))) half++;
        return (zoe_f16)(sign | half);
    }
    /* Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to even. */
    uint32_t r = abs - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (zoe_f16)(sign | (r >> 13));
}

float zoe_f16_to_f32(zoe_f16 h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu) return zoe_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return zoe_f32_from_bits(sign);
        /* Subnormal: exact in fp32. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return zoe_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* ---- bulk conversions: AVX2 (bf16 by integer rounding, fp16 by F16C) with scalar tails ---- */

ZOE_TARGET_AVX2 static void f32_to_bf16_avx2(zoe_bf16 *dst, const float *src, size_t n) {
    size_t i = 0;
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i qnan = _mm256_set1_epi32(0x00400000);
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * h));
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
            __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
            __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(u, qnan), isnan);
            r[h] = _mm256_srli_epi32(v, 16);
        }
        /* packus works per 128-bit lane; permute restores element order. */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    for (; i < n; i++) dst[i] = zoe_f32_to_bf16(src[i]);
}

ZOE_TARGET_AVX2 static void bf16_to_f32_avx2(float *dst, const zoe_bf16 *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), u);
    }
    for (; i < n; i++) dst[i] = zoe_bf16_to_f32(src[i]);
}

ZOE_TARGET_AVX2 static void f32_to_f16_f16c(zoe_f16 *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = zoe_f32_to_f16(src[i]);
}

ZOE_TARGET_AVX2 static void f16_to_f32_f16c(float *dst, const zoe_f16 *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = zoe_f16_to_f32(src[i]);
}

static int have_avx2(void) {
    return zoe_cpu_isa_supported(ZOE_CPU_ISA_AVX2);
}

void zoe_convert_f32_to_bf16(zoe_bf16 *dst, const float *src, size_t n) {
    if (have_avx2()) return f32_to_bf16_avx2(dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] = zoe_f32_to_bf16(src[i]);
}

void zoe_convert_bf16_to_f32(float *dst, const zoe_bf16 *src, size_t n) {
    if (have_avx2()) return bf16_to_f32_avx2(dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] = zoe_bf16_to_f32(src[i]);
}

void zoe_convert_f32_to_f16(zoe_f16 *dst, const float *src, size_t n) {
    if (have_avx2()) return f32_to_f16_f16c(dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] = zoe_f32_to_f16(src[i]);
}

void zoe_convert_f16_to_f32(float *dst, const zoe_f16 *src, size_t n) {
    if (have_avx2()) return f16_to_f32_f16c(dst, src, n);
    for (size_t i = 0; i < n; i++) dst[i] = zoe_f16_to_f32(src[i]);
}

zoe_status zoe_convert(void *dst, zoe_dtype dst_dtype, const void *src, zoe_dtype src_dtype,
                       size_t n) {
    if (dst_dtype == src_dtype && zoe_dtype_size(dst_dtype)) {
        memmove(dst, src, n * zoe_dtype_size(dst_dtype));
        return ZOE_OK;
    }
    if (src_dtype == ZOE_F32 && dst_dtype == ZOE_BF16)
        zoe_convert_f32_to_bf16(dst, src, n);
    else if (src_dtype == ZOE_F32 && dst_dtype == ZOE_F16)
        zoe_convert_f32_to_f16(dst, src, n);
    else if (src_dtype == ZOE_BF16 && dst_dtype == ZOE_F32)
        zoe_convert_bf16_to_f32(dst, src, n);
    else if (src_dtype == ZOE_F16 && dst_dtype == ZOE_F32)
        zoe_convert_f16_to_f32(dst, src, n);
    else if (src_dtype == ZOE_BF16 && dst_dtype == ZOE_F16) {
        const zoe_bf16 *s = src;
        zoe_f16 *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = zoe_f32_to_f16(zoe_bf16_to_f32(s[i]));
    } else if (src_dtype == ZOE_F16 && dst_dtype == ZOE_BF16) {
        const zoe_f16 *s = src;
        zoe_bf16 *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = zoe_f32_to_bf16(zoe_f16_to_f32(s[i]));
    } else
        return zoe_fail(ZOE_ERR_INVALID_ARGUMENT, "cannot convert %s to %s",
                        zoe_dtype_name(src_dtype), zoe_dtype_name(dst_dtype));
    return ZOE_OK;
}
