# The environment of every test: one thread per rank (tests run side by side on few cores),
# passive OpenMP waiting, ranks that yield their core while they wait in MPI, and, in sanitizer
# builds, LeakSanitizer told about the MPI libraries' own allocations. Tests registered by hand
# use it too. Open MPI spins in a blocking call unless it counts more ranks than cores; beside
# other work there are fewer free cores than it counts, and a spinning rank takes the core its
# peer needs: test_train_dpu_np2 took 55 s spinning and 35 s yielding on a 2-core VM at load 20
# (twice the CPU time spinning), and once ran past its 120 s timeout under ctest -j2.
set(ZOE_TEST_ENV "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1;OMP_WAIT_POLICY=passive;ZOE_LOG=warn"
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
# Added for the tests whose mpiexec runs are refused on purpose (bad input: every rank exits 2
# before any work). When a rank exits non-zero, Open MPI's mpirun sends the job SIGCONT, SIGTERM
# odls_base_sigkill_timeout (default 1) s later and SIGKILL as long after, even when every rank
# has already exited: 2 s per refused run, minutes over the command-line tests (test_cli_rules,
# test_zoe_train_cli, test_zoe_train_eval, test_generate_cli, test_hf_reference). 0 ends the job
# at once and keeps the exit status and the ranks' output. Not for every test: the ranks' stop
# on mpirun's SIGCONT (docs/multi-node.md, "Signals") needs the time (test_ckpt_cli).
set(ZOE_TEST_REFUSED_RUNS_ENV "OMPI_MCA_odls_base_sigkill_timeout=0")
if(ZOE_SANITIZE MATCHES "thread")
  # libomp's own synchronisation is invisible to TSan unless its Archer tool annotates it
  # (clang); reports from uninstrumented libraries (MPI, BLAS) are not zoe's.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-resource-dir OUTPUT_VARIABLE _resource_dir
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_file(ZOE_ARCHER_LIBRARY libarcher.so HINTS "${_resource_dir}/../..")
  list(APPEND ZOE_TEST_ENV
       "TSAN_OPTIONS=halt_on_error=1:exitcode=66:allocator_may_return_null=1:ignore_noninstrumented_modules=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
  if(ZOE_ARCHER_LIBRARY)
    list(APPEND ZOE_TEST_ENV "OMP_TOOL_LIBRARIES=${ZOE_ARCHER_LIBRARY}")
  endif()
elseif(ZOE_SANITIZE)
  # allocator_may_return_null: an allocation too large is zoe's to report (tests check the
  # "out of memory" message), not the sanitizer's to abort on.
  list(APPEND ZOE_TEST_ENV "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1")
  # LeakSanitizer recognises Open MPI's and PMIx's own blocks (tests/lsan.supp) by the module of
  # the frame that allocated them: the plugins that allocate them are unloaded by MPI_Finalize
  # before the leak check, unless dlclose does nothing (tests/lsan_keep_plugins.c, preloaded).
  # With them mapped, malloc's default fast unwinder suffices; the slow one
  # (fast_unwind_on_malloc=0, which found the frames of libmpi.so under the unloaded plugins) was
  # 85% of the ASan suite's CPU time: test_ckpt_int8_np1 took 57 s of CPU, 8 s without it.
  set(ZOE_LSAN_KEEP_PLUGINS_DIR "${CMAKE_BINARY_DIR}/tests")
  list(APPEND ZOE_TEST_ENV
       "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0"
       "LD_PRELOAD=${ZOE_LSAN_KEEP_PLUGINS_DIR}/libzoe_lsan_keep_plugins.so")
endif()

# Every test its own Open MPI session directory. Open MPI 4 keeps the session directories of all
# of a user's jobs under one top directory, $TMPDIR/ompi.HOST.UID, and a job that ends removes
# that top directory when it looks empty: a job starting at that moment beside it (another test
# of ctest -j, another build's tests, a second CI on the box) fails in MPI_Init ("A call to mkdir
# was unable to create the desired directory ... No such file or directory", open-mpi/ompi#8510)
# and exits 1 with Open MPI's lines only. Under load the window widens: zoe-generate's exit 1
# with no line of its own in test_cli_rules (issue #34) had this form. A top directory per test
# shares nothing with any other job.
set(ZOE_MPI_SESSIONS "${CMAKE_BINARY_DIR}/mpi-sessions")
# zoe_isolate_mpi_sessions(): the last line of each tests/*/CMakeLists.txt (tests/CMakeLists.txt
# refuses a folder of tests without it). It also gives each test a COST, its timeout: where ctest
# has no times of its own (a clean clone: CI) it starts the costliest tests first, so that the
# longest one does not start last and run alone at the end of a ctest -j2.
function(zoe_isolate_mpi_sessions)
  get_property(_tests DIRECTORY PROPERTY TESTS)
  foreach(_test ${_tests})
    set_property(TEST ${_test} APPEND PROPERTY ENVIRONMENT
                 "OMPI_MCA_orte_tmpdir_base=${ZOE_MPI_SESSIONS}/${_test}")
    get_test_property(${_test} TIMEOUT _timeout)
    if(_timeout)
      set_tests_properties(${_test} PROPERTIES COST ${_timeout})
    endif()
  endforeach()
  set_property(DIRECTORY PROPERTY ZOE_MPI_SESSIONS_ISOLATED TRUE)
endfunction()

# zoe_add_layer(NAME DEPS ...): one static library per folder, sources globbed so that
# adding a file needs no edit here. CUDA halves (cuda/*.cu, *_cuda.c) join only with ZOE_CUDA.
function(zoe_add_layer name)
  cmake_parse_arguments(L "" "" "DEPS;CUDA_DEPS" ${ARGN})
  file(GLOB _c CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.c" "${CMAKE_CURRENT_SOURCE_DIR}/cpu/*.c")
  list(FILTER _c EXCLUDE REGEX "_cuda\\.c$")
  set(_srcs ${_c})
  if(ZOE_HAVE_CUDA)
    file(GLOB _cu CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cu" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.c"
                                    "${CMAKE_CURRENT_SOURCE_DIR}/*_cuda.c")
    list(APPEND _srcs ${_cu})
  endif()
  add_library(${name} STATIC ${_srcs})
  target_include_directories(${name} PUBLIC "${PROJECT_SOURCE_DIR}/include" PRIVATE "${PROJECT_SOURCE_DIR}")
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C>:${ZOE_C_WARNINGS}>)
  target_link_libraries(${name} PUBLIC ${L_DEPS})
  if(ZOE_HAVE_CUDA)
    target_compile_definitions(${name} PUBLIC ZOE_HAVE_CUDA=1)
    target_link_libraries(${name} PUBLIC ${L_CUDA_DEPS})
    set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
  endif()
endfunction()

# zoe_add_program(NAME SOURCES ... LIBS ...)
function(zoe_add_program name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${P_SOURCES})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C>:${ZOE_C_WARNINGS}>)
  target_include_directories(${name} PRIVATE "${PROJECT_SOURCE_DIR}")
  target_link_libraries(${name} PRIVATE ${P_LIBS})
endfunction()

# zoe_add_test(NAME SOURCES ... LIBS ... LABELS ... [RANKS 1 2 4] [ARGS ...] [GPU] [TIMEOUT s])
# zoe_add_test(NAME BINARY TARGET LABELS ... [RANKS ...] [ARGS ...]): another test of TARGET's
# binary (other arguments), built once.
# One binary; with RANKS it runs under mpiexec once per rank count (NAME_npN).
# GPU tests exit 77 without a GPU, which ctest reports as skipped.
function(zoe_add_test name)
  cmake_parse_arguments(T "GPU" "TIMEOUT;BINARY" "SOURCES;LIBS;LABELS;RANKS;ARGS" ${ARGN})
  if(T_BINARY)
    set(_target ${T_BINARY})
  else()
    set(_target ${name})
    zoe_add_program(${name} SOURCES ${T_SOURCES} LIBS ${T_LIBS} zoe_testing)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT ${ZOE_TEST_TIMEOUT})
  endif()
  set(_labels ${T_LABELS})
  if(T_GPU)
    list(APPEND _labels gpu)
  endif()
  set(_env ${ZOE_TEST_ENV})
  if(T_RANKS)
    list(APPEND _labels mpi)
    foreach(np ${T_RANKS})
      add_test(NAME ${name}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                       ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${_target}> ${T_ARGS})
      set_tests_properties(${name}_np${np} PROPERTIES LABELS "${_labels}" TIMEOUT ${T_TIMEOUT}
                           SKIP_RETURN_CODE 77 ENVIRONMENT "${_env}")
    endforeach()
  else()
    add_test(NAME ${name} COMMAND $<TARGET_FILE:${_target}> ${T_ARGS})
    set_tests_properties(${name} PROPERTIES LABELS "${_labels}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_env}")
  endif()
endfunction()
