/* The host Adam loops for AVX2 (8 fp32 lanes), with F16C for fp16 and integer AVX2 for bf16's
 * round-to-nearest-even, so every gradient and output dtype stays in SIMD. The whole file is
 * compiled for that level (kernels/CMakeLists.txt); adam.c calls in only where the CPU has it.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#include <immintrin.h>
#include "kernels/cpu/adam_simd.h"

static inline __m256 load_bf16_avx2(const zoe_bf16 *p) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

/* zoe_f32_to_bf16 lane-wise, into the low 16 bits of each 32-bit lane: NaN stays a quiet NaN,
 * everything else rounds to nearest even. */
static inline __m256i round_bf16_avx2(__m256 x) {
    __m256i u = _mm256_castps_si256(x), high = _mm256_srli_epi32(u, 16);
    __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    __m256 rounded = _mm256_castsi256_ps(_mm256_srli_epi32(_mm256_add_epi32(u, bias), 16));
    __m256 quiet = _mm256_castsi256_ps(_mm256_or_si256(high, _mm256_set1_epi32(0x40)));
    return _mm256_castps_si256(_mm256_blendv_ps(rounded, quiet, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

/* packus works within 128-bit halves, [a0-3 b0-3 | a4-7 b4-7]: the permute puts qwords in
 * order 0, 2, 1, 3. */
static inline void stream2_bf16_avx2(zoe_bf16 *p, __m256 a, __m256 b) {
    __m256i packed = _mm256_packus_epi32(round_bf16_avx2(a), round_bf16_avx2(b));
    _mm256_stream_si256((__m256i *)p, _mm256_permute4x64_epi64(packed, 0xD8));
}

static inline void stream2_f16_avx2(zoe_f16 *p, __m256 a, __m256 b) {
    __m128i lo = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
    __m128i hi = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
    _mm256_stream_si256((__m256i *)p, _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

static inline double hsum_avx2(__m256 x) {
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(lo, hi));
    return (t[0] + t[1]) + (t[2] + t[3]);
}

#define VF                      __m256
#define W                       8
#define V_SET1(x)               _mm256_set1_ps(x)
#define V_ADD(a, b)             _mm256_add_ps(a, b)
#define V_MUL(a, b)             _mm256_mul_ps(a, b)
#define V_DIV(a, b)             _mm256_div_ps(a, b)
#define V_FMA(a, b, c)          _mm256_fmadd_ps(a, b, c)
#define V_SQRT(a)               _mm256_sqrt_ps(a)
#define V_LOAD_F32(p)           _mm256_loadu_ps(p)
#define V_STORE_F32(p, x)       _mm256_storeu_ps(p, x)
#define V_LOAD_BF16(p)          load_bf16_avx2(p)
#define V_LOAD_F16(p)           _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_STREAM_F32(p, x)      _mm256_stream_ps(p, x)
#define V_STREAM2_BF16(p, a, b) stream2_bf16_avx2(p, a, b)
#define V_STREAM2_F16(p, a, b)  stream2_f16_avx2(p, a, b)
#define V_FENCE()               _mm_sfence()
#define V_HSUM(x)               hsum_avx2(x)
#define ADAM_FN(name)           name##_avx2
#include "kernels/cpu/adam_simd.h"

void zoe_adam_avx2(const zoe_adam_consts *c, const float *w_in, float *w_out, float *m, float *v,
                   const void *grad, int gdt, void *out, int odt, size_t n) {
    adam_avx2(c, w_in, w_out, m, v, grad, gdt, out, odt, n);
}

void zoe_snapshot_avx2(void *dst, int ddt, const float *src, float scale, size_t n) {
    snapshot_avx2(dst, ddt, src, scale, n);
}

double zoe_accumulate_avx2(float *dst, const void *src, int sdt, float scale, int assign,
                           size_t n) {
    return accumulate_avx2(dst, src, sdt, scale, assign, n);
}

/* ---- the compressed-state step (kernels/cpu/adam_state_simd.h) ---- */
static inline __m256i sr_nan_avx2(__m256i u, __m256i r, __m256 x) {
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

/* Lanes hold values below 2^16, so the signed-to-unsigned saturation of packus is exact. */
static inline void store_low16_avx2(void *p, __m256i r) {
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)p, packed);
}

#define VI                  __m256i
#define VI_SET1(x)          _mm256_set1_epi32(x)
#define VI_ADD(a, b)        _mm256_add_epi32(a, b)
#define VI_XOR(a, b)        _mm256_xor_si256(a, b)
#define VI_AND(a, b)        _mm256_and_si256(a, b)
#define VI_MULLO(a, b)      _mm256_mullo_epi32(a, b)
#define VI_SRLI(a, n)       _mm256_srli_epi32(a, n)
#define VI_SLLI(a, n)       _mm256_slli_epi32(a, n)
#define VI_IOTA()           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define V_AS_I(x)           _mm256_castps_si256(x)
#define V_AS_F(x)           _mm256_castsi256_ps(x)
#define V_SR_NAN(u, r, x)   sr_nan_avx2(u, r, x)
#define V_STORE_LOW16(p, r) store_low16_avx2(p, r)
#define V_ROUND_BF16(x)     round_bf16_avx2(x)
#define V_STORE_F16(p, x)                                                                          \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT))
#define STATE_FN(name) name##_avx2
#include "kernels/cpu/adam_state_simd.h"

/* ---- the int8 moments' blocks (kernels/cpu/adam_state_int8_simd.h) ---- */
#define INT8_VECTOR
#define INT8_FN(name) name##_element_avx2
#include "kernels/cpu/adam_state_int8_block.h"

/* Integer-valued lanes within [-128, 255] to W bytes: the packs saturate nothing (codes of m
 * are within [-127, 127], of v within [0, 255]). */
static inline void store_i8_avx2(void *p, __m256 x) {
    __m256i k = _mm256_cvttps_epi32(x);
    __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(words, words));
}

static inline void store_u8_avx2(void *p, __m256 x) {
    __m256i k = _mm256_cvttps_epi32(x);
    __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packus_epi16(words, words));
}

static inline uint32_t hmax_u32_avx2(__m256i a) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

#define V_SUB(a, b)       _mm256_sub_ps(a, b)
#define V_MIN(a, b)       _mm256_min_ps(a, b)
#define V_MAX(a, b)       _mm256_max_ps(a, b)
#define V_TRUNC(x)        _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define V_RSQRT(x)        _mm256_rsqrt_ps(x)
#define VM                __m256
#define VM_CMP(a, b, p)   _mm256_cmp_ps(a, b, p)
#define VM_AND(a, b)      _mm256_and_ps(a, b)
#define VM_OR(a, b)       _mm256_or_ps(a, b)
#define V_ADD_IF(a, m, b) _mm256_add_ps(a, _mm256_and_ps(m, b))
#define V_SELECT(m, a, b) _mm256_blendv_ps(b, a, m)
#define V_LOAD_I8(p)      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define V_LOAD_U16(p)                                                                              \
    _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define V_LOAD_U8(p)      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define V_STORE_I8(p, x)  store_i8_avx2(p, x)
#define V_STORE_U8(p, x)  store_u8_avx2(p, x)
#define VI_MAX_U32(a, b)  _mm256_max_epu32(a, b)
#define VI_HMAX_U32(a)    hmax_u32_avx2(a)
#define INT8_VEC_FN(name) name##_avx2
#include "kernels/cpu/adam_state_int8_simd.h"
