/* The arithmetic that cuts a collective too large for one MPI call (runtime/mpi_chunk.h), at
 * sizes of 2^31 elements and more without allocating them: the trainer's logits all-gather
 * (rows of `local` vocabulary entries per token, over the TP group) and runtime/comm.c's
 * chunked reduce-scatter and all-gather (rows of one element, over the group). For each shape
 * the calls are walked as the callers walk them, and every call's count must be exact in int,
 * its total over the ranks at most INT_MAX (Open MPI adds up the blocks in int), its packing
 * within ZOE_MPI_PACK_BYTES, and the calls must cover every row once. The shapes include ones
 * where the former single call's (int) count went negative (2^31 to 2^32) and where it wrapped to
 * a wrong positive count (2^32 to 2^32 + 2^31), which the test confirms. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include "runtime/mpi_chunk.h"
#include "testing.h"

typedef struct shape {
    const char *what;
    size_t rows, row_count, ranks, esz;
    size_t max_count; /* INT_MAX, or a test limit as zoe_comm_set_max_count sets */
} shape;

static void walk(const shape *s) {
    const size_t per =
        zoe_mpi_chunk_rows(s->row_count, s->ranks, s->esz, s->max_count, ZOE_MPI_PACK_BYTES);
    size_t covered = 0, calls = 0, worst_total = 0;
    int ok = 1;
    for (size_t lo = 0; lo < s->rows; lo += per, calls++) {
        const size_t len = per < s->rows - lo ? per : s->rows - lo;
        const size_t count = len * s->row_count, total = count * s->ranks;
        const int as_int = (int)count;
        const int exact = count <= (size_t)INT_MAX && (size_t)as_int == count;
        const int within = total <= s->max_count;
        /* one row is the least a call moves, even where it alone passes the buffer's bound */
        const int packed = len == 1 || total * s->esz <= ZOE_MPI_PACK_BYTES;
        CHECK(exact, "%s: call %zu count %zu is not an int", s->what, calls, count);
        CHECK(within, "%s: call %zu moves %zu elements > %zu", s->what, calls, total, s->max_count);
        CHECK(packed, "%s: call %zu packs %zu bytes", s->what, calls, total * s->esz);
        ok = exact && within && packed;
        if (total > worst_total) worst_total = total;
        covered += len;
        if (!ok) break;
    }
    CHECK(covered == s->rows, "%s: the calls cover %zu of %zu rows", s->what, covered, s->rows);
    const size_t expected_calls = (s->rows + per - 1) / per;
    CHECK(calls == expected_calls, "%s: %zu calls, expected %zu", s->what, calls, expected_calls);
    printf("%-44s %13zu elements per rank: %7zu calls of up to %zu rows (%zu elements in all)\n",
           s->what, s->rows * s->row_count, calls, per, worst_total);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    /* tokens x the rank's vocabulary entries: micro-batch x seq rows */
    const shape shapes[] = {
        {"logits 4 x 8192, vocab 128256, TP=1", 4 * 8192, 128256, 1, 4, INT_MAX},
        {"logits 8 x 8192, vocab 128256 / 2, TP=2", 8 * 8192, 64128, 2, 4, INT_MAX},
        {"logits 16 x 4096, vocab 50304 / 4, TP=4", 16 * 4096, 12576, 4, 4, INT_MAX},
        {"logits 1 x 2048, vocab 50304, TP=1 (small)", 2048, 50304, 1, 4, INT_MAX},
        {"all-gather of 3e9 bf16 over 8 ranks", 3000000000u, 1, 8, 2, INT_MAX},
        {"reduce-scatter of 5e9 fp32 per rank, 2", 5000000000u, 1, 2, 4, INT_MAX},
        {"all-gather of 1e3 fp32, limit 5 x 4 + 1", 1000, 1, 4, 4, 21},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) walk(&shapes[i]);
    /* The single call these shapes replaced: its count in int is wrong from 2^31 on. */
    const size_t negative = (size_t)4 * 8192 * 128256, wrapped = (size_t)16 * 8192 * 33000;
    CHECK(negative > (size_t)INT_MAX && (int)(int64_t)negative < 0 && wrapped > ((size_t)1 << 32) &&
              wrapped < ((size_t)3 << 31) && (int)(int64_t)wrapped > 0 &&
              (size_t)(int)(int64_t)wrapped != wrapped,
          "the former count: %zu -> %d, %zu -> %d", negative, (int)(int64_t)negative, wrapped,
          (int)(int64_t)wrapped);
    const shape wrap = {
        "logits 16 x 8192, vocab 33000, TP=1 (wraps)", 16 * 8192, 33000, 1, 4, INT_MAX};
    walk(&wrap);
    return test_finish("test_mpi_chunk");
}
