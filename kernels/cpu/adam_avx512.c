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

/* ---- the int8 moments' blocks (kernels/cpu/adam_state_int8_block.h) ---- */
#define INT8_FN(name) name##_avx512
#include "kernels/cpu/adam_state_int8_block.h"
