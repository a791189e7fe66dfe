/* The host Adam loops at the AVX-512 level: bf16 rounded in integer arithmetic. The whole file is
 * compiled for the level (kernels/CMakeLists.txt); adam.c calls in only where the CPU has it.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#define ADAM_AVX512_FN(name) name##_avx512
#include "kernels/cpu/adam_avx512.h"

/* ---- the compressed-state step (kernels/cpu/adam_state_simd.h), for both AVX-512 levels ---- */
#define VI             __m512i
#define VI_SET1(x)     _mm512_set1_epi32(x)
#define VI_ADD(a, b)   _mm512_add_epi32(a, b)
#define VI_XOR(a, b)   _mm512_xor_si512(a, b)
#define VI_AND(a, b)   _mm512_and_si512(a, b)
#define VI_MULLO(a, b) _mm512_mullo_epi32(a, b)
#define VI_SRLI(a, n)  _mm512_srli_epi32(a, n)
#define VI_SLLI(a, n)  _mm512_slli_epi32(a, n)
#define VI_IOTA()      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define V_AS_I(x)      _mm512_castps_si512(x)
#define V_AS_F(x)      _mm512_castsi512_ps(x)
#define V_SR_NAN(u, r, x)                                                                          \
    _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_srli_epi32(u, 16),      \
                         _mm512_set1_epi32(0x40))
#define V_STORE_LOW16(p, r) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtepi32_epi16(r))
#define V_ROUND_BF16(x)     round_bf16_avx512(x)
#define V_STORE_F16(p, x)   _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph(x, ROUND_NEAREST))
#define STATE_FN(name)      name##_avx512
#include "kernels/cpu/adam_state_simd.h"

/* ---- the int8 moments' blocks (kernels/cpu/adam_state_int8_simd.h) ---- */
#define INT8_VECTOR
#define INT8_FN(name) name##_element_avx512
#include "kernels/cpu/adam_state_int8_block.h"

#define V_SUB(a, b)       _mm512_sub_ps(a, b)
#define V_MIN(a, b)       _mm512_min_ps(a, b)
#define V_MAX(a, b)       _mm512_max_ps(a, b)
#define V_TRUNC(x)        _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
#define V_RSQRT(x)        _mm512_rsqrt14_ps(x)
#define VM                __mmask16
#define VM_CMP(a, b, p)   _mm512_cmp_ps_mask(a, b, p)
#define VM_AND(a, b)      ((__mmask16)((a) & (b)))
#define VM_OR(a, b)       ((__mmask16)((a) | (b)))
#define V_ADD_IF(a, m, b) _mm512_mask_add_ps(a, m, a, b)
#define V_SELECT(m, a, b) _mm512_mask_blend_ps(m, b, a)
#define V_LOAD_I8(p)      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define V_LOAD_U16(p)                                                                              \
    _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))))
#define V_LOAD_U8(p) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define V_STORE_I8(p, x)                                                                           \
    _mm_storeu_si128((__m128i *)(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(x)))
#define V_STORE_U8(p, x)  V_STORE_I8(p, x)
#define VI_MAX_U32(a, b)  _mm512_max_epu32(a, b)
#define VI_HMAX_U32(a)    ((uint32_t)_mm512_reduce_max_epu32(a))
#define INT8_VEC_FN(name) name##_avx512
#include "kernels/cpu/adam_state_int8_simd.h"
