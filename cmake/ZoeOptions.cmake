# Build options shared by every layer.
set(ZOE_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when nvcc and the toolkit are found), ON, OFF")
set_property(CACHE ZOE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(ZOE_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined")
# The Python of the tests that compare against peer libraries (label python): scripts/test
# makes a virtual environment with tests/python/requirements.txt in $build/venv and passes it.
set(ZOE_PYTHON "$ENV{ZOE_PYTHON}" CACHE FILEPATH "Python with the packages of tests/python/requirements.txt")
option(ZOE_NATIVE "Tune for the build machine (-march=native); runtime dispatch picks AVX2/AVX-512 either way" OFF)

# POSIX 2008 (mkdtemp, mmap, clock_gettime ...) with strict C17.
add_compile_definitions(_POSIX_C_SOURCE=200809L _DEFAULT_SOURCE)

set(ZOE_C_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

option(ZOE_FUZZ "Build the libFuzzer targets of tests/fuzz (clang): every layer gets coverage instrumentation" OFF)

if(ZOE_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ZOE_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_C_COMPILER_ID}")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(ZOE_SANITIZE)
  add_compile_options(-fsanitize=${ZOE_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${ZOE_SANITIZE})
endif()
if(ZOE_NATIVE)
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-march=native>)
endif()

# CUDA: AUTO turns it on when a compiler and the toolkit are there.
set(ZOE_HAVE_CUDA OFF)
if(NOT ZOE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(ZOE_HAVE_CUDA ON)
  elseif(ZOE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZOE_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or add nvcc to PATH)")
  endif()
endif()
# The GPUs to build for. The first of these that is set decides: CMAKE_CUDA_ARCHITECTURES,
# ZOE_CUDA_ARCHS (e.g. -DZOE_CUDA_ARCHS=90 while iterating), the CUDAARCHS environment variable;
# else every one of the users' GPUs the toolkit can target: V100 (70, dropped by CUDA 13, so
# it needs a CUDA 12 toolkit), A100 (80), H100/H200 (90), each as machine code, plus PTX of the
# newest so that later GPUs JIT it.
set(ZOE_CUDA_ARCHS "" CACHE STRING "CUDA architectures, e.g. 80;90 (default: 70, 80, 90 where the toolkit supports them)")
if(ZOE_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    if(ZOE_CUDA_ARCHS)
      set(CMAKE_CUDA_ARCHITECTURES ${ZOE_CUDA_ARCHS})
    elseif(DEFINED ENV{CUDAARCHS} AND NOT "$ENV{CUDAARCHS}" STREQUAL "")
      set(CMAKE_CUDA_ARCHITECTURES $ENV{CUDAARCHS})
    else()
      execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch OUTPUT_VARIABLE _zoe_nvcc_archs
                      RESULT_VARIABLE _zoe_nvcc_rc ERROR_QUIET)
      set(_zoe_archs "")
      foreach(a 70 80 90)
        if(_zoe_nvcc_rc EQUAL 0 AND _zoe_nvcc_archs MATCHES "compute_${a}")
          list(APPEND _zoe_archs ${a}-real)
          set(_zoe_newest ${a})
        endif()
      endforeach()
      if(NOT _zoe_archs)
        message(FATAL_ERROR "zoe: ${CMAKE_CUDA_COMPILER} --list-gpu-arch names none of sm_70, sm_80, "
                            "sm_90; set ZOE_CUDA_ARCHS to the GPUs to build for")
      endif()
      list(APPEND _zoe_archs ${_zoe_newest}-virtual)
      set(CMAKE_CUDA_ARCHITECTURES ${_zoe_archs})
    endif()
  endif()
  message(STATUS "zoe: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  # CUDA 12 warns that it will drop the architectures before sm_75 (V100 is sm_70), and the
  # kernels' -Werror=all-warnings would turn the warning into a failed build.
  foreach(a ${CMAKE_CUDA_ARCHITECTURES})
    if(a MATCHES "^([0-9]+)" AND CMAKE_MATCH_1 LESS 75)
      string(APPEND CMAKE_CUDA_FLAGS " -Wno-deprecated-gpu-targets")
      break()
    endif()
  endforeach()
  set(CMAKE_CUDA_STANDARD 17)
endif()
message(STATUS "zoe: CUDA backend ${ZOE_HAVE_CUDA}, sanitizers '${ZOE_SANITIZE}'")
