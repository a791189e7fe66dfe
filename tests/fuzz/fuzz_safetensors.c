/* libFuzzer target of the safetensors header parser: any bytes, taken as a whole file, must be
 * parsed or refused with a message, never read out of bounds or leak. Built with clang only
 * (tests/fuzz/CMakeLists.txt): build-clang/tests/fuzz/fuzz_safetensors -max_total_time=60 */
#include <stddef.h>
#include <stdint.h>
#include "engine/formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    zoe_safetensors st;
    if (zoe_safetensors_parse(data, size, size, "fuzz", &st) == ZOE_OK) {
        /* A parsed table must be self-consistent: tensors tile the data section. */
        uint64_t at = 0;
        for (int i = 0; i < st.count; i++) {
            if (st.tensors[i].begin != at) __builtin_trap();
            at = st.tensors[i].end;
        }
        if (at != st.data_size || st.data_offset + st.data_size != size) __builtin_trap();
        zoe_safetensors_free(&st);
    }
    return 0;
}
