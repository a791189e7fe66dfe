/* The host Adam loops at the AVX-512 level: bf16 rounded in integer arithmetic. The whole file is
 * compiled for the level (kernels/CMakeLists.txt); adam.c calls in only where the CPU has it. */
#define ADAM_AVX512_FN(name) name##_avx512
#include "kernels/cpu/adam_avx512.h"
