/* Internal: the host Adam loops for AVX-512 (16 fp32 lanes), compiled twice: adam_avx512.c for
 * the AVX-512 level and adam_avx512_bf16.c, with -mavx512bf16, for the level that adds the bf16
 * conversion instruction (runtime/cpu.h). The including file first defines ADAM_AVX512_FN(name),
 * the names of its level's functions. The two give the same bits: the conversion instruction rounds
 * to nearest even as zoe_f32_to_bf16 does, and the lanes where it does not (denormals) take the
 * integer rounding.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#ifndef ZOE_KERNELS_CPU_ADAM_AVX512_H
#define ZOE_KERNELS_CPU_ADAM_AVX512_H
#include <immintrin.h>
#include "kernels/cpu/adam_simd.h"

static inline __m512 load_bf16_avx512(const zoe_bf16 *p) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* zoe_f32_to_bf16 lane-wise, into the low 16 bits of each 32-bit lane: NaN stays a quiet NaN,
 * everything else rounds to nearest even. Written in few operations (the NaN lanes by one merge
 * under the unordered mask): they share ports 0 and 5 with the step's arithmetic. */
static inline __m512i round_bf16_avx512(__m512 x) {
    __m512i u = _mm512_castps_si512(x), high = _mm512_srli_epi32(u, 16);
    __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
}

/* packus works within 128-bit lanes, [a0-3 b0-3 | a4-7 b4-7 | ...]: the permute puts the
 * qwords in order 0, 2, 4, 6, 1, 3, 5, 7. */
static inline void stream2_bf16_integer(zoe_bf16 *p, __m512 a, __m512 b) {
    __m512i packed = _mm512_packus_epi32(round_bf16_avx512(a), round_bf16_avx512(b));
    _mm512_stream_si512(
        (__m512i *)p, _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), packed));
}

/* The same rounding by the AVX512_BF16 instruction (one instruction for both vectors, in
 * order), which treats denormal inputs as zero where zoe_f32_to_bf16 rounds them: a pair with a
 * denormal lane takes the integer path. The check is four mask operations; a pair of weights with
 * a denormal is rare, and a gradient snapshot's zeros are not denormals. */
#ifdef __AVX512BF16__
static inline void stream2_bf16_native(zoe_bf16 *p, __m512 a, __m512 b) {
    const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x7fffff);
    __m512i ua = _mm512_castps_si512(a), ub = _mm512_castps_si512(b);
    __mmask16 da = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ua, exponent), ua, mantissa);
    __mmask16 db = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(ub, exponent), ub, mantissa);
    if (__builtin_expect(_kortestz_mask16_u8(da, db), 1))
        _mm512_stream_si512((__m512i *)p, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    else
        stream2_bf16_integer(p, a, b);
}
#define V_STREAM2_BF16(p, a, b) stream2_bf16_native(p, a, b)
#else
#define V_STREAM2_BF16(p, a, b) stream2_bf16_integer(p, a, b)
#endif

#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
static inline void stream2_f16_avx512(zoe_f16 *p, __m512 a, __m512 b) {
    __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(a, ROUND_NEAREST)),
                                      _mm512_cvtps_ph(b, ROUND_NEAREST), 1);
    _mm512_stream_si512((__m512i *)p, both);
}

static inline double hsum_avx512(__m512 x) {
    float t[16];
    _mm512_storeu_ps(t, x);
    double s = 0;
    for (int i = 0; i < 16; i++) s += t[i];
    return s;
}

#define VF                     __m512
#define W                      16
#define V_SET1(x)              _mm512_set1_ps(x)
#define V_ADD(a, b)            _mm512_add_ps(a, b)
#define V_MUL(a, b)            _mm512_mul_ps(a, b)
#define V_DIV(a, b)            _mm512_div_ps(a, b)
#define V_FMA(a, b, c)         _mm512_fmadd_ps(a, b, c)
#define V_SQRT(a)              _mm512_sqrt_ps(a)
#define V_LOAD_F32(p)          _mm512_loadu_ps(p)
#define V_STORE_F32(p, x)      _mm512_storeu_ps(p, x)
#define V_LOAD_BF16(p)         load_bf16_avx512(p)
#define V_LOAD_F16(p)          _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_STREAM_F32(p, x)     _mm512_stream_ps(p, x)
#define V_STREAM2_F16(p, a, b) stream2_f16_avx512(p, a, b)
#define V_FENCE()              _mm_sfence()
#define V_HSUM(x)              hsum_avx512(x)
#define ADAM_FN(name)          ADAM_AVX512_FN(name)
#include "kernels/cpu/adam_simd.h"

void ADAM_FN(zoe_adam)(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m,
                       float *v, const void *grad, int gdt, void *out, int odt, size_t n) {
    ADAM_FN(adam)(c, w_in, w_out, m, v, grad, gdt, out, odt, n);
}

void ADAM_FN(zoe_snapshot)(void *dst, int ddt, const float *src, float scale, size_t n) {
    ADAM_FN(snapshot)(dst, ddt, src, scale, n);
}

double ADAM_FN(zoe_accumulate)(float *dst, const void *src, int sdt, float scale, int assign,
                               size_t n) {
    return ADAM_FN(accumulate)(dst, src, sdt, scale, assign, n);
}

#endif /* ZOE_KERNELS_CPU_ADAM_AVX512_H */
