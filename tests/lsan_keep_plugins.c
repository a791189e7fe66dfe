/* Preloaded into every test of an AddressSanitizer build (LD_PRELOAD, cmake/ZoeTargets.cmake):
 * dlclose does nothing, so the Open MPI and PMIx plugins that MPI_Finalize unloads stay mapped
 * until the process exits. LeakSanitizer names the module of each frame of a leaked block only
 * while that module is mapped; with the plugins kept, the one frame that the fast (frame-pointer)
 * unwinder finds in them is enough for tests/lsan.supp to recognise their allocations, and every
 * malloc need not be unwound slowly through code built without frame pointers (that unwinding
 * was 85% of the ASan suite's CPU time). Open MPI 4.1 has no setting for this
 * (mca_base_component_disable_dlclose came with Open MPI 5). Built without the sanitizers: bash
 * and mpiexec load it too. zoe itself never calls dlclose. */
#include <stddef.h>

int dlclose(void *handle);

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
