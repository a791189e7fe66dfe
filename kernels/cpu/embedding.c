/* Token + position embedding on the CPU. Backward is deterministic without atomics: the
 * positions of each in-range vocabulary row are chained in position order (one serial pass
 * over the tokens), then OpenMP runs over the distinct rows, each summed in fp32 in that order
 * and added to dwte once; dwpe runs over positions, summing the batch in order.
 *
 * Explained in docs/tensor_parallel.md, "Layers". */
#include <omp.h>
#include "kernels/cpu/cpu_util.h"

/* Per thread: an fp32 accumulator row and a conversion row. */
size_t zoe_cpu_embedding_thread_floats(const zoe_kernel_plan *plan) {
    return 2 * (size_t)plan->max_dim;
}
/* first[vocab row], next[position] and the list of distinct rows. */
size_t zoe_cpu_embedding_shared_bytes(const zoe_kernel_plan *plan) {
    return ((size_t)plan->max_dim + 2 * (size_t)plan->max_rows) * sizeof(int32_t);
}

zoe_status zoe_cpu_embedding_forward(zoe_cpu_kernels *ck, zoe_dtype dt, void *y,
                                     const int32_t *tokens, const void *wte, const void *wpe,
                                     int64_t B, int64_t T, int64_t C, int64_t vocab_start,
                                     int64_t vocab_rows) {
#pragma omp parallel num_threads(ck->threads)
    {
        float *ybuf = zoe_cpu_thread_scratch(ck, omp_get_thread_num()), *buf = ybuf + C;
#pragma omp for schedule(static)
        for (int64_t bt = 0; bt < B * T; bt++) {
            const int64_t v = (int64_t)tokens[bt] - vocab_start;
            float *yr = zoe_cpu_out(y, dt, bt * C, ybuf);
            if (v >= 0 && v < vocab_rows)
                memcpy(yr, zoe_cpu_load(wte, dt, v * C, C, buf), (size_t)C * sizeof(float));
            else
                memset(yr, 0, (size_t)C * sizeof(float));
            if (wpe)
                zoe_cpu_accumulate(ck->isa, yr, zoe_cpu_load(wpe, dt, (bt % T) * C, C, buf), C);
            zoe_cpu_store(y, dt, bt * C, yr, C);
        }
    }
    return ZOE_OK;
}

zoe_status zoe_cpu_embedding_backward(zoe_cpu_kernels *ck, zoe_dtype dt, void *dwte, void *dwpe,
                                      const void *dy, const int32_t *tokens, int64_t B, int64_t T,
                                      int64_t C, int64_t vocab_start, int64_t vocab_rows) {
    const int64_t n = B * T;
    if (dwte) {
        int32_t *first = ck->shared, *next = first + vocab_rows, *rows = next + n;
        for (int64_t v = 0; v < vocab_rows; v++) first[v] = -1;
        int64_t distinct = 0;
        for (int64_t p = n - 1; p >= 0; p--) { /* backwards, so each chain is in order */
            const int64_t v = (int64_t)tokens[p] - vocab_start;
            if (v < 0 || v >= vocab_rows) continue;
            if (first[v] < 0) rows[distinct++] = (int32_t)v;
            next[p] = first[v];
            first[v] = (int32_t)p;
        }
#pragma omp parallel num_threads(ck->threads)
        {
            float *acc = zoe_cpu_thread_scratch(ck, omp_get_thread_num()), *buf = acc + C;
#pragma omp for schedule(dynamic, 4)
            for (int64_t i = 0; i < distinct; i++) {
                memset(acc, 0, (size_t)C * sizeof(float));
                for (int64_t p = first[rows[i]]; p >= 0; p = next[p])
                    zoe_cpu_accumulate(ck->isa, acc, zoe_cpu_load(dy, dt, p * C, C, buf), C);
                zoe_cpu_add_into(ck, dt, dwte, rows[i] * C, acc, C, buf);
            }
        }
    }
    if (dwpe) {
#pragma omp parallel num_threads(ck->threads)
        {
            float *acc = zoe_cpu_thread_scratch(ck, omp_get_thread_num()), *buf = acc + C;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < T; t++) {
                memset(acc, 0, (size_t)C * sizeof(float));
                for (int64_t b = 0; b < B; b++)
                    zoe_cpu_accumulate(ck->isa, acc, zoe_cpu_load(dy, dt, (b * T + t) * C, C, buf),
                                       C);
                zoe_cpu_add_into(ck, dt, dwpe, t * C, acc, C, buf);
            }
        }
    }
    return ZOE_OK;
}
