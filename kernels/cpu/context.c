/* The CPU context: thread count, ISA, and the workspace planned once from zoe_kernel_plan so
 * that no op allocates. Also the tile conversions and the BLAS threading switch every op
 * family shares.
 *
 * Explained in docs/architecture.md, "Layers of the code". */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include "kernels/cpu/cpu_util.h"
#include "runtime/error.h"

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}
static size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

/* The workspace of a plan: floats per thread slice and bytes shared. */
static void workspace_of(const zoe_kernel_plan *plan, size_t *thread_floats, size_t *shared) {
    size_t floats = zoe_cpu_matmul_thread_floats(plan);
    floats = max_size(floats, zoe_cpu_layernorm_thread_floats(plan));
    floats = max_size(floats, zoe_cpu_attention_thread_floats(plan));
    floats = max_size(floats, zoe_cpu_embedding_thread_floats(plan));
    *thread_floats = round_up(floats, 16); /* each slice starts on a 64-byte line */
    *shared = round_up(
        max_size(zoe_cpu_layernorm_shared_bytes(plan), zoe_cpu_embedding_shared_bytes(plan)), 64);
}

size_t zoe_cpu_workspace_bytes(const zoe_kernel_plan *plan, int threads) {
    size_t thread_floats, shared;
    workspace_of(plan, &thread_floats, &shared);
    return thread_floats * sizeof(float) * (size_t)threads + shared;
}

zoe_status zoe_cpu_kernels_create(const zoe_kernel_plan *plan, zoe_cpu_kernels **out) {
    *out = NULL;
    zoe_cpu_kernels *ck = calloc(1, sizeof *ck);
    if (!ck) return zoe_fail(ZOE_ERR_OUT_OF_MEMORY, "zoe_kernels: context allocation failed");
    ck->plan = *plan;
    ck->threads = omp_get_max_threads();
    ck->isa = zoe_cpu_isa_best();
    workspace_of(plan, &ck->thread_floats, &ck->shared_bytes);
    size_t scratch_bytes = ck->thread_floats * sizeof(float) * (size_t)ck->threads;
    ck->thread_scratch = aligned_alloc(64, scratch_bytes ? scratch_bytes : 64);
    ck->shared = aligned_alloc(64, ck->shared_bytes ? ck->shared_bytes : 64);
    if (!ck->thread_scratch || !ck->shared) {
        const size_t shared_bytes = ck->shared_bytes;
        zoe_cpu_kernels_destroy(ck);
        return zoe_fail(ZOE_ERR_OUT_OF_MEMORY,
                        "zoe_kernels: workspace of %zu + %zu bytes could not be allocated",
                        scratch_bytes, shared_bytes);
    }
    *out = ck;
    return ZOE_OK;
}

void zoe_cpu_kernels_destroy(zoe_cpu_kernels *ck) {
    if (!ck) return;
    free(ck->thread_scratch);
    free(ck->shared);
    free(ck);
}

int zoe_cpu_blas_serial_begin(void) {
    int saved = openblas_get_num_threads();
    if (saved != 1) openblas_set_num_threads(1);
    return saved;
}

void zoe_cpu_blas_serial_end(int saved_threads) {
    if (saved_threads != 1) openblas_set_num_threads(saved_threads);
}

ZOE_CPU_INLINE void accumulate_row_body(zoe_cpu_isa isa, float *acc, const float *x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}
ZOE_CPU_MULTIVERSION(accumulate_row, (zoe_cpu_isa isa, float *acc, const float *x, int64_t n),
                     (isa, acc, x, n))

void zoe_cpu_accumulate(zoe_cpu_isa isa, float *acc, const float *x, int64_t n) {
    accumulate_row(isa, acc, x, n);
}

void zoe_cpu_add_into(const zoe_cpu_kernels *ck, zoe_dtype dt, void *dst, int64_t off,
                      const float *x, int64_t n, float *buf) {
    float *d = zoe_cpu_inout(dst, dt, off, n, buf);
    accumulate_row(ck->isa, d, x, n);
    zoe_cpu_store(dst, dt, off, d, n);
}

void zoe_cpu_load_tile(float *tile, const void *src, zoe_dtype dt, int64_t ld, int64_t r0,
                       int64_t c0, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = (r0 + r) * ld + c0;
        if (dt == ZOE_F32)
            memcpy(tile + r * cols, (const float *)src + off, (size_t)cols * sizeof(float));
        else
            zoe_convert_bf16_to_f32(tile + r * cols, (const zoe_bf16 *)src + off, (size_t)cols);
    }
}

void zoe_cpu_store_tile(const zoe_cpu_kernels *ck, void *dst, zoe_dtype dt, int64_t ld, int64_t r0,
                        int64_t c0, const float *tile, int64_t rows, int64_t cols, int accumulate) {
    float buf[ZOE_CPU_CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        const float *t = tile + r * cols;
        for (int64_t c = 0; c < cols; c += ZOE_CPU_CHUNK) {
            const int64_t n = zoe_cpu_min64(cols - c, ZOE_CPU_CHUNK);
            const int64_t off = (r0 + r) * ld + c0 + c;
            if (accumulate)
                zoe_cpu_add_into(ck, dt, dst, off, t + c, n, buf);
            else
                zoe_cpu_store(dst, dt, off, t + c, n);
        }
    }
}
