/* The host Adam loops at the AVX512_BF16 level: adam_avx512.c's loops, with the new compute-dtype
 * weights and gradient snapshots rounded to bf16 by the conversion instruction. Compiled whole
 * with -mavx512bf16 (kernels/CMakeLists.txt); adam.c calls in only where the CPU has it.
 *
 * Explained in docs/offload.md, "Host Adam speed". */
#define ADAM_AVX512_FN(name) name##_avx512_bf16
#include "kernels/cpu/adam_avx512.h"
