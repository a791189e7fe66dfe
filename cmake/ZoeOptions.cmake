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
if(ZOE_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # sm_90 machine code for Hopper plus PTX so newer GPUs JIT it.
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
endif()
message(STATUS "zoe: CUDA backend ${ZOE_HAVE_CUDA}, sanitizers '${ZOE_SANITIZE}'")
