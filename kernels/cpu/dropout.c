/* Dropout on the CPU: chunks of ZOE_CPU_CHUNK elements (a multiple of 4, so each chunk starts
 * on a Philox block) on OpenMP threads; the mask of kernels/philox.h.
 *
 * Explained in docs/tensor_parallel.md, "TP-invariant randomness". */
#include <math.h>
#include <omp.h>
#include "kernels/cpu/cpu_util.h"
#include "kernels/philox.h"
#include "runtime/error.h"

_Static_assert(ZOE_CPU_CHUNK % 4 == 0, "dropout chunks start on a Philox block");

zoe_status zoe_cpu_dropout(zoe_cpu_kernels *ck, zoe_dtype dt, void *y, const void *x, int64_t n,
                           float p, uint64_t seed, uint64_t stream) {
    const uint32_t threshold = (uint32_t)lrint((double)p * 16777216.0);
    const float keep_scale = 1.0f / (1.0f - p);
    const int64_t chunks = zoe_cpu_chunk_count(n);
#pragma omp parallel for num_threads(ck->threads) schedule(static) if (chunks >= 16)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t off = c * ZOE_CPU_CHUNK, len = zoe_cpu_chunk_len(n, c);
        float xbuf[ZOE_CPU_CHUNK], ybuf[ZOE_CPU_CHUNK];
        const float *xv = zoe_cpu_load(x, dt, off, len, xbuf);
        float *yv = zoe_cpu_out(y, dt, off, ybuf);
        for (int64_t i = 0; i < len; i += 4) {
            uint32_t words[4];
            zoe_philox_block_inline(seed, stream, (uint64_t)(off + i) / 4, words);
            for (int64_t j = 0; j < 4 && i + j < len; j++)
                yv[i + j] = zoe_dropout_keeps(words[j], threshold) ? xv[i + j] * keep_scale : 0.0f;
        }
        zoe_cpu_store(y, dt, off, yv, len);
    }
    return ZOE_OK;
}
